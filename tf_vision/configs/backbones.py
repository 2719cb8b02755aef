"""Backbone configs: Model Garden's `Backbone` one-of extended with our backbones.

Each of our backbones is one more field of the one-of (as MG's own projects do), so a YAML
`backbone: {type: mnasnet, mnasnet: {...}}` selects it and `backbones.factory.build_backbone`
finds the builder registered under the same key. Searched backbones (`tunable_mnasnet`,
`tunable_spinenet`) are added here the same way.
"""

import dataclasses

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
class Backbone(backbones.Backbone):
  """MG's backbone one-of plus ours.

  Attributes:
    mnasnet: the fixed MnasNet backbone config.
  """
  mnasnet: MnasNet = dataclasses.field(default_factory=MnasNet)


@dataclasses.dataclass
class ImageClassificationModel(image_classification.ImageClassificationModel):
  """MG's classification model config whose backbone one-of knows our backbones."""
  backbone: Backbone = dataclasses.field(
      default_factory=lambda: Backbone(type='mnasnet', mnasnet=MnasNet()))
