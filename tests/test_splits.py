"""The held-out splits every converter shares (nascli.data.splits)."""

import collections

import numpy as np
import pytest

from nascli.data import splits
from nascli.errors import NascliError


def _labels():
  # Unequal classes, as the digits are (174..183 per class) but more skewed.
  return np.repeat(np.arange(5), [10, 40, 97, 3, 250])


def test_stratified_parts_are_disjoint_exact_and_proportional():
  labels = _labels()
  parts = splits.stratified_split(labels, {"test": 80, "validation": 60}, seed=0)
  assert [len(parts[p]) for p in ("train", "test", "validation")] == [400 - 140, 80, 60]
  every = parts["train"] + parts["test"] + parts["validation"]
  assert sorted(every) == list(range(400))  # a partition: nothing lost, nothing twice
  total = collections.Counter(labels.tolist())
  for part, size in (("test", 80), ("validation", 60)):
    got = collections.Counter(labels[parts[part]].tolist())
    for c, n in total.items():
      assert abs(got[c] - size * n / 400) < 1.0, (part, c, got[c], size * n / 400)


def test_stratified_is_seeded():
  labels = _labels()
  a = splits.stratified_split(labels, {"validation": 50}, seed=1)
  assert a == splits.stratified_split(labels, {"validation": 50}, seed=1)
  assert a != splits.stratified_split(labels, {"validation": 50}, seed=2)
  assert list(a) == ["train", "validation"]


def test_tiny_classes_still_fill_the_part():
  labels = [0] * 2 + [1] * 2 + [2] * 2
  parts = splits.stratified_split(labels, {"test": 2, "validation": 2}, seed=0)
  assert len(parts["test"]) == len(parts["validation"]) == 2 and len(parts["train"]) == 2


def test_random_split_partitions():
  parts = splits.random_split(20, {"test": 4, "validation": 3}, seed=5)
  assert sorted(parts["train"] + parts["test"] + parts["validation"]) == list(range(20))
  assert (len(parts["test"]), len(parts["validation"])) == (4, 3)
  assert parts != splits.random_split(20, {"test": 4, "validation": 3}, seed=6)


def test_counts_and_refusals():
  assert splits.held_out_count(100, None, None, 0.2, "test") == 20
  assert splits.held_out_count(100, 0.1, None, 0.2, "test") == 10
  assert splits.held_out_count(100, None, 7, 0.2, "test") == 7
  with pytest.raises(NascliError, match=r"^give --test_size or --test_fraction, not both$"):
    splits.held_out_count(100, 0.1, 7, 0.2, "test")
  with pytest.raises(NascliError, match=r"--test_size 100 must be between 1 and 99"):
    splits.held_out_count(100, None, 100, 0.2, "test")
  with pytest.raises(NascliError, match="leaves none to train on"):
    splits.stratified_split([0, 1, 0, 1], {"test": 2, "validation": 2}, seed=0)
