"""Reference-model selection: keep models whose scores spread evenly, so tau means something.

A rank correlation computed on ten models that all score 0.95 says nothing about a proxy task;
one computed on ten models spread from the worst to the best does. Vertex AI NAS's
`proxy_task_model_selection_lib` therefore trains START_NUM_MODELS random architectures and
repeatedly drops the model whose removal leaves the remaining normalized scores most evenly
spread, NUM_MODELS_TO_REMOVE_PER_ITER at a time, until FINAL_NUM_MODELS remain.

Where we follow Vertex:
- the constants (30 -> 10, 5 per iteration, at most 6 = 20 % failures, at least 2 kept);
- the score space: accuracy, and latency too when trials carry one, each min-max normalized
  once per iteration over the valid trials (with float32 eps in the denominator);
- the removal rule (`find_trial_to_remove`): take the globally closest pair of points and drop
  the one whose second-nearest neighbour is closer, i.e. the one sitting in the denser spot; in
  one dimension this never drops the lowest or the highest score;
- failed trials count towards the iteration's removals (`filter_trials_based_on_scores`);
- the partial-training schedule (`schedule`): with K models left, train 1/K more of the full
  training before the next cut; the last iteration trains to completion.

Where we differ, and why:
- an accuracy of 0.0 is a valid score (Vertex's `if not accuracy` drops it as missing);
- the failure rules raise a one-line `NascliError` before anything is removed: more failures than
  `max_allowed_failures` (Vertex only caps the NAS job's failed-trial count), or a valid ratio
  below `min_valid_ratio` (Vertex defines VALID_TRIALS_RATIO_THRESHOLD = 0.7 but never applies
  it in model selection), or fewer valid trials than the final set needs (Vertex silently ends
  with fewer); a selection built on mostly failed trainings is not one to trust;
- `max_allowed_failures` defaults to 20 % of the actual start count, not of Vertex's constant 30.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from nascli.errors import NascliError

START_NUM_MODELS = 30
FINAL_NUM_MODELS = 10
NUM_MODELS_TO_REMOVE_PER_ITER = 5
MAX_ALLOWED_FAILURES = START_NUM_MODELS // 5
VALID_TRIALS_RATIO_THRESHOLD = 0.7
# Below two models there is no range (lowest, highest) left to spread scores over.
MIN_NUM_FILTERED_TRIALS = 2
# A model scores "near chance" below this share of the way from chance (1 / classes) to a perfect
# score: 0.19 on 10 classes. When half the kept models do, their order is the noise of training.
NEAR_CHANCE_SHARE = 0.1
# Vertex's normalization guard, kept so that both pick the same trial on the same scores.
_NORMALIZATION_EPS = float(np.finfo(np.float32).eps)


@dataclasses.dataclass(frozen=True)
class TrialScore:
  """One reference training: its accuracy, its latency when measured, whether it succeeded."""
  trial_id: str
  accuracy: float | None
  latency: float | None = None
  valid: bool = True

  def usable(self, needs_latency: bool) -> bool:
    """True when the trial has every score the selection compares (Vertex: else 'Invalid')."""
    if not self.valid or not _finite(self.accuracy):
      return False
    return not needs_latency or (_finite(self.latency) and self.latency >= 0)


@dataclasses.dataclass(frozen=True)
class SelectionRules:
  """The selection's settings, declared once (Vertex's constants are the defaults)."""
  start_num_models: int = START_NUM_MODELS
  final_num_models: int = FINAL_NUM_MODELS
  num_models_to_remove_per_iter: int = NUM_MODELS_TO_REMOVE_PER_ITER
  # None: 20 % of start_num_models, as Vertex derives MAX_ALLOWED_FAILURES from its start count.
  max_allowed_failures: int | None = None
  min_valid_ratio: float = VALID_TRIALS_RATIO_THRESHOLD

  def __post_init__(self):
    if self.final_num_models < MIN_NUM_FILTERED_TRIALS:
      raise NascliError(f"--final_num_models must be >= {MIN_NUM_FILTERED_TRIALS},"
                        f" got {self.final_num_models}")
    if self.start_num_models < self.final_num_models:
      raise NascliError(f"--max_nas_trial ({self.start_num_models}, the models trained) must be"
                        f" >= --final_num_models ({self.final_num_models})")
    if self.num_models_to_remove_per_iter < 1:
      raise NascliError(f"--num_models_to_remove_per_iter must be >= 1,"
                        f" got {self.num_models_to_remove_per_iter}")
    if self.max_allowed_failures is not None and self.max_allowed_failures < 0:
      raise NascliError(f"--max_allowed_failures must be >= 0, got {self.max_allowed_failures}")
    if not 0.0 <= self.min_valid_ratio <= 1.0:
      raise NascliError(f"--min_valid_ratio must be in [0, 1], got {self.min_valid_ratio}")

  @property
  def allowed_failures(self) -> int:
    if self.max_allowed_failures is not None:
      return self.max_allowed_failures
    return self.start_num_models // 5


@dataclasses.dataclass(frozen=True)
class Iteration:
  """One cut: the models it started with, the trials it dropped as failed, those it removed."""
  num_models: int
  failed: tuple[str, ...]
  removed: tuple[str, ...]  # in removal order
  kept: tuple[TrialScore, ...]  # in input order


@dataclasses.dataclass(frozen=True)
class PlannedIteration:
  num_models: int
  training_fraction: float  # of the full (reference) training, cumulative


def _finite(value: float | None) -> bool:
  return value is not None and math.isfinite(value)


def needs_latency(trials: Sequence[TrialScore]) -> bool:
  """Latency takes part once any trial reports one; a trial lacking it then counts as failed."""
  return any(_finite(t.latency) for t in trials)


def num_to_remove(num_models: int, rules: SelectionRules) -> int:
  """How many models the next cut drops: never below the final count (Vertex's loop)."""
  return max(0, min(rules.num_models_to_remove_per_iter, num_models - rules.final_num_models))


def next_training_fraction(previous: float, num_models: int, rules: SelectionRules) -> float:
  """Vertex's budget: K models train 1/K more of the full training; the final set trains fully."""
  if num_models <= rules.final_num_models:
    return 1.0
  return previous + 1.0 / num_models


def schedule(rules: SelectionRules = SelectionRules()) -> tuple[PlannedIteration, ...]:
  """The iterations a selection runs when no training fails: sizes and training budgets."""
  plan, size, fraction = [], rules.start_num_models, 0.0
  while True:
    fraction = next_training_fraction(fraction, size, rules)
    plan.append(PlannedIteration(size, fraction))
    if size <= rules.final_num_models:
      return tuple(plan)
    size -= num_to_remove(size, rules)


def check_failures(trials: Sequence[TrialScore], rules: SelectionRules) -> None:
  """Raises when too many reference trainings failed for the survivors to be trusted."""
  total = len(trials)
  use_latency = needs_latency(trials)
  failed = [t.trial_id for t in trials if not t.usable(use_latency)]
  if len(failed) > rules.allowed_failures:
    raise NascliError(
        f"model selection: {len(failed)} of {total} trials failed (trials {_ids(failed)}),"
        f" more than the {rules.allowed_failures} allowed (--max_allowed_failures)")
  valid = total - len(failed)
  if total and valid / total < rules.min_valid_ratio:
    raise NascliError(
        f"model selection: only {valid} of {total} trials have valid scores"
        f" ({valid / total:.0%}), below the {rules.min_valid_ratio:.0%} required"
        f" (--min_valid_ratio); failed: trials {_ids(failed)}")


def _ids(ids: Sequence[str], limit: int = 8) -> str:
  shown = ", ".join(ids[:limit])
  return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def normalized_points(trials: Sequence[TrialScore], use_latency: bool) -> np.ndarray:
  """Each score min-max scaled to [0, 1]; columns (accuracy, latency); latency 0 when unused."""
  columns = [[t.accuracy for t in trials]]
  columns.append([t.latency for t in trials] if use_latency else [0.0] * len(trials))
  points = np.asarray(columns, dtype=float).T
  low, high = points.min(axis=0), points.max(axis=0)
  return (points - low) / (high - low + _NORMALIZATION_EPS)


def most_crowded(points: np.ndarray) -> int | None:
  """The row whose removal keeps the rest most evenly spread; None with two rows or fewer.

  Of the two closest points, the one whose second-nearest neighbour is nearer lies in the
  denser region. Ties go as in Vertex: the first row of the closest pair by index, and the
  pair's second member when both second-nearest distances are equal.
  """
  n = len(points)
  if n <= MIN_NUM_FILTERED_TRIALS:
    return None
  dist = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)
  np.fill_diagonal(dist, np.inf)
  nearest = np.argmin(dist, axis=1)
  ordered = np.sort(dist, axis=1)
  first, second = ordered[:, 0], ordered[:, 1]
  a = int(np.argmin(first))
  b = int(nearest[a])
  return a if second[a] < second[b] else b


def filter_trials(trials: Sequence[TrialScore], removals: int,
                  rules: SelectionRules = SelectionRules()) -> Iteration:
  """One cut (Vertex's `filter_trials_based_on_scores`): drop the failed, then the crowded.

  Failed trials count towards `removals`; the scores are normalized once, before the cut.
  """
  check_failures(trials, rules)
  use_latency = needs_latency(trials)
  failed = tuple(t.trial_id for t in trials if not t.usable(use_latency))
  pool = [t for t in trials if t.usable(use_latency)]
  points = normalized_points(pool, use_latency) if pool else np.zeros((0, 2))
  budget = max(0, min(removals - len(failed), len(pool) - MIN_NUM_FILTERED_TRIALS))
  removed = []
  for _ in range(budget):
    index = most_crowded(points)
    removed.append(pool.pop(index).trial_id)
    points = np.delete(points, index, axis=0)
  return Iteration(len(trials), failed, tuple(removed), tuple(pool))


def select_models(trials: Sequence[TrialScore],
                  rules: SelectionRules = SelectionRules()) -> tuple[Iteration, ...]:
  """All cuts on fixed scores, from `start_num_models` trials down to `final_num_models`.

  For reference trainings that have all finished; Vertex instead retrains the survivors a
  little further between cuts (`schedule`), calling `filter_trials` once per iteration.
  The last iteration's `kept` is the selection.
  """
  if len(trials) != rules.start_num_models:
    raise NascliError(f"model selection: got {len(trials)} trials for --max_nas_trial="
                      f"{rules.start_num_models}; pass failed trainings as invalid, not absent")
  ids = [t.trial_id for t in trials]
  if len(set(ids)) != len(ids):
    duplicate = next(i for i in ids if ids.count(i) > 1)
    raise NascliError(f"model selection: trial id {duplicate!r} appears twice")
  check_failures(trials, rules)
  use_latency = needs_latency(trials)
  valid = sum(t.usable(use_latency) for t in trials)
  if valid < rules.final_num_models:
    raise NascliError(f"model selection: only {valid} trials have valid scores;"
                      f" --final_num_models is {rules.final_num_models}")
  iterations, current = [], list(trials)
  while len(current) > rules.final_num_models:
    step = filter_trials(current, num_to_remove(len(current), rules), rules)
    iterations.append(step)
    current = list(step.kept)
  if not iterations:
    iterations.append(Iteration(len(current), (), (), tuple(current)))
  return tuple(iterations)


def near_chance_bound(num_classes: int) -> float:
  chance = 1.0 / num_classes
  return chance + NEAR_CHANCE_SHARE * (1.0 - chance)


def quality_warnings(models: Sequence[TrialScore], metric: str,
                     num_classes: int | None) -> list[str]:
  """What makes the kept models a poor reference, each with its fix: half of them or more near
  chance (classification accuracy, `num_classes` known), or models tied on the metric (Kendall
  tau cannot order a tie). Empty when neither."""
  scored = [t for t in models if _finite(t.accuracy)]
  out = []
  if metric == "accuracy" and num_classes and num_classes > 1:
    bound = near_chance_bound(num_classes)
    low = [t.trial_id for t in scored if t.accuracy < bound]
    if scored and 2 * len(low) >= len(scored):
      out.append(f"{len(low)} of {len(scored)} reference models score near chance ({metric}"
                 f" below {bound:.3g}; chance is {1 / num_classes:.3g} on {num_classes}"
                 f" classes: trials {_ids(low)}): their order is training noise, and no proxy"
                 " can be judged against it; train the reference longer (--params_override"
                 " trainer.train_steps=...) or on more data")
  groups: dict[float, list[str]] = {}
  for t in scored:
    groups.setdefault(round(t.accuracy, 9), []).append(t.trial_id)
  for value, ids in sorted(groups.items()):
    if len(ids) > 1:
      out.append(f"trials {' and '.join([', '.join(ids[:-1]), ids[-1]])} tie at {metric}"
                 f" {value:.4g}: Kendall tau cannot order them; a longer reference training or"
                 " more validation data separates them")
  return out
