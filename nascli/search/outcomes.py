"""How an attempt's end becomes journal events: lost (retried up to --max_trial_retries),
completed (its metrics and reward, fed to the controller), failed, paused at a rung
(rung_decisions.py), or never started because its predicted latency is over the target."""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from nascli import console
from nascli.search import attempts
from nascli.search import executors
from nascli.search import journal as journal_lib
from nascli.search import live_view
from nascli.search import pareto as pareto_lib
from nascli.search import trial as trial_lib

if TYPE_CHECKING:
  from nascli.search import controller as controller_lib

stderr = console.stderr()


class Outcomes:
  """SearchLoop's part that journals how each attempt ended."""

  def _finish(self, run: attempts.Running, outcome: executors.Outcome, ctl: controller_lib.Controller,
              state: journal_lib.JobState) -> bool:
    """Journals how the attempt ended; True when the trial must run again (attempt lost, or
    promoted to its next rung)."""
    run.node = outcome.node
    where = {"node": outcome.node} if outcome.node else {}
    if outcome.lost is not None:
      attempt = {"attempt": state.attempts.get(run.trial_id, 1), "reason": outcome.lost[:500],
                 **attempts.checkpointed(os.path.join(self.work_dir, run.trial_id)), **where}
      lost = state.losses.get(run.trial_id, 0) + 1
      if lost <= self.args.max_trial_retries:
        self._append({"event": "lost", "trial_id": run.trial_id, **attempt})  # with its node
        stderr.print(f"trial {run.trial_id}: attempt lost ({outcome.lost[:200]}); retrying")
        return True
      # The last loss and the failure are one event: a kill cannot come in between.
      self._record(run.trial_id, {
          "event": "failed", "trial_id": run.trial_id, "status": journal_lib.FAILED,
          "reason": attempts.retries_spent(lost, self.args.max_trial_retries, outcome.lost),
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
      stderr.print(live_view.trial_line(state, trial_id, self.metric), highlight=False,
                   markup=False)
    return True


  def _rung_metrics(self, analysis: dict[str, Any]) -> dict[str, Any]:
    """With early stopping, where an attempt's metrics were measured: its rung, the step it
    trained to and the checkpoint step it resumed from (the compute it spent), and whether it
    went on from there in memory (--paused_trials_per_worker)."""
    if not self.scheduler.early_stopping:
      return {}
    return {k: analysis.get(k) for k in ("rung", "step", "resumed_from", "in_memory")}


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
                    "reason": attempts.retries_spent(self.state.losses[trial_id],
                                             self.args.max_trial_retries,
                                             self.state.reasons.get(trial_id, ""))})
    return spent
