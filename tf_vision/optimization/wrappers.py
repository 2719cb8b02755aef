"""Reaching through optimizer wrappers to the optimizer that owns the slot variables.

Model Garden may wrap the optimizer it builds in a LossScaleOptimizer (mixed precision) and
its ExponentialMovingAverage; THOR has to find itself inside them, and the trainer creates the
inner optimizer's slots before the training step is traced.
"""

from typing import Any

_MAX_DEPTH = 8


def unwrap(optimizer) -> tuple[Any, Any]:
  """(the innermost optimizer, the LossScaleOptimizer around it or None)."""
  loss_scaler = None
  for _ in range(_MAX_DEPTH):
    if hasattr(optimizer, "inner_optimizer") and hasattr(optimizer, "loss_scale"):
      loss_scaler = optimizer
      optimizer = optimizer.inner_optimizer
    elif getattr(optimizer, "_optimizer", None) is not None:  # Model Garden's EMA and similar
      optimizer = optimizer._optimizer  # pylint: disable=protected-access
    else:
      break
  return optimizer, loss_scaler


def create_slots(optimizer, var_list) -> None:
  """Creates the optimizer's step counter, hyperparameters and slots for `var_list` now.

  Left to the first apply_gradients, they are created while tf.function traces the training
  loop, which then traces it a second time without variable creation: creating them up front
  halves the tracing time of the first training loop. Call under the distribution strategy's
  scope. Idempotent: existing slots are kept (and a checkpoint restores into them).
  """
  inner, _ = unwrap(optimizer)
  if hasattr(inner, "_create_all_weights"):  # tf_keras legacy (OptimizerV2)
    inner._create_all_weights(list(var_list))  # pylint: disable=protected-access
  elif hasattr(inner, "build"):  # tf_keras' newer optimizers
    inner.build(list(var_list))
