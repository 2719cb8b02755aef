"""How noisy a proxy task is: run-to-run variation, curve smoothness, and whether ranks survive it.

A search compares architectures by one proxy run each. If the same architecture, trained again
with another seed, moves by as much as architectures differ from each other, the search ranks
noise. Vertex AI NAS's `proxy_task_variance_measurement_lib` trains one model several times and
reports two numbers; `noise_verdict` adds the comparison that decides whether they matter.

Where we follow Vertex:
- variance is the coefficient of variation of the final scores, `np.std(x) / np.mean(x)`
  (population std), judged good up to MAX_VARIANCE_TO_BE_GOOD = 0.4;
- smoothness (`_compute_smoothness_from_metrics`): steps and scores each min-max normalized to
  [0, 1], a linear spline through them (`scipy.interpolate.splrep(k=1, s=0)`), its slope sampled
  at 10 points in each of the windows [0, 0.7), [0.7, 0.9), [0.9, 1.0) of training, and the
  absolute sum of the negative slopes. Despite Vertex's docstring ("standard deviation of the
  validation score towards the end"), the code measures how much the curve falls, weighted
  towards the end: a drop of d (normalized) inside the last window adds about 100 d, inside the
  middle one 50 d, earlier about 14 d. A curve that never falls scores 0. Good up to
  MAX_SMOOTHNESS_TO_BE_GOOD = 10; the runs' mean is the proxy's smoothness.

Where we differ, and why:
- runs with a missing or non-finite score are left out and at least 2 must remain (Vertex
  returns 0.0, "no variance", for fewer than 2 runs, which reads as perfect repeatability);
- a flat curve has smoothness 0 (Vertex divides by its zero range and gets NaN).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np
from scipy import interpolate

from nascli.errors import NascliError
from nascli.proxy import correlation

MAX_VARIANCE_TO_BE_GOOD = 0.4
MAX_SMOOTHNESS_TO_BE_GOOD = 10.0
# Fractions of training; the last windows are denser because step-wise learning-rate decay
# makes late wiggles the ones that reorder models.
SMOOTHNESS_SAMPLE_SECTIONS = (0.0, 0.7, 0.9, 1.0)
SMOOTHNESS_POINTS_PER_SECTION = 10
# Two proxy runs rank architectures as their noise-free scores would with this Kendall tau or
# better: search_proxy_task's default target, so a proxy too noisy to meet it is flagged here.
DEFAULT_TARGET_TAU = correlation.DESIRED_ACCURACY_CORRELATION


def _finite_scores(scores: Sequence[float | None], what: str) -> np.ndarray:
  kept = np.array([s for s in scores if s is not None and math.isfinite(s)], dtype=float)
  if len(kept) < 2:
    raise NascliError(f"{what} needs at least 2 finished runs with a score, got {len(kept)}"
                      f" of {len(scores)}")
  return kept


def coefficient_of_variation(scores: Sequence[float | None]) -> float:
  """Vertex's variance: std / mean of the final scores of one model over seeds."""
  x = _finite_scores(scores, "the coefficient of variation")
  mean = float(np.mean(x))
  if mean <= 0:
    raise NascliError(f"the coefficient of variation needs a positive mean score, got {mean}")
  return float(np.std(x) / mean)


def run_to_run_std(scores: Sequence[float | None]) -> float:
  """The sample std (ddof=1) of one model's final scores over seeds: the noise of one run."""
  return float(np.std(_finite_scores(scores, "the run-to-run spread"), ddof=1))


def _sample_points() -> np.ndarray:
  """Vertex's sample positions, built the same way (np.arange per window) to match it exactly."""
  points = []
  for start, end in zip(SMOOTHNESS_SAMPLE_SECTIONS, SMOOTHNESS_SAMPLE_SECTIONS[1:]):
    points += np.arange(start, end, (end - start) / SMOOTHNESS_POINTS_PER_SECTION).tolist()
  return np.array(points)


def _unit(values: np.ndarray) -> np.ndarray:
  span = values.max() - values.min()
  return np.zeros_like(values) if span == 0 else (values - values.min()) / span


def smoothness(steps: Sequence[float], values: Sequence[float]) -> float:
  """Vertex's smoothness of one validation curve: its late-weighted total fall (0 = never falls).

  Raises:
    NascliError: fewer than 2 evaluations, or steps that do not increase.
  """
  x, y = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
  if len(x) != len(y) or len(x) < 2:
    raise NascliError(f"smoothness needs a curve of at least 2 evaluations, got {len(y)} values"
                      f" at {len(x)} steps")
  if np.any(np.diff(x) <= 0) or not np.all(np.isfinite(y)):
    raise NascliError("smoothness needs increasing steps and finite scores")
  spline = interpolate.splrep(_unit(x), _unit(y), k=1, s=0)
  slopes = interpolate.splev(_sample_points(), spline, der=1)
  return float(abs(np.sum(slopes[slopes < 0])))


def mean_smoothness(curves: Sequence[correlation.Curve]) -> float:
  """The proxy's smoothness: the mean over its runs, as Vertex reports it."""
  if not curves:
    raise NascliError("smoothness needs at least one run's validation curve")
  return float(np.mean([smoothness(steps, values) for steps, values in curves]))


@dataclasses.dataclass(frozen=True)
class NoiseVerdict:
  """Whether architectures differ by more than one run's noise, and by how much.

  spread_std: std of the scores across architectures (one run each, as the search sees them).
  noise_std: std of one architecture's score across runs.
  ratio: spread_std / noise_std.
  expected_tau: Kendall tau expected between two independent runs' rankings of the
    architectures (2/pi) arcsin(1 - noise^2 / spread^2): how far noise alone caps any rank
    correlation measured on one run per model.
  """
  spread_std: float
  noise_std: float
  ratio: float
  expected_tau: float
  target_tau: float

  @property
  def distinguishable(self) -> bool:
    return self.expected_tau >= self.target_tau

  def message(self) -> str:
    verb = "exceed" if self.distinguishable else "do not exceed"
    return (f"differences between architectures {verb} the run-to-run noise:"
            f" spread {self.spread_std:.4g} vs noise {self.noise_std:.4g}"
            f" (ratio {self.ratio:.2f}); two runs would rank them with tau"
            f" ~{self.expected_tau:.2f} ({'>=' if self.distinguishable else '<'}"
            f" {self.target_tau:.2f})")


def noise_verdict(architecture_scores: Sequence[float | None], noise_std: float,
                  target_tau: float = DEFAULT_TARGET_TAU) -> NoiseVerdict:
  """Says whether the differences a search sees between architectures exceed the noise.

  The rule, with its assumptions: each observed score is the architecture's true score plus
  independent noise of std `noise_std` (the same for all architectures, both roughly normal).
  The observed variance across architectures V is then the true variance S^2 plus noise^2, so
  two independent runs' scores correlate with rho = S^2 / V = 1 - noise^2 / V, and for normal
  scores Kendall's tau = (2 / pi) arcsin(rho) (Greiner's relation). The differences count as
  exceeding the noise when that tau reaches `target_tau`: with the default 0.65 (Vertex's
  desired correlation) that is a spread about 2.6 times the noise. Below it, repeating the very
  same proxy would not reproduce its own ranking well enough for any proxy to be trusted.

  Args:
    architecture_scores: one score per architecture (None or NaN: failed, left out).
    noise_std: one run's std for one architecture (`run_to_run_std` of its seeds).
    target_tau: the rank agreement required.
  """
  scores = _finite_scores(architecture_scores, "the spread across architectures")
  if not math.isfinite(noise_std) or noise_std < 0:
    raise NascliError(f"the run-to-run std must be a number >= 0, got {noise_std}")
  spread = float(np.std(scores, ddof=1))
  if spread == 0:
    return NoiseVerdict(spread, noise_std, 0.0, 0.0, target_tau)
  rho = max(0.0, 1.0 - (noise_std / spread) ** 2)
  ratio = math.inf if noise_std == 0 else spread / noise_std
  return NoiseVerdict(spread, noise_std, ratio, 2.0 / math.pi * math.asin(rho), target_tau)


@dataclasses.dataclass(frozen=True)
class Measurement:
  """Vertex's variance_and_smoothness.json content, each value with its good/not-good verdict."""
  variance: float
  smoothness: float

  @property
  def variance_good(self) -> bool:
    return self.variance <= MAX_VARIANCE_TO_BE_GOOD

  @property
  def smoothness_good(self) -> bool:
    return self.smoothness <= MAX_SMOOTHNESS_TO_BE_GOOD


def measure(final_scores: Sequence[float | None], curves: Sequence[correlation.Curve]
            ) -> Measurement:
  """The variance of the runs' final scores and the mean smoothness of their curves."""
  return Measurement(coefficient_of_variation(final_scores), mean_smoothness(curves))
