"""What our backbones share around their blocks, so each backbone module holds only its graph.

- Reading a searched architecture: `parse_block_specs_json` and its converters check the JSON
  list of block dicts a Vertex NAS trial passes (`tunable_mnasnet`, `tunable_spinenet`).
- The conv/BN settings every block takes (`CONV_BN_KEYS`), and the builder plumbing:
  `register_backbone_builder` registers a builder with Model Garden's backbone factory and hands
  it the backbone's own config plus those settings from MG's norm/activation config.
- `FunctionalBackbone`: MG's `output_specs` and a `from_config` that rebuilds regularizers, for a
  backbone that is a functional `tf_keras.Model` (`mnasnet`, `tunable_mnasnet`).
"""

import json
from typing import Any, Callable, Mapping

import tensorflow as tf
import tf_keras

from nascli.errors import NascliError
from official.modeling import hyperparams
from official.vision.modeling.backbones import factory

Converter = Callable[[Any], Any]
# pyglove's `to_json` adds the class name under this key; it carries no architecture.
PYGLOVE_TYPE_KEY = '_type'
# The settings every conv + BN block takes (MG's block arguments of those names).
CONV_BN_KEYS = ('activation', 'use_sync_bn', 'norm_momentum', 'norm_epsilon',
                'kernel_initializer', 'kernel_regularizer', 'bias_regularizer')
REGULARIZER_KEYS = ('kernel_regularizer', 'bias_regularizer')


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


def boolean(value: Any) -> bool:
  if not isinstance(value, bool):
    raise ValueError(f'expected true or false, got {value!r}')
  return value


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


BackboneBuild = Callable[[tf_keras.layers.InputSpec, hyperparams.Config, dict[str, Any]],
                         tf_keras.Model]


def register_backbone_builder(key: str) -> Callable[[BackboneBuild], Callable[..., Any]]:
  """Decorator: registers `build(input_specs, config, conv_bn)` as MG's builder of `type: key`.

  MG's factory calls a builder with the whole `Backbone` one-of config, the norm/activation
  config and the L2 regularizer; every backbone of ours reads them alike, so `build` gets the
  `key` sub-config and `conv_bn`: activation, use_sync_bn, norm_momentum, norm_epsilon and
  kernel_regularizer (the L2 regularizer). The registered builder is returned, so the module's
  `build_<key>` is what MG's registry holds.
  """
  def register(build: BackboneBuild) -> Callable[..., Any]:
    def builder(input_specs: tf_keras.layers.InputSpec,
                backbone_config: hyperparams.Config,
                norm_activation_config: hyperparams.Config,
                l2_regularizer: tf_keras.regularizers.Regularizer | None = None
                ) -> tf_keras.Model:
      backbone_type = backbone_config.type
      assert backbone_type == key, f'Inconsistent backbone type {backbone_type}'
      return build(input_specs, backbone_config.get(), dict(
          activation=norm_activation_config.activation,
          use_sync_bn=norm_activation_config.use_sync_bn,
          norm_momentum=norm_activation_config.norm_momentum,
          norm_epsilon=norm_activation_config.norm_epsilon,
          kernel_regularizer=l2_regularizer))
    builder.__name__ = builder.__qualname__ = build.__name__
    builder.__module__, builder.__doc__ = build.__module__, build.__doc__
    return factory.register_backbone_builder(key)(builder)
  return register


def serialize_regularizers(config: Mapping[str, Any]) -> dict[str, Any]:
  """A copy of a backbone's config with its regularizers as JSON-ready dicts (for `to_json`)."""
  config = dict(config)
  for key in REGULARIZER_KEYS:
    if config.get(key) is not None:
      config[key] = tf_keras.regularizers.serialize(config[key])
  return config


def _deserialize_regularizer(regularizer):
  if regularizer is None or isinstance(regularizer, tf_keras.regularizers.Regularizer):
    return regularizer
  return tf_keras.regularizers.deserialize(regularizer)


class FunctionalBackbone(tf_keras.Model):
  """Base of a backbone built as a functional model whose endpoints are feature levels.

  A subclass sets `_output_specs` ({level: TensorShape} of the levels decoders may use) and
  returns its config through `serialize_regularizers`, which `from_config` reverses.
  """

  _output_specs: dict[str, tf.TensorShape]

  @classmethod
  def from_config(cls, config: dict[str, Any], custom_objects=None) -> 'FunctionalBackbone':
    config = dict(config)
    for key in REGULARIZER_KEYS:
      config[key] = _deserialize_regularizer(config.get(key))
    return cls(**config)

  @property
  def output_specs(self) -> dict[str, tf.TensorShape]:
    """A dict of {level: TensorShape} of the feature endpoints (the head conv excluded)."""
    return self._output_specs
