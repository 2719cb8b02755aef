"""The engine behind `nascli train`: from command-line arguments to a finished run."""

import contextlib
import dataclasses
import os
import shutil
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from nascli import process_exit
from nascli import storage
from nascli.errors import ConfigValueError, NascliError

stderr = Console(stderr=True)
DEFAULT_MODEL_DIR = os.path.join("nascli_output", "train")
# FastNN keys that choose data and directories: an hparams file may set them instead of options.
_DATA_KEYS = ("dataset_name", "dataset_dir", "train_files")


@dataclasses.dataclass
class TrainArgs:
  model: str = "classification"
  experiment: str | None = None
  config_files: list[str] = dataclasses.field(default_factory=list)
  params_override: str | None = None
  hparams_file: str | None = None
  training_data_path: str | None = None
  validation_data_path: str | None = None
  dataset_name: str | None = None
  dataset_dir: str | None = None
  train_files: str | None = None
  model_dir: str | None = None
  strategy: str | None = None
  num_gpus: int | None = None
  mode: str = "train_and_post_eval"
  keep_checkpoint_max: int | None = None
  verbose: bool = False
  # Stage 2: one searched architecture (Vertex's nas_params_str: JSON text or a .json file).
  nas_params_str: str | None = None
  search_space: str = "mnasnet"
  # Seeds the initialization and, where the config sets none, task.train_data's seed
  # and determinism.
  seed: int | None = None
  # Config overrides from the caller (e.g. a NAS trial's architecture), applied last.
  extra_options: dict[str, Any] = dataclasses.field(default_factory=dict)
  fastnn: dict[str, Any] = dataclasses.field(default_factory=dict)
  # Stage 2: the search's recipe (tf_vision.configs.stage2.Recipe), beneath the user's sources.
  recipe: Any = None
  # A search trial measures the model it trained: the result then holds "model" and "params".
  keep_model: bool = False


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
  # pylint: disable=g-import-not-at-top
  from tf_vision import params as params_lib
  from tf_vision.configs import fastnn
  if args.mode not in MODES:
    raise NascliError(f"unknown --mode {args.mode!r}; known: {', '.join(MODES)}")
  if args.seed is not None and not 0 <= args.seed < 2**32:
    raise NascliError(f"--seed {args.seed} is out of range; allowed: 0 to 2**32 - 1")
  file_hparams = fastnn.parse_hparams_file(args.hparams_file) if args.hparams_file else {}
  data = params_lib.DataSpec(
      training_data_path=args.training_data_path,
      validation_data_path=args.validation_data_path,
      dataset_name=args.dataset_name or file_hparams.get("dataset_name"),
      dataset_dir=args.dataset_dir or file_hparams.get("dataset_dir"),
      train_files=args.train_files or file_hparams.get("train_files"),
      eval_files=args.fastnn.get("eval_files") or file_hparams.get("eval_files"))
  if data.dataset_name == "mock":  # FastNN's default: no data set named.
    data.dataset_name = None
  if args.training_data_path or args.validation_data_path:
    data.dataset_name = args.dataset_name
    data.dataset_dir = args.dataset_dir
  options = {}
  if args.keep_checkpoint_max is not None:
    options = {"trainer": {"max_to_keep": args.keep_checkpoint_max}}
  options = _merge(options, args.extra_options)
  experiment = args.experiment
  if args.nas_params_str:
    from nascli.search import trial as trial_lib
    from tf_vision.search_spaces import nas_params as nas_params_lib
    binding = trial_lib.binding_for(args.search_space)
    _, block_specs = nas_params_lib.decode(args.search_space, args.nas_params_str)
    options = _merge(options, trial_lib.backbone_override(binding, block_specs))
    experiment = experiment or binding.experiment
    if args.model != binding.model and not args.experiment:
      args.model = binding.model
  gpus = _gpu_count()
  spec = params_lib.RunSpec(
      model=args.model, experiment=experiment, config_files=args.config_files,
      params_override=args.params_override, hparams_file=args.hparams_file, options=options,
      hparams={k: v for k, v in args.fastnn.items()}, data=data,
      strategy=args.strategy, num_gpus=args.num_gpus, has_gpu=gpus > 0, gpu_count=gpus,
      recipe=args.recipe)
  run_plan = params_lib.build(spec)
  # Plain prints, not Rich: one line each whatever the width, and no markup in the values.
  for line in run_plan.recipe_lines:
    print(line, file=sys.stderr, flush=True)
  for warning in run_plan.warnings:
    print(f"warning: {warning}", file=sys.stderr, flush=True)
  if args.seed is not None:  # a seeded run is repeatable: tf.data keeps its order too
    data_config = run_plan.params.task.train_data
    run_plan.params = run_plan.params.replace(task={"train_data": {
        "seed": args.seed if data_config.seed is None else data_config.seed,
        "deterministic": True if data_config.deterministic is None else
                         data_config.deterministic}})
  # The experiment's validate() does not descend into its fields; the optimizer's values would
  # otherwise fail only when Model Garden builds it, after the model dir is written.
  try:
    run_plan.params.trainer.optimizer_config.validate()
  except ConfigValueError as e:
    raise e.under("trainer.optimizer_config") from None
  return run_plan


def _merge(a: dict, b: dict) -> dict:
  """Nested dict merge, b winning."""
  out = dict(a)
  for k, v in b.items():
    out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
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


MULTI_WORKER_FILE_SEED = 20260101


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
  process_exit.request()  # the console script then skips tf.data's slow teardown
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from official.modeling import performance
  from tf_vision import distribute, model_dir as model_dir_lib, train_lib
  from tf_vision.evaluation import coco_groundtruth
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
  if (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
      and params.task.train_data.seed is None):
    # Model Garden shuffles the file list before giving each worker its share; unseeded, every
    # worker draws its own order and the shares overlap. One seed on all workers makes them
    # disjoint and equal (FastNN's rule, which `convert-data --num_workers` prepares for).
    params = params.replace(task={"train_data": {"seed": MULTI_WORKER_FILE_SEED}})
  if upload_to and params.runtime.distribution_strategy == "multi_worker_mirrored":
    raise NascliError(f"--model_dir {upload_to}: multi-worker training needs a model dir all"
                      " workers share as it is written, and gs:// model dirs are trained locally"
                      " then uploaded; use a shared file system")
  performance.set_mixed_precision_policy(params.runtime.mixed_precision_dtype)
  tf.io.gfile.makedirs(model_dir)
  if getattr(params.task, "annotation_file", "unset") is None and args.mode != "train":
    # COCO metrics need ground truth; see tf_vision/evaluation/coco_groundtruth.py for why a file.
    names = None
    if run_plan.dataset_info:
      names = {c["id"]: c["name"] for c in run_plan.dataset_info["classes"]}
    gt = coco_groundtruth.write(params.task.validation_data.input_path,
                                os.path.join(model_dir, "validation_annotations.json"), names)
    params = params.replace(task={"annotation_file": gt})
    params.lock()
  model_dir_lib.write_run_info(model_dir, {"experiment": run_plan.experiment,
                                           "steps_per_epoch": run_plan.steps_per_epoch,
                                           "argv": sys.argv[1:]})
  if args.seed is not None:  # Model Garden builds the model unseeded
    import tf_keras
    tf_keras.utils.set_random_seed(args.seed)
  start = time.monotonic()
  # Orbit prints its own progress with print(): keep stdout for nascli's result, and show
  # Orbit's lines (on stderr) only with --verbose, since the log line and the bar say the same.
  orbit_out = sys.stderr if args.verbose else open(os.devnull, "w", encoding="utf-8")  # pylint: disable=consider-using-with
  with contextlib.redirect_stdout(orbit_out), _Display(params.trainer.train_steps, 0) as display:
    result = train_lib.run(
        params, model_dir, strategy, mode=args.mode, steps_per_epoch=run_plan.steps_per_epoch,
        on_loop=display.on_loop,
        on_resume=lambda step: stderr.print(f"resuming from the checkpoint at step {step}"),
        keep_model=args.keep_model)
  if upload_to:
    stderr.print(f"uploading {model_dir} to {upload_to}")
    upload_model_dir(model_dir, upload_to)
  result.update({"experiment": run_plan.experiment, "model_dir": model_dir,
                 "wall_seconds": round(time.monotonic() - start, 3)})
  if args.keep_model:
    result["params"] = params
  return result


def train_search_trials(args: TrainArgs, job_dir: str, trial_numbers: str,
                        warm_start: bool = False) -> list[dict]:
  """Stage 2: retrains searched trials' architectures, each into MODEL_DIR/<trial_id>.

  Each starts from its search's recipe (tf_vision/configs/stage2.py: the trial's params.yaml,
  schedule STAGE2_SCHEDULE_FACTOR times longer), beneath --config_file/--params_override; with
  no data flags it trains on the search's data.
  """
  from tf_vision.configs import stage2  # pylint: disable=g-import-not-at-top
  ids = [t.strip() for t in trial_numbers.split(",") if t.strip()]
  if not ids:
    raise NascliError("--train_nas_trial_numbers needs trial ids, e.g. 3,7")
  base_dir = args.model_dir or DEFAULT_MODEL_DIR
  has_data = any((args.dataset_dir, args.training_data_path, args.validation_data_path))
  trials = [stage2.read_trial(job_dir, trial_id) for trial_id in ids]  # all checked up front
  results = []
  for trial in trials:
    for note in trial.notes:
      stderr.print(f"note: {note}")
    recipe = trial.recipe
    if recipe and args.experiment and trial.experiment and args.experiment != trial.experiment:
      stderr.print(f"note: --experiment {args.experiment} is not the search's"
                   f" {trial.experiment}: trial {trial.trial_id} starts from its defaults")
      recipe = None
    extra = dict(args.extra_options)
    if warm_start:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      readable = (trial.trial_dir if not storage.is_gcs(trial.trial_dir)
                  or storage.tf_data_mode() == "stream" else storage.stage(trial.trial_dir))
      checkpoint = tf.train.latest_checkpoint(readable)
      if checkpoint is None:
        raise NascliError(f"trial {trial.trial_id} of {job_dir} has no checkpoint to start from")
      extra = _merge(extra, {"task": {"init_checkpoint": checkpoint,
                                      "init_checkpoint_modules": "backbone"}})
    data = {} if has_data else trial.data  # no data flags: the search's data
    results.append(train(dataclasses.replace(
        args, nas_params_str=trial.nas_params_path,
        search_space=trial.search_space or args.search_space,
        experiment=args.experiment or (trial.experiment if recipe else None),
        model_dir=storage.join(base_dir, trial.trial_id), extra_options=extra, recipe=recipe,
        **data)))
  return results
