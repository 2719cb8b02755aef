"""Tiny user search spaces for the tests: an 8-filter MnasNet with 2 decisions (4 points).

The two ways a `--search_space_module pkg.module.fn` can give its space (see
docs/commands/search_in_local.md, "Your own search space"):

- `tiny_mnasnet` is registered with the decorator: its own decisions and its own block specs
  function, trained as the prebuilt `mnasnet` space's architectures are (`binding='mnasnet'`:
  model, embedded digits and testing YAML);
- `mnasnet_shaped` is Vertex's kind, a plain function returning a space whose points have the
  `mnasnet` space's shape (`{'blocks': [7 x {num_repeats, block_fn, ...}]}`), so the prebuilt
  space's block specs function reads them.
"""

from typing import Any

import pyglove as pg

from tf_vision.search_spaces import register_search_space

# One 8-32 filter conv block per group: the tunable MnasNet takes 7 groups (strides fixed).
FILTERS = (8, 8, 16, 16, 24, 24, 32)


def _fixed(filters: int) -> dict[str, Any]:
  return {'num_repeats': 1, 'block_fn': 'conv', 'expand_ratio': 1, 'kernel_size': 3,
          'se_ratio': 0.0, 'output_filters': filters}


def block_specs(point: Any) -> list[dict[str, Any]]:
  """The 7 groups; group 1 takes the chosen kernel size and repeats."""
  specs = [_fixed(f) for f in FILTERS]
  specs[1].update(kernel_size=point['kernel_size'], num_repeats=point['num_repeats'])
  return specs


@register_search_space('tiny_mnasnet', block_specs=block_specs, binding='mnasnet')
def tiny_mnasnet() -> Any:
  return pg.Dict(kernel_size=pg.oneof([3, 5]), num_repeats=pg.oneof([1, 2]))


def mnasnet_shaped() -> Any:
  blocks = [pg.Dict(_fixed(f)) for f in FILTERS]
  blocks[1] = pg.Dict(_fixed(FILTERS[1]), kernel_size=pg.oneof([3, 5]),
                      num_repeats=pg.oneof([1, 2]))
  return pg.Dict(blocks=pg.List(blocks))
