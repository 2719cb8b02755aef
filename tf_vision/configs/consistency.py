"""Model Garden's trainer invariants, checked when the config is built rather than at the trainer.

Orbit, Model Garden's trainer and its tasks check these values only once training starts (the
summary interval against steps_per_loop in `orbit.Controller`, the per-replica batch in the input
pipeline, the feature-map sizes when the detector is built, the step schedule when the optimizer
is built): after the model dir is written and TensorFlow has spent a minute building, with
their own words and no hint of which key to change. Here each invariant is one small function,
registered with `@invariant`, that returns the refusal message (or None).

What may be fixed and what is refused: a value the user's own sources did not set (those are
--config_file, --params_override, FastNN hparams and command-line options: `Context.given`) is
adjusted silently when an obvious fix exists, e.g. an interval that came from the experiment's
defaults is rounded up to a multiple of a steps_per_loop the user chose. A contradiction between
values the user wrote is refused, naming the keys and values that would work.

`@schedule_warning` functions are softer: a schedule that trains, but makes no sense for the data
gets one warning line each. `@absurd_schedule` ones are warnings about values that are absurd
for the data: more than MAX_SENSIBLE_EPOCHS epochs, a batch larger than the training set, a warmup
longer than the run, an evaluation that sees no batch (drop_remainder on a validation set smaller
than its batch). When the user wrote none of the values such a warning is about, nobody chose
them (an experiment's defaults, a stage-2 recipe: e.g. an ImageNet schedule on the digits, 100
minutes of 8,700 epochs), so the run is refused in one line naming them, where they came from and
what to set; when the user wrote one of them, it is their schedule and only warns.
"""

import dataclasses
import json
import math
import os
from typing import Any, Callable, Mapping

from nascli.errors import NascliError
from official.core import config_definitions as cfg
from tf_vision.configs import stage2

# More epochs than this is a schedule meant for another data set (e.g. ImageNet's on digits).
MAX_SENSIBLE_EPOCHS = 1000
INTERVALS = ("trainer.summary_interval", "trainer.checkpoint_interval",
             "trainer.validation_interval")


@dataclasses.dataclass
class Context:
  """The config being checked and what is known about where its values came from."""
  params: cfg.ExperimentConfig
  # Dotted keys the user's sources set -> the source's name, e.g. "--params_override".
  explicit: Mapping[str, str] = dataclasses.field(default_factory=dict)
  num_replicas: int = 1
  replicas_from: str = "one replica"  # how num_replicas was derived, for messages
  train_records: int = 0  # 0: unknown
  validation_records: int = 0
  notes: list[str] = dataclasses.field(default_factory=list)
  # Keys a stage-2 recipe set -> its name; the other values nobody set come from `defaults`.
  carried: Mapping[str, str] = dataclasses.field(default_factory=dict)
  defaults: str = "the experiment's defaults"
  evaluates: bool = True  # the run evaluates (its mode is not `train`)

  def get(self, key: str) -> Any:
    node = self.params
    for part in key.split("."):
      node = getattr(node, part, None)
      if node is None:
        return None
    return node

  def set(self, key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    node = self.params
    for part in parents:
      node = getattr(node, part)
    setattr(node, leaf, value)

  def given(self, key: str) -> bool:
    return key in self.explicit

  def named(self, key: str) -> str:
    """`key value` plus the user's source that set it, for messages."""
    value = self.get(key)
    shown = json.dumps(list(value)) if isinstance(value, (list, tuple)) else value
    source = f" (from {self.explicit[key]})" if self.given(key) else ""
    return f"{key} {shown}{source}"


Check = Callable[[Context], str | None]
_INVARIANTS: list[Check] = []
_WARNINGS: list[Check] = []


def invariant(fn: Check) -> Check:
  """Registers a check: it may fix values the user did not set; it returns a refusal or None."""
  _INVARIANTS.append(fn)
  return fn


def schedule_warning(fn: Check) -> Check:
  """Registers a warning: it returns one line naming the numbers, or None."""
  _WARNINGS.append(fn)
  return fn


@dataclasses.dataclass(frozen=True)
class _Absurd:
  keys: tuple[str, ...]  # the values the warning is about (warning_keys may name more)
  fix: Callable[[Context], str]  # what to set instead, e.g. `trainer.train_steps=500`


_ABSURD: dict[Check, _Absurd] = {}


def absurd_schedule(*keys: str | Callable[[Context], tuple[str, ...]],
                    fix: Callable[[Context], str]) -> Callable[[Check], Check]:
  """Registers a warning about values absurd for the data: refused when the user set none of
  `keys` (a key may be a function of the context, e.g. the warmup type's field)."""
  def decorator(fn: Check) -> Check:
    _ABSURD[fn] = _Absurd(tuple(keys), fix)
    return schedule_warning(fn)
  return decorator


def warning_keys(fn: Check, ctx: Context) -> tuple[str, ...]:
  absurd = _ABSURD.get(fn)
  if absurd is None:
    return ()
  return tuple(k for key in absurd.keys for k in ((key,) if isinstance(key, str) else key(ctx)))


def refuse_absurd_schedules(ctx: Context) -> list[str]:
  """The schedule warnings; raises a one-line NascliError for the first absurd one about values
  the user wrote none of (see the module docstring)."""
  messages = []
  for fn in _WARNINGS:
    message = fn(ctx)
    if not message:
      continue
    keys = warning_keys(fn, ctx)
    if keys and not any(ctx.given(k) for k in keys):
      origins = list(dict.fromkeys(ctx.carried.get(k, ctx.defaults) for k in keys))
      raise NascliError(
          f"invalid config: {message.rstrip('?')}; {', '.join(keys)} came from {' and '.join(origins)},"
          f" not from you: set {_ABSURD[fn].fix(ctx)} with --params_override or a"
          " --config_file")
    messages.append(message)
  return messages


def check(ctx: Context) -> None:
  """Applies the silent fixes; raises a one-line NascliError for the first contradiction."""
  for fn in _INVARIANTS:
    message = fn(ctx)
    if message:
      raise NascliError(f"invalid config: {message}")


def warnings(ctx: Context) -> list[str]:
  """Every schedule warning's line, none refused."""
  return [message for fn in _WARNINGS if (message := fn(ctx))]


def _round_up(value: int, multiple: int) -> int:
  return max(multiple, -(-value // multiple) * multiple)


def _largest_divisor_at_most(value: int, limit: int) -> int:
  for d in range(min(value, limit), 0, -1):
    if value % d == 0:
      return d
  return 1


# How many replicas train in sync, per runtime.distribution_strategy (see tf_vision/distribute.py).
_REPLICAS: dict[str, Callable[[cfg.RuntimeConfig, int], tuple[int, str]]] = {}


def register_replicas(strategy: str):
  def decorator(fn):
    _REPLICAS[strategy] = fn
    return fn
  return decorator


@register_replicas("one_device")
def _one_device(runtime: cfg.RuntimeConfig, gpus: int) -> tuple[int, str]:
  del runtime, gpus
  return 1, "one replica"


@register_replicas("mirrored")
def _mirrored(runtime: cfg.RuntimeConfig, gpus: int) -> tuple[int, str]:
  if runtime.num_gpus:
    return runtime.num_gpus, f"mirrored on runtime.num_gpus {runtime.num_gpus}"
  return max(1, gpus), f"mirrored on the {max(1, gpus)} device(s) of this machine"


@register_replicas("multi_worker_mirrored")
def _multi_worker(runtime: cfg.RuntimeConfig, gpus: int) -> tuple[int, str]:
  del runtime
  try:
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
  except ValueError:
    cluster = {}
  workers = max(1, len(cluster.get("worker", [])) + len(cluster.get("chief", [])))
  return workers * max(1, gpus), f"{workers} worker(s) of TF_CONFIG x {max(1, gpus)} device(s)"


def replicas(runtime: cfg.RuntimeConfig, gpus: int) -> tuple[int, str]:
  """(replicas in sync, how that was derived); one for a strategy this module does not know."""
  fn = _REPLICAS.get(runtime.distribution_strategy)
  return fn(runtime, gpus) if fn else (1, "one replica")


# ---- Invariants, in the order they are checked. ----


@invariant
def _train_steps_positive(ctx: Context) -> str | None:
  steps = ctx.get("trainer.train_steps")
  if isinstance(steps, int) and steps >= 1:
    return None
  batch = ctx.get("task.train_data.global_batch_size") or 0
  epoch = ctx.train_records // batch if ctx.train_records and batch else 0
  hint = f"{epoch} (one epoch)" if epoch else "1000"
  return (f"{ctx.named('trainer.train_steps')}: training needs at least one step; set"
          f" trainer.train_steps={hint}")


@invariant
def _steps_per_loop_positive(ctx: Context) -> str | None:
  loop = ctx.get("trainer.steps_per_loop")
  if isinstance(loop, int) and loop >= 1:
    return None
  summary = ctx.get("trainer.summary_interval")
  hint = summary if isinstance(summary, int) and summary > 0 else 100
  return (f"{ctx.named('trainer.steps_per_loop')}: Orbit runs at least one step per loop; set"
          f" trainer.steps_per_loop={hint}")


@invariant
def _steps_per_loop_divides_given_intervals(ctx: Context) -> str | None:
  """A steps_per_loop the user did not set is lowered to divide the intervals they did set."""
  if ctx.given("trainer.steps_per_loop"):
    return None
  loop = ctx.get("trainer.steps_per_loop")
  given = [v for k in INTERVALS if ctx.given(k) and isinstance(v := ctx.get(k), int) and v > 0]
  if given and any(v % loop for v in given):
    ctx.set("trainer.steps_per_loop", _largest_divisor_at_most(math.gcd(*given), loop))
  return None


def _multiple_of_steps_per_loop(key: str, why: str) -> Check:
  def _check(ctx: Context) -> str | None:
    value, loop = ctx.get(key), ctx.get("trainer.steps_per_loop")
    if not isinstance(value, int) or value <= 0 or value % loop == 0:
      return None
    fixed = _round_up(value, loop)
    if not ctx.given(key):
      ctx.set(key, fixed)
      return None
    return (f"{ctx.named(key)} is not a multiple of {ctx.named('trainer.steps_per_loop')}:"
            f" {why}; set {key}={fixed} or trainer.steps_per_loop="
            f"{_largest_divisor_at_most(value, loop)}")
  _check.__name__ = f"_{key.rpartition('.')[2]}_is_a_multiple_of_steps_per_loop"
  return invariant(_check)


@invariant
def _summary_interval_positive(ctx: Context) -> str | None:
  value = ctx.get("trainer.summary_interval")
  if value is None or value > 0:
    return None
  loop = ctx.get("trainer.steps_per_loop")
  if not ctx.given("trainer.summary_interval"):
    ctx.set("trainer.summary_interval", loop)
    return None
  return (f"{ctx.named('trainer.summary_interval')}: Orbit needs a positive summary interval;"
          f" set trainer.summary_interval={loop}")


_multiple_of_steps_per_loop("trainer.summary_interval",
                            "Orbit writes training summaries only at the end of a loop")
_multiple_of_steps_per_loop("trainer.checkpoint_interval",
                            "checkpoints are saved only at the end of a loop")
_multiple_of_steps_per_loop("trainer.validation_interval",
                            "evaluations cut the training loops at these steps")


@invariant
def _validation_interval_not_negative(ctx: Context) -> str | None:
  value = ctx.get("trainer.validation_interval")
  if value is None or value >= 0:
    return None
  return (f"{ctx.named('trainer.validation_interval')}: a negative interval never advances"
          f" training; set trainer.validation_interval={ctx.get('trainer.train_steps')}")


@invariant
def _validation_steps(ctx: Context) -> str | None:
  value = ctx.get("trainer.validation_steps")
  if value is None or value > 0 or value == -1:
    return None
  return (f"{ctx.named('trainer.validation_steps')}: Orbit evaluates a positive number of"
          " batches, or -1 for the whole validation set; set trainer.validation_steps=-1")


def _batch_fits_replicas(split: str) -> Check:
  key = f"task.{split}.global_batch_size"

  def _check(ctx: Context) -> str | None:
    batch, n = ctx.get(key), ctx.num_replicas
    if batch is None or (batch >= 1 and batch % n == 0):
      return None
    fixed = _round_up(max(1, batch), n)
    if not ctx.given(key) and batch >= 1:
      ctx.set(key, fixed)
      ctx.notes.append(f"{key} {batch} -> {fixed}: a multiple of the {n} replicas")
      return None
    if batch < 1:
      return f"{ctx.named(key)}: a batch holds at least one example; set {key}={fixed}"
    lower = f" or {batch // n * n}" if batch // n else ""
    return (f"{ctx.named(key)} is not divisible by the {n} replicas ({ctx.replicas_from}):"
            f" every replica gets an equal share; set {key}={fixed}{lower}")
  _check.__name__ = f"_{split}_batch_fits_replicas"
  return invariant(_check)


_batch_fits_replicas("train_data")
_batch_fits_replicas("validation_data")


@invariant
def _detection_levels(ctx: Context) -> str | None:
  model = ctx.params.task.model
  low, high = getattr(model, "min_level", None), getattr(model, "max_level", None)
  if low is None or high is None or low <= high:
    return None
  return (f"{ctx.named('task.model.min_level')} is above {ctx.named('task.model.max_level')};"
          f" set task.model.max_level={low}")


@invariant
def _detection_input_size(ctx: Context) -> str | None:
  """Feature maps halve per level: each side must divide by 2**max_level (SpineNet, FPN)."""
  model = ctx.params.task.model
  high, size = getattr(model, "max_level", None), getattr(model, "input_size", None)
  if high is None or not size or len(size) < 2:
    return None
  stride = 2 ** high
  if all(side % stride == 0 for side in size[:2]):
    return None
  fixed = [_round_up(side, stride) for side in size[:2]] + list(size[2:])
  if not ctx.given("task.model.input_size") and not ctx.given("task.model.max_level"):
    ctx.set("task.model.input_size", fixed)
    return None
  return (f"{ctx.named('task.model.input_size')} does not divide by {stride},"
          f" 2**{ctx.named('task.model.max_level')}: the detector's feature maps halve at each"
          f" level; set task.model.input_size={json.dumps(fixed)}")


@invariant
def _stepwise_schedule_lengths(ctx: Context) -> str | None:
  lr = ctx.params.trainer.optimizer_config.learning_rate
  if lr.type != "stepwise":
    return None
  boundaries, values = list(lr.stepwise.boundaries or []), list(lr.stepwise.values or [])
  if len(values) == len(boundaries) + 1:
    return None
  key = "trainer.optimizer_config.learning_rate.stepwise"
  return (f"{ctx.named(key + '.boundaries')} and {ctx.named(key + '.values')}: a step schedule"
          f" has one value more than boundaries; give {len(boundaries) + 1} values or"
          f" {max(0, len(values) - 1)} boundaries")


@invariant
def _init_checkpoint_modules(ctx: Context) -> str | None:
  """What Model Garden's tasks accept in initialize() (classification: all or backbone)."""
  task = ctx.params.task
  modules = getattr(task, "init_checkpoint_modules", None)
  if not getattr(task, "init_checkpoint", None) or modules is None:
    return None
  names = modules if isinstance(modules, str) else ",".join(modules)
  if hasattr(task.model, "max_level"):  # detection: all, or any of backbone and decoder
    if names == "all" or "backbone" in names or "decoder" in names:
      return None
    allowed = "all, backbone, decoder or backbone,decoder"
  else:
    if names in ("all", "backbone"):
      return None
    allowed = "all or backbone"
  return (f"{ctx.named('task.init_checkpoint_modules')}: Model Garden initializes {allowed};"
          " set task.init_checkpoint_modules=backbone")


# ---- Warnings: the run works, but the schedule does not fit the data. ----


def _epochs(ctx: Context) -> float | None:
  batch = ctx.get("task.train_data.global_batch_size")
  if not ctx.train_records or not batch:
    return None
  return ctx.get("trainer.train_steps") * batch / ctx.train_records


def _fitted_schedule(ctx: Context) -> str:
  """STAGE2_EPOCHS epochs of the data at a batch that fits it (stage 2's sizing rule)."""
  batch = ctx.get("task.train_data.global_batch_size")
  steps, fitted = stage2.fit_schedule(ctx.train_records, batch)
  return (f"trainer.train_steps={steps}"
          + (f",task.train_data.global_batch_size={fitted}" if fitted != batch else "")
          + f" ({stage2.STAGE2_EPOCHS} epochs)")


_TRAIN_SCHEDULE = ("trainer.train_steps", "task.train_data.global_batch_size")


@absurd_schedule("task.train_data.global_batch_size", fix=_fitted_schedule)
def _batch_larger_than_training_set(ctx: Context) -> str | None:
  batch = ctx.get("task.train_data.global_batch_size")
  if not ctx.train_records or batch <= ctx.train_records:
    return None
  return (f"task.train_data.global_batch_size {batch} is larger than the training set"
          f" ({ctx.train_records} records): an epoch is shorter than one step")


@absurd_schedule(*_TRAIN_SCHEDULE, fix=_fitted_schedule)
def _too_many_epochs(ctx: Context) -> str | None:
  epochs = _epochs(ctx)
  if epochs is None or epochs <= MAX_SENSIBLE_EPOCHS:
    return None
  return (f"trainer.train_steps {ctx.get('trainer.train_steps')} at global batch"
          f" {ctx.get('task.train_data.global_batch_size')} is {epochs:.0f} epochs of the"
          f" {ctx.train_records} training records (more than {MAX_SENSIBLE_EPOCHS}): a schedule"
          " for a larger data set?")


@schedule_warning
def _fewer_steps_than_one_loop(ctx: Context) -> str | None:
  steps, loop = ctx.get("trainer.train_steps"), ctx.get("trainer.steps_per_loop")
  if steps >= loop:
    return None
  return (f"trainer.train_steps {steps} is fewer than trainer.steps_per_loop {loop}: the run is"
          f" one loop of {steps} steps")


def _warmup_key(ctx: Context) -> tuple[str, ...]:
  warmup = ctx.params.trainer.optimizer_config.warmup
  return (f"trainer.optimizer_config.warmup.{warmup.type}.warmup_steps",) if warmup.type else ()


@absurd_schedule(_warmup_key, "trainer.train_steps", fix=lambda ctx: (
    f"{_warmup_key(ctx)[0]}={max(1, ctx.get('trainer.train_steps') // 20)} (5% of the run)"))
def _warmup_longer_than_training(ctx: Context) -> str | None:
  warmup = ctx.params.trainer.optimizer_config.warmup
  branch = warmup.get() if warmup.type else None
  steps = getattr(branch, "warmup_steps", None) or 0
  if steps <= ctx.get("trainer.train_steps"):
    return None
  return (f"the {warmup.type} warmup ({steps} steps) is longer than trainer.train_steps"
          f" {ctx.get('trainer.train_steps')}: the learning rate never reaches its peak")


@absurd_schedule("task.validation_data.global_batch_size", "task.validation_data.drop_remainder",
                 fix=lambda ctx: (f"task.validation_data.global_batch_size="
                                  f"{ctx.validation_records} or"
                                  " task.validation_data.drop_remainder=false"))
def _no_validation_batch(ctx: Context) -> str | None:
  data = ctx.params.task.validation_data
  if not ctx.evaluates or not ctx.validation_records or not data.drop_remainder:
    return None
  if data.global_batch_size <= ctx.validation_records:
    return None
  return (f"task.validation_data.global_batch_size {data.global_batch_size} is larger than the"
          f" {ctx.validation_records} validation records and drop_remainder is on: evaluation"
          " sees no batch")
