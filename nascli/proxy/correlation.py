"""How well a proxy task ranks models: Kendall's tau against the reference, step by step.

A proxy task is worth its savings only if it orders architectures as the full training does.
Vertex AI NAS's `proxy_task_search_controller_lib` measures that with `scipy.stats.kendalltau`
between the proxy's and the reference's scores of the selected models, at every evaluated
training step, and stops a candidate proxy at the first step that meets a target.

Where we follow Vertex:
- `rank_correlation` (`compute_rank_correlation`, `has_enough_trials_for_correlation`): pairs
  with a failed side (None or NaN) are left out; tau needs at least 5 valid pairs and a valid
  ratio of 0.7 over all models; otherwise the result says "not enough", it does not raise;
- the median accuracy at a step is the upper median of the valid values (a value some model
  reached), and the cost at a step is that model's seconds per step times the step
  (`compute_median_accuracy_and_training_time_over_step`);
- `stopping_condition` (`check_stopping_condition_and_update_proxy_task_stats`): steps in order,
  and within a step correlation, then accuracy, then the time limit, then the best candidate's
  cost; a met target reports the step and cost linearly interpolated to where it was crossed.

Where we differ, and why:
- curves are interpolated (`np.interp`) onto the union of all evaluated steps, within each
  curve's own range. Vertex correlates only the models that logged that exact step, so models
  evaluated on different schedules (or a resumed trial) leave steps with too few valid pairs;
  on a shared schedule both give the same taus. Beyond its last point a curve is missing (still
  training or failed), never extrapolated;
- a step whose tau is undefined (too few pairs, or all scores tied) is NaN, not Vertex's -5.0;
  and a crossing right after such a step is reported at the step itself, where Vertex would
  interpolate towards -5.0;
- a target of 0 is a target (Vertex's truthiness checks treat 0 as "no target").
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Sequence

import numpy as np
from scipy import stats

MIN_VALID_PAIRS = 5
MIN_VALID_RATIO = 0.7
# Vertex's `search_proxy_task` flag defaults.
DESIRED_ACCURACY_CORRELATION = 0.65
DESIRED_LATENCY_CORRELATION = 0.65
TRAINING_TIME_HRS_LIMIT = 3.0

Curve = tuple[Sequence[float], Sequence[float]]  # (steps, values) of one model's validation


@dataclasses.dataclass(frozen=True)
class Correlation:
  """Kendall's tau over the valid pairs; `reason` says why there is none (tau is NaN then)."""
  tau: float
  p_value: float
  num_valid: int
  num_total: int
  reason: str | None = None

  @property
  def enough(self) -> bool:
    return self.reason is None


def _as_floats(values: Sequence[float | None]) -> np.ndarray:
  return np.array([np.nan if v is None else v for v in values], dtype=float)


def rank_correlation(proxy: Sequence[float | None], reference: Sequence[float | None],
                     min_valid_pairs: int = MIN_VALID_PAIRS,
                     min_valid_ratio: float = MIN_VALID_RATIO) -> Correlation:
  """Kendall's tau of proxy against reference scores of the same models, in the same order."""
  a, b = _as_floats(proxy), _as_floats(reference)
  if a.shape != b.shape:
    raise ValueError(f"{len(a)} proxy scores for {len(b)} reference scores")
  valid = np.isfinite(a) & np.isfinite(b)
  num_valid, total = int(valid.sum()), len(a)
  reason = None
  if num_valid < min_valid_pairs:
    reason = f"not enough valid pairs: {num_valid} of {total}, {min_valid_pairs} needed"
  elif num_valid / total < min_valid_ratio:
    reason = (f"not enough valid pairs: {num_valid} of {total} ({num_valid / total:.0%}),"
              f" {min_valid_ratio:.0%} needed")
  if reason:
    return Correlation(math.nan, math.nan, num_valid, total, reason)
  x, y = a[valid], b[valid]
  if np.all(x == x[0]) or np.all(y == y[0]):
    return Correlation(math.nan, math.nan, num_valid, total,
                       "no ranking: all proxy scores or all reference scores are equal")
  result = stats.kendalltau(x, y)
  return Correlation(float(result.statistic), float(result.pvalue), num_valid, total)


# The interval a proxy's tau is reported with (search_proxy_task): a percentile bootstrap over
# the models, its lower end a one-sided 95 % bound.
INTERVAL_LEVEL = 0.9
BOOTSTRAP_RESAMPLES = 2000
_BOOTSTRAP_CHUNK = 250  # resamples per numpy batch (B x n x n signs in memory)


def bootstrap_interval(proxy: Sequence[float | None], reference: Sequence[float | None],
                       seed: int, level: float = INTERVAL_LEVEL,
                       resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float] | None:
  """A percentile bootstrap interval of Kendall's tau over the models.

  The valid pairs (both scores finite) are drawn with replacement `resamples` times by numpy's
  generator seeded with `seed` (so the same scores and seed give the same interval); each
  resample's tau-b is computed (a model drawn twice is a pair tied on both sides, which tau-b
  leaves out, as `scipy.stats.kendalltau` does), resamples without a tau (one distinct model, or
  every score tied) are dropped, and the interval is the (1 - level) / 2 and (1 + level) / 2
  quantiles of the rest. None with fewer than 2 valid pairs or no resample with a tau.
  """
  a, b = _as_floats(proxy), _as_floats(reference)
  if a.shape != b.shape:
    raise ValueError(f"{len(a)} proxy scores for {len(b)} reference scores")
  valid = np.isfinite(a) & np.isfinite(b)
  x, y = a[valid], b[valid]
  n = len(x)
  if n < 2:
    return None
  sx = np.sign(x[:, None] - x[None, :])
  sy = np.sign(y[:, None] - y[None, :])
  draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
  taus = []
  for start in range(0, resamples, _BOOTSTRAP_CHUNK):
    idx = draws[start:start + _BOOTSTRAP_CHUNK]
    px = sx[idx[:, :, None], idx[:, None, :]]
    py = sy[idx[:, :, None], idx[:, None, :]]
    # Over ordered pairs: sum(px * py) = 2 (C - D), sum(|px|) = 2 (pairs untied in x): tau-b.
    num = (px * py).sum(axis=(1, 2))
    dx, dy = np.abs(px).sum(axis=(1, 2)), np.abs(py).sum(axis=(1, 2))
    ok = (dx > 0) & (dy > 0)
    taus.append(num[ok] / np.sqrt(dx[ok] * dy[ok]))
  values = np.concatenate(taus)
  if not len(values):
    return None
  low, high = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
  return float(low), float(high)


def _clean(curve: Curve | None, index: int) -> tuple[np.ndarray, np.ndarray]:
  """A curve sorted by step; a step logged twice (a resumed trial) keeps its last value."""
  if curve is None:
    return np.zeros(0), np.zeros(0)
  steps, values = curve
  if len(steps) != len(values):
    raise ValueError(f"curve {index}: {len(steps)} steps for {len(values)} values")
  last = {}
  for step, value in zip(steps, values):
    if not math.isfinite(step):
      raise ValueError(f"curve {index}: step {step} is not a number")
    last[float(step)] = np.nan if value is None else float(value)
  ordered = sorted(last)
  return np.array(ordered, dtype=float), np.array([last[s] for s in ordered], dtype=float)


def interpolate_curves(curves: Sequence[Curve | None], steps: Sequence[float]) -> np.ndarray:
  """Values [model, step]: linear between a curve's points, NaN outside its range."""
  grid = np.asarray(steps, dtype=float)
  table = np.full((len(curves), len(grid)), np.nan)
  for i, curve in enumerate(curves):
    xs, ys = _clean(curve, i)
    if not len(xs):
      continue
    inside = (grid >= xs[0]) & (grid <= xs[-1])
    table[i, inside] = np.interp(grid[inside], xs, ys)
  return table


def union_of_steps(curves: Sequence[Curve | None]) -> np.ndarray:
  """Every step some model was evaluated at, sorted (Vertex's superset of training steps)."""
  steps = set()
  for i, curve in enumerate(curves):
    steps.update(_clean(curve, i)[0].tolist())
  return np.array(sorted(steps), dtype=float)


@dataclasses.dataclass(frozen=True)
class CorrelationOverSteps:
  """Per evaluated step: tau, its p-value, the valid pairs, the median accuracy and its cost.

  `median_accuracy` and `cost_hours` are NaN where tau is undefined, as in Vertex;
  `cost_hours` is None when no per-model training speed was given.
  """
  steps: np.ndarray
  taus: np.ndarray
  p_values: np.ndarray
  num_valid: np.ndarray
  median_accuracy: np.ndarray
  cost_hours: np.ndarray | None


def correlation_over_steps(curves: Sequence[Curve | None],
                           reference: Sequence[float | None],
                           steps: Sequence[float] | None = None,
                           seconds_per_step: Sequence[float | None] | None = None,
                           min_valid_pairs: int = MIN_VALID_PAIRS,
                           min_valid_ratio: float = MIN_VALID_RATIO) -> CorrelationOverSteps:
  """Tau of the proxy curves against the reference accuracies at each step.

  Args:
    curves: each selected model's proxy validation curve, None for a model that never reported.
    reference: the models' reference (full-training) accuracies, same order, None if failed.
    steps: where to compare; by default every step some curve was evaluated at.
    seconds_per_step: each model's training speed under the proxy, to cost each step.
    min_valid_pairs: fewest valid (proxy, reference) pairs for a tau.
    min_valid_ratio: smallest valid share of all models for a tau.
  """
  if len(curves) != len(reference):
    raise ValueError(f"{len(curves)} curves for {len(reference)} reference scores")
  grid = union_of_steps(curves) if steps is None else np.asarray(steps, dtype=float)
  table = interpolate_curves(curves, grid)
  n = len(grid)
  taus, p_values = np.full(n, np.nan), np.full(n, np.nan)
  num_valid, median = np.zeros(n, dtype=int), np.full(n, np.nan)
  speed = None if seconds_per_step is None else _as_floats(seconds_per_step)
  if speed is not None and len(speed) != len(curves):
    raise ValueError(f"{len(speed)} training speeds for {len(curves)} curves")
  cost = None if speed is None else np.full(n, np.nan)
  for j in range(n):
    corr = rank_correlation(table[:, j], reference, min_valid_pairs, min_valid_ratio)
    num_valid[j] = corr.num_valid
    if not corr.enough:
      continue
    taus[j], p_values[j] = corr.tau, corr.p_value
    column = table[:, j]
    values = np.sort(column[np.isfinite(column)])
    median[j] = values[len(values) // 2]
    if cost is not None:
      model = int(np.flatnonzero(column == median[j])[0])
      cost[j] = speed[model] * grid[j] / 3600.0
  return CorrelationOverSteps(grid, taus, p_values, num_valid, median, cost)


class StopReason(str, enum.Enum):
  """Why a candidate proxy stopped training (Vertex's ProxyTaskStoppingState wording)."""
  MET_DESIRED_ACCURACY_CORRELATION = "Met desired correlation"
  MET_DESIRED_ACCURACY = "Met desired accuracy"
  EXCEEDED_TRAIN_TIME_LIMIT = "Exceeded training time limit"
  EXCEEDED_BEST_TRAIN_TIME = "Exceeded best training time"

  @property
  def success(self) -> bool:
    """Only a met target makes a candidate a usable proxy (Vertex's `_is_successful`)."""
    return self in (StopReason.MET_DESIRED_ACCURACY_CORRELATION,
                    StopReason.MET_DESIRED_ACCURACY)


@dataclasses.dataclass(frozen=True)
class StoppingRules:
  """Vertex's `search_proxy_task` stopping flags, declared once; None turns a check off."""
  desired_accuracy_correlation: float | None = DESIRED_ACCURACY_CORRELATION
  desired_accuracy: float | None = None
  training_time_hrs_limit: float | None = TRAINING_TIME_HRS_LIMIT
  early_stop_proxy_task_if_not_best: bool = True


@dataclasses.dataclass(frozen=True)
class Stop:
  """Where a candidate stopped: the evaluated step that triggered it, and the proxy's cost.

  For a met target, `step` and `cost_hours` are interpolated to the crossing between the
  previous step and this one (Vertex's final_training_steps / final_training_time_in_hours,
  which rank successful candidates by cost); otherwise they are the triggering step's.
  """
  reason: StopReason
  step_index: int
  step: float
  cost_hours: float


@dataclasses.dataclass(frozen=True)
class Crossing:
  """Where a per-step series first reaches a target: what `search_proxy_task` reports."""
  step_index: int  # the first evaluated step at or above the target
  step: float  # interpolated between the previous step and that one
  cost_hours: float  # likewise; NaN without costs


def _crossing(series: np.ndarray, j: int, target: float, over: CorrelationOverSteps) -> Crossing:
  """Vertex's `get_interpolated_step_idx` / `get_interpolated_val` on the step index."""
  cost = over.cost_hours if over.cost_hours is not None else np.full(len(over.steps), np.nan)
  if j == 0 or not np.isfinite(series[j - 1]):
    return Crossing(j, float(over.steps[j]), float(cost[j]))
  frac = (target - series[j - 1]) / (series[j] - series[j - 1])

  def between(values: np.ndarray) -> float:
    return float(values[j - 1] + frac * (values[j] - values[j - 1]))

  return Crossing(j, between(over.steps), between(cost))


def first_step_reaching(over: CorrelationOverSteps, target: float) -> Crossing | None:
  """The first step whose tau is >= target, None if none is."""
  hits = np.flatnonzero(over.taus >= target)
  return _crossing(over.taus, int(hits[0]), target, over) if len(hits) else None


def stopping_condition(over: CorrelationOverSteps, rules: StoppingRules = StoppingRules(),
                       best_cost_hours: float | None = None) -> Stop | None:
  """Why the candidate should stop now, or None to let it train on (a pure function).

  Args:
    over: the candidate's correlation so far.
    rules: the stopping flags.
    best_cost_hours: the cost of the cheapest successful candidate so far, if any; with
      `early_stop_proxy_task_if_not_best` a candidate costing as much stops, it cannot win.
  """
  time_checks = (rules.training_time_hrs_limit is not None
                 or (rules.early_stop_proxy_task_if_not_best and best_cost_hours is not None))
  if time_checks and over.cost_hours is None:
    raise ValueError("a time limit needs the proxy's cost per step (seconds_per_step)")
  targets = ((StopReason.MET_DESIRED_ACCURACY_CORRELATION, over.taus,
              rules.desired_accuracy_correlation),
             (StopReason.MET_DESIRED_ACCURACY, over.median_accuracy, rules.desired_accuracy))
  for j in range(len(over.steps)):
    for reason, series, target in targets:
      if target is not None and series[j] >= target:
        crossing = _crossing(series, j, target, over)
        return Stop(reason, j, crossing.step, crossing.cost_hours)
    if not time_checks:
      continue
    cost = over.cost_hours[j]
    if rules.training_time_hrs_limit is not None and cost >= rules.training_time_hrs_limit:
      return Stop(StopReason.EXCEEDED_TRAIN_TIME_LIMIT, j, float(over.steps[j]), float(cost))
    if (rules.early_stop_proxy_task_if_not_best and best_cost_hours is not None
        and cost >= best_cost_hours):
      return Stop(StopReason.EXCEEDED_BEST_TRAIN_TIME, j, float(over.steps[j]), float(cost))
  return None
