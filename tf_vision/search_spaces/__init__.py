"""NAS search spaces (pyglove) and Vertex AI NAS's `nas_params_str` format; no TensorFlow.

Importing the package registers the prebuilt spaces (`mnasnet`, `spinenet`) and loads no pyglove
either (the flag checks read the registry): the `nas_params` functions load it on first use.
"""

import importlib
from typing import Any

from tf_vision.search_spaces import mnasnet
from tf_vision.search_spaces import spinenet
from tf_vision.search_spaces.registry import EmbeddedDefault
from tf_vision.search_spaces.registry import get_dna_spec
from tf_vision.search_spaces.registry import get_entry
from tf_vision.search_spaces.registry import get_search_space
from tf_vision.search_spaces.registry import known_search_spaces
from tf_vision.search_spaces.registry import load_user_search_space
from tf_vision.search_spaces.registry import ModelBinding
from tf_vision.search_spaces.registry import register_search_space
from tf_vision.search_spaces.registry import resolve_search_space
from tf_vision.search_spaces.registry import SearchSpaceEntry
from tf_vision.search_spaces.registry import unregister_search_space

_NAS_PARAMS = ('decode', 'from_nas_params', 'load_nas_params', 'to_nas_params',
               'to_nas_params_str')


def __getattr__(name: str) -> Any:
  """`nas_params` and its functions, imported (with pyglove) when first asked for."""
  if name == 'nas_params' or name in _NAS_PARAMS:
    nas_params = importlib.import_module(f'{__name__}.nas_params')
    return nas_params if name == 'nas_params' else getattr(nas_params, name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
