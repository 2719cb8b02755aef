"""Early-stopping schedulers on recorded validation curves: a tabular benchmark (issue 26).

    python bench/bench_schedulers.py --synthetic [--synthetic_seed 0] [--synthetic_archs 81]
        [--crossing 1.0]
    python bench/bench_schedulers.py --curves CURVES.json[,CURVES2.json]
    python bench/bench_schedulers.py --from_job JOB_DIR[,JOB_DIR...] [--metric TAG]
        [--save_curves CURVES.json]
    (all: [--seeds 20] [--workers 2] [--budget STEPS] [--horizon 3] [--min_steps N]
          [--reduction_factor 3] [--schedulers none,median,...] [--reference asha]
          [--start_cost STEPS] [--resume_cost STEPS] [--eval_cost STEPS] [--repeat_noise STD]
          [--accountings old,fresh_repeats,charged] [--out bench/results/schedulers.json])

The curves of the scheduler table in BENCHMARKS.md ship as bench/data/scheduler_curves_*.json
(recorded by bench_record_curves.py on this project's machine).

`--seeds` is a count (0..N-1), a range `A-B` or a list `1,5,9`. numpy and scipy; Ray Tune and
Optuna for their schedulers (`ray[default]` is in the ray and test extras, Optuna a dependency
of nascli); no TensorFlow except for `--from_job`, which reads TensorFlow event files.

The curves. JSON `{"task": str, "steps": [s1, ..., sn], "curves": {arch_key: [reward at each
step]}, "seconds_per_step": float (optional)}`: every architecture's validation reward
(accuracy) at the same increasing steps, trained once for the whole budget sn. A trial's reward
at step s is its curve linearly interpolated between the recorded steps (NaN where a recorded
value is NaN). `--from_job` builds this file from nascli search job dirs: each trial folder (a
folder named by digits) with a `model_analysis.json` whose `accuracy_metric` (or `--metric`)
names the scalar to read from its `validation_curve.jsonl` (a search run with
`TrialSettings.validation_curve_points`, as bench_record_curves.py runs one; no TensorFlow) or
else from the TensorFlow event files in its `validation/` folder (written by Model Garden's
trainer and nascli's final evaluation); at a step written twice the later value wins; trials whose curve stops before the last step of the others (stopped early) are
left out, and curves are put on the union of the recorded steps. `seconds_per_step` is the
median of the trials' `timing.train_steps_s` per trained step. `--synthetic` generates curves
instead (`synthetic_curves`: seeded, saturating curves whose learning speeds differ, weakly
anti-correlated with the final accuracy, so that curves cross and early rankings mislead;
`--crossing 0` gives curves of one shape, ranked at every step as at the end).

The simulation. `--workers` W workers, a discrete-event simulation in training steps (every
architecture trains at the same speed; `seconds_per_step` goes into the JSON, to turn steps
into training seconds). A new trial
is the next architecture of the seed's arrival order: the sorted pool of architectures in a
random permutation (numpy's default_rng(seed)), then another permutation when the pool is used
up, the same order for every scheduler of a seed. The k-th trial of an architecture reports
its k-th recorded curve (the curves file's `architectures` maps curves of one architecture
recorded with other run seeds to it); past its recordings it is a repeat: `old` accounting
reports the recorded curve again (identical rewards; and every curve is its own architecture,
as issue 26's bench had it), `fresh_repeats` and `charged` a new
training's, the architecture's mean curve plus one recorded seed-to-seed residual (a recording
less its architecture's mean, times sqrt(n/(n-1))) with a random sign, drawn by the seed and
the trial's number (`--repeat_noise STD`: N(0, STD**2) at each rung instead). A job trains one
trial from its checkpoint to a rung's step and reports the curve's value there; its cost is
the steps it trains (a paused or promoted trial resumes where it stopped: no step is trained
twice) and, in the `charged` accounting, the fixed costs in training-step units: a trial's
start (`--start_cost`), a resume of a paused trial from its checkpoint (`--resume_cost`; not
when the worker resuming it is the one that paused it last, which keeps it in memory, as
nascli's --paused_trials_per_worker 1 does; a stop rule's trial that goes on trains on in the
same job) and the evaluation each job ends with (`--eval_cost`). Their defaults: the curves'
measured `overheads` (seconds) over `seconds_per_step`, else MEASURED_CHARGES. Every
accounting in `--accountings` runs in one invocation, its own table; the budget of each is
--budget, or 16 of none's whole trials as that accounting charges them. When a job
ends the scheduler decides: the trial goes on to its next rung in the same worker, or the
worker is free and asks the scheduler for its next job. Events at the same moment are handled
in the order their jobs started. Every scheduler runs until `--horizon` times the budget is
spent (all workers are busy all the time, so the compute spent by a moment is the steps all
workers trained by then, jobs in flight counted for their part; a job still running at the end
is cut there).

The ladder, one for all. Rungs as nascli's `scheduler.rung_steps(--min_steps,
--reduction_factor, last step)`: min_steps * eta**k below the last step, then the last step
(default min_steps: ceil(last / eta**2), so rungs at 1/9, 1/3 and 1 of the budget). Each library
is given the same ladder, the same eta, the first rung as its minimum (grace period) and the
last step as its maximum, and every trial reports at every rung it reaches (and nowhere else):
  none             nascli `--early_stopping none`: every trial trains to the last step in one job.
  median, asha     nascli's stop rules (scheduler.py, through `make` and `should_continue`): at
                   each rung below the last the trial is promoted (trains on in the same worker)
                   or stopped, from the reports before it.
  asha_promotions  nascli/search/promotion.py (Li et al. 2020, Algorithm 2): every job ends at
                   its rung, the trial pauses there; a free worker runs `next_job`: the best
                   unpromoted trial in the top 1/eta of the highest rung that has one resumes
                   to the next rung, else a new trial starts.
  ray_asha         Ray Tune `ASHAScheduler` (= AsyncHyperBandScheduler): time_attr = the step,
                   grace_period = the first rung, max_t = the last step, reduction_factor = eta,
                   brackets = 1, stop_last_trials: its milestones are the ladder's. Driven as
                   Tune drives it: on_trial_add when a trial starts, on_trial_result at each
                   rung (CONTINUE: next rung; STOP: on_trial_complete with that result, as
                   TuneController.stop_trial does). Same rule as nascli's asha
                   (tests/test_scheduler_oracle.py): the two rows must be equal.
  ray_hyperband    Ray Tune `HyperBandScheduler` (synchronous HyperBand: a bracket halves when
                   all its live trials reached its milestone; trials wait PAUSED, their worker
                   free). time_attr = eta**k at rung k, max_t = eta**(rungs-1): its smallest
                   bracket's r0 is 1 = the first rung and every milestone is a rung (with the
                   step as time its brackets would start at max_t / eta**6, about 1 step, on a
                   810-step budget). The simulator is its TuneController: a free worker takes
                   `choose_trial_to_run()`, with one new trial always PENDING (added by
                   on_trial_add as it is created: Tune's pending queue with a searcher,
                   RAY_MAX_PENDING); PAUSE frees the worker; a stopped PAUSED trial gets
                   on_trial_remove, a stopped RUNNING one on_trial_complete. (Without a pending
                   trial a bracket whose live trials all reached the milestone halves before it
                   is full.)
  optuna_sh        Optuna `SuccessiveHalvingPruner(min_resource = first rung, reduction_factor =
                   eta, min_early_stopping_rate = 0)`, through Optuna's study API: study.ask()
                   when a trial starts, trial.report(reward, step) and trial.should_prune() at
                   each rung below the last, study.tell(PRUNED) or, at the last step,
                   study.tell(reward). Its rungs are min_resource * eta**k: the ladder's.
  optuna_hyperband Optuna `HyperbandPruner(min_resource = first rung, max_resource = last step,
                   reduction_factor = eta)`, the same way; its brackets are SH pruners with
                   min_early_stopping_rate 0, 1, ... (a trial's bracket from a hash of the study
                   name, here fixed per seed, and the trial number).

What is measured, per scheduler and seed. A trial's reward counts once it is trained to the
last step (a partial budget's reward is not a trained model): the best so far over compute.
  (a) the compute until the best reward reaches the best `none` reaches within the whole
      `--budget` (default 16 full trainings; its target per seed), less `--tolerance` (default
      0; e.g. the run-to-run spread, where a difference below it is not a difference). Mean
      +- std over seeds (std with ddof=1), a seed that never reaches it within the horizon
      counted at the horizon (a lower bound: the cell says how many reached it); as ratios to
      none's budget and, per seed, to the compute none itself needed to reach it (the trial
      that set it completes).
      Paired by seed against `--reference`: wins (fewer steps) / ties / losses and the Wilcoxon
      signed-rank p of the differences.
  (b) the best reward at the budget (equal compute for all), mean +- std, and paired by seed
      against `--reference` (default asha, nascli's early stopping today): mean difference +-
      std, wins / ties / losses, Wilcoxon signed-rank p (two-sided; scipy).
Printed as a Markdown table, written as JSON (`--out`) with every seed's numbers and the
machine.
"""

import abc
import argparse
import dataclasses
import hashlib
import heapq
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

import benchlib  # bench/benchlib.py (scripts run from bench/)
from nascli.proxy import trial_curves
from nascli.search import promotion
from nascli.search import scheduler as scheduler_lib

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BUDGET_TRAININGS = 16  # --budget default: this many full trainings
DEFAULT_HORIZON = 3.0
DEFAULT_REFERENCE = 'asha'
# Tune's pending-trial queue with a searcher (TUNE_MAX_PENDING_TRIALS_PG "auto": 1 unless a
# ConcurrencyLimiter says otherwise; 200 with its BasicVariantGenerator). A NAS controller is a
# searcher; the brackets fill in the same order either way.
RAY_MAX_PENDING = 1
# The fixed costs in training steps when the curves carry no measured `overheads`: this
# machine's, from bench_record_curves.py's mnasnet recording (see BENCHMARKS.md).
MEASURED_CHARGES_SOURCE = ('bench/data/scheduler_curves_mnasnet_810.json: mnasnet, testing YAML'
                           ' at 810 steps, one core of the 2-core AMD EPYC VM, 2026-12-07')
# --accountings: (charged, repeats, what it is).
ACCOUNTINGS = {
    'old': (False, 'exact', 'training steps only, a repeat of an architecture reports its'
            ' recorded curve again (issue 26)'),
    'fresh_repeats': (False, 'fresh', 'training steps only, a repeat is a new training with'
                      ' its own noise'),
    'charged': (True, 'fresh', 'the fixed costs charged too, repeats fresh (issue 47)'),
}


# ------------------------------------------------------------------------------- the curves


@dataclasses.dataclass
class Curves:
  """Recorded validation curves: every architecture's reward at the same steps."""
  task: str
  steps: list[int]
  curves: dict[str, list[float]]
  seconds_per_step: float | None = None
  # curve key -> its architecture's id: curves of one architecture recorded with other run
  # seeds (None: every curve its own architecture).
  architectures: dict[str, str] | None = None
  # The trials' fixed costs in seconds, measured with the curves: {"start_s": ..., "eval_s":
  # ..., "resume_s": ...} (bench_record_curves.py writes start_s and eval_s).
  overheads: dict[str, float] | None = None

  def __post_init__(self):
    if not self.steps or any(b <= a for a, b in zip(self.steps, self.steps[1:])):
      raise ValueError(f'steps must be increasing, got {self.steps[:8]}')
    if not self.curves:
      raise ValueError('no curves')
    for key, values in self.curves.items():
      if len(values) != len(self.steps):
        raise ValueError(f'curve {key!r} has {len(values)} values for {len(self.steps)} steps')

  def reward(self, key: str, step: int) -> float:
    """The curve's value at `step`, linearly interpolated between the recorded steps."""
    return float(np.interp(step, self.steps, np.asarray(self.curves[key], dtype=float)))

  def to_json(self) -> dict[str, Any]:
    out = {'task': self.task, 'steps': self.steps, 'curves': self.curves}
    if self.seconds_per_step is not None:
      out['seconds_per_step'] = self.seconds_per_step
    if self.architectures is not None:
      out['architectures'] = self.architectures
    if self.overheads is not None:
      out['overheads'] = self.overheads
    return out

  def arch(self, key: str) -> str:
    return key if self.architectures is None else self.architectures.get(key, key)


def load_curves(path: str) -> Curves:
  """Reads a curves file (or several, comma-separated: recordings of one task on the same
  steps, e.g. the same architectures with another run seed, merged); a bad one is a one-line
  SystemExit naming the file and the problem."""
  if ',' in path:
    parts = [load_curves(p) for p in path.split(',')]
    if any(c.steps != parts[0].steps for c in parts):
      raise SystemExit(f'error: --curves {path}: the files record different steps')
    curves, archs = {}, {}
    for i, c in enumerate(parts):
      for key, values in c.curves.items():
        curves[f'{i}:{key}'], archs[f'{i}:{key}'] = values, c.arch(key)
    spans = [c.seconds_per_step for c in parts if c.seconds_per_step]
    overheads = [c.overheads for c in parts if c.overheads]
    return Curves(task=' + '.join(dict.fromkeys(c.task for c in parts)), steps=parts[0].steps,
                  curves=curves, architectures=archs,
                  seconds_per_step=statistics.median(spans) if spans else None,
                  overheads={k: statistics.median(o[k] for o in overheads if k in o)
                             for k in {k for o in overheads for k in o}} if overheads else None)
  try:
    data = json.loads(Path(path).read_text())
    return Curves(task=str(data['task']), steps=[int(s) for s in data['steps']],
                  curves={str(k): [float(v) for v in vs] for k, vs in data['curves'].items()},
                  seconds_per_step=data.get('seconds_per_step'),
                  architectures=data.get('architectures'), overheads=data.get('overheads'))
  except (OSError, ValueError, KeyError, TypeError) as e:
    problem = f'missing key {e}' if isinstance(e, KeyError) else str(e).splitlines()[0]
    raise SystemExit(f'error: --curves {path}: {problem}') from None


def synthetic_curves(seed: int = 0, num_archs: int = 81, crossing: float = 1.0,
                     last_step: int = 810, num_points: int = 27, chance: float = 0.1,
                     noise: float = 0.004) -> Curves:
  """Seeded learning curves with crossings. Architecture i reaches final accuracy a_i ~
  U(0.6, 0.95) along chance + (a_i - chance) * (1 - exp(-k_i u)) / (1 - exp(-k_i)), u = step /
  last_step, at a speed k_i = 12 * exp(crossing * (-0.1 z_i + 0.3 e_i)) (z_i: a_i standardized,
  e_i ~ N(0, 1)): with crossing > 0 speeds differ and the fast starters tend to end lower, so
  curves cross, plus evaluation noise N(0, (crossing * noise)**2) per point. With crossing = 1
  (and the defaults) the Kendall tau of the rewards at 1/9 and 1/3 of the budget against the
  last step's is about 0.44 and 0.87 (NAS-Bench-201's short trainings rank about as the first).
  crossing = 0: one shape for all, no noise, so the ranking at every step is the final one."""
  rng = np.random.default_rng(seed)
  final = rng.uniform(0.6, 0.95, num_archs)
  z = (final - final.mean()) / final.std()
  speed = 12.0 * np.exp(crossing * (-0.1 * z + 0.3 * rng.standard_normal(num_archs)))
  steps = [int(round(last_step * (i + 1) / num_points)) for i in range(num_points)]
  u = np.asarray(steps, dtype=float) / last_step
  shape = (1 - np.exp(-speed[:, None] * u)) / (1 - np.exp(-speed[:, None]))
  values = chance + (final - chance)[:, None] * shape
  values += crossing * noise * rng.standard_normal(values.shape)
  values = np.clip(values, 0.0, 1.0)
  width = len(str(num_archs - 1))
  return Curves(task=f'synthetic(seed={seed}, crossing={crossing:g})', steps=steps,
                curves={f'arch{i:0{width}d}': [round(float(v), 6) for v in row]
                        for i, row in enumerate(values)})


def _scalar(value: Any) -> float:
  """A summary value's number: TF2 writes a tensor, TF1 a simple_value."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if value.HasField('tensor'):
    return float(tf.make_ndarray(value.tensor))
  return float(value.simple_value)


def read_validation_curve(validation_dir: Path, tag: str) -> dict[int, float]:
  """{step: value} of `tag` in a summary dir's event files (the later event of a step wins)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel('ERROR')  # summary_iterator's deprecation warning
  seen: dict[int, tuple[float, float]] = {}  # step -> (wall time, value)
  for path in sorted(validation_dir.glob('events.out.tfevents.*')):
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      for value in event.summary.value:
        if value.tag == tag:
          step = int(event.step)
          if step not in seen or event.wall_time >= seen[step][0]:
            seen[step] = (event.wall_time, _scalar(value))
  return {step: v for step, (_, v) in sorted(seen.items())}


def evaluations_during_training_s(trial: Path) -> float | None:
  """Seconds of a trial's evaluations during training (validation_curve_points): at each
  evaluated step below the last, the validation summary's wall time less the train summary's
  of that step. None without both event files."""
  if not (list(trial.glob('train/events.out.tfevents.*'))
          and list(trial.glob('validation/events.out.tfevents.*'))):
    return None
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel('ERROR')
  first: dict[str, dict[int, float]] = {'train': {}, 'validation': {}}
  for folder, seen in first.items():
    for path in sorted(trial.glob(f'{folder}/events.out.tfevents.*')):
      for event in tf.compat.v1.train.summary_iterator(str(path)):
        if event.summary.value:
          seen.setdefault(int(event.step), event.wall_time)
  last = max(first['train'], default=0)
  return sum(v - first['train'][s] for s, v in first['validation'].items()
             if s in first['train'] and s < last and v >= first['train'][s])


def curves_from_jobs(job_dirs: Sequence[str], metric: str | None = None) -> Curves:
  """Curves of the trials of nascli search job dirs (see the module docstring)."""
  raw: dict[str, dict[int, float]] = {}
  archs: dict[str, str] = {}
  per_step_s: list[float] = []
  costs: dict[str, list[float]] = {'start_s': [], 'eval_s': [], 'resume_s': []}
  for job_dir in job_dirs:
    job = Path(job_dir)
    if not job.is_dir():
      raise SystemExit(f'error: --from_job {job_dir}: not a directory')
    trials = sorted((p for p in job.iterdir() if p.is_dir() and p.name.isdigit()),
                    key=lambda p: int(p.name))
    for trial in trials:
      analysis_path = trial / 'model_analysis.json'
      if not analysis_path.is_file():
        continue
      analysis = json.loads(analysis_path.read_text())
      tag = metric or analysis.get('accuracy_metric') or 'accuracy'
      recorded = trial_curves.read_curve(str(trial), tag)  # validation_curve.jsonl
      if recorded is not None:
        curve = {int(s): v for s, v in zip(*recorded)}
      elif (trial / 'validation').is_dir():
        curve = read_validation_curve(trial / 'validation', tag)
      else:
        continue
      if curve:
        raw[f'{job.name}/{trial.name}'] = curve
      arch_file = trial / 'nas_params_str.json'
      if arch_file.is_file():  # the architecture: the same in another job with another seed
        text = json.dumps(json.loads(arch_file.read_text()), sort_keys=True)
        archs[f'{job.name}/{trial.name}'] = hashlib.sha256(text.encode()).hexdigest()[:12]
      timing, step = analysis.get('timing') or {}, analysis.get('step')
      trained = (step or 0) - (analysis.get('resumed_from') or 0)
      if timing.get('train_steps_s') and trained > 0:
        per_step_s.append(timing['train_steps_s'] / trained)
      # The fixed costs. An evaluation: eval_s, the final evaluation's seconds. A start: the
      # trial's fixed_overhead_s (its wall time less the steps and the final evaluation:
      # process or worker start, config, build, tracing, checkpoints, latency, analysis) less
      # the curve's evaluations during training (a search trial evaluates at its rungs only,
      # charged apart). A resume from a checkpoint: train_overhead_s less those evaluations
      # (config, build, tracing, checkpoints again; no latency or analysis).
      eval_s = timing.get('eval_s')
      if eval_s:
        during = evaluations_during_training_s(trial)  # from the event files' wall times
        if during is None:  # without them: each as long as the final one
          during = ((len(curve) - 1) if recorded is not None else 0) * eval_s
        costs['eval_s'].append(eval_s)
        if timing.get('fixed_overhead_s') is not None:
          costs['start_s'].append(max(0.0, timing['fixed_overhead_s'] - during))
        if timing.get('train_overhead_s') is not None:
          costs['resume_s'].append(max(0.0, timing['train_overhead_s'] - during))
  if not raw:
    raise SystemExit(f'error: --from_job {",".join(job_dirs)}: no trial folder with'
                     ' model_analysis.json and validation event files')
  last = max(max(c) for c in raw.values())
  complete = {k: c for k, c in raw.items() if max(c) == last}
  if len(complete) < len(raw):
    print(f'left out {len(raw) - len(complete)} trials whose curve ends before step {last}'
          ' (stopped early)', file=sys.stderr)
  steps = sorted({s for c in complete.values() for s in c})
  curves = {k: [float(np.interp(s, list(c), list(c.values()))) for s in steps]
            for k, c in complete.items()}
  names = ','.join(Path(j).name for j in job_dirs)
  overheads = {k: round(statistics.median(v), 3) for k, v in costs.items() if v} or None
  return Curves(task=f'nascli jobs {names}', steps=steps, curves=curves,
                seconds_per_step=statistics.median(per_step_s) if per_step_s else None,
                architectures={k: archs[k] for k in curves if k in archs} or None,
                overheads=overheads)


# ---------------------------------------------------------------------------- the simulator


@dataclasses.dataclass(frozen=True)
class Ladder:
  """The rungs every scheduler gets: `scheduler.rung_steps`."""
  steps: tuple[int, ...]
  reduction_factor: int

  @property
  def last(self) -> int:
    return len(self.steps) - 1

  @classmethod
  def of(cls, min_steps: int | None, reduction_factor: int, last_step: int) -> 'Ladder':
    return cls(tuple(scheduler_lib.rung_steps(min_steps, reduction_factor, last_step)),
               reduction_factor)


@dataclasses.dataclass
class Trial:
  trial_id: str
  arch: str
  step: int = 0  # where its checkpoint is


class Arrivals:
  """A seed's arrival order: the sorted pool in random permutations, one after the other."""

  def __init__(self, keys: Sequence[str], seed: int):
    self._keys, self._rng, self._order = sorted(keys), np.random.default_rng(seed), []

  def __getitem__(self, i: int) -> str:
    while len(self._order) <= i:
      self._order.extend(self._keys[j] for j in self._rng.permutation(len(self._keys)))
    return self._order[i]


class Policy(abc.ABC):
  """A scheduler as the simulator drives it."""

  def __init__(self, ladder: Ladder, new_trial: Callable[[], Trial], seed: int):
    self.ladder, self.new_trial, self.seed = ladder, new_trial, seed

  @abc.abstractmethod
  def assign(self) -> tuple[Trial, int]:
    """A worker is free: the trial it trains and the rung it trains to."""

  @abc.abstractmethod
  def report(self, trial: Trial, rung: int, reward: float) -> bool:
    """`trial` reached `rung` with `reward`; True: the same worker trains it on to rung + 1."""


POLICIES: dict[str, type[Policy]] = {}


def register(name: str) -> Callable[[type[Policy]], type[Policy]]:
  def add(cls: type[Policy]) -> type[Policy]:
    if name in POLICIES:
      raise KeyError(f'scheduler {name!r} is registered twice')
    POLICIES[name] = cls
    return cls
  return add


@register('none')
class NoStopping(Policy):
  """Every trial trains the whole budget in one job."""

  def assign(self) -> tuple[Trial, int]:
    return self.new_trial(), self.ladder.last

  def report(self, trial: Trial, rung: int, reward: float) -> bool:
    return False


class NascliStopRule(Policy):
  """nascli's scheduler.py rules: decide at each rung, from the reports before."""
  name = ''

  def __init__(self, *args):
    super().__init__(*args)
    self.rule = scheduler_lib.make(scheduler_lib.SchedulerSettings(
        self.name, self.ladder.steps[0], self.ladder.reduction_factor))
    self.history: list[scheduler_lib.Report] = []

  def assign(self) -> tuple[Trial, int]:
    return self.new_trial(), 0

  def report(self, trial: Trial, rung: int, reward: float) -> bool:
    if rung == self.ladder.last:
      return False
    report = scheduler_lib.Report(trial.trial_id, rung, self.ladder.steps[rung], reward,
                                  len(self.history) + 1)
    go_on = self.rule.should_continue(report, self.history)
    self.history.append(report)
    return go_on


@register('median')
class NascliMedian(NascliStopRule):
  name = 'median'


@register('asha')
class NascliAsha(NascliStopRule):
  name = 'asha'


@register('asha_promotions')
class AshaPromotions(Policy):
  """nascli/search/promotion.py: every job ends at its rung; free workers ask `next_job`."""

  def __init__(self, *args):
    super().__init__(*args)
    self.reports: list[scheduler_lib.Report] = []
    self.promoted: set[tuple[str, int]] = set()
    self.running: set[str] = set()
    self.trials: dict[str, Trial] = {}

  def assign(self) -> tuple[Trial, int]:
    job = promotion.next_job(self.reports, self.promoted, self.running,
                             self.ladder.reduction_factor, len(self.ladder.steps))
    if job.action == promotion.PROMOTE:
      trial = self.trials[job.trial_id]
      self.promoted.add((job.trial_id, job.rung - 1))
    else:
      trial = self.new_trial()
      self.trials[trial.trial_id] = trial
    self.running.add(trial.trial_id)
    return trial, job.rung

  def report(self, trial: Trial, rung: int, reward: float) -> bool:
    self.running.discard(trial.trial_id)
    self.reports.append(scheduler_lib.Report(trial.trial_id, rung, self.ladder.steps[rung],
                                             reward, len(self.reports) + 1))
    return False


class _RayTrial:
  """What Ray Tune's schedulers read of a trial."""

  def __init__(self, trial: Trial, status: str):
    self.trial_id, self.trial, self.status = trial.trial_id, trial, status
    self.is_saving, self.last_result = False, {}

  def __repr__(self) -> str:
    return f'Trial({self.trial_id}, {self.status})'


class _TuneController:
  """The TuneController calls Ray's schedulers make (stop_trial, as Tune's does it)."""

  def __init__(self, scheduler: Any):
    self.scheduler = scheduler

  def stop_trial(self, trial: _RayTrial) -> None:
    from ray.tune.experiment import Trial as T  # pylint: disable=g-import-not-at-top
    if trial.status in (T.ERROR, T.TERMINATED):
      return
    if trial.status in (T.PENDING, T.PAUSED):
      self.scheduler.on_trial_remove(self, trial)
    elif trial.status == T.RUNNING:
      self.scheduler.on_trial_complete(self, trial, trial.last_result)
    trial.status = T.TERMINATED

  def get_live_trials(self) -> list[_RayTrial]:
    return []


class RayPolicy(Policy):
  """A Ray Tune TrialScheduler driven through on_trial_add / on_trial_result / stop_trial."""

  def __init__(self, *args):
    super().__init__(*args)
    from ray.tune.experiment import Trial as T  # pylint: disable=g-import-not-at-top
    from ray.tune.schedulers import TrialScheduler  # pylint: disable=g-import-not-at-top
    self.T, self.actions = T, TrialScheduler
    self.ray = self.make_scheduler()
    self.controller = _TuneController(self.ray)
    self.by_id: dict[str, _RayTrial] = {}

  @abc.abstractmethod
  def make_scheduler(self) -> Any:
    """The Ray scheduler for the ladder."""

  @abc.abstractmethod
  def result(self, rung: int, reward: float) -> dict[str, float]:
    """The result dict a trial reports at `rung`."""

  def add(self) -> _RayTrial:
    trial = self.new_trial()
    ray_trial = self.by_id[trial.trial_id] = _RayTrial(trial, self.T.PENDING)
    self.ray.on_trial_add(self.controller, ray_trial)
    return ray_trial

  def next_rung(self, trial: Trial) -> int:
    rung = 0 if trial.step == 0 else self.ladder.steps.index(trial.step) + 1
    if rung > self.ladder.last:
      raise RuntimeError(f'{type(self.ray).__name__} resumed trial {trial.trial_id}, which is'
                         ' complete')
    return rung

  def top_up(self) -> None:
    """Tune keeps trials PENDING ahead of the free resources (`_maybe_update_trial_queue`)."""
    while sum(t.status == self.T.PENDING for t in self.by_id.values()) < RAY_MAX_PENDING:
      self.add()

  def assign(self) -> tuple[Trial, int]:
    self.top_up()
    ray_trial = self.ray.choose_trial_to_run(self.controller)
    if ray_trial is None:
      raise RuntimeError(f'{type(self.ray).__name__} chose no trial with one pending')
    ray_trial.status = self.T.RUNNING
    self.top_up()
    return ray_trial.trial, self.next_rung(ray_trial.trial)

  def report(self, trial: Trial, rung: int, reward: float) -> bool:
    ray_trial = self.by_id[trial.trial_id]
    ray_trial.last_result = self.result(rung, reward)
    action = self.ray.on_trial_result(self.controller, ray_trial, ray_trial.last_result)
    if action == self.actions.CONTINUE and rung < self.ladder.last:
      return True
    if action == self.actions.PAUSE:
      ray_trial.status = self.T.PAUSED
    else:  # STOP, or the last rung reached
      self.controller.stop_trial(ray_trial)
    return False


@register('ray_asha')
class RayAsha(RayPolicy):
  """Ray's ASHAScheduler: its milestones the ladder's rungs (time = the step)."""

  def make_scheduler(self) -> Any:
    from ray.tune.schedulers import ASHAScheduler  # pylint: disable=g-import-not-at-top
    return ASHAScheduler(time_attr='step', metric='reward', mode='max',
                         max_t=self.ladder.steps[-1], grace_period=self.ladder.steps[0],
                         reduction_factor=self.ladder.reduction_factor, brackets=1,
                         stop_last_trials=True)

  def assign(self) -> tuple[Trial, int]:
    return self.add().trial, 0  # ASHA runs FIFO: a new trial for every free worker

  def result(self, rung: int, reward: float) -> dict[str, float]:
    return {'step': self.ladder.steps[rung], 'reward': reward}


@register('ray_hyperband')
class RayHyperBand(RayPolicy):
  """Ray's HyperBandScheduler: time = eta**rung, so its brackets' milestones are rungs."""

  def make_scheduler(self) -> Any:
    from ray.tune.schedulers import HyperBandScheduler  # pylint: disable=g-import-not-at-top
    return HyperBandScheduler(time_attr='rung_time', metric='reward', mode='max',
                              max_t=self.ladder.reduction_factor**self.ladder.last,
                              reduction_factor=self.ladder.reduction_factor,
                              stop_last_trials=True)

  def result(self, rung: int, reward: float) -> dict[str, float]:
    return {'rung_time': self.ladder.reduction_factor**rung, 'reward': reward,
            'step': self.ladder.steps[rung]}


class OptunaPolicy(Policy):
  """An Optuna pruner through the study's ask / report / should_prune / tell."""

  def __init__(self, *args):
    super().__init__(*args)
    import optuna  # pylint: disable=g-import-not-at-top
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    self.optuna = optuna
    self.study = optuna.create_study(
        study_name=f'bench_schedulers_seed{self.seed}', direction='maximize',
        pruner=self.make_pruner(), sampler=optuna.samplers.RandomSampler(seed=self.seed))
    self.asked: dict[str, Any] = {}

  @abc.abstractmethod
  def make_pruner(self) -> Any:
    """The pruner for the ladder."""

  def assign(self) -> tuple[Trial, int]:
    trial = self.new_trial()
    self.asked[trial.trial_id] = self.study.ask()
    return trial, 0

  def report(self, trial: Trial, rung: int, reward: float) -> bool:
    asked = self.asked[trial.trial_id]
    if rung == self.ladder.last:
      self.study.tell(asked, reward)  # a NaN: Optuna records the trial as failed
      return False
    asked.report(reward, self.ladder.steps[rung])
    if asked.should_prune():
      self.study.tell(asked, state=self.optuna.trial.TrialState.PRUNED)
      return False
    return True


@register('optuna_sh')
class OptunaSuccessiveHalving(OptunaPolicy):

  def make_pruner(self) -> Any:
    return self.optuna.pruners.SuccessiveHalvingPruner(
        min_resource=self.ladder.steps[0], reduction_factor=self.ladder.reduction_factor,
        min_early_stopping_rate=0, bootstrap_count=0)


@register('optuna_hyperband')
class OptunaHyperband(OptunaPolicy):

  def make_pruner(self) -> Any:
    return self.optuna.pruners.HyperbandPruner(
        min_resource=self.ladder.steps[0], max_resource=self.ladder.steps[-1],
        reduction_factor=self.ladder.reduction_factor, bootstrap_count=0)


@dataclasses.dataclass(frozen=True)
class Charges:
  """Fixed costs charged in training steps besides the steps trained: a trial's start (process
  or warm worker, build, tracing, latency, analysis), a resume of a paused trial in a job of
  its own (rebuild and checkpoint restore), an evaluation (every job ends with one: every
  report at a rung). A stop rule that lets a trial go on trains on in the same job: no resume;
  nor does a paused trial resumed by the worker that paused it last (kept in its memory)."""
  start: float = 0.0
  resume: float = 0.0
  evaluation: float = 0.0

  def any(self) -> bool:
    return bool(self.start or self.resume or self.evaluation)


# 3.87 s, 2.64 s and 1.39 s at 0.1485 s per step (MEASURED_CHARGES_SOURCE).
MEASURED_CHARGES = Charges(start=26.1, resume=17.8, evaluation=9.4)


class Pool:
  """What a trial of an architecture reports at each rung. The k-th trial of an architecture
  in a seed's arrivals gets its k-th recorded curve (recordings with other run seeds); past
  the recordings, `repeats` says: 'exact' (the old accounting: every curve its own
  architecture, the recorded curve again at each repeat, the same reward each time) or 'fresh'
  (a new training: the architecture's mean recorded curve
  plus a noise curve drawn from the measured seed-to-seed residuals, with a random sign, or,
  without any, N(0, `noise`**2) at each rung; seeded by the seed and the trial's number, so
  every scheduler's n-th trial draws the same)."""

  def __init__(self, curves: Curves, ladder: Ladder, repeats: str = 'exact',
               noise: float | None = None):
    if repeats not in ('exact', 'fresh'):
      raise ValueError(f'repeats must be exact or fresh, got {repeats!r}')
    self.repeats, self.noise = repeats, noise
    self.recordings: dict[str, list[np.ndarray]] = {}
    for key in sorted(curves.curves):
      arch = key if repeats == 'exact' else curves.arch(key)
      self.recordings.setdefault(arch, []).append(
          np.asarray([curves.reward(key, s) for s in ladder.steps]))
    self.archs = sorted(self.recordings)
    self.mean = {a: np.mean(r, axis=0) for a, r in self.recordings.items()}
    self.residuals = seed_residuals(self.recordings)
    if repeats == 'fresh' and not self.residuals and noise is None:
      raise ValueError('repeats as fresh trainings need the seed-to-seed spread: curves of one'
                       ' architecture with two run seeds, or --repeat_noise')

  def rewards(self, arch: str, occurrence: int, seed: int, trial: int) -> np.ndarray:
    recorded = self.recordings[arch]
    if occurrence < len(recorded) or self.repeats == 'exact':
      return recorded[occurrence % len(recorded)]
    rng = np.random.default_rng([seed, trial, 7919])
    if self.noise is not None or not self.residuals:
      shift = rng.normal(0.0, self.noise or 0.0, len(self.mean[arch]))
    else:
      shift = self.residuals[rng.integers(len(self.residuals))] * rng.choice([-1.0, 1.0])
    return np.clip(self.mean[arch] + shift, 0.0, 1.0)


def seed_residuals(recordings: dict[str, list[np.ndarray]]) -> list[np.ndarray]:
  """Each recording's deviation from its architecture's mean, scaled by sqrt(n / (n - 1)) to
  one training's spread, for architectures recorded with n >= 2 run seeds."""
  out = []
  for runs in recordings.values():
    if len(runs) >= 2:
      mean, scale = np.mean(runs, axis=0), math.sqrt(len(runs) / (len(runs) - 1))
      out.extend((r - mean) * scale for r in runs)
  return out


def seed_spread(curves: Curves, ladder: Ladder) -> list[float] | None:
  """The pooled seed-to-seed std at each rung (architectures recorded with >= 2 run seeds)."""
  pool = Pool(curves, ladder, 'fresh', noise=0.0)
  groups = [r for r in pool.recordings.values() if len(r) >= 2]
  if not groups:
    return None
  ss = sum(((np.asarray(r) - np.mean(r, axis=0)) ** 2).sum(axis=0) for r in groups)
  dof = sum(len(r) - 1 for r in groups)
  return [round(float(v), 5) for v in np.sqrt(ss / dof)]


@dataclasses.dataclass
class Run:
  """One scheduler's simulated search on one seed."""
  incumbent: list[tuple[float, float]]  # (compute, best full-budget reward so far), improving
  started: list[float]  # the compute spent when each trial started
  completed: list[float]  # ... when each trial completed the last rung
  completed_trials: list[str]  # their ids, in that order
  reports: int
  spent: float
  resumed: list[float] = dataclasses.field(default_factory=list)  # when each resume started
  evaluated: list[float] = dataclasses.field(default_factory=list)  # when each job began
  charges: Charges = Charges()

  def charged_by(self, compute: float) -> dict[str, float]:
    """Starts, resumes and evaluations begun before `compute`, and the steps they cost."""
    starts, resumes = self.trials_by(compute)[0], sum(c < compute - 1e-6 for c in self.resumed)
    evaluations = sum(c < compute - 1e-6 for c in self.evaluated)
    return {'starts': starts, 'resumes': resumes, 'evaluations': evaluations,
            'steps': starts * self.charges.start + resumes * self.charges.resume
                     + evaluations * self.charges.evaluation}

  def trials_by(self, compute: float) -> tuple[int, int]:
    """(started before, completed by) `compute` (charges in tenths of steps add up to it
    with float error: within 1e-6 of it is at it)."""
    return (sum(c < compute - 1e-6 for c in self.started),
            sum(c <= compute + 1e-6 for c in self.completed))

  def best_at(self, compute: float) -> float | None:
    best = None
    for spent, reward in self.incumbent:
      if spent > compute + 1e-6:
        break
      best = reward
    return best

  def compute_to(self, target: float) -> float | None:
    return next((spent for spent, reward in self.incumbent if reward >= target), None)


def simulate(name: str, curves: Curves, ladder: Ladder, seed: int, workers: int,
             horizon: float, charges: Charges = Charges(), repeats: str = 'exact',
             noise: float | None = None, pool: Pool | None = None) -> Run:
  """Runs scheduler `name` on `workers` workers until `horizon` compute (training steps and
  the `charges`) is spent; a trial's rewards from the `pool` (made with `repeats`, `noise`)."""
  pool = pool or Pool(curves, ladder, repeats, noise)
  arrivals, trials = Arrivals(pool.archs, seed), []
  rewards: dict[str, np.ndarray] = {}
  seen: dict[str, int] = {}

  def new_trial() -> Trial:
    trial = Trial(str(len(trials) + 1), arrivals[len(trials)])
    trials.append(trial)
    occurrence = seen.get(trial.arch, 0)  # the arch's k-th trial in this seed's arrivals
    seen[trial.arch] = occurrence + 1
    rewards[trial.trial_id] = pool.rewards(trial.arch, occurrence, seed, len(trials))
    return trial

  def reward(trial: Trial, rung: int) -> float:
    return float(rewards[trial.trial_id][rung])

  policy = POLICIES[name](ladder, new_trial, seed)
  events: list[tuple[float, int, Trial, int]] = []  # (end, job number, trial, rung)
  started: dict[int, float] = {}  # job number -> start
  jobs, done, begun = 0, 0.0, []

  def spent_by(now: float) -> float:
    return done + sum(min(now, e) - started[j] for e, j, _, _ in events)

  resumed, evaluated = [], []

  worker_of: dict[int, int] = {}  # job number -> its worker
  last_job: dict[int, str] = {}  # worker -> the trial its last job trained (kept in memory)

  def start(trial: Trial, rung: int, now: float, worker: int, goes_on: bool = False) -> None:
    nonlocal jobs
    spent_now = spent_by(now)
    cost = ladder.steps[rung] - trial.step
    if cost <= 0:
      raise RuntimeError(f'{name}: trial {trial.trial_id} at step {trial.step} sent to rung'
                         f' {rung} (step {ladder.steps[rung]})')
    if trial.step == 0:
      begun.append(spent_now)
      cost += charges.start
    elif not goes_on and last_job.get(worker) != trial.trial_id:
      # A paused trial resumed from its checkpoint (nascli keeps the worker's last paused
      # trial in memory, --paused_trials_per_worker 1: resuming that one costs nothing).
      resumed.append(spent_now)
      cost += charges.resume
    evaluated.append(spent_now)
    cost += charges.evaluation  # the job ends with an evaluation at its rung
    jobs += 1
    worker_of[jobs], last_job[worker] = worker, trial.trial_id
    started[jobs] = now
    heapq.heappush(events, (now + cost, jobs, trial, rung))

  for worker in range(workers):
    start(*policy.assign(), 0.0, worker)
  incumbent, completed, completed_trials, reports, best = [], [], [], 0, -math.inf
  while events:
    end, job, trial, rung = events[0]
    spent = spent_by(end)
    if spent > horizon:
      break
    heapq.heappop(events)
    done += end - started.pop(job)
    trial.step = ladder.steps[rung]
    value = reward(trial, rung)
    reports += 1
    if rung == ladder.last:
      completed.append(spent)
      completed_trials.append(trial.trial_id)
      if value > best:  # NaN never is
        best = value
        incumbent.append((spent, value))
    worker = worker_of.pop(job)
    if policy.report(trial, rung, value):
      start(trial, rung + 1, end, worker, goes_on=True)
    else:
      start(*policy.assign(), end, worker)
  return Run(incumbent, begun, completed, completed_trials, reports,
             min(horizon, done + sum(e - started[j] for e, j, _, _ in events)), resumed,
             evaluated, charges)


# ------------------------------------------------------------------------------ the benchmark


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
  values = list(values)
  return (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)


def _wilcoxon(diffs: Sequence[float]) -> float | None:
  if not any(diffs):
    return None
  from scipy import stats  # pylint: disable=g-import-not-at-top
  return float(stats.wilcoxon(diffs).pvalue)


def rank_correlations(curves: Curves, ladder: Ladder) -> list[float | None]:
  """Kendall tau of each rung's rewards against the last step's, over the pool."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  keys = sorted(curves.curves)
  final = [curves.reward(k, ladder.steps[-1]) for k in keys]
  out = []
  for step in ladder.steps[:-1]:
    tau = stats.kendalltau([curves.reward(k, step) for k in keys], final).statistic
    out.append(None if math.isnan(tau) else round(float(tau), 4))
  return out


def benchmark(curves: Curves, schedulers: Sequence[str], seeds: Sequence[int], workers: int,
              budget: float, horizon: float, ladder: Ladder, reference: str,
              progress: Callable[[str], None] = lambda line: None, tolerance: float = 0.0,
              charges: Charges = Charges(), repeats: str = 'exact', noise: float | None = None
              ) -> dict[str, Any]:
  """Every scheduler on every seed; per seed and summary numbers (the module docstring)."""
  if 'none' not in schedulers:
    schedulers = ['none', *schedulers]
  if reference not in schedulers:
    raise ValueError(f'--reference {reference} is not among the schedulers run')
  per_seed: dict[str, list[dict[str, Any]]] = {name: [] for name in schedulers}
  pool = Pool(curves, ladder, repeats, noise)
  sim = dict(charges=charges, pool=pool)
  for seed in seeds:
    none = simulate('none', curves, ladder, seed, workers, horizon * budget, **sim)
    target = none.best_at(budget)
    if target is None:
      raise ValueError(f'seed {seed}: no trial of `none` ended with a finite reward within the'
                       f' budget ({budget:g} steps)')
    target -= tolerance  # --tolerance: within the run-to-run spread of none's best
    none_to = none.compute_to(target)
    for name in schedulers:
      run = none if name == 'none' else simulate(name, curves, ladder, seed, workers,
                                                 horizon * budget, **sim)
      to = run.compute_to(target)
      per_seed[name].append({
          'seed': seed, 'target': target, 'compute_to_target': to,
          'ratio_to_none_budget': (to if to is not None else horizon * budget) / budget,
          'ratio_to_none_compute': (to if to is not None else horizon * budget) / none_to,
          'best_at_budget': run.best_at(budget), 'trials': run.trials_by(budget)[0],
          'completed': run.trials_by(budget)[1], 'reports': run.reports, 'spent': run.spent,
          'charged_in_budget': run.charged_by(budget),
          'repeats_started': sum(1 for t in range(run.trials_by(budget)[0])
                                 if t >= len(pool.archs)),
          'incumbent': [[round(c, 3), r] for c, r in run.incumbent]})
    progress(f'seed {seed}: ' + ', '.join(
        f'{n} {per_seed[n][-1]["ratio_to_none_budget"]:.2f}x' for n in schedulers))
  summary = {}
  ref_best = [r['best_at_budget'] for r in per_seed[reference]]
  ref_steps = [r['ratio_to_none_budget'] * budget for r in per_seed[reference]]
  for name in schedulers:
    rows = per_seed[name]
    reached = [r for r in rows if r['compute_to_target'] is not None]
    steps = [r['compute_to_target'] if r['compute_to_target'] is not None
             else horizon * budget for r in rows]
    best = [r['best_at_budget'] if r['best_at_budget'] is not None else math.nan for r in rows]
    diffs = [b - ref for b, ref in zip(best, ref_best)]
    summary[name] = {
        'compute_to_target': _mean_std(steps), 'reached': len(reached),
        'ratio_to_none_budget': _mean_std([r['ratio_to_none_budget'] for r in rows]),
        'ratio_to_none_compute': _mean_std([r['ratio_to_none_compute'] for r in rows]),
        'best_at_budget': _mean_std(best),
        'vs_reference': {'diff': _mean_std(diffs), 'wins': sum(d > 0 for d in diffs),
                         'ties': sum(d == 0 for d in diffs), 'losses': sum(d < 0 for d in diffs),
                         'wilcoxon_p': None if name == reference else _wilcoxon(diffs)},
        # (a) paired: fewer steps than the reference to none's best is a win.
        'compute_vs_reference': {
            'wins': sum(a < r for a, r in zip(steps, ref_steps)),
            'ties': sum(a == r for a, r in zip(steps, ref_steps)),
            'losses': sum(a > r for a, r in zip(steps, ref_steps)),
            'wilcoxon_p': None if name == reference else _wilcoxon(
                [a - r for a, r in zip(steps, ref_steps)])},
        'trials': statistics.fmean(r['trials'] for r in rows),
        'completed': statistics.fmean(r['completed'] for r in rows),
        'charged_in_budget': {k: statistics.fmean(r['charged_in_budget'][k] for r in rows)
                              for k in ('starts', 'resumes', 'evaluations', 'steps')},
    }
  return {'summary': summary, 'per_seed': per_seed}


def markdown(result: dict[str, Any], reference: str, seeds: int, budget: float = 1.0) -> str:
  """The side-by-side table."""
  head = ('| scheduler | (a) steps to none\'s best | reached | ÷ none\'s budget |'
          f' ÷ none\'s steps to it | (a) W / T / L vs {reference}, p |'
          ' (b) best at equal compute |'
          f' (b) − {reference} | W / T / L vs {reference} | Wilcoxon p |'
          ' trials started / completed in the budget |'
          ' fixed costs charged in the budget: starts / resumes / evaluations = steps (share) |')
  lines = [head, '|' + '---|' * 12]
  for name, s in result['summary'].items():
    (c, c_sd), (rb, rb_sd) = s['compute_to_target'], s['ratio_to_none_budget']
    (rc, rc_sd), (b, b_sd) = s['ratio_to_none_compute'], s['best_at_budget']
    vs = s['vs_reference']
    p = vs['wilcoxon_p']
    va = s['compute_vs_reference']
    pa = '—' if va['wilcoxon_p'] is None else f'{va["wilcoxon_p"]:.3g}'
    ch = s['charged_in_budget']
    lower = '≥ ' if s['reached'] < seeds else ''
    lines.append(
        f'| {name} | {lower}{c:,.0f} ± {c_sd:,.0f} | {s["reached"]}/{seeds} |'
        f' {lower}{rb:.2f} ± {rb_sd:.2f} | {lower}{rc:.2f} ± {rc_sd:.2f} |'
        + (' — |' if name == reference else
           f' {va["wins"]} / {va["ties"]} / {va["losses"]}, {pa} |')
        + f' {b:.4f} ± {b_sd:.4f} |'
        + (' — | — | — |' if name == reference else
           f' {vs["diff"][0]:+.4f} ± {vs["diff"][1]:.4f} |'
           f' {vs["wins"]} / {vs["ties"]} / {vs["losses"]} |'
           f' {"—" if p is None else f"{p:.3g}"} |')
        + f' {s["trials"]:.1f} / {s["completed"]:.1f} |'
        + (f' {ch["starts"]:.1f} / {ch["resumes"]:.1f} / {ch["evaluations"]:.1f}'
           f' = {ch["steps"]:,.0f} ({ch["steps"] / budget:.0%}) |'))
  return '\n'.join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument('--curves', help='a curves JSON file')
  source.add_argument('--from_job', help='nascli search job dirs, comma-separated')
  source.add_argument('--synthetic', action='store_true', help='generated curves')
  parser.add_argument('--metric', help='--from_job: the validation tag (default: each'
                      " trial's model_analysis.json accuracy_metric)")
  parser.add_argument('--save_curves', help='write the curves used here as JSON')
  parser.add_argument('--synthetic_seed', type=int, default=0)
  parser.add_argument('--synthetic_archs', type=int, default=81)
  parser.add_argument('--crossing', type=float, default=1.0)
  parser.add_argument('--seeds', default='20')
  parser.add_argument('--workers', type=int, default=2)
  parser.add_argument('--budget', type=float, help='total training steps per search (default:'
                      f' {DEFAULT_BUDGET_TRAININGS} full trainings)')
  parser.add_argument('--horizon', type=float, default=DEFAULT_HORIZON,
                      help='simulate to this many times the budget for (a)')
  parser.add_argument('--min_steps', type=int)
  parser.add_argument('--reduction_factor', type=int,
                      default=scheduler_lib.DEFAULT_REDUCTION_FACTOR)
  parser.add_argument('--schedulers', default=','.join(POLICIES))
  parser.add_argument('--reference', default=DEFAULT_REFERENCE)
  parser.add_argument('--tolerance', type=float, default=0.0,
                      help='(a) counts none\'s best minus this as reached (e.g. the run-to-run'
                      ' spread)')
  parser.add_argument('--start_cost', type=float, help='steps charged per trial start (default:'
                      " the curves' measured overheads.start_s / seconds_per_step, else"
                      f' {MEASURED_CHARGES.start:g})')
  parser.add_argument('--resume_cost', type=float, help='steps charged per resume from a'
                      " checkpoint (default: overheads.resume_s / seconds_per_step, else"
                      f' {MEASURED_CHARGES.resume:g})')
  parser.add_argument('--eval_cost', type=float, help='steps charged per evaluation (default:'
                      ' overheads.eval_s / seconds_per_step, else'
                      f' {MEASURED_CHARGES.evaluation:g})')
  parser.add_argument('--repeat_noise', type=float, help='repeats as fresh trainings: the std'
                      ' of their noise at every rung (default: the measured seed-to-seed'
                      ' residuals of the curves recorded with two run seeds)')
  parser.add_argument('--accountings', default=','.join(ACCOUNTINGS),
                      help='run under these accountings, side by side: ' + '; '.join(
                          f'{k}: {v[2]}' for k, v in ACCOUNTINGS.items()))
  parser.add_argument('--out', default=str(ROOT / 'bench' / 'results' / 'schedulers.json'))
  return parser.parse_args(argv)


def charges_for(curves: Curves, args: argparse.Namespace) -> tuple[Charges, str]:
  """The charges in steps, and where they come from (a line for the output)."""
  measured = curves.overheads or {}
  per_step = curves.seconds_per_step
  def pick(flag: float | None, key: str, default: float) -> tuple[float, str]:
    if flag is not None:
      return flag, 'given'
    if key in measured and per_step:
      return round(measured[key] / per_step, 1), f'{measured[key]:g} s measured'
    return default, f'MEASURED_CHARGES ({MEASURED_CHARGES_SOURCE})'
  (start, s1), (resume, s2), (evaluation, s3) = (
      pick(args.start_cost, 'start_s', MEASURED_CHARGES.start),
      pick(args.resume_cost, 'resume_s', MEASURED_CHARGES.resume),
      pick(args.eval_cost, 'eval_s', MEASURED_CHARGES.evaluation))
  line = (f'charged: a trial start {start:g} steps ({s1}), a resume from a checkpoint'
          f' {resume:g} steps ({s2}), an evaluation {evaluation:g} steps ({s3})'
          + (f', at {per_step:.4g} s per training step' if per_step else ''))
  return Charges(start, resume, evaluation), line


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  args = parse_args(argv)
  schedulers = args.schedulers.split(',')
  unknown = [s for s in schedulers if s not in POLICIES]
  if unknown:
    raise SystemExit(f'error: --schedulers: unknown {", ".join(unknown)}; known:'
                     f' {", ".join(POLICIES)}')
  if args.reference not in schedulers:
    raise SystemExit(f'error: --reference {args.reference} is not in --schedulers')
  if args.workers < 1 or args.horizon < 1:
    raise SystemExit('error: --workers and --horizon must be at least 1')
  if args.curves:
    curves = load_curves(args.curves)
  elif args.from_job:
    curves = curves_from_jobs(args.from_job.split(','), args.metric)
  else:
    curves = synthetic_curves(args.synthetic_seed, args.synthetic_archs, args.crossing)
  if args.save_curves:
    Path(args.save_curves).write_text(json.dumps(curves.to_json(), indent=1) + '\n')
  try:
    ladder = Ladder.of(args.min_steps, args.reduction_factor, curves.steps[-1])
  except ValueError as e:
    raise SystemExit(f'error: --min_steps / --reduction_factor: {e}') from None
  if len(ladder.steps) < 2:
    raise SystemExit(f'error: --min_steps {args.min_steps}: no rung below the last step'
                     f' {curves.steps[-1]}')
  accountings = args.accountings.split(',')
  if not accountings or any(a not in ACCOUNTINGS for a in accountings):
    raise SystemExit(f'error: --accountings {args.accountings}: known {", ".join(ACCOUNTINGS)}')
  charges, charges_line = charges_for(curves, args)
  if args.budget and args.budget < args.workers * curves.steps[-1]:
    raise SystemExit(f'error: --budget {args.budget:g}: below {args.workers} full trainings'
                     f' ({args.workers} x {curves.steps[-1]} steps), none would complete one')
  seeds = benchlib.seeds(args.seeds)
  taus = rank_correlations(curves, ladder)
  pool = Pool(curves, ladder, 'fresh', noise=0.0)
  spread = seed_spread(curves, ladder)
  noise = args.repeat_noise
  if noise is None and spread is None and args.synthetic:
    noise = 0.004 * args.crossing  # the generator's own evaluation noise
  print(f'{curves.task}: {len(curves.curves)} curves of {len(pool.archs)} architectures'
        f' ({sum(len(r) > 1 for r in pool.recordings.values())} recorded with two or more run'
        f' seeds: seed-to-seed std at each rung {spread}), rungs at {list(ladder.steps)} steps'
        f' (eta {ladder.reduction_factor}), Kendall tau of each rung against the last: {taus};'
        f' {args.workers} workers, {len(seeds)} seeds', flush=True)
  print(charges_line, flush=True)
  runs = {}
  for name in accountings:
    charged, repeats, what = ACCOUNTINGS[name]
    cost = charges if charged else Charges()
    # The budget: that many of none's whole trials, each charged as the accounting charges it.
    budget = args.budget or DEFAULT_BUDGET_TRAININGS * (curves.steps[-1] + cost.start
                                                        + cost.evaluation)
    print(f'\n{name} ({what}): budget {budget:,.0f} steps'
          f' ({DEFAULT_BUDGET_TRAININGS if not args.budget else budget / curves.steps[-1]:g}'
          f' full trainings{" with their fixed costs" if cost.any() else ""}); charged per'
          f' start / resume / evaluation: {cost.start:g} / {cost.resume:g} /'
          f' {cost.evaluation:g} steps', flush=True)
    try:
      result = benchmark(curves, schedulers, seeds, args.workers, budget, args.horizon, ladder,
                         args.reference, progress=lambda line: print(line, flush=True),
                         tolerance=args.tolerance, charges=cost, repeats=repeats, noise=noise)
    except ValueError as e:
      raise SystemExit(f'error: --accountings {name}: {e}') from None
    table = markdown(result, args.reference, len(seeds), budget)
    print(table, flush=True)
    runs[name] = {'what': what, 'charges': dataclasses.asdict(cost), 'repeats': repeats,
                  'budget': budget, 'horizon': args.horizon * budget, 'table': table, **result}
  primary = runs[accountings[-1]]
  budget, table, result = primary['budget'], primary['table'], {
      'summary': primary['summary'], 'per_seed': primary['per_seed']}
  sys.path.insert(0, str(ROOT / 'bench'))
  import host  # pylint: disable=g-import-not-at-top (bench/host.py)
  out = {'command': 'python bench/bench_schedulers.py ' + ' '.join(
      sys.argv[1:] if argv is None else argv),
         'machine': host.machine(('numpy', 'scipy', 'ray', 'optuna')),
         'task': curves.task, 'num_curves': len(curves.curves), 'steps': curves.steps,
         'seconds_per_step': curves.seconds_per_step, 'rungs': list(ladder.steps),
         'reduction_factor': ladder.reduction_factor, 'kendall_tau_per_rung': taus,
         'workers': args.workers, 'budget': budget, 'horizon': args.horizon * budget,
         'seeds': seeds, 'reference': args.reference, 'tolerance': args.tolerance,
         'charges': dataclasses.asdict(charges), 'charges_line': charges_line,
         'overheads_s': curves.overheads, 'seed_to_seed_std_per_rung': spread,
         'repeat_noise': noise, 'accounting': accountings[-1],
         'table': table, **result, 'accountings': runs}
  os.makedirs(Path(args.out).parent, exist_ok=True)
  Path(args.out).write_text(json.dumps(out, indent=1) + '\n')
  print(f'wrote {args.out}')
  return out


if __name__ == '__main__':
  main()
