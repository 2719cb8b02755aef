"""Tunable SpineNet backbone: Model Garden's SpineNet with block specs a NAS search decoded.

The Vertex NAS `spinenet` space picks, per block after the 2 stem blocks, a level
(`level_base + level_offset`), a block_fn and two earlier blocks to merge (`input_offsets`,
indices into [stem0, stem1, block0, ...]). The choice reaches the trainer as the config string
`block_specs_json`, a JSON list of plain dicts in the space's order (intermediate blocks, then
output blocks), so a trial's params.yaml alone rebuilds its model. Scaling knobs
(filter_size_scale, resample_alpha, ...) are not searched and come from the config.
"""

from typing import Any

import tf_keras

from nascli.errors import NascliError
from official.modeling import hyperparams
from official.vision.modeling.backbones import spinenet
from tf_vision.modeling.backbones import blocks

layers = tf_keras.layers

PREFIX = 'backbone.tunable_spinenet'
FIELD = f'{PREFIX}.block_specs_json'
NUM_STEM_BLOCKS = 2
# Levels MG's SpineNet has filter sizes for, and the block types its `_block_group` builds.
LEVELS = tuple(sorted(spinenet.FILTER_SIZE_MAP))
BLOCK_FNS = ('residual', 'bottleneck')


def _int_pair(value: Any) -> tuple[int, int]:
  to_int = blocks.integer(0)
  if not isinstance(value, (list, tuple)) or len(value) != 2:
    raise ValueError(f'expected a list of 2 block indices, got {value!r}')
  try:
    return to_int(value[0]), to_int(value[1])
  except ValueError:
    raise ValueError(f'expected a list of 2 block indices >= 0, got {value!r}') from None


SPINENET_KEYS: dict[str, blocks.Converter] = {
    'level_base': blocks.integer(),
    'level_offset': blocks.integer(),
    'block_fn': blocks.one_of(BLOCK_FNS),
    'input_offsets': _int_pair,
    'is_output': blocks.boolean,
}


def decode_block_specs(block_specs_json: str | None, min_level: int, max_level: int,
                       field: str = FIELD) -> list[spinenet.BlockSpec]:
  """MG `BlockSpec`s of a searched architecture; SpineNet-49's when None.

  Checks what MG's SpineNet would otherwise fail on deep inside graph building: levels it has
  no filter size for, inputs that are not earlier blocks, two outputs at one level, and a level
  in [min_level, max_level] without an output block.
  """
  if block_specs_json is None:
    if (min_level, max_level) != (3, 7):
      raise NascliError(f'{PREFIX}: the default SpineNet-49 architecture (block_specs_json null)'
                        f' needs min_level 3 and max_level 7, got {min_level} and {max_level}')
    return spinenet.build_block_specs()
  specs = []
  output_levels = {}
  for i, b in enumerate(blocks.parse_block_specs_json(block_specs_json, field, SPINENET_KEYS)):
    where = f'{field}[{i}]'
    level = b['level_base'] + b['level_offset']
    if level not in LEVELS:
      raise NascliError(f'{where}: level_base + level_offset = {level} is not a SpineNet level '
                        f'({LEVELS[0]}..{LEVELS[-1]})')
    for offset in b['input_offsets']:
      if offset >= NUM_STEM_BLOCKS + i:
        raise NascliError(f'{where}.input_offsets: {offset} is not an earlier block (0..'
                          f'{NUM_STEM_BLOCKS + i - 1}; 0 and 1 are the stem blocks)')
    if b['is_output']:
      if level in output_levels:
        raise NascliError(f'{where}.is_output: a second output at level {level} (block '
                          f'{output_levels[level]} is one)')
      output_levels[level] = i
    specs.append(spinenet.BlockSpec(level, b['block_fn'], b['input_offsets'], b['is_output']))
  missing = [l for l in range(min_level, max_level + 1) if l not in output_levels]
  if missing:
    raise NascliError(f'{field}: no output block at level {missing[0]}; min_level..max_level '
                      f'{min_level}..{max_level} each need one (output levels: '
                      f'{sorted(output_levels)})')
  return specs


@tf_keras.utils.register_keras_serializable(package='Nascli')
class TunableSpineNet(spinenet.SpineNet):
  """MG's SpineNet built from `block_specs_json`, with every scaling knob from the config.

  Unlike MG's SpineNet, `get_config` carries the architecture and the input shape, so
  `from_config` rebuilds the same model (with an unknown width MG's SpineNet leaves out blocks
  no output uses).
  """

  def __init__(
      self,
      input_specs: layers.InputSpec = layers.InputSpec(shape=[None, None, None, 3]),
      block_specs_json: str | None = None,
      model_id: str = '49',
      min_level: int = 3,
      max_level: int = 7,
      endpoints_num_filters: int = 256,
      resample_alpha: float = 0.5,
      block_repeats: int = 1,
      filter_size_scale: float = 1.0,
      init_stochastic_depth_rate: float = 0.0,
      **kwargs):
    """Builds the network.

    Args:
      input_specs: Input spec; [batch, height, width, channels].
      block_specs_json: JSON list of block dicts (see `SPINENET_KEYS`), the stem blocks
        implied; None = SpineNet-49.
      model_id: A key of MG's `spinenet.SCALING_MAP`, only validated: its scaling is not
        applied (the fields below are).
      min_level: Lowest output level.
      max_level: Highest output level.
      endpoints_num_filters: Filters of every output endpoint.
      resample_alpha: Channel factor of the cross-scale resampling.
      block_repeats: Blocks per block group.
      filter_size_scale: Width multiplier of every block.
      init_stochastic_depth_rate: Stochastic depth rate of the last block (linear over blocks).
      **kwargs: MG SpineNet's other arguments (activation, norm and regularizer settings).
    """
    if str(model_id) not in spinenet.SCALING_MAP:
      raise NascliError(f'{PREFIX}.model_id {model_id!r} is not one of '
                        f'{", ".join(spinenet.SCALING_MAP)}')
    checks = (
        ('endpoints_num_filters', endpoints_num_filters, endpoints_num_filters >= 1, '>= 1'),
        ('block_repeats', block_repeats, block_repeats >= 1, '>= 1'),
        ('filter_size_scale', filter_size_scale, filter_size_scale > 0, '> 0'),
        ('resample_alpha', resample_alpha, resample_alpha > 0, '> 0'),
        ('init_stochastic_depth_rate', init_stochastic_depth_rate,
         0 <= init_stochastic_depth_rate < 1, 'in [0, 1)'),
        ('max_level', max_level, min_level <= max_level, f'>= min_level ({min_level})'),
    )
    for name, value, ok, expected in checks:
      if not ok:
        raise NascliError(f'{PREFIX}.{name} must be {expected}, got {value}')
    block_specs = decode_block_specs(block_specs_json, min_level, max_level)
    self._block_specs_json = block_specs_json
    self._model_id = str(model_id)
    super().__init__(
        input_specs=input_specs, min_level=min_level, max_level=max_level,
        block_specs=block_specs, endpoints_num_filters=endpoints_num_filters,
        resample_alpha=resample_alpha, block_repeats=block_repeats,
        filter_size_scale=filter_size_scale,
        init_stochastic_depth_rate=init_stochastic_depth_rate, **kwargs)

  def get_config(self) -> dict[str, Any]:
    return dict(super().get_config(), block_specs_json=self._block_specs_json,
                model_id=self._model_id, input_shape=list(self._input_specs.shape))

  @classmethod
  def from_config(cls, config: dict[str, Any], custom_objects=None) -> 'TunableSpineNet':
    config = dict(config)
    shape = config.pop('input_shape', None)
    if shape is not None:
      config['input_specs'] = layers.InputSpec(shape=shape)
    return cls(**config)


@blocks.register_backbone_builder('tunable_spinenet')
def build_tunable_spinenet(input_specs: layers.InputSpec, config: hyperparams.Config,
                           conv_bn: dict[str, Any]) -> tf_keras.Model:
  """Builds a TunableSpineNet from a `Backbone` one-of config with `type: tunable_spinenet`."""
  # The config's fields are the architecture arguments: block_specs_json, model_id, min_level,
  # max_level, endpoints_num_filters, resample_alpha, block_repeats, filter_size_scale,
  # init_stochastic_depth_rate.
  return TunableSpineNet(input_specs=input_specs, **config.as_dict(), **conv_bn)
