"""`JOB_DIR/report.html`: what a search job (or a proxy-task job) did, as one offline page.

A job kind is registered with `@page_kind(name)` (page_kinds.py) and a test of the job dir; `write(job_dir)`
writes the page of the first kind that recognizes it. A search refreshes its page after
every event (`ReportWriter`, one of its writers: nascli/search/writers.py, off the loop's
critical path), the proxy-task commands when they write their results. The file appears whole (nascli.storage writes aside and renames, or one
gs:// upload), so a browser never loads half a page.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

from nascli import storage
from nascli.errors import NascliError
from nascli.report.page_kinds import KINDS as _KINDS
from nascli.search import writers

logger = logging.getLogger(__name__)

REPORT_FILE = 'report.html'


def path_of(job_dir: str) -> str:
  return storage.join(job_dir, REPORT_FILE)


def _save(job_dir: str, page: Any) -> str:
  path = path_of(job_dir)
  storage.write_bytes(path, page.render().encode('utf-8'), content_type='text/html; charset=utf-8')
  return path


def write(job_dir: str) -> tuple[str, str]:
  """(the kind of job, the page's path) after writing the page of the job at `job_dir`.

  Raises:
    NascliError: `job_dir` is missing or no kind of job nascli writes.
  """
  from nascli.report import kinds  # pylint: disable=g-import-not-at-top,unused-import
  from nascli.search import search_job  # pylint: disable=g-import-not-at-top
  search_job.check_exists(job_dir)  # the words of every command
  for kind in _KINDS:
    if kind.recognizes(job_dir):
      return kind.name, _save(job_dir, kind.build(job_dir))
  raise NascliError(f'{job_dir} is not a search or search_proxy_task job (no journal.jsonl, no'
                    ' search_controller_state.json)')


def refresh(job_dir: str) -> str | None:
  """`write`, for the commands whose results the page shows: a failure is a warning."""
  try:
    return write(job_dir)[1]
  except Exception as e:  # pylint: disable=broad-except
    logger.warning('could not refresh %s: %s', path_of(job_dir), ' '.join(str(e).split()))
    return None


def write_search(job_dir: str, state: Any, rows: Sequence[Mapping[str, Any]],
                 cache: dict[str, Any] | None = None) -> str | None:
  """Refreshes a running search's page from the state it holds; a failure is a warning (the
  page is a view: it must never stop a search), and returns None."""
  # pylint: disable=g-import-not-at-top
  from nascli.report import kinds
  from nascli.report import search_page
  try:
    if kinds.is_variance(job_dir):  # a measure_proxy_task_variance job extended
      return _save(job_dir, kinds.variance_job_page(job_dir, state, rows, cache))
    page = search_page.build(job_dir, state, rows, cache)
    kinds.add_job_extras(page, job_dir)
    return _save(job_dir, page)
  except Exception as e:  # pylint: disable=broad-except
    logger.warning('could not refresh %s: %s', path_of(job_dir), ' '.join(str(e).split()))
    return None


@writers.register('report')
class ReportWriter(writers.Writer):
  """report.html of a running search, rewritten after each event."""

  slow = True  # fANOVA and the curves: never in the way of the next trial

  def __init__(self):
    self.cache: dict[str, Any] = {}  # the curves of finished trials: one read each

  def write(self, snapshot: writers.Snapshot) -> None:
    write_search(snapshot.job_dir, snapshot.state, snapshot.rows, self.cache)
