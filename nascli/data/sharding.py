"""FastNN's sharding rule, enforced: equal shards, and equal numbers of shards per worker."""

import dataclasses
import math
import re

from nascli.errors import NascliError

# A shard aims at this many bytes on large data sets (TF's guidance: 10s-100s of MB per file).
TARGET_SHARD_BYTES = 128 * 1024 * 1024
# Small data sets still get a few shards (so a few workers can read them), each this big at least.
MIN_RECORDS_PER_SHARD = 128
MAX_SMALL_DATA_SHARDS = 8

SHARD_PATTERN = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<total>\d{5})\.tfrecord$")


def shard_name(prefix: str, index: int, total: int) -> str:
  return f"{prefix}-{index:05d}-of-{total:05d}.tfrecord"


def round_up(value: int, multiple: int) -> int:
  return -(-value // multiple) * multiple


def default_num_shards(num_records: int, estimated_bytes: int, num_workers: int = 1) -> int:
  """Enough shards to keep files near TARGET_SHARD_BYTES, a few for small sets, a multiple of W."""
  by_size = math.ceil(estimated_bytes / TARGET_SHARD_BYTES)
  by_count = min(MAX_SMALL_DATA_SHARDS, num_records // MIN_RECORDS_PER_SHARD)
  return round_up(max(1, by_size, by_count), num_workers)


@dataclasses.dataclass(frozen=True)
class ShardPlan:
  """Which items (positions in the split's canonical order) go to which shard."""
  num_shards: int
  shards: tuple[tuple[int, ...], ...]
  dropped: tuple[int, ...]

  @property
  def counts(self) -> list[int]:
    return [len(s) for s in self.shards]


def plan_shards(items: list[int], num_shards: int, drop_remainder: bool = False) -> ShardPlan:
  """Round-robin assignment: counts differ by at most one, or are equal with drop_remainder.

  Round-robin rather than contiguous slices keeps each shard a mix of the whole split even when
  the source lists items class by class.
  """
  if num_shards < 1:
    raise NascliError(f"number of shards must be at least 1, got {num_shards}")
  if len(items) < num_shards:
    raise NascliError(
        f"cannot write {num_shards} shards from {len(items)} records: every shard needs at least"
        " one record (lower --num_shards / --num_workers)")
  keep = len(items)
  if drop_remainder:
    keep = (len(items) // num_shards) * num_shards
  kept, dropped = items[:keep], items[keep:]
  shards = tuple(tuple(kept[s::num_shards]) for s in range(num_shards))
  return ShardPlan(num_shards=num_shards, shards=shards, dropped=tuple(dropped))


def resolve_num_shards(requested: int | None, num_workers: int, num_records: int,
                       estimated_bytes: int) -> tuple[int, str | None]:
  """The shard count to use and, when it differs from what was asked, why."""
  if num_workers < 1:
    raise NascliError(f"--num_workers must be at least 1, got {num_workers}")
  if requested is None:
    return default_num_shards(num_records, estimated_bytes, num_workers), None
  if requested < 1:
    raise NascliError(f"--num_shards must be at least 1, got {requested}")
  rounded = round_up(requested, num_workers)
  if rounded != requested:
    return rounded, (f"--num_shards {requested} raised to {rounded} so that each of the"
                     f" {num_workers} workers reads {rounded // num_workers} shards")
  return requested, None
