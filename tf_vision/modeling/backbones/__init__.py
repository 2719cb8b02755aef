"""Our backbones; importing this package registers them in Model Garden's backbone factory."""

from tf_vision.modeling.backbones.mnasnet import MnasNet
from tf_vision.modeling.backbones.tunable_mnasnet import TunableMnasNet
from tf_vision.modeling.backbones.tunable_spinenet import TunableSpineNet
