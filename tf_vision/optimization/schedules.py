"""FastNN's learning-rate schedules, registered in Model Garden's OptimizerFactory tables.

Behaviour follows FastNN's utils/optimizer_utils.py (see shared/reference/fastnn_thor.md §A.2),
with base = learning_rate, W = warmup_steps, S = total_steps (FastNN's stop_at_step),
t = step, f = decay_factor:

  warmup (t2t)  t < W: lr_w = base * 0.01 ** ((W - t) / W); t >= W or W == 0: lr_w = base.
  schemes       luong234: start = int(2S/3), 4 decays; luong5: start = int(S/2), 5 decays;
                luong10: start = int(S/2), 10 decays; decay_steps = int((S - start) / n).
                '': start = S, no decay.
  exponential   t < start: lr_w; else lr_w * f ** floor((t - start) / decay_steps).
  polynomial    t < start: lr_w; else linear from lr_w to end_learning_rate over decay_steps,
                then flat at end_learning_rate.
  fixed         learning_rate, always (FastNN ignores warmup and scheme for it).

FastNN applies the decay to the warmed-up rate. Model Garden composes the other way round
(`WARMUP_CLS[...](after_warmup_lr_sched=decay)`), so `T2tWarmup`, when it wraps a
`FastnnDecay`, hands the warmed-up rate to `FastnnDecay.decay()`: that keeps FastNN's exact
values when warmup and decay overlap (polynomial is not multiplicative) and lets `fixed` ignore
the warmup. Around any other schedule it multiplies by the warmup factor.

Two deliberate departures where FastNN produces NaN: at t >= S with scheme '' (decay_steps 0)
the rate stays lr_w, and a luong scheme whose S is too small for one step per decay
(decay_steps would be 0) decays every step instead.
"""

from typing import Any, Mapping

import tensorflow as tf
import tf_keras

from official.modeling.optimization import optimizer_factory
from tf_vision.configs.fastnn_keys import DECAY_SCHEMES, DECAY_TYPES  # noqa: F401

# scheme -> (start_decay_step(S), number of decays); '' means "start at S, never decay".
_LUONG_SCHEMES = {
    "luong234": (lambda s: int(s * 2 / 3), 4),
    "luong5": (lambda s: int(s / 2), 5),
    "luong10": (lambda s: int(s / 2), 10),
}
assert set(DECAY_SCHEMES) == {""} | set(_LUONG_SCHEMES)

_WARMUP_START_FRACTION = 0.01  # t2t starts 100x below the base rate.


def decay_info(decay_scheme: str, total_steps: int) -> tuple[int, int]:
  """(start_decay_step, decay_steps) of a FastNN decay scheme; decay_steps 0 = never decays.

  Args:
    decay_scheme: '', 'luong234', 'luong5' or 'luong10'.
    total_steps: S, the training length.

  Returns:
    The step where decay starts and the number of steps between decays.

  Raises:
    ValueError: unknown scheme, or a luong scheme without a positive total_steps.
  """
  if not decay_scheme:
    return int(total_steps), 0
  if decay_scheme not in _LUONG_SCHEMES:
    raise ValueError(f"unknown decay scheme {decay_scheme!r}; known: "
                     f"{', '.join(repr(s) for s in DECAY_SCHEMES)}")
  if total_steps <= 0:
    raise ValueError(f"decay scheme {decay_scheme!r} needs total_steps (stop_at_step) > 0, "
                     f"got {total_steps}")
  start_fn, times = _LUONG_SCHEMES[decay_scheme]
  start = start_fn(total_steps)
  return start, max(1, int((total_steps - start) / times))


@tf_keras.utils.register_keras_serializable(package="nascli")
class FastnnDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
  """FastNN's `learning_rate_decay_type` x `decay_scheme` schedule (no warmup; see T2tWarmup)."""

  def __init__(self,
               learning_rate: float = 0.01,
               total_steps: int = 0,
               decay_type: str = "exponential",
               decay_scheme: str = "",
               decay_factor: float = 0.94,
               end_learning_rate: float = 0.0001,
               name: str = "FastnnDecay"):
    """Validates the settings and computes where decay starts.

    Args:
      learning_rate: base learning rate.
      total_steps: S (FastNN's stop_at_step) the schemes are relative to.
      decay_type: 'fixed', 'exponential' or 'polynomial'.
      decay_scheme: '', 'luong234', 'luong5' or 'luong10'.
      decay_factor: f, exponential decay factor per decay step.
      end_learning_rate: where polynomial decay ends.
      name: name of the schedule.

    Raises:
      ValueError: unknown decay type or scheme (the message names it).
    """
    super().__init__()
    if decay_type not in DECAY_TYPES:
      raise ValueError(f"unknown learning-rate decay type {decay_type!r}; known: "
                       f"{', '.join(DECAY_TYPES)}")
    self.learning_rate = float(learning_rate)
    self.total_steps = int(total_steps)
    self.decay_type = decay_type
    self.decay_scheme = decay_scheme or ""
    self.decay_factor = float(decay_factor)
    self.end_learning_rate = float(end_learning_rate)
    self.name = name
    self.start_decay_step, self.decay_steps = decay_info(self.decay_scheme, self.total_steps)

  def decay(self, step, warmed_up_lr) -> tf.Tensor:
    """The rate at `step` given FastNN's warmed-up rate lr_w (FastNN decays lr_w, not base)."""
    with tf.name_scope(self.name):
      if self.decay_type == "fixed":
        return tf.constant(self.learning_rate, tf.float32)
      lr_w = tf.cast(warmed_up_lr, tf.float32)
      if self.decay_steps == 0:
        return lr_w
      t = tf.cast(step, tf.float32)
      since = tf.maximum(t - self.start_decay_step, 0.0)
      if self.decay_type == "exponential":
        decayed = lr_w * tf.pow(self.decay_factor, tf.floor(since / self.decay_steps))
      else:  # polynomial, power 1, no cycle: linear ramp, then flat.
        fraction = tf.minimum(since, float(self.decay_steps)) / self.decay_steps
        decayed = (lr_w - self.end_learning_rate) * (1.0 - fraction) + self.end_learning_rate
      return tf.where(t < self.start_decay_step, lr_w, decayed)

  def __call__(self, step):
    return self.decay(step, self.learning_rate)

  def get_config(self) -> Mapping[str, Any]:
    return {
        "learning_rate": self.learning_rate,
        "total_steps": self.total_steps,
        "decay_type": self.decay_type,
        "decay_scheme": self.decay_scheme,
        "decay_factor": self.decay_factor,
        "end_learning_rate": self.end_learning_rate,
        "name": self.name,
    }


@tf_keras.utils.register_keras_serializable(package="nascli")
class T2tWarmup(tf_keras.optimizers.schedules.LearningRateSchedule):
  """Tensor2Tensor warmup: for t < W the rate is multiplied by 0.01 ** ((W - t) / W)."""

  def __init__(self,
               after_warmup_lr_sched: tf_keras.optimizers.schedules.LearningRateSchedule | float,
               warmup_steps: int = 0,
               name: str = "t2t"):
    """Wraps the schedule that applies after (and, multiplied, during) warmup.

    Args:
      after_warmup_lr_sched: a LearningRateSchedule or a constant rate (Model Garden passes the
        schedule built from the `learning_rate` one-of under this name).
      warmup_steps: W; 0 (FastNN's default) means no warmup.
      name: name of the schedule.

    Raises:
      ValueError: negative warmup_steps.
    """
    super().__init__()
    if warmup_steps < 0:
      raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
    self.after_warmup_lr_sched = after_warmup_lr_sched
    self.warmup_steps = int(warmup_steps)
    self.name = name

  def warmup_factor(self, step) -> tf.Tensor:
    """0.01 ** ((W - t) / W) for t < W, else 1."""
    if self.warmup_steps == 0:
      return tf.constant(1.0, tf.float32)
    remaining = tf.maximum(float(self.warmup_steps) - tf.cast(step, tf.float32), 0.0)
    return tf.pow(_WARMUP_START_FRACTION, remaining / self.warmup_steps)

  def __call__(self, step):
    with tf.name_scope(self.name):
      factor = self.warmup_factor(step)
      after = self.after_warmup_lr_sched
      if isinstance(after, FastnnDecay):
        return after.decay(step, after.learning_rate * factor)
      if isinstance(after, tf_keras.optimizers.schedules.LearningRateSchedule):
        return tf.cast(after(step), tf.float32) * factor
      return tf.constant(float(after), tf.float32) * factor

  def get_config(self) -> Mapping[str, Any]:
    after = self.after_warmup_lr_sched
    if isinstance(after, tf_keras.optimizers.schedules.LearningRateSchedule):
      after = tf_keras.optimizers.schedules.serialize(after)
    return {"after_warmup_lr_sched": after, "warmup_steps": self.warmup_steps,
            "name": self.name}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    if isinstance(config["after_warmup_lr_sched"], dict):
      config["after_warmup_lr_sched"] = tf_keras.optimizers.schedules.deserialize(
          config["after_warmup_lr_sched"])
    return cls(**config)


def register_schedule(table: dict, key: str, cls: type) -> None:
  """Registers `cls` under `key`; a re-import (same class name) replaces the old entry."""
  existing = table.get(key)
  if existing is not None and existing is not cls and (
      existing.__qualname__ != cls.__qualname__):
    raise ValueError(f"{key!r} is already registered to {existing!r}")
  table[key] = cls


register_schedule(optimizer_factory.LR_CLS, "fastnn", FastnnDecay)
register_schedule(optimizer_factory.WARMUP_CLS, "t2t", T2tWarmup)
