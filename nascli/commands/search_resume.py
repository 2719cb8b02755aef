"""`nascli search_resume`: a new job that continues a previous search with more trials."""

import contextlib
import sys
from typing import Annotated, Optional

import typer

from nascli import interrupts
from nascli.commands import ray_flags as r
from nascli.commands import search_flags as f
from nascli.commands.options import flag, given, takes
from nascli.errors import NascliError

PreviousJobDir = Annotated[str, typer.Option(
    *flag("previous_job_dir"), help="The search job dir to continue (a folder or"
    " gs://BUCKET/PREFIX; only read). Vertex's --previous_nas_job_id.", show_default=False)]
NewTotal = Annotated[int, typer.Option(
    *flag("max_nas_trial"), help="Trials of the new job in total, the previous job's"
    " included.", show_default=False)]
NewJobDir = Annotated[Optional[str], typer.Option(
    *flag("local_output_dir"), help="The new job dir, a folder or gs://BUCKET/PREFIX"
    " (default: beside the previous one, its name + -resumed).")]
_AS_BEFORE = " (default: as the previous job)"
MaxParallel = Annotated[Optional[int], typer.Option(
    *flag("max_parallel_nas_trial"), help="Trials at once" + _AS_BEFORE + ".")]
TrialIsolation = Annotated[Optional[str], typer.Option(
    *flag("trial_isolation"), help="worker or process" + _AS_BEFORE + ".")]
MaxTrialsPerWorker = Annotated[Optional[int], typer.Option(
    *flag("max_trials_per_worker"), help="Trials a warm worker runs before a fresh one takes"
    " over" + _AS_BEFORE + ".")]
ExportTopK = Annotated[Optional[int], typer.Option(
    *flag("export_top_k"), help="SavedModels of the K best trials at the end" + _AS_BEFORE
    + ".")]
PausedTrialsPerWorker = Annotated[Optional[int], typer.Option(
    *flag("paused_trials_per_worker"), help="With early stopping: paused trials a warm worker"
    " keeps in memory" + _AS_BEFORE + ".")]
MaxTrialRetries = Annotated[Optional[int], typer.Option(
    *flag("max_trial_retries"), help="Retries of a trial whose worker or node died"
    + _AS_BEFORE + ".")]
RayAddress = Annotated[Optional[str], typer.Option(
    *flag("ray_address"), help="Run the trials on a Ray cluster as `nascli search` does: auto,"
    " HOST:PORT or local (default: on this machine, as search_in_local).")]

# The settings a resume may change (nascli/search/search_loop.py MUTABLE), as flags.
_MUTABLE_FLAGS = ("max_nas_trial", "max_parallel_nas_trial", "max_failed_nas_trial",
                  "max_trial_retries", "trial_isolation", "max_trials_per_worker",
                  "export_top_k", "trial_timeout", "paused_trials_per_worker")


@takes("max_failed_nas_trial", "trial_isolation", "max_trials_per_worker", "trial_timeout",
       "export_top_k", "paused_trials_per_worker", "max_trial_retries", "latency_model",
       "ray_address", f.RESOURCES, f.IMAGE, f.LOCAL, "as_json")
def search_resume(previous_job_dir: PreviousJobDir, max_nas_trial: NewTotal,
                  local_output_dir: NewJobDir = None, max_parallel_nas_trial: MaxParallel = None,
                  trial_isolation: TrialIsolation = None,
                  max_trials_per_worker: MaxTrialsPerWorker = None,
                  export_top_k: ExportTopK = None,
                  paused_trials_per_worker: PausedTrialsPerWorker = None,
                  max_trial_retries: MaxTrialRetries = None, ray_address: RayAddress = None,
                  **shared) -> None:
  """Continue a search in a new job with more trials: the previous job's trials copied and
  kept, its controller rebuilt from its journal, its settings unchanged."""
  values = given(locals())
  f.check_counts(values)
  if trial_isolation is not None and trial_isolation not in f.TRIAL_ISOLATIONS:
    raise NascliError(f"unknown --trial_isolation {trial_isolation!r}; known:"
                      f" {', '.join(f.TRIAL_ISOLATIONS)}")
  if max_trial_retries is not None and max_trial_retries < 0:
    raise NascliError(f"--max_trial_retries must not be negative, got {max_trial_retries}")
  env = r.check({**values, "max_trial_retries": max_trial_retries or 0}) if ray_address else None
  # pylint: disable=g-import-not-at-top
  from nascli.search import resume
  job_dir = local_output_dir or resume.default_job_dir(previous_job_dir)
  try:
    model = resume.latency_model_for(previous_job_dir, values["latency_model"])  # before the copy
    settings = resume.prepare(previous_job_dir, job_dir, max_nas_trial)  # copies, once
    args = resume.search_args(settings, job_dir, latency_model=model,
                              **{k: values[k] for k in _MUTABLE_FLAGS})
    print(f"job dir: {job_dir} (continues {previous_job_dir})", file=sys.stderr, flush=True)
    local_main = f.local_search()
    executor = None
    if ray_address:
      executor = r.executor({**values, "trial_isolation": args.trial_isolation,
                             "max_trials_per_worker": args.max_trials_per_worker,
                             "trial_timeout": args.trial_timeout}, env)
      # Ray's driver prints worker and raylet messages with print(): logs, not results.
      with contextlib.redirect_stdout(sys.stderr):
        rows = local_main.run(args, None, executor)
    else:
      rows = local_main.run(args, None)
  except KeyboardInterrupt as e:
    if getattr(e, "what", None):
      raise
    raise interrupts.Interrupted.of(
        e, f"search_resume {job_dir} before a trial started",
        "run the same command again to continue") from None
  f.print_rows(rows, values["as_json"])
