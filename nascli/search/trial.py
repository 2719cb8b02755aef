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
import dataclasses
import json
import os
import re
import signal
import statistics
import sys
import time
import traceback
from typing import Any

from nascli import interrupts
from nascli import runtime
from nascli import storage
from nascli.errors import NascliError
from nascli.run_spec import Architecture, TrialSettings, from_dict

ANALYSIS = "model_analysis.json"
# job_status.json of an attempt that nascli's own code around the trial broke (a bug, or the
# disk): not the trial's failure. The driver stops the search (`check_attempt`); the trial runs
# again when it resumes.
NASCLI_ERROR = "nascli_error"
_CHECKPOINT_PATH = re.compile(r'^model_checkpoint_path:\s*"[^"]*?(\d+)"\s*$', re.M)


@dataclasses.dataclass
class RungSpec:
  """Early stopping: the rung an attempt trains to (0: the first), and the ladder's settings
  (scheduler.rung_steps: the steps depend on the trial's train_steps, known once its config is
  built)."""
  rung: int
  min_steps: int | None  # None: ceil(train_steps / reduction_factor**2)
  reduction_factor: int
  # latency_ms, params, flops of the trial's first rung (from the journal), once reported.
  measured: dict[str, Any] = dataclasses.field(default_factory=dict)
  # --paused_trials_per_worker: paused trials the warm worker keeps in memory, so that its
  # next rung continues there without a rebuild (tf_vision.train_lib.PausedRuns).
  kept_per_worker: int = 0

  def step(self, train_steps: int) -> int:
    from nascli.search import scheduler  # pylint: disable=g-import-not-at-top
    steps = scheduler.rung_steps(self.min_steps, self.reduction_factor, train_steps)
    return steps[min(self.rung, len(steps) - 1)]


@dataclasses.dataclass
class TrialSpec:
  """One attempt of one trial, as trial_spec.json holds it: the trial's architecture and the
  search's trial settings, as they are (its run's seed: a trial trains the same wherever it
  runs)."""
  job_dir: str
  trial_id: str
  search_space: str  # --prebuilt_search_space (with a module: the space it may be based on)
  nas_params: dict[str, str]
  trial: TrialSettings = dataclasses.field(default_factory=TrialSettings)
  spawned_at: float | None = None  # time.time() when the driver asked for the attempt
  # --search_space_module: the trial imports it and decodes nas_params against its space.
  search_space_module: str | None = None
  rung: RungSpec | None = None  # early stopping; None: the whole budget in one attempt
  # --latency_calculator external: the trial's folder in the job dir, where it asks the
  # calculator and reads its answer (None: trial_dir; a gs:// job dir's trials run staged).
  latency_dir: str | None = None
  # --latency_model: the latency the driver predicted before the trial trained, {latency_ms,
  # latency_device} (nascli/search/latency_gate.py): reported as it is, and nothing is timed.
  predicted_latency: dict[str, Any] | None = None

  @property
  def trial_dir(self) -> str:
    return os.path.join(self.job_dir, self.trial_id)

  def train_args(self) -> Any:
    """The nascli.training.TrainArgs this trial trains with: the search's run, this
    architecture, into the trial dir."""
    from nascli import training  # pylint: disable=g-import-not-at-top
    run = dataclasses.replace(self.trial.run, architecture=Architecture(
        self.search_space, self.nas_params, self.search_space_module))
    if self.trial.latency_input_size:  # params.yaml says where the model is timed
      run = dataclasses.replace(run, options=training.merge(run.options, {
          "task": {"latency_input_size": self.trial.latency_input_size}}))
    return training.TrainArgs(run=run, model_dir=self.trial_dir, keep_model=True,
                              stop_at=self.rung.step if self.rung else None,
                              curve_points=self.trial.validation_curve_points,
                              # A later rung, or a retried attempt, continues the data stream.
                              checkpoint_input=True,
                              keep_paused=self.rung.kept_per_worker if self.rung else 0)

  def space(self) -> Any:
    """The registry entry of the trial's space (its module imported and registered first)."""
    from tf_vision import search_spaces  # pylint: disable=g-import-not-at-top
    return search_spaces.resolve_search_space(self.search_space, self.search_space_module)


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


def checkpoint_step(trial_dir: str) -> int | None:
  """The step of the trial's latest checkpoint, from TensorFlow's `checkpoint` index file (read
  as text: the driver marks interrupted trials without loading TensorFlow)."""
  try:
    with open(os.path.join(trial_dir, "checkpoint"), encoding="utf-8") as f:
      match = _CHECKPOINT_PATH.search(f.read())
  except OSError:
    return None
  return int(match.group(1)) if match else None


def _analysis_of(trial_dir: str, status: dict[str, Any]) -> bool:
  """model_analysis.json is there and reports the attempt `status` describes (the same step
  and rung): the analysis an earlier rung left is not this attempt's outcome."""
  try:
    with open(os.path.join(trial_dir, ANALYSIS), encoding="utf-8") as f:
      analysis = json.load(f)
  except (OSError, ValueError):
    return False
  return (isinstance(analysis, dict) and analysis.get("step") == status.get("step")
          and analysis.get("rung") == status.get("rung"))


def completed(trial_dir: str) -> bool:
  """The trial in `trial_dir` ran to its end: job_status.json says so and its analysis is
  written, for that step (training alone writes `completed` before the export and the latency,
  when an earlier rung's analysis may still be there)."""
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  status = job_status.read(trial_dir) or {}
  return status.get("status") == job_status.COMPLETED and _analysis_of(trial_dir, status)


def reported(trial_dir: str) -> bool:
  """The attempt in `trial_dir` ended with its outcome written: completed, or (early stopping)
  its rung's report (training alone writes `paused` before the latency and the analysis)."""
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  status = job_status.read(trial_dir) or {}
  return completed(trial_dir) or (status.get("status") == job_status.PAUSED and "rung" in status
                                  and _analysis_of(trial_dir, status))


def mark_interrupted(trial_dir: str, signum: int) -> bool:
  """Records in job_status.json that the attempt was interrupted (its resume step: the latest
  checkpoint's), unless training already did so; True if it wrote. An attempt stopped after
  training wrote `completed` is interrupted too: the trial is done only with its analysis."""
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  if (job_status.read(trial_dir) or {}).get("status") == job_status.INTERRUPTED:
    return False
  step = checkpoint_step(trial_dir)
  job_status.write(trial_dir, job_status.INTERRUPTED, step=step, checkpoint_step=step,
                   signal=signal.Signals(signum).name)
  return True


def mark_stopped(trial_dir: str, reason: str) -> None:
  """Records in job_status.json that the scheduler stopped the trial after the rung its
  `paused` status reports (its step, reward and metrics stay)."""
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  status = {k: v for k, v in (job_status.read(trial_dir) or {}).items()
            if k not in ("status", "time", "final", "reason")}
  job_status.write(trial_dir, job_status.STOPPED, **status, reason=reason)


def write_spec(spec_path: str, spec: TrialSpec) -> None:
  storage.write_text(spec_path, json.dumps(dataclasses.asdict(spec), indent=2))


def read_spec(spec_path: str) -> TrialSpec:
  with open(spec_path, encoding="utf-8") as f:
    return from_dict(TrialSpec, json.load(f), what=spec_path)


class NascliBug(RuntimeError):
  """nascli's own code around a trial raised in the trial's process: a bug in nascli, not the
  architecture's failure. The search stops with one line; the trial's traceback is a note,
  printed with NASCLI_DEBUG=1."""


def check_attempt(trial_id: str, status: dict[str, Any]) -> None:
  """Raises when the attempt's job_status.json says nascli's own code around the trial broke
  (NASCLI_ERROR): the driver stops the search instead of charging the trial a failure.

  Raises:
    NascliBug: a bug in nascli (the trial's traceback attached as a note).
    NascliError: the environment (a file that could not be written, a full disk).
  """
  if status.get("status") != NASCLI_ERROR:
    return
  reason, again = status.get("reason") or "unknown error", (
      f"trial {trial_id} runs again when the search resumes")
  if not status.get("bug"):
    raise NascliError(f"trial {trial_id}: {reason} (not the trial's failure: the search stops;"
                      f" {again})")
  error = NascliBug(f"trial {trial_id}: {reason}, in nascli's own code around the trial: a bug"
                    f" in nascli, not the architecture's failure (the search stops; {again})")
  if status.get("traceback"):
    error.add_note(f"trial {trial_id}'s traceback:\n{status['traceback'].rstrip()}")
  raise error


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
