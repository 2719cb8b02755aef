"""The trial scheduler: how far each trial trains (`--early_stopping none|median|asha|
asha_promotions`).

The search engine splits as Ray Tune does: the controller proposes architectures and learns
rewards, the scheduler decides which trials go on. With early stopping a trial trains in rungs:
to `min_steps`, `min_steps * eta`, `min_steps * eta**2`, ... (eta: `--reduction_factor`), each
below the trial's `trainer.train_steps`, and last to `train_steps` itself. One attempt per rung:
the trial trains to the rung's step (the learning-rate schedule stays that of the full budget:
training stops early, `train_steps` is not shortened), evaluates and reports; the driver
journals a `rung` event, then the scheduler's decision, `promoted` or `stopped`. A promoted
trial's next attempt resumes from its own checkpoint at the rung's step, so no step is trained
twice. The last rung ends as `completed`, as without early stopping. (`asha_promotions`
decides nothing at a report: the trial pauses until a free worker promotes it, `next_job`.)

Decisions are pure functions of the journal's rung reports in journal order (`decide`): a
report is judged against the reports journaled before it, never later ones. A search killed
between a report and its decision makes that decision on resume (`owed`), from the same
reports, so it is the decision the uninterrupted search made or would have made.

A stopped trial is final (`stopped`, with its last rung's reward and metrics).

What the controller learns: every trial's rung-0 reward, fed once, as the trial reports it
(the `rung` event is marked `feedback`; Controller.rebuild replays it there), under every
scheduler. Rung 0 is the one budget every trial reaches, so the rewards the algorithm compares
(evolution's tournaments, TPE's good/bad split, GP-BO's regression) were all measured after the
same training. Feeding each trial its reward at the rung where its fate was decided (as this
module did for the stop rules, and as Ray Tune gives a searcher a stopped trial's last result)
puts a trial stopped at a third of the budget beside one trained fully: the gap is mostly the
training the first never got, not its architecture. Feeding a trial again once it reaches a
higher rung is not open: pyglove's `DNAGenerator.feedback` takes one reward per proposal
(TPE tells its Optuna trial once; evolution adds a population member per feedback), and a
second, higher-budget reward for the same architecture would again sit beside the others'
rung-0 ones. So the full-budget reward of a trial trained to the end is journaled (`completed`),
ranks the search's results and picks its exports, but is not fed to the controller; learning
from rewards at several budgets needs a model per budget (BOHB), which no controller here has.
No trial is hidden from the controller either: pyglove's `Feedback.skip()` would keep
regularized evolution on its random initial population longer. (A journal written before
this rule fed a stopped trial its last rung's reward at `stopped` and a completed one its full
reward at `completed`; Controller.rebuild replays such a journal as it was written.)

Why not pyglove's step-wise policies (`pg.early_stopping.StepWise`, `early_stop_by_rank`):
they hold their gate histories inside a stateful policy fed `pg.tuning.Trial` objects, and
`recover` rebuilds the decisions of finished trials from `Trial.infeasible`, where here a
decision must be a function of the journal alone, recomputed the same way on every resume;
their rank rule compares a trial with the history before it only (`int((n - 1) * p)`-th best),
not Ray Tune's quantile cutoff over all earlier results at the rung;
they have no median rule; and this module must import without pyglove (the CLI's flag checks run
before any framework loads, and benchmarks simulate searches through it).
"""

import abc
import dataclasses
import warnings
from typing import AbstractSet, Any, Callable, Sequence

from nascli.errors import NascliError
from nascli.search import promotion
# The ladder's and the journal readers' names, re-exported: callers know them from here.
# pylint: disable=unused-import
from nascli.search.rungs import DECISIONS
from nascli.search.rungs import DEFAULT_REDUCTION_FACTOR
from nascli.search.rungs import PROMOTED
from nascli.search.rungs import RUNG
from nascli.search.rungs import STOPPED
from nascli.search.rungs import Report
from nascli.search.rungs import fully_trained
from nascli.search.rungs import halving_survivors
from nascli.search.rungs import rung_steps
from nascli.search.rungs import trials_needed
from nascli.search.scheduler_journal import compute_spent
from nascli.search.scheduler_journal import decide
from nascli.search.scheduler_journal import journaled_decisions
from nascli.search.scheduler_journal import owed
from nascli.search.scheduler_journal import replayed_decisions
from nascli.search.scheduler_journal import reports
# pylint: enable=unused-import

# `--early_stopping auto` (the search commands' default) is a choice, not a scheduler: `resolve`
# makes it asha_promotions when a trial's first rung trains at least this many epochs of its
# training data, else none. Measured on the embedded tasks (BENCHMARKS.md): first rungs of
# 0.5-1 epoch rank architectures near chance against the full budget (Kendall tau 0.26-0.33),
# rungs of 2 epochs and more rank them with tau 0.58-0.74, where promotions reached no early
# stopping's best with the least compute of the schedulers compared.
AUTO = 'auto'
AUTO_MIN_FIRST_RUNG_EPOCHS = 2.0
AUTO_CHOICE = 'asha_promotions'
# ... and only when --max_nas_trial is at least eta ** (the ladder's rungs, the full budget
# counted): `trials_needed`.
# Median stopping judges a trial only once this many other trials reported at its rung.
MEDIAN_MIN_SAMPLES = 3


@dataclasses.dataclass
class SchedulerSettings:
  """--early_stopping, --min_steps, --reduction_factor: part of the search's settings (a
  resumed search must decide as the first run did)."""
  name: str = 'none'
  # The first rung: steps before a trial's first report; None: ceil(train_steps / eta**2).
  min_steps: int | None = None
  reduction_factor: int = DEFAULT_REDUCTION_FACTOR  # eta: rung k is min_steps * eta**k

  @property
  def early_stopping(self) -> bool:
    """Trials may train in rungs (`auto`: once `resolve` says so)."""
    return _SCHEDULERS[self.name].early_stopping if self.name in _SCHEDULERS else True


def few_trials(settings: SchedulerSettings, train_steps: int, max_trials: int) -> str | None:
  """The warning line for an early-stopping scheduler the user named whose ladder needs more
  trials than --max_nas_trial (`trials_needed`), saying what happens; None when it has enough
  (or trains no rungs). `auto` never gets here: it chooses none then."""
  if settings.name == AUTO or not settings.early_stopping:
    return None
  eta = settings.reduction_factor
  steps = rung_steps(settings.min_steps, eta, train_steps)
  need = trials_needed(len(steps), eta)
  if len(steps) < 2 or max_trials >= need:
    return None
  full = fully_trained(max_trials, len(steps), eta)
  what = (f'asha_promotions trains at least {full} of them to the full budget once every trial'
          f' is proposed (the top {eta} of each rung go on) and stops at most'
          f' {max_trials - full} at rungs of {", ".join(str(x) for x in steps[:-1])} steps'
          if settings.name == AUTO_CHOICE else
          f'each rung judges a trial against at most {max_trials - 1} other result(s)')
  return (f'warning: --early_stopping {settings.name} with --max_nas_trial {max_trials}: its'
          f' ladder of {len(steps)} rungs (--reduction_factor {eta}) needs at least {need}'
          f' trials to train {eta} to the full budget; with {max_trials}, {what}'
          ' (--early_stopping none trains every trial fully)')


def resolve(settings: SchedulerSettings, train_steps: int, steps_per_epoch: int | None,
            multi_objective: bool = False, max_trials: int | None = None
            ) -> tuple[SchedulerSettings, str | None]:
  """The scheduler a search runs with, and for `auto` the line that says why.

  `auto`: asha_promotions when the first rung (--min_steps, else train_steps / eta**2 rounded
  up) trains at least AUTO_MIN_FIRST_RUNG_EPOCHS epochs, or when --min_steps is given (the user
  asked for rungs), and `max_trials` (--max_nas_trial) is at least `trials_needed` for the
  ladder; none when the rungs would be shorter, when no rung comes before the end, with fewer
  trials than the ladder needs, or with --objectives (early stopping ranks one scalar).
  `max_trials` None: not checked. --max_nas_trial may change on resume, so a resumed search
  takes the choice its journal recorded (search_loop), not this function's.
  """
  if settings.name != AUTO:
    return settings, None
  eta = settings.reduction_factor
  steps = rung_steps(settings.min_steps, eta, train_steps)
  epochs = steps[0] / steps_per_epoch if steps_per_epoch else None
  at = (f'{steps[0]} steps' + (f', {epochs:.2g} epochs' if epochs is not None else ''))
  none = dataclasses.replace(settings, name='none', min_steps=None,
                             reduction_factor=DEFAULT_REDUCTION_FACTOR)
  if multi_objective:
    return none, 'early stopping (auto): none (--objectives: rungs rank one scalar reward)'
  if len(steps) < 2:
    return none, (f'early stopping (auto): none (the trials train {train_steps} steps: no rung'
                  ' comes before the end)')
  if settings.min_steps is None and epochs is None:
    return none, (f'early stopping (auto): none (a first rung would train {at}; the training'
                  ' data does not say its size, so how many epochs that is is unknown;'
                  ' --early_stopping asha_promotions forces rungs)')
  if settings.min_steps is None and epochs < AUTO_MIN_FIRST_RUNG_EPOCHS:
    return none, (f'early stopping (auto): none (a first rung would train {at}, under'
                  f' {AUTO_MIN_FIRST_RUNG_EPOCHS:g} epochs, too short to rank architectures;'
                  ' --early_stopping asha_promotions forces rungs)')
  need = trials_needed(len(steps), eta)
  if max_trials is not None and max_trials < need:
    full = halving_survivors(max_trials, len(steps), eta)
    return none, (f'early stopping (auto): none (--max_nas_trial {max_trials}: rungs at'
                  f' {", ".join(str(x) for x in steps)} steps with --reduction_factor {eta}'
                  f' need at least {need} trials to train {eta} to the full budget; with'
                  f' {max_trials}, successive halving would train {full} fully and judge the'
                  f' rest at rungs whose ranking is rough; --early_stopping asha_promotions forces rungs)')
  chosen = dataclasses.replace(settings, name=AUTO_CHOICE)
  return chosen, (f'early stopping (auto): {AUTO_CHOICE}, rungs at'
                  f' {", ".join(str(x) for x in steps)} steps (the first trains {at};'
                  ' --early_stopping none turns it off)')


class Scheduler(abc.ABC):
  """Decides, from the rung reports journaled so far, whether a trial goes on."""

  early_stopping = True  # False: trials train their whole budget in one attempt, no rungs
  # False: a rung report waits (the trial pauses) until a free worker promotes it
  # (`next_job`); the search stops the trials still paused when it ends.
  decides_at_report = True

  def __init__(self, settings: SchedulerSettings):
    self.settings = settings

  @abc.abstractmethod
  def should_continue(self, report: Report, history: Sequence[Report]) -> bool:
    """True: promote the trial to its next rung; False: stop it. `history`: every report
    journaled before `report`, in journal order (other trials' and this trial's own)."""


_SCHEDULERS: dict[str, type[Scheduler]] = {}


def register_scheduler(name: str) -> Callable[[type[Scheduler]], type[Scheduler]]:
  """Registers a Scheduler class as `--early_stopping name`."""
  def register(cls: type[Scheduler]) -> type[Scheduler]:
    if name in _SCHEDULERS:
      raise KeyError(f'scheduler {name!r} is registered twice')
    _SCHEDULERS[name] = cls
    return cls
  return register


def known_schedulers() -> list[str]:
  """The --early_stopping values, in registration order."""
  return list(_SCHEDULERS)


def make(settings: SchedulerSettings) -> Scheduler:
  if settings.name not in _SCHEDULERS:
    raise NascliError(f'unknown --early_stopping {settings.name!r}; known:'
                      f' {", ".join(_SCHEDULERS)}')
  return _SCHEDULERS[settings.name](settings)


def check(name: str, min_steps: int | None, reduction_factor: int | None,
          multi_objective: bool = False) -> None:
  """Refuses bad early-stopping flags in one line naming the flag (TensorFlow-free: the CLI
  runs it before any framework loads; the search loop runs it again for other callers).

  Raises:
    NascliError: an unknown --early_stopping, a missing or bad --min_steps, a bad
      --reduction_factor, either given without early stopping, or --objectives with it.
  """
  from nascli import checks  # pylint: disable=g-import-not-at-top
  names = [AUTO, *_SCHEDULERS]
  if name not in names:
    raise NascliError(f'unknown --early_stopping {name!r}{checks.closest(name, names)};'
                      f' known: {", ".join(names)}')
  stopping = [AUTO] + [n for n, cls in _SCHEDULERS.items() if cls.early_stopping]
  if name == AUTO:
    multi_objective = False  # auto is none with --objectives
  elif not _SCHEDULERS[name].early_stopping:
    for flag, value in (('min_steps', min_steps), ('reduction_factor', reduction_factor)):
      if value is not None:
        listed = ', '.join(stopping[:-1]) + ' or ' + stopping[-1]
        raise NascliError(f'--{flag} is an option of --early_stopping {listed},'
                          f' not {name}')
    return
  if min_steps is not None and min_steps < 1:
    raise NascliError(f'--min_steps must be at least 1, got {min_steps}')
  if reduction_factor is not None and reduction_factor < 2:
    raise NascliError(f'--reduction_factor must be at least 2, got {reduction_factor}')
  if multi_objective:
    raise NascliError(f'--early_stopping {name} ranks trials by one scalar reward; it does not'
                      ' combine with --objectives')


def check_budget(name: str, min_steps: int | None, reduction_factor: int | None,
                 train_steps: int) -> None:
  """Refuses a ladder with no rung below the trials' whole budget (`train_steps`, known once
  their config is built): every trial would train it all, with no early stopping."""
  factor = reduction_factor or DEFAULT_REDUCTION_FACTOR
  if len(rung_steps(min_steps, factor, train_steps)) < 2:
    raise NascliError(
        f'--early_stopping {name}' + (f' --min_steps {min_steps}' if min_steps else '')
        + f': the trials train {train_steps} steps'
        f' (trainer.train_steps), so no rung comes before the end and nothing would stop early;'
        f' give --min_steps below {train_steps} (e.g. {max(1, -(-train_steps // factor**2))})')


@register_scheduler('none')
class NoEarlyStopping(Scheduler):
  """Every trial trains its whole budget in one attempt (no rung events)."""

  early_stopping = False

  def should_continue(self, report: Report, history: Sequence[Report]) -> bool:
    del report, history
    return True


@register_scheduler('median')
class MedianStopping(Scheduler):
  """Ray Tune's `MedianStoppingRule` at the rungs (hard stop), decided as its code decides:
  stop a trial whose best reward so far (Python's `max` over its reports in order) is below
  `np.median` of the other trials' running averages (`np.mean` of each one's rewards up to this
  rung's step), over the trials whose latest report is at this rung or later; averages that
  are not finite (a NaN reward) are left out, and with fewer than MEDIAN_MIN_SAMPLES of them
  the trial goes on. A trial whose best is NaN is stopped. The grace period is the first rung
  (`min_steps`): every report is at or after it. This is Ray's rule over every trial that
  reported at the rung, not Vizier's (completed trials only) nor Optuna's `MedianPruner`
  (the median of the others' values at the step itself)."""

  def should_continue(self, report: Report, history: Sequence[Report]) -> bool:
    import numpy as np  # pylint: disable=g-import-not-at-top
    results: dict[str, list[Report]] = {}  # trial -> its reports, trials in order of first
    for r in [*history, report]:
      results.setdefault(r.trial_id, []).append(r)
    means = []
    for trial_id, reported in results.items():
      if trial_id == report.trial_id or reported[-1].step < report.step:
        continue
      mean = np.mean([r.reward for r in reported if r.step <= report.step])
      if np.isfinite(mean):
        means.append(mean)
    if len(means) < MEDIAN_MIN_SAMPLES:
      return True
    best = max(r.reward for r in results[report.trial_id])
    return bool(best >= np.median(means))  # Ray: stop iff max(median, best) != best


@register_scheduler('asha')
class Asha(Scheduler):
  """Asynchronous successive halving (Li et al. 2018) as Ray Tune's `AsyncHyperBandScheduler`
  (one bracket) decides: a trial is stopped iff its reward is below `np.nanpercentile` at
  `(1 - 1/eta) * 100` of the rewards other trials reported at its rung before it (numpy's
  linear interpolation, NaN rewards left out); the first at a rung goes on, ties go on, and so
  does a NaN reward (`NaN < cutoff` is false). So from the second report on, about the top
  1/eta go on. (A rule that let every trial go on until eta trials reported at a rung spent
  0.63x the compute of no early stopping on the digits bench, where this one is meant to spend
  about half.)"""

  def should_continue(self, report: Report, history: Sequence[Report]) -> bool:
    import numpy as np  # pylint: disable=g-import-not-at-top
    recorded: dict[str, float] = {}  # Ray's rung record: a trial's first reward there
    for r in history:
      if r.rung == report.rung:
        recorded.setdefault(r.trial_id, r.reward)
    if report.trial_id in recorded:  # decided already (Ray: goes on)
      return True
    if not recorded:
      return True
    with warnings.catch_warnings():  # all NaN: the cutoff is NaN and the trial goes on
      warnings.simplefilter('ignore', RuntimeWarning)
      cutoff = np.nanpercentile(list(recorded.values()),
                                (1 - 1 / self.settings.reduction_factor) * 100)
    return not report.reward < cutoff


@register_scheduler('asha_promotions')
class AshaPromotions(Scheduler):
  """Promotion-based ASHA (Li et al. 2020; nascli/search/promotion.py): a trial pauses at each
  rung it reports; a free worker promotes the best paused trial in the top 1/eta of its rung's
  results, else starts a new trial. Once no new trial may start, a rung's top is at least its
  best result (so the best climbs to the full budget), or its top eta when --max_nas_trial is
  below what the ladder needs (`trials_needed`; so eta climb there, not one); when none can be promoted, the search
  ends and the trials still paused are stopped at their last rung."""

  decides_at_report = False

  def should_continue(self, report: Report, history: Sequence[Report]) -> bool:
    raise TypeError('asha_promotions decides when a worker is free (next_job), not at a report')

  def next_job(self, all_reports: Sequence[Report], promoted: AbstractSet[tuple[str, int]],
               running: AbstractSet[str], train_steps: int, finishing: bool = False,
               max_trials: int | None = None) -> Any:
    """promotion.next_job on this search's ladder (`finishing`: no new trial may start). With
    fewer `max_trials` (--max_nas_trial) than the ladder needs (`trials_needed`), once every
    trial is proposed the top eta of each rung are promotable, so that eta trials (all, when
    fewer) reach the full budget instead of one: too few trials for the ladder make it stop
    less, not rest the search's answer on one lower-rung ranking (`few_trials` warns)."""
    factor = self.settings.reduction_factor
    ladder = rung_steps(self.settings.min_steps, factor, train_steps)
    few = max_trials is not None and max_trials < trials_needed(len(ladder), factor)
    return promotion.next_job(all_reports, promoted, running, factor, len(ladder), finishing,
                              finishing_top=factor if few else 1)
