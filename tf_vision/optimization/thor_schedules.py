"""THOR's learning-rate and damping schedules (MindSpore resnet_thor train.py), as Keras schedules.

See shared/reference/fastnn_thor.md §B.6/§B.7. With e = (step + 1) / steps_per_epoch:

  learning rate  lr_init * (1 - e / lr_end_epoch) ** lr_decay, halved once for every epoch of
                 `halving_epochs` that e has reached (MindSpore: 39 and 40); 0 from lr_end_epoch on
                 (MindSpore's per-step array ends there).
  damping        damping_init * damping_decay ** (e / 10): a factor damping_decay every 10 epochs,
                 continuously. The Thor optimizer reads it only at refresh steps.

Both are computed in float64 and cast to float32, as MindSpore builds its per-step numpy arrays,
so the values match its arrays to float32 precision. `ThorPolynomial` is registered in Model
Garden's LR table as `thor_lr` (config: `tf_vision.configs.optimization.ThorLrConfig`).
"""

from typing import Any, Mapping, Sequence

import tensorflow as tf
import tf_keras

from official.modeling.optimization import optimizer_factory
from tf_vision.optimization import schedules


def _epoch(step, steps_per_epoch: int) -> tf.Tensor:
  """MindSpore's e = (step + 1) / steps_per_epoch, in float64."""
  return (tf.cast(step, tf.float64) + 1.0) / float(steps_per_epoch)


@tf_keras.utils.register_keras_serializable(package="nascli")
class ThorPolynomial(tf_keras.optimizers.schedules.LearningRateSchedule):
  """THOR's polynomial learning rate with the late halvings (MindSpore `get_model_lr`)."""

  def __init__(self,
               lr_init: float = 0.05672,
               lr_decay: float = 4.9687,
               lr_end_epoch: float = 50,
               steps_per_epoch: int = 5004,
               halving_epochs: Sequence[float] = (39, 40),
               name: str = "ThorPolynomial"):
    """Checks the settings.

    Args:
      lr_init: rate at step -1 (the curve's start).
      lr_decay: power of the polynomial.
      lr_end_epoch: epoch where the polynomial reaches 0.
      steps_per_epoch: steps in one epoch (global batches).
      halving_epochs: the rate is halved from each of these epochs on (MindSpore: 39, 40).
      name: name of the schedule.

    Raises:
      ValueError: steps_per_epoch or lr_end_epoch not positive.
    """
    super().__init__()
    if steps_per_epoch <= 0:
      raise ValueError(f"steps_per_epoch must be > 0, got {steps_per_epoch}")
    if lr_end_epoch <= 0:
      raise ValueError(f"lr_end_epoch must be > 0, got {lr_end_epoch}")
    self.lr_init = float(lr_init)
    self.lr_decay = float(lr_decay)
    self.lr_end_epoch = float(lr_end_epoch)
    self.steps_per_epoch = int(steps_per_epoch)
    self.halving_epochs = tuple(float(e) for e in halving_epochs)
    self.name = name

  def __call__(self, step):
    with tf.name_scope(self.name):
      e = _epoch(step, self.steps_per_epoch)
      base = tf.maximum(1.0 - e / self.lr_end_epoch, 0.0)
      lr = self.lr_init * tf.pow(base, self.lr_decay)
      for halving in self.halving_epochs:
        lr = tf.where(e >= halving, lr * 0.5, lr)
      return tf.cast(lr, tf.float32)

  def get_config(self) -> Mapping[str, Any]:
    return {"lr_init": self.lr_init, "lr_decay": self.lr_decay,
            "lr_end_epoch": self.lr_end_epoch, "steps_per_epoch": self.steps_per_epoch,
            "halving_epochs": list(self.halving_epochs), "name": self.name}


@tf_keras.utils.register_keras_serializable(package="nascli")
class ThorDamping(tf_keras.optimizers.schedules.LearningRateSchedule):
  """THOR's damping lambda(step) = damping_init * damping_decay ** (epoch / 10)."""

  def __init__(self,
               damping_init: float = 0.03,
               damping_decay: float = 0.87,
               steps_per_epoch: int = 5004,
               name: str = "ThorDamping"):
    """Checks the settings.

    Args:
      damping_init: damping at the start.
      damping_decay: factor per 10 epochs.
      steps_per_epoch: steps in one epoch (global batches).
      name: name of the schedule.

    Raises:
      ValueError: steps_per_epoch not positive.
    """
    super().__init__()
    if steps_per_epoch <= 0:
      raise ValueError(f"steps_per_epoch must be > 0, got {steps_per_epoch}")
    self.damping_init = float(damping_init)
    self.damping_decay = float(damping_decay)
    self.steps_per_epoch = int(steps_per_epoch)
    self.name = name

  def __call__(self, step):
    with tf.name_scope(self.name):
      e = _epoch(step, self.steps_per_epoch)
      return tf.cast(self.damping_init * tf.pow(tf.constant(self.damping_decay, tf.float64),
                                                e / 10.0), tf.float32)

  def get_config(self) -> Mapping[str, Any]:
    return {"damping_init": self.damping_init, "damping_decay": self.damping_decay,
            "steps_per_epoch": self.steps_per_epoch, "name": self.name}


schedules.register_schedule(optimizer_factory.LR_CLS, "thor_lr", ThorPolynomial)
