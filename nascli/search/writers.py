"""What a search writes besides its journal, as writers the loop calls after each event.

A writer registers with `@register(name)` (Model Garden's way); the loop's `Outputs` derives
the trials' rows once per event and hands the same `Snapshot` to each writer. The fast ones
(trials.json/csv) write at once; the slow ones (plots and HParams, which import matplotlib and
TensorBoard, and the report page with its fANOVA) run on one background thread that always
writes the latest snapshot, so the next trial never waits for them (they held it 8 s after the
first trial), and `flush()` waits for them at the search's end or interrupt. Ray Tune's logger
callbacks play the same part. Every file appears whole (nascli.storage writes aside and
renames, or one gs:// upload): a kill never leaves a half-written page that looks complete,
only the previous one, which the next event (or `nascli report`) replaces.

The search's own writers register in result_files.py and hparams.py, which the loop imports;
the report page's in nascli/report (which reads results, never the reverse): the commands that
run a search import nascli.report, and with it its writer.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
import shutil
import threading
from typing import Any, Callable, Mapping, Sequence

from nascli import storage
from nascli.search import results
from nascli.search.journal import JobState

logger = logging.getLogger(__name__)

TMP_SUFFIX = '.tmp'


@dataclasses.dataclass(frozen=True)
class Snapshot:
  """One event's view of the job, the same for every writer."""
  job_dir: str
  state: JobState
  rows: list[dict[str, Any]]
  # {decision: every candidate} (hparams.decision_domains), so HParams domains hide no trial.
  decision_domains: Mapping[str, Sequence[str]]


class Writer:
  """Writes some outputs of a job from a snapshot; one instance per search, so it may keep
  what it already wrote (HParams runs) or read (the report's finished curves)."""

  slow = False  # True: written off the loop's critical path (a background thread)

  def write(self, snapshot: Snapshot) -> None:
    raise NotImplementedError


_REGISTRY: dict[str, Callable[[], Writer]] = {}


def register(name: str) -> Callable[[Callable[[], Writer]], Callable[[], Writer]]:
  """Registers a writer class (or factory) under `name`; writers run in registration order."""
  def decorate(factory: Callable[[], Writer]) -> Callable[[], Writer]:
    if name in _REGISTRY:
      raise KeyError(f'search writer {name!r} is registered twice')
    _REGISTRY[name] = factory
    return factory
  return decorate


def registered() -> list[str]:
  return list(_REGISTRY)


class Outputs:
  """The writers of one search, called after each event (`update`)."""

  def __init__(self, job_dir: str, decision_domains: Mapping[str, Sequence[str]]):
    self.job_dir = results.plain_job_dir(job_dir)
    self.decision_domains = decision_domains
    writers = [factory() for factory in _REGISTRY.values()]
    self.fast = [w for w in writers if not w.slow]
    self.slow = [w for w in writers if w.slow]
    self._cond = threading.Condition()
    self._pending: Snapshot | None = None  # the latest snapshot the slow writers have not had
    self._busy = False
    self._thread: threading.Thread | None = None

  def update(self, state: JobState) -> list[dict[str, Any]]:
    """Writes every output of `state`: the fast writers now, the slow ones soon; returns the
    rows."""
    rows = results.trial_rows(self.job_dir, state)
    snapshot = Snapshot(self.job_dir, state, rows, self.decision_domains)
    for writer in self.fast:
      writer.write(snapshot)
    if self.slow:
      # The loop goes on changing `state`: the slow writers get a copy of this moment's.
      own = dataclasses.replace(snapshot, state=copy.deepcopy(state))
      with self._cond:
        self._pending = own
        if self._thread is None:
          self._thread = threading.Thread(target=self._write_slow, name='nascli-writers',
                                          daemon=True)
          self._thread.start()
        self._cond.notify_all()
    return rows

  def _write_slow(self) -> None:
    while True:
      with self._cond:
        while self._pending is None:
          self._cond.wait()
        snapshot, self._pending, self._busy = self._pending, None, True
      try:
        for writer in self.slow:
          try:
            writer.write(snapshot)
          except Exception as e:  # pylint: disable=broad-except
            # A view of the search: it must never stop one (the next event writes it again).
            logger.warning('could not write %s: %s', type(writer).__name__,
                           ' '.join(str(e).split()))
      finally:
        with self._cond:
          self._busy = False
          self._cond.notify_all()

  def flush(self) -> None:
    """Waits until the slow writers have written the latest snapshot."""
    with self._cond:
      while self._pending is not None or self._busy:
        self._cond.wait()


def atomic_write(path: str, data: bytes, content_type: str) -> None:
  """Readers see the old file or object or the new one (nascli.storage owns atomic writes)."""
  storage.write_bytes(path, data, content_type=content_type)


def remove_leftovers(directory: str, *names: str) -> None:
  """Temporary files and folders of a writer killed mid-write (of `names` only, if given).

  Only local folders have them: a gs:// object appears only when its upload is complete.
  """
  if storage.is_gcs(directory):
    return
  prefixes = tuple(f'.{n}.' for n in names) or ('.',)
  with contextlib.suppress(FileNotFoundError):
    for name in os.listdir(directory):
      if name.startswith(prefixes) and name.endswith(TMP_SUFFIX):
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
          shutil.rmtree(path, ignore_errors=True)
        else:
          with contextlib.suppress(OSError):
            os.remove(path)
