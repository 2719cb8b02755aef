"""Analytic cost features of a space's architectures, for latency models.

A latency model over one-hot decisions (TuNAS's) cannot see that a block's cost is the product
of its own choices and the channels the previous block hands it; a few hundred measurements
cannot fill a table of every combination either. A space that knows its own arithmetic
registers a function here, `features(nas_params, input_size) -> {name: value}` (multiply-adds
by operation kind, activation sizes, operation counts), and the `cost_features` predictor of
nascli/latency_model fits the per-device cost of each (nn-Meter's and HELP's lesson: FLOPs are
a strong baseline, and their parts weighted per device are stronger).

No TensorFlow, no pyglove: the search driver predicts from `nas_params` alone.
"""

import re
from typing import Any, Callable, Mapping

Features = Callable[[Mapping[str, Any], int], dict[str, float]]
_REGISTRY: dict[str, Features] = {}
_VALUE = re.compile(r'^\s*(\d+)\s*/\s*(\d+)\s*\((.*)\)\s*$')


def register_cost_features(space: str) -> Callable[[Features], Features]:
  """Decorator: `fn(nas_params, input_size)` gives the cost features of `space`'s models."""
  def register(fn: Features) -> Features:
    _REGISTRY[space] = fn
    return fn
  return register


def cost_features(space: str) -> Features | None:
  """The space's registered features function, None when it has none."""
  return _REGISTRY.get(space)


def literal(value: Any) -> str:
  """The candidate's literal of a Vertex value `i/n (literal)`, quotes stripped."""
  match = _VALUE.match(str(value))
  text = match.group(3) if match else str(value)
  return text.strip().strip('\'"')
