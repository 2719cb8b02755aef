"""The run contract: how a run's config is made, and what every trial of a search runs with.

`RunSpec` is the one description of a run's config sources that `nascli train` (TrainArgs),
the config builder (tf_vision.params.build), a search (SearchArgs) and its trials (TrialSpec,
trial_spec.json) all carry, nested and whole: a new config source is a field here and is read
where it is applied, not copied from class to class. `TrialSettings` is a search's RunSpec plus
how its trials are scored and measured.

TensorFlow-free (also no Model Garden, no pyglove): the CLI builds these before it checks its
flags, and that must take well under 2 s.
"""

import dataclasses
import os
import types
import typing
from typing import Any, Union

from nascli.errors import NascliError


@dataclasses.dataclass
class DataSpec:
  """The data flags: --dataset_dir (with FastNN's --dataset_name/--train_files/eval_files) or
  --training_data_path/--validation_data_path."""
  training_data_path: str | None = None
  validation_data_path: str | None = None
  dataset_name: str | None = None
  dataset_dir: str | None = None
  train_files: str | None = None
  eval_files: str | None = None


@dataclasses.dataclass
class Architecture:
  """A searched architecture: Vertex's nas_params_str (JSON text, a .json file, or its dict), of
  the space the search flags' pair names (tf_vision.search_spaces.resolve_search_space): the
  registered `search_space`, or the space of `search_space_module` (`pkg.module.fn`, imported
  where the model is built)."""
  search_space: str
  nas_params: str | dict[str, str]
  search_space_module: str | None = None


@dataclasses.dataclass
class ProxySettings:
  """A proxy task's changes to a recipe (`search_proxy_task`'s candidates), applied after every
  other source; each None keeps the recipe's value."""
  # trainer.train_steps; every step count of the schedule (learning rate, warmup, checkpoint and
  # validation intervals) scales with it, so a short proxy decays as the recipe does.
  train_steps: int | None = None
  image_size: int | None = None  # task.model.input_size [S, S, channels]
  # The first ceil(fraction x n) of the n training files, sorted (Vertex's shard globs).
  train_data_fraction: float | None = None


@dataclasses.dataclass
class RunSpec:
  """How a run's config is made, in Model Garden's order of precedence (tf_vision/params.py):
  experiment defaults -> stage 2's recipe -> the data -> config_files -> params_override ->
  FastNN hparams (file, then `hparams`) -> `options` -> strategy/num_gpus; then `seed`."""
  model: str = "classification"  # picks the experiment when `experiment` is not given
  experiment: str | None = None
  config_files: list[str] = dataclasses.field(default_factory=list)
  params_override: str | None = None
  hparams_file: str | None = None
  hparams: dict[str, Any] = dataclasses.field(default_factory=dict)  # FastNN keys as options
  # Overrides applied last, they win: dedicated options (--keep_checkpoint_max), a warm start.
  options: dict[str, Any] = dataclasses.field(default_factory=dict)
  data: DataSpec = dataclasses.field(default_factory=DataSpec)
  strategy: str | None = None
  num_gpus: int | None = None
  # Seeds the initialization and, where the config sets none, task.train_data's seed and
  # determinism.
  seed: int | None = None
  # Its backbone (and, without `experiment`, the space's experiment) replaces the config's.
  architecture: Architecture | None = None
  # Stage 2: the search's recipe (tf_vision.configs.stage2.Recipe), beneath the user's sources;
  # never part of a search's settings (a search's trials have none).
  recipe: Any = None
  proxy: ProxySettings | None = None

  def with_absolute_paths(self) -> "RunSpec":
    """The same run as a process in any working directory sees it (URLs stay as they are)."""
    return dataclasses.replace(
        self, config_files=[absolute(p) for p in self.config_files],
        hparams_file=absolute(self.hparams_file),
        data=dataclasses.replace(self.data, dataset_dir=absolute(self.data.dataset_dir)))


@dataclasses.dataclass
class LatencyModelRef:
  """A search's latency model: its file and `LatencyModel.fingerprint()`, so that a resume with
  another model (the same path rewritten included) is refused as other settings."""
  path: str
  fingerprint: str


@dataclasses.dataclass
class TrialSettings:
  """What every trial of a search runs with: its run, its reward, its measurements. The
  search's settings (journal: what must match on resume) and each trial_spec.json hold it."""
  run: RunSpec = dataclasses.field(default_factory=lambda: RunSpec(seed=0))
  # The MnasNet reward (nascli/search/reward.py); no target: reward = accuracy.
  target_device_latency_ms: float | None = None
  latency_constraint: str = "soft"
  latency_weight: float = 0.07
  latency_runs: int = 20  # timed runs of the trained model's serving function (median)
  # Who measures the latency: the trial itself (in_trial), or `nascli
  # run_latency_calculator_local` beside the search (external: the trial asks and waits up to
  # latency_timeout_s seconds; nascli/latency_calculator.py).
  latency_calculator: str = "in_trial"
  latency_timeout_s: float = 600.0
  # --latency_input_size: the side of the input latency is timed at, the size the model will
  # serve (tf_vision.serving.export_lib.serving_size_of); None: the config's
  # task.latency_input_size, else its training input size.
  latency_input_size: int | None = None
  # --latency_model: a fitted latency model (nascli/latency_model) predicts every proposal's
  # latency before it trains (and no trial times itself); under a hard target a proposal
  # predicted over target * (1 + latency_margin) is not trained (nascli/search/latency_gate.py).
  latency_model: LatencyModelRef | None = None
  latency_margin: float = 0.0
  export_every_trial: bool = False  # each trial exports its SavedModel as it ends
  # Evaluations spread over training besides the final one (TrainArgs.curve_points): the
  # validation curves the proxy-task commands correlate; None: the final one only.
  validation_curve_points: int | None = None

  def with_absolute_paths(self) -> "TrialSettings":
    model = self.latency_model and dataclasses.replace(
        self.latency_model, path=absolute(self.latency_model.path))
    return dataclasses.replace(self, run=self.run.with_absolute_paths(), latency_model=model)


def absolute(path: str | None) -> str | None:
  """A local path made absolute; a URL (gs://...) or None as it is."""
  return path if not path or "://" in path else os.path.abspath(path)


def from_dict(cls: type, data: dict[str, Any], what: str = "") -> Any:
  """A dataclass from its `dataclasses.asdict` (e.g. read back from JSON), nested dataclass
  fields rebuilt; an unknown key is refused, naming it."""
  if not isinstance(data, dict):
    raise NascliError(f"{what or cls.__name__}: expected an object, got {type(data).__name__}")
  hints = typing.get_type_hints(cls)
  fields = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(data) - fields)
  if unknown:
    raise NascliError(f"{what or cls.__name__}: unknown key(s) {', '.join(unknown)}")
  values = {}
  for name, value in data.items():
    nested = _dataclass_of(hints.get(name))
    values[name] = (from_dict(nested, value, f"{what}.{name}" if what else name)
                    if nested is not None and isinstance(value, dict) else value)
  return cls(**values)


def _dataclass_of(hint: Any) -> type | None:
  """The dataclass a field's type names (also inside `X | None`)."""
  if dataclasses.is_dataclass(hint):
    return hint
  if typing.get_origin(hint) in (Union, types.UnionType):
    for arg in typing.get_args(hint):
      if dataclasses.is_dataclass(arg):
        return arg
  return None
