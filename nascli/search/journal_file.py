"""The journal of a local job dir: `JOB_DIR/journal.jsonl`, append-only, fsynced JSON lines.

One line per event, written whole and fsynced before `append` returns; one writer at a time
(an flock on `JOB_DIR/.lock` that dies with its process); readers need no lock of the job.
The line format (`make_record`, `check_event`) is shared with the gs:// backend
(journal_gcs.py), which also uses `writer_lock` for its machine-local lock.

A line that is on disk is counted whatever is raised after it was written (the unlock, the
close, the folder's fsync, a signal's Interrupted): `append` counts it right after its fsync,
and under the lock compares the file's length with the one it left, re-reading the file when
they differ, so a line can never be given the seq of the one before it. Journals written by
older versions, whose counter could fall behind after such an exception, may hold a line that
repeats the previous line's seq; readers take it as the next seq, and the writer renumbers
the file (see `Journal.open_for_writing`), rather than refusing a search that lost nothing.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
from typing import Any, Iterator, Mapping

from nascli.errors import InputError
from nascli.errors import OutputError

JOURNAL_NAME = 'journal.jsonl'
LOCK_NAME = '.lock'

_RESERVED_KEYS = ('seq', 'time')


def _now() -> str:
  return datetime.datetime.now(datetime.timezone.utc).isoformat(
      timespec='milliseconds').replace('+00:00', 'Z')


def check_new_event(event: Mapping[str, Any]) -> None:
  """Raises ValueError unless `event` can be appended: it has a name and no seq or time."""
  if not isinstance(event.get('event'), str):
    raise ValueError(f'a journal event needs an "event" name: {event!r}')
  clash = [k for k in _RESERVED_KEYS if k in event]
  if clash:
    raise ValueError(f'the journal sets {clash} itself: {event!r}')


def make_record(event: Mapping[str, Any], seq: int) -> dict[str, Any]:
  """`event` with its seq and time, checked as both journals require."""
  check_new_event(event)
  return {'seq': seq, 'time': _now(), **event}


def check_event(event: Any, seq: int) -> str | None:
  """What is wrong with a stored event that should have seq `seq`, or None."""
  if not isinstance(event, dict) or not isinstance(event.get('event'), str):
    return 'is not a journal event (no "event" name)'
  if event.get('seq') != seq:
    return f'has seq {event.get("seq")!r} where {seq} was expected (lines lost or reordered)'
  return None


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
    # The file's length after the last line this writer counted (None: not known), to notice
    # a line that is on disk but was not counted.
    self._size: int | None = None
    self._dir_synced = False  # the journal's directory entry is durable
    self._damage: InputError | None = None
    # Bytes of a torn last line (a crash mid-append) that opening for writing dropped.
    self.repaired_bytes = 0
    # Lines whose repeated seq (an older writer's stale counter) opening for writing renumbered.
    self.renumbered_lines = 0

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
    """Holds the job's writer lock; truncates a torn last line left by a crashed writer, and
    renumbers the lines after a repeated seq.

    The renumbering rewrites the file whole (a temporary file, fsynced, renamed over it, under
    the lock), so a crash leaves either journal, never a mix; after it, the file's seqs are
    1..N again and every later line follows on. Refusing such a journal would make the user
    delete the search (--overwrite) for a line that was only counted twice.

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
        self._repair()
        yield self
      finally:
        self._lock_fd = None

  def _repair(self) -> None:
    """Drops a partial last line, renumbers repeated seqs and learns the next seq.

    A journal damaged before its end is remembered, not raised: `--overwrite` must still be
    able to delete it, while `append` refuses to add to it and `events` reports it.
    """
    self._damage = None
    self._next_seq, self._size, self.renumbered_lines = 1, 0, 0
    try:
      fd = os.open(self.path, os.O_RDWR)
    except FileNotFoundError:
      self._dir_synced = False
      return
    self._dir_synced = True  # an earlier writer's, or a file put there by hand
    try:
      fcntl.flock(fd, fcntl.LOCK_EX)
      events, renumbered = self._learn(fd)
      if renumbered:
        data = b''.join(_line(e) for e in events)
        temporary = f'{self.path}.tmp'
        with open(temporary, 'wb') as f:
          f.write(data)
          f.flush()
          os.fsync(f.fileno())
        os.replace(temporary, self.path)
        _fsync_dir(self.job_dir)
        self._size, self.renumbered_lines = len(data), len(renumbered)
    finally:
      fcntl.flock(fd, fcntl.LOCK_UN)
      os.close(fd)

  def _learn(self, fd: int) -> tuple[list[dict[str, Any]], list[int]]:
    """Reads the journal open on `fd` (locked), truncating a torn last line, and sets the next
    seq and the length; returns `_parse`'s (events, renumbered lines), ([], []) when the
    journal is damaged (then `_damage` says how)."""
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0)
    torn = size - (data.rfind(b'\n') + 1)
    if torn:
      os.ftruncate(fd, size - torn)
      os.fsync(fd)
      self.repaired_bytes = torn
    self._size = size - torn
    try:
      events, renumbered = _parse(self.path, data[:size - torn])
    except InputError as e:
      self._damage = e
      return [], []
    self._next_seq = len(events) + 1
    return events, renumbered

  def append(self, event: Mapping[str, Any]) -> dict[str, Any]:
    """Writes `event` as one line with the next seq and the time, fsynced before returning.

    Returns:
      The event as written (with "seq" and "time").
    """
    if self._lock_fd is None:
      raise RuntimeError('Journal.append needs Journal.open_for_writing()')
    if self._damage is not None:
      raise self._damage
    check_new_event(event)
    fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
      # The flock makes the line atomic for readers and any other appender, and O_APPEND plus
      # the loop makes a short write continue where it stopped instead of interleaving.
      fcntl.flock(fd, fcntl.LOCK_EX)
      if os.fstat(fd).st_size != self._size:
        # A line on disk that was not counted (an exception after its write): the file says
        # what the next seq is. (Only this writer's lines can be new, so none repeats a seq.)
        self._learn(fd)
        if self._damage is not None:
          raise self._damage
      start = self._size
      record = make_record(event, self._next_seq)
      data = _line(record)
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
      # On disk: counted now, before anything else can raise.
      self._next_seq, self._size = record['seq'] + 1, start + len(data)
    finally:
      try:
        fcntl.flock(fd, fcntl.LOCK_UN)
      finally:
        os.close(fd)
    if not self._dir_synced:
      _fsync_dir(self.job_dir)
      self._dir_synced = True
    return record

  def events(self) -> list[dict[str, Any]]:
    """All complete events, oldest first; a torn last line (a crash mid-append) is ignored.

    A line that repeats the previous line's seq (see the module's docstring) reads as the next
    seq: every event's seq is its line number.

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
    return _parse(self.path, data[:data.rfind(b'\n') + 1])[0]

  def delete(self) -> None:
    """Removes the journal file; only the lock holder may (used by `--overwrite`)."""
    if self._lock_fd is None:
      raise RuntimeError('Journal.delete needs Journal.open_for_writing()')
    with contextlib.suppress(FileNotFoundError):
      os.remove(self.path)
    self._next_seq, self._size, self._dir_synced = 1, 0, False
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


def _line(record: Mapping[str, Any]) -> bytes:
  return (json.dumps(record, separators=(',', ':')) + '\n').encode('utf-8')


def _parse(path: str, data: bytes) -> tuple[list[dict[str, Any]], list[int]]:
  """(events, numbers of the lines renumbered) of the journal's complete lines (`data` ends
  with a newline or is empty).

  Line N is event N. A line whose seq repeats the previous line's, and which is not a copy of
  it, was written by an older writer whose counter had fallen behind (see the module's
  docstring): it is taken as seq N, and the lines after it may follow on from its seq.
  """
  lines = data.split(b'\n')
  lines.pop()  # b'': what follows the last newline
  events: list[dict[str, Any]] = []
  renumbered = []
  previous, written = b'', 0  # the last line, and the seq it was written with
  for number, raw in enumerate(lines, 1):
    try:
      event = json.loads(raw)
      problem = check_event(event, written + 1)
      if problem and written and raw != previous and check_event(event, written) is None:
        problem = None  # the stale counter's repeat
    except (ValueError, UnicodeDecodeError) as e:
      problem = f'is not JSON ({str(e).splitlines()[0]})'
    if problem:
      raise InputError(
          f'{path}: line {number} {problem}; the search cannot be resumed from a damaged '
          f'journal: restore it, or pass --overwrite to start over')
    previous, written = raw, event['seq']
    if written != number:
      event['seq'] = number
      renumbered.append(number)
    events.append(event)
  return events, renumbered
