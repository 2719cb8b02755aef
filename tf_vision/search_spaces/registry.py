"""Named NAS search spaces, each registered once with everything a search needs end to end.

A space is a zero-argument function returning a fresh pyglove hyper-value (a fresh one each time,
because pyglove values are mutable and materializing binds parents). Its registration
(`register_search_space`) also says how a chosen point becomes plain block specs (the
`block_specs_json` the tunable backbones consume), which Model Garden model trains them
(`ModelBinding`), and, optionally, the embedded data set and testing YAML a search uses when no
data flags are given (`EmbeddedDefault`). The search controller, the trials, stage 2 and the flag
checks all read this one registry.

Importing this module loads neither TensorFlow nor pyglove (the flag checks read the bindings
before any framework loads): pyglove is imported where a space is built or checked.
"""

import dataclasses
import importlib
import json
import os
from pathlib import Path
import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping

from nascli.errors import NascliError

if TYPE_CHECKING:
  import pyglove as pg

SpaceFn = Callable[[], Any]
BlockSpecsFn = Callable[[Any], list[dict[str, Any]]]
TEST_FILES = Path(__file__).resolve().parents[1] / 'test_files'


@dataclasses.dataclass(frozen=True)
class ModelBinding:
  """How a space's architectures become a Model Garden model."""
  model: str  # --model of `nascli train`
  experiment: str
  backbone_type: str  # its config takes the architecture as `block_specs_json`
  metric: str  # the eval metric that is the trial's accuracy

  def backbone_override(self, block_specs: list[dict[str, Any]]) -> dict[str, Any]:
    """The config override that puts an architecture into the model's backbone."""
    return {'task': {'model': {'backbone': {
        'type': self.backbone_type,
        self.backbone_type: {'block_specs_json': json.dumps(block_specs)}}}}}


@dataclasses.dataclass(frozen=True)
class EmbeddedDefault:
  """What a search of the space runs on without data flags: an embedded data set (converted
  once into the cache) and a testing YAML (an absolute path, or one in tf_vision/test_files)."""
  dataset: str
  convert_options: Mapping[str, Any]
  config_file: str

  def config_path(self) -> str:
    path = Path(self.config_file)
    return str(path if path.is_absolute() else TEST_FILES / path)


@dataclasses.dataclass(frozen=True)
class SearchSpaceEntry:
  """A registered space: its builder, its point -> block specs function, its model binding and
  embedded defaults (either may be None for a space only searched, never trained: a benchmark's).
  `based_on` names the prebuilt space a plain `--search_space_module` function takes all but its
  builder from (Vertex's way); it is None for spaces registered with the decorator."""
  name: str
  build: SpaceFn
  block_specs: BlockSpecsFn | None
  binding: ModelBinding | None = None
  defaults: EmbeddedDefault | None = None
  based_on: str | None = None

  def require_binding(self) -> ModelBinding:
    if self.binding is None:
      raise NascliError(f'search space {self.name!r} has no model binding (register it with '
                        'binding=ModelBinding(...) or the name of a prebuilt space)')
    return self.binding


_REGISTRY: dict[str, SearchSpaceEntry] = {}
_DNA_SPECS: dict[str, 'pg.DNASpec'] = {}
_CHECKED: set[str] = set()  # module spaces whose points were decoded once (_check)


def register_search_space(name: str, block_specs: BlockSpecsFn | None = None,
                          binding: ModelBinding | str | None = None,
                          defaults: EmbeddedDefault | None = None
                         ) -> Callable[[SpaceFn], SpaceFn]:
  """Decorator: registers a zero-argument space builder under `name` (the `--search_space` key).

  Registering the same function again (its module imported anew, e.g. in a warm worker that
  runs many trials) replaces the entry; another function under a taken name is refused.

  Args:
    name: The key, as in Vertex's `_PREBUILT_SEARCH_SPACES_MAP`.
    block_specs: Turns a chosen point (the space materialized with a DNA) into a
      JSON-serialisable list of plain dicts, as the binding's backbone reads them; by default
      the bound prebuilt space's.
    binding: The Model Garden model; or the name of a registered space whose binding, block
      specs function (unless given) and embedded defaults (unless given) this space shares.
    defaults: The embedded data set and testing YAML of `search_in_local` without data flags.

  Returns:
    The decorator, which returns the builder unchanged.
  """
  if isinstance(binding, str):
    base = get_entry(binding)
    block_specs = block_specs or base.block_specs
    defaults = defaults or base.defaults
    binding = base.binding

  def _decorator(fn: SpaceFn) -> SpaceFn:
    _register(SearchSpaceEntry(name, fn, block_specs, binding, defaults))
    return fn

  return _decorator


def _register(entry: SearchSpaceEntry) -> None:
  old = _REGISTRY.get(entry.name)
  if old is not None and not _same_function(old.build, entry.build):
    raise ValueError(f'search space {entry.name!r} is already registered (by '
                     f'{_qualified(old.build)})')
  _REGISTRY[entry.name] = entry
  _DNA_SPECS.pop(entry.name, None)
  _CHECKED.discard(entry.name)


def _same_function(a: Callable, b: Callable) -> bool:
  """One definition, possibly imported twice (a module reloaded, or imported under a 2nd name)."""
  return a is b or _definition(a) == _definition(b)


def _definition(fn: Callable) -> tuple[str, str]:
  code = getattr(fn, '__code__', None)
  return (code.co_filename if code else getattr(fn, '__module__', '?'),
          getattr(fn, '__qualname__', repr(fn)))


def _qualified(fn: Callable) -> str:
  return f'{getattr(fn, "__module__", "?")}.{getattr(fn, "__qualname__", repr(fn))}'


def unregister_search_space(name: str) -> None:
  """Removes `name` (for tests and plugins that register temporary spaces)."""
  _REGISTRY.pop(name, None)
  _DNA_SPECS.pop(name, None)
  _CHECKED.discard(name)


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


def get_dna_spec(name: str) -> 'pg.DNASpec':
  """The DNASpec of a registered space, computed once (pyglove takes ~0.1-0.4 s per space).

  Shared: DNAs bound to it compare and serialise cheaply; do not mutate it.
  """
  if name not in _DNA_SPECS:
    import pyglove as pg  # pylint: disable=g-import-not-at-top
    _DNA_SPECS[name] = pg.dna_spec(get_search_space(name))
  return _DNA_SPECS[name]


def resolve_search_space(search_space: str, module: str | None = None) -> SearchSpaceEntry:
  """The space a search, each of its trials and stage 2 use: the flags' pair
  (--prebuilt_search_space / --search_space, --search_space_module), resolved the same way in
  every process.

  Without `module`, the registered `search_space`. With it, `module`'s `package.module.function`
  is imported (the import registers whatever the module registers) and:
  - a function registered with `register_search_space` is that entry;
  - any other function is Vertex's kind, a function returning a pyglove space: its points must
    be shaped as `search_space`'s (block specs, model and defaults are `search_space`'s); it is
    registered under the dotted path.
  A module space's points are decoded once, so a space that cannot become block specs is
  refused before any trial runs.

  Raises:
    NascliError: one line naming the module, function or space that could not be used.
  """
  if not module:
    return get_entry(search_space)
  fn = _import_function(module)
  entry = next((e for e in _REGISTRY.values() if e.build is fn and e.based_on is None), None)
  if entry is None:
    base = get_entry(search_space)
    entry = SearchSpaceEntry(module, fn, base.block_specs, base.binding, base.defaults,
                             based_on=search_space)
    old = _REGISTRY.get(module)
    if old != entry:
      if old is not None and old.based_on is not None:
        unregister_search_space(module)  # the same function, based on another prebuilt space
      try:
        _register(entry)
      except ValueError as e:
        raise NascliError(f'search space module {module!r}: {e}') from None
  _check(entry, module)
  return entry


def _check(entry: SearchSpaceEntry, path: str) -> None:
  """Builds a module's space and decodes its first point, once per registration, so a space
  that cannot become block specs fails in the driver in one line, not in every trial."""
  if entry.name in _CHECKED:
    return
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  space, spec = _space_and_spec(entry.build, path)
  _DNA_SPECS[entry.name] = spec
  what = f'search space module {path!r}'
  if entry.block_specs is None:
    raise NascliError(f'{what}: search space {entry.name!r} has no block_specs function')
  try:
    specs = entry.block_specs(pg.materialize(space, spec.first_dna()))
    if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
      raise TypeError(f'block_specs returned {type(specs).__name__}, not a list of dicts')
    json.dumps(specs)
  except Exception as e:  # pylint: disable=broad-except
    shape = (f"not shaped as the {entry.based_on} space's (give --prebuilt_search_space the "
             'space it follows, or register it with its own block_specs)' if entry.based_on
             else 'not decoded by its block_specs')
    raise NascliError(f'{what}: its points are {shape}: {type(e).__name__}: {_one_line(e)}'
                      ) from e
  _CHECKED.add(entry.name)


def check_module_path(path: str, what: str = 'search space module') -> None:
  """Refuses a path that cannot name `package.module.function` (no import: the flag checks)."""
  parts = str(path).split('.')
  if len(parts) < 2 or not all(p.isidentifier() for p in parts):
    raise NascliError(f"{what} {path!r}: expected a dotted path 'package.module.function'")


def _import_function(path: str) -> SpaceFn:
  """The function `package.module.function` names, imported as `python -m` would from this
  directory (the trials run in it too)."""
  check_module_path(path)
  module_name, _, fn_name = path.rpartition('.')
  if os.getcwd() not in sys.path and '' not in sys.path:
    sys.path.append(os.getcwd())
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
  return fn


def _space_and_spec(fn: SpaceFn, path: str) -> tuple[Any, 'pg.DNASpec']:
  """`fn()` and its DNASpec, checked: a pyglove space with at least one decision."""
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  what, fn_name = f'search space module {path!r}', path.rpartition('.')[2]
  try:
    space = fn()
  except Exception as e:  # pylint: disable=broad-except
    raise NascliError(f'{what}: function {fn_name!r} failed ({type(e).__name__}: '
                      f'{_one_line(e)})') from e
  try:
    spec = pg.dna_spec(space)
  except Exception as e:  # pylint: disable=broad-except
    raise NascliError(f'{what}: function {fn_name!r} returned {type(space).__name__}, not a '
                      f'pyglove search space ({_one_line(e)})') from e
  if not spec.decision_points:
    raise NascliError(f'{what}: function {fn_name!r} returned {type(space).__name__} with no '
                      'decision points (pg.oneof, pg.sublist_of, pg.floatv)')
  return space, spec


def load_user_search_space(path: str) -> Any:
  """Imports `pkg.module.fn` and returns `fn()`, a pyglove space (Vertex's --search_space_module).

  Only the space: `resolve_search_space` also gives what trains it.

  Args:
    path: Dotted path to a zero-argument function, e.g. `my_spaces.tiny_space`.

  Returns:
    The pyglove hyper-value the function returns.

  Raises:
    NascliError: one line naming the module or function that could not be used.
  """
  return _space_and_spec(_import_function(path), path)[0]


def _one_line(e: BaseException) -> str:
  text = ' '.join(str(e).split())
  return text if len(text) <= 200 else text[:197] + '...'
