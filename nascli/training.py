"""The engine behind `nascli train`: from command-line arguments to a finished run."""

import contextlib
import dataclasses
import os
import shutil
import sys
import time
from typing import Callable

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from nascli import console
from nascli import runtime
from nascli import storage
from nascli.errors import ConfigValueError, NascliError
from nascli.run_spec import RunSpec

stderr = console.stderr()
DEFAULT_MODEL_DIR = os.path.join("nascli_output", "train")


@dataclasses.dataclass
class TrainArgs:
  """A `nascli train` run: how its config is made (the run contract) and how it trains."""
  run: RunSpec = dataclasses.field(default_factory=RunSpec)
  model_dir: str | None = None
  mode: str = "train_and_post_eval"
  verbose: bool = False
  # A search trial measures the model it trained: the result then holds "model" and "params".
  keep_model: bool = False
  # trainer.train_steps -> the step to stop at, short of it (an early-stopping rung): the
  # schedule stays that of train_steps (tf_vision.train_lib.run's stop_at_step).
  stop_at: Callable[[int], int] | None = None
  # Evaluate about this many times as training goes, at whole training loops, besides the final
  # evaluation: the validation curve (tf_vision.train_lib.CURVE_FILE). None: the final one only.
  curve_points: int | None = None
  # Checkpoint the training input's position too (tf_vision.train_lib.run's checkpoint_input):
  # a run resumed from a checkpoint, an early-stopping rung, reads on as if never stopped.
  checkpoint_input: bool = False
  # Paused runs this process keeps in memory (tf_vision.train_lib.PausedRuns): a search trial's
  # next rung, run by the same warm worker, continues without a rebuild. 0: none.
  keep_paused: int = 0

  def curve_interval(self, train_steps: int, steps_per_loop: int) -> int | None:
    """The steps between the curve's evaluations: train_steps / curve_points, rounded up to
    whole loops."""
    if not self.curve_points:
      return None
    loop = max(1, steps_per_loop)
    return max(loop, -(-train_steps // (self.curve_points * loop)) * loop)


MODES = ("train", "train_and_eval", "train_and_post_eval")


def experiment_names() -> list[str]:
  from official.core import exp_factory  # pylint: disable=g-import-not-at-top
  from tf_vision import registry_imports  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  return sorted(exp_factory._REGISTERED_CONFIGS)  # pylint: disable=protected-access


def _gpu_count() -> int:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return len(tf.config.list_physical_devices("GPU"))


def plan(args: TrainArgs):
  """The run plan (final locked config, steps per epoch, notes) for these arguments."""
  from tf_vision import params as params_lib  # pylint: disable=g-import-not-at-top
  run = args.run
  if args.mode not in MODES:
    raise NascliError(f"unknown --mode {args.mode!r}; known: {', '.join(MODES)}")
  if run.seed is not None and not 0 <= run.seed < 2**32:
    raise NascliError(f"--seed {run.seed} is out of range; allowed: 0 to 2**32 - 1")
  gpus = _gpu_count()
  run_plan = params_lib.build(params_lib.BuildSpec(
      run=with_architecture(run), has_gpu=gpus > 0, gpu_count=gpus,
      model_dir=args.model_dir or DEFAULT_MODEL_DIR, mode=args.mode))
  # Plain prints, not Rich: one line each whatever the width, and no markup in the values.
  for line in run_plan.recipe_lines:
    print(line, file=sys.stderr, flush=True)
  for warning in run_plan.warnings:
    print(f"warning: {warning}", file=sys.stderr, flush=True)
  # The experiment's validate() does not descend into its fields; the optimizer's values would
  # otherwise fail only when Model Garden builds it, after the model dir is written.
  try:
    run_plan.params.trainer.optimizer_config.validate()
  except ConfigValueError as e:
    raise e.under("trainer.optimizer_config") from None
  return run_plan


def with_architecture(run: RunSpec) -> RunSpec:
  """The run with its searched architecture as config sources: the backbone as the last
  override and, unless --experiment says otherwise, the search space's experiment."""
  if run.architecture is None:
    return run
  # pylint: disable=g-import-not-at-top
  from tf_vision import search_spaces
  from tf_vision.search_spaces import nas_params as nas_params_lib
  arch = run.architecture
  space = search_spaces.resolve_search_space(arch.search_space, arch.search_space_module)
  binding = space.require_binding()
  _, block_specs = nas_params_lib.decode(space.name, arch.nas_params)
  return dataclasses.replace(
      run, architecture=None, model=run.model if run.experiment else binding.model,
      experiment=run.experiment or binding.experiment,
      options=merge(run.options, binding.backbone_override(block_specs)))


def merge(a: dict, b: dict) -> dict:
  """Nested dict merge, b winning."""
  out = dict(a)
  for k, v in b.items():
    out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
  return out


class _Display:
  """A Rich progress bar on a terminal; the THOR log line on stderr either way."""

  def __init__(self, total: int, start: int):
    self.progress = Progress(
        TextColumn("[bold]train"), BarColumn(), TextColumn("step {task.completed}/{task.total}"),
        TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[sps]} steps/s"),
        TextColumn("{task.fields[ips]} img/s"), TextColumn("ETA"), TimeRemainingColumn(),
        console=stderr, disable=not stderr.is_terminal,
        # No refresh thread: it competes with the training loop for the GIL (measured: a
        # terminal run at 0.62x Model Garden's steps/s with it); redraw once per loop instead.
        auto_refresh=False)
    self.task = self.progress.add_task("train", total=total, completed=start, loss="-",
                                       sps="-", ips="-")

  def __enter__(self):
    self.progress.__enter__()
    return self

  def __exit__(self, *exc):
    self.progress.__exit__(*exc)

  def on_loop(self, report) -> None:
    if self.progress.disable:
      print(report.line, file=sys.stderr, flush=True)
    else:
      self.progress.console.print(report.line)
    self.progress.update(self.task, completed=report.step, loss=f"{report.loss:.4f}",
                         sps=f"{report.steps_per_second:.1f}",
                         ips=f"{report.images_per_second:.0f}")
    self.progress.refresh()


def train(args: TrainArgs) -> dict:
  """Trains as the arguments say; returns the run's result for stdout.

  A gs:// --model_dir is trained in a local work dir (resuming from what the bucket holds) and
  uploaded when training ends: Model Garden and nascli append to files in the model dir (logs,
  summaries), which objects cannot do, and no half-written run ever appears under the prefix.
  """
  if storage.is_gcs(args.model_dir or ""):
    return _train_into_gcs(args)
  return _train(args)


def model_work_dir(url: str) -> str:
  """The local dir a gs:// model dir is trained in: fixed per URL, so a killed run resumes."""
  g = storage.parse_gcs(url)
  return os.path.join(storage.default_cache_root().parent, "model-staging", g.bucket,
                      *(g.name.strip("/") or "_root").split("/"))


def _train_into_gcs(args: TrainArgs) -> dict:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  url = args.model_dir.rstrip("/")
  work = model_work_dir(url)
  remote = storage.list_names(url)  # also: a bad URL or a missing bucket fails here, first
  if tf.train.latest_checkpoint(work):
    stderr.print(f"note: resuming from {work}, the local work dir of an interrupted run into"
                 f" {url}")
  else:
    shutil.rmtree(work, ignore_errors=True)
    if remote:
      storage.download_dir(url, work)
  stderr.print(f"note: training in {work}; {url} receives the model dir when training ends")
  result = _train(dataclasses.replace(args, model_dir=work), upload_to=url)
  shutil.rmtree(work, ignore_errors=True)
  return dict(result, model_dir=url)


def upload_model_dir(local: str, url: str) -> list[str]:
  """Uploads a finished model dir: checkpoints and everything else first, then the `checkpoint`
  index (a reader that sees it finds the files it names), then job_status.json."""
  names = storage.list_names(local)
  last = [n for n in ("checkpoint", "job_status.json") if n in names]
  storage.upload_dir(local, url, names=[n for n in names if n not in last])
  for name in last:
    storage.upload_file(os.path.join(local, name), storage.join(url, name))
  return names


def _train(args: TrainArgs, upload_to: str | None = None) -> dict:
  run_plan = plan(args)
  runtime.request()  # the console script then skips tf.data's slow teardown
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from official.modeling import performance
  from tf_vision import distribute, model_dir as model_dir_lib, train_lib
  params = run_plan.params
  for note in run_plan.notes:
    stderr.print(f"note: {note}")
  model_dir = args.model_dir or DEFAULT_MODEL_DIR
  if os.path.exists(model_dir) and not os.path.isdir(model_dir):
    raise NascliError(f"--model_dir {model_dir} is a file")
  previous = model_dir_lib.read_run_info(model_dir)
  if previous.get("experiment") and previous["experiment"] != run_plan.experiment:
    raise NascliError(f"--model_dir {model_dir} holds a run of experiment"
                      f" {previous['experiment']!r}, not {run_plan.experiment!r}; use another"
                      " --model_dir")
  strategy = distribute.build_strategy(params.runtime.distribution_strategy,
                                       params.runtime.num_gpus)
  if upload_to and params.runtime.distribution_strategy == "multi_worker_mirrored":
    raise NascliError(f"--model_dir {upload_to}: multi-worker training needs a model dir all"
                      " workers share as it is written, and gs:// model dirs are trained locally"
                      " then uploaded; use a shared file system")
  performance.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
  tf.io.gfile.makedirs(model_dir)
  if run_plan.ground_truth:  # the file the config's task.annotation_file names
    run_plan.ground_truth.write()
  model_dir_lib.write_run_info(model_dir, {"experiment": run_plan.experiment,
                                           "steps_per_epoch": run_plan.steps_per_epoch,
                                           "argv": sys.argv[1:]})
  if args.run.seed is not None:  # Model Garden builds the model unseeded
    import tf_keras
    tf_keras.utils.set_random_seed(args.run.seed)
  start = time.monotonic()
  # Orbit prints its own progress with print(): keep stdout for nascli's result, and show
  # Orbit's lines (on stderr) only with --verbose, since the log line and the bar say the same.
  orbit_out = sys.stderr if args.verbose else open(os.devnull, "w", encoding="utf-8")  # pylint: disable=consider-using-with
  with contextlib.redirect_stdout(orbit_out), _Display(params.trainer.train_steps, 0) as display:
    result = train_lib.run(
        params, model_dir, strategy, mode=args.mode, steps_per_epoch=run_plan.steps_per_epoch,
        on_loop=display.on_loop,
        on_resume=lambda step, in_memory: stderr.print(
            f"continuing from step {step} in memory (the model, optimizer and input as they"
            " were paused)" if in_memory else f"resuming from the checkpoint at step {step}"),
        keep_model=args.keep_model,
        stop_at_step=args.stop_at(params.trainer.train_steps) if args.stop_at else None,
        curve_interval=args.curve_interval(params.trainer.train_steps,
                                           params.trainer.steps_per_loop),
        checkpoint_input=args.checkpoint_input, keep_paused=args.keep_paused)
  if upload_to:
    stderr.print(f"uploading {model_dir} to {upload_to}")
    upload_model_dir(model_dir, upload_to)
  result.update({"experiment": run_plan.experiment, "model_dir": model_dir,
                 "wall_seconds": round(time.monotonic() - start, 3)})
  if args.keep_model:
    result["params"] = params
  return result


def train_search_trials(args: TrainArgs, job_dir: str, trial_numbers: str,
                        warm_start: bool = False, search_space: str = "mnasnet",
                        search_space_module: str | None = None) -> list[dict]:
  """Stage 2: retrains searched trials' architectures, each into MODEL_DIR/<trial_id>.

  Each starts from its search's recipe (tf_vision/configs/stage2.py: the trial's params.yaml,
  schedule STAGE2_SCHEDULE_FACTOR times longer), beneath --config_file/--params_override; with
  no data flags it trains on the search's data. `search_space` and `search_space_module`
  (--search_space, --search_space_module) are the space of trials whose trial_spec.json does not
  say.
  """
  from tf_vision.configs import stage2  # pylint: disable=g-import-not-at-top
  ids = [t.strip() for t in trial_numbers.split(",") if t.strip()]
  if not ids:
    raise NascliError("--train_nas_trial_numbers needs trial ids, e.g. 3,7")
  base_dir = args.model_dir or DEFAULT_MODEL_DIR
  run = args.run
  trials = [stage2.read_trial(job_dir, trial_id) for trial_id in ids]  # all checked up front
  results = []
  for trial in trials:
    trial_run, notes = stage2.trial_run(run, trial, search_space, search_space_module)
    for note in notes:
      stderr.print(f"note: {note}")
    options = dict(run.options)
    if warm_start:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      readable = (trial.trial_dir if not storage.is_gcs(trial.trial_dir)
                  or storage.tf_data_mode() == "stream" else storage.stage(trial.trial_dir))
      checkpoint = tf.train.latest_checkpoint(readable)
      if checkpoint is None:
        raise NascliError(f"trial {trial.trial_id} of {job_dir} has no checkpoint to start from")
      options = merge(options, {"task": {"init_checkpoint": checkpoint,
                                          "init_checkpoint_modules": "backbone"}})
    results.append(train(dataclasses.replace(
        args, run=dataclasses.replace(trial_run, options=options),
        model_dir=storage.join(base_dir, trial.trial_id))))
  return results
