"""Optimization configs: Model Garden's one-ofs widened with FastNN's optimizers and schedules.

Each class here subclasses its Model Garden counterpart and only adds one-of fields, so any
Model Garden optimization config (YAML, `as_dict()`, params.yaml) overrides ours unchanged.
The builders live in `tf_vision.optimization` and are registered in Model Garden's
`optimizer_factory` tables, which is where `OptimizerFactory` looks them up by `type`.

A later optimizer (e.g. THOR) is added the same way: a config dataclass and one more field on
`OptimizerConfig`.
"""

import dataclasses
from typing import Any, List, Optional, Sequence

from official.core import config_definitions as cfg
from official.modeling.hyperparams import base_config
from official.modeling.optimization.configs import optimization_config
from official.modeling.optimization.configs import optimizer_config

from nascli.errors import ConfigValueError
from tf_vision.optimization import thor as thor_lib


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


def _validate_fields(config: base_config.Config, names: Sequence[str]) -> None:
  """Validates the named sub-configs; a ConfigValueError gets the field name as path prefix."""
  for name in names:
    try:
      getattr(config, name).validate()
    except ConfigValueError as e:
      raise e.under(name) from None


@dataclasses.dataclass
class ThorConfig(optimizer_config.BaseOptimizerConfig):
  """`tf_vision.optimization.thor.Thor`'s constructor arguments (learning rate from the schedule).

  The trainer must also call `thor.maybe_attach_thor(model, optimizer)`, which hooks the
  model's Conv2D/Dense layers; MindSpore's ResNet-50 values are in the defaults' comments.

  Attributes:
    name: name of the optimizer.
    momentum: non-Nesterov momentum (0.9).
    frequency: steps between refreshes of the factors and inverses (834).
    damping_init: damping at the start (GPU 0.02345, Ascend 0.03).
    damping_decay: damping factor per 10 epochs (GPU 0.5467, Ascend 0.87).
    steps_per_epoch: steps per epoch of the damping schedule; 0 keeps damping_init constant.
    block_size: size of the diagonal blocks the factors are inverted in (128).
    weight_decay: coefficient added after preconditioning (MindSpore 5e-4; 0 when the model
      already carries an L2 regularizer).
    exclude_from_weight_decay: regexes of variable names that get no weight decay.
    loss_scale: fixed factor the loss is multiplied by outside any LossScaleOptimizer.
    precondition_dtype: dtype of the per-step preconditioning matmuls (float32, bfloat16,
      float16); MindSpore's Ascend THOR runs them in float16. Inverses stay float32.
    low_rank: "auto" (default), "always" or "never": precondition a Conv2D's gradient in its
      backward pass from its M input/output-gradient rows where that is cheaper (deep layers
      at low resolution); the same result (`thor.low_rank_precondition`).
  """
  name: str = "Thor"
  momentum: float = 0.9
  frequency: int = 834
  damping_init: float = 0.03
  damping_decay: float = 0.87
  steps_per_epoch: int = 0
  block_size: int = 128
  weight_decay: float = 0.0
  exclude_from_weight_decay: Optional[List[str]] = None
  loss_scale: float = 1.0
  precondition_dtype: str = "float32"
  low_rank: str = "auto"

  def validate(self):
    """Also rejects what `thor.Thor` would: Model Garden builds the optimizer only after the
    run has started writing the model dir, so a bad value should fail at planning instead.

    Raises:
      ConfigValueError: naming the first bad field, its value and what it allows.
    """
    super().validate()
    for name, allowed in thor_lib.SETTINGS.items():
      if not allowed.accepts(getattr(self, name)):
        raise ConfigValueError(name, getattr(self, name), allowed.words)


@dataclasses.dataclass
class OptimizerConfig(optimization_config.OptimizerConfig):
  """Model Garden's optimizer one-of plus `adadelta`, `ftrl` and `thor`."""
  adadelta: AdadeltaConfig = dataclasses.field(default_factory=AdadeltaConfig)
  ftrl: FtrlConfig = dataclasses.field(default_factory=FtrlConfig)
  thor: ThorConfig = dataclasses.field(default_factory=ThorConfig)

  def validate(self):
    """Also validates the chosen optimizer: Model Garden builds only that branch (the others
    may hold anything), and a Config's own `validate()` does not descend into its fields."""
    super().validate()
    if self.type is not None:
      _validate_fields(self, [self.type])


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
class ThorLrConfig(base_config.Config):
  """THOR's polynomial learning rate (`tf_vision.optimization.thor_schedules.ThorPolynomial`).

  lr = lr_init * (1 - e / lr_end_epoch) ** lr_decay with e = (step + 1) / steps_per_epoch,
  halved from each epoch of `halving_epochs` on. Defaults: MindSpore's GPU ResNet-50 values.

  Attributes:
    name: name of the schedule.
    lr_init: starting rate.
    lr_decay: power of the polynomial.
    lr_end_epoch: epoch where the polynomial reaches 0.
    steps_per_epoch: steps in one epoch (global batches).
    halving_epochs: epochs from which the rate is halved (MindSpore: 39 and 40).
  """
  name: str = "ThorPolynomial"
  lr_init: float = 0.05672
  lr_decay: float = 4.9687
  lr_end_epoch: float = 50.0
  steps_per_epoch: int = 5004
  halving_epochs: List[float] = dataclasses.field(default_factory=lambda: [39.0, 40.0])


@dataclasses.dataclass
class LrConfig(optimization_config.LrConfig):
  """Model Garden's learning-rate one-of plus `fastnn` and `thor_lr`."""
  fastnn: FastnnDecayLrConfig = dataclasses.field(default_factory=FastnnDecayLrConfig)
  thor_lr: ThorLrConfig = dataclasses.field(default_factory=ThorLrConfig)


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

  def validate(self):
    """Also validates the optimizer one-of (see `OptimizerConfig.validate`)."""
    super().validate()
    _validate_fields(self, ["optimizer"])


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
