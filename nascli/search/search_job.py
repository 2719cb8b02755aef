"""The one check that a path is a nascli search job dir, so that every command that reads one
(list_trials, report, run_latency_calculator_local, search_resume, --warm_start_from) says the
same mistake in the same words: `JOB does not exist`, `JOB is a file, not a nascli search job`,
`JOB is a converted data set (dataset_info.json), not a nascli search job`, `JOB is not a nascli
search job (no journal.jsonl)`.

A gs:// prefix exists only through its objects: one with none "does not exist" (as `report`
has always said), except to a latency calculator, which may start before its search.
"""

from __future__ import annotations

import os

from nascli import storage
from nascli.errors import NascliError

# Folders nascli writes that are not search jobs, by the file that tells them apart.
OTHER_KINDS = (("dataset_info.json", "a converted data set"),
               ("search_controller_state.json", "a search_proxy_task job"),
               ("params.yaml", "a train or eval model dir"))


def _named(job_dir: str, what: str | None) -> str:
  return f"{what} {job_dir}" if what else job_dir


def check_exists(job_dir: str, what: str | None = None, hint: str | None = None) -> None:
  """Refuses a `job_dir` that does not exist (a gs:// prefix: no object under it); `what` names
  the flag, if any, and `hint` what to do about it; a URL of another scheme, in the words of
  journal.scheme."""
  from nascli.search import journal as journal_lib  # pylint: disable=g-import-not-at-top
  journal_lib.scheme(job_dir)
  if not storage.exists(job_dir):
    raise NascliError(f"{_named(job_dir, what)} does not exist" + (f"; {hint}" if hint else ""))


def check_kind(job_dir: str, what: str | None = None) -> None:
  """Refuses an existing path that is a file or another kind of nascli folder."""
  name = _named(job_dir, what)
  if not storage.is_gcs(job_dir) and not os.path.isdir(job_dir):
    raise NascliError(f"{name} is a file, not a nascli search job")
  for marker, kind in OTHER_KINDS:
    if storage.exists(storage.join(job_dir, marker)):
      raise NascliError(f"{name} is {kind} ({marker}), not a nascli search job")


def check(job_dir: str, what: str | None = None, started: bool = True,
          hint: str | None = None):
  """The journal of the search job at `job_dir`, or the one-line refusal of what it is instead.

  `started=False` (a latency calculator started before its search) accepts a folder with no
  journal yet that is no other kind of nascli folder. `hint`: what to do about a missing one.

  Raises:
    NascliError: as the module says.
  """
  from nascli.search import journal as journal_lib  # pylint: disable=g-import-not-at-top
  if started or not storage.is_gcs(job_dir):
    check_exists(job_dir, what, hint)
  journal = journal_lib.journal_for(job_dir)
  if journal.exists():
    return journal
  check_kind(job_dir, what)
  if started:
    raise NascliError(f"{_named(job_dir, what)} is not a nascli search job (no {journal.NAME})")
  return journal
