"""MnasNet classification backbone (Tan et al. 2019), built from Model Garden blocks.

Follows Model Garden's MobileNet conventions so it drops into MG's classification, detection and
segmentation builders: endpoints keyed by level ('2'..'5' for strides 4..32, listed in
`output_specs`), plus the head 1x1 conv as the next key ('6'), which classification uses and
decoders ignore. Blocks are MG's `InvertedBottleneckBlock` (and `Conv2DBNBlock` for plain convs),
so a searched (tunable) MnasNet can reuse this class by passing its own `block_specs`.
"""

import math
from typing import Any, Callable, NamedTuple, Sequence

import tf_keras

from nascli.errors import NascliError
from official.modeling import hyperparams
from official.vision.modeling.backbones import mobilenet
from official.vision.modeling.layers import nn_blocks
from official.vision.modeling.layers import nn_layers
from tf_vision.modeling.backbones import blocks

layers = tf_keras.layers


class BlockSpec(NamedTuple):
  """One block group: `num_repeats` blocks, the first strided, the rest stride 1 and in = out."""
  block_fn: str
  num_repeats: int
  kernel_size: int
  strides: int
  expand_ratio: float
  se_ratio: float
  out_filters: int
  is_output: bool


# MnasNet-A1 (Fig. 7 of https://arxiv.org/abs/1807.11626): the SepConv block is an MBConv with
# expand ratio 1 (depthwise 3x3 + BN + ReLU, pointwise + BN), as in the paper's reference code.
MNASNET_A1_BLOCK_SPECS = (
    BlockSpec('mbconv', 1, 3, 1, 1, 0.0, 16, False),
    BlockSpec('mbconv', 2, 3, 2, 6, 0.0, 24, True),
    BlockSpec('mbconv', 3, 5, 2, 3, 0.25, 40, True),
    BlockSpec('mbconv', 4, 3, 2, 6, 0.0, 80, False),
    BlockSpec('mbconv', 2, 3, 1, 6, 0.25, 112, True),
    BlockSpec('mbconv', 3, 5, 2, 6, 0.25, 160, False),
    BlockSpec('mbconv', 1, 3, 1, 6, 0.0, 320, True),
)

SUPPORTED_SPECS_MAP = {
    'MnasNetA1': MNASNET_A1_BLOCK_SPECS,
}

STEM_FILTERS = 32
HEAD_FILTERS = 1280


class _BlockArgs(NamedTuple):
  """What one block needs besides the shared conv/BN settings."""
  in_filters: int
  out_filters: int
  kernel_size: int
  strides: int
  expand_ratio: float
  se_ratio: float
  stochastic_depth_drop_rate: float | None


def _mbconv(args: _BlockArgs, common: dict[str, Any]) -> layers.Layer:
  # SE width from the block's input filters and a sigmoid gate, as in the MnasNet reference
  # code (MG's MobileNetV3 instead widens from the expanded filters with a hard sigmoid).
  return nn_blocks.InvertedBottleneckBlock(
      in_filters=args.in_filters,
      out_filters=args.out_filters,
      expand_ratio=args.expand_ratio,
      strides=args.strides,
      kernel_size=args.kernel_size,
      se_ratio=args.se_ratio or None,
      expand_se_in_filters=False,
      se_gating_activation='sigmoid',
      stochastic_depth_drop_rate=args.stochastic_depth_drop_rate,
      **common)


def _conv(args: _BlockArgs, common: dict[str, Any]) -> layers.Layer:
  return mobilenet.Conv2DBNBlock(
      filters=args.out_filters,
      kernel_size=args.kernel_size,
      strides=args.strides,
      **common)


# block_fn name -> layer builder; a searched space may use both.
BLOCK_BUILDERS: dict[str, Callable[[_BlockArgs, dict[str, Any]], layers.Layer]] = {
    'mbconv': _mbconv,
    'conv': _conv,
}


def decode_block_specs(block_specs: Sequence[Sequence[Any]], filter_size_scale: float,
                       divisible_by: int = 8, min_depth: int = 8) -> list[BlockSpec]:
  """Validates specs and scales their widths with MG's `round_filters` (as MobileNet does)."""
  decoded = []
  for i, spec in enumerate(block_specs):
    spec = BlockSpec(*spec)
    if spec.block_fn not in BLOCK_BUILDERS:
      raise NascliError(f'block_specs[{i}].block_fn {spec.block_fn!r} is not one of '
                        f'{sorted(BLOCK_BUILDERS)}')
    if spec.num_repeats < 1 or spec.strides not in (1, 2):
      raise NascliError(f'block_specs[{i}]: num_repeats must be >= 1 and strides 1 or 2, got '
                        f'{spec.num_repeats} and {spec.strides}')
    decoded.append(spec._replace(out_filters=nn_layers.round_filters(
        spec.out_filters, filter_size_scale, divisor=divisible_by, min_depth=min_depth)))
  return decoded


def head_conv(filters: int, common: dict[str, Any]) -> layers.Layer:
  """The 1x1 conv + BN after the last block group (MG MobileNet's head), named 'head'."""
  return mobilenet.Conv2DBNBlock(filters=filters, kernel_size=1, strides=1, name='head', **common)


@tf_keras.utils.register_keras_serializable(package='Nascli')
class MnasNet(blocks.FunctionalBackbone):
  """MnasNet backbone: stem conv, MBConv block groups, 1x1 head conv.

  Returns a dict of endpoints: levels with an `is_output` group ('2'..'5' for MnasNet-A1), then
  the head conv's features under the next level ('6'). `output_specs` lists the levels only.
  """

  def __init__(
      self,
      model_id: str = 'MnasNetA1',
      filter_size_scale: float = 1.0,
      input_specs: layers.InputSpec = layers.InputSpec(shape=[None, None, None, 3]),
      block_specs: Sequence[Sequence[Any]] | None = None,
      stochastic_depth_drop_rate: float = 0.0,
      finegrain_classification_mode: bool = True,
      divisible_by: int = 8,
      min_depth: int = 8,
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
      model_id: A key of `SUPPORTED_SPECS_MAP`; ignored when `block_specs` is given.
      filter_size_scale: Width multiplier for every conv (rounded to `divisible_by`).
      input_specs: Input spec; [batch, height, width, channels].
      block_specs: Optional `BlockSpec`-like tuples replacing the `model_id` table (searched
        architectures).
      stochastic_depth_drop_rate: Drop rate of the last block; block i of n gets rate * i / n.
      finegrain_classification_mode: Keep the head conv at 1280 filters when
        filter_size_scale < 1 (MG MobileNet convention).
      divisible_by: Channel counts are rounded to a multiple of this.
      min_depth: Minimum channel count after scaling.
      activation: Activation of every conv block.
      use_sync_bn: Synchronized batch normalization.
      norm_momentum: Batch-norm moving-average momentum.
      norm_epsilon: Batch-norm epsilon.
      kernel_initializer: Conv kernel initializer.
      kernel_regularizer: Conv kernel regularizer.
      bias_regularizer: Conv bias regularizer.
      **kwargs: Passed to `tf_keras.Model`.
    """
    if block_specs is None:
      if model_id not in SUPPORTED_SPECS_MAP:
        raise NascliError(f'backbone.mnasnet.model_id {model_id!r} is not one of '
                          f'{sorted(SUPPORTED_SPECS_MAP)}')
      block_specs = SUPPORTED_SPECS_MAP[model_id]
    if filter_size_scale <= 0:
      raise NascliError(f'backbone.mnasnet.filter_size_scale must be > 0, got {filter_size_scale}')
    if not 0.0 <= stochastic_depth_drop_rate < 1.0:
      raise NascliError('backbone.mnasnet.stochastic_depth_drop_rate must be in [0, 1), got '
                        f'{stochastic_depth_drop_rate}')

    self._model_id = model_id
    self._filter_size_scale = filter_size_scale
    self._input_specs = input_specs
    self._block_specs = [tuple(BlockSpec(*s)) for s in block_specs]
    self._stochastic_depth_drop_rate = stochastic_depth_drop_rate
    self._finegrain_classification_mode = finegrain_classification_mode
    self._divisible_by = divisible_by
    self._min_depth = min_depth
    self._activation = activation
    self._use_sync_bn = use_sync_bn
    self._norm_momentum = norm_momentum
    self._norm_epsilon = norm_epsilon
    self._kernel_initializer = kernel_initializer
    self._kernel_regularizer = kernel_regularizer
    self._bias_regularizer = bias_regularizer

    decoded = decode_block_specs(self._block_specs, filter_size_scale, divisible_by, min_depth)
    # Blocks keep their default divisible_by=1 so the SE width is int(in_filters * se_ratio) as in
    # the paper's code; stage widths are already multiples of `divisible_by`.
    common = self.conv_bn_settings()

    inputs = tf_keras.Input(shape=input_specs.shape[1:])
    x = mobilenet.Conv2DBNBlock(
        filters=self._round(STEM_FILTERS), kernel_size=3, strides=2, name='stem',
        **common)(inputs)
    stride = 2

    endpoints = {}
    num_blocks = sum(s.num_repeats for s in decoded)
    block_idx = 0
    for group_idx, spec in enumerate(decoded):
      for repeat in range(spec.num_repeats):
        block_idx += 1
        args = _BlockArgs(
            in_filters=x.shape[-1],
            out_filters=spec.out_filters,
            kernel_size=spec.kernel_size,
            strides=spec.strides if repeat == 0 else 1,
            expand_ratio=spec.expand_ratio,
            se_ratio=spec.se_ratio,
            stochastic_depth_drop_rate=nn_layers.get_stochastic_depth_rate(
                stochastic_depth_drop_rate, block_idx, num_blocks) or None)
        x = BLOCK_BUILDERS[spec.block_fn](args, common)(x)
      stride *= spec.strides
      x = layers.Activation('linear', name=f'block_group_{group_idx}')(x)
      if spec.is_output:
        level = str(int(math.log2(stride)))
        if level in endpoints:
          raise NascliError(f'block_specs[{group_idx}] is a second output at level {level}; '
                            'only the last group of a stride may have is_output')
        endpoints[level] = x

    # Levels only: decoders (FPN) must not see the head conv.
    self._output_specs = {level: t.get_shape() for level, t in endpoints.items()}

    head_filters = HEAD_FILTERS
    if finegrain_classification_mode and filter_size_scale < 1.0:
      head_filters /= filter_size_scale
    x = head_conv(self._round(head_filters), common)(x)
    head_level = max([int(l) for l in endpoints] + [int(math.log2(stride))]) + 1
    endpoints[str(head_level)] = x

    super().__init__(inputs=inputs, outputs=endpoints, **kwargs)

  def _round(self, filters: float) -> int:
    return nn_layers.round_filters(filters, self._filter_size_scale, divisor=self._divisible_by,
                                   min_depth=self._min_depth)

  def conv_bn_settings(self) -> dict[str, Any]:
    """The conv/BN arguments every block takes (`blocks.CONV_BN_KEYS`), as this model has them."""
    return {key: getattr(self, f'_{key}') for key in blocks.CONV_BN_KEYS}

  def get_config(self) -> dict[str, Any]:
    return blocks.serialize_regularizers({
        'model_id': self._model_id,
        'filter_size_scale': self._filter_size_scale,
        'block_specs': [list(s) for s in self._block_specs],
        'stochastic_depth_drop_rate': self._stochastic_depth_drop_rate,
        'finegrain_classification_mode': self._finegrain_classification_mode,
        'divisible_by': self._divisible_by,
        'min_depth': self._min_depth,
        **self.conv_bn_settings(),
    })


@blocks.register_backbone_builder('mnasnet')
def build_mnasnet(input_specs: layers.InputSpec, config: hyperparams.Config,
                  conv_bn: dict[str, Any]) -> tf_keras.Model:
  """Builds a MnasNet backbone from a `Backbone` one-of config with `type: mnasnet`."""
  # The config's fields are the architecture arguments: model_id, filter_size_scale,
  # stochastic_depth_drop_rate, finegrain_classification_mode.
  return MnasNet(input_specs=input_specs, **config.as_dict(), **conv_bn)
