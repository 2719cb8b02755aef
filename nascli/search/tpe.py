"""TPE (Bergstra et al. 2011): Optuna's TPESampler, driven through ask/tell, as a pyglove generator.

Each decision of the search space is an Optuna parameter named by its decision id: a pg.oneof
(or one choice of a pg.sublist_of) a categorical over its candidate indices, a pg.floatv a float
(log-scaled where pyglove's is). A proposal is one `study.ask()`, its parameters suggested
define-by-run in DNA order, so a decision under a candidate exists only when that candidate is
chosen. The asked trial stays running (Optuna's constant liar then steers parallel proposals
apart) until its DNA's reward comes: `study.tell` with it. Rewards are maximized; a tuple reward
makes a multi-objective study (all directions maximize: the caller signs each value).

A choice of a multi-choice that breaks its distinct/sorted rule (TPE samples each choice on its
own) is moved to the nearest allowed candidate. That trial's parameters are then not the DNA's,
so it is closed as failed (TPE ignores failed trials) and the reward is added as a completed
trial with the DNA's own parameters. The same happens for a reward with no running trial left
for its DNA.

Optuna's TPE is deterministic given its seed and the sequence of asks and tells, which is what
resuming by journal replay (controller.Controller.rebuild) needs. Optuna is imported on setup,
so that naming the algorithm costs nothing.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import warnings
from typing import Any, Iterator

import pyglove as pg

from nascli.search.algorithm_registry import _bool_option
from nascli.search.algorithm_registry import _int_option
from nascli.search.algorithm_registry import _reject_options
from nascli.search.algorithm_registry import register_algorithm
from nascli.search.decisions import Decisions

NAME = 'tpe'
DEFAULT_N_STARTUP_TRIALS = 10  # Optuna's default: random proposals before the model is used
DEFAULT_N_EI_CANDIDATES = 24  # Optuna's default: samples scored by expected improvement
OPTIONS = ('n_startup_trials', 'n_ei_candidates', 'multivariate')


@register_algorithm(NAME, objectives=(1, None))
def make(seed: int, num_objectives: int = 1, **options: Any) -> pg.DNAGenerator:
  """TPE with Optuna's defaults unless told otherwise; `multivariate` None: Optuna's own choice
  (joint TPE for one objective, independent per parameter for several)."""
  _reject_options(NAME, options, OPTIONS)
  multivariate = options.get('multivariate')
  return TPE(
      seed=seed, num_objectives=num_objectives,
      n_startup_trials=_int_option(NAME, 'n_startup_trials',
                                   options.get('n_startup_trials', DEFAULT_N_STARTUP_TRIALS), 0),
      n_ei_candidates=_int_option(NAME, 'n_ei_candidates',
                                  options.get('n_ei_candidates', DEFAULT_N_EI_CANDIDATES), 1),
      multivariate=None if multivariate is None else _bool_option(NAME, 'multivariate',
                                                                  multivariate))


@pg.members([
    ('seed', pg.typing.Int(), 'Seeds the sampler.'),
    ('num_objectives', pg.typing.Int(min_value=1, default=1), 'Values per reward.'),
    ('n_startup_trials', pg.typing.Int(min_value=0, default=DEFAULT_N_STARTUP_TRIALS),
     'Completed trials sampled at random before TPE models the rewards.'),
    ('n_ei_candidates', pg.typing.Int(min_value=1, default=DEFAULT_N_EI_CANDIDATES),
     'Candidates drawn from the good-trials density, the best ratio is proposed.'),
    ('multivariate', pg.typing.Bool().noneable(), 'Joint TPE (None: Optuna decides).'),
])
class TPE(pg.DNAGenerator):
  """Optuna's TPESampler behind pyglove's propose/feedback."""

  @property
  def multi_objective(self) -> bool:
    return self.num_objectives > 1

  def _setup(self) -> None:
    import optuna  # pylint: disable=g-import-not-at-top
    # A trial line per tell is noise in a search's log; warnings (deprecations) stay quiet too.
    optuna.logging.set_verbosity(logging.ERROR)
    self._optuna = optuna
    self._decisions = Decisions(self.dna_spec, NAME)
    self._distributions = {
        d.name: (optuna.distributions.CategoricalDistribution(list(range(d.num_candidates)))
                 if d.num_candidates else
                 optuna.distributions.FloatDistribution(d.float_range[0], d.float_range[1],
                                                        log=d.float_range[2]))
        for d in self._decisions.items}
    with _quiet():
      sampler = optuna.samplers.TPESampler(
          seed=self.seed, n_startup_trials=self.n_startup_trials,
          n_ei_candidates=self.n_ei_candidates, multivariate=self.multivariate)
      self._study = optuna.create_study(
          directions=['maximize'] * self.num_objectives, sampler=sampler)
    # DNA numbers -> its asked trials still running, oldest first.
    self._running: dict[tuple[Any, ...], collections.deque[Any]] = collections.defaultdict(
        collections.deque)

  def _propose(self) -> pg.DNA:
    with _quiet():
      trial = self._study.ask()
      repaired = False

      def choose(i, decision, allowed):
        del i
        nonlocal repaired
        if not decision.num_candidates:
          low, high, log = decision.float_range
          return trial.suggest_float(decision.name, low, high, log=log)
        value = trial.suggest_categorical(decision.name, list(range(decision.num_candidates)))
        if allowed is not None and value not in allowed:
          repaired = True
          value = min(allowed, key=lambda c: (abs(c - value), c))
        return value

      numbers = self._decisions.walk(choose)
      if repaired:
        self._study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
      else:
        self._running[tuple(numbers)].append(trial)
    return self._decisions.to_dna(numbers)

  def _feedback(self, dna: pg.DNA, reward: float | tuple[float, ...]) -> None:
    values = list(reward) if isinstance(reward, tuple) else [reward]
    running = self._running.get(tuple(dna.to_numbers()))
    with _quiet():
      if running:
        self._study.tell(running.popleft(), values)
        return
      read = self._decisions.read(dna)
      params = {self._decisions.items[i].name: value for i, value, _ in read}
      self._study.add_trial(self._optuna.trial.create_trial(
          params=params, distributions={k: self._distributions[k] for k in params},
          values=values))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
  """Optuna warns of experimental and deprecated arguments on many calls; nascli chose them."""
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    yield
