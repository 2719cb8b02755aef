"""Tunable MnasNet backbone: a MnasNet built from an architecture a NAS search decoded.

The search space (Vertex NAS `mnasnet`) chooses, for each of 7 block groups, `num_repeats`,
`block_fn` ('conv' | 'mbconv'), `expand_ratio`, `kernel_size`, `se_ratio` and
`output_filters`; strides and which groups are endpoints stay fixed. The choice reaches the
trainer as the config string `block_specs_json` (a JSON list of 7 plain dicts), so a trial's
params.yaml alone rebuilds its model. The blocks are built by our fixed `MnasNet` class (its
`block_specs` hook); this class adds the searched head width (`endpoints_num_filters`) and
`features_only`.
"""

import math
from typing import Any

import tf_keras

from nascli.errors import NascliError
from official.modeling import hyperparams
from tf_vision.modeling.backbones import blocks
from tf_vision.modeling.backbones import mnasnet

layers = tf_keras.layers

# Fixed per group, as in MobileNetV2 and the Vertex search space: strides (running stride 2 after
# the stem) and whether the group's output is an endpoint (levels '2'..'5').
GROUP_STRIDES = (1, 2, 2, 2, 1, 2, 1)
GROUP_IS_OUTPUT = (False, True, True, False, True, False, True)
NUM_GROUPS = len(GROUP_STRIDES)
BLOCK_FNS = ('conv', 'mbconv')
FIELD = 'backbone.tunable_mnasnet.block_specs_json'

MNASNET_KEYS: dict[str, blocks.Converter] = {
    'num_repeats': blocks.integer(1),
    'block_fn': blocks.one_of(BLOCK_FNS),
    'expand_ratio': blocks.number_in(1.0, math.inf),
    'kernel_size': blocks.integer(1),
    'se_ratio': blocks.number_in(0.0, 1.0),
    'output_filters': blocks.integer(1),
}


def decode_block_specs(block_specs_json: str | None,
                       field: str = FIELD) -> tuple[mnasnet.BlockSpec, ...]:
  """The 7 `mnasnet.BlockSpec`s of a searched architecture; MnasNet-A1 when None.

  For 'conv' groups expand_ratio and se_ratio are kept but unused (a plain conv has neither).
  """
  if block_specs_json is None:
    return mnasnet.MNASNET_A1_BLOCK_SPECS
  specs = blocks.parse_block_specs_json(block_specs_json, field, MNASNET_KEYS, NUM_GROUPS)
  return tuple(
      mnasnet.BlockSpec(block_fn=b['block_fn'], num_repeats=b['num_repeats'],
                        kernel_size=b['kernel_size'], strides=stride,
                        expand_ratio=b['expand_ratio'], se_ratio=b['se_ratio'],
                        out_filters=b['output_filters'], is_output=is_output)
      for b, stride, is_output in zip(specs, GROUP_STRIDES, GROUP_IS_OUTPUT))


@tf_keras.utils.register_keras_serializable(package='Nascli')
class TunableMnasNet(blocks.FunctionalBackbone):
  """MnasNet from a decoded architecture: endpoints '2'..'5', plus the head conv as '6'.

  `output_specs` lists the feature levels only, so decoders (FPN) never see the head conv.
  """

  def __init__(
      self,
      input_specs: layers.InputSpec = layers.InputSpec(shape=[None, None, None, 3]),
      block_specs_json: str | None = None,
      endpoints_num_filters: int = 1280,
      features_only: bool = False,
      filter_size_scale: float = 1.0,
      stochastic_depth_drop_rate: float = 0.0,
      **kwargs):
    """Builds the network.

    Args:
      input_specs: Input spec; [batch, height, width, channels].
      block_specs_json: JSON list of 7 block dicts (see `MNASNET_KEYS`); None = MnasNet-A1.
      endpoints_num_filters: Filters of the 1x1 head conv (endpoint '6'); not scaled by
        filter_size_scale, as the config value is the searched/recipe width itself.
      features_only: Leave out the head conv (detection with FPN needs only levels).
      filter_size_scale: Width multiplier for the stem and every block.
      stochastic_depth_drop_rate: Drop rate of the last block; block i of n gets rate * i / n.
      **kwargs: The conv/BN settings of every block (`blocks.CONV_BN_KEYS`: activation,
        use_sync_bn, norm_momentum, norm_epsilon, kernel_initializer, kernel_regularizer,
        bias_regularizer), as `mnasnet.MnasNet` takes them and with its defaults; the rest goes
        to `tf_keras.Model`.
    """
    if isinstance(endpoints_num_filters, bool) or not isinstance(
        endpoints_num_filters, int) or endpoints_num_filters < 1:
      raise NascliError('backbone.tunable_mnasnet.endpoints_num_filters must be an integer >= 1,'
                        f' got {endpoints_num_filters!r}')
    if not filter_size_scale > 0:
      raise NascliError('backbone.tunable_mnasnet.filter_size_scale must be > 0, got '
                        f'{filter_size_scale}')
    if not 0.0 <= stochastic_depth_drop_rate < 1.0:
      raise NascliError('backbone.tunable_mnasnet.stochastic_depth_drop_rate must be in [0, 1),'
                        f' got {stochastic_depth_drop_rate}')
    block_specs = decode_block_specs(block_specs_json)
    conv_bn = {key: kwargs.pop(key) for key in blocks.CONV_BN_KEYS if key in kwargs}
    # The fixed MnasNet builds stem, blocks and endpoints (and validates the specs); only the
    # tensors up to its last block group are reused, so its own 1280-wide head stays out of
    # this model (finegrain off keeps that unused layer small).
    features = mnasnet.MnasNet(
        input_specs=input_specs, block_specs=block_specs, filter_size_scale=filter_size_scale,
        stochastic_depth_drop_rate=stochastic_depth_drop_rate,
        finegrain_classification_mode=False, **conv_bn)
    common = features.conv_bn_settings()
    self._config_dict = {
        'block_specs_json': block_specs_json,
        'endpoints_num_filters': endpoints_num_filters,
        'features_only': features_only,
        'filter_size_scale': filter_size_scale,
        'stochastic_depth_drop_rate': stochastic_depth_drop_rate,
        **common,
    }
    endpoints = {level: features.output[level] for level in features.output_specs}
    self._output_specs = dict(features.output_specs)
    if not features_only:
      last = features.get_layer('head').input
      head_level = str(max(int(level) for level in endpoints) + 1)
      endpoints[head_level] = mnasnet.head_conv(endpoints_num_filters, common)(last)
    super().__init__(inputs=features.inputs, outputs=endpoints, **kwargs)

  def get_config(self) -> dict[str, Any]:
    return blocks.serialize_regularizers(self._config_dict)


@blocks.register_backbone_builder('tunable_mnasnet')
def build_tunable_mnasnet(input_specs: layers.InputSpec, config: hyperparams.Config,
                          conv_bn: dict[str, Any]) -> tf_keras.Model:
  """Builds a TunableMnasNet from a `Backbone` one-of config with `type: tunable_mnasnet`."""
  # The config's fields are the architecture arguments: block_specs_json,
  # endpoints_num_filters, features_only, filter_size_scale, stochastic_depth_drop_rate.
  return TunableMnasNet(input_specs=input_specs, **config.as_dict(), **conv_bn)
