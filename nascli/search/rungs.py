"""The rung ladder: rung events and reports, the steps of each rung, the trials it needs.

Shared by the schedulers (scheduler.py), promotion-based ASHA (promotion.py) and the journal's
readers (scheduler_journal.py); no framework import (the CLI's flag checks and the benchmarks
use it without TensorFlow, pyglove or Ray).
"""

import dataclasses

# Journal events this module writes the meaning of (journal.py replays them).
RUNG = 'rung'
PROMOTED = 'promoted'
STOPPED = 'stopped'
DECISIONS = (PROMOTED, STOPPED)
DEFAULT_REDUCTION_FACTOR = 3


@dataclasses.dataclass(frozen=True)
class Report:
  """One `rung` event: a trial's validation reward after training to a rung's step."""
  trial_id: str
  rung: int
  step: int
  reward: float
  seq: int = 0  # its place in the journal


def rung_steps(min_steps: int | None, reduction_factor: int, train_steps: int) -> list[int]:
  """The steps a trial reports at: min_steps * eta**k below train_steps, then train_steps.
  Without min_steps, ceil(train_steps / eta**2): rungs at about 1/eta**2, 1/eta and the whole
  (rounded up, so that the rung below the whole is not a step or two short of it)."""
  if min_steps is None:
    min_steps = max(1, -(-train_steps // reduction_factor**2))
  if min_steps < 1 or reduction_factor < 2:
    raise ValueError(f'min_steps {min_steps} must be >= 1 and reduction_factor'
                     f' {reduction_factor} >= 2')
  steps, step = [], min_steps
  while step < train_steps:
    steps.append(step)
    step *= reduction_factor
  return steps + [train_steps]


def trials_needed(num_rungs: int, reduction_factor: int) -> int:
  """The trials a ladder of `num_rungs` rungs (the full budget counted) needs: eta ** num_rungs.

  Successive halving keeps the top 1/eta of a rung for the next, so n trials leave
  n / eta ** (num_rungs - 1) at the full budget. eta ** (num_rungs - 1) trials would leave one:
  the search's answer would then rest on a single lower-rung ranking, and a lower rung ranks
  architectures only roughly (Kendall tau 0.58 against the full budget at a 2-epoch rung on the
  digits bench, BENCHMARKS.md), so its best is often not the full budget's best. eta **
  num_rungs trials leave eta at the full budget: the last rung is a comparison of eta full
  rewards, as every rung below compares eta results per survivor. With the default 4 trials
  and eta 3 no ladder qualifies (2 rungs need 9): 4 // 3 = 1 trial would be trained fully and
  3 judged at a first rung of a third of the budget."""
  return reduction_factor ** num_rungs


def halving_survivors(max_trials: int, num_rungs: int, reduction_factor: int) -> int:
  """How many of `max_trials` trials successive halving keeps to the full budget: the top
  floor(n / eta) of each rung, and at least one."""
  return max(1, max_trials // reduction_factor ** (num_rungs - 1))


def fully_trained(max_trials: int, num_rungs: int, reduction_factor: int) -> int:
  """The fewest of `max_trials` trials asha_promotions trains to the full budget: the top
  floor(n / eta) of each rung go on, and once every trial is proposed at least the top eta of
  a rung do when the trials are fewer than the ladder needs (`trials_needed`; else at least
  its best: promotion.next_job's `finishing`, `finishing_top`). More when a later trial
  outranks one promoted already (both go on)."""
  if max_trials < trials_needed(num_rungs, reduction_factor):
    return min(reduction_factor, max_trials)
  return halving_survivors(max_trials, num_rungs, reduction_factor)
