"""Our backbones; importing this package registers them in Model Garden's backbone factory.

Each module holds one backbone's graph; `blocks` holds what they share (block-spec JSON
reading, conv/BN settings, factory registration, config round trip).
"""

from tf_vision.modeling.backbones.mnasnet import MnasNet
from tf_vision.modeling.backbones.tunable_mnasnet import TunableMnasNet
from tf_vision.modeling.backbones.tunable_spinenet import TunableSpineNet
