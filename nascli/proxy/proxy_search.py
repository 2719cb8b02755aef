"""`search_proxy_task`'s decisions, pure functions of the flags and the finished trainings.

A candidate proxy is the reference recipe shortened (train steps, the schedule with them), on
smaller images and on part of the training files; the reference recipe itself is no candidate.
Candidates are tried cheapest first; each trains every selected reference model with other
seeds than the reference trainings had (so that the two do not share their noise), and it
succeeds when the rank correlation of its final scores with the reference scores (Kendall's
tau, `correlation.rank_correlation`) meets the target at the lower end of its bootstrap
interval over the models (`correlation.bootstrap_interval`), and its latencies rank as the
reference's do. With `early_stop_proxy_task_if_not_best`, a candidate that cannot be cheaper
than the best success so far is skipped untrained.

Why the interval's lower end, not a second seed: with 5 to 10 models one discordant pair moves
tau by 0.2 to 0.05, so the point tau of one study is itself uncertain, and the interval says by
how much from the trainings already made; a second seed per candidate would double every
candidate's cost and measure only the training noise, not the luck of which models were drawn.

Costs are estimated before a candidate trains (the reference models' measured seconds per step,
times its steps, times its pixel count over the reference's), so the order and the skips are
the same on every rerun, whatever the machine's load; each trained candidate also reports the
cost it measured. Where this differs from Vertex: Vertex stops a candidate's trainings at the
first step whose tau meets the target and reports that step (interpolated); here a candidate
trains its whole (shortened) schedule, because the YAML handed to the search must be the
training that was measured; the first evaluated step from which tau's lower end stays at the
target to the end is reported beside it (`holds_from`), the first rung early stopping may use.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from nascli.errors import NascliError
from nascli.proxy import correlation

# Vertex's example candidates vary the training data (25/50/75/95 %); the default here varies
# the steps, the knob that sets the cost, as shares of the reference's.
DEFAULT_TRAIN_STEPS = "10%,25%,50%"


@dataclasses.dataclass(frozen=True)
class Candidate:
  """One proxy: the reference recipe at these settings (run_spec.ProxySettings)."""
  train_steps: int
  image_size: int
  train_data_fraction: float

  @property
  def name(self) -> str:
    return f"steps{self.train_steps}-size{self.image_size}-data{self.train_data_fraction:g}"

  def relative_cost(self, reference_image_size: int) -> float:
    """Reference-speed steps: training cost grows with the steps and the pixels."""
    return self.train_steps * (self.image_size / reference_image_size) ** 2


@dataclasses.dataclass(frozen=True)
class Targets:
  """The stopping flags (Vertex's), declared once."""
  desired_accuracy_correlation: float | None = correlation.DESIRED_ACCURACY_CORRELATION
  desired_accuracy: float | None = None
  desired_latency_correlation: float | None = correlation.DESIRED_LATENCY_CORRELATION
  training_time_hrs_limit: float | None = correlation.TRAINING_TIME_HRS_LIMIT
  early_stop_proxy_task_if_not_best: bool = True


def _items(text: str, flag: str) -> list[str]:
  items = [item.strip() for item in str(text).split(",")]
  if not items or any(not item for item in items):
    raise NascliError(f"{flag} {text!r}: give comma-separated values, e.g. {flag} 25%,50%")
  return items


def parse_train_steps(text: str, reference_steps: int | None = None) -> list[int]:
  """'10%,25%,200' -> steps; a share needs `reference_steps` (None: only check the syntax)."""
  flag = "--proxy_train_steps"
  out = []
  for item in _items(text, flag):
    share = item.endswith("%")
    try:
      value = float(item[:-1]) if share else int(item)
    except ValueError:
      raise NascliError(f"{flag}: {item!r} is neither a step count nor a share like 25%"
                        ) from None
    if share and not 0 < value <= 100:
      raise NascliError(f"{flag}: {item} must be a share in (0%, 100%]")
    if not share and value < 1:
      raise NascliError(f"{flag}: {item} must be at least 1 step")
    if reference_steps is not None:
      out.append(max(1, round(reference_steps * value / 100)) if share else int(value))
  return sorted(set(out))


def parse_image_sizes(text: str | None) -> list[int] | None:
  if text is None:
    return None
  out = []
  for item in _items(text, "--proxy_image_sizes"):
    if not item.isdigit() or int(item) < 1:
      raise NascliError(f"--proxy_image_sizes: {item!r} is not an image size in pixels")
    out.append(int(item))
  return sorted(set(out))


def parse_data_fractions(text: str) -> list[float]:
  out = []
  for item in _items(text, "--proxy_train_data_fractions"):
    try:
      value = float(item)
    except ValueError:
      value = math.nan
    if not 0 < value <= 1:
      raise NascliError(f"--proxy_train_data_fractions: {item!r} must be a fraction in (0, 1]")
    out.append(value)
  return sorted(set(out))


def candidates(steps: Sequence[int], sizes: Sequence[int], fractions: Sequence[float],
               reference_image_size: int) -> list[Candidate]:
  """Every combination, cheapest first (ties: more data first, then by name)."""
  grid = [Candidate(s, z, f) for s in steps for z in sizes for f in fractions]
  return sorted(grid, key=lambda c: (c.relative_cost(reference_image_size),
                                     -c.train_data_fraction, c.name))


def is_reference(candidate: Candidate, reference_steps: int, reference_image_size: int) -> bool:
  """The candidate is the reference recipe itself (its steps, its image size, all its data):
  its scores would be the reference's own training again, not a proxy of it."""
  return (candidate.train_steps == reference_steps
          and candidate.image_size == reference_image_size
          and candidate.train_data_fraction == 1)


def without_reference(grid: Sequence[Candidate], reference_steps: int,
                      reference_image_size: int) -> tuple[list[Candidate], list[Candidate]]:
  """(the candidates to try, those left out as the reference itself); a grid of nothing but
  the reference is refused in one line, before anything trains."""
  kept = [c for c in grid if not is_reference(c, reference_steps, reference_image_size)]
  left_out = [c for c in grid if c not in kept]
  if not kept:
    raise NascliError(
        f"every candidate is the reference training itself ({reference_steps} steps,"
        f" {reference_image_size}px, all the training data), not a proxy of it: give shorter"
        " --proxy_train_steps (e.g. 25%,50%), smaller --proxy_image_sizes or"
        " --proxy_train_data_fractions below 1")
  return kept, left_out


def estimated_hours(candidate: Candidate, reference_image_size: int,
                    reference_seconds_per_step: float | None) -> float | None:
  if reference_seconds_per_step is None:
    return None
  return candidate.relative_cost(reference_image_size) * reference_seconds_per_step / 3600.0


def skip_reason(estimate: float, best_estimate: float | None, targets: Targets,
                estimate_hours: float | None) -> str | None:
  """Why a candidate is not trained (`estimate`: its relative cost), or None to train it."""
  if (targets.training_time_hrs_limit is not None and estimate_hours is not None
      and estimate_hours >= targets.training_time_hrs_limit):
    return (f"{correlation.StopReason.EXCEEDED_TRAIN_TIME_LIMIT.value}: estimated"
            f" {estimate_hours:.3g} h >= --training_time_hrs_limit"
            f" {targets.training_time_hrs_limit:g}")
  if (targets.early_stop_proxy_task_if_not_best and best_estimate is not None
      and estimate >= best_estimate):
    return (f"{correlation.StopReason.EXCEEDED_BEST_TRAIN_TIME.value}: it cannot be cheaper"
            " than the best candidate so far")
  return None


def median_model(values: Sequence[float | None]) -> int | None:
  """The index of the upper-median valid value (a value some model reached), as Vertex."""
  valid = [(v, i) for i, v in enumerate(values) if v is not None and math.isfinite(v)]
  if not valid:
    return None
  return sorted(valid)[len(valid) // 2][1]


def measured_steps(curves: Sequence[correlation.Curve | None],
                   proxy_scores: Sequence[float | None]) -> list[float]:
  """The steps at which every model with a final score was evaluated: where a tau along
  training is measured, not interpolated between evaluations."""
  sets = [set(float(x) for x in curve[0]) for curve, score in zip(curves, proxy_scores)
          if curve is not None and score is not None and math.isfinite(score)]
  return sorted(set.intersection(*sets)) if sets else []


def holds_from(over_steps: Sequence[dict], target: float) -> float | None:
  """The first evaluated step from which the lower end of tau's interval is at or above
  `target` at that step and at every later evaluated step, the end included; None when the
  last evaluated step falls short. Where a rung at that step (or later) ranks the models, a
  shortened training ranks them as well as the whole proxy."""
  start = None
  for point in sorted(over_steps, key=lambda p: p["step"]):
    low = point.get("low")
    if low is not None and low >= target:
      start = point["step"] if start is None else start
    else:
      start = None
  return start


def evaluate(proxy_scores: Sequence[float | None], reference_scores: Sequence[float | None],
             proxy_latencies: Sequence[float | None], reference_latencies: Sequence[float | None],
             curves: Sequence[correlation.Curve | None], seconds_per_step: Sequence[float | None],
             train_steps: int, targets: Targets, seed: int = 0) -> dict:
  """A trained candidate's quality and cost, and whether it succeeds (and why not).

  The accuracy tau comes with a bootstrap interval over the models
  (`correlation.bootstrap_interval`, seeded by `seed`); the correlation target is met only when
  the interval's lower end meets it. Along training, tau and its interval are computed at each
  step where every model was evaluated (`measured_steps`), and `correlation_holds_from_step`
  is the first of them from which the lower end stays at or above the target (`holds_from`).
  """
  accuracy = correlation.rank_correlation(proxy_scores, reference_scores)
  interval = (correlation.bootstrap_interval(proxy_scores, reference_scores, seed)
              if accuracy.enough else None)
  have_latency = any(v is not None for v in reference_latencies) and any(
      v is not None for v in proxy_latencies)
  latency = (correlation.rank_correlation(proxy_latencies, reference_latencies)
             if have_latency else None)
  middle = median_model(proxy_scores)
  median_accuracy = None if middle is None else float(proxy_scores[middle])
  speed = None if middle is None else seconds_per_step[middle]
  cost_hours = None if speed is None else speed * train_steps / 3600.0
  steps = measured_steps(curves, proxy_scores)
  over = correlation.correlation_over_steps(curves, reference_scores, steps=steps)
  table = correlation.interpolate_curves(curves, steps)
  over_steps = []
  for j, (step, tau) in enumerate(zip(over.steps, over.taus)):
    bounds = (correlation.bootstrap_interval(table[:, j], reference_scores, seed)
              if np.isfinite(tau) else None)
    over_steps.append({"step": float(step), "tau": _finite(tau),
                       "low": None if bounds is None else bounds[0],
                       "high": None if bounds is None else bounds[1]})
  desired = targets.desired_accuracy_correlation
  holds = holds_from(over_steps, desired) if desired is not None else None
  met = []
  if desired is not None and interval is not None and interval[0] >= desired:
    met.append(correlation.StopReason.MET_DESIRED_ACCURACY_CORRELATION.value)
  if (targets.desired_accuracy is not None and median_accuracy is not None
      and median_accuracy >= targets.desired_accuracy):
    met.append(correlation.StopReason.MET_DESIRED_ACCURACY.value)
  problems = []
  if not met:
    if accuracy.reason:
      problems.append(accuracy.reason)
    elif desired is not None:
      shown = ("" if interval is None else
               f", {correlation.INTERVAL_LEVEL:.0%} interval {interval[0]:.3f} to"
               f" {interval[1]:.3f}")
      problems.append(f"accuracy tau {accuracy.tau:.3f}{shown}: its lower end is below"
                      f" --desired_accuracy_correlation {desired}")
    else:
      problems.append("median accuracy below --desired_accuracy")
  if latency is not None and targets.desired_latency_correlation is not None:
    if not latency.enough:
      problems.append(f"latency: {latency.reason}")
    elif latency.tau < targets.desired_latency_correlation:
      problems.append(f"latency tau {latency.tau:.3f} < --desired_latency_correlation"
                      f" {targets.desired_latency_correlation}")
  if (targets.training_time_hrs_limit is not None and cost_hours is not None
      and cost_hours >= targets.training_time_hrs_limit):
    problems.append(f"{correlation.StopReason.EXCEEDED_TRAIN_TIME_LIMIT.value}:"
                    f" {cost_hours:.3g} h")
  return {
      "status": "failed" if problems else "succeeded",
      "reason": "; ".join(problems) if problems else "; ".join(met),
      "accuracy_correlation": _correlation(accuracy, interval),
      "latency_correlation": None if latency is None else _correlation(latency),
      "median_accuracy": median_accuracy,
      "cost_hours": cost_hours,
      "over_steps": over_steps,
      "correlation_holds_from_step": holds,
  }


def _finite(value: float) -> float | None:
  return float(value) if value is not None and np.isfinite(value) else None


def _correlation(c: correlation.Correlation,
                 interval: tuple[float, float] | None = None) -> dict:
  out = {"tau": _finite(c.tau), "p_value": _finite(c.p_value), "num_valid": c.num_valid,
         "num_total": c.num_total, "reason": c.reason}
  if interval is not None:
    out.update(interval=list(interval), level=correlation.INTERVAL_LEVEL)
  return out
