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
import os
import time
from typing import TYPE_CHECKING, Any

from rich.console import RenderableType
from rich.live import Live

from nascli import console
from nascli import latency_source
from nascli.errors import NascliError
from nascli.errors import TrialsFailedError
from nascli.search import attempts
from nascli.search import executors
from nascli.search import finished
from nascli.search import journal as journal_lib
from nascli.search import latency_gate
from nascli.search import live_view
from nascli.search import scheduler as scheduler_lib
from nascli.search import search_args
from nascli.search import summary
from nascli.search import trial as trial_lib
from nascli.search import warm_start
from nascli.search.exports import Exports
from nascli.search.interrupt_handling import InterruptHandling
from nascli.search.loop_setup import LoopSetup
from nascli.search.outcomes import Outcomes
from nascli.search.rung_decisions import RungDecisions
from nascli.search.trial import TrialSpec

if TYPE_CHECKING:  # pyglove's import (2-4 s) waits for a search that runs trials
  from nascli.search import controller as controller_lib

stderr = console.stderr()

# What other modules and the tests take from here (their homes are the modules above).
SearchArgs = search_args.SearchArgs
MUTABLE = search_args.MUTABLE
settle_auto = search_args.settle_auto
mutable_changes = search_args.mutable_changes
max_failed = search_args.max_failed
check_budget = search_args.check_budget
finished_job = finished.finished_job
report_finished = finished.report_finished
all_failed = finished.all_failed


class SearchLoop(LoopSetup, Outcomes, RungDecisions, InterruptHandling, Exports):
  """One search invocation over a job dir; its parts (the mixins) each own one concern."""

  def __init__(self, args: SearchArgs, executor: executors.Executor | None = None):
    self._setup(args, executor)

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


  def _start(self, state: journal_lib.JobState, trial_id: str, slot: Any) -> attempts.Running:
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
    run = self._running[trial_id] = attempts.Running(trial_id, handle, slot, time.monotonic())
    self._slots[trial_id] = slot
    self._append({"event": "started", "trial_id": trial_id,
                  "attempt": state.attempts.get(trial_id, 0) + 1,
                  **({"rung": rung.rung} if rung else {})})
    run.journaled = True
    return run


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


  def _title(self, state: journal_lib.JobState) -> str:
    return live_view.title(self.args, self.space_name, state)

  def _table(self, state: journal_lib.JobState, running: dict[str, attempts.Running],
             titled: bool = True) -> RenderableType:
    return live_view.table(self.args, self.space_name, self.metric, state, running, titled)

  def run(self) -> journal_lib.JobState:
    try:
      return self._run()
    finally:
      self.executor.close()
      self.outputs.flush()  # the report of the last event, written off the loop's path

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
    failed_all = finished.all_failed(self.args.job_dir, state)
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


  def _search(self) -> tuple[journal_lib.JobState, str | None]:
    """The loop, under the journal's writer lock: start trials while slots are free, wait for
    any to end, record it; returns the final state and why it stopped early (None: it ran
    every trial)."""
    ctl, queue = self._begin()
    state, running = self.state, self._running  # kept by _append: never replayed again
    free = self.executor.slots(self.args.max_parallel_nas_trial)
    stop_reason = None
    # A live table on a terminal; elsewhere (logs, CI) progress lines (live_view.py).
    display = (Live(self._table(state, running), console=stderr, refresh_per_second=2,
                    transient=False, redirect_stdout=False)
               if stderr.is_terminal else live_view.PlainDisplay())
    with display as live:
      while True:
        failed = len(state.trial_ids(*journal_lib.FAILED_STATUSES))
        if failed > self.max_failed and stop_reason is None:
          stop_reason = search_args.exceeded(failed, self.max_failed)
        if stop_reason is None:
          stop_reason = self._fill(free, queue, ctl)
        live.update(self._table(state, running))
        if not running:
          if stop_reason is None and state.trial_ids(journal_lib.PAUSED):
            self._stop_paused(state, ctl)
            self.outputs.update(state)
          break
        time.sleep(0.5)
        self._progress.report(state, force=self._collect(free, queue, ctl))
        live.update(self._table(state, running))
    return state, stop_reason

  def _begin(self) -> tuple[controller_lib.Controller, list[str]]:
    """Checks the job's settings, says what applies, rebuilds the controller from the journal
    and settles what a killed driver left; returns it and the trials to run again first."""
    a = self.args
    # pylint: disable-next=g-import-not-at-top,redefined-outer-name
    from nascli.search import controller as controller_lib
    began = journal_lib.check_settings(a.job_dir, a.settings(), a.overwrite,
                                       journal=self.journal, mutable_keys=search_args.MUTABLE)
    for line in self._notes(began.settings or {}):
      stderr.print(line, highlight=False, markup=False)
    events = warm_start.journal_once(self, self.journal.events())
    self.workspace.prepare(events)
    ctl = self._ctl = controller_lib.Controller.rebuild(
        self.space, a.search_algorithm, a.seed, events, num_objectives=self.num_objectives,
        **a.algorithm_options)
    self._decide_owed(ctl)  # rung reports a killed driver made no decision on
    state = self.state
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
    return ctl, queue

  def _notes(self, began: dict[str, Any]) -> list[str]:
    """The lines said once the job's settings are accepted (a refused command prints one)."""
    a, notes = self.args, [self._auto_note, self._few_trials]
    if self.gate is not None:
      notes.append(f"latency model {self.gate.path}: {self.gate.model.describe()}")
    elif a.trial.target_device_latency_ms and a.trial.latency_calculator == "in_trial":
      notes.append(latency_source.host_timing_note(self._serving_size))
    changed = search_args.mutable_changes(began, a.settings())
    if changed:
      notes.append(f"note: {'; '.join(changed)}: applied to the trials still to run and to the"
                   " exports at the end")
    return [n for n in notes if n]

  def _fill(self, free: list[Any], queue: list[str],
            ctl: controller_lib.Controller) -> str | None:
    """Starts attempts while a slot is free: interrupted or promoted trials first, then new
    proposals; returns why the search stops early, if it does."""
    a, state = self.args, self.state
    started = skipped = False
    stop_reason = None
    while free:
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
      self._start(state, trial_id, attempts.take_slot(free, self._slots.get(trial_id)))
      started = True
    if skipped:
      self.outputs.update(state)
    if started:
      self._progress.report(state, force=True)
    return stop_reason

  def _collect(self, free: list[Any], queue: list[str], ctl: controller_lib.Controller) -> bool:
    """Records the attempts that ended (a lost or promoted one runs again first); True if
    any did."""
    state, ended = self.state, False
    for trial_id, run in list(self._running.items()):
      outcome = self.executor.poll(run.handle)
      if outcome is None:
        continue
      if self._finish(run, outcome, ctl, state):
        queue.insert(0, trial_id)
      self._progress.ended(run)
      del self._running[trial_id]
      free.append(run.slot)
      self.outputs.update(state)
      if not stderr.is_terminal:
        stderr.print(live_view.trial_line(state, trial_id, self.metric))
      ended = True
    return ended
