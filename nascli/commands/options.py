"""Option spellings shared by all commands, and the options several commands share, each
declared once.

Help shows one name per option, `--flag_name` (Vertex AI NAS and Model Garden spell it so); the
dashed `--flag-name` is accepted too, because the root command's `token_normalize_func`
(`normalize_token`) maps every option token to underscores before Click looks it up. Click
applies it to option names only (the part before `=`), never to values, and not after `--`.

Shared options. Typer has no way to share an option between commands (its issues #153, #154,
#264), and its `Annotated` aliases carry everything but the default (`typer.Option(default)`
in `Annotated` is refused): a command listing `seed: Seed = 0` repeats the default, and forty
such lines repeat the list. So an option several commands take is declared once with
`shared(name, type, default, help=...)` (the alias for its annotation and its default,
registered under its name), and a command names the ones it takes with `@takes(...)`:
the decorator sets the function's `__signature__` and `__annotations__` (which Typer reads)
to its own parameters plus the shared ones, and the function receives the shared ones in
`**shared`. Unlike the `__signature__`-rewriting wrapper of Typer's #1898, nothing wraps the
function: Typer calls it by keyword with every parameter, its own (positional arguments
included) bind as Python binds them, so no argument is lost; `inspect.signature` (the tests'
defaults, the docs' option tables) reads the same declaration.
"""

import inspect
from typing import Annotated, Any, Callable, Union

import typer

_KEYWORD = inspect.Parameter.KEYWORD_ONLY
SHARED: dict[str, inspect.Parameter] = {}  # name -> its one declaration (see `shared`)


def flag(name: str, *short: str) -> list[str]:
  """The declared names of an option: `--name` (underscores) and any short names."""
  return [f"--{name}", *short]


def normalize_token(name: str) -> str:
  """An option's name without its prefix (`flag-name`) as it is registered (`flag_name`)."""
  return name.replace("-", "_")


def normalize_option(opt: str) -> str:
  """`--flag-name` -> `--flag_name`; short options (`-h`) are left as they are."""
  return "--" + normalize_token(opt[2:]) if opt.startswith("--") else opt


def shared(name: str, kind: Any, default: Any, *, spelling: str | None = None,
           **option: Any) -> Any:
  """Declares the shared option `name` once: its type, default, Vertex spelling (`--name`, or
  `--spelling` where the parameter's name differs, e.g. `as_json` for `--json`), help and any
  other `typer.Option` setting. Returns its `Annotated` alias, for a command that declares a
  parameter of its own with it (another default, or placed among its own)."""
  if name in SHARED:
    raise ValueError(f"option {name} is declared twice")
  alias = Annotated[kind, typer.Option(*flag(spelling or name), **option)]
  SHARED[name] = inspect.Parameter(name, _KEYWORD, default=default, annotation=alias)
  return alias


Layout = Union[str, tuple[str, ...]]


def takes(*layout: Layout, **defaults: Any) -> Callable[[Callable], Callable]:
  """The shared options a command takes, in the order its help lists them.

  Args:
    *layout: option names, or tuples of them (a group declared beside its options); a name may
      be one of the function's own parameters, which is then placed there (a command's own
      help or default for a shared name wins). The function's own parameters the layout does
      not name come first, in their order (positional arguments among them).
    **defaults: this command's default of a shared option where it differs (e.g. `search` runs
      2 trials at once on a cluster, `search_in_local` 1).

  Returns:
    A decorator that sets the function's signature and annotations; the function itself is
    returned, unwrapped, and receives the shared options in its `**` parameter.
  """
  names = [n for item in layout for n in ((item,) if isinstance(item, str) else item)]

  def decorate(fn: Callable) -> Callable:
    own = {p.name: p.replace(kind=_KEYWORD) for p in inspect.signature(fn).parameters.values()
           if p.kind is not inspect.Parameter.VAR_KEYWORD}
    params = [p for name, p in own.items() if name not in names]
    for name in names:
      if name in own:
        params.append(own[name])
      elif name in SHARED:
        param = SHARED[name]
        params.append(param.replace(default=defaults.pop(name)) if name in defaults else param)
      else:
        raise ValueError(f"{fn.__name__}: no shared option {name} (options.shared declares"
                         " them)")
    if defaults:
      raise ValueError(f"{fn.__name__}: defaults of options it does not take: {sorted(defaults)}")
    if len({p.name for p in params}) != len(params):
      raise ValueError(f"{fn.__name__}: an option named twice in {names}")
    fn.__signature__ = inspect.Signature(params)
    fn.__annotations__ = {p.name: p.annotation for p in params
                          if p.annotation is not inspect.Parameter.empty}
    return fn

  return decorate


def given(scope: dict[str, Any]) -> dict[str, Any]:
  """A `@takes` command's parameters as one dict (its `locals()` on entry: its own parameters
  and its `**shared`), as the checks of search_flags and ray_flags read them."""
  scope = dict(scope)
  return {**scope.pop("shared", {}), **scope}
