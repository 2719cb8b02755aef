"""NAS search spaces (pyglove) and Vertex AI NAS's `nas_params_str` format; no TensorFlow.

Importing the package registers the prebuilt spaces (`mnasnet`, `spinenet`).
"""

from tf_vision.search_spaces import mnasnet
from tf_vision.search_spaces import nas_params
from tf_vision.search_spaces import spinenet
from tf_vision.search_spaces.nas_params import decode
from tf_vision.search_spaces.nas_params import from_nas_params
from tf_vision.search_spaces.nas_params import load_nas_params
from tf_vision.search_spaces.nas_params import to_nas_params
from tf_vision.search_spaces.nas_params import to_nas_params_str
from tf_vision.search_spaces.registry import get_dna_spec
from tf_vision.search_spaces.registry import get_search_space
from tf_vision.search_spaces.registry import known_search_spaces
from tf_vision.search_spaces.registry import load_user_search_space
from tf_vision.search_spaces.registry import register_search_space
from tf_vision.search_spaces.registry import unregister_search_space
