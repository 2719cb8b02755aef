"""One NAS trial: train, evaluate, time, reward (and, when asked, export).

A trial runs in a warm worker process (nascli/search/worker.py: TensorFlow imported once, trial
after trial) or, with `--trial_isolation process`, in a process of its own (`python -m
nascli.search.trial SPEC.json`); either way outside the driver, so a trial that crashes, runs out
of memory or hangs cannot take the search down, and each can be pinned to one GPU with
CUDA_VISIBLE_DEVICES. The outcome is in the trial directory:
`model_analysis.json` and `job_status.json` (completed / failed / failed_with_nan /
interrupted: the driver passed on a Ctrl-C or SIGTERM, and the trial runs again on resume; or
nascli_error: nascli's own code around the trial raised, which is not the trial's failure, and
the driver stops the search).

With early stopping (`TrialSpec.rung`, nascli/search/scheduler.py) an attempt trains only to its
rung's step, resuming from the trial's checkpoint, and reports there: model_analysis.json with
that rung's metrics and job_status.json `paused` (`completed` at the last rung, the full budget).
Latency, params and FLOPs are measured at the first rung and carried on (the driver passes the
journal's values): they do not change with training, and the reward needs the latency.
"""
import contextlib
import json
import os
import statistics
import sys
import time
import traceback
from typing import Any

from nascli import interrupts
from nascli import runtime
from nascli import storage
from nascli.errors import NascliError
# The trial's spec and trial-dir names, re-exported: callers know them from here.
# pylint: disable=unused-import
from nascli.search.trial_dir import ANALYSIS
from nascli.search.trial_dir import NASCLI_ERROR
from nascli.search.trial_dir import NascliBug
from nascli.search.trial_dir import check_attempt
from nascli.search.trial_dir import checkpoint_step
from nascli.search.trial_dir import completed
from nascli.search.trial_dir import mark_interrupted
from nascli.search.trial_dir import mark_stopped
from nascli.search.trial_dir import reported
from nascli.search.trial_spec import RungSpec
from nascli.search.trial_spec import TrialSpec
from nascli.search.trial_spec import read_spec
from nascli.search.trial_spec import write_spec
# pylint: enable=unused-import


def _write_json(path: str, data: dict) -> None:
  """Whole or not at all: the driver reads these files when the trial process ends."""
  storage.write_text(path, json.dumps(data, indent=2))


def timing_breakdown(spec: TrialSpec, ready: float, phases: dict[str, float],
                     train_result: dict) -> dict[str, Any]:
  """Where a trial's wall time went, split into the training work and the fixed overhead.

  The step work is the steps at the steady per-step time (loops after the first); the first
  loop's excess over that is graph tracing and input pipeline start, counted as overhead.
  `startup_s` is the wait from the driver's request to the trial's start: a fresh process's
  start and imports, or, in a warm worker, what was left of its start when the request came.
  """
  loops = train_result.get("loops") or []
  steps = sum(n for n, _ in loops)
  steady = [t / n for n, t in loops[1:] if n] or [t / n for n, t in loops if n]
  step_s = statistics.median(steady) * steps if steady else 0.0
  eval_s = train_result.get("eval_seconds", 0.0)
  startup = max(0.0, ready - spec.spawned_at) if spec.spawned_at else None
  timing = {
      "startup_s": startup,
      "train_total_s": phases["train"],
      "train_steps_s": step_s,
      "eval_s": eval_s,
      # config, task and model build, tracing, checkpoints
      "train_overhead_s": phases["train"] - step_s - eval_s,
      "export_s": phases.get("export", 0.0),  # only with --export_every_trial
      "latency_s": phases["latency"],
      "analysis_s": phases["analysis"],
  }
  total = (startup or 0.0) + sum(phases.values())
  overhead = total - step_s - eval_s
  timing.update({"total_s": total, "fixed_overhead_s": overhead,
                 "fixed_overhead_share": overhead / total if total else None})
  return {k: None if v is None else round(v, 3) for k, v in timing.items()}


class TrialFailure(Exception):
  """The trial's own work failed: its architecture, config, training, evaluation, export or
  measurement (the error is its `__cause__`). The trial is `failed` and the search goes on;
  any other error in an attempt is nascli's own (see `attempt`)."""


@contextlib.contextmanager
def _trials_own_work():
  """What raises in here is charged to the trial (TrialFailure): Model Garden, TensorFlow, the
  user's YAML and search space, out-of-memory, a NaN loss, an unmeasurable model."""
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except
    raise TrialFailure(" ".join(f"{type(e).__name__}: {e}".split())[:500]) from e


def _train_and_measure(spec: TrialSpec) -> dict[str, Any]:
  """The trial's own work: trains its architecture (to its rung's step), evaluates it, exports
  it if asked, times it and counts it, and computes its reward. Returns what the analysis
  reports, with the phases' seconds."""
  # pylint: disable=g-import-not-at-top
  from nascli import latency_calculator
  from nascli.search import reward
  from tf_vision import job_status
  binding = spec.space().require_binding()
  from nascli import training  # TensorFlow and Model Garden
  from tf_vision import model_analysis
  from tf_vision.serving import export_lib, latency
  settings = spec.trial
  phases, clock = {}, time.monotonic()

  def lap(name: str) -> None:
    nonlocal clock
    now = time.monotonic()
    phases[name] = now - clock
    clock = now

  clock = time.monotonic()
  result = training.train(spec.train_args())
  lap("train")
  final = result.get("status", job_status.COMPLETED) == job_status.COMPLETED
  metrics = result["eval_metrics"]
  if binding.metric not in metrics:
    raise NascliError(f"trial {spec.trial_id}: evaluation gave no {binding.metric!r}")
  accuracy = metrics[binding.metric]
  params, model = result.pop("params"), result.pop("model")
  if settings.export_every_trial and final:
    import tensorflow as tf
    export_lib.export(params, tf.train.latest_checkpoint(spec.trial_dir),
                      os.path.join(spec.trial_dir, "export"), input_type="image_tensor",
                      overwrite=True)
    lap("export")
  measured = spec.rung.measured if spec.rung else {}
  if measured:  # a later rung: measured at the first
    latency_report = {"measured_on": "the model of the trial's first rung",
                      "latency_device": measured.get("latency_device")}
    latency_ms, num_params, flops = (measured["latency_ms"], measured["params"],
                                     measured["flops"])
    phases.update(latency=0.0, analysis=0.0)
  elif spec.predicted_latency:  # --latency_model: predicted by the driver, not timed here
    latency_ms = spec.predicted_latency["latency_ms"]
    latency_report = {"measured_on": "predicted by the search's latency model before training",
                      "latency_device": spec.predicted_latency["latency_device"]}
    phases["latency"] = 0.0
    num_params, flops = model_analysis.model_size(model, list(params.task.model.input_size))
    lap("analysis")
  elif settings.latency_calculator == latency_calculator.EXTERNAL:
    # The calculator times the model from the trial folder (params.yaml, checkpoint) while
    # this trial counts its FLOPs; then the trial waits for its answer.
    exchange = spec.latency_dir or spec.trial_dir
    latency_calculator.request(exchange, spec.trial_id, spec.trial_dir)
    num_params, flops = model_analysis.model_size(model, list(params.task.model.input_size))
    lap("analysis")
    answer = latency_calculator.wait_for_result(
        exchange, spec.trial_id, settings.latency_timeout_s,
        job_dir=os.path.dirname(exchange.rstrip("/")), local_trial_dir=spec.trial_dir)
    latency_ms = answer["latency_ms"]
    latency_report = {**answer.get("report", {}), "latency_device": answer["latency_device"],
                      "measured_on": "the latency calculator (run_latency_calculator_local)"}
    lap("latency")
  else:
    # Timed at the size the model will serve: a model trained smaller (a proxy) is built again
    # there (fresh weights: the latency does not depend on their values).
    served = export_lib.at_serving_size(params, settings.latency_input_size)
    timed = model if served is params else export_lib.serving_model(served)
    latency_report = latency.measure_model_latency(served, timed, batch_sizes=(1,),
                                                   runs=settings.latency_runs)
    latency_ms = latency_report["batch"]["1"]["median_ms"]
    latency_report["measured_on"] = ("serving function of the trained model" if timed is model
                                     else "serving function of the architecture at its serving"
                                     " size (fresh weights)")
    latency_report["latency_device"] = latency_calculator.device_of(
        "cpu" if latency_report["device"] == "CPU" else "gpu",
        None if latency_report["device"] == "CPU" else latency_report["device"], "trial",
        input_size=export_lib.serving_size_of(served))
    lap("latency")
    num_params, flops = model_analysis.model_size(model, list(params.task.model.input_size))
    lap("analysis")
  return {"result": result, "final": final, "phases": phases, "metric": binding.metric,
          "metrics": metrics, "accuracy": accuracy, "latency_ms": latency_ms,
          "latency_report": latency_report, "params": num_params, "flops": flops,
          "reward": reward.compute(accuracy, latency_ms, settings.target_device_latency_ms,
                                   settings.latency_constraint, settings.latency_weight)}


def run(spec: TrialSpec, ready: float | None = None) -> dict:
  """Runs the trial; returns model_analysis (raises on failure, after recording it): a
  TrialFailure when the trial's own work failed, any other error when nascli's code around it
  did.

  Lean: latency is timed on the trained model's serving function in memory (the graph the
  SavedModel would serve) and params/FLOPs are read off that model; the SavedModel itself is
  exported only with `export_every_trial` (the search exports its best trials at the end).
  """
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  ready = time.time() if ready is None else ready
  os.makedirs(spec.trial_dir, exist_ok=True)
  with contextlib.suppress(FileNotFoundError):  # an earlier rung's report is not this attempt's
    os.remove(os.path.join(spec.trial_dir, ANALYSIS))
  _write_json(os.path.join(spec.trial_dir, "nas_params_str.json"), spec.nas_params)
  with _trials_own_work():
    done = _train_and_measure(spec)
  result = done["result"]
  analysis = {
      "trial_id": spec.trial_id,
      "accuracy": done["accuracy"],
      "accuracy_metric": done["metric"],
      "latency_ms": done["latency_ms"],
      "latency_device": done["latency_report"].get("latency_device"),
      "reward": done["reward"],
      "params": done["params"],
      "flops": done["flops"],
      "eval_metrics": done["metrics"],
      "latency": done["latency_report"],
      "step": result["step"],
      "seconds": result["wall_seconds"],
      "timing": timing_breakdown(spec, ready, done["phases"], result),
  }
  rung = {}
  if spec.rung:
    rung = {"rung": spec.rung.rung, "final": done["final"],
            "resumed_from": result["resumed_from"], "in_memory": result["in_memory"],
            "train_steps": result["train_steps"]}
    analysis.update(rung)
  _write_json(os.path.join(spec.trial_dir, ANALYSIS), analysis)
  job_status.write(spec.trial_dir, job_status.COMPLETED if done["final"] else job_status.PAUSED,
                   step=result["step"], reward=analysis["reward"], accuracy=done["accuracy"],
                   latency_ms=done["latency_ms"], **rung)
  return analysis


def _nascli_error(spec: TrialSpec, error: Exception) -> int:
  """Records that nascli's own code around the trial raised `error` (NASCLI_ERROR, for the
  driver's check_attempt), with one line in the trial's log (and the traceback with
  NASCLI_DEBUG=1); the attempt's exit code."""
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  bug = not isinstance(error, (NascliError, OSError))
  reason = " ".join(f"{type(error).__name__}: {error}".split())[:500]
  if runtime.debug():
    traceback.print_exc()
  job_status.write(spec.trial_dir, NASCLI_ERROR, reason=reason, bug=bug,
                   traceback=traceback.format_exc()[-8000:])
  print(f"Error: {'a bug in nascli around the trial, ' if bug else ''}{reason}",
        file=sys.stderr, flush=True)
  return 1


def attempt(spec_path: str) -> int:
  """Runs one attempt of the trial in `spec_path` in this process (a fresh trial process or a
  warm worker); returns its exit code. The outcome goes to the trial dir, not only the log:
  `failed` (or `failed_with_nan`) when the trial's own work failed, NASCLI_ERROR when nascli's
  code around it did (the search stops: no architecture is charged with nascli's bug).

  The driver passes a Ctrl-C or SIGTERM on to the trial (interrupts.handled raises it as
  Interrupted): the trial records `interrupted` and returns 130 / 143 with one line in its log.
  """
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  ready = time.time()
  spec = read_spec(spec_path)
  try:
    run(spec, ready)
    return 0
  except KeyboardInterrupt as e:
    mark_interrupted(spec.trial_dir, interrupts.signal_of(e))
    step = checkpoint_step(spec.trial_dir)
    line = interrupts.Interrupted.of(
        e, f"trial {spec.trial_id}" + (f" (checkpoint at step {step})" if step else ""),
        "the search runs it again when it resumes").message()
    print(line, file=sys.stderr, flush=True)
    return interrupts.exit_code(e)
  except TrialFailure as failure:
    # Any failure of one architecture (including out-of-memory) ends this trial, not the search.
    if runtime.debug():
      traceback.print_exc()
    # A NaN loss is raised by tf_vision.train_lib, so only once it is loaded (not importing it
    # here spares a trial that failed before training TensorFlow's import).
    train_lib = sys.modules.get("tf_vision.train_lib")
    if train_lib and isinstance(failure.__cause__, train_lib.NonFiniteLossError):
      job_status.write(spec.trial_dir, job_status.FAILED_WITH_NAN, reason=str(failure.__cause__))
      print(f"Error: {failure.__cause__}", file=sys.stderr, flush=True)
      return 1
    status = job_status.read(spec.trial_dir) or {}
    if status.get("status") != job_status.FAILED_WITH_NAN:
      job_status.write(spec.trial_dir, job_status.FAILED, reason=str(failure))
    print(f"Error: {failure}", file=sys.stderr, flush=True)
    return 1
  except Exception as e:  # pylint: disable=broad-except
    return _nascli_error(spec, e)


def main(argv: list[str]) -> int:
  """Entry point of a one-trial process (`--trial_isolation process`)."""
  # pylint: disable=g-import-not-at-top
  from nascli import frameworks
  runtime.quiet_libraries()
  interrupts.relayed()  # the driver passes on each Ctrl-C this process also gets from its group
  with interrupts.handled():
    try:
      frameworks.load()
    except KeyboardInterrupt as e:  # before the trial began: it runs again on resume
      return interrupts.exit_code(e)
    return attempt(argv[0])


if __name__ == "__main__":
  runtime.finish(main(sys.argv[1:]))  # no 15-60 s tf.data teardown after the results
