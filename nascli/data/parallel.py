"""Runs a Source's per-item work in forked worker processes, results in input order.

Workers are forked so they inherit the prepared Source (decoded arrays, file indexes, the check
pass's results) without pickling it; only item positions go out. Whole shards are written by the
workers themselves, so the parent only renames finished files; when there are too few shards to
keep every worker busy, workers encode runs of items and the parent writes.

Ctrl-C and SIGTERM are the parent's to handle (nascli.interrupts): workers ignore SIGINT (a
terminal sends it to the whole process group), die quietly on the SIGTERM of pool.terminate(),
and die with the parent when a second Ctrl-C ends it at once, so no worker prints a traceback
or outlives the command.
"""

import contextlib
import dataclasses
import multiprocessing
from pathlib import Path
import signal
from typing import Any, Callable, Iterable, Iterator

from nascli import parent_death
from nascli.data import tfexample
from nascli.data.source import CorruptItemError, Source
from nascli.data.tfrecord_io import TFRecordFileWriter

_SOURCE: Source | None = None
_OUTPUT_DIR: Path | None = None
_COUNTER: Any = None  # records done, shared with the parent for the progress bar
_ON_COUNT: Callable[[], None] | None = None  # in-process runs: progress between shards
_COUNT_EVERY = 16


class _LocalCounter:
  """The in-process stand-in for a shared multiprocessing.Value."""

  def __init__(self):
    self.value = 0

  def get_lock(self):
    return contextlib.nullcontext()


def _set_globals(source, output_dir, counter) -> None:
  global _SOURCE, _OUTPUT_DIR, _COUNTER
  _SOURCE, _OUTPUT_DIR, _COUNTER = source, output_dir, counter


def _init_worker(source, output_dir, counter) -> None:
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  set_death_signal = parent_death.setter("conversion workers")  # probed in the parent: cached
  if set_death_signal is not None:  # Linux: end with the parent, even when it ends by os._exit
    set_death_signal(signal.SIGKILL)
  _set_globals(source, output_dir, counter)


def _count(n: int) -> None:
  with _COUNTER.get_lock():
    _COUNTER.value += n
  if _ON_COUNT is not None:
    _ON_COUNT()


def _records(split: str, indices: Iterable[int]) -> Iterator[tuple[bytes, dict]]:
  pending = 0
  for index in indices:
    record = _SOURCE.record(split, index)
    meta = {"height": record.height, "width": record.width}
    if record.label is not None:
      meta["label"] = record.label
    if record.classes is not None:
      meta["classes"] = [int(c) for c in record.classes]
    yield tfexample.serialize(record), meta
    pending += 1
    if pending == _COUNT_EVERY:
      _count(pending)
      pending = 0
  _count(pending)


def encode_chunk(task: tuple[str, tuple[int, ...]]) -> list[tuple[bytes, dict]]:
  """Serialized examples and their summaries (size, label, objects) for a run of items."""
  split, indices = task
  return list(_records(split, indices))


@dataclasses.dataclass
class WrittenShard:
  name: str
  sha256: str
  size: int
  metas: list[dict]


def temp_name(name: str) -> str:
  """Where a shard is written until it is complete (hidden, so `train-*` globs never see it)."""
  return f".{name}.tmp"


def write_shard(task: tuple[str, str, tuple[int, ...]]) -> WrittenShard:
  """Writes one whole shard to its temporary name, fsynced; the parent renames it."""
  split, name, indices = task
  metas = []
  with TFRecordFileWriter(_OUTPUT_DIR / temp_name(name)) as writer:
    for data, meta in _records(split, indices):
      writer.write(data)
      metas.append(meta)
  return WrittenShard(name, writer.sha256, writer.size, metas)


def check_chunk(task: tuple[str, tuple[int, ...]]
                ) -> list[tuple[int, CorruptItemError | None, Any]]:
  """Per item: (index, None, what check() returned) when it decodes, else (index, error, None)."""
  split, indices = task
  out = []
  for index in indices:
    try:
      out.append((index, None, _SOURCE.check(split, index)))
    except CorruptItemError as e:
      out.append((index, e, None))
  _count(len(indices))
  return out


class Workers:
  """`processes` forked workers (or this process when processes <= 1) sharing a progress count."""

  def __init__(self, source: Source, processes: int, output_dir: Path):
    self.source, self.processes, self.output_dir = source, processes, output_dir
    self._pool = None
    self._counter: Any = None

  def __enter__(self) -> "Workers":
    if self.processes <= 1:
      self._counter = _LocalCounter()
      _set_globals(self.source, self.output_dir, self._counter)
    else:
      parent_death.setter("conversion workers")  # probed (and a failure said) once, here
      ctx = multiprocessing.get_context("fork")
      self._counter = ctx.Value("q", 0)
      self._pool = ctx.Pool(self.processes, initializer=_init_worker,
                            initargs=(self.source, self.output_dir, self._counter))
    return self

  def __exit__(self, exc_type, *exc) -> None:
    global _ON_COUNT
    _ON_COUNT = None
    if self._pool is not None:
      if exc_type is None:
        self._pool.close()
      else:
        self._pool.terminate()
      self._pool.join()
    _set_globals(None, None, None)

  @property
  def done(self) -> int:
    """Items finished so far, across all workers."""
    return self._counter.value

  def imap(self, fn: Callable, tasks: Iterable, tick: Callable[[], None]) -> Iterator:
    """Ordered results of fn over tasks; calls tick() at least every 0.2 s while waiting."""
    global _ON_COUNT
    if self._pool is None:
      _ON_COUNT = tick
      for task in tasks:
        yield fn(task)
        tick()
      return
    results = self._pool.imap(fn, tasks)
    while True:
      try:
        result = results.next(timeout=0.2)
      except multiprocessing.TimeoutError:
        tick()
        continue
      except StopIteration:
        return
      tick()
      yield result


def chunks(split: str, indices: Iterable[int], size: int) -> Iterator[tuple[str, tuple[int, ...]]]:
  batch = []
  for index in indices:
    batch.append(index)
    if len(batch) == size:
      yield split, tuple(batch)
      batch = []
  if batch:
    yield split, tuple(batch)
