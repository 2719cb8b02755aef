"""Named NAS search spaces, as Vertex AI NAS's `search_spaces.get_search_space(name)` offers them.

A space is a zero-argument function returning a fresh pyglove hyper-value (a fresh one each time,
because pyglove values are mutable and materializing binds parents). A prebuilt space also
registers how a chosen point becomes plain block specs (the `block_specs_json` the tunable
backbones consume). Only pyglove and the standard library are imported, so the search controller
can use the spaces without loading TensorFlow.
"""

import dataclasses
import importlib
from typing import Any, Callable

import pyglove as pg

from nascli.errors import NascliError

SpaceFn = Callable[[], Any]
BlockSpecsFn = Callable[[Any], list[dict[str, Any]]]


@dataclasses.dataclass(frozen=True)
class SearchSpaceEntry:
  """A registered space: its builder and its point -> block specs function."""
  name: str
  build: SpaceFn
  block_specs: BlockSpecsFn | None


_REGISTRY: dict[str, SearchSpaceEntry] = {}
_DNA_SPECS: dict[str, pg.DNASpec] = {}


def register_search_space(name: str, block_specs: BlockSpecsFn | None = None
                         ) -> Callable[[SpaceFn], SpaceFn]:
  """Decorator: registers a zero-argument space builder under `name` (the `--search_space` key).

  Args:
    name: The key, as in Vertex's `_PREBUILT_SEARCH_SPACES_MAP`.
    block_specs: Turns a chosen point (a DNA or the materialized value) into a JSON-serialisable
      list of plain dicts.

  Returns:
    The decorator, which returns the builder unchanged.
  """

  def _decorator(fn: SpaceFn) -> SpaceFn:
    if name in _REGISTRY and _REGISTRY[name].build is not fn:
      raise ValueError(f'search space {name!r} is already registered')
    _REGISTRY[name] = SearchSpaceEntry(name, fn, block_specs)
    _DNA_SPECS.pop(name, None)
    return fn

  return _decorator


def unregister_search_space(name: str) -> None:
  """Removes `name` (for tests and plugins that register temporary spaces)."""
  _REGISTRY.pop(name, None)
  _DNA_SPECS.pop(name, None)


def known_search_spaces() -> list[str]:
  """The registered space names, sorted."""
  return sorted(_REGISTRY)


def get_entry(name: str) -> SearchSpaceEntry:
  """The registry entry for `name`; NascliError naming the known spaces when absent."""
  try:
    return _REGISTRY[name]
  except KeyError:
    raise NascliError(f'unknown search space {name!r}; known: '
                      f'{", ".join(known_search_spaces())}') from None


def get_search_space(name: str) -> Any:
  """A fresh pyglove hyper-value for the registered space `name`."""
  return get_entry(name).build()


def get_dna_spec(name: str) -> pg.DNASpec:
  """The DNASpec of a registered space, computed once (pyglove takes ~0.1-0.4 s per space).

  Shared: DNAs bound to it compare and serialise cheaply; do not mutate it.
  """
  if name not in _DNA_SPECS:
    _DNA_SPECS[name] = pg.dna_spec(get_search_space(name))
  return _DNA_SPECS[name]


def load_user_search_space(path: str) -> Any:
  """Imports `pkg.module.fn` and returns `fn()`, a pyglove space (Vertex's --search_space_module).

  Args:
    path: Dotted path to a zero-argument function, e.g. `my_spaces.tiny_space`.

  Returns:
    The pyglove hyper-value the function returns.

  Raises:
    NascliError: one line naming the module or function that could not be used.
  """
  module_name, _, fn_name = str(path).rpartition('.')
  if not module_name or not fn_name:
    raise NascliError(f'search space module {path!r}: expected a dotted path '
                      "'package.module.function'")
  try:
    module = importlib.import_module(module_name)
  except Exception as e:  # pylint: disable=broad-except
    raise NascliError(f'search space module {path!r}: cannot import module {module_name!r} '
                      f'({type(e).__name__}: {_one_line(e)})') from e
  fn = getattr(module, fn_name, None)
  if fn is None:
    raise NascliError(f'search space module {path!r}: module {module_name!r} has no '
                      f'function {fn_name!r}')
  if not callable(fn):
    raise NascliError(f'search space module {path!r}: {fn_name!r} in module {module_name!r} '
                      'is not a function')
  try:
    space = fn()
  except Exception as e:  # pylint: disable=broad-except
    raise NascliError(f'search space module {path!r}: function {fn_name!r} failed '
                      f'({type(e).__name__}: {_one_line(e)})') from e
  try:
    spec = pg.dna_spec(space)
  except Exception as e:  # pylint: disable=broad-except
    raise NascliError(f'search space module {path!r}: function {fn_name!r} returned '
                      f'{type(space).__name__}, not a pyglove search space '
                      f'({_one_line(e)})') from e
  if not spec.decision_points:
    raise NascliError(f'search space module {path!r}: function {fn_name!r} returned '
                      f'{type(space).__name__} with no decision points (pg.oneof, pg.sublist_of, '
                      'pg.floatv)')
  return space


def _one_line(e: BaseException) -> str:
  text = ' '.join(str(e).split())
  return text if len(text) <= 200 else text[:197] + '...'
