"""Early stopping's glue in the loop: the rung a trial's next attempt trains to, the journaled
rung reports, the scheduler's decisions on them (promote or stop), asha_promotions' promotions
by free workers, and the decisions a killed driver owed. The policies themselves are
scheduler.py's; every decision here is a function of the journal's rung reports."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from nascli.search import attempts
from nascli.search import journal as journal_lib
from nascli.search import scheduler as scheduler_lib
from nascli.search import trial as trial_lib

if TYPE_CHECKING:
  from nascli.search import controller as controller_lib


# What a later rung reuses of the metrics its first measured.
_CARRIED = ("latency_ms", "params", "flops")


class RungDecisions:
  """SearchLoop's part that journals rung reports and the scheduler's decisions."""


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


  def _rung_reported(self, run: attempts.Running, analysis: dict[str, Any],
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
