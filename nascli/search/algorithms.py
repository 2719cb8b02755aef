"""Every search algorithm, registered: importing this module loads them all.

Each module below registers its algorithms with nascli/search/algorithm_registry.py as it is
imported (Model Garden's registry_imports); nothing else is needed to add one. (Optuna is
imported only when TPE is set up.)
"""

# pylint: disable=unused-import
from nascli.search import gp_bo  # noqa: F401
from nascli.search import pyglove_algorithms  # noqa: F401
from nascli.search import reinforce  # noqa: F401
from nascli.search import tpe  # noqa: F401
