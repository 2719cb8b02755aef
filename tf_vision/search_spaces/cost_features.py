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
from typing import Any, Callable, Mapping, Sequence

Features = Callable[[Mapping[str, Any], int], dict[str, float]]
_REGISTRY: dict[str, Features] = {}
# (nas_params, input_size) -> the keys of the model's layers, in order (repeats repeated).
Layers = Callable[[Mapping[str, Any], int], list[str]]
# (decisions {path: [candidate literals]}, input_size) -> every distinct layer key of the space.
AllLayers = Callable[[Mapping[str, Sequence[Any]], int], list[str]]
_LAYERS: dict[str, Layers] = {}
_ALL_LAYERS: dict[str, AllLayers] = {}
_VALUE = re.compile(r'^\s*(\d+)\s*/\s*(\d+)\s*\((.*)\)\s*$')


def _register_in(table: dict[str, Callable], space: str) -> Callable[[Callable], Callable]:
  """A decorator that files its function under `space` in `table`."""
  def register(fn: Callable) -> Callable:
    table[space] = fn
    return fn
  return register


def register_cost_features(space: str) -> Callable[[Features], Features]:
  """Decorator: `fn(nas_params, input_size)` gives the cost features of `space`'s models."""
  return _register_in(_REGISTRY, space)


def cost_features(space: str) -> Features | None:
  """The space's registered features function, None when it has none."""
  return _REGISTRY.get(space)


def register_layers(space: str) -> Callable[[Layers], Layers]:
  """Decorator: `fn(nas_params, input_size)` names the layers of `space`'s models, one key per
  layer (everything its latency depends on), for the `layer_lookup` predictor's table of
  layers timed alone (nn-Meter's kernels, ProxylessNAS's lookup table)."""
  return _register_in(_LAYERS, space)


def register_all_layers(space: str) -> Callable[[AllLayers], AllLayers]:
  """Decorator: `fn(decisions, input_size)` lists every distinct layer key of `space`: what
  `build_latency_model --measure_layers` times, so that any architecture can be looked up."""
  return _register_in(_ALL_LAYERS, space)


def layers(space: str) -> Layers | None:
  return _LAYERS.get(space)


def all_layers(space: str) -> AllLayers | None:
  return _ALL_LAYERS.get(space)


def literal(value: Any) -> str:
  """The candidate's literal of a Vertex value `i/n (literal)`, quotes stripped."""
  match = _VALUE.match(str(value))
  text = match.group(3) if match else str(value)
  return text.strip().strip('\'"')
