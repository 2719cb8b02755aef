"""A job that is done: told apart from one to resume (`finished_job`), reported from its journal
without a worker or TensorFlow (`report_finished`), or refused when none of its trials gave a
result (`all_failed`)."""

from __future__ import annotations

from nascli import console
from nascli.errors import NascliError
from nascli.errors import TrialsFailedError
from nascli.search import exports
from nascli.search import journal as journal_lib
from nascli.search import latency_gate
from nascli.search import live_view
from nascli.search import search_args
from nascli.search import summary
from nascli.search.search_args import SearchArgs

stderr = console.stderr()


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
  if (journal_lib.fingerprint(first["settings"], search_args.MUTABLE)
      != journal_lib.fingerprint(settings, search_args.MUTABLE)):
    return None
  state = journal_lib.replay(events)
  if state.unfinished() or state.trial_ids(journal_lib.PAUSED):
    return None  # paused: a rung report awaits its decision or a promotion
  failed = len(state.trial_ids(*journal_lib.FAILED_STATUSES))
  if (state.trained_count() < args.max_nas_trial and failed <= search_args.max_failed(args)
      and not (args.trial.latency_model and latency_gate.unreachable(state))):
    return None
  if exports.to_export(args, state):
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
  changed = search_args.mutable_changes(state.settings or {}, args.settings())
  if changed:
    log.print(f"note: ignored, no trial is left to run or export: {'; '.join(changed)}",
              highlight=False, markup=False)
  log.print(live_view.title(args, space_name, state), highlight=False, markup=False)
  log.print(live_view.table(args, space_name, metric, state, {}, titled=False))
  summary.say_target_outcome(log, state)
  failed_all = all_failed(args.job_dir, state)
  failed = len(state.trial_ids(*journal_lib.FAILED_STATUSES))
  if failed > search_args.max_failed(args):  # as the search that stopped there said
    raise TrialsFailedError(search_args.exceeded(failed, search_args.max_failed(args))
                            + (f"; {failed_all}" if failed_all else ""))
  if failed_all is not None:
    raise failed_all
  unreachable = latency_gate.unreachable(state, algorithm=args.search_algorithm)
  if unreachable and not state.trial_ids(journal_lib.COMPLETED, journal_lib.STOPPED):
    raise NascliError(unreachable)  # as the search that stopped there said
  if unreachable:
    log.print(unreachable, highlight=False, markup=False)
