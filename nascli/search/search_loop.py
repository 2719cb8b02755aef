"""The search loop of `search_in_local` and `search`: propose, run trials, record, feed back.

The driver is the journal's only writer. It proposes, starts up to `max_parallel` trial
attempts through an executor (warm workers on this machine, or on Ray actors), waits for
any to end, records the outcome and feeds the reward back. Resume = replay the journal:
completed trials stay, interrupted ones run again with their architecture, the controller is
rebuilt. The driver reads the journal once when it starts and then keeps the job's state by
applying each event it appends (`JobState.apply`), so a turn costs the same at trial 5000 as
at trial 5. An attempt lost with its machine is journaled and retried, up to
`max_trial_retries` retries per trial; the loss that exhausts them is journaled as the trial's
`failed` event itself, so no kill can fall between the two and win the trial one more attempt.
With early stopping (`--early_stopping`, scheduler.py) an attempt trains to a rung and reports:
the driver journals the report, then the scheduler's decision (promoted: the trial runs its
next rung next; stopped: final). The controller learns each trial's rung-0 reward, as it is
reported, and no other (scheduler.py says why).

With --latency_model (latency_gate.py) every proposal's latency is predicted right after it is
journaled, and trials report that prediction instead of timing themselves; under a hard target
a proposal predicted over it is journaled `over_target` and not trained, the controller is told
its penalty at once, and it does not count toward --max_nas_trial (`JobState.trained_count`).

Before anything is journaled, the first worker builds and checks the trials' config
(preflight.py), so a bad key costs one worker's start, not a job of failed trials; a job that
is already finished is reported from its journal without a worker or TensorFlow
(`finished_job`, `report_finished`).

Ctrl-C or SIGTERM (nascli.interrupts) stops the search at once but cleanly: the driver passes the
signal on to the running trials, waits for them to record `interrupted` (it marks any that
could not), journals an `interrupted` event per trial and exits 130 / 143 with one line saying
how to continue; the same command resumes, the interrupted trials first, from their checkpoints.

Off a terminal (a log file, CI) there is no live table: a progress line goes to stderr at each
trial start and end and every console.PROGRESS_SECONDS (env NASCLI_PROGRESS_SECONDS) in between.

The job dir may be a gs:// URL: the journal is then one object per event, the trials run in a
local staging folder and each trial folder is uploaded before its outcome is journaled (see
workspace.py); derived outputs are written to the bucket, one complete object each.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from typing import TYPE_CHECKING, Any

from rich.live import Live
from rich.console import RenderableType

from nascli import console
from nascli import interrupts
from nascli import latency_source
from nascli import storage
from nascli.errors import NascliError
from nascli.errors import TrialsFailedError
from nascli.run_spec import TrialSettings
from nascli.search import executors
from nascli.search import journal as journal_lib
from nascli.search import latency_gate
from nascli.search import pareto as pareto_lib
from nascli.search import preflight
from nascli.search import reward as reward_lib
from nascli.search import scheduler as scheduler_lib
from nascli.search import summary
from nascli.search import trial as trial_lib
from nascli.search import warm_workers
from nascli.search import workspace as workspace_lib
from nascli.search.trial import TrialSpec

if TYPE_CHECKING:  # pyglove's import (2-4 s) waits for a search that runs trials
  from nascli.search import controller as controller_lib

stderr = console.stderr()
# Settings that may change when a search is resumed (they do not change what a trial is).
MUTABLE = ("max_nas_trial", "max_parallel_nas_trial", "max_failed_nas_trial",
           "max_trial_retries", "trial_isolation", "max_trials_per_worker", "export_top_k",
           "trial.export_every_trial", "trial_timeout", "paused_trials_per_worker",
           "trial.latency_timeout_s", "trial.latency_model.path")
# A mutable setting's flag where its name is not the last part of its key.
_MUTABLE_FLAGS = {"trial.latency_model.path": "latency_model"}
# Off a terminal, the pace of the progress line on stderr (seconds); the env var overrides it.


@dataclasses.dataclass
class SearchArgs:
  """A search: how it proposes and schedules trials, and what every trial runs with (`trial`,
  which each trial_spec.json carries as it is)."""
  job_dir: str
  search_space: str = "mnasnet"
  search_space_module: str | None = None
  search_algorithm: str = "tpe"  # search_flags.DEFAULT_ALGORITHM (tests assert they agree)
  max_nas_trial: int = 4
  max_parallel_nas_trial: int = 1
  max_failed_nas_trial: int | None = None
  max_trial_retries: int = 2  # attempts lost with their worker/node, per trial
  trial_timeout: float | None = None  # seconds an attempt may run, then `failed` (timeout)
  overwrite: bool = False
  algorithm_options: dict[str, Any] = dataclasses.field(default_factory=dict)
  trial_isolation: str = "worker"  # executors.local_executor: warm workers, or a process each
  max_trials_per_worker: int = 10
  # With early stopping: paused trials a warm worker keeps in memory (trial.RungSpec).
  paused_trials_per_worker: int = 1
  export_top_k: int = 3  # SavedModels of the best trials, at the end
  # --objectives ["accuracy:max", "latency_ms:min"] (nascli/search/pareto.py): a Pareto front;
  # None: the scalar MnasNet reward.
  objectives: list[str] | None = None
  # --early_stopping, --min_steps, --reduction_factor (nascli/search/scheduler.py).
  scheduler: scheduler_lib.SchedulerSettings = dataclasses.field(
      default_factory=scheduler_lib.SchedulerSettings)
  trial: TrialSettings = dataclasses.field(default_factory=TrialSettings)
  # --warm_start_from: the job whose (architecture, reward) pairs seed the controller
  # (nascli/search/warm_start.py), journaled as a `warm_start` event before the first proposal.
  warm_start_from: str | None = None

  @property
  def seed(self) -> int:
    """--seed: the controller's, and every trial's (its run's)."""
    return self.trial.run.seed

  def settings(self) -> dict[str, Any]:
    """What defines the search (and so must match on resume): the trial settings nested, their
    local paths absolute, as the trials get them."""
    data = dataclasses.asdict(dataclasses.replace(self, trial=self.trial.with_absolute_paths()))
    for key in ("job_dir", "overwrite"):
      del data[key]
    # Left out at their defaults, so that searches begun before they existed still resume.
    if not self.scheduler.early_stopping:
      del data["scheduler"]
    if self.objectives is None:
      del data["objectives"]
    if self.warm_start_from is None:
      del data["warm_start_from"]
    elif not storage.is_gcs(self.warm_start_from):
      data["warm_start_from"] = os.path.abspath(self.warm_start_from)
    if not self.scheduler.early_stopping or self.paused_trials_per_worker == 1:
      del data["paused_trials_per_worker"]
    if self.trial.validation_curve_points is None:
      del data["trial"]["validation_curve_points"]
    if self.trial.latency_calculator == TrialSettings.latency_calculator:
      del data["trial"]["latency_calculator"]
      del data["trial"]["latency_timeout_s"]
    if self.trial.run.proxy is None:
      del data["trial"]["run"]["proxy"]
    if self.trial.latency_input_size is None:
      del data["trial"]["latency_input_size"]
    if self.trial.latency_model is None:  # --latency_model FILE: its path and fingerprint
      del data["trial"]["latency_model"]
      del data["trial"]["latency_margin"]
    return data


def _checkpointed(trial_dir: str) -> dict[str, int]:
  """{"step": S} of the attempt's latest checkpoint where one is here: the work an interrupted or
  lost attempt leaves for the next one (scheduler.compute_spent counts it)."""
  step = trial_lib.checkpoint_step(trial_dir)
  return {} if step is None else {"step": step}


def take_slot(free: list[Any], last: Any = None) -> Any:
  """Takes a free slot for a trial's attempt: `last`, the slot of its previous attempt, when it
  is free (its warm worker may hold the trial in memory, paused at a rung), else the first."""
  if last is not None and last in free:
    free.remove(last)
    return last
  return free.pop(0)


@dataclasses.dataclass
class _Running:
  trial_id: str
  handle: Any
  slot: Any
  started: float  # time.monotonic() when the attempt's process was started
  journaled: bool = False  # its `started` event is in the journal
  node: dict[str, str] | None = None  # the Ray node it ran on, once it ended (Outcome.node)


class SearchLoop:
  """One search invocation over a job dir."""

  _auto_name: str | None = None  # what --early_stopping auto chose (None: not auto)
  _auto_note: str | None = None  # and why, said once the job's settings are accepted
  _few_trials: str | None = None  # a named scheduler's warning: too few trials for its ladder
  _serving_size: int | None = None  # the latency input size the config gives (preflight)
  gate: latency_gate.Gate | None = None  # --latency_model

  def __init__(self, args: SearchArgs, executor: executors.Executor | None = None):
    self.args = args
    self.executor = executor or executors.local_executor(
        args.trial_isolation, stderr_print=stderr.print,
        max_trials_per_worker=args.max_trials_per_worker, trial_timeout=args.trial_timeout)
    reward_lib.check(args.trial.latency_constraint, args.trial.target_device_latency_ms,
                     args.trial.latency_weight)
    self.objectives = pareto_lib.parse_objectives(args.objectives) if args.objectives else None
    self.num_objectives = len(self.objectives) if self.objectives else 1
    # pylint: disable-next=g-import-not-at-top,redefined-outer-name
    from nascli.search import controller as controller_lib
    controller_lib.check_objectives(args.search_algorithm, self.num_objectives)
    if args.max_nas_trial < 1 or args.max_parallel_nas_trial < 1:
      raise NascliError("--max_nas_trial and --max_parallel_nas_trial must be at least 1")
    _check_scheduler(args)
    if args.scheduler.name != scheduler_lib.AUTO:
      self.scheduler = scheduler_lib.make(args.scheduler)
    self.max_failed = max_failed(args)
    # --latency_model: loaded (and its file checked) before a worker starts; matched with the
    # space and the latency input size once the config is checked, before anything is journaled.
    self.gate = (latency_gate.Gate(args.trial, self.objectives) if args.trial.latency_model
                 else None)
    self.journal = journal_lib.journal_for(args.job_dir)
    self.workspace = workspace_lib.for_job_dir(args.job_dir)
    self.work_dir = self.workspace.work_dir  # where trial folders are written
    # The trials' config is built and checked once, in the first worker (it loads TensorFlow
    # anyway), before this process loads TensorFlow or journals anything (preflight.py); the
    # other warm workers load TensorFlow meanwhile.
    log_dir = os.path.join(self.work_dir, warm_workers.WORKER_LOGS)
    check = preflight.prepare(args)
    try:
      checker = warm_workers.start_config_check(self.executor, check, log_dir)
      try:
        self.executor.prestart(min(args.max_parallel_nas_trial, args.max_nas_trial), log_dir)
        if self.gate is not None:  # a model of another space is refused before TensorFlow is up
          self._load_space()
          self.gate.check_space(self.space_name, self.space, args.trial.latency_input_size)
        checked = preflight.wait(check, checker, checker.log_path)
      finally:
        if not isinstance(self.executor, warm_workers.WarmExecutor):
          checker.close()
        check.remove()
      settings, why = scheduler_lib.resolve(args.scheduler, checked["train_steps"],
                                            checked.get("steps_per_epoch"),
                                            multi_objective=bool(args.objectives),
                                            max_trials=args.max_nas_trial)
      settings, why = _as_journaled(args, settings, why)
      # Said once the job's settings are accepted (_search): a refused command prints one line.
      self._auto_note = why
      self._auto_name = settings.name
      # A scheduler the user named, with fewer trials than its ladder needs: one warning line.
      self._few_trials = scheduler_lib.few_trials(settings, checked["train_steps"],
                                                  args.max_nas_trial)
      self.scheduler = scheduler_lib.make(settings)
      check_budget(settings, checked["train_steps"])
      self.train_steps = checked["train_steps"]
      self._serving_size = checked.get("latency_input_size")  # where trials time themselves
      if self.gate is None:
        self._load_space()
      else:  # the input size the trials' latency is for: the config's, known now
        if args.trial.latency_input_size is None:
          self.gate.check_space(self.space_name, self.space, checked.get("latency_input_size"))
        self.gate.check_target(self.space_name)
    except BaseException:
      self.executor.close()
      raise

  def _load_space(self) -> None:
    args = self.args
    # pylint: disable=g-import-not-at-top,redefined-outer-name
    # No TensorFlow here: the spaces, the controller (pyglove), the journal and the derived
    # outputs (results.py) need none; the trials' workers load it.
    from nascli.search import controller as controller_lib
    from tf_vision import search_spaces
    # The trials resolve the same pair (their TrialSpec carries it) and decode against it.
    entry = search_spaces.resolve_search_space(args.search_space, args.search_space_module)
    self.space_name = entry.name
    self.space = entry.build()
    # Settings errors surface before anything is written: a job dir recorded with a bad setting
    # would refuse the corrected command as "other settings".
    controller_lib.make_algorithm(args.search_algorithm, args.seed, self.num_objectives,
                                  **args.algorithm_options)
    self.metric = entry.require_binding().metric  # what `accuracy` is
    self._hparams_written: set[str] = set()
    self._report_cache: dict[str, Any] = {}  # report.html: curves of finished trials
    self._running: dict[str, _Running] = {}  # attempts started, until their outcome is recorded
    self._slots: dict[str, Any] = {}  # trial id -> the slot of its last attempt
    self._ctl: controller_lib.Controller | None = None
    self._progress = _Progress(self)
    from nascli.search import results  # pylint: disable=g-import-not-at-top
    # Every candidate of every decision, so TensorBoard's HParams view hides no trial.
    self.decision_domains = results.decision_domains(self.space)

  def _spec(self, proposal: journal_lib.Proposal,
            rung: trial_lib.RungSpec | None = None) -> TrialSpec:
    trial = self.args.trial.with_absolute_paths()
    if proposal.seed is not None:  # the controller's own seed for this trial's run
      trial = dataclasses.replace(trial, run=dataclasses.replace(trial.run, seed=proposal.seed))
    return TrialSpec(
        job_dir=os.path.abspath(self.work_dir), trial_id=proposal.trial_id,
        search_space=self.args.search_space, nas_params=proposal.nas_params,
        trial=trial, spawned_at=time.time(),
        search_space_module=self.args.search_space_module, rung=rung,
        latency_dir=self.workspace.remote_trial_dir(proposal.trial_id),
        predicted_latency=(self.gate.prediction(proposal.nas_params) if self.gate is not None
                           else None))

  def _rung_spec(self, state: journal_lib.JobState, trial_id: str) -> trial_lib.RungSpec | None:
    """The rung the trial's next attempt trains to, with what its first rung measured."""
    if not self.scheduler.early_stopping:
      return None
    reported = state.rungs.get(trial_id, [])
    first = reported[0]["metrics"] if reported else {}
    measured = {k: first.get(k) for k in _CARRIED}
    settings = self.scheduler.settings
    if all(v is not None for v in measured.values()) and first.get("latency_device"):
      measured["latency_device"] = first["latency_device"]  # named where it was measured
    return trial_lib.RungSpec(
        rung=len(reported), min_steps=settings.min_steps,
        reduction_factor=settings.reduction_factor,
        measured=measured if all(v is not None for v in measured.values()) else {},
        kept_per_worker=self.args.paused_trials_per_worker)

  def _start(self, state: journal_lib.JobState, trial_id: str, slot: Any) -> _Running:
    proposal = state.proposals[trial_id]
    trial_dir = os.path.join(self.work_dir, trial_id)
    os.makedirs(trial_dir, exist_ok=True)
    spec_path = os.path.join(trial_dir, "trial_spec.json")
    rung = self._rung_spec(state, trial_id)
    trial_lib.write_spec(spec_path, self._spec(proposal, rung))
    stale = os.path.join(trial_dir, "job_status.json")
    if os.path.exists(stale):
      os.remove(stale)  # From an interrupted attempt: this attempt writes its own.
    self.workspace.attempt_starting(trial_id)
    handle = self.executor.start(spec_path, trial_dir, slot,
                                 publish_to=self.workspace.remote_trial_dir(trial_id))
    run = self._running[trial_id] = _Running(trial_id, handle, slot, time.monotonic())
    self._slots[trial_id] = slot
    self._append({"event": "started", "trial_id": trial_id,
                  "attempt": state.attempts.get(trial_id, 0) + 1,
                  **({"rung": rung.rung} if rung else {})})
    run.journaled = True
    return run

  def _finish(self, run: _Running, outcome: executors.Outcome, ctl: controller_lib.Controller,
              state: journal_lib.JobState) -> bool:
    """Journals how the attempt ended; True when the trial must run again (attempt lost, or
    promoted to its next rung)."""
    run.node = outcome.node
    where = {"node": outcome.node} if outcome.node else {}
    if outcome.lost is not None:
      attempt = {"attempt": state.attempts.get(run.trial_id, 1), "reason": outcome.lost[:500],
                 **_checkpointed(os.path.join(self.work_dir, run.trial_id)), **where}
      lost = state.losses.get(run.trial_id, 0) + 1
      if lost <= self.args.max_trial_retries:
        self._append({"event": "lost", "trial_id": run.trial_id, **attempt})  # with its node
        stderr.print(f"trial {run.trial_id}: attempt lost ({outcome.lost[:200]}); retrying")
        return True
      # The last loss and the failure are one event: a kill cannot come in between.
      self._record(run.trial_id, {
          "event": "failed", "trial_id": run.trial_id, "status": journal_lib.FAILED,
          "reason": _retries_spent(lost, self.args.max_trial_retries, outcome.lost),
          "lost": attempt})
      return False
    trial_dir = os.path.join(self.work_dir, run.trial_id)
    if outcome.published:  # it ran elsewhere and uploaded its folder: read its outcome
      self.workspace.fetch_outcome(run.trial_id)
    from tf_vision import job_status  # pylint: disable=g-import-not-at-top
    status = job_status.read(trial_dir) or {}
    trial_lib.check_attempt(run.trial_id, status)  # nascli's own error: the search stops
    analysis_path = os.path.join(trial_dir, "model_analysis.json")
    if (self.scheduler.early_stopping and outcome.returncode == 0
        and status.get("status") == journal_lib.PAUSED and os.path.exists(analysis_path)):
      with open(analysis_path, encoding="utf-8") as f:
        return self._rung_reported(run, json.load(f), ctl)
    if outcome.returncode == 0 and status.get("status") == "completed" and os.path.exists(
        analysis_path):
      with open(analysis_path, encoding="utf-8") as f:
        analysis = json.load(f)
      metrics = {k: analysis.get(k) for k in journal_lib.MEASURED}
      if analysis.get("latency_device"):  # where the latency was measured (list_trials shows it)
        metrics["latency_device"] = analysis["latency_device"]
      # The attempt's wall time, process start to end (`seconds` is its training only), and
      # what its accuracy is (top-1 accuracy, COCO AP, ...).
      metrics["wall_s"] = round(time.monotonic() - run.started, 3)
      metrics["accuracy_metric"] = analysis.get("accuracy_metric", self.metric)
      metrics.update(self._rung_metrics(analysis))
      reward = analysis["reward"]
      if self.objectives:  # the objective values, larger better in each: [accuracy, -latency_ms]
        values = pareto_lib.signed_values(self.objectives, metrics)
        if values is None:
          self._record(run.trial_id, {
              "event": "failed", "trial_id": run.trial_id, "status": journal_lib.FAILED,
              "reason": "--objectives: the trial measured no"
                        f" {', '.join(pareto_lib.missing_metrics(self.objectives, metrics))}",
              **where},
                       published=outcome.published)
          return False
        reward = list(values)
      self._record(run.trial_id, {"event": "completed", "trial_id": run.trial_id,
                                  "reward": reward, "metrics": metrics, **where},
                   published=outcome.published)
      if run.trial_id not in self._fed:  # asha_promotions fed its first rung's reward
        ctl.feedback(state.proposals[run.trial_id].dna,
                     tuple(reward) if isinstance(reward, list) else reward)
      return False
    else:
      kind = status.get("status") if status.get("status") in journal_lib.FAILED_STATUSES else (
          journal_lib.FAILED)
      reason = (status.get("reason") or outcome.error
                or f"trial process exited with code {outcome.returncode}")
      self._record(run.trial_id, {"event": "failed", "trial_id": run.trial_id, "status": kind,
                                  "reason": reason[:500], **where},
                   published=outcome.published)
    return False

  def _over_target(self, state: journal_lib.JobState, trial_id: str,
                   ctl: controller_lib.Controller) -> bool:
    """--latency_model under a hard target: a proposal (journaled, never started) predicted
    over it is journaled `over_target`, not trained, and the controller is told its penalty at
    once, right where a rebuilt controller replays it; True if so."""
    if self.gate is None:
      return False
    proposal = state.proposals[trial_id]
    latency_ms = self.gate.latency_ms(proposal.nas_params)
    if not self.gate.over(latency_ms):
      return False
    record = self._append(self.gate.over_target_event(trial_id, latency_ms))
    ctl.feedback(proposal.dna, record["reward"])
    if not stderr.is_terminal:
      stderr.print(_trial_line(state, trial_id, self.metric), highlight=False, markup=False)
    return True

  def _record(self, trial_id: str, event: dict[str, Any], published: bool = False) -> None:
    """Journals a trial's outcome once its folder is in the job dir (for gs://, uploaded, its
    marker last, by the driver or, `published`, by the trial itself), so the journal never
    names files that are not there; a driver that another one has displaced stops before
    uploading anything."""
    self.journal.check_writer()
    if not published:
      self.workspace.publish(trial_id)
    self._append(event)
    self.workspace.recorded(trial_id)

  def _append(self, event: dict[str, Any]) -> dict[str, Any]:
    """Journals `event` and applies it to the loop's state (and rung reports): the only way
    the loop writes, so its state is the journal's without a replay per turn."""
    record = self.journal.append(event)
    self.state.apply(record)
    self._note(record)
    return record

  def _note(self, record: dict[str, Any]) -> None:
    """What the scheduler reads of an event: rung reports, promotions, rung feedback."""
    if record["event"] == scheduler_lib.RUNG:
      self._reports.extend(scheduler_lib.reports([record]))
      if record.get("feedback"):
        self._fed.add(str(record["trial_id"]))
    elif record["event"] == scheduler_lib.PROMOTED:
      self._promoted.add((str(record["trial_id"]), int(record["rung"])))

  def _resync(self) -> list[dict[str, Any]]:
    """The journal's events, read once; the loop's state and rung reports rebuilt from them
    (at the start, and after an interrupt, which may have cut an append short)."""
    events = self.journal.events()
    self.state = journal_lib.replay(events)
    self._reports, self._promoted, self._fed = [], set(), set()
    for event in events:
      self._note(event)
    return events

  def _rung_metrics(self, analysis: dict[str, Any]) -> dict[str, Any]:
    """With early stopping, where an attempt's metrics were measured: its rung, the step it
    trained to and the checkpoint step it resumed from (the compute it spent), and whether it
    went on from there in memory (--paused_trials_per_worker)."""
    if not self.scheduler.early_stopping:
      return {}
    return {k: analysis.get(k) for k in ("rung", "step", "resumed_from", "in_memory")}

  def _rung_reported(self, run: _Running, analysis: dict[str, Any],
                     ctl: controller_lib.Controller) -> bool:
    """Journals an attempt's rung report, then the scheduler's decision; True: promoted."""
    metrics = {k: analysis.get(k) for k in journal_lib.MEASURED}
    if analysis.get("latency_device"):
      metrics["latency_device"] = analysis["latency_device"]
    metrics.update(wall_s=round(time.monotonic() - run.started, 3),
                   accuracy_metric=analysis.get("accuracy_metric", self.metric),
                   **self._rung_metrics(analysis))
    self.journal.check_writer()
    # The controller learns every trial's first-rung reward as it reports, whatever the
    # scheduler: the one budget every trial reaches, so the rewards it compares were measured
    # alike (scheduler.py's module doc).
    feedback = analysis["rung"] == 0
    self._append({"event": scheduler_lib.RUNG, "trial_id": run.trial_id,
                  "rung": analysis["rung"], "step": analysis["step"],
                  "reward": analysis["reward"], "metrics": metrics,
                  **({"feedback": True} if feedback else {}),
                  **({"node": run.node} if run.node else {})})
    report = self._reports[-1]  # the one just journaled
    if feedback:
      ctl.feedback(self.state.proposals[run.trial_id].dna, report.reward)
    if not self.scheduler.decides_at_report:
      return False  # paused: a free worker promotes it, or the search's end stops it
    return self._decided(report, scheduler_lib.decide(self.scheduler, self._reports, report),
                         ctl)

  def _decided(self, report: scheduler_lib.Report, go_on: bool,
               ctl: controller_lib.Controller, reason: str | None = None) -> bool:
    """Journals the scheduler's decision on a rung report; a stopped trial is final. Its
    controller feedback was its rung-0 report's; only a trial of a journal written before
    that (no rung report marked `feedback`) gets its last rung's reward here, where a rebuilt
    controller replays it."""
    if go_on:
      self._append({"event": scheduler_lib.PROMOTED, "trial_id": report.trial_id,
                    "rung": report.rung})
      return True
    state = self.state
    last = state.rungs[report.trial_id][-1]
    reason = reason or (f"--early_stopping {self.scheduler.settings.name} stopped it at rung"
                        f" {report.rung} (step {report.step}, reward {report.reward:.4g})")
    trial_lib.mark_stopped(os.path.join(self.work_dir, report.trial_id), reason)
    self._record(report.trial_id, {
        "event": scheduler_lib.STOPPED, "trial_id": report.trial_id, "rung": report.rung,
        "step": report.step, "reward": report.reward, "metrics": last["metrics"],
        "reason": reason})
    if report.trial_id not in self._fed:
      ctl.feedback(state.proposals[report.trial_id].dna, report.reward)
    return False

  def _next_promotion(self, state: journal_lib.JobState) -> str | None:
    """asha_promotions: the paused trial a free worker promotes now (journaled `promoted`), or
    None: the worker starts a new trial."""
    if self.scheduler.decides_at_report or not self.scheduler.early_stopping:
      return None
    finishing = state.trained_count() >= self.args.max_nas_trial  # no new trial may start
    job = self.scheduler.next_job(self._reports, self._promoted, set(self._running),
                                  self.train_steps, finishing, max_trials=self.args.max_nas_trial)
    if job.trial_id is None or state.status.get(job.trial_id) != journal_lib.PAUSED:
      return None
    self.journal.check_writer()
    self._append({"event": scheduler_lib.PROMOTED, "trial_id": job.trial_id,
                  "rung": job.rung - 1})
    return job.trial_id

  def _stop_paused(self, state: journal_lib.JobState, ctl: controller_lib.Controller) -> None:
    """asha_promotions, at the search's end: the trials still paused were never in the top
    1/eta of their rung; each is stopped there, a final state with that rung's reward."""
    eta = self.scheduler.settings.reduction_factor
    for trial_id in state.trial_ids(journal_lib.PAUSED):
      report = next(r for r in reversed(self._reports) if r.trial_id == trial_id)
      self._decided(report, False, ctl, reason=(
          f"--early_stopping {self.scheduler.settings.name}: not promoted from rung {report.rung}"
          f" (step {report.step}, reward {report.reward:.4g}), below the top 1/{eta} of its"
          " rung when the search ended"))

  def _decide_owed(self, ctl: controller_lib.Controller) -> int:
    """On resume: the decisions on rung reports a killed driver journaled none for, made now
    from the same reports, in journal order; returns how many."""
    owed = scheduler_lib.owed(self.scheduler, self._resync())
    for report, go_on in owed:
      self._decided(report, go_on, ctl)
    return len(owed)

  def _fail_spent(self) -> list[str]:
    """On resume: fails the pending trials that lost more attempts than --max_trial_retries
    allows, so none runs past its retries; returns them. (An older driver journaled the last
    loss and the failure as two events, and one killed in between left the trial pending; a
    lowered --max_trial_retries also applies to the losses already journaled.)"""
    spent = [t for t in self.state.trial_ids(journal_lib.PENDING)
             if self.state.losses.get(t, 0) > self.args.max_trial_retries]
    for trial_id in spent:
      self.journal.check_writer()
      self._append({"event": "failed", "trial_id": trial_id, "status": journal_lib.FAILED,
                    "reason": _retries_spent(self.state.losses[trial_id],
                                             self.args.max_trial_retries,
                                             self.state.reasons.get(trial_id, ""))})
    return spent

  def _title(self, state: journal_lib.JobState) -> str:
    return _title(self.args, self.space_name, state)

  def _table(self, state: journal_lib.JobState, running: dict[str, _Running],
             titled: bool = True) -> RenderableType:
    return _table(self.args, self.space_name, self.metric, state, running, titled)

  def _warm_start(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """With --warm_start_from: journals the old job's (architecture, reward) pairs as a
    `warm_start` event before the first proposal, once (a resume replays the one journaled,
    whatever became of the old job since); returns the journal's events."""
    from nascli.search import warm_start  # pylint: disable=g-import-not-at-top
    a = self.args
    if not a.warm_start_from or any(e.get("event") == warm_start.EVENT for e in events):
      return events
    if any(e.get("event") == "proposed" for e in events):  # cannot happen: journaled first
      raise NascliError(f"{a.job_dir}: --warm_start_from came after the first proposal")
    pairs = warm_start.check(a.warm_start_from, a.search_space, a.search_space_module,
                             a.objectives, a.job_dir)
    # Each pair must fit this space (a module's space may have changed): checked before the
    # event is journaled, so a refused warm start leaves the job as it was.
    from nascli.search import controller as controller_lib  # pylint: disable=g-import-not-at-top
    controller_lib.Controller(self.space, "random", 0, num_objectives=self.num_objectives,
                              to_nas_params=lambda space, dna: {}).warm_start(
                                  (p["dna"], p["reward"]) for p in pairs)
    self.journal.check_writer()
    self.journal.append(warm_start.event(a.warm_start_from, pairs))
    stderr.print(f"warm start: {len(pairs)} (architecture, reward) pair(s) of"
                 f" {a.warm_start_from} seed the {a.search_algorithm} controller",
                 highlight=False, markup=False)
    return self.journal.events()

  def run(self) -> journal_lib.JobState:
    try:
      return self._run()
    finally:
      self.executor.close()

  def _run(self) -> journal_lib.JobState:
    os.makedirs(self.work_dir, exist_ok=True)
    with self.journal.open_for_writing():
      try:
        state, stop_reason = self._search()
      except KeyboardInterrupt as e:  # interrupts.Interrupted: Ctrl-C or SIGTERM
        raise self._interrupted(e) from None
    if not stderr.is_terminal:
      # The title on a line of its own: as the table's title, Rich wraps it to the table.
      log = console.whole(stderr)
      log.print(self._title(state), highlight=False, markup=False)
      log.print(self._table(state, {}, titled=False))
    summary.say_target_outcome(stderr, state)  # how many trials meet --target_device_latency_ms
    failed_all = all_failed(self.args.job_dir, state)
    if stop_reason and "exceed" in stop_reason:
      raise TrialsFailedError(stop_reason + (f"; {failed_all}" if failed_all else ""))
    if stop_reason and "unreachable" in stop_reason and not state.trial_ids(
        journal_lib.COMPLETED, journal_lib.STOPPED):
      raise NascliError(stop_reason)  # not one architecture trained: nothing to report
    if failed_all is not None:
      raise failed_all
    if stop_reason:
      stderr.print(stop_reason)
    self._export_best(state)
    return state

  def _export_best(self, state: journal_lib.JobState) -> None:
    """SavedModels (TRIAL/export) of the --export_top_k best completed trials that have none,
    in one warm worker on this machine (the job dir is local or gs://, so it reaches every
    trial's folder). A failed export is reported and leaves the search's results as they are;
    an interrupted one is done by the same command run again."""
    a = self.args
    best = to_export(a, state)
    if not best:
      return
    stderr.print(f"exporting the SavedModel of the best trial(s): {', '.join(best)}",
                 highlight=False)
    log = os.path.join(self.work_dir, warm_workers.WORKER_LOGS, "export.log")
    trial_dirs = [storage.join(a.job_dir, t) for t in best]
    # With a latency model the exports are also timed for real on its runtime (measured.py).
    measure = self.gate.measure_request() if self.gate is not None else None
    worker = warm_workers.take_idle_worker(self.executor)
    try:
      request = None
      if worker is not None:
        try:
          request = worker.submit("export", log, trial_dirs=trial_dirs, measure=measure)
        except OSError:  # it exited after `usable()`: a fresh worker takes the exports
          worker.close()
      if request is None:
        worker = warm_workers.Worker(None, os.getcwd(), log, max_requests=1)
        request = worker.submit("export", log, trial_dirs=trial_dirs, measure=measure)
      while (code := worker.result(request)) is None and worker.exit_code() is None:
        time.sleep(0.2)
      code = worker.result(request) if code is None else code
    except KeyboardInterrupt as e:
      if worker is not None:
        worker.signal(interrupts.signal_of(e))
        worker.close(executors.INTERRUPT_GRACE_S)
      raise interrupts.Interrupted.of(
          e, f"exporting the best trials of {a.job_dir} (the search itself is done)",
          "run the same command again to finish the exports") from None
    except OSError:  # the fresh worker exited before it took the request
      code = worker.exit_code() or 1
    worker.close()
    if measure:
      from nascli.search import measured  # pylint: disable=g-import-not-at-top
      with self.journal.open_for_writing():
        for trial_id in best:
          event = measured.event(a.job_dir, trial_id, state)
          if event is not None:
            self._append(event)
            stderr.print(measured.line(event), highlight=False, markup=False)
      if state.measured:
        from nascli.search import results  # pylint: disable=g-import-not-at-top
        results.update_all(a.job_dir, state, self.decision_domains, self._hparams_written,
                           report_cache=self._report_cache)
    if code != 0:
      stderr.print(f"warning: exporting did not finish for every trial (code {code}); see"
                   f" {log}, or run `nascli export --model_dir {storage.join(a.job_dir, best[0])}`",
                   highlight=False)

  def _search(self) -> tuple[journal_lib.JobState, str | None]:
    """The loop, under the journal's writer lock; returns the final state and why it stopped
    early (None: it ran every trial)."""
    a = self.args
    # pylint: disable=g-import-not-at-top,redefined-outer-name
    from nascli.search import controller as controller_lib
    from nascli.search import results
    began = journal_lib.check_settings(a.job_dir, a.settings(), a.overwrite,
                                       journal=self.journal, mutable_keys=MUTABLE)
    if self._auto_note:
      stderr.print(self._auto_note, highlight=False, markup=False)
    if self._few_trials:
      stderr.print(self._few_trials, highlight=False, markup=False)
    if self.gate is not None:
      stderr.print(f"latency model {self.gate.path}: {self.gate.model.describe()}",
                   highlight=False, markup=False)
    elif a.trial.target_device_latency_ms and a.trial.latency_calculator == "in_trial":
      stderr.print(latency_source.host_timing_note(self._serving_size), highlight=False,
                   markup=False)
    changed = mutable_changes(began.settings or {}, a.settings())
    if changed:
      stderr.print(f"note: {'; '.join(changed)}: applied to the trials still to run and to the"
                   " exports at the end", highlight=False, markup=False)
    events = self._warm_start(self.journal.events())
    self.workspace.prepare(events)
    ctl = self._ctl = controller_lib.Controller.rebuild(
        self.space, a.search_algorithm, a.seed, events, num_objectives=self.num_objectives,
        **a.algorithm_options)
    self._decide_owed(ctl)  # rung reports a killed driver made no decision on
    state = self.state  # kept by _append from here on: one object, never replayed again
    if self._auto_name and state.early_stopping is None:  # readers need not re-derive it
      self._append({"event": "early_stopping", "name": self._auto_name, "why": self._auto_note})
    self._fail_spent()
    for trial_id in state.trial_ids(journal_lib.PENDING):  # proposed just before a kill
      if not state.attempts.get(trial_id):
        self._over_target(state, trial_id, ctl)
    queue = state.unfinished()  # Interrupted trials run again first, same architecture.
    if queue:
      stderr.print(f"resuming {a.job_dir}: {len(state.trial_ids(journal_lib.COMPLETED))}"
                   f" trial(s) done, re-running interrupted trial(s) {', '.join(queue)}")
    free = self.executor.slots(a.max_parallel_nas_trial)
    running = self._running
    stop_reason = None
    # A live table on a terminal; elsewhere (logs, CI) a progress line at a steady pace, one
    # line per trial and a final table.
    live_display = (Live(self._table(state, running), console=stderr, refresh_per_second=2,
                         transient=False, redirect_stdout=False)
                    if stderr.is_terminal else _PlainDisplay())
    with live_display as live:
      while True:
        failed = len(state.trial_ids(*journal_lib.FAILED_STATUSES))
        if failed > self.max_failed and stop_reason is None:
          stop_reason = _exceeded(failed, self.max_failed)
        started = skipped = False
        while free and stop_reason is None:
          if queue:
            trial_id = queue.pop(0)
          elif (promoted := self._next_promotion(state)) is not None:
            trial_id = promoted
          elif state.trained_count() < a.max_nas_trial:  # over-target proposals not counted
            if self.gate is not None and (
                line := latency_gate.unreachable(state, algorithm=a.search_algorithm)):
              stop_reason = line
              break
            proposal = ctl.propose_trial(state.dnas())
            if proposal is None:
              stop_reason = "the controller proposes no new architecture (space exhausted)"
              break
            trial_id = state.next_trial_id()
            self._append({"event": "proposed", "trial_id": trial_id,
                          "dna": list(proposal.dna), "nas_params": proposal.nas_params,
                          **({} if proposal.seed is None else {"seed": proposal.seed})})
            if self._over_target(state, trial_id, ctl):
              skipped = True
              continue
          else:
            break
          self._start(state, trial_id, take_slot(free, self._slots.get(trial_id)))
          started = True
        if skipped:
          results.update_all(a.job_dir, state, self.decision_domains, self._hparams_written,
                             report_cache=self._report_cache)
        if started:
          self._progress.report(state, force=True)
        live.update(self._table(state, running))
        if not running:
          if stop_reason is None and state.trial_ids(journal_lib.PAUSED):
            self._stop_paused(state, ctl)
            results.update_all(a.job_dir, state, self.decision_domains, self._hparams_written,
                               report_cache=self._report_cache)
          break
        time.sleep(0.5)
        ended = False
        for trial_id, run in list(running.items()):
          outcome = self.executor.poll(run.handle)
          if outcome is None:
            continue
          if self._finish(run, outcome, ctl, state):
            queue.insert(0, trial_id)
          self._progress.ended(run)
          del running[trial_id]
          free.append(run.slot)
          results.update_all(a.job_dir, state, self.decision_domains, self._hparams_written,
                             report_cache=self._report_cache)
          if not stderr.is_terminal:
            stderr.print(_trial_line(state, trial_id, self.metric))
          ended = True
        self._progress.report(state, force=ended)
        live.update(self._table(state, running))
    return state, stop_reason

  def _interrupted(self, error: KeyboardInterrupt) -> interrupts.Interrupted:
    """Stops the running attempts and records how each ended; the one line main() prints.

    Each trial gets the driver's signal and records `interrupted` itself (after a checkpoint,
    where training can save one); the driver marks the job_status.json of any that could not
    and journals `interrupted` for each, so a rerun re-runs exactly these trials first. An
    attempt that completed before the signal reached it is recorded as completed; any other
    outcome (even a failure, which may be the interrupt's doing) runs again.
    """
    # pylint: disable=g-import-not-at-top
    from nascli.search import results
    signum = interrupts.signal_of(error)
    runs = list(self._running.values())
    if runs:
      stderr.print(f"interrupted: stopping trial(s) {', '.join(r.trial_id for r in runs)}"
                   " (press Ctrl-C again to stop at once)", highlight=False)
      self.executor.interrupt([r.handle for r in runs], signum)
    self._resync()  # the journal itself: the signal may have cut an append short
    state = self.state
    stopped = []
    for run in runs:
      trial_dir = os.path.join(self.work_dir, run.trial_id)
      status = state.status.get(run.trial_id)
      if status in journal_lib.FINAL_STATUSES:
        continue  # recorded just before the signal
      outcome = self.executor.poll(run.handle)
      if outcome is not None and outcome.returncode != 0 and trial_lib.reported(trial_dir):
        # A cancelled Ray task reports an error even when its trial ran to its end.
        outcome = executors.Outcome(returncode=0)
      if (run.journaled and status == journal_lib.RUNNING and outcome is not None
          and outcome.returncode == 0 and self._ctl is not None):
        self._finish(run, outcome, self._ctl, state)  # it ended before the signal reached it
        continue
      trial_lib.mark_interrupted(trial_dir, signum)
      if run.journaled and status == journal_lib.RUNNING:
        self._append({"event": "interrupted", "trial_id": run.trial_id,
                      "attempt": state.attempts.get(run.trial_id, 1),
                      "signal": signal.Signals(signum).name, **_checkpointed(trial_dir)})
        stopped.append(run.trial_id)
    self._running.clear()
    if state.settings is not None and state.proposals:
      results.update_all(self.args.job_dir, state, self.decision_domains,
                         self._hparams_written, report_cache=self._report_cache)
    return interrupts.Interrupted.of(error, *self._interrupt_line(state, stopped))

  def _interrupt_line(self, state: journal_lib.JobState, stopped: list[str]) -> tuple[str, str]:
    """(what was interrupted, how to continue) for the one line main() prints, e.g.
    `search JOB (1 of 3 trials done, trial 2 stopped at step 10)` and `run the same command
    again to resume (trial 2 runs again first, from step 10)`."""
    a = self.args
    done = len(state.trial_ids(*journal_lib.TRAINED_FINAL_STATUSES))
    again = "run the same command again" + (" without --overwrite" if a.overwrite else "")
    what = f"search {a.job_dir} ({done} of {a.max_nas_trial} trials done"
    if not stopped:
      return what + ")", f"{again} to resume"
    steps = [trial_lib.checkpoint_step(os.path.join(self.work_dir, t)) for t in stopped]
    at = ", ".join(f"trial {t} stopped " + (f"at step {n}" if n else "before its first checkpoint")
                   for t, n in zip(stopped, steps))
    if len(stopped) == 1:
      rerun = f"trial {stopped[0]} runs again first" + (f", from step {steps[0]}" if steps[0]
                                                        else "")
    else:
      rerun = f"trials {', '.join(stopped)} run again first, from their last checkpoints"
    return f"{what}, {at})", f"{again} to resume ({rerun})"


def _title(args: SearchArgs, space_name: str, state: journal_lib.JobState) -> str:
  return summary.title(args.job_dir, space_name, args.search_algorithm, state)


def _table(args: SearchArgs, space_name: str, metric: str, state: journal_lib.JobState,
           running: dict[str, "_Running"], titled: bool = True) -> RenderableType:
  """The table and the latency notes under it (nascli/search/summary.py)."""
  return summary.table(args.job_dir, space_name, args.search_algorithm, metric, state, running,
                       titled)


def to_export(args: SearchArgs, state: journal_lib.JobState) -> list[str]:
  """The --export_top_k best completed trials that have no SavedModel yet."""
  completed = sorted(state.trial_ids(journal_lib.COMPLETED), key=lambda t: -state.rewards[t])
  return [t for t in completed[:args.export_top_k]
          if not storage.exists(storage.join(args.job_dir, t, "export", "saved_model",
                                             "saved_model.pb"))]


def all_failed(job_dir: str, state: journal_lib.JobState) -> TrialsFailedError | None:
  """A search none of whose trials gave a result: why, and how to go on."""
  failed = state.trial_ids(*journal_lib.FAILED_STATUSES)
  if not failed or state.trial_ids(journal_lib.COMPLETED, journal_lib.STOPPED):
    return None
  first = failed[0]
  reason = " ".join(state.reasons.get(first, "").split())[:300]
  return TrialsFailedError(
      f"every trial of {job_dir} failed ({len(failed)} trial(s); trial {first}: {reason}); fix"
      " the cause, then run the command again with --overwrite (it deletes the failed trials"
      " and starts over)")


def _setting(settings: dict[str, Any], dotted: str) -> Any:
  for key in dotted.split("."):
    settings = settings.get(key) if isinstance(settings, dict) else None
  return settings


def mutable_changes(began: dict[str, Any], now: dict[str, Any]) -> list[str]:
  """`--flag NEW (the job began with OLD)` for each setting of MUTABLE (how trials run, not
  what they compute) that differs from the one the job was started with."""
  began, now = (json.loads(json.dumps(d, sort_keys=True)) for d in (began, now))
  out = []
  for key in MUTABLE:
    old, new = _setting(began, key), _setting(now, key)
    if key == "max_nas_trial" or old == new or not began:  # more trials: the search says so
      continue
    show = lambda v: "unset" if v is None else str(v)  # noqa: E731
    flag = _MUTABLE_FLAGS.get(key, key.rsplit(".", 1)[-1])
    out.append(f"--{flag} {show(new)} (the job began with {show(old)})")
  return out


def settle_auto(args: SearchArgs) -> None:
  """`--early_stopping auto` on a job that began without early stopping (one begun before
  `auto` was the default, or with `none`) stays without it: the job goes on as it began."""
  if args.scheduler.name != scheduler_lib.AUTO or args.overwrite:
    return
  journal = journal_lib.journal_for(args.job_dir)
  try:
    first = next(iter(journal.events()), {}) if journal.exists() else {}
  except NascliError:
    return  # damaged: the search itself says how
  settings = first.get("settings")
  if first.get("event") == "search_started" and isinstance(settings, dict) and (
      "scheduler" not in settings):
    args.scheduler = scheduler_lib.SchedulerSettings()


def _as_journaled(args: SearchArgs, settings: scheduler_lib.SchedulerSettings,
                  why: str | None) -> tuple[scheduler_lib.SchedulerSettings, str | None]:
  """`--early_stopping auto` on resume: the scheduler the job's journal says auto chose when it
  began (its `early_stopping` event), whatever `resolve` says now: --max_nas_trial, which
  auto's choice depends on, may change between runs; the rungs may not."""
  if why is None or args.overwrite:
    return settings, why
  journal = journal_lib.journal_for(args.job_dir)
  try:
    events = journal.events() if journal.exists() else []
  except NascliError:
    return settings, why  # damaged: the search itself says how
  began = next((e for e in events if e.get("event") == "early_stopping"), None)
  if began is None or began.get("name") == settings.name:
    return settings, why
  if began.get("name") == "none":
    return scheduler_lib.SchedulerSettings(), began.get("why") or why
  return (dataclasses.replace(args.scheduler, name=str(began["name"])),
          began.get("why") or why)


def finished_job(args: SearchArgs) -> journal_lib.JobState | None:
  """The job in args.job_dir when it is done with these very settings: every trial ended,
  --max_nas_trial trials proposed to train (or the failure limit passed, or, with a latency
  model, the target found unreachable), and the --export_top_k best exported. A rerun then
  only reports it, from the journal: no worker is started and no TensorFlow loaded. None:
  there is something to run, resume or refuse (SearchLoop does)."""
  if args.overwrite:
    return None
  journal = journal_lib.journal_for(args.job_dir)
  try:
    events = journal.events() if journal.exists() else []
  except NascliError:
    return None  # damaged: the search itself says how
  first = events[0] if events else {}
  if first.get("event") != "search_started" or not isinstance(first.get("settings"), dict):
    return None
  settings = args.settings()
  if (journal_lib.fingerprint(first["settings"], MUTABLE)
      != journal_lib.fingerprint(settings, MUTABLE)):
    return None
  state = journal_lib.replay(events)
  if state.unfinished() or state.trial_ids(journal_lib.PAUSED):
    return None  # paused: a rung report awaits its decision or a promotion
  failed = len(state.trial_ids(*journal_lib.FAILED_STATUSES))
  if (state.trained_count() < args.max_nas_trial and failed <= max_failed(args)
      and not (args.trial.latency_model and latency_gate.unreachable(state))):
    return None
  if to_export(args, state):
    return None
  return state


def report_finished(args: SearchArgs, state: journal_lib.JobState, space_name: str,
                    metric: str) -> None:
  """What a rerun of a finished job says on stderr: that nothing runs, what became of the
  flags that change how trials run, the trials' table; a job none of whose trials gave a
  result is refused (exit 1) with how to go on."""
  log = console.whole(stderr)
  done = len(state.trial_ids(*journal_lib.TRAINED_FINAL_STATUSES))
  skipped = len(state.trial_ids(journal_lib.OVER_TARGET))
  log.print(f"search {args.job_dir} is finished ({done} trial(s)"
            + (f", {skipped} proposal(s) over the latency target not trained" if skipped else "")
            + "): reporting it, nothing runs (raise --max_nas_trial for more trials)",
            highlight=False, markup=False)
  changed = mutable_changes(state.settings or {}, args.settings())
  if changed:
    log.print(f"note: ignored, no trial is left to run or export: {'; '.join(changed)}",
              highlight=False, markup=False)
  log.print(_title(args, space_name, state), highlight=False, markup=False)
  log.print(_table(args, space_name, metric, state, {}, titled=False))
  summary.say_target_outcome(log, state)
  failed_all = all_failed(args.job_dir, state)
  failed = len(state.trial_ids(*journal_lib.FAILED_STATUSES))
  if failed > max_failed(args):  # as the search that stopped there said
    raise TrialsFailedError(_exceeded(failed, max_failed(args))
                            + (f"; {failed_all}" if failed_all else ""))
  if failed_all is not None:
    raise failed_all
  unreachable = latency_gate.unreachable(state, algorithm=args.search_algorithm)
  if unreachable and not state.trial_ids(journal_lib.COMPLETED, journal_lib.STOPPED):
    raise NascliError(unreachable)  # as the search that stopped there said
  if unreachable:
    log.print(unreachable, highlight=False, markup=False)


def max_failed(args: SearchArgs) -> int:
  """--max_failed_nas_trial, by default --max_nas_trial."""
  return (args.max_failed_nas_trial if args.max_failed_nas_trial is not None
          else args.max_nas_trial)


def _exceeded(failed: int, limit: int) -> str:
  return f"search stopped: {failed} failed trials exceed --max_failed_nas_trial {limit}"


def _retries_spent(lost: int, retries: int, why: str) -> str:
  """The reason of a trial failed for the attempts it lost."""
  return f"lost {lost} attempts (--max_trial_retries {retries}): {why}"[:500]


# What a later rung reuses of the metrics its first measured.
_CARRIED = ("latency_ms", "params", "flops")


def _check_scheduler(args: SearchArgs) -> None:
  s = args.scheduler
  scheduler_lib.check(s.name, s.min_steps if s.early_stopping else None,
                      s.reduction_factor if s.early_stopping else None,
                      multi_objective=bool(args.objectives))


def check_budget(s: scheduler_lib.SchedulerSettings, train_steps: int) -> None:
  """Early stopping needs a rung below the trials' budget (known once the config is built)."""
  if s.early_stopping:
    scheduler_lib.check_budget(s.name, s.min_steps, s.reduction_factor, train_steps)


class _Progress:
  """The progress line a search prints on stderr off a terminal, where no live table shows:
  trials done/total, the running trials with their step and loss (from their
  train_metrics.jsonl), the best reward so far, elapsed time and ETA."""

  def __init__(self, loop: "SearchLoop"):
    self.loop = loop
    self.interval = console.progress_seconds()
    self.begin = time.monotonic()
    self.last = self.begin
    self.durations: list[float] = []  # wall times of attempts that ended in this run

  def report(self, state: journal_lib.JobState, force: bool = False) -> None:
    if stderr.is_terminal:
      return
    now = time.monotonic()
    if not force and now - self.last < self.interval:
      return
    self.last = now
    console.whole(stderr).print(self.line(state, now), highlight=False, markup=False)

  def line(self, state: journal_lib.JobState, now: float) -> str:
    loop, a = self.loop, self.loop.args
    done = state.trial_ids(*journal_lib.TRAINED_FINAL_STATUSES)
    failed = len(state.trial_ids(*journal_lib.FAILED_STATUSES))
    skipped = len(state.trial_ids(journal_lib.OVER_TARGET))
    text = f"progress: {len(done)}/{a.max_nas_trial} trials done"
    text += f" ({failed} failed)" if failed else ""
    text += f"; {skipped} proposal(s) over the latency target, not trained" if skipped else ""
    running = list(loop._running.values())  # pylint: disable=protected-access
    if running:
      text += "; running " + ", ".join(
          f"{r.trial_id} ({_train_progress(os.path.join(loop.work_dir, r.trial_id))})"
          for r in running)
    best = state.best()
    if best is not None:
      text += f"; best reward {state.rewards[best]:.4f} (trial {best})"
    text += f"; elapsed {_duration(now - self.begin)}"
    eta = self.eta(state, running, now)
    return text + (f", ETA {_duration(eta)}" if eta is not None else "")

  def eta(self, state: journal_lib.JobState, running: list[_Running],
          now: float) -> float | None:
    """The trials still to run times the mean wall time of a trial, over the trials at once."""
    durations = self.durations or [
        m["wall_s"] for m in state.metrics.values() if isinstance(m.get("wall_s"), (int, float))]
    if not durations:
      return None
    mean = sum(durations) / len(durations)
    todo = max(0, self.loop.args.max_nas_trial
               - len(state.trial_ids(*journal_lib.TRAINED_FINAL_STATUSES)))
    work = todo * mean - sum(min(now - r.started, mean) for r in running)
    return max(0.0, work / max(1, self.loop.args.max_parallel_nas_trial))

  def ended(self, run: _Running) -> None:
    self.durations.append(time.monotonic() - run.started)


def _train_progress(trial_dir: str) -> str:
  """`step 40, loss 0.513` from the last line of the trial's train_metrics.jsonl, else
  `starting` (its process loads TensorFlow and builds the model before the first step)."""
  try:
    with open(os.path.join(trial_dir, "train_metrics.jsonl"), "rb") as f:
      f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
      lines = f.read().decode("utf-8", "replace").strip().splitlines()
    last = json.loads(lines[-1]) if lines else {}
  except (OSError, ValueError):
    last = {}
  if not isinstance(last, dict) or "step" not in last:
    return "starting"
  loss = last.get("loss")
  return f"step {last['step']}" + (f", loss {loss:.4g}" if isinstance(loss, float) else "")


def _duration(seconds: float) -> str:
  seconds = int(round(seconds))
  if seconds < 60:
    return f"{seconds}s"
  if seconds < 3600:
    return f"{seconds // 60}m{seconds % 60:02d}s"
  return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class _PlainDisplay:
  """Live's interface for a non-terminal: updates are not redrawn."""

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False

  def update(self, renderable) -> None:
    del renderable


def _trial_line(state: journal_lib.JobState, trial_id: str, metric: str = "accuracy") -> str:
  return summary.trial_line(state, trial_id, metric)  # its latency with its source
