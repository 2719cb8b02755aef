"""Peer searchers for bench/bench_nasbench201.py: other libraries' methods behind one ask/tell.

Every searcher has `ask() -> DNA tuple | None` (six operation indices in the wheel's edge order;
None: it has nothing more to propose) and `tell(dna, reward)` (a float, or (accuracy,
-latency_ms) for two objectives, larger better). The bench's loop (`run_search`) charges every
ask; a re-asked architecture is told the value it was told before, as nascli's controllers are.

  optuna_tpe      Optuna's TPESampler with its defaults (independent, 10 startup trials), through
                  the study's ask/tell API (six categorical parameters).
  optuna_tpe_mv   the same with multivariate=True: in Optuna 5.x the default (multivariate
                  None) already is joint TPE for one objective, so it proposes what optuna_tpe
                  does (checked: identical searches); not run by default.
  optuna_tpe_indep  TPESampler(multivariate=False): one TPE per parameter (Optuna 3-4's default).
  optuna_random   Optuna's RandomSampler.
  optuna_nsga2    Optuna's NSGAIISampler (two objectives), its defaults (population 50).
  pyglove_evolution  pyglove's own `pg.evolution.regularized_evolution` with its defaults
                  (population 100, tournament 10), driven directly (DNASpec propose/feedback;
                  the mutator seeded so that a search repeats).
  syne_rea, syne_kde, syne_bore, syne_morea  Syne Tune's searchers (RegularizedEvolution,
                  KernelDensityEstimator, Bore with xgboost, MultiObjectiveRegularizedEvolution)
                  with their defaults, called directly (suggest / on_trial_complete; they
                  minimize, so they get -accuracy and latency).
  bananas         BANANAS (White et al., AAAI 2021) in numpy: path encoding (the 4 input-output
                  paths of the cell, one feature per sequence of non-`none` operations: 84),
                  an ensemble of 5 MLPs (2 x 32 ReLU, 100 full-batch Adam steps on the
                  standardized rewards, refit every 3rd proposal: sized to fit the bench's
                  time budget; BANANAS refits every proposal), independent Thompson sampling over 1-edit mutations of the 10 best
                  architectures; 10 random architectures first; never asks a known one.
"""

from __future__ import annotations

import itertools
import logging
import warnings
from typing import Any, Callable

import numpy as np

OPS = ('none', 'skip_connect', 'nor_conv_1x1', 'nor_conv_3x3', 'avg_pool_3x3')
NUM_EDGES = 6
# The wheel's edges: Op0 1<-0, Op1 2<-0, Op2 2<-1, Op3 3<-0, Op4 3<-1, Op5 3<-2 (checked: an
# architecture whose only operation is on Op3 trains, one with only Op0 or Op5 does not).
PATHS = ((3,), (0, 4), (1, 5), (0, 2, 5))
Dna = tuple[int, ...]


def _values(reward: Any) -> list[float]:
  return [float(v) for v in reward] if isinstance(reward, (list, tuple)) else [float(reward)]


class OptunaSearcher:
  def __init__(self, sampler: Any, num_objectives: int):
    import optuna  # pylint: disable=g-import-not-at-top
    optuna.logging.set_verbosity(logging.ERROR)
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      self.study = optuna.create_study(directions=['maximize'] * num_objectives,
                                       sampler=sampler)
    self.trial = None

  def ask(self) -> Dna:
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      self.trial = self.study.ask()
      return tuple(self.trial.suggest_categorical(f'Op{i}', list(range(len(OPS))))
                   for i in range(NUM_EDGES))

  def tell(self, dna: Dna, reward: Any) -> None:
    del dna
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      values = _values(reward)
      self.study.tell(self.trial, values[0] if len(values) == 1 else values)


def _optuna(kind: str) -> Callable[..., OptunaSearcher]:
  def make(seed: int, num_objectives: int = 1, **options: Any) -> OptunaSearcher:
    import optuna  # pylint: disable=g-import-not-at-top
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      if kind == 'tpe':
        sampler = optuna.samplers.TPESampler(seed=seed, **options)
      elif kind == 'tpe_mv':
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, **options)
      elif kind == 'tpe_indep':
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=False, **options)
      elif kind == 'random':
        sampler = optuna.samplers.RandomSampler(seed=seed)
      else:
        sampler = optuna.samplers.NSGAIISampler(seed=seed, **options)
    return OptunaSearcher(sampler, num_objectives)
  return make


class PygloveSearcher:
  """A pyglove DNAGenerator on the cell's DNASpec, without nascli's controller."""

  def __init__(self, generator: Any):
    import pyglove as pg  # pylint: disable=g-import-not-at-top
    spec = pg.dna_spec(pg.Dict({f'Op{i}': pg.oneof(list(OPS)) for i in range(NUM_EDGES)}))
    self.generator = generator
    self.generator.setup(spec)
    self.pending: dict[Dna, list[Any]] = {}

  def ask(self) -> Dna:
    dna = self.generator.propose()
    key = tuple(dna.to_numbers())
    self.pending.setdefault(key, []).append(dna)
    return key

  def tell(self, dna: Dna, reward: Any) -> None:
    values = _values(reward)
    self.generator.feedback(self.pending[dna].pop(0),
                            values[0] if len(values) == 1 else tuple(values))


def _pyglove_evolution(seed: int, num_objectives: int = 1, **options: Any) -> PygloveSearcher:
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  del num_objectives
  return PygloveSearcher(pg.evolution.regularized_evolution(
      mutator=pg.evolution.mutators.Uniform(seed=seed), seed=seed, **options))


class SyneSearcher:
  def __init__(self, searcher: Any, num_objectives: int):
    self.searcher = searcher
    self.num_objectives = num_objectives
    self.trial_id = 0
    self.config = None

  def ask(self) -> Dna | None:
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      self.config = self.searcher.suggest()
    if self.config is None:
      return None
    return tuple(OPS.index(self.config[f'Op{i}']) for i in range(NUM_EDGES))

  def tell(self, dna: Dna, reward: Any) -> None:
    del dna
    values = _values(reward)
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')
      if self.num_objectives == 1:
        self.searcher.on_trial_complete(self.trial_id, self.config, -values[0])  # minimizes
      else:
        self.searcher.on_trial_complete(self.trial_id, self.config, [-v for v in values])
    self.trial_id += 1


def _syne(kind: str) -> Callable[..., SyneSearcher]:
  def make(seed: int, num_objectives: int = 1, **options: Any) -> SyneSearcher:
    logging.getLogger('syne_tune').setLevel(logging.ERROR)
    from syne_tune.config_space import choice  # pylint: disable=g-import-not-at-top
    space = {f'Op{i}': choice(list(OPS)) for i in range(NUM_EDGES)}
    if kind == 'rea':
      from syne_tune.optimizer.schedulers.searchers.regularized_evolution import (  # pylint: disable=g-import-not-at-top
          RegularizedEvolution)
      searcher = RegularizedEvolution(space, random_seed=seed, **options)
    elif kind == 'kde':
      from syne_tune.optimizer.schedulers.searchers.kde import (  # pylint: disable=g-import-not-at-top
          KernelDensityEstimator)
      searcher = KernelDensityEstimator(space, random_seed=seed, **options)
    elif kind == 'bore':
      from syne_tune.optimizer.schedulers.searchers.bore import Bore  # pylint: disable=g-import-not-at-top
      searcher = Bore(space, random_seed=seed, **options)
    else:
      from syne_tune.optimizer.schedulers.multiobjective.multi_objective_regularized_evolution import (  # pylint: disable=g-import-not-at-top
          MultiObjectiveRegularizedEvolution)
      searcher = MultiObjectiveRegularizedEvolution(space, random_seed=seed, **options)
    return SyneSearcher(searcher, num_objectives)
  return make


# ---------------------------------------------------------------------------------------------
# BANANAS


def _path_index() -> dict[tuple[int, ...], int]:
  index = {}
  for length in (1, 2, 3):
    for ops in itertools.product(range(1, len(OPS)), repeat=length):
      index[ops] = len(index)
  return index


PATH_INDEX = _path_index()


def path_encoding(dnas: np.ndarray) -> np.ndarray:
  """(n, 6) operation indices -> (n, 84) path features: one per sequence of non-`none`
  operations from the input to the output node that the cell contains."""
  dnas = np.asarray(dnas)
  out = np.zeros((len(dnas), len(PATH_INDEX)), dtype=np.float32)
  for path in PATHS:
    ops = dnas[:, list(path)]
    alive = np.all(ops > 0, axis=1)
    base = {1: 0, 2: 4, 3: 20}[len(path)]
    flat = np.zeros(len(dnas), dtype=np.int64)
    for j in range(len(path)):
      flat = flat * 4 + np.maximum(ops[:, j] - 1, 0)
    rows = np.nonzero(alive)[0]
    out[rows, base + flat[rows]] = 1.0
  return out


class MLPEnsemble:
  """`members` MLPs (two ReLU layers) trained at once by full-batch Adam on the squared error."""

  def __init__(self, rng: np.random.Generator, members: int = 5, hidden: int = 32,
               steps: int = 150, lr: float = 0.01):
    self.rng, self.members, self.hidden, self.steps, self.lr = rng, members, hidden, steps, lr

  def fit(self, x: np.ndarray, y: np.ndarray) -> 'MLPEnsemble':
    e, d, h = self.members, x.shape[1], self.hidden
    r = self.rng
    params = [r.normal(0, np.sqrt(2 / d), (e, d, h)), np.zeros((e, 1, h)),
              r.normal(0, np.sqrt(2 / h), (e, h, h)), np.zeros((e, 1, h)),
              r.normal(0, np.sqrt(1 / h), (e, h, 1)), np.zeros((e, 1, 1))]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    y = y[None, :, None]
    n = len(x)
    for t in range(1, self.steps + 1):
      w1, b1, w2, b2, w3, b3 = params
      z1 = x @ w1 + b1
      a1 = np.maximum(z1, 0)
      z2 = a1 @ w2 + b2
      a2 = np.maximum(z2, 0)
      out = a2 @ w3 + b3
      g = 2 * (out - y) / n
      gw3 = a2.transpose(0, 2, 1) @ g
      gb3 = g.sum(axis=1, keepdims=True)
      g2 = (g @ w3.transpose(0, 2, 1)) * (z2 > 0)
      gw2 = a1.transpose(0, 2, 1) @ g2
      gb2 = g2.sum(axis=1, keepdims=True)
      g1 = (g2 @ w2.transpose(0, 2, 1)) * (z1 > 0)
      gw1 = x.T[None] @ g1
      gb1 = g1.sum(axis=1, keepdims=True)
      for i, grad in enumerate((gw1, gb1, gw2, gb2, gw3, gb3)):
        m[i] = 0.9 * m[i] + 0.1 * grad
        v[i] = 0.999 * v[i] + 0.001 * grad * grad
        params[i] = params[i] - self.lr * (m[i] / (1 - 0.9 ** t)) / (
            np.sqrt(v[i] / (1 - 0.999 ** t)) + 1e-8)
    self.params = params
    return self

  def predict(self, x: np.ndarray) -> np.ndarray:
    """(members, n) predictions."""
    w1, b1, w2, b2, w3, b3 = self.params
    a1 = np.maximum(x @ w1 + b1, 0)
    a2 = np.maximum(a1 @ w2 + b2, 0)
    return (a2 @ w3 + b3)[:, :, 0]


def mutations(dna: Dna) -> list[Dna]:
  """All architectures one edit away (24)."""
  out = []
  for i in range(NUM_EDGES):
    for op in range(len(OPS)):
      if op != dna[i]:
        out.append(dna[:i] + (op,) + dna[i + 1:])
  return out


class Bananas:
  """BANANAS: path-encoded MLP ensemble, independent Thompson sampling over mutations."""

  def __init__(self, seed: int, num_init: int = 10, top: int = 10, members: int = 5,
               steps: int = 100, refit_every: int = 3):
    self.rng = np.random.default_rng([seed, 2021])
    self.num_init, self.top, self.refit_every = num_init, top, refit_every
    self.model = MLPEnsemble(self.rng, members=members, steps=steps)
    self.seen: dict[Dna, float] = {}
    self.fitted_at = -1

  def _random_new(self) -> Dna:
    while True:
      dna = tuple(int(v) for v in self.rng.integers(0, len(OPS), NUM_EDGES))
      if dna not in self.seen:
        return dna

  def ask(self) -> Dna:
    if len(self.seen) < self.num_init:
      return self._random_new()
    if self.fitted_at < 0 or len(self.seen) - self.fitted_at >= self.refit_every:
      dnas = list(self.seen)
      y = np.array([self.seen[d] for d in dnas])
      y = (y - y.mean()) / (y.std() + 1e-9)
      self.model.fit(path_encoding(np.array(dnas)), y)
      self.fitted_at = len(self.seen)
    best = sorted(self.seen, key=self.seen.get, reverse=True)[:self.top]
    candidates = sorted({m for b in best for m in mutations(b)} - set(self.seen))
    if not candidates:
      return self._random_new()
    pred = self.model.predict(path_encoding(np.array(candidates)))
    mean, std = pred.mean(axis=0), pred.std(axis=0, ddof=1)
    sample = mean + std * self.rng.standard_normal(len(candidates))  # independent Thompson
    return candidates[int(np.argmax(sample))]

  def tell(self, dna: Dna, reward: Any) -> None:
    self.seen[dna] = _values(reward)[0]


def _bananas(seed: int, num_objectives: int = 1, **options: Any) -> Bananas:
  if num_objectives != 1:
    raise ValueError('bananas optimizes one objective')
  return Bananas(seed, **options)


# name -> (factory(seed, num_objectives, **options), objectives it takes)
PEERS: dict[str, tuple[Callable[..., Any], tuple[int, ...]]] = {
    'optuna_tpe': (_optuna('tpe'), (1, 2)),
    'optuna_tpe_mv': (_optuna('tpe_mv'), (1, 2)),
    'optuna_tpe_indep': (_optuna('tpe_indep'), (1, 2)),
    'optuna_random': (_optuna('random'), (1, 2)),
    'optuna_nsga2': (_optuna('nsga2'), (2,)),
    'pyglove_evolution': (_pyglove_evolution, (1,)),
    'syne_rea': (_syne('rea'), (1,)),
    'syne_kde': (_syne('kde'), (1,)),
    'syne_bore': (_syne('bore'), (1,)),
    'syne_morea': (_syne('morea'), (2,)),
    'bananas': (_bananas, (1,)),
}
