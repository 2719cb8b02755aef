"""A small user space that registers its layers, for `build_latency_model --measure_layers`.

mnasnet-shaped (7 groups of fixed 8-32 filter blocks), with 5 two-way decisions in groups 1
and 2 (32 architectures): it names the layers those decisions change, lists every one of them,
and times them with the prebuilt mnasnet layer builder, as a user's space would (see
docs/latency.md, "Layer tables").
"""

import itertools
from typing import Any, Mapping, Sequence

import pyglove as pg

from tf_vision.search_spaces import cost_features
from tf_vision.search_spaces import mnasnet
from tf_vision.search_spaces import register_search_space
from tf_vision.serving import layer_latency

FILTERS = (8, 8, 16, 16, 24, 24, 32)


def _fixed(filters: int) -> dict[str, Any]:
  return {'num_repeats': 1, 'block_fn': 'conv', 'expand_ratio': 1, 'kernel_size': 3,
          'se_ratio': 0.0, 'output_filters': filters}


@register_search_space('layered_mnasnet', binding='mnasnet')
def layered_mnasnet() -> Any:
  blocks = [pg.Dict(_fixed(f)) for f in FILTERS]
  blocks[1] = pg.Dict(_fixed(8), kernel_size=pg.oneof([3, 5]), num_repeats=pg.oneof([1, 2]),
                      output_filters=pg.oneof([8, 16]))
  blocks[2] = pg.Dict(_fixed(16), kernel_size=pg.oneof([3, 5]),
                      block_fn=pg.oneof(['conv', 'mbconv']))
  return pg.Dict(blocks=pg.List(blocks))


@cost_features.register_layers('layered_mnasnet')
def layers(nas_params: Mapping[str, Any], input_size: int) -> list[str]:
  """The layers of groups 1 and 2 (the others are the same in every architecture)."""
  lit = {k: cost_features.literal(v) for k, v in nas_params.items()}
  size = -(-input_size // 2)  # the stem's stride; group 0 keeps the side
  one = mnasnet._group_layers(  # pylint: disable=protected-access
      1, {**{k: str(v) for k, v in _fixed(8).items()}, 'kernel_size': lit['blocks[1].kernel_size'],
          'output_filters': lit['blocks[1].output_filters']},
      size, 8, 0, int(lit['blocks[1].num_repeats']))
  two = mnasnet._group_layers(  # pylint: disable=protected-access
      2, {**{k: str(v) for k, v in _fixed(16).items()}, 'kernel_size': lit['blocks[2].kernel_size'],
          'block_fn': lit['blocks[2].block_fn']},
      -(-size // 2), one[-1].out_filters, 1, 1)
  return [layer.key() for layer in one + two]


@cost_features.register_all_layers('layered_mnasnet')
def all_layers(decisions: Mapping[str, Sequence[Any]], input_size: int) -> list[str]:
  keys: dict[str, None] = {}
  names = list(decisions)
  for choice in itertools.product(*(range(len(decisions[n])) for n in names)):
    point = {n: f'{i}/{len(decisions[n])} ({decisions[n][i]})' for n, i in zip(names, choice)}
    for key in layers(point, input_size):
      keys.setdefault(key)
  return list(keys)


layer_latency.register_layer_model('layered_mnasnet')(layer_latency.LAYER_MODELS['mnasnet'])
