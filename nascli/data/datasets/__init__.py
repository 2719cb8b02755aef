"""Built-in data sets; importing this package registers them all."""

# pylint: disable=unused-import
from nascli.data.datasets import digits
from nascli.data.datasets import digits_clutter
from nascli.data.datasets import coco
from nascli.data.datasets import shapes_source
from nascli.data.datasets import imagefolder
from nascli.data.datasets import cifar10
from nascli.data.datasets import mnist
