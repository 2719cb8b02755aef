"""Tunable MnasNet backbone: a MnasNet built from an architecture a NAS search decoded.

The search space (Vertex NAS `mnasnet`) chooses, for each of 7 block groups, `num_repeats`,
`block_fn` ('conv' | 'mbconv'), `expand_ratio`, `kernel_size`, `se_ratio` and
`output_filters`; strides and which groups are endpoints stay fixed. The choice reaches the
trainer as the config string `block_specs_json` (a JSON list of 7 plain dicts), so a trial's
params.yaml alone rebuilds its model. The blocks are built by our fixed `MnasNet` class (its
`block_specs` hook); this class adds the searched head width (`endpoints_num_filters`) and
`features_only`.
"""

import json
import math
from typing import Any, Callable, Mapping

import tensorflow as tf
import tf_keras

from nascli.errors import NascliError
from official.modeling import hyperparams
from official.vision.modeling.backbones import factory
from official.vision.modeling.backbones import mobilenet
from tf_vision.modeling.backbones import mnasnet

layers = tf_keras.layers

# Fixed per group, as in MobileNetV2 and the Vertex search space: strides (running stride 2 after
# the stem) and whether the group's output is an endpoint (levels '2'..'5').
GROUP_STRIDES = (1, 2, 2, 2, 1, 2, 1)
GROUP_IS_OUTPUT = (False, True, True, False, True, False, True)
NUM_GROUPS = len(GROUP_STRIDES)
BLOCK_FNS = ('conv', 'mbconv')
# pyglove's `to_json` adds the class name under this key; it carries no architecture.
PYGLOVE_TYPE_KEY = '_type'
FIELD = 'backbone.tunable_mnasnet.block_specs_json'

Converter = Callable[[Any], Any]


# Converters: return the checked value or raise ValueError saying what was expected.
def integer(minimum: int | None = None) -> Converter:
  def convert(value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
      value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or (
        minimum is not None and value < minimum):
      raise ValueError(f'expected an integer{"" if minimum is None else f" >= {minimum}"}, '
                       f'got {value!r}')
    return value
  return convert


def number_in(low: float, high: float) -> Converter:
  """A number in [low, high)."""
  def convert(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
        low <= value < high):
      raise ValueError(f'expected a number in [{low}, {high}), got {value!r}')
    return float(value)
  return convert


def one_of(choices: tuple[str, ...]) -> Converter:
  def convert(value: Any) -> str:
    if value not in choices:
      raise ValueError(f'expected one of {", ".join(choices)}, got {value!r}')
    return value
  return convert


def parse_block_specs_json(text: str, field: str, keys: Mapping[str, Converter],
                           num_blocks: int | None = None) -> list[dict[str, Any]]:
  """Reads a JSON list of block dicts, checking every key.

  Args:
    text: The JSON text.
    field: The config path named in errors, e.g. 'backbone.tunable_mnasnet.block_specs_json'.
    keys: Every key a block must have -> its converter; a pyglove '_type' key is ignored.
    num_blocks: The required list length, if fixed.

  Returns:
    One dict per block with the converted values.

  Raises:
    NascliError: one line naming `field[index].key` for invalid JSON, a missing, unknown or bad
      key.
  """
  try:
    blocks = json.loads(text)
  except (TypeError, ValueError) as e:
    raise NascliError(f'{field} is not valid JSON: {" ".join(str(e).split())}') from None
  if not isinstance(blocks, list) or not blocks:
    raise NascliError(f'{field} must be a non-empty JSON list of block objects, got '
                      f'{type(blocks).__name__}')
  if num_blocks is not None and len(blocks) != num_blocks:
    raise NascliError(f'{field} must list {num_blocks} blocks, got {len(blocks)}')
  decoded = []
  for i, block in enumerate(blocks):
    where = f'{field}[{i}]'
    if not isinstance(block, dict):
      raise NascliError(f'{where} must be a JSON object, got {type(block).__name__}')
    unknown = sorted(set(block) - set(keys) - {PYGLOVE_TYPE_KEY})
    if unknown:
      raise NascliError(f'{where} has unknown key {unknown[0]!r}; known: {", ".join(keys)}')
    values = {}
    for key, convert in keys.items():
      if key not in block:
        raise NascliError(f'{where} is missing {key!r}')
      try:
        values[key] = convert(block[key])
      except ValueError as e:
        raise NascliError(f'{where}.{key}: {e}') from None
    decoded.append(values)
  return decoded


MNASNET_KEYS: dict[str, Converter] = {
    'num_repeats': integer(1),
    'block_fn': one_of(BLOCK_FNS),
    'expand_ratio': number_in(1.0, math.inf),
    'kernel_size': integer(1),
    'se_ratio': number_in(0.0, 1.0),
    'output_filters': integer(1),
}


def decode_block_specs(block_specs_json: str | None,
                       field: str = FIELD) -> tuple[mnasnet.BlockSpec, ...]:
  """The 7 `mnasnet.BlockSpec`s of a searched architecture; MnasNet-A1 when None.

  For 'conv' groups expand_ratio and se_ratio are kept but unused (a plain conv has neither).
  """
  if block_specs_json is None:
    return mnasnet.MNASNET_A1_BLOCK_SPECS
  blocks = parse_block_specs_json(block_specs_json, field, MNASNET_KEYS, NUM_GROUPS)
  return tuple(
      mnasnet.BlockSpec(block_fn=b['block_fn'], num_repeats=b['num_repeats'],
                        kernel_size=b['kernel_size'], strides=stride,
                        expand_ratio=b['expand_ratio'], se_ratio=b['se_ratio'],
                        out_filters=b['output_filters'], is_output=is_output)
      for b, stride, is_output in zip(blocks, GROUP_STRIDES, GROUP_IS_OUTPUT))


@tf_keras.utils.register_keras_serializable(package='Nascli')
class TunableMnasNet(tf_keras.Model):
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
      activation: str = 'relu',
      use_sync_bn: bool = False,
      norm_momentum: float = 0.99,
      norm_epsilon: float = 0.001,
      kernel_initializer: str = 'VarianceScaling',
      kernel_regularizer: tf_keras.regularizers.Regularizer | None = None,
      bias_regularizer: tf_keras.regularizers.Regularizer | None = None,
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
      activation: Activation of every conv block.
      use_sync_bn: Synchronized batch normalization.
      norm_momentum: Batch-norm moving-average momentum.
      norm_epsilon: Batch-norm epsilon.
      kernel_initializer: Conv kernel initializer.
      kernel_regularizer: Conv kernel regularizer.
      bias_regularizer: Conv bias regularizer.
      **kwargs: Passed to `tf_keras.Model`.
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
    self._config_dict = {
        'block_specs_json': block_specs_json,
        'endpoints_num_filters': endpoints_num_filters,
        'features_only': features_only,
        'filter_size_scale': filter_size_scale,
        'stochastic_depth_drop_rate': stochastic_depth_drop_rate,
        'activation': activation,
        'use_sync_bn': use_sync_bn,
        'norm_momentum': norm_momentum,
        'norm_epsilon': norm_epsilon,
        'kernel_initializer': kernel_initializer,
        'kernel_regularizer': kernel_regularizer,
        'bias_regularizer': bias_regularizer,
    }
    common = dict(activation=activation, use_sync_bn=use_sync_bn, norm_momentum=norm_momentum,
                  norm_epsilon=norm_epsilon, kernel_initializer=kernel_initializer,
                  kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer)
    # The fixed MnasNet builds stem, blocks and endpoints (and validates the specs); only the
    # tensors up to its last block group are reused, so its own 1280-wide head stays out of
    # this model (finegrain off keeps that unused layer small).
    features = mnasnet.MnasNet(
        input_specs=input_specs, block_specs=block_specs, filter_size_scale=filter_size_scale,
        stochastic_depth_drop_rate=stochastic_depth_drop_rate,
        finegrain_classification_mode=False, **common)
    endpoints = {level: features.output[level] for level in features.output_specs}
    self._output_specs = dict(features.output_specs)
    if not features_only:
      last = features.get_layer('head').input
      head_level = str(max(int(level) for level in endpoints) + 1)
      endpoints[head_level] = mobilenet.Conv2DBNBlock(
          filters=endpoints_num_filters, kernel_size=1, strides=1, name='head',
          **common)(last)
    super().__init__(inputs=features.inputs, outputs=endpoints, **kwargs)

  def get_config(self) -> dict[str, Any]:
    config = dict(self._config_dict)
    for key in ('kernel_regularizer', 'bias_regularizer'):
      if config[key] is not None:
        config[key] = tf_keras.regularizers.serialize(config[key])
    return config

  @classmethod
  def from_config(cls, config: dict[str, Any], custom_objects=None) -> 'TunableMnasNet':
    config = dict(config)
    for key in ('kernel_regularizer', 'bias_regularizer'):
      if isinstance(config.get(key), dict):
        config[key] = tf_keras.regularizers.deserialize(config[key])
    return cls(**config)

  @property
  def output_specs(self) -> dict[str, tf.TensorShape]:
    """A dict of {level: TensorShape} of the feature endpoints (the head conv excluded)."""
    return self._output_specs


@factory.register_backbone_builder('tunable_mnasnet')
def build_tunable_mnasnet(
    input_specs: layers.InputSpec,
    backbone_config: hyperparams.Config,
    norm_activation_config: hyperparams.Config,
    l2_regularizer: tf_keras.regularizers.Regularizer | None = None) -> tf_keras.Model:
  """Builds a TunableMnasNet from a `Backbone` one-of config with `type: tunable_mnasnet`."""
  backbone_type = backbone_config.type
  backbone_cfg = backbone_config.get()
  assert backbone_type == 'tunable_mnasnet', f'Inconsistent backbone type {backbone_type}'

  return TunableMnasNet(
      input_specs=input_specs,
      block_specs_json=backbone_cfg.block_specs_json,
      endpoints_num_filters=backbone_cfg.endpoints_num_filters,
      features_only=backbone_cfg.features_only,
      filter_size_scale=backbone_cfg.filter_size_scale,
      stochastic_depth_drop_rate=backbone_cfg.stochastic_depth_drop_rate,
      activation=norm_activation_config.activation,
      use_sync_bn=norm_activation_config.use_sync_bn,
      norm_momentum=norm_activation_config.norm_momentum,
      norm_epsilon=norm_activation_config.norm_epsilon,
      kernel_regularizer=l2_regularizer)
