"""The search journal: an append-only, fsynced JSON-lines log, the job's single source of truth.

A killed search must resume with nothing lost or repeated, so every state change is one line in
`JOB_DIR/journal.jsonl`, written whole and fsynced before the caller acts on it, and the job's
state is whatever `replay(journal.events())` says (Optuna's JournalStorage model). Everything
else in JOB_DIR (trials.json, trials.csv, plots, HParams) is derived from it and can be rebuilt.

Events (each also carries "seq", 1, 2, 3, ..., and "time", ISO 8601 UTC):
  search_started {settings, fingerprint}
  proposed       {trial_id, dna, nas_params}
  started        {trial_id, attempt}
  completed      {trial_id, reward, metrics}: reward is a number, or with --objectives the list
                 of objective values, each signed so that larger is better
  failed         {trial_id, status: failed | failed_with_nan | infeasible, reason}
  lost           {trial_id, attempt, reason}: the machine running an attempt went away (a Ray
                 worker or node died); the trial is pending again, to be retried
  interrupted    {trial_id, attempt, signal}: the search was stopped (Ctrl-C, SIGTERM) while
                 the attempt ran; the trial runs again, from its checkpoint, on resume. Readers
                 older than this event see the trial as running, which they re-run too.
With early stopping (nascli/search/scheduler.py), a trial trains in rungs, one attempt each:
  started        {trial_id, attempt, rung}: the rung the attempt trains to (0: the first)
  rung           {trial_id, rung, step, reward, metrics}: the attempt trained to `step` and
                 reported; metrics as `completed`'s plus step, resumed_from (the checkpoint
                 step it started from), wall_s (the attempt's). The trial is `paused` until:
  promoted       {trial_id, rung}: the scheduler lets it go on; it is pending again, for its
                 next rung, from its checkpoint at `step`
  stopped        {trial_id, rung, step, reward, metrics, reason}: the scheduler stopped it, a
                 final state (not a failure), with its last rung's reward and metrics
  The last rung ends as `completed` (its metrics with rung, step, resumed_from).
Events of other kinds are kept in the log and ignored by `replay`, so newer writers can add
informational events without breaking older readers.

A job dir on `gs://` keeps the same events as one object per entry (`JOB/journal/0000000001.json`,
...), each created only if absent (`GcsJournal`); `journal_for(job_dir)` picks the backend by the
job dir's scheme.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import errno
import fcntl
import hashlib
import json
import os
import re
from concurrent import futures
from typing import Any, Callable, Iterable, Iterator, Mapping

from nascli import storage
from nascli.errors import InputError
from nascli.errors import OutputError
from nascli.errors import StorageError
from nascli.errors import StorageExistsError

JOURNAL_NAME = 'journal.jsonl'
LOCK_NAME = '.lock'
# Files and folders in JOB_DIR that the search derives from the journal; `--overwrite` removes
# them together with the journal and the trial folders (named by integer trial ids).
DERIVED_OUTPUTS = ('trials.json', 'trials.csv', 'search_progress.png', 'hparams', 'pareto.json',
                   'pareto_front.png')

PENDING = 'pending'
RUNNING = 'running'
INTERRUPTED = 'interrupted'
COMPLETED = 'completed'
FAILED = 'failed'
FAILED_WITH_NAN = 'failed_with_nan'
INFEASIBLE = 'infeasible'
FAILED_STATUSES = (FAILED, FAILED_WITH_NAN, INFEASIBLE)
# Early stopping: a trial the scheduler stopped (final), one awaiting its decision on a rung.
STOPPED = 'stopped'
PAUSED = 'paused'
FINAL_STATUSES = (COMPLETED, STOPPED) + FAILED_STATUSES
UNFINISHED_STATUSES = (PENDING, RUNNING, INTERRUPTED)

_RESERVED_KEYS = ('seq', 'time')


def _now() -> str:
  return datetime.datetime.now(datetime.timezone.utc).isoformat(
      timespec='milliseconds').replace('+00:00', 'Z')


def _fsync_dir(path: str) -> None:
  """Makes a new directory entry (a created journal) durable, not just the file's bytes."""
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


@contextlib.contextmanager
def writer_lock(lock_path: str, job_dir: str) -> Iterator[int]:
  """An exclusive flock on `lock_path` holding this process's pid, for as long as the block runs.

  The kernel releases it when the process dies, so a killed search never leaves a stale lock.

  Raises:
    OutputError: another process (or another open in this one) holds it.
  """
  os.makedirs(os.path.dirname(lock_path), exist_ok=True)
  fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as e:
    holder = _read_pid(fd)
    os.close(fd)
    if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
      raise OutputError(f'{lock_path}: cannot lock ({e.strerror})') from e
    raise OutputError(
        f'another search is running in {job_dir} (pid {holder}); wait for it to '
        f'finish or stop it, or use another --local_output_dir') from None
  try:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f'{os.getpid()}\n'.encode(), 0)
    os.fsync(fd)
    yield fd
  finally:
    with contextlib.suppress(OSError):
      os.ftruncate(fd, 0)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


class Journal:
  """`JOB_DIR/journal.jsonl`: append events as one writer, read them as anyone.

  Writing needs `open_for_writing()`, which holds an exclusive lock on `JOB_DIR/.lock` for its
  whole life, so two searches can never share a job dir; the lock is released by the kernel
  when the process dies, so a killed search never leaves a stale lock behind.
  """

  NAME = JOURNAL_NAME  # what error messages call the journal

  def __init__(self, path: str | os.PathLike[str]):
    self.path = os.fspath(path)
    self.job_dir = os.path.dirname(os.path.abspath(self.path))
    self.lock_path = os.path.join(self.job_dir, LOCK_NAME)
    self._lock_fd: int | None = None
    self._next_seq = 1
    self._damage: InputError | None = None
    # Bytes of a torn last line (a crash mid-append) that opening for writing dropped.
    self.repaired_bytes = 0

  @classmethod
  def in_dir(cls, job_dir: str | os.PathLike[str]) -> 'Journal':
    """The journal of the search job in `job_dir`."""
    return cls(os.path.join(os.fspath(job_dir), JOURNAL_NAME))

  @property
  def writing(self) -> bool:
    """True while this object holds the job's writer lock."""
    return self._lock_fd is not None

  @contextlib.contextmanager
  def open_for_writing(self) -> Iterator['Journal']:
    """Holds the job's writer lock; truncates a torn last line left by a crashed writer.

    Raises:
      OutputError: another process (or another open in this one) is writing this job.
    """
    if self._lock_fd is not None:
      raise RuntimeError(f'{self.path} is already open for writing by this Journal')
    if os.path.exists(self.job_dir) and not os.path.isdir(self.job_dir):
      raise OutputError(f'{self.job_dir} is a file; the search needs a folder there')
    with writer_lock(self.lock_path, self.job_dir) as fd:
      try:
        self._lock_fd = fd
        self._repair_tail()
        yield self
      finally:
        self._lock_fd = None

  def _repair_tail(self) -> None:
    """Drops a partial last line and learns the next seq.

    A journal damaged before its end is remembered, not raised: `--overwrite` must still be
    able to delete it, while `append` refuses to add to it and `events` reports it.
    """
    self._damage = None
    self._next_seq = 1
    try:
      fd = os.open(self.path, os.O_RDWR)
    except FileNotFoundError:
      return
    try:
      fcntl.flock(fd, fcntl.LOCK_EX)
      size = os.fstat(fd).st_size
      data = os.pread(fd, size, 0)
      torn = size - (data.rfind(b'\n') + 1)
      if torn:
        os.ftruncate(fd, size - torn)
        os.fsync(fd)
        self.repaired_bytes = torn
      try:
        events, _ = _parse(self.path, data[:size - torn])
        self._next_seq = events[-1]['seq'] + 1 if events else 1
      except InputError as e:
        self._damage = e
    finally:
      fcntl.flock(fd, fcntl.LOCK_UN)
      os.close(fd)

  def append(self, event: Mapping[str, Any]) -> dict[str, Any]:
    """Writes `event` as one line with the next seq and the time, fsynced before returning.

    Returns:
      The event as written (with "seq" and "time").
    """
    if self._lock_fd is None:
      raise RuntimeError('Journal.append needs Journal.open_for_writing()')
    if self._damage is not None:
      raise self._damage
    record = _record(event, self._next_seq)
    data = (json.dumps(record, separators=(',', ':')) + '\n').encode('utf-8')
    created = not os.path.exists(self.path)
    fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
      # The flock makes the line atomic for readers and any other appender, and O_APPEND plus
      # the loop makes a short write continue where it stopped instead of interleaving.
      fcntl.flock(fd, fcntl.LOCK_EX)
      start = os.fstat(fd).st_size
      try:
        view = memoryview(data)
        while view:
          view = view[os.write(fd, view):]
        os.fsync(fd)
      except BaseException:
        # A line cut short (disk full, an interrupt) must not stay for the next line to
        # follow, which would turn a torn tail into a corrupt middle line.
        with contextlib.suppress(OSError):
          os.ftruncate(fd, start)
        raise
    finally:
      fcntl.flock(fd, fcntl.LOCK_UN)
      os.close(fd)
    if created:
      _fsync_dir(self.job_dir)
    self._next_seq += 1
    return record

  def events(self) -> list[dict[str, Any]]:
    """All complete events, oldest first; a torn last line (a crash mid-append) is ignored.

    Raises:
      InputError: a line before the end is not a valid event (names the line number).
    """
    try:
      f = open(self.path, 'rb')
    except FileNotFoundError:
      return []
    with f:
      fcntl.flock(f.fileno(), fcntl.LOCK_SH)
      try:
        data = f.read()
      finally:
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    return _parse(self.path, data)[0]

  def delete(self) -> None:
    """Removes the journal file; only the lock holder may (used by `--overwrite`)."""
    if self._lock_fd is None:
      raise RuntimeError('Journal.delete needs Journal.open_for_writing()')
    with contextlib.suppress(FileNotFoundError):
      os.remove(self.path)
    self._next_seq = 1
    self._damage = None

  def exists(self) -> bool:
    """The job dir has a journal (it is a search job)."""
    return os.path.isfile(self.path)

  def check_writer(self) -> None:
    """Nothing to check: the lock keeps every other writer out while this one holds it."""

  def where(self, seq: int) -> str:
    """Where event `seq` is stored, for error messages."""
    return f'{self.path}: line {seq}'


def _read_pid(fd: int) -> str:
  try:
    text = os.pread(fd, 64, 0).decode('ascii', 'replace').strip()
  except OSError:
    text = ''
  return text if text.isdigit() else 'unknown'


def _parse(path: str, data: bytes) -> tuple[list[dict[str, Any]], int]:
  """(events, length of the torn tail in bytes) of the journal's bytes."""
  lines = data.split(b'\n')
  torn = len(lines.pop())  # What follows the last newline: b'' unless a write was cut short.
  events = []
  for number, raw in enumerate(lines, 1):
    try:
      event = json.loads(raw)
      problem = _check_event(event, len(events) + 1)
    except (ValueError, UnicodeDecodeError) as e:
      problem = f'is not JSON ({str(e).splitlines()[0]})'
    if problem:
      raise InputError(
          f'{path}: line {number} {problem}; the search cannot be resumed from a damaged '
          f'journal: restore it, or pass --overwrite to start over')
    events.append(event)
  return events, torn


def _check_event(event: Any, seq: int) -> str | None:
  if not isinstance(event, dict) or not isinstance(event.get('event'), str):
    return 'is not a journal event (no "event" name)'
  if event.get('seq') != seq:
    return f'has seq {event.get("seq")!r} where {seq} was expected (lines lost or reordered)'
  return None


# --------------------------------------------------------------------------- gs://

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
        self._damage = None
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
    record = _record(event, self._next_seq)
    data = json.dumps(record, separators=(',', ':')).encode('utf-8') + b'\n'
    url = self.entry(record['seq'])
    try:
      storage.create_bytes(url, data)
    except StorageExistsError:
      # A retried upload whose first attempt did land reads back as "exists": that is ours.
      with contextlib.suppress(StorageError):
        if storage.read_bytes(url) == data:
          return self._appended(record)
      raise self._taken(record['seq']) from None
    return self._appended(record)

  def _appended(self, record: dict[str, Any]) -> dict[str, Any]:
    self._cache[record['seq']] = record
    self._next_seq += 1
    return record

  def _taken(self, seq: int) -> OutputError:
    return OutputError(
        f'{self.entry(seq)} already exists: another search appended to {self.job_dir} after '
        f'this one read its journal; this one stops (nothing overwritten)')

  def check_writer(self) -> None:
    """Raises OutputError if another driver has appended since this one (costs one listing)."""
    if not self._writing:
      raise RuntimeError('GcsJournal.check_writer needs GcsJournal.open_for_writing()')
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
      problem = _check_event(event, seq)
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
    self._next_seq = 1
    self._damage = None


def _record(event: Mapping[str, Any], seq: int) -> dict[str, Any]:
  """`event` with its seq and time, checked as both journals require."""
  if not isinstance(event.get('event'), str):
    raise ValueError(f'a journal event needs an "event" name: {event!r}')
  clash = [k for k in _RESERVED_KEYS if k in event]
  if clash:
    raise ValueError(f'the journal sets {clash} itself: {event!r}')
  return {'seq': seq, 'time': _now(), **event}


# Journal backends by the job dir's scheme ("file" for local paths).
_BACKENDS: dict[str, Callable[[str], Any]] = {'file': Journal.in_dir, 'gs': GcsJournal.in_dir}


def scheme(job_dir: str | os.PathLike[str]) -> str:
  """"gs" for gs:// URLs, "file" for local paths; other URLs are refused (one line)."""
  text = os.fspath(job_dir)
  if storage.is_gcs(text):
    return 'gs'
  if '://' in text:
    raise InputError(f'{text}: a search job dir is a local folder or a gs://BUCKET/PREFIX URL')
  return 'file'


def journal_for(job_dir: str | os.PathLike[str]) -> 'Journal | GcsJournal':
  """The journal of the search job in `job_dir`, local or gs://."""
  return _BACKENDS[scheme(job_dir)](os.fspath(job_dir))


# --------------------------------------------------------------------------- settings


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
                   mutable_keys: Iterable[str] = ()) -> 'JobState':
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
    journal = journal or journal_for(job_dir)
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
    journal.append({'event': 'search_started', 'settings': settings,
                    'fingerprint': fingerprint(settings, mutable_keys)})
    return replay(journal.events())

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


# --------------------------------------------------------------------------- state


@dataclasses.dataclass(frozen=True)
class Proposal:
  """One architecture the controller proposed: the trial's identity."""
  trial_id: str
  dna: tuple[int | float, ...]
  nas_params: dict[str, Any]


@dataclasses.dataclass
class JobState:
  """What the journal says about the search; every dict is keyed by trial_id."""

  settings: dict[str, Any] | None = None
  fingerprint: str | None = None
  proposals: dict[str, Proposal] = dataclasses.field(default_factory=dict)  # Proposal order.
  status: dict[str, str] = dataclasses.field(default_factory=dict)
  rewards: dict[str, float] = dataclasses.field(default_factory=dict)
  # A multi-objective search journals a list reward: its sign-adjusted objective values (larger
  # is better in each); `rewards` then holds the first of them.
  reward_vectors: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
  metrics: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
  attempts: dict[str, int] = dataclasses.field(default_factory=dict)  # Last attempt started.
  reasons: dict[str, str] = dataclasses.field(default_factory=dict)  # Why a trial failed.
  started_time: dict[str, str] = dataclasses.field(default_factory=dict)  # Of the last attempt.
  finished_time: dict[str, str] = dataclasses.field(default_factory=dict)
  # Trials in the order they reached a final state (completed or failed*); a retried trial
  # appears at the place of its latest outcome.
  completion_order: list[str] = dataclasses.field(default_factory=list)
  losses: dict[str, int] = dataclasses.field(default_factory=dict)  # Attempts lost to infra.
  # Early stopping: each trial's rung reports in order, {rung, step, reward, metrics, seq}; the
  # next attempt of a trial trains to rung len(rungs[trial]).
  rungs: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
  last_seq: int = 0

  def trial_ids(self, *statuses: str) -> list[str]:
    """Trials in proposal order, only those in `statuses` when given."""
    return [t for t in self.proposals if not statuses or self.status[t] in statuses]

  def unfinished(self) -> list[str]:
    """Pending, running and interrupted trials: what a resumed search runs (again) first,
    same DNA."""
    return self.trial_ids(*UNFINISHED_STATUSES)

  def dnas(self) -> set[tuple[int | float, ...]]:
    """Every proposed architecture: a resumed search must not propose these again."""
    return {p.dna for p in self.proposals.values()}

  def next_trial_id(self) -> str:
    return str(max((int(t) for t in self.proposals if t.isdigit()), default=0) + 1)

  def best(self) -> str | None:
    """The completed trial with the highest reward (the earliest on a tie); of a
    multi-objective search, the lexicographic best of the reward vectors: the trial of the
    front that is best in the first objective."""
    done = self.trial_ids(COMPLETED)
    return max(done, key=lambda t: self.reward_vectors.get(t, (self.rewards[t],))) if done else None


def replay(events: Iterable[Mapping[str, Any]]) -> JobState:
  """Reduces journal events to the job's state, enforcing legal trial transitions.

  pending -> running (started) -> completed | failed* | pending (lost) | interrupted; a
  failed, interrupted or still running (the driver was killed) trial may start again (a
  retry); a completed trial is final. With early stopping, running -> paused (rung) -> pending
  (promoted) | stopped, which is final too.

  Raises:
    InputError: an event breaks the rules (names its seq).
  """
  state = JobState()
  for event in events:
    kind, seq = event.get('event'), event.get('seq', '?')
    state.last_seq = event.get('seq', state.last_seq)

    def bad(problem: str, kind=kind, seq=seq) -> InputError:
      return InputError(f'journal event seq {seq} ({kind}) {problem}; pass --overwrite to '
                        f'start over')

    if kind == 'search_started':
      if state.settings is not None:
        raise bad('repeats search_started')
      state.settings = dict(event.get('settings') or {})
      state.fingerprint = event.get('fingerprint')
      continue
    if kind not in ('proposed', 'started', 'completed', 'failed', 'lost', 'interrupted',
                    'rung', 'promoted', 'stopped'):
      continue  # Informational events from newer writers.
    if state.settings is None:
      raise bad('comes before search_started')
    trial = event.get('trial_id')
    if not isinstance(trial, str):
      raise bad(f'has no string trial_id (got {trial!r})')
    if kind == 'proposed':
      if trial in state.proposals:
        raise bad(f'proposes trial {trial} a second time')
      dna = event.get('dna')
      if not isinstance(dna, list):
        raise bad(f'has no dna list for trial {trial}')
      state.proposals[trial] = Proposal(trial, tuple(dna), dict(event.get('nas_params') or {}))
      state.status[trial] = PENDING
      state.attempts[trial] = 0
      continue
    if trial not in state.proposals:
      raise bad(f'names trial {trial}, which was never proposed')
    current = state.status[trial]
    if current == COMPLETED:
      raise bad(f'changes trial {trial}, which already completed')
    if current == STOPPED:
      raise bad(f'changes trial {trial}, which the scheduler stopped')
    if kind in ('rung', 'promoted', 'stopped') or current == PAUSED:
      _replay_rung(state, event, trial, bad)
      if kind != 'stopped':
        continue
    elif kind == 'started':
      next_rung = len(state.rungs.get(trial, []))
      if event.get('rung', next_rung) != next_rung:
        raise bad(f'starts rung {event["rung"]!r} of trial {trial}, whose next rung is'
                  f' {next_rung}')
    if kind == 'lost':
      if current != RUNNING:
        raise bad(f'loses trial {trial}, which is not running')
      state.status[trial] = PENDING
      state.losses[trial] = state.losses.get(trial, 0) + 1
      state.reasons[trial] = str(event.get('reason', ''))
      continue
    if kind == 'interrupted':
      if current != RUNNING:
        raise bad(f'interrupts trial {trial}, which is not running')
      state.status[trial] = INTERRUPTED
      state.finished_time[trial] = event.get('time')  # the attempt's end, not the trial's
      continue
    if kind == 'started':
      state.status[trial] = RUNNING
      state.attempts[trial] = int(event.get('attempt', state.attempts[trial] + 1))
      state.started_time[trial] = event.get('time')
      continue
    if kind == 'stopped':
      pass  # _replay_rung set its state; it is final, as below
    elif kind == 'completed':
      reward = event.get('reward')
      if isinstance(reward, list) and reward and all(
          isinstance(r, (int, float)) and not isinstance(r, bool) for r in reward):
        state.reward_vectors[trial] = tuple(float(r) for r in reward)
        reward = reward[0]
      if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise bad(f'has no numeric reward for trial {trial} (got {reward!r})')
      state.status[trial] = COMPLETED
      state.rewards[trial] = float(reward)
      state.metrics[trial] = dict(event.get('metrics') or {})
      state.reasons.pop(trial, None)
    else:  # failed
      status = event.get('status', FAILED)
      if status not in FAILED_STATUSES:
        raise bad(f'has status {status!r} (expected one of {", ".join(FAILED_STATUSES)})')
      state.status[trial] = status
      state.reasons[trial] = str(event.get('reason', ''))
    state.finished_time[trial] = event.get('time')
    if trial in state.completion_order:
      state.completion_order.remove(trial)
    state.completion_order.append(trial)
  return state


def _numeric(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def _replay_rung(state: JobState, event: Mapping[str, Any], trial: str,
                 bad: Callable[[str], InputError]) -> None:
  """A rung report or the scheduler's decision on it (nascli/search/scheduler.py): running ->
  paused (rung) -> pending (promoted, for the next rung) | stopped (final)."""
  kind, current = event.get('event'), state.status[trial]
  reported = state.rungs.setdefault(trial, [])
  if kind == 'rung':
    if current != RUNNING:
      raise bad(f'reports a rung of trial {trial}, which is not running')
    if event.get('rung') != len(reported):
      raise bad(f'reports rung {event.get("rung")!r} of trial {trial}, whose next rung is'
                f' {len(reported)}')
    if not _numeric(event.get('reward')) or not isinstance(event.get('step'), int):
      raise bad(f'has no numeric reward and step for trial {trial}')
    reported.append({'rung': event['rung'], 'step': event['step'],
                     'reward': float(event['reward']),
                     'metrics': dict(event.get('metrics') or {}), 'seq': event.get('seq')})
    state.status[trial] = PAUSED
    state.finished_time[trial] = event.get('time')  # the attempt's end, not the trial's
    return
  if current != PAUSED:
    raise bad(f'decides on trial {trial}, which has no rung report awaiting a decision')
  if kind not in ('promoted', 'stopped'):
    raise bad(f'comes while trial {trial} awaits the scheduler\'s decision on rung'
              f' {reported[-1]["rung"]}')
  last = reported[-1]
  if event.get('rung') != last['rung']:
    raise bad(f'decides on rung {event.get("rung")!r} of trial {trial}, which reported rung'
              f' {last["rung"]}')
  if kind == 'promoted':
    state.status[trial] = PENDING
    return
  reward = event.get('reward', last['reward'])
  if not _numeric(reward):
    raise bad(f'has no numeric reward for trial {trial} (got {reward!r})')
  state.status[trial] = STOPPED
  state.rewards[trial] = float(reward)
  state.metrics[trial] = dict(event.get('metrics') or last['metrics'])
  state.reasons[trial] = str(event.get('reason', ''))
