"""Seeded held-out splits shared by every converter: `validation` for the search, `test` for the
final eval.

A search picks the best of many trials on `validation`, so that split is no longer an honest
estimate; `test` is touched only by `nascli eval`. Where a source ships no split of its own, both
are carved from its training items here, per class in proportion (`stratified_split`), so a small
data set does not hold out 28 zeros against 38 ones.
"""

from typing import Mapping, Sequence

import numpy as np

from nascli.errors import NascliError

TRAIN = "train"
VALIDATION = "validation"
TEST = "test"
HELD_OUT = (VALIDATION, TEST)
# What each split is for; written into dataset_info.json and named by the commands that read it.
ROLES = {
    TRAIN: "training (search trials and stage-2 train)",
    VALIDATION: "search rewards, proxy-task selection and evaluation during training",
    TEST: "final `nascli eval` only; no search or proxy tool reads it",
}


def held_out_count(n: int, fraction: float | None, size: int | None, default_fraction: float,
                   part: str = VALIDATION, *, beside: bool = False) -> int:
  """How many of `n` items `--{part}_size` / `--{part}_fraction` (or the default) hold out.

  With `beside` the split is made next to the `n` training items rather than carved from them
  (a generator renders it), so any size of 1 or more and a fraction up to 1 of `n` are fine.
  """
  if size is not None and fraction is not None:
    raise NascliError(f"give --{part}_size or --{part}_fraction, not both")
  if size is not None:
    if beside and size < 1:
      raise NascliError(f"--{part}_size must be at least 1, got {size}")
    if not beside and not 0 < size < n:
      raise NascliError(f"--{part}_size {size} must be between 1 and {n - 1} for {n} images")
    return size
  fraction = default_fraction if fraction is None else fraction
  if beside:
    if not 0.0 < fraction <= 1.0:
      raise NascliError(f"--{part}_fraction {fraction} must be in (0, 1]")
    return max(1, round(n * fraction))
  check_fraction(fraction, part)
  return min(n - 1, max(1, round(n * fraction)))


def check_fraction(fraction: float | None, part: str) -> None:
  """Refuses a `--{part}_fraction` outside (0, 1): it carves a share of the training items, and
  neither none nor all of them is a split. None (not given) passes."""
  if fraction is not None and not 0.0 < fraction < 1.0:
    raise NascliError(f"--{part}_fraction {fraction} must be between 0 and 1")


def check_fractions(options, parts: Sequence[str] = HELD_OUT) -> None:
  """check_fraction() of each `--{part}_fraction` of `options` (ConvertOptions)."""
  for part in parts:
    check_fraction(getattr(options, f"{part}_fraction"), part)


def validation_count(n: int, fraction: float | None, size: int | None,
                     default_fraction: float) -> int:
  return held_out_count(n, fraction, size, default_fraction, VALIDATION)


def seeded_split(n: int, num_validation: int, seed: int) -> tuple[list[int], list[int]]:
  """(train, validation) positions: a seeded permutation, validation first, each part sorted."""
  perm = np.random.default_rng(seed).permutation(n)
  return sorted(perm[num_validation:].tolist()), sorted(perm[:num_validation].tolist())


def random_split(n: int, sizes: Mapping[str, int], seed: int) -> dict[str, list[int]]:
  """{'train': rest, part: positions, ...}: a seeded permutation cut in `sizes` order (for data
  without one label per item, such as detection)."""
  _check_sizes(n, sizes)
  perm = np.random.default_rng(seed).permutation(n)
  out, start = {}, 0
  for part, size in sizes.items():
    out[part] = sorted(perm[start:start + size].tolist())
    start += size
  return {TRAIN: sorted(perm[start:].tolist()), **out}


def stratified_split(labels: Sequence[int], sizes: Mapping[str, int],
                     seed: int) -> dict[str, list[int]]:
  """{'train': rest, part: positions, ...}, each held-out part of exactly `sizes[part]` items
  holding every class in proportion to its share of `labels` (within one item).

  Per class the items are permuted with the seed and cut in `sizes` order; a class's quota is
  the floor of its proportional share, and the parts' remaining items go to the classes with the
  largest remainders (ties to the lower label), so the result depends only on (labels, sizes,
  seed).
  """
  labels = np.asarray(labels)
  n = len(labels)
  _check_sizes(n, sizes)
  classes, counts = np.unique(labels, return_counts=True)
  rng = np.random.default_rng(seed)
  members = {c: rng.permutation(np.flatnonzero(labels == c)) for c in classes.tolist()}
  left = dict(zip(classes.tolist(), counts.tolist()))
  taken = {c: 0 for c in left}
  out = {}
  for part, size in sizes.items():
    share = size * counts / n
    quota = np.minimum(np.floor(share).astype(int), [left[c] for c in classes.tolist()])
    remainder = share - quota
    for k in sorted(range(len(classes)), key=lambda k: (-remainder[k], k)):
      if quota.sum() >= size:
        break
      if quota[k] < left[classes[k]]:
        quota[k] += 1
    if quota.sum() < size:  # tiny classes ran out: fill from the largest classes left
      for k in sorted(range(len(classes)), key=lambda k: (-(left[classes[k]] - quota[k]), k)):
        extra = min(size - quota.sum(), left[classes[k]] - quota[k])
        quota[k] += extra
    picked = []
    for k, c in enumerate(classes.tolist()):
      picked += members[c][taken[c]:taken[c] + quota[k]].tolist()
      taken[c] += int(quota[k])
      left[c] -= int(quota[k])
    out[part] = sorted(picked)
  rest = sorted(i for c in classes.tolist() for i in members[c][taken[c]:].tolist())
  return {TRAIN: rest, **out}


def _check_sizes(n: int, sizes: Mapping[str, int]) -> None:
  if sum(sizes.values()) >= n:
    held = " + ".join(f"{size} {part}" for part, size in sizes.items())
    raise NascliError(f"holding out {held} of {n} images leaves none to train on; pass smaller"
                      f" {' / '.join(f'--{part}_size' for part in sizes)}")


def carved(parts: Sequence[str], seed: int, how: str, of: str = "the training items") -> dict:
  """dataset_info.json's `origin` of splits carved here."""
  return {part: f"carved from {of}: {how}, seed {seed}" for part in parts}


# The options that would size or give a test split; a source with an official test set takes none.
TEST_OPTIONS = ("test_source", "test_fraction", "test_size")


def check_official_test(options, name: str, official: str) -> None:
  """Refuses --test_* for a data set whose test split is its official test set (the command
  refuses them already through `Source.reads`; this stops a caller of the engine too), and a
  --validation_fraction outside (0, 1)."""
  for field in TEST_OPTIONS:
    if getattr(options, field) is not None:
      raise NascliError(f"--{field} does not apply to {name}: its test split is the official"
                        f" test set ({official})")
  check_fractions(options, (VALIDATION,))


def official_test_splits(train_labels: Sequence[int], num_test: int, options,
                         default_fraction: float) -> dict[str, tuple[str, np.ndarray]]:
  """{split: (official set, positions in it)} of a source that ships a training and a test set:
  validation carved from the training set (stratified, --seed), train the rest of it, test the
  official test set whole."""
  held_out = held_out_count(len(train_labels), options.validation_fraction,
                            options.validation_size, default_fraction, VALIDATION)
  parts = stratified_split(train_labels, {VALIDATION: held_out}, options.seed)
  return {TRAIN: ("train", np.asarray(parts[TRAIN], np.int64)),
          VALIDATION: ("train", np.asarray(parts[VALIDATION], np.int64)),
          TEST: ("test", np.arange(num_test, dtype=np.int64))}


def official_test_origins(train_set: str, test_set: str, seed: int) -> dict[str, str]:
  """split_origins() of `official_test_splits`."""
  return {TRAIN: f"{train_set} less the validation split",
          **carved([VALIDATION], seed, "stratified by class", of=train_set),
          TEST: f"the official test set ({test_set})"}
