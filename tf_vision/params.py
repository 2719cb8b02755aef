"""The final experiment config of a run, built in Model Garden's order of precedence.

experiment defaults -> a stage-2 run's carried recipe (the search trial's params.yaml, see
tf_vision/configs/stage2.py) -> what the data says (dataset_info.json: classes, image size) ->
--config_file (repeatable) -> --params_override -> FastNN hparams (file, then options).
Every key of every source is checked before it is applied, so an unknown key is named with its
full path and its source. The result is then checked against Model Garden's trainer invariants
(tf_vision/configs/consistency.py), knowing which keys the user's own sources set, completed
with what the run itself decides (the data order of a seeded or multi-worker run, the path of a
detection run's COCO ground truth) and locked: nothing changes the config after `build`.
The sources are the run contract, nascli/run_spec.py's RunSpec.
"""

import dataclasses
import json
import math
import os
from typing import Any

from nascli import checks
from nascli import storage
from nascli.errors import NascliError, StorageNotFoundError
from nascli.run_spec import DataSpec, RunSpec  # noqa: F401  (params.DataSpec: the data flags)
from official.core import config_definitions as cfg
from official.core import exp_factory
from official.modeling import hyperparams
from official.vision.configs import image_classification as ic
from official.vision.configs import retinanet as rn
from tf_vision import registry_imports  # noqa: F401  pylint: disable=unused-import
from tf_vision.configs import consistency
from tf_vision.configs import experiment_configs as experiments
from tf_vision.configs import fastnn
from tf_vision.configs import fastnn_models
from tf_vision.configs import stage2
from tf_vision.configs.yaml_source import first_line as _first_line
from tf_vision.configs.yaml_source import load_yaml_source  # noqa: F401  (params.load_yaml_source)

# --model picks the experiment when --experiment is not given.
DEFAULT_EXPERIMENTS = {"classification": "nascli_classification",
                       "retinanet": "nascli_retinanet"}
RECIPES_DIR = os.path.join(os.path.dirname(__file__), "configs", "experiments")
# The train_data seed of a multi-worker run whose config and flags set none (see _complete).
MULTI_WORKER_FILE_SEED = 20260101


@dataclasses.dataclass
class BuildSpec:
  """A run's config sources (the run contract, nascli/run_spec.py) and what the config also
  depends on: this machine's GPUs, and where and how the run trains."""
  run: RunSpec = dataclasses.field(default_factory=RunSpec)
  has_gpu: bool = False
  gpu_count: int = 0  # GPUs this process sees: the replicas of `mirrored` without --num_gpus
  model_dir: str | None = None  # where the COCO ground truth of a detection run is written
  mode: str = "train_and_post_eval"


@dataclasses.dataclass
class GroundTruth:
  """The COCO ground-truth file a detection run evaluates against (task.annotation_file),
  made from its validation records: the config names it, the runner writes it into the model
  dir before training (tf_vision/evaluation/coco_groundtruth.py says why a file)."""
  validation_path: str
  path: str
  class_names: dict[int, str] | None

  def write(self) -> str:
    from tf_vision.evaluation import coco_groundtruth  # pylint: disable=g-import-not-at-top
    return coco_groundtruth.write(self.validation_path, self.path, self.class_names)


@dataclasses.dataclass
class RunPlan:
  params: cfg.ExperimentConfig
  experiment: str
  steps_per_epoch: int
  dataset_info: dict | None
  notes: list[str]
  # A schedule that trains but does not fit the data (consistency.schedule_warning).
  warnings: list[str] = dataclasses.field(default_factory=list)
  recipe_lines: list[str] = dataclasses.field(default_factory=list)  # stage 2's recipe
  ground_truth: GroundTruth | None = None  # to write before training


def check_keys(config: hyperparams.Config, override: dict, what: str, prefix: str = "") -> None:
  """Raises a one-line error naming the full path of the first key `config` does not have."""
  for key, value in override.items():
    path = f"{prefix}{key}"
    if not isinstance(key, str) or key not in config.__dict__ or key.startswith("_"):
      known = sorted(k for k in config.__dict__ if not k.startswith("_"))
      hint = checks.closest(str(key), known)
      raise NascliError(f"unknown config key '{path}' in {what}{hint}")
    current = config.__dict__[key]
    if isinstance(value, dict) and isinstance(current, hyperparams.Config):
      check_keys(current, value, what, prefix=f"{path}.")


def apply_override(params: cfg.ExperimentConfig, override: dict, what: str,
                   explicit: dict[str, str] | None = None) -> None:
  """Applies `override` (keys checked first); with `explicit`, records each key it sets."""
  check_keys(params, override, what)
  try:
    params.override(override, is_strict=True)
  except (KeyError, ValueError, TypeError, AttributeError) as e:
    raise NascliError(f"bad value in {what}: {_first_line(e)}") from None
  if explicit is not None:
    explicit.update((key, what) for key in leaves(override))


def leaves(tree: Any, prefix: str = "") -> list[str]:
  """The dotted keys of a nested dict's leaves (lists are leaves)."""
  if not isinstance(tree, dict):
    return [prefix[:-1]] if prefix else []
  return [k for key, value in tree.items() for k in leaves(value, f"{prefix}{key}.")]


def _changed(before: dict, after: dict) -> list[str]:
  flat_before, flat_after = _flatten(before), _flatten(after)
  return [k for k, v in flat_after.items() if flat_before.get(k, object()) != v]


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
  if not isinstance(tree, dict):
    return {prefix[:-1]: tree}
  return {k: v for key, value in tree.items()
          for k, v in _flatten(value, f"{prefix}{key}.").items()}


def load_experiment(name: str) -> cfg.ExperimentConfig:
  try:
    return experiments.get_experiment(name)
  except LookupError:  # Model Garden's registry raises LookupError (KeyError in older versions).
    known = sorted(exp_factory._REGISTERED_CONFIGS)  # pylint: disable=protected-access
    raise NascliError(f"unknown --experiment {name!r}{checks.closest(name, known)}; see"
                      " `nascli train --list_experiments`") from None


def dataset_info_near(path_pattern: str) -> dict | None:
  """dataset_info.json of the folder holding the (first) files of a pattern, if nascli wrote it."""
  first = path_pattern.split(",")[0].strip()
  if storage.is_gcs(first):
    is_folder = not any(c in first for c in "*?[") and not storage.is_file(first)
    folder = first.rstrip("/") if is_folder else first.rpartition("/")[0]
    info_path = storage.join(folder, "dataset_info.json")
    try:
      return json.loads(storage.read_text(info_path))
    except StorageNotFoundError:
      return None
    except ValueError as e:
      raise NascliError(f"cannot read {info_path}: {_first_line(e)}") from None
  folder = first if os.path.isdir(first) else os.path.dirname(first)
  info_path = os.path.join(folder, "dataset_info.json")
  if not os.path.exists(info_path):
    return None
  try:
    with open(info_path, encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise NascliError(f"cannot read {info_path}: {_first_line(e)}") from None


def check_pattern(pattern: str, what: str) -> None:
  """Refuses a comma-separated pattern with a part that matches no files (gs:// globbed too)."""
  for part in (p.strip() for p in pattern.split(",")):
    if part and not storage.glob(part):
      raise NascliError(f"{what} {part} matches no files")


def _resolve_data(data: DataSpec) -> tuple[str | None, str | None, dict | None]:
  """Training/validation path patterns and the dataset_info.json that describes them."""
  train, val = data.training_data_path, data.validation_data_path
  if data.dataset_dir or data.dataset_name:
    if not data.dataset_dir:
      raise NascliError("--dataset_name needs --dataset_dir (the folder convert-data wrote)")
    if train or val:
      raise NascliError("give --dataset_dir or --training_data_path/--validation_data_path,"
                        " not both")
    root = data.dataset_dir
    if storage.is_gcs(root):
      root = root.rstrip("/")
      if not storage.exists(root):
        raise NascliError(f"--dataset_dir {root}: no objects there")
    elif not os.path.isdir(root):
      raise NascliError(f"--dataset_dir {root} is not a folder")
    info = dataset_info_near(root)
    if info is None:
      raise NascliError(f"--dataset_dir {root} has no dataset_info.json (write it with"
                        " `nascli convert-data`)")
    if data.dataset_name and info.get("dataset") != data.dataset_name:
      raise NascliError(f"--dataset_name {data.dataset_name} but {root}/dataset_info.json"
                        f" describes {info.get('dataset')!r}")
    if data.train_files:
      train = ",".join(os.path.join(root, f.strip()) for f in data.train_files.split(",")
                       if f.strip())
    else:
      train = os.path.join(root, info["splits"]["train"]["file_pattern"])
    if data.eval_files:
      val = ",".join(os.path.join(root, f.strip()) for f in data.eval_files.split(",")
                     if f.strip())
    elif "validation" in info.get("splits", {}):
      val = os.path.join(root, info["splits"]["validation"]["file_pattern"])
  else:
    info = dataset_info_near(train) if train else (dataset_info_near(val) if val else None)
  if train:
    check_pattern(train, "--training_data_path")
  if val:
    check_pattern(val, "--validation_data_path")
  # gs:// data: TensorFlow reads it itself, or from a staged local copy (storage.tf_data_mode).
  return storage.for_tensorflow(train), storage.for_tensorflow(val), info


def _data_defaults(params: cfg.ExperimentConfig, info: dict | None, train: str | None,
                   val: str | None) -> dict:
  """What the data says about the config, as an override applied before the user's own."""
  task: dict[str, Any] = {}
  if train:
    task.setdefault("train_data", {})["input_path"] = train
  if val:
    task.setdefault("validation_data", {})["input_path"] = val
  if info:
    if info.get("task") != _task_kind(params):
      raise NascliError(f"the data is a {info.get('task')} data set but the experiment is"
                        f" {_task_kind(params)} (use --model"
                        f" {'retinanet' if info.get('task') == 'detection' else 'classification'})")
    task.setdefault("model", {})["num_classes"] = int(info["num_classes"])
    if _task_kind(params) == "classification":
      for split in ("train_data", "validation_data"):
        task.setdefault(split, {})["decode_jpeg_only"] = False
      sizes = info["splits"]["train"].get("image_sizes", {})
      if sizes.get("min_height") == sizes.get("max_height") and sizes.get(
          "min_width") == sizes.get("max_width") and sizes.get("min_height"):
        task["model"]["input_size"] = [sizes["min_height"], sizes["min_width"], 3]
  return {"task": task} if task else {}


# Which data-set task (dataset_info.json "task") each task-config family trains on.
_TASK_KINDS = {ic.ImageClassificationTask: "classification", rn.RetinaNetTask: "detection"}


def _task_kind(params: cfg.ExperimentConfig) -> str:
  for config_cls, kind in _TASK_KINDS.items():
    if isinstance(params.task, config_cls):
      return kind
  return "other"


def _data_of(run: RunSpec, file_hparams: dict[str, Any]) -> DataSpec:
  """The data flags, completed by FastNN's data keys (options, then the hparams file); with
  --training_data_path/--validation_data_path a file's data set does not apply."""
  flags = run.data
  data = dataclasses.replace(flags, **{
      key: getattr(flags, key) or run.hparams.get(key) or file_hparams.get(key)
      for key in ("dataset_name", "dataset_dir", "train_files", "eval_files")})
  if data.dataset_name == "mock":  # FastNN's default: no data set named.
    data.dataset_name = None
  if flags.training_data_path or flags.validation_data_path:
    data.dataset_name, data.dataset_dir = flags.dataset_name, flags.dataset_dir
  return data


def build(spec: BuildSpec) -> RunPlan:
  """The ExperimentConfig of a run, built from every source, completed (seeds, the COCO ground
  truth's path), checked and locked, here and only here; and what the runner needs besides."""
  run = spec.run
  file_hparams = fastnn.parse_hparams_file(run.hparams_file) if run.hparams_file else {}
  if run.model not in DEFAULT_EXPERIMENTS and not run.experiment:
    raise NascliError(f"unknown --model {run.model!r}; known: {', '.join(DEFAULT_EXPERIMENTS)}")
  name = run.experiment or DEFAULT_EXPERIMENTS[run.model]
  params = load_experiment(name)
  notes: list[str] = []
  explicit: dict[str, str] = {}  # what the user's own sources set: consistency's fix-or-refuse

  search_steps = 0
  carried: dict[str, str] = {}  # what the stage-2 recipe set: named when a value is refused
  if run.recipe:
    for override, what in run.recipe.sources:
      apply_override(params, override, what, carried)
    search_steps = params.trainer.train_steps
  train, val, info = _resolve_data(_data_of(run, file_hparams))
  apply_override(params, _data_defaults(params, info, train, val), "the data set")
  for path in run.config_files:
    if not (storage.is_file(path) if storage.is_gcs(path) else os.path.isfile(path)):
      raise NascliError(f"--config_file {path} does not exist")
    apply_override(params, load_yaml_source(path, "--config_file"), f"--config_file {path}",
                   explicit)
  if run.params_override:
    apply_override(params, load_yaml_source(run.params_override, "--params_override"),
                   "--params_override", explicit)

  hparams = dict(file_hparams)
  hparams.update({k: v for k, v in run.hparams.items() if v is not None})
  train_records = int(info["splits"]["train"]["num_records"]) if info else 0
  if hparams.get("num_sample_per_epoch"):
    train_records = int(hparams["num_sample_per_epoch"])
  num_replicas = max(1, run.num_gpus or 1)
  batch = hparams.get("batch_size")
  global_batch = batch * num_replicas if batch else params.task.train_data.global_batch_size
  steps_per_epoch = train_records // global_batch if train_records and global_batch else 0
  before_hparams = params.as_dict() if hparams else {}
  if hparams.get("model_name"):
    if _task_kind(params) != "classification":
      raise NascliError("FastNN model_name chooses a classifier; this experiment is"
                        f" {_task_kind(params)}")
    apply_override(params, {"task": {"model": {"backbone": fastnn_models.backbone_override(
        hparams["model_name"])}}}, f"FastNN model_name={hparams['model_name']}")
  if hparams.get("task_type") == "finetune":
    if not hparams.get("ckpt_file_name"):
      raise NascliError("FastNN task_type=finetune needs ckpt_file_name (and model_dir)")
    init = os.path.join(hparams.get("model_dir") or "", hparams["ckpt_file_name"])
    apply_override(params, {"task": {"init_checkpoint": init}}, "FastNN ckpt_file_name")
  if hparams:
    try:
      notes += fastnn.apply_fastnn(params, hparams, steps_per_epoch=steps_per_epoch or None,
                                   num_replicas=num_replicas, has_gpu=spec.has_gpu)
    except (KeyError, ValueError, TypeError) as e:
      raise NascliError(f"FastNN hyperparameters: {_first_line(e)}") from None
    explicit.update((key, "the FastNN hyperparameters")
                    for key in _changed(before_hparams, params.as_dict()))

  if run.options:
    apply_override(params, run.options, "the command-line options", explicit)
  if run.strategy:
    params.runtime.distribution_strategy = run.strategy
    explicit["runtime.distribution_strategy"] = "--strategy"
  if run.num_gpus is not None:
    params.runtime.num_gpus = run.num_gpus
    explicit["runtime.num_gpus"] = "--num_gpus"
  if params.runtime.mixed_precision_dtype == "float16" and not spec.has_gpu:
    notes.append("float16 mixed precision needs a GPU: training in float32 on this CPU")
    params.runtime.mixed_precision_dtype = "float32"
  for split in ("train_data", "validation_data"):
    if not getattr(params.task, split).input_path:
      raise NascliError(f"no {split.replace('_data', '')} data: give --dataset_dir, or"
                        f" --{'training' if split == 'train_data' else 'validation'}_data_path")
  validation_records = int((info or {}).get("splits", {}).get("validation", {}).get(
      "num_records", 0))
  if run.proxy:
    train_records = _apply_proxy(params, run.proxy, explicit, train_records, notes)
  if run.recipe:
    sized = bool(run.recipe.epochs and train_records)
    if sized:
      _fit_stage2_schedule(params, run.recipe, train_records, validation_records, explicit,
                           carried)
    _stretch_stage2_schedule(params, run.recipe, search_steps, explicit, sized)

  replicas, replicas_from = consistency.replicas(params.runtime, spec.gpu_count)
  ctx = consistency.Context(
      params=params, explicit=explicit, num_replicas=replicas, replicas_from=replicas_from,
      train_records=train_records, validation_records=validation_records,
      carried=carried, defaults=f"the defaults of experiment {name}",
      evaluates=spec.mode != "train")
  consistency.check(ctx)
  notes += ctx.notes
  steps_per_epoch = (train_records // params.task.train_data.global_batch_size
                     if train_records else 0)
  ground_truth = _complete(params, spec, info)
  try:
    params.validate()
  except (KeyError, ValueError) as e:
    raise NascliError(f"invalid config: {_first_line(e)}") from None
  params.lock()
  warnings = consistency.refuse_absurd_schedules(ctx)
  recipe_lines = []
  if run.recipe:
    user_sources = list(dict.fromkeys(
        what for what in explicit.values() if what != "the command-line options"))
    recipe_lines = stage2.recipe_lines(
        params, name, run.recipe, search_steps, train_records,
        explicit.get("trainer.train_steps"), user_sources)
  return RunPlan(params=params, experiment=name, steps_per_epoch=steps_per_epoch,
                 dataset_info=info, notes=notes, warnings=warnings,
                 recipe_lines=recipe_lines, ground_truth=ground_truth)


def _apply_proxy(params: cfg.ExperimentConfig, proxy: Any, explicit: dict[str, str],
                 train_records: int, notes: list[str]) -> int:
  """A proxy task's changes (run_spec.ProxySettings); returns the training records it keeps."""
  what = "the proxy task"
  if proxy.train_steps is not None:
    if proxy.train_steps < 1:
      raise NascliError(f"{what}: train_steps must be at least 1, got {proxy.train_steps}")
    ratio = proxy.train_steps / params.trainer.train_steps
    params.trainer.train_steps = proxy.train_steps
    # Every step count, the recipe's own included: a proxy is the recipe, shortened. The loop
    # shrinks with it, and the intervals stay whole loops (checkpoints fall on loop ends).
    stage2.stretch_schedule(params, ratio, set())
    trainer = params.trainer
    loop = min(proxy.train_steps, max(1, round(trainer.steps_per_loop * ratio)))
    trainer.steps_per_loop = loop
    trainer.summary_interval = loop
    for key in ("trainer.train_steps", "trainer.steps_per_loop", "trainer.summary_interval"):
      explicit[key] = what
    for key in stage2.STRETCHED_INTERVALS:
      field = key.rpartition(".")[2]
      setattr(trainer, field, max(loop, round(getattr(trainer, field) / loop) * loop))
      explicit[key] = what
  if proxy.image_size is not None:
    if proxy.image_size < 1:
      raise NascliError(f"{what}: image_size must be at least 1, got {proxy.image_size}")
    channels = list(params.task.model.input_size)[2:] or [3]
    if getattr(params.task, "latency_input_size", 0) is None:  # served at the recipe's size
      params.task.latency_input_size = int(params.task.model.input_size[0])
    params.task.model.input_size = [proxy.image_size, proxy.image_size] + channels
    explicit["task.model.input_size"] = what
  fraction = proxy.train_data_fraction
  if fraction is not None and fraction != 1:  # 1: the recipe's files as it names them
    if not 0 < fraction <= 1:
      raise NascliError(f"{what}: train_data_fraction must be in (0, 1], got {fraction}")
    pattern = params.task.train_data.input_path
    patterns = pattern if isinstance(pattern, (list, tuple)) else str(pattern).split(",")
    files = sorted({f for p in patterns if p.strip() for f in storage.glob(p.strip())})
    if not files:
      raise NascliError(f"{what}: the training data {pattern} matches no files")
    kept = files[:max(1, math.ceil(fraction * len(files)))]
    params.task.train_data.input_path = ",".join(kept)
    explicit["task.train_data.input_path"] = what
    notes.append(f"{what}: training on {len(kept)} of {len(files)} training files"
                 f" (fraction {fraction:g})")
    train_records = round(train_records * len(kept) / len(files))
  return train_records


def _complete(params: cfg.ExperimentConfig, spec: BuildSpec,
              info: dict | None) -> GroundTruth | None:
  """What the config takes from the run itself rather than from a source: the data order of a
  seeded or multi-worker run, and the COCO ground-truth file of a detection run's evaluation."""
  data_config = params.task.train_data
  if spec.run.seed is not None:  # a seeded run is repeatable: tf.data keeps its order too
    if data_config.seed is None:
      data_config.seed = spec.run.seed
    if data_config.deterministic is None:
      data_config.deterministic = True
  if (params.runtime.distribution_strategy == "multi_worker_mirrored"
      and data_config.seed is None):
    # Model Garden shuffles the file list before giving each worker its share; unseeded, every
    # worker draws its own order and the shares overlap. One seed on all workers makes them
    # disjoint and equal (FastNN's rule, which `convert-data --num_workers` prepares for).
    data_config.seed = MULTI_WORKER_FILE_SEED
  if (getattr(params.task, "annotation_file", "unset") is not None or spec.mode == "train"
      or not spec.model_dir):
    return None
  # COCO metrics need ground truth: the config names the file, the runner writes it.
  names = {c["id"]: c["name"] for c in info["classes"]} if info else None
  ground_truth = GroundTruth(params.task.validation_data.input_path,
                             os.path.join(spec.model_dir, "validation_annotations.json"), names)
  params.task.annotation_file = ground_truth.path
  return ground_truth


def _fit_stage2_schedule(params: cfg.ExperimentConfig, recipe: stage2.Recipe, train_records: int,
                         validation_records: int, explicit: dict[str, str],
                         carried: dict[str, str]) -> None:
  """A data-sized recipe: batches that fit the data and `recipe.epochs` epochs of it (the
  schedule's other step counts then follow in _stretch_stage2_schedule), except what the user
  set."""
  what = f"{recipe.origin}, sized to the data"
  train_data, validation_data = params.task.train_data, params.task.validation_data
  user_batch = "task.train_data.global_batch_size" in explicit
  steps, batch = stage2.fit_schedule(train_records, train_data.global_batch_size,
                                     params.trainer.steps_per_loop, recipe.epochs,
                                     fit_batch=not user_batch)
  if not user_batch:
    train_data.global_batch_size = batch
    carried["task.train_data.global_batch_size"] = what
  if "trainer.train_steps" not in explicit:
    params.trainer.train_steps = steps
    carried["trainer.train_steps"] = what
  key = "task.validation_data.global_batch_size"
  if (validation_records and key not in explicit
      and validation_data.global_batch_size > validation_records):
    validation_data.global_batch_size = validation_records
    carried[key] = what


def _stretch_stage2_schedule(params: cfg.ExperimentConfig, recipe: stage2.Recipe,
                             search_steps: int, explicit: dict[str, str],
                             sized: bool = False) -> None:
  """The search's schedule, `schedule_factor` times longer (or as long as the user said, or as
  _fit_stage2_schedule sized it: `sized`), every step count of it following."""
  if not search_steps:
    return
  if "trainer.train_steps" not in explicit and not sized:
    params.trainer.train_steps = max(1, round(search_steps * recipe.schedule_factor))
  stage2.stretch_schedule(params, params.trainer.train_steps / search_steps, explicit)
