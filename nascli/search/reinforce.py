"""REINFORCE (Williams 1992) over the decisions, the policy-gradient controller of NAS papers.

As in MnasNet's and Vertex AI NAS's RL controller and NAS-Bench-201's REINFORCE baseline (minus
their RNN: one softmax per decision, as NAS-Bench-201's baseline has): each decision of the space
has its own logits; a proposal samples every active decision from its softmax (a choice of a
distinct/sorted pg.sublist_of only among the candidates still allowed); a reward moves the
logits by Adam along `advantage * grad log p(dna)`, the advantage being the reward minus an
exponential moving average of the earlier rewards (the baseline; bias-corrected, so the first
reward is its own baseline and teaches nothing).

A reward that comes after other proposals were made (parallel trials) updates the policy as it
is then, for the DNA that was sampled: the usual asynchronous approximation. Sampling uses a
numpy Generator seeded with the search's seed, so proposals depend only on the seed and the
rewards in their order: journal replay rebuilds the policy exactly. Scalar rewards only;
categorical decisions only (pg.floatv is refused).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyglove as pg

from nascli.search.algorithm_registry import _float_option
from nascli.search.algorithm_registry import _reject_options
from nascli.search.algorithm_registry import register_algorithm
from nascli.search.decisions import Decisions

NAME = 'reinforce'
DEFAULT_LEARNING_RATE = 0.1  # Adam's step on the logits (the benchmark in BENCHMARKS.md)
DEFAULT_BASELINE_DECAY = 0.9  # NAS-Bench-201's EMA momentum
OPTIONS = ('learning_rate', 'baseline_decay')
_ADAM_BETAS = (0.9, 0.999)
_ADAM_EPS = 1e-8


@register_algorithm(NAME)
def make(seed: int, **options: Any) -> pg.DNAGenerator:
  _reject_options(NAME, options, OPTIONS)
  return Reinforce(
      seed=seed,
      learning_rate=_float_option(NAME, 'learning_rate',
                                  options.get('learning_rate', DEFAULT_LEARNING_RATE), 0, 10,
                                  low_open=True),
      baseline_decay=_float_option(NAME, 'baseline_decay',
                                   options.get('baseline_decay', DEFAULT_BASELINE_DECAY), 0, 1,
                                   high_open=True))


@pg.members([
    ('seed', pg.typing.Int(), 'Seeds the sampling.'),
    ('learning_rate', pg.typing.Float(min_value=0.0, default=DEFAULT_LEARNING_RATE),
     "Adam's learning rate on the logits."),
    ('baseline_decay', pg.typing.Float(min_value=0.0, max_value=1.0,
                                       default=DEFAULT_BASELINE_DECAY),
     'Weight of the past in the moving-average baseline.'),
])
class Reinforce(pg.DNAGenerator):
  """A softmax policy per decision, trained by REINFORCE with a moving-average baseline."""

  def _setup(self) -> None:
    self._decisions = Decisions(self.dna_spec, NAME, allow_floats=False)
    sizes = [d.num_candidates for d in self._decisions.items]
    self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    self._logits = np.zeros(self._offsets[-1])
    self._adam_m = np.zeros_like(self._logits)
    self._adam_v = np.zeros_like(self._logits)
    self._steps = 0
    self._rng = np.random.default_rng(self.seed)
    self._baseline_sum = 0.0  # bias-corrected EMA: sum / weight
    self._baseline_weight = 0.0

  def _probabilities(self, i: int, allowed: list[int] | None) -> np.ndarray:
    logits = self._logits[self._offsets[i]:self._offsets[i + 1]]
    if allowed is not None:
      masked = np.full_like(logits, -np.inf)
      masked[allowed] = logits[allowed]
      logits = masked
    p = np.exp(logits - logits.max())
    return p / p.sum()

  def _propose(self) -> pg.DNA:
    def choose(i, decision, allowed):
      del decision
      p = self._probabilities(i, allowed)
      # Inverse CDF on one uniform draw: the same stream gives the same choice everywhere.
      return int(min(np.searchsorted(np.cumsum(p), self._rng.random(), side='right'),
                     len(p) - 1))
    return self._decisions.to_dna(self._decisions.walk(choose))

  @property
  def baseline(self) -> float | None:
    return self._baseline_sum / self._baseline_weight if self._baseline_weight else None

  def _feedback(self, dna: pg.DNA, reward: float) -> None:
    reward = float(reward)
    baseline = self.baseline
    advantage = 0.0 if baseline is None else reward - baseline
    decay = self.baseline_decay
    self._baseline_sum = decay * self._baseline_sum + (1 - decay) * reward
    self._baseline_weight = decay * self._baseline_weight + (1 - decay)
    self._steps += 1
    grad = np.zeros_like(self._logits)
    for i, value, allowed in self._decisions.read(dna):
      g = -self._probabilities(i, allowed)
      g[value] += 1.0
      grad[self._offsets[i]:self._offsets[i + 1]] += g
    grad *= advantage
    # Adam, ascending: the step is ~learning_rate per logit whatever the rewards' scale.
    b1, b2 = _ADAM_BETAS
    self._adam_m = b1 * self._adam_m + (1 - b1) * grad
    self._adam_v = b2 * self._adam_v + (1 - b2) * grad * grad
    m_hat = self._adam_m / (1 - b1 ** self._steps)
    v_hat = self._adam_v / (1 - b2 ** self._steps)
    self._logits += self.learning_rate * m_hat / (np.sqrt(v_hat) + _ADAM_EPS)
