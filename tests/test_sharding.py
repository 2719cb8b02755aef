"""FastNN's sharding rule: balance, worker multiples, drop_remainder, names."""

import pytest

from nascli.data import sharding
from nascli.errors import NascliError


@pytest.mark.parametrize("n,shards", [(10, 3), (1438, 8), (7, 7), (100, 1)])
def test_round_robin_counts_differ_by_at_most_one_and_cover_everything(n, shards):
  plan = sharding.plan_shards(list(range(n)), shards)
  assert max(plan.counts) - min(plan.counts) <= 1
  assert sorted(i for s in plan.shards for i in s) == list(range(n))
  assert plan.dropped == ()
  assert plan.shards[0][:2] == (0, shards) if n > shards else True


def test_drop_remainder_makes_shards_equal_and_reports_dropped():
  plan = sharding.plan_shards(list(range(10)), 3, drop_remainder=True)
  assert plan.counts == [3, 3, 3]
  assert plan.dropped == (9,)


def test_more_shards_than_records_is_an_error():
  with pytest.raises(NascliError, match="cannot write 5 shards from 3 records"):
    sharding.plan_shards([0, 1, 2], 5)


def test_num_shards_rounded_up_to_a_multiple_of_workers():
  assert sharding.resolve_num_shards(5, 2, 1000, 0) == (
      6, "--num_shards 5 raised to 6 so that each of the 2 workers reads 3 shards")
  assert sharding.resolve_num_shards(6, 3, 1000, 0) == (6, None)


def test_default_shard_count_small_and_large_data():
  assert sharding.default_num_shards(50, 10_000) == 1
  assert sharding.default_num_shards(1438, 1_000_000) == 8
  assert sharding.default_num_shards(1438, 1_000_000, num_workers=3) == 9
  # 1 GiB of images: size decides (128 MiB per shard).
  assert sharding.default_num_shards(100_000, 1 << 30) == 8
  assert sharding.default_num_shards(1_000_000, 10 << 30) == 80


def test_shard_names_match_the_pattern():
  name = sharding.shard_name("train", 3, 8)
  assert name == "train-00003-of-00008.tfrecord"
  m = sharding.SHARD_PATTERN.match(name)
  assert (m.group("prefix"), m.group("index"), m.group("total")) == ("train", "00003", "00008")
