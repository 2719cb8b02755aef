"""The journal of a gs:// job dir: one object per event, `JOB/journal/0000000001.json`, ...

Object storage has no append and no lock that dies with its holder, so each event is an object
of its own, created only if absent; see `GcsJournal`. The events and their format are those of
the local journal (journal_file.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from concurrent import futures
from typing import Any, Iterator, Mapping

from nascli import storage
from nascli.errors import InputError
from nascli.errors import OutputError
from nascli.errors import StorageError
from nascli.errors import StorageExistsError
from nascli.errors import StorageNotFoundError
from nascli.search.journal_file import LOCK_NAME
from nascli.search.journal_file import check_event
from nascli.search.journal_file import make_record
from nascli.search.journal_file import writer_lock

ENTRIES_DIR = 'journal'
_ENTRY_RE = re.compile(r'(\d{10})\.json')
_READ_THREADS = 8


def staging_dir(url: str) -> str:
  """The local folder of a gs:// job: its trials run there, its driver lock lives there.

  Fixed per URL (`$NASCLI_CACHE_DIR/search-staging/BUCKET/PREFIX`), so a driver restarted on the
  same machine finds what a killed one left: the checkpoints of interrupted trials.
  """
  g = storage.parse_gcs(url.rstrip('/'))
  return os.path.join(storage.default_cache_root().parent, 'search-staging', g.bucket,
                      *(g.name.strip('/') or '_root').split('/'))


class GcsJournal:
  """The journal of a gs:// job dir: one object per event, `JOB/journal/0000000001.json`, ...

  Same interface and guarantees as `Journal`. An entry is created whole (one upload) and only
  if absent (`storage.create_bytes`: ifGenerationMatch=0), so a killed driver never leaves a torn
  entry and two drivers can never both write entry N.

  What guards concurrent drivers: object storage has no lock that dies with its holder, so
  instead every append is create-only. A driver appends entry N+1 only if it has seen entries
  1..N; if another driver appended since, the object exists, the append fails and this driver
  stops with an OutputError (before publishing trial files, `check_writer` looks for such
  entries). Two drivers on one machine are refused at once, as locally, by a flock in the job's
  staging folder.

  An append cut short after its upload may have landed (a signal's Interrupted as the upload
  returns, a lost response): its entry is then this driver's, not a rival's. The next append
  (or `check_writer`) reads it back first and counts it if it holds the bytes this driver sent,
  so the counter never falls behind the entries.
  """

  NAME = f'{ENTRIES_DIR}/'

  def __init__(self, job_dir: str):
    self.job_dir = job_dir.rstrip('/')
    storage.parse_gcs(self.job_dir)  # a malformed URL fails here, with its name
    self.path = storage.join(self.job_dir, ENTRIES_DIR)
    self.lock_path = os.path.join(staging_dir(self.job_dir), LOCK_NAME)
    self._cache: dict[int, dict[str, Any]] = {}  # entries are immutable once created
    self._writing = False
    self._next_seq = 1
    self._damage: InputError | None = None
    # (record, bytes) of an append whose upload was sent and not yet counted.
    self._unsettled: tuple[dict[str, Any], bytes] | None = None
    self.repaired_bytes = 0  # for Journal's interface: an object is never torn

  @classmethod
  def in_dir(cls, job_dir: str) -> 'GcsJournal':
    return cls(job_dir)

  @property
  def writing(self) -> bool:
    return self._writing

  def entry(self, seq: int) -> str:
    """The URL of event `seq`."""
    return storage.join(self.path, f'{seq:010d}.json')

  def where(self, seq: int) -> str:
    return self.entry(seq)

  @contextlib.contextmanager
  def open_for_writing(self) -> Iterator['GcsJournal']:
    """Learns the next seq (a damaged journal is remembered, as `Journal` does, so that
    `--overwrite` can still delete it) and holds the machine-local writer lock."""
    if self._writing:
      raise RuntimeError(f'{self.path} is already open for writing by this GcsJournal')
    with writer_lock(self.lock_path, self.job_dir):
      self._writing = True
      try:
        self._damage, self._unsettled = None, None
        try:
          events = self.events()
          self._next_seq = len(events) + 1
        except InputError as e:
          self._damage = e
        yield self
      finally:
        self._writing = False

  def append(self, event: Mapping[str, Any]) -> dict[str, Any]:
    """Creates the next entry; returns the event as written (with "seq" and "time").

    Raises:
      OutputError: the entry exists: another driver appended to this job.
    """
    if not self._writing:
      raise RuntimeError('GcsJournal.append needs GcsJournal.open_for_writing()')
    if self._damage is not None:
      raise self._damage
    self._settle()
    record = make_record(event, self._next_seq)
    data = json.dumps(record, separators=(',', ':')).encode('utf-8') + b'\n'
    url = self.entry(record['seq'])
    self._unsettled = (record, data)
    try:
      storage.create_bytes(url, data)
    except StorageExistsError:
      # A retried upload whose first attempt did land reads back as "exists": that is ours.
      with contextlib.suppress(StorageError):
        if storage.read_bytes(url) == data:
          return self._appended(record)
      self._unsettled = None
      raise self._taken(record['seq']) from None
    return self._appended(record)

  def _appended(self, record: dict[str, Any]) -> dict[str, Any]:
    """Counts an entry that is stored (idempotent: `_settle` may count it again)."""
    self._next_seq = record['seq'] + 1
    self._cache[record['seq']] = record
    self._unsettled = None
    return record

  def _settle(self) -> None:
    """Counts the entry of an append that was cut short if its upload landed."""
    if self._unsettled is None:
      return
    record, data = self._unsettled
    try:
      landed = storage.read_bytes(self.entry(record['seq'])) == data
    except StorageNotFoundError:
      landed = False
    if landed:
      self._appended(record)
    else:  # absent (never landed), or a rival's (the next create says so)
      self._unsettled = None

  def _taken(self, seq: int) -> OutputError:
    return OutputError(
        f'{self.entry(seq)} already exists: another search appended to {self.job_dir} after '
        f'this one read its journal; this one stops (nothing overwritten)')

  def check_writer(self) -> None:
    """Raises OutputError if another driver has appended since this one (costs one listing)."""
    if not self._writing:
      raise RuntimeError('GcsJournal.check_writer needs GcsJournal.open_for_writing()')
    self._settle()
    if any(seq >= self._next_seq for seq in self._entry_seqs()):
      raise self._taken(self._next_seq)

  def exists(self) -> bool:
    return bool(storage.list_names(self.path))

  def _entry_seqs(self) -> list[int]:
    seqs = []
    for name in storage.list_names(self.path):
      match = _ENTRY_RE.fullmatch(name)
      if not match:
        raise InputError(
            f'{storage.join(self.path, name)} is not a journal entry (NNNNNNNNNN.json); the '
            f'search cannot be resumed from a damaged journal: remove it, or pass --overwrite '
            f'to start over')
      seqs.append(int(match.group(1)))
    return sorted(seqs)

  def events(self) -> list[dict[str, Any]]:
    """All events, oldest first: one listing, then a read of each entry not read before.

    Raises:
      InputError: an entry is missing (a gap) or is not a valid event (names the object).
    """
    seqs = self._entry_seqs()
    for expected, seq in enumerate(seqs, 1):
      if seq != expected:
        raise InputError(
            f'{self.entry(expected)} is missing (the journal has {len(seqs)} entries up to '
            f'{seqs[-1]}); the search cannot be resumed from a damaged journal: restore it, or '
            f'pass --overwrite to start over')
    todo = [seq for seq in seqs if seq not in self._cache]
    if len(todo) > 1:
      with futures.ThreadPoolExecutor(min(_READ_THREADS, len(todo))) as pool:
        loaded = list(pool.map(self._read_entry, todo))
    else:
      loaded = [self._read_entry(seq) for seq in todo]
    self._cache.update(zip(todo, loaded))
    return [dict(self._cache[seq]) for seq in seqs]

  def _read_entry(self, seq: int) -> dict[str, Any]:
    url = self.entry(seq)
    try:
      event = json.loads(storage.read_bytes(url))
      problem = check_event(event, seq)
    except (ValueError, UnicodeDecodeError) as e:
      problem = f'is not JSON ({str(e).splitlines()[0]})'
    if problem:
      raise InputError(f'{url} {problem}; the search cannot be resumed from a damaged journal: '
                       f'restore it, or pass --overwrite to start over')
    return event

  def delete(self) -> None:
    """Removes every entry, the last first (a cut-short delete leaves entries 1..k, no gap)."""
    if not self._writing:
      raise RuntimeError('GcsJournal.delete needs GcsJournal.open_for_writing()')
    for name in reversed(storage.list_names(self.path)):
      storage.delete(storage.join(self.path, name), missing_ok=True)
    self._cache.clear()
    self._next_seq, self._unsettled = 1, None
    self._damage = None
