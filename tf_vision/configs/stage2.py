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

`train --nas_params_str` takes the same path when its file is a trial of a search job
(`JOB/3/nas_params_str.json`, JOB holding the search's journal): `nas_params_run` reads the trial
with `read_trial` and builds its run with `trial_run`, as `--search_job_dir` does. Any other
architecture (JSON text, a file elsewhere) without config flags gets the recipe its space's search
uses without config flags (the testing YAML) with a schedule sized to the data:
STAGE2_EPOCHS epochs of the training records at the recipe's batch (lowered to a power of two
where an epoch would be shorter than MIN_STEPS_PER_EPOCH steps), in whole loops (`fit_schedule`),
instead of the experiment's ImageNet schedule (12,218 steps at batch 1024: 8,700 epochs of the
digits, 100 minutes on a CPU).
"""

import dataclasses
import json
import math
import os
from typing import Any

from nascli import storage
from nascli.errors import NascliError
from nascli.run_spec import Architecture, DataSpec, RunSpec
from nascli.search import journal
from official.core import config_definitions as cfg
from tf_vision.configs.yaml_source import load_yaml_source

STAGE2_SCHEDULE_FACTOR = 5
# A data-sized stage 2 trains this many epochs: what the default stage 2 of a default search trial
# trains on the embedded digits (500 steps at batch 32 = 11.1 epochs, top-1 about 0.98).
STAGE2_EPOCHS = 11
# A batch that fits the data leaves an epoch at least this many steps (else it is lowered to a
# power of two that does).
MIN_STEPS_PER_EPOCH = 4
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
  # Set: the schedule is sized to this many epochs of the run's data (fit_schedule) instead.
  epochs: float | None = None


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


def search_trial_of(nas_params: Any) -> tuple[str, str] | None:
  """(job dir, trial id) when `nas_params` is `JOB/<id>/nas_params_str.json` of a search job."""
  if not isinstance(nas_params, str) or nas_params.lstrip().startswith("{"):
    return None
  path = nas_params.rstrip("/") if storage.is_gcs(nas_params) else os.path.normpath(nas_params)
  if not storage.is_gcs(path) and os.path.dirname(os.path.dirname(path)) == "":
    path = os.path.abspath(path)  # e.g. 3/nas_params_str.json in the job dir itself
  trial_dir, _, name = path.rpartition("/")
  job_dir, _, trial_id = trial_dir.rpartition("/")
  job_dir = job_dir or "/"
  if name != "nas_params_str.json" or not trial_id or not storage.exists(
      journal.journal_for(job_dir).path):
    return None
  return job_dir, trial_id


def trial_run(run: RunSpec, trial: Trial, search_space: str = "mnasnet",
              search_space_module: str | None = None) -> tuple[RunSpec, list[str]]:
  """The run that retrains `trial` (and notes for stderr): its architecture, its search's
  recipe beneath the run's own config sources, and the search's data unless the run names data.
  `search_space`/`search_space_module` are the space of a trial whose trial_spec.json has none."""
  notes = list(trial.notes)
  recipe = trial.recipe
  if recipe and run.experiment and trial.experiment and run.experiment != trial.experiment:
    notes.append(f"--experiment {run.experiment} is not the search's {trial.experiment}: trial"
                 f" {trial.trial_id} starts from its defaults")
    recipe = None
  data = run.data
  if not any((data.dataset_dir, data.training_data_path, data.validation_data_path)):
    data = dataclasses.replace(data, **trial.data)
  space = ((trial.search_space, trial.search_space_module) if trial.search_space
           else (search_space, search_space_module))
  return dataclasses.replace(
      run, architecture=Architecture(space[0], trial.nas_params_path, space[1]),
      experiment=run.experiment or (trial.experiment if recipe else None), recipe=recipe,
      data=data), notes


def space_recipe(search_space: str, search_space_module: str | None = None) -> Recipe | None:
  """The recipe a search of the space uses without config flags (its testing YAML), with a
  schedule sized to the data; None for a space that has none."""
  # pylint: disable=g-import-not-at-top
  from tf_vision.search_spaces import registry
  entry = registry.resolve_search_space(search_space, search_space_module)
  if entry.defaults is None:
    return None
  path = entry.defaults.config_path()
  return Recipe([(load_yaml_source(path, "--config_file"), f"the {entry.name} search recipe")],
                origin=f"the {entry.name} search recipe ({os.path.relpath(path)})",
                epochs=STAGE2_EPOCHS)


def nas_params_run(run: RunSpec) -> tuple[RunSpec, list[str]]:
  """`train --nas_params_str`: a trial of a search job retrains as `--search_job_dir` retrains
  it (its search's recipe beneath any config flags); any other architecture, without config
  flags, gets its space's search recipe sized to the data. Else (a config flag, an --experiment
  not the space's) the run as it is."""
  arch = run.architecture
  found = search_trial_of(arch.nas_params) if arch else None
  if found:
    return trial_run(dataclasses.replace(run, architecture=None), read_trial(*found),
                     arch.search_space, arch.search_space_module)
  if arch is None or run.config_files or run.params_override or run.hparams_file:
    return run, []
  # pylint: disable=g-import-not-at-top
  from tf_vision.search_spaces import registry
  binding = registry.resolve_search_space(arch.search_space, arch.search_space_module).binding
  if run.experiment and binding and run.experiment != binding.experiment:
    return run, []
  return dataclasses.replace(run, recipe=space_recipe(arch.search_space,
                                                      arch.search_space_module)), []


def _fit_batch(batch: int, records: int, min_steps: int = 1) -> int:
  """`batch`, or the largest power of two that leaves an epoch of `records` `min_steps` steps."""
  if not records or not batch or batch * min_steps <= records:
    return batch
  return 2 ** max(0, (records // min_steps).bit_length() - 1)


def fit_schedule(train_records: int, batch: int, steps_per_loop: int = 1,
                 epochs: float = STAGE2_EPOCHS, fit_batch: bool = True) -> tuple[int, int]:
  """(train_steps, global batch) for `epochs` epochs of `train_records`: the batch fitted to the
  data (`fit_batch`, MIN_STEPS_PER_EPOCH), the steps rounded up to whole loops."""
  if fit_batch:
    batch = _fit_batch(batch, train_records, MIN_STEPS_PER_EPOCH)
  steps = max(1, math.ceil(epochs * train_records / batch))
  loop = max(1, steps_per_loop or 1)
  return -(-steps // loop) * loop, batch


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
  if steps_from:
    length = (f"schedule stretched from the search's {search_steps} steps to the"
              f" trainer.train_steps of {steps_from}")
  elif recipe.epochs and train_records:
    length = (f"schedule sized to {recipe.epochs:g} epochs of the data (STAGE2_EPOCHS),"
              f" stretched from the recipe's {search_steps} steps")
  else:
    length = (f"schedule {recipe.schedule_factor:g}x the search's {search_steps} steps"
              " (STAGE2_SCHEDULE_FACTOR)")
  then = f"; then {', '.join(user_sources)}" if user_sources else ""
  return [first, f"  from {recipe.origin}; {length}{then}"]
