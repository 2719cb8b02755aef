"""The `mnasnet` search space of Vertex AI NAS (reference `mobilenet_v2`), in pyglove.

Same structure, candidate lists and order as Vertex's `tunable_mnasnet_search_space.py`, so its
decision keys (`blocks[i].num_repeats`, ...) and `nas_params_str` values are interchangeable with
what Vertex AI NAS sends: 7 block groups x 6 one-of decisions = 42, about 9.75e15 points.
pyglove is imported when the space is built: the registration is read by flag checks that must
not load it.
"""

import itertools
import re
from typing import Any, Mapping, NamedTuple, Sequence

from tf_vision.search_spaces import cost_features
from tf_vision.search_spaces import registry

MOBILENET_V2_NUM_REPEATS = (1, 2, 3, 4, 3, 3, 1)
MOBILENET_V2_OUTPUT_FILTERS = (16, 24, 32, 64, 96, 160, 320)
# Present in Vertex's function but unused by its CLI; kept for `reference='mnasnet_a1'`.
MNASNET_A1_NUM_REPEATS = (1, 2, 3, 4, 2, 3, 1)
MNASNET_A1_OUTPUT_FILTERS = (16, 24, 40, 80, 112, 160, 320)
_REFERENCES = {
    'mobilenet_v2': (MOBILENET_V2_NUM_REPEATS, MOBILENET_V2_OUTPUT_FILTERS),
    'mnasnet_a1': (MNASNET_A1_NUM_REPEATS, MNASNET_A1_OUTPUT_FILTERS),
}

# Decision order inside one block: it fixes the key order of nas_params_str.
BLOCK_FIELDS = ('num_repeats', 'block_fn', 'expand_ratio', 'kernel_size', 'se_ratio',
                'output_filters')


def _block_space(repeats: int, filters: int) -> Any:
  """One block group; candidate 0 of num_repeats is the reference, as in Vertex."""
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  return pg.Dict(
      num_repeats=pg.oneof([repeats, repeats - 1, repeats + 1] if repeats > 1 else [1, 2]),
      block_fn=pg.oneof(['conv', 'mbconv']),
      expand_ratio=pg.oneof([1, 3, 6]),
      kernel_size=pg.oneof([3, 5]),
      se_ratio=pg.oneof([0.0, 0.25]),
      output_filters=pg.oneof([int(filters * 0.75), filters, int(filters * 1.25)]))


def block_specs(point: Any) -> list[dict[str, Any]]:
  """The 7 block groups of a chosen point as plain dicts, Vertex's `TunableBlockSpec` fields.

  Args:
    point: A DNA of the space, or the space materialized with one (`{'blocks': [...]}`).

  Returns:
    `[{num_repeats, block_fn, expand_ratio, kernel_size, se_ratio, output_filters}] * 7`, in
    block order; for `conv` blocks expand_ratio and se_ratio are carried but unused (as in
    Vertex, they are redundant encodings).
  """
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  if isinstance(point, pg.DNA):
    point = pg.materialize(mnasnet_search_space(), point)
  return [{field: block[field] for field in BLOCK_FIELDS} for block in point['blocks']]


@registry.register_search_space(
    'mnasnet', block_specs=block_specs,
    binding=registry.ModelBinding(model='classification',
                                  experiment='nas_classification_tunable_mnasnet',
                                  backbone_type='tunable_mnasnet', metric='accuracy'),
    defaults=registry.EmbeddedDefault('digits', {'image_size': 32},
                                      'fast_nas_classification_search_for_testing.yaml'))
def mnasnet_search_space(reference: str = 'mobilenet_v2') -> Any:
  """The MnasNet space: `pg.Dict(blocks=[7 x pg.Dict of 6 one-ofs])`.

  Vertex wraps the same list in a `pg.functor` argument named `blocks`; the decision keys are the
  same (`blocks[3].kernel_size`).

  Args:
    reference: 'mobilenet_v2' (the registered space) or 'mnasnet_a1'.

  Returns:
    A fresh pyglove hyper-value.
  """
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  try:
    repeats, filters = _REFERENCES[reference]
  except KeyError:
    raise ValueError(f'reference must be one of {sorted(_REFERENCES)}, got {reference!r}'
                     ) from None
  return pg.Dict(blocks=pg.List([_block_space(r, o) for r, o in zip(repeats, filters)]))



# Fixed by the backbone (tf_vision/modeling/backbones/tunable_mnasnet.py, mnasnet.py): each
# group's stride, the stem's width and stride, and channel rounding to multiples of 8.
_GROUP_STRIDES = (1, 2, 2, 2, 1, 2, 1)
_STEM_FILTERS, _DIVISOR = 32, 8
_LEVELS = 5  # output resolutions after the stem: 1/2, 1/4, 1/8, 1/16, 1/32 of the input


def _round_filters(filters: float) -> int:
  """Model Garden's `nn_layers.round_filters` at width 1.0, divisor 8 (no TensorFlow here)."""
  rounded = max(_DIVISOR, int(filters + _DIVISOR / 2) // _DIVISOR * _DIVISOR)
  return int(rounded + _DIVISOR if rounded < 0.9 * filters else rounded)


class Layer(NamedTuple):
  """One block of a built model (one repeat of a group): what its latency depends on."""
  block_fn: str
  kernel_size: int
  expand_ratio: int  # 1 for a conv block (unused there)
  se_ratio: float  # 0.0 for a conv block (unused there)
  in_filters: int
  out_filters: int
  strides: int
  size: int  # the side of its input
  level: int  # its output resolution: 0 is 1/2 of the input, 4 is 1/32

  def key(self) -> str:
    """The layer's name in a latency lookup table: everything it is built from."""
    if self.block_fn == 'conv':
      return (f'conv k{self.kernel_size} in{self.in_filters} out{self.out_filters} '
              f's{self.strides} @{self.size}')
    return (f'mbconv k{self.kernel_size} e{self.expand_ratio} se{self.se_ratio:g} '
            f'in{self.in_filters} out{self.out_filters} s{self.strides} @{self.size}')


_KEY_RE = re.compile(r'^(conv|mbconv) k(\d+)(?: e(\d+) se([\d.]+))? in(\d+) out(\d+) s(\d) @(\d+)$')


def parse_layer(key: str) -> Layer:
  """The Layer a key names (`Layer.key`); ValueError naming the key otherwise."""
  match = _KEY_RE.match(key)
  if not match or (match.group(1) == 'mbconv') != (match.group(3) is not None):
    raise ValueError(f'{key!r} is not an mnasnet layer key')
  fn, k, e, se, cin, cout, s, size = match.groups()
  return Layer(fn, int(k), int(e or 1), float(se or 0.0), int(cin), int(cout), int(s),
               int(size), -1)


def _group_values(nas_params: Mapping[str, Any]) -> dict[int, dict[str, str]]:
  blocks: dict[int, dict[str, str]] = {}
  for key, value in nas_params.items():
    group, _, field = key.partition('.')
    blocks.setdefault(int(group[len('blocks['):-1]), {})[field] = cost_features.literal(value)
  return blocks


def _group_layers(group: int, b: Mapping[str, str], size: int, channels: int, level: int,
                  repeats: int) -> list[Layer]:
  """The layers of group `group` with choices `b`, from an input of side `size`."""
  out = []
  filters = _round_filters(int(b['output_filters']))
  conv = b['block_fn'] == 'conv'
  kernel = int(b['kernel_size'])
  expand = 1 if conv else int(float(b['expand_ratio']))
  se = 0.0 if conv else float(b['se_ratio'])
  for repeat in range(repeats):
    stride = _GROUP_STRIDES[group] if repeat == 0 else 1
    level = min(level + (stride == 2), _LEVELS - 1)
    out.append(Layer(b['block_fn'], kernel, expand, se, channels, filters, stride, size, level))
    size, channels = -(-size // stride), filters
  return out


def mnasnet_layers(nas_params: Mapping[str, Any], input_size: int) -> list[Layer]:
  """The blocks of the built model in order (the stem and head are the same for every
  architecture)."""
  blocks = _group_values(nas_params)
  size, channels, level = -(-input_size // 2), _STEM_FILTERS, 0
  out: list[Layer] = []
  for group in sorted(blocks):
    layers = _group_layers(group, blocks[group], size, channels, level,
                           int(blocks[group]['num_repeats']))
    out.extend(layers)
    last = layers[-1]
    size, channels, level = -(-last.size // last.strides), last.out_filters, last.level
  return out


@cost_features.register_layers('mnasnet')
def mnasnet_layer_keys(nas_params: Mapping[str, Any], input_size: int) -> list[str]:
  return [layer.key() for layer in mnasnet_layers(nas_params, input_size)]


@cost_features.register_all_layers('mnasnet')
def mnasnet_all_layer_keys(decisions: Mapping[str, Sequence[Any]], input_size: int) -> list[str]:
  """Every distinct layer key of the space's architectures, in a stable order.

  A group's layers depend on its own choices and on the previous group's output filters only
  (sides and strides are fixed), so the space's ~1e16 architectures have about a thousand
  distinct layers: each group's choices x its input filters are enumerated.
  """
  fields: dict[int, dict[str, list[str]]] = {}
  for key, literals in decisions.items():
    group, _, field = key.partition('.')
    fields.setdefault(int(group[len('blocks['):-1]), {})[field] = [
        cost_features.literal(v) for v in literals]
  keys: dict[str, None] = {}
  size, level = -(-input_size // 2), 0
  inputs = [str(_STEM_FILTERS)]
  for group in sorted(fields):
    f = fields[group]
    names = [n for n in BLOCK_FIELDS if n not in ('num_repeats', 'output_filters')]
    repeats = max(int(r) for r in f['num_repeats'])
    for choice in itertools.product(*(f[n] for n in names)):
      for out_filters in f['output_filters']:
        for channels in inputs:
          b = dict(zip(names, choice), output_filters=out_filters)
          layers = _group_layers(group, b, size, _round_filters(int(channels)), level, repeats)
          for layer in layers:
            keys.setdefault(layer.key())
    size = -(-size // _GROUP_STRIDES[group])
    level = min(level + (_GROUP_STRIDES[group] == 2), _LEVELS - 1)
    inputs = f['output_filters']
  return list(keys)


@cost_features.register_cost_features('mnasnet')
def mnasnet_cost_features(nas_params: Mapping[str, Any], input_size: int) -> dict[str, float]:
  """The blocks' multiply-adds by operation kind, in all and per output resolution (a kernel's
  speed per multiply-add depends on the tensor sizes it runs at), operation counts by kind (the
  fixed cost of each op, which dominates small inputs), and the tensors each kind reads and
  writes. The stem and head are the same for every architecture: the model's constant."""
  out: dict[str, float] = {}

  def add(name: str, value: float) -> None:
    out[name] = out.get(name, 0.0) + float(value)

  for name in ('conv3', 'conv5', 'pointwise', 'depthwise3', 'depthwise5'):
    add(f'mac_{name}', 0)
    for level in range(_LEVELS):
      add(f'mac_{name}_level{level}', 0)
  for name in ('ops_conv', 'ops_pointwise', 'ops_depthwise', 'se_blocks', 'residual_adds',
               'activations', 'pointwise_memory', 'depthwise_memory', 'se_activations',
               'residual_activations'):
    add(name, 0)
  for level in range(_LEVELS):
    add(f'expanded_activations_level{level}', 0)
  size, channels = -(-input_size // 2), _STEM_FILTERS
  for layer in mnasnet_layers(nas_params, input_size):
    size, channels, stride = layer.size, layer.in_filters, layer.strides
    filters, kernel, expand = layer.out_filters, layer.kernel_size, layer.expand_ratio
    out_size = -(-size // stride)

    def mac(name: str, value: float) -> None:
      add(f'mac_{name}', value)
      add(f'mac_{name}_level{layer.level}', value)  # pylint: disable=cell-var-from-loop

    if layer.block_fn == 'conv':
      mac(f'conv{kernel}', out_size**2 * kernel**2 * channels * filters)
      add('ops_conv', 1)
      add('activations', size**2 * channels + out_size**2 * filters)
    else:
      mid = channels * expand
      if expand > 1:
        mac('pointwise', size**2 * channels * mid)
        add('ops_pointwise', 1)
        add('pointwise_memory', size**2 * (channels + mid) + channels * mid)
        add('activations', size**2 * (channels + mid))
      mac(f'depthwise{kernel}', out_size**2 * kernel**2 * mid)
      mac('pointwise', out_size**2 * mid * filters)
      add('ops_depthwise', 1)
      add('ops_pointwise', 1)
      add('depthwise_memory', size**2 * mid + out_size**2 * mid)
      add('pointwise_memory', out_size**2 * (mid + filters) + mid * filters)
      add('activations', out_size**2 * (2 * mid + filters))
      add(f'expanded_activations_level{layer.level}', out_size**2 * mid)
      if layer.se_ratio > 0:
        add('se_blocks', 1)
        add('se_activations', out_size**2 * mid)
      if stride == 1 and channels == filters:
        add('residual_adds', 1)
        add('residual_activations', out_size**2 * filters)
    size, channels = out_size, filters
  add('head_inputs', size**2 * channels)  # the fixed-width 1x1 head conv reads these
  return out
