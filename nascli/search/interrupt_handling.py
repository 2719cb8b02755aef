"""Ctrl-C or SIGTERM during a search: the running trials get the signal and record
`interrupted` (after a checkpoint where they can), the driver journals it for each and says in
one line what stopped and how to go on."""

from __future__ import annotations

import os
import signal

from nascli import console
from nascli import interrupts
from nascli.search import attempts
from nascli.search import executors
from nascli.search import journal as journal_lib
from nascli.search import trial as trial_lib

stderr = console.stderr()


class InterruptHandling:
  """SearchLoop's part that stops a search cleanly on a signal."""

  def _interrupted(self, error: KeyboardInterrupt) -> interrupts.Interrupted:
    """Stops the running attempts and records how each ended; the one line main() prints.

    Each trial gets the driver's signal and records `interrupted` itself (after a checkpoint,
    where training can save one); the driver marks the job_status.json of any that could not
    and journals `interrupted` for each, so a rerun re-runs exactly these trials first. An
    attempt that completed before the signal reached it is recorded as completed; any other
    outcome (even a failure, which may be the interrupt's doing) runs again.
    """
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
                      "signal": signal.Signals(signum).name, **attempts.checkpointed(trial_dir)})
        stopped.append(run.trial_id)
    self._running.clear()
    if state.settings is not None and state.proposals:
      self.outputs.update(state)
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
