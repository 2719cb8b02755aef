"""PAI FastNN's hyperparameters: the `key=value` file and their mapping onto a Model Garden config.

`FASTNN_KEYS` lists FastNN's keys (its documented table plus the flags.py flags that mean
something here) with FastNN's types and defaults. `parse_hparams_file` reads a hyperparameter
file into typed values; `apply_fastnn` writes the keys a file gives onto an ExperimentConfig
(image classification or RetinaNet) through `_SETTERS`, one setter per key, applied in the
table's order (optimizer before its parameters and clipping, training length before the
schedule). Only keys present in the dict are applied: the file is the last layer of Model
Garden's precedence. Inside a group the file selects (an `optimizer`, the learning-rate keys,
the warmup keys), keys it leaves out take FastNN's defaults, because a FastNN file means
FastNN's behaviour (e.g. `optimizer=adam` gets FastNN's opt_epsilon 1.0, not Keras' 1e-7).

The caller reads these keys from the dict itself (they select data, model and directories):
`CALLER_KEYS`. `apply_fastnn` returns notes for keys accepted without effect in TF2 and for
every adjustment it made. `log_loss_every_n_iters` ends up in `trainer.steps_per_loop` and
`trainer.summary_interval`; a caller that prints a log line every N steps reads it there.

Known differences from FastNN (TF 1.x): optimizers are tf_keras' (legacy) ones, so momentum
applies the learning rate to the gradient before accumulation, RMSprop's mean square starts at
0 instead of 1, adagrad keeps Keras' epsilon 1e-7 (TF1 Adagrad has none; FastNN passes
opt_epsilon only to adadelta, adam, rmsprop and adamweightdecay), and adamweightdecay is
Model Garden's AdamWeightDecay, which bias-corrects Adam's moments (FastNN's BERT copy does
not). weight_decay becomes Model Garden's L2 loss term with the same scale as slim's
l2_regularizer; max_gradient_norm and loss_scale apply without PAI-Soar.
"""

import dataclasses
import difflib
import math
import os
from typing import Any, Callable

from nascli.errors import NascliError
from official.core import config_definitions as cfg
from official.modeling.hyperparams import base_config
from tf_vision.configs import optimization
# The package import registers the optimizers and schedules the mapping selects.
from tf_vision.optimization import schedules


from tf_vision.configs.fastnn_keys import (  # noqa: F401  pylint: disable=unused-import
    CALLER_KEYS, FASTNN_KEYS, HparamSpec, coerce_value, parse_hparams_file, _check_value)


# --------------------------------------------------------------------------------------------
# Mapping onto an ExperimentConfig.

@dataclasses.dataclass(frozen=True)
class _FastnnOptimizer:
  """How one FastNN optimizer becomes a Model Garden optimizer one-of branch."""
  mg_type: str
  params: dict[str, str]  # FastNN key -> field of the branch config.
  fixed: dict[str, Any] = dataclasses.field(default_factory=dict)


FASTNN_OPTIMIZERS: dict[str, _FastnnOptimizer] = {
    "adadelta": _FastnnOptimizer("adadelta", {"adadelta_rho": "rho", "opt_epsilon": "epsilon"}),
    "adagrad": _FastnnOptimizer(
        "adagrad", {"adagrad_initial_accumulator_value": "initial_accumulator_value"}),
    "adam": _FastnnOptimizer(
        "adam", {"adam_beta1": "beta_1", "adam_beta2": "beta_2", "opt_epsilon": "epsilon"},
        {"amsgrad": False}),
    "ftrl": _FastnnOptimizer(
        "ftrl", {"ftrl_learning_rate_power": "learning_rate_power",
                 "ftrl_initial_accumulator_value": "initial_accumulator_value",
                 "ftrl_l1": "l1_regularization_strength",
                 "ftrl_l2": "l2_regularization_strength"}),
    "momentum": _FastnnOptimizer("sgd", {"momentum": "momentum"}, {"nesterov": False}),
    "sgd": _FastnnOptimizer("sgd", {}, {"momentum": 0.0, "nesterov": False}),
    "rmsprop": _FastnnOptimizer(
        "rmsprop", {"rmsprop_decay": "rho", "rmsprop_momentum": "momentum",
                    "opt_epsilon": "epsilon"}, {"centered": False}),
    "adamweightdecay": _FastnnOptimizer(
        "adamw", {"adam_beta1": "beta_1", "adam_beta2": "beta_2", "opt_epsilon": "epsilon"},
        {"amsgrad": False, "weight_decay_rate": 0.01, "include_in_weight_decay": None,
         "exclude_from_weight_decay": ["LayerNorm", "layer_norm", "bias"],
         # FastNN's AdamWeightDecayOptimizer does not clip; max_gradient_norm clips globally.
         "gradient_clip_norm": 0.0}),
}
_OPTIMIZER_PARAM_KEYS = frozenset(k for o in FASTNN_OPTIMIZERS.values() for k in o.params)
_LR_KEYS = ("learning_rate", "learning_rate_decay_type", "decay_scheme",
            "learning_rate_decay_factor", "end_learning_rate")
_WARMUP_KEYS = ("warmup_steps", "warmup_scheme")
_LENGTH_KEYS = ("stop_at_step", "num_epochs")


@dataclasses.dataclass
class _Context:
  config: cfg.ExperimentConfig
  hparams: dict[str, Any]
  has_gpu: bool
  num_replicas: int
  steps_per_epoch: int | None
  notes: list[str] = dataclasses.field(default_factory=list)
  done: set[str] = dataclasses.field(default_factory=set)

  def get(self, key: str) -> Any:
    return self.hparams.get(key, FASTNN_KEYS[key].default)

  def once(self, group: str) -> bool:
    """True the first time a group's setter runs (several keys share one setter)."""
    if group in self.done:
      return False
    self.done.add(group)
    return True

  @property
  def optimization(self) -> optimization.OptimizationConfig:
    return self.config.trainer.optimizer_config


_Setter = Callable[[_Context, str], None]


def _set_path(ctx: _Context, key: str, path: str, value: Any) -> None:
  """config.<path> = value; a config without that field is an error naming the key."""
  *parents, leaf = path.split(".")
  node = ctx.config
  for name in parents:
    node = getattr(node, name, None)
  if not isinstance(node, base_config.Config) or leaf not in node.__dict__:
    raise NascliError(f"FastNN key '{key}' maps to {path}, which this experiment's config"
                      f" ({type(ctx.config.task).__name__}) does not have")
  setattr(node, leaf, value)


def _to(*paths: str) -> _Setter:
  """Setter writing the key's value to each config path."""
  def setter(ctx: _Context, key: str) -> None:
    for path in paths:
      _set_path(ctx, key, path, ctx.hparams[key])
  return setter


def _caller_handles(ctx: _Context, key: str) -> None:
  del ctx, key  # Read from the dict by the caller (data, model, directories).


def _no_effect(reason: str) -> _Setter:
  def setter(ctx: _Context, key: str) -> None:
    ctx.notes.append(f"{key}={ctx.hparams[key]!r} has no effect: {reason}")
  return setter


def _set_batch_size(ctx: _Context, key: str) -> None:
  global_batch = ctx.hparams[key] * ctx.num_replicas
  _set_path(ctx, key, "task.train_data.global_batch_size", global_batch)
  _set_path(ctx, key, "task.validation_data.global_batch_size", global_batch)


def _set_caching(ctx: _Context, key: str) -> None:
  _set_path(ctx, key, "task.train_data.cache", ctx.hparams[key])
  if ctx.hparams[key]:
    ctx.notes.append("datasets_use_caching=True: Model Garden caches decoded, augmented"
                     " examples, so random augmentation is fixed after the first epoch")


def _set_labels_offset(ctx: _Context, key: str) -> None:
  if ctx.hparams[key]:
    raise NascliError(f"FastNN key 'labels_offset' ({ctx.hparams[key]}) is not supported: Model"
                      " Garden reads labels as stored; write labels that start at 0"
                      " (nascli convert-data does)")


def _set_train_length(ctx: _Context, key: str) -> None:
  if not ctx.once("length"):
    return
  if "stop_at_step" in ctx.hparams:
    _set_path(ctx, "stop_at_step", "trainer.train_steps", ctx.hparams["stop_at_step"])
    if "num_epochs" in ctx.hparams:
      ctx.notes.append("num_epochs ignored: stop_at_step sets the training length")
  elif ctx.steps_per_epoch:
    _set_path(ctx, "num_epochs", "trainer.train_steps",
              ctx.hparams["num_epochs"] * ctx.steps_per_epoch)
  else:
    ctx.notes.append(f"num_epochs={ctx.hparams['num_epochs']} ignored: the number of steps"
                     " per epoch is unknown (give stop_at_step or num_sample_per_epoch)")


def _set_log_interval(ctx: _Context, key: str) -> None:
  every = ctx.hparams[key]
  if every < 1:
    raise NascliError(f"FastNN key '{key}' must be >= 1, got {every}")
  _set_path(ctx, key, "trainer.steps_per_loop", every)
  _set_path(ctx, key, "trainer.summary_interval", every)
  if "save_checkpoints_steps" not in ctx.hparams:
    _align_checkpoint_interval(ctx, ctx.config.trainer.checkpoint_interval)


def _align_checkpoint_interval(ctx: _Context, wanted: int) -> None:
  """Model Garden checks checkpoints once per loop: round up to a multiple of steps_per_loop."""
  loop = ctx.config.trainer.steps_per_loop
  interval = max(loop, -(-wanted // loop) * loop)
  if interval != wanted:
    ctx.notes.append(f"checkpoint interval {wanted} is not a multiple of steps_per_loop {loop}:"
                     f" checkpoints every {interval} steps")
  ctx.config.trainer.checkpoint_interval = interval


def _set_checkpoint_interval(ctx: _Context, key: str) -> None:
  if ctx.hparams[key] < 1:
    raise NascliError(f"FastNN key '{key}' must be >= 1, got {ctx.hparams[key]}")
  _align_checkpoint_interval(ctx, ctx.hparams[key])


def _set_optimizer(ctx: _Context, key: str) -> None:
  name = ctx.hparams[key]
  spec = FASTNN_OPTIMIZERS[name]
  one_of = ctx.optimization.optimizer
  one_of.type = spec.mg_type
  branch = one_of.get()
  for field, value in spec.fixed.items():
    setattr(branch, field, value)
  for fastnn_key, field in spec.params.items():
    setattr(branch, field, ctx.get(fastnn_key))
  for fastnn_key in sorted(_OPTIMIZER_PARAM_KEYS & ctx.hparams.keys() - spec.params.keys()):
    ctx.notes.append(f"{fastnn_key} has no effect with optimizer={name}")


def _set_optimizer_param(ctx: _Context, key: str) -> None:
  """A parameter given without `optimizer`: set it on the current optimizer if it takes it."""
  if "optimizer" in ctx.hparams:
    return  # _set_optimizer used it (or noted that it does not apply).
  mg_type = ctx.optimization.optimizer.type
  for spec in FASTNN_OPTIMIZERS.values():
    if spec.mg_type == mg_type and key in spec.params:
      setattr(ctx.optimization.optimizer.get(), spec.params[key], ctx.hparams[key])
      return
  ctx.notes.append(f"{key} has no effect with the experiment's optimizer {mg_type!r}"
                   " (set optimizer= to choose one)")


def _set_max_gradient_norm(ctx: _Context, key: str) -> None:
  branch = ctx.optimization.optimizer.get()
  if branch is None:
    raise NascliError("FastNN key 'max_gradient_norm' needs an optimizer: set optimizer=")
  branch.global_clipnorm = ctx.hparams[key]


def _set_learning_rate(ctx: _Context, key: str) -> None:
  if not ctx.once("learning_rate"):
    return
  lr = optimization.FastnnDecayLrConfig(
      learning_rate=ctx.get("learning_rate"),
      decay_type=ctx.get("learning_rate_decay_type"),
      decay_scheme=ctx.get("decay_scheme"),
      decay_factor=ctx.get("learning_rate_decay_factor"),
      end_learning_rate=ctx.get("end_learning_rate"),
      total_steps=ctx.config.trainer.train_steps)
  try:
    schedules.FastnnDecay(**lr.as_dict())
  except ValueError as e:
    raise NascliError(f"FastNN learning rate ({key}): {e}") from None
  ctx.optimization.learning_rate.type = "fastnn"
  ctx.optimization.learning_rate.fastnn = lr


def _set_warmup(ctx: _Context, key: str) -> None:
  if not ctx.once("warmup"):
    return
  del key
  warmup = ctx.optimization.warmup
  scheme, steps = ctx.get("warmup_scheme"), ctx.get("warmup_steps")
  if steps < 0:
    raise NascliError(f"FastNN key 'warmup_steps' must be >= 0, got {steps}")
  if scheme != "t2t":
    ctx.notes.append(f"warmup_scheme={scheme!r} is not 't2t': no warmup (as FastNN)")
    warmup.type = None
  elif steps == 0:
    warmup.type = None
  else:
    warmup.type = "t2t"
    warmup.t2t = optimization.T2tWarmupConfig(warmup_steps=steps)
    lr = ctx.optimization.learning_rate
    if lr.type == "fastnn" and lr.fastnn.decay_type == "fixed":
      ctx.notes.append(f"warmup_steps={steps} has no effect: FastNN's fixed learning rate"
                       " ignores warmup")


def _set_fp16(ctx: _Context, key: str) -> None:
  fp16 = ctx.hparams[key]
  if fp16 and not ctx.has_gpu:
    ctx.notes.append("use_fp16=True needs a GPU: training in float32 on this CPU")
    fp16 = False
  dtype = "float16" if fp16 else "float32"
  _set_path(ctx, key, "runtime.mixed_precision_dtype", dtype)
  for split in ("train_data", "validation_data"):
    if "dtype" in getattr(ctx.config.task, split).__dict__:
      _set_path(ctx, key, f"task.{split}.dtype", dtype)


def _set_loss_scale(ctx: _Context, key: str) -> None:
  scale = ctx.hparams[key]
  if ctx.config.runtime.mixed_precision_dtype != "float16":
    ctx.notes.append(f"loss_scale={scale} has no effect without float16 training")
    return
  _set_path(ctx, key, "runtime.loss_scale", scale)
  if scale == 1.0:
    ctx.notes.append("loss_scale=1.0 is a fixed scale of 1 (no scaling); leave it out for"
                     " dynamic loss scaling")


def _set_worker_hosts(ctx: _Context, key: str) -> None:
  hosts = ctx.hparams[key]
  _set_path(ctx, key, "runtime.worker_hosts", hosts)
  if hosts and len([h for h in hosts.split(",") if h.strip()]) > 1:
    _set_path(ctx, key, "runtime.distribution_strategy", "multi_worker_mirrored")
    ctx.notes.append("worker_hosts lists several hosts: distribution strategy"
                     " multi_worker_mirrored")


_TF2 = "TF2 distribution strategies and Model Garden's trainer replace it"
_AUTOTUNE = "tf.data AUTOTUNE sizes Model Garden's input pipeline"
_NO_STATS = "the TF2 trainer does not print per-variable statistics"

# FastNN key -> setter, applied in this order (only for keys present in the dict).
_SETTERS: dict[str, _Setter] = {
    **{k: _caller_handles for k in sorted(CALLER_KEYS)},
    "labels_offset": _set_labels_offset,
    "num_classes": _to("task.model.num_classes"),
    "batch_size": _set_batch_size,
    "shuffle_buffer_size": _to("task.train_data.shuffle_buffer_size"),
    "prefetch_buffer_size": _to("task.train_data.prefetch_buffer_size"),
    "datasets_use_caching": _set_caching,
    "num_parallel_batches": _no_effect(_AUTOTUNE),
    "num_preprocessing_threads": _no_effect(_AUTOTUNE),
    "preprocessing_name": _no_effect("preprocessing is the Model Garden task's parser"
                                     " (task.train_data aug_* fields)"),
    "weight_decay": _to("task.losses.l2_weight_decay"),
    "stop_at_step": _set_train_length,
    "num_epochs": _set_train_length,
    "log_loss_every_n_iters": _set_log_interval,
    "save_checkpoints_steps": _set_checkpoint_interval,
    "optimizer": _set_optimizer,
    **{k: _set_optimizer_param for k in sorted(_OPTIMIZER_PARAM_KEYS)},
    "max_gradient_norm": _set_max_gradient_norm,
    **{k: _set_learning_rate for k in _LR_KEYS},
    **{k: _set_warmup for k in _WARMUP_KEYS},
    "use_fp16": _set_fp16,
    "loss_scale": _set_loss_scale,
    "task_index": _to("runtime.task_index"),
    "worker_hosts": _set_worker_hosts,
    "job_name": _no_effect(_TF2),
    "enable_paisoar": _no_effect(_TF2),
    "protocol": _no_effect(_TF2),
    "hooks": _no_effect(_TF2),
    "profile_every_n_iters": _no_effect("use TensorBoard's profiler"),
    "profile_at_task": _no_effect("use TensorBoard's profiler"),
    "log_device_placement": _no_effect("use tf.debugging.set_log_device_placement"),
    "print_model_statistics": _no_effect(_NO_STATS),
    "log_trainable_vars_statistics": _no_effect(_NO_STATS),
}
assert set(_SETTERS) == set(FASTNN_KEYS), set(_SETTERS) ^ set(FASTNN_KEYS)


def apply_fastnn(config: cfg.ExperimentConfig,
                 hparams: dict[str, Any],
                 *,
                 has_gpu: bool,
                 num_replicas: int = 1,
                 steps_per_epoch: int | None = None) -> list[str]:
  """Writes FastNN hyperparameters onto a Model Garden experiment config, in place.

  The optimizer config is first upgraded to nascli's superset (`upgrade_optimization_config`)
  so the `fastnn`/`t2t` schedules and the adadelta/ftrl optimizers can be selected.

  Args:
    config: an unlocked image-classification or RetinaNet ExperimentConfig.
    hparams: {FastNN key: value}, e.g. from `parse_hparams_file`; only these keys are applied.
      Keys in `CALLER_KEYS` are left for the caller.
    has_gpu: whether training runs on GPUs (float16 is kept off on CPU).
    num_replicas: replicas in sync; FastNN's batch_size is per device.
    steps_per_epoch: steps per epoch, for num_epochs; when None it is derived from
      num_sample_per_epoch and the global batch size if the dict gives num_sample_per_epoch.

  Returns:
    Notes for the user: keys accepted without effect, values adjusted to fit Model Garden.

  Raises:
    NascliError: an unknown key, a badly typed value, or a value Model Garden cannot honour
      (labels_offset != 0, a key this experiment's config has no field for).
  """
  checked = {key: _check_value(key, value) for key, value in hparams.items()}
  optimization.upgrade_optimization_config(config)
  if steps_per_epoch is None and "num_sample_per_epoch" in checked:
    global_batch = (checked["batch_size"] * num_replicas if "batch_size" in checked
                    else config.task.train_data.global_batch_size)
    if global_batch:
      steps_per_epoch = checked["num_sample_per_epoch"] // global_batch or None
  ctx = _Context(config=config, hparams=checked, has_gpu=has_gpu,
                 num_replicas=max(1, num_replicas), steps_per_epoch=steps_per_epoch)
  for key, setter in _SETTERS.items():
    if key in checked:
      setter(ctx, key)
  # A new training length moves a FastNN schedule's S even when no learning-rate key is given.
  lr = ctx.optimization.learning_rate
  if lr.type == "fastnn" and any(k in checked for k in _LENGTH_KEYS):
    lr.fastnn.total_steps = config.trainer.train_steps
  return ctx.notes
