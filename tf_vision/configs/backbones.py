"""Backbone configs: Model Garden's `Backbone` one-of extended with our backbones.

Each of our backbones is one more field of the one-of (as MG's own projects do), so a YAML
`backbone: {type: mnasnet, mnasnet: {...}}` selects it and `backbones.factory.build_backbone`
finds the builder registered under the same key. Searched backbones (`tunable_mnasnet`,
`tunable_spinenet`) are added here the same way.
"""

import dataclasses
from typing import Optional

from official.modeling import hyperparams
from official.vision.configs import backbones
from official.vision.configs import image_classification


@dataclasses.dataclass
class MnasNet(hyperparams.Config):
  """MnasNet config (`tf_vision.modeling.backbones.mnasnet.MnasNet`)."""
  model_id: str = 'MnasNetA1'
  filter_size_scale: float = 1.0
  stochastic_depth_drop_rate: float = 0.0
  # Keep the 1280-filter head conv when filter_size_scale < 1 (MG MobileNet convention).
  finegrain_classification_mode: bool = True


@dataclasses.dataclass
class TunableMnasNet(hyperparams.Config):
  """Searched MnasNet config (`tf_vision.modeling.backbones.tunable_mnasnet.TunableMnasNet`).

  Attributes:
    block_specs_json: The decoded architecture: a JSON list of 7 block-group dicts
      {num_repeats, block_fn ('conv'|'mbconv'), expand_ratio, kernel_size, se_ratio,
      output_filters}; None = MnasNet-A1.
    endpoints_num_filters: Filters of the 1x1 head conv (endpoint '6').
    features_only: Leave the head conv out (FPN detection).
    filter_size_scale: Width multiplier of stem and blocks.
    stochastic_depth_drop_rate: Drop rate of the last block, linear over blocks.
  """
  block_specs_json: Optional[str] = None
  endpoints_num_filters: int = 1280
  features_only: bool = False
  filter_size_scale: float = 1.0
  stochastic_depth_drop_rate: float = 0.0


@dataclasses.dataclass
class TunableSpineNet(hyperparams.Config):
  """Searched SpineNet config (`tf_vision.modeling.backbones.tunable_spinenet.TunableSpineNet`).

  Attributes:
    model_id: Validated against MG's SpineNet SCALING_MAP; its scaling is not applied.
    min_level: Lowest output level.
    max_level: Highest output level.
    block_specs_json: The decoded architecture: a JSON list of block dicts {level_base,
      level_offset, block_fn ('residual'|'bottleneck'), input_offsets [a, b], is_output}
      after the 2 implied stem blocks; None = SpineNet-49 (needs levels 3..7).
    endpoints_num_filters: Filters of every output endpoint.
    resample_alpha: Channel factor of the cross-scale resampling.
    block_repeats: Blocks per block group.
    filter_size_scale: Width multiplier of every block.
    init_stochastic_depth_rate: Stochastic depth rate of the last block.
  """
  model_id: str = '49'
  min_level: int = 3
  max_level: int = 7
  block_specs_json: Optional[str] = None
  endpoints_num_filters: int = 256
  resample_alpha: float = 0.5
  block_repeats: int = 1
  filter_size_scale: float = 1.0
  init_stochastic_depth_rate: float = 0.0


@dataclasses.dataclass
class Backbone(backbones.Backbone):
  """MG's backbone one-of plus ours.

  Attributes:
    mnasnet: the fixed MnasNet backbone config.
    tunable_mnasnet: a searched MnasNet.
    tunable_spinenet: a searched SpineNet.
  """
  mnasnet: MnasNet = dataclasses.field(default_factory=MnasNet)
  tunable_mnasnet: TunableMnasNet = dataclasses.field(default_factory=TunableMnasNet)
  tunable_spinenet: TunableSpineNet = dataclasses.field(default_factory=TunableSpineNet)


@dataclasses.dataclass
class ImageClassificationModel(image_classification.ImageClassificationModel):
  """MG's classification model config whose backbone one-of knows our backbones."""
  backbone: Backbone = dataclasses.field(
      default_factory=lambda: Backbone(type='mnasnet', mnasnet=MnasNet()))
