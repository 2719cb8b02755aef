"""A search's settings: their fingerprint, the resume-or-refuse check, and `--overwrite`.

A job dir holds one search: the settings it was started with are its journal's first event
(`search_started`), and a command with other settings is refused, naming what differs, unless
`--overwrite` deletes the old search first (KerasTuner's `overwrite=True`). Settings that may
change on resume (`mutable_keys`) do not count.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from nascli import storage
from nascli.errors import InputError
from nascli.errors import OutputError
from nascli.search import journal_backends
from nascli.search.job_state import JobState
from nascli.search.job_state import replay

if TYPE_CHECKING:
  from nascli.search.journal_file import Journal
  from nascli.search.journal_gcs import GcsJournal

# Files and folders in JOB_DIR that the search derives from the journal; `--overwrite` removes
# them together with the journal and the trial folders (named by integer trial ids).
DERIVED_OUTPUTS = ('trials.json', 'trials.csv', 'search_progress.png', 'hparams', 'pareto.json',
                   'pareto_front.png')


def _canonical(value: Any) -> Any:
  """`value` as it reads back from JSON (tuples become lists), so comparisons survive a resume."""
  return json.loads(json.dumps(value, sort_keys=True))


def _without(settings: Mapping[str, Any], ignore: Iterable[str]) -> dict[str, Any]:
  out = copy.deepcopy(_canonical(dict(settings)))
  for dotted in ignore:
    *parents, leaf = dotted.split('.')
    node = out
    for key in parents:
      node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
      node.pop(leaf, None)
  return out


def fingerprint(settings: Mapping[str, Any], ignore: Iterable[str] = ()) -> str:
  """sha256 of the canonical JSON of `settings` minus the dotted keys in `ignore`."""
  text = json.dumps(_without(settings, ignore), sort_keys=True, separators=(',', ':'))
  return hashlib.sha256(text.encode('utf-8')).hexdigest()


def _flatten(value: Any, prefix: str = '') -> dict[str, Any]:
  if isinstance(value, dict) and value:
    out = {}
    for key, item in value.items():
      out.update(_flatten(item, f'{prefix}.{key}' if prefix else str(key)))
    return out
  return {prefix: value}


_UNSET = object()


def _show(value: Any) -> str:
  return '(unset)' if value is _UNSET else repr(value)


def settings_diff(old: Mapping[str, Any], new: Mapping[str, Any],
                  ignore: Iterable[str] = ()) -> list[str]:
  """Differences as `key old -> new` strings, sorted by key (`(unset)` for a missing key)."""
  a = _flatten(_without(old, ignore))
  b = _flatten(_without(new, ignore))
  out = []
  for key in sorted(set(a) | set(b)):
    x, y = a.get(key, _UNSET), b.get(key, _UNSET)
    if x != y or type(x) is not type(y):
      out.append(f'{key} {_show(x)} -> {_show(y)}')
  return out


def _search_outputs(job_dir: str) -> list[str]:
  """Names in `job_dir` that a search writes: derived files and integer-named trial folders."""
  names = set(storage.list_names(job_dir, recursive=False))
  found = [n for n in DERIVED_OUTPUTS if n in names or f'{n}/' in names]
  trials = sorted((n[:-1] for n in names if n.endswith('/') and n[:-1].isdigit()), key=int)
  return found + [f'{n}/' for n in trials]


def _remove_search_outputs(job_dir: str) -> None:
  for name in _search_outputs(job_dir):
    path = storage.join(job_dir, name.rstrip('/'))
    if storage.is_file(path) or os.path.islink(path):
      storage.delete(path)
    else:
      storage.remove_tree(path)


def _same_dir(a: str, b: str) -> bool:
  if storage.is_gcs(a) or storage.is_gcs(b):
    return a.rstrip('/') == b.rstrip('/')
  return os.path.abspath(a) == os.path.abspath(b)


def check_settings(job_dir: str | os.PathLike[str], settings: Mapping[str, Any],
                   overwrite: bool, *, journal: 'Journal | GcsJournal | None' = None,
                   mutable_keys: Iterable[str] = ()) -> JobState:
  """Starts a new search in `job_dir` or agrees to resume the one there; returns its state.

  - No journal (or an empty one): journals `search_started` with `settings`.
  - A journal started with the same settings: resumes (nothing is written).
  - A journal started with other settings: refused with the differing keys.

  With `overwrite`, any old search is DELETED and a new one starts, even one with the same
  settings (KerasTuner's `overwrite=True`): journal.jsonl, every integer-named trial folder
  ("1/", "2/", ...), trials.json, trials.csv, search_progress.png, hparams/, pareto.json and
  pareto_front.png. Other files in `job_dir` are left alone. A gs:// job dir works the same,
  on objects (see GcsJournal).
  nascli never deletes anything without --overwrite: a job dir that holds search outputs but
  no journal is refused too.

  Args:
    job_dir: The search's --local_output_dir.
    settings: JSON-serializable settings that define the search (space, algorithm, seed,
      reward, data, ...). They are compared on resume after a JSON round trip.
    overwrite: --overwrite was given.
    journal: The job's journal if the caller already holds it open for writing; otherwise
      this function holds the lock for its own duration.
    mutable_keys: Dotted keys of `settings` that may change on resume (e.g. "max_trials");
      they do not count in the fingerprint or the comparison.

  Raises:
    OutputError: the settings differ, or outputs without a journal, or the job is locked.
    InputError: the journal is damaged.
  """
  job_dir = os.fspath(job_dir)
  mutable_keys = tuple(mutable_keys)
  settings = _canonical(dict(settings))
  if journal is None or not journal.writing:
    journal = journal or journal_backends.journal_for(job_dir)
    with journal.open_for_writing():
      return check_settings(job_dir, settings, overwrite, journal=journal,
                            mutable_keys=mutable_keys)
  if not _same_dir(journal.job_dir, job_dir):
    raise ValueError(f'journal {journal.path} is not in {job_dir}')

  if overwrite:
    journal.delete()
    _remove_search_outputs(job_dir)
    events = []
  else:
    events = journal.events()
  if not events:
    outputs = _search_outputs(job_dir)
    if outputs:
      shown = ', '.join(outputs[:4]) + (', ...' if len(outputs) > 4 else '')
      raise OutputError(
          f'{job_dir} holds search outputs ({shown}) but no {journal.NAME} to resume from; '
          f'pass --overwrite to delete them or use another --local_output_dir')
    return replay([journal.append({'event': 'search_started', 'settings': settings,
                                   'fingerprint': fingerprint(settings, mutable_keys)})])

  first = events[0]
  if first['event'] != 'search_started' or not isinstance(first.get('settings'), dict):
    raise InputError(f'{journal.where(1)} is not a search_started event with settings; '
                     f'pass --overwrite to start over')
  # Compare against the stored settings, not the stored fingerprint, so that a change in
  # `mutable_keys` between versions does not refuse a resume that is really the same search.
  old = first['settings']
  if fingerprint(old, mutable_keys) != fingerprint(settings, mutable_keys):
    diff = settings_diff(old, settings, mutable_keys) or ['fingerprint']
    shown = '; '.join(diff[:3]) + (f'; and {len(diff) - 3} more' if len(diff) > 3 else '')
    raise OutputError(
        f'{job_dir} was started with other settings (differs in: {shown}); pass '
        f'--overwrite or use another --local_output_dir')
  return replay(events)
