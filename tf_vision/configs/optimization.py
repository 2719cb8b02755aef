"""Optimization configs: Model Garden's one-ofs widened with FastNN's optimizers and schedules.

Each class here subclasses its Model Garden counterpart and only adds one-of fields, so any
Model Garden optimization config (YAML, `as_dict()`, params.yaml) overrides ours unchanged.
The builders live in `tf_vision.optimization` and are registered in Model Garden's
`optimizer_factory` tables, which is where `OptimizerFactory` looks them up by `type`.

A later optimizer (e.g. THOR) is added the same way: a config dataclass and one more field on
`OptimizerConfig`.
"""

import dataclasses
from typing import Any

from official.core import config_definitions as cfg
from official.modeling.hyperparams import base_config
from official.modeling.optimization.configs import optimization_config
from official.modeling.optimization.configs import optimizer_config


@dataclasses.dataclass
class AdadeltaConfig(optimizer_config.BaseOptimizerConfig):
  """tf_keras Adadelta's constructor arguments.

  No `learning_rate` field: as for Model Garden's SGD/Adam configs, OptimizerFactory passes the
  schedule built from the `learning_rate` one-of.

  Attributes:
    name: name of the optimizer.
    rho: decay rate of the squared-gradient and squared-update averages.
    epsilon: numerical-stability constant.
  """
  name: str = "Adadelta"
  rho: float = 0.95
  epsilon: float = 1e-7


@dataclasses.dataclass
class FtrlConfig(optimizer_config.BaseOptimizerConfig):
  """tf_keras Ftrl's constructor arguments (learning rate comes from the schedule).

  Attributes:
    name: name of the optimizer.
    learning_rate_power: power of the per-coordinate learning-rate decay (<= 0).
    initial_accumulator_value: starting value of the accumulators (>= 0).
    l1_regularization_strength: L1 strength (>= 0).
    l2_regularization_strength: L2 strength (>= 0), stabilization penalty.
    l2_shrinkage_regularization_strength: L2 shrinkage strength (>= 0), magnitude penalty.
    beta: FTRL beta (default 0.0).
  """
  name: str = "Ftrl"
  learning_rate_power: float = -0.5
  initial_accumulator_value: float = 0.1
  l1_regularization_strength: float = 0.0
  l2_regularization_strength: float = 0.0
  l2_shrinkage_regularization_strength: float = 0.0
  beta: float = 0.0


@dataclasses.dataclass
class OptimizerConfig(optimization_config.OptimizerConfig):
  """Model Garden's optimizer one-of plus `adadelta` and `ftrl`."""
  adadelta: AdadeltaConfig = dataclasses.field(default_factory=AdadeltaConfig)
  ftrl: FtrlConfig = dataclasses.field(default_factory=FtrlConfig)


@dataclasses.dataclass
class FastnnDecayLrConfig(base_config.Config):
  """FastNN's learning-rate decay (`tf_vision.optimization.schedules.FastnnDecay`).

  Attributes:
    name: name of the schedule.
    learning_rate: base learning rate (FastNN `learning_rate`).
    decay_type: 'fixed', 'exponential' or 'polynomial' (`learning_rate_decay_type`).
    decay_scheme: '' (no decay before total_steps), 'luong234', 'luong5' or 'luong10'.
    decay_factor: exponential decay factor per decay step (`learning_rate_decay_factor`).
    end_learning_rate: where polynomial decay ends (`end_learning_rate`).
    total_steps: the training length S the schemes are relative to (`stop_at_step`).
  """
  name: str = "FastnnDecay"
  learning_rate: float = 0.01
  decay_type: str = "exponential"
  decay_scheme: str = ""
  decay_factor: float = 0.94
  end_learning_rate: float = 0.0001
  total_steps: int = 0


@dataclasses.dataclass
class LrConfig(optimization_config.LrConfig):
  """Model Garden's learning-rate one-of plus `fastnn`."""
  fastnn: FastnnDecayLrConfig = dataclasses.field(default_factory=FastnnDecayLrConfig)


@dataclasses.dataclass
class T2tWarmupConfig(base_config.Config):
  """Tensor2Tensor warmup: starts at 1/100 of the rate and grows exponentially to it.

  Attributes:
    name: name of the warmup schedule.
    warmup_steps: W; 0 means no warmup.
  """
  name: str = "t2t"
  warmup_steps: int = 0


@dataclasses.dataclass
class WarmupConfig(optimization_config.WarmupConfig):
  """Model Garden's warmup one-of plus `t2t`."""
  t2t: T2tWarmupConfig = dataclasses.field(default_factory=T2tWarmupConfig)


@dataclasses.dataclass
class OptimizationConfig(optimization_config.OptimizationConfig):
  """Model Garden's OptimizationConfig whose one-ofs know nascli's optimizers and schedules."""
  optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
  learning_rate: LrConfig = dataclasses.field(default_factory=LrConfig)
  warmup: WarmupConfig = dataclasses.field(default_factory=WarmupConfig)


def _full_dict(config: base_config.Config) -> dict[str, Any]:
  """Every field, unchosen one-of branches included (`as_dict()` drops those)."""
  out = {}
  for key, value in config.__dict__.items():
    if key in config.RESERVED_ATTR:
      continue
    if isinstance(value, base_config.Config):
      out[key] = _full_dict(value)
    else:
      out[key] = base_config.Config._export_config(value)  # pylint: disable=protected-access
  return out


def widen_optimization_config(
    config: optimization_config.OptimizationConfig) -> OptimizationConfig:
  """Our OptimizationConfig carrying every value of `config` (unchosen branches too)."""
  wider = OptimizationConfig()
  wider.override(_full_dict(config), is_strict=True)
  return wider


def upgrade_optimization_config(exp_config: cfg.ExperimentConfig) -> cfg.ExperimentConfig:
  """Replaces `exp_config.trainer.optimizer_config` by our superset class, in place.

  Call it before `lock()` and before applying overrides that name nascli's one-of fields
  (`optimizer.type=adadelta`, `learning_rate.type=fastnn`, `warmup.type=t2t`). A config that
  already uses our class is left as it is.

  Args:
    exp_config: a Model Garden ExperimentConfig (unlocked).

  Returns:
    `exp_config`, for chaining.
  """
  current = exp_config.trainer.optimizer_config
  if not isinstance(current, OptimizationConfig):
    exp_config.trainer.optimizer_config = widen_optimization_config(current)
  return exp_config
