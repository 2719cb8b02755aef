"""Stage 2's recipe: retraining a searched trial starts from the search's own config.

A search trial trained on a short proxy schedule; stage 2 trains the same architecture longer.
Without config flags, `nascli train --search_job_dir JOB --train_nas_trial_numbers 3` starts from
the trial's saved `params.yaml` (else the config files its `trial_spec.json` records), drops what
belongs to the search's data (input paths, the COCO ground truth written for it), and stretches
the schedule: `trainer.train_steps` becomes STAGE2_SCHEDULE_FACTOR times the trial's, and every
step count of the learning-rate schedule, its warmup and the checkpoint/validation intervals
follows (a cosine decays over the whole run, not over its first fifth). --config_file and
--params_override still apply on top; when they set trainer.train_steps the schedule stretches to
that length instead, except for step counts they set themselves.

The default factor: 5 takes the tiny MnasNet trial of the testing YAML (100 steps) to 500 steps,
about 11 epochs of the embedded digits, which reaches top-1 >= 0.9 on a CPU in about a minute.
"""

import dataclasses
import json
from typing import Any

from nascli import storage
from nascli.errors import NascliError
from nascli.run_spec import DataSpec
from official.core import config_definitions as cfg
from tf_vision.configs.yaml_source import load_yaml_source

STAGE2_SCHEDULE_FACTOR = 5
# Keys of a trial's params.yaml that describe the search's data, not the recipe: the stage-2
# run's data replaces them (nascli writes the detection ground truth again for its own data).
DATA_KEYS = ("task.train_data.input_path", "task.validation_data.input_path",
             "task.annotation_file")

# Step-count fields of each learning-rate schedule and warmup type, stretched with the run.
_SCHEDULE_STEPS: dict[tuple[str, str], tuple[str, ...]] = {}


def register_schedule_steps(kind: str, type_name: str, *fields: str) -> None:
  """Names the fields of `trainer.optimizer_config.<kind>.<type_name>` that count steps."""
  _SCHEDULE_STEPS[(kind, type_name)] = fields


for _type, _fields in {"cosine": ("decay_steps",), "stepwise": ("boundaries",),
                       "exponential": ("decay_steps",), "polynomial": ("decay_steps",),
                       "power_linear": ("total_decay_steps",),
                       "step_cosine_with_offset": ("boundaries",),
                       "fastnn": ("total_steps",)}.items():
  register_schedule_steps("learning_rate", _type, *_fields)
for _type in ("linear", "polynomial", "t2t"):
  register_schedule_steps("warmup", _type, "warmup_steps")
# Stretched with the run too (each is then rounded to a multiple of steps_per_loop).
STRETCHED_INTERVALS = ("trainer.checkpoint_interval", "trainer.validation_interval")


@dataclasses.dataclass
class Recipe:
  """Config sources a stage-2 run starts from, applied right after the experiment's defaults."""
  sources: list[tuple[dict, str]]  # (override, its name for messages), in order
  origin: str  # where the recipe came from, for the recipe line
  schedule_factor: float = STAGE2_SCHEDULE_FACTOR


@dataclasses.dataclass
class Trial:
  """What stage 2 needs from one trial folder of a search job."""
  trial_id: str
  trial_dir: str
  nas_params_path: str
  search_space: str | None
  experiment: str | None
  data: dict[str, str]  # the search's data flags that were set (DataSpec fields)
  recipe: Recipe | None
  notes: list[str]
  search_space_module: str | None = None  # the search's --search_space_module


def _read_json(path: str) -> dict:
  if not storage.is_file(path):
    return {}
  try:
    return json.loads(storage.read_text(path))
  except ValueError as e:
    raise NascliError(f"cannot read {path}: {' '.join(str(e).split())[:120]}") from None


def _drop(tree: dict, dotted: str) -> None:
  *parents, leaf = dotted.split(".")
  for part in parents:
    tree = tree.get(part)
    if not isinstance(tree, dict):
      return
  tree.pop(leaf, None)


def read_trial(job_dir: str, trial_id: str) -> Trial:
  """The trial's architecture file, search space, experiment, data and recipe (TF-free)."""
  trial_dir = storage.join(job_dir, trial_id)
  nas_params = storage.join(trial_dir, "nas_params_str.json")
  if not storage.is_file(nas_params):
    raise NascliError(f"search job {job_dir} has no trial {trial_id} ({nas_params} missing)")
  spec = _read_json(storage.join(trial_dir, "trial_spec.json"))
  run_info = _read_json(storage.join(trial_dir, "nascli_run.json"))
  # The trials' RunSpec (nascli/run_spec.py) as TrialSpec nests it; an older trial_spec.json
  # held its fields flat.
  run = (spec.get("trial") or {}).get("run") or spec
  data_flags = run.get("data") or run
  data = {f.name: data_flags[f.name] for f in dataclasses.fields(DataSpec)
          if data_flags.get(f.name)}
  notes: list[str] = []
  params_path = storage.join(trial_dir, "params.yaml")
  recipe = None
  if storage.is_file(params_path):
    override = load_yaml_source(params_path, "params.yaml")
    for key in DATA_KEYS:
      _drop(override, key)
    recipe = Recipe([(override, f"trial {trial_id}'s {params_path}")],
                    origin=f"trial {trial_id}'s params.yaml ({params_path})")
  elif run.get("config_files") or run.get("params_override"):
    sources = []
    for path in run.get("config_files") or []:
      if storage.is_file(path):
        sources.append((load_yaml_source(path, "--config_file"), f"the search's {path}"))
      else:
        notes.append(f"the search's --config_file {path} is gone: stage 2 goes without it")
    if run.get("params_override"):
      sources.append((load_yaml_source(run["params_override"], "--params_override"),
                      "the search's --params_override"))
    recipe = Recipe(sources, origin=f"the config files of trial {trial_id}'s search"
                    f" ({storage.join(trial_dir, 'trial_spec.json')})")
  else:
    notes.append(f"trial {trial_id} of {job_dir} has no params.yaml nor recorded config files:"
                 " stage 2 starts from the experiment's defaults")
  return Trial(trial_id=trial_id, trial_dir=trial_dir, nas_params_path=nas_params,
               search_space=spec.get("search_space"),
               experiment=run_info.get("experiment") or run.get("experiment"), data=data,
               recipe=recipe, notes=notes, search_space_module=spec.get("search_space_module"))


def _scaled(value: Any, ratio: float) -> Any:
  if isinstance(value, (list, tuple)):
    return [_scaled(v, ratio) for v in value]
  if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
    return value
  return max(1, round(value * ratio)) if isinstance(value, int) else value * ratio


def stretch_schedule(params: cfg.ExperimentConfig, ratio: float,
                     explicit: set[str] | dict[str, str]) -> None:
  """Multiplies the schedule's step counts by `ratio`, except keys the user set (`explicit`)."""
  if ratio == 1:
    return
  optimization = params.trainer.optimizer_config
  for kind in ("learning_rate", "warmup"):
    one_of = getattr(optimization, kind)
    fields = _SCHEDULE_STEPS.get((kind, one_of.type or ""), ())
    branch = one_of.get() if one_of.type else None
    for field in fields:
      key = f"trainer.optimizer_config.{kind}.{one_of.type}.{field}"
      if branch is not None and key not in explicit:
        setattr(branch, field, _scaled(getattr(branch, field), ratio))
  for key in STRETCHED_INTERVALS:
    if key not in explicit:
      field = key.rpartition(".")[2]
      setattr(params.trainer, field, _scaled(getattr(params.trainer, field), ratio))


def learning_rate(params: cfg.ExperimentConfig) -> str:
  """The schedule's peak rate and type, e.g. `0.05 (cosine)`, for the recipe line."""
  lr = params.trainer.optimizer_config.learning_rate
  if not lr.type:
    return "unset"
  branch = lr.get()
  for field in ("initial_learning_rate", "learning_rate", "lr_init"):
    if isinstance(getattr(branch, field, None), (int, float)):
      return f"{getattr(branch, field):g} ({lr.type})"
  values = getattr(branch, "values", None)
  return f"{values[0]:g} ({lr.type})" if values else lr.type


def recipe_lines(params: cfg.ExperimentConfig, experiment: str, recipe: Recipe,
                 search_steps: int, train_records: int, steps_from: str | None,
                 user_sources: list[str]) -> list[str]:
  """What stage 2 trains with and where each part came from (two lines for stderr)."""
  steps = params.trainer.train_steps
  batch = params.task.train_data.global_batch_size
  epochs = (f" = {steps * batch / train_records:.1f} epochs of {train_records} records"
            if train_records and batch else "")
  first = (f"stage 2 recipe: {experiment}, {steps} steps{epochs}, global batch {batch},"
           f" learning rate {learning_rate(params)}")
  length = (f"schedule stretched from the search's {search_steps} steps to the"
            f" trainer.train_steps of {steps_from}" if steps_from else
            f"schedule {recipe.schedule_factor:g}x the search's {search_steps} steps"
            " (STAGE2_SCHEDULE_FACTOR)")
  then = f"; then {', '.join(user_sources)}" if user_sources else ""
  return [first, f"  from {recipe.origin}; {length}{then}"]
