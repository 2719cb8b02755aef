"""Runs a Source's per-item work in forked worker processes, results in input order.

Workers are forked so they inherit the prepared Source (decoded arrays, file indexes) without
pickling it; only item positions go out and serialized records come back.
"""

import contextlib
import multiprocessing
from typing import Callable, Iterable, Iterator

from nascli.data import tfexample
from nascli.data.source import CorruptItemError, Source

_SOURCE: Source | None = None


def _set_source(source: Source) -> None:
  global _SOURCE
  _SOURCE = source


def encode_chunk(task: tuple[str, tuple[int, ...]]) -> list[tuple[bytes, dict]]:
  """Serialized examples and their summary (size, label, objects) for a run of items."""
  split, indices = task
  out = []
  for index in indices:
    record = _SOURCE.record(split, index)
    meta = {"height": record.height, "width": record.width}
    if record.label is not None:
      meta["label"] = record.label
    if record.classes is not None:
      meta["classes"] = [int(c) for c in record.classes]
    out.append((tfexample.serialize(record), meta))
  return out


def check_chunk(task: tuple[str, tuple[int, ...]]) -> list[tuple[int, str | None]]:
  """For each item, None when it decodes, else the reason it does not."""
  split, indices = task
  out = []
  for index in indices:
    try:
      _SOURCE.check(split, index)
      out.append((index, None))
    except CorruptItemError as e:
      out.append((index, e.reason))
  return out


@contextlib.contextmanager
def mapper(source: Source, processes: int) -> Iterator[Callable[[Callable, Iterable], Iterator]]:
  """Yields an ordered imap over `processes` workers (in this process when processes <= 1)."""
  if processes <= 1:
    _set_source(source)
    try:
      yield lambda fn, tasks: map(fn, tasks)
    finally:
      _set_source(None)
    return
  pool = multiprocessing.get_context("fork").Pool(
      processes, initializer=_set_source, initargs=(source,))
  try:
    yield lambda fn, tasks: pool.imap(fn, tasks)
    pool.close()
  finally:
    pool.terminate()
    pool.join()


def chunks(split: str, indices: Iterable[int], size: int) -> Iterator[tuple[str, tuple[int, ...]]]:
  batch = []
  for index in indices:
    batch.append(index)
    if len(batch) == size:
      yield split, tuple(batch)
      batch = []
  if batch:
    yield split, tuple(batch)
