"""Built-in data sets; importing this package registers them all (source.py holds the registry
and the Source contract; nothing there imports this package back)."""

# pylint: disable=unused-import
from nascli.data.datasets import digits
from nascli.data.datasets import digits_clutter
from nascli.data.datasets import coco
from nascli.data.datasets import shapes_source
from nascli.data.datasets import imagefolder
from nascli.data.datasets import cifar10
from nascli.data.datasets import mnist

from nascli.data import source as source_lib  # pylint: disable=g-bad-import-order


def registered_sources() -> dict[str, type[source_lib.Source]]:
  """Every built-in data set by name (none imports TensorFlow)."""
  return source_lib.registered()


def source_for(name: str, options: source_lib.ConvertOptions) -> source_lib.Source:
  return source_lib.lookup_source(name)(options)
