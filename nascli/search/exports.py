"""The end of a search: SavedModels of the --export_top_k best trials, made in one warm worker
(and, with a latency model, timed for real on its runtime)."""

from __future__ import annotations

import os
import time

from nascli import console
from nascli import interrupts
from nascli import storage
from nascli.search import executors
from nascli.search import measured
from nascli.search import journal as journal_lib
from nascli.search import warm_workers
from nascli.search.search_args import SearchArgs

stderr = console.stderr()


def to_export(args: SearchArgs, state: journal_lib.JobState) -> list[str]:
  """The --export_top_k best completed trials that have no SavedModel yet."""
  completed = sorted(state.trial_ids(journal_lib.COMPLETED), key=lambda t: -state.rewards[t])
  return [t for t in completed[:args.export_top_k]
          if not storage.exists(storage.join(args.job_dir, t, "export", "saved_model",
                                             "saved_model.pb"))]


class Exports:
  """SearchLoop's part that exports the best trials at the end."""

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
      with self.journal.open_for_writing():
        for trial_id in best:
          event = measured.event(a.job_dir, trial_id, state)
          if event is not None:
            self._append(event)
            stderr.print(measured.line(event), highlight=False, markup=False)
      if state.measured:
        self.outputs.update(state)
    if code != 0:
      stderr.print(f"warning: exporting did not finish for every trial (code {code}); see"
                   f" {log}, or run `nascli export --model_dir {storage.join(a.job_dir, best[0])}`",
                   highlight=False)
