"""Seeded train/validation splits shared by the data sets that ship without one."""

import numpy as np

from nascli.errors import NascliError


def validation_count(n: int, fraction: float | None, size: int | None,
                     default_fraction: float) -> int:
  if size is not None and fraction is not None:
    raise NascliError("give --validation_size or --validation_fraction, not both")
  if size is not None:
    if not 0 < size < n:
      raise NascliError(f"--validation_size {size} must be between 1 and {n - 1} for {n} images")
    return size
  fraction = default_fraction if fraction is None else fraction
  if not 0.0 < fraction < 1.0:
    raise NascliError(f"--validation_fraction {fraction} must be between 0 and 1")
  return min(n - 1, max(1, round(n * fraction)))


def seeded_split(n: int, num_validation: int, seed: int) -> tuple[list[int], list[int]]:
  """(train, validation) positions: a seeded permutation, validation first, each part sorted."""
  perm = np.random.default_rng(seed).permutation(n)
  return sorted(perm[num_validation:].tolist()), sorted(perm[:num_validation].tolist())
