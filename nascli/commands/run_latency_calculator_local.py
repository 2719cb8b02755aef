"""`nascli run_latency_calculator_local`: a job's trials' latency, measured on this machine.

Vertex AI NAS's command of this name runs its latency calculator container beside a search;
ours is that calculator, run where it stands (the target device), over the search's job dir
(see nascli/latency_calculator.py for the exchange with the trials).
"""

from typing import Annotated, Optional

import typer

from nascli import interrupts
from nascli.commands import search_flags as f
from nascli.commands.options import flag
from nascli.latency_calculator import CalculatorArgs


def run_latency_calculator_local(
    local_output_dir: Annotated[Optional[str], typer.Option(
        *flag("local_output_dir"), help="The search's job dir (its --local_output_dir), a"
        " folder or gs://BUCKET/PREFIX.", show_default=False)] = None,
    target_device_type: f.TargetDevice = "cpu",
    latency_worker_id: Annotated[int, typer.Option(
        *flag("latency_worker_id"), help="This calculator measures the trials whose id mod"
        " --num_latency_workers is this.")] = 0,
    num_latency_workers: Annotated[int, typer.Option(
        *flag("num_latency_workers"), help="Calculators sharing the job, each with its own"
        " --latency_worker_id.")] = 1,
    once: Annotated[bool, typer.Option(
        *flag("once"), help="Measure the trials waiting now, then exit (default: go on until"
        " the search has ended).")] = False,
    poll_interval_s: Annotated[float, typer.Option(
        *flag("poll_interval_s"), help="Seconds between looks at the job dir.")] = 2.0,
    idle_timeout_s: Annotated[float, typer.Option(
        *flag("idle_timeout_s"), help="Give up (exit 1) after this many seconds with no request"
        " and no search event while the search has not ended; 0: never.")] = 3600.0,
    latency_runs: Annotated[int, typer.Option(
        *flag("latency_runs"), help="Timed runs per trial; the latency is their median.")] = 20,
    warmup_runs: Annotated[int, typer.Option(
        *flag("warmup_runs"), help="Untimed runs before timing.")] = 5,
    num_threads: Annotated[int, typer.Option(
        *flag("num_threads"), help="TFLite interpreter threads (cpu-tflite).")] = 1,
    as_json: Annotated[bool, typer.Option(
        *flag("json"), help="Print each trial's result as a JSON line.")] = False,
) -> None:
  """Measure a search's trials' latency on this machine as they finish training (a search with
  --latency_calculator external waits for it)."""
  # pylint: disable=g-import-not-at-top
  from nascli import latency_calculator
  args = CalculatorArgs(
      job_dir=local_output_dir, target_device_type=target_device_type,
      latency_worker_id=latency_worker_id, num_latency_workers=num_latency_workers, once=once,
      poll_interval_s=poll_interval_s, idle_timeout_s=idle_timeout_s, warmup=warmup_runs,
      runs=latency_runs, num_threads=num_threads, as_json=as_json)
  latency_calculator.check_args(args)  # before any framework is imported
  calculator = latency_calculator.Calculator(args)
  try:
    with latency_calculator.worker_lock(args):
      calculator.run()
  except KeyboardInterrupt as e:
    raise interrupts.Interrupted.of(
        e, f"latency calculator ({args.worker}) for {args.job_dir} after measuring"
        f" {len(calculator.measured)} trial(s)",
        "run the same command again to go on: a measured trial is not measured again, and"
        " the trials waiting for it wait up to their --latency_timeout_s") from None
