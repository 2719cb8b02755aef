"""How nascli's help is laid out: one spelling per option, names never cut, fixed usage lines.

Typer renders the help; these command classes adjust what it renders. Matching of the dashed
spellings is the root context's `token_normalize_func` (nascli/commands/options.py).
"""

import difflib
import functools
import re
from typing import Any, Callable, Optional, Sequence

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from nascli.commands.options import normalize_option
from nascli.errors import NascliError

# The values Vertex's `vertex_nas_cli.py` users give a boolean flag (`--use_cache=false`).
TRUE_WORDS = ("true", "True", "1")
FALSE_WORDS = ("false", "False", "0")


class UsageError(NascliError):
  """A value outside an option's choices (`--mode bogus`): one line, exit 2, as Click's usage
  errors; `NascliCommand.invoke` makes one of a NascliError naming the command's own option."""


def _unique(opts: list[str], taken: set[str]) -> list[str]:
  out = []
  for opt in map(normalize_option, opts):
    if opt not in taken:
      taken.add(opt)
      out.append(opt)
  return out


def _options_table_class(table_class: type) -> type:
  """Typer's options table, laid out so that option names and types are never cut.

  Typer gives each row six cells (long names, short names, negative long and short names,
  type, help; a required marker first when an option is required) and lets Rich share the
  width among them all; at 80 columns a long name (`--retrain_use_search_job_checkpoint`) is
  then cut to `--retrain_use_search_job_c…`. Here the names share one cell (a negative flag on
  a line of its own), names and type keep their full width, and the help, the last column,
  takes what is left, folding a word too long for it rather than cutting it. Tables that
  declare their columns (the commands panel) are left as Typer makes them.
  """

  class OptionsTable(table_class):

    def add_row(self, *cells, **kwargs):
      if len(cells) in (6, 7) and all(hasattr(c, "plain") for c in cells[-6:-2]):
        *required, long, short, negative, negative_short, types, help_cell = cells
        names = long.copy()
        for text, sep in ((short, " "), (negative, "\n"), (negative_short, " ")):
          if text.plain:
            names.append(sep if names.plain else "")
            names.append(text)
        cells = (*required, names, types, help_cell)
      if not self.columns:
        for i in range(len(cells)):
          last = i == len(cells) - 1
          self.add_column(no_wrap=not last, ratio=1 if last else None,
                          overflow="fold" if last else "ellipsis")
      for item in getattr(cells[-1], "renderables", ()):  # the help: Texts in a Columns
        if hasattr(item, "overflow"):
          item.overflow = "fold"
      super().add_row(*cells, **kwargs)

  return OptionsTable


class _HelpLayout:
  """Rich help with the options table of `_options_table_class`."""

  def format_help(self, ctx, formatter) -> None:
    from typer import rich_utils  # pylint: disable=g-import-not-at-top
    typer_table = rich_utils.Table
    typer_padding = rich_utils.Padding
    rich_utils.Table = _options_table_class(typer_table)
    rich_utils.Padding = _UsageFirst(typer_padding)
    try:
      super().format_help(ctx, formatter)
    finally:
      rich_utils.Table, rich_utils.Padding = typer_table, typer_padding


class _UsageFirst:
  """Typer pads the usage line by one line above it: the help's first line would be blank, and
  `nascli --help | head -1` would show nothing. The usage line is the first line here."""

  def __init__(self, padding: type):
    self.padding, self.first = padding, True

  def __call__(self, renderable, pad=(0, 0, 0, 0), **kwargs):
    if self.first and pad == 1:
      pad = (0, 1, 1, 1)
    self.first = False
    return self.padding(renderable, pad, **kwargs)


class NascliGroup(_HelpLayout, TyperGroup):
  """The root command."""

  def resolve_command(self, ctx, args):
    """Typer suggests close command names among all of them, the hidden aliases too
    (`'search_in_local', 'search-in-local'`): suggest only the names help shows."""
    try:
      return super().resolve_command(ctx, args)
    except typer.TyperException as e:  # Typer's own (vendored) click UsageError
      if args and str(getattr(e, "message", "")).startswith("No such command"):
        shown = [name for name, command in self.commands.items() if not command.hidden]
        matches = difflib.get_close_matches(args[0], shown)
        e.message = f"No such command {args[0]!r}." + (
            f" Did you mean {', '.join(repr(m) for m in matches)}?" if matches else "")
      raise


class NascliCommand(_HelpLayout, TyperCommand):
  """A command whose help shows one spelling per option, and optional fixed usage lines.

  Options are shown (and registered) under their underscore names only: matching is through
  `token_normalize_func`, so the dashed spellings a module declares are duplicates. Positional
  arguments are shown in capitals, as their usage names.
  """

  usage_lines: tuple[str, ...] = ()
  args_hook: Optional[Callable[..., list[str]]] = None

  def __init__(self, *args: Any, **kwargs: Any):
    super().__init__(*args, **kwargs)
    for param in self.params:
      if isinstance(param, TyperArgument):
        if param.metavar is None and param.name:
          param.metavar = param.name.upper()
        continue
      taken: set[str] = set()
      param.opts = _unique(param.opts, taken)
      param.secondary_opts = _unique(param.secondary_opts, taken)

  def format_usage(self, ctx, formatter) -> None:
    if not self.usage_lines:
      # Click's convention: a required argument is NAME, an optional one [NAME] (not {NAME}).
      pieces = [re.sub(r"^\{(.+)\}", r"\1", p) for p in self.collect_usage_pieces(ctx)]
      formatter.write_usage(ctx.command_path, " ".join(pieces))
      return
    formatter.write_usage(ctx.command_path, self.usage_lines[0])
    for line in self.usage_lines[1:]:
      formatter.write_usage(ctx.command_path, line, prefix="       ")

  def parse_args(self, ctx, args: list[str]) -> list[str]:
    takes_value = frozenset(o for p in self.params if not getattr(p, "is_flag", True)
                            for o in p.opts)
    try:
      if self.args_hook is not None:
        args = self.args_hook(args, takes_value)
      args, off = bool_values_as_flags(self.params, args, takes_value)
    except typer.BadParameter as e:
      e.ctx = e.ctx or ctx  # so that the message comes with the usage line, as Click's do
      raise
    rest = super().parse_args(ctx, args)
    ctx.params.update(dict.fromkeys(off, False))
    return rest

  def invoke(self, ctx):
    """A command's check that refuses a value of one of its options (`unknown --mode 'bogus'`,
    the wording of checks.one_of) is a usage error, exit 2, like Click's own."""
    try:
      return super().invoke(ctx)
    except NascliError as e:
      if not isinstance(e, UsageError) and _refuses_own_option(str(e), self.params):
        raise UsageError(str(e)) from e
      raise


def _refuses_own_option(message: str, params: Sequence[Any]) -> bool:
  match = re.match(r"unknown (--\w+) ", message)
  return bool(match) and any(match.group(1) in getattr(p, "opts", ()) for p in params)


BOOL_WORDS = TRUE_WORDS + FALSE_WORDS


def rewrite_flags(args: Sequence[str], takes_value: frozenset[str],
                  rewrites: dict[str, Callable[[str, Optional[str]], list[str]]]) -> list[str]:
  """Each `--flag`, `--flag=VALUE` or `--flag WORD` (WORD one of BOOL_WORDS) of a flag in
  `rewrites` (underscore spelling) replaced by what its function returns for (the token as
  given, VALUE or None): one walk of the arguments, as Click will read them, for Vertex's
  boolean values of the commands' flags and of FastNN's (fastnn_options.py). An option in
  `takes_value` keeps its next argument, whatever it looks like; nothing after `--` is touched.
  """
  out: list[str] = []
  i = 0
  while i < len(args):
    token = args[i]
    i += 1
    if token == "--":
      out += args[i - 1:]
      break
    name, eq, value = token.partition("=")
    option = normalize_option(name)
    if option in takes_value and not eq:
      out += args[i - 1:i + 1]
      i += 1
      continue
    rewrite = rewrites.get(option)
    if rewrite is None:
      out.append(token)
      continue
    if not eq and i < len(args) and args[i] in BOOL_WORDS:
      value, eq = args[i], "="
      i += 1
    out += rewrite(token, value if eq else None)
  return out


def bool_values_as_flags(params: Sequence[Any], args: Sequence[str],
                         takes_value: frozenset[str] = frozenset()
                         ) -> tuple[list[str], list[str]]:
  """Vertex's `--flag=true|false|True|False|1|0` and `--flag false` for every boolean flag.

  Click's flags take no value. A true value becomes the bare flag; a false one its negative
  spelling (`--no_use_cache`, or a declared `--no_NAME`), or, for a flag that has none, is
  dropped and reported so that the caller sets the parameter to False.

  Args:
    params: the command's parameters; their boolean flags are the ones rewritten.
    args: the command's arguments, before Click parses them; nothing after `--` is touched.
    takes_value: options whose next argument is their value, left alone even if it looks like
      a flag.

  Returns:
    The rewritten arguments, and the names of the parameters a false value without a negative
    spelling turned off.

  Raises:
    typer.BadParameter: `--flag=VALUE` with another value.
  """
  negatives = {o for p in params for o in (*getattr(p, "opts", ()),
                                           *getattr(p, "secondary_opts", ()))}
  off: dict[str, bool] = {}

  def rewrite(param: Any, option: str, token: str, value: Optional[str]) -> list[str]:
    del token
    if value is not None and value not in BOOL_WORDS:
      raise typer.BadParameter(f"{value!r} is not a boolean; give {option}, or"
                               f" {option}={'|'.join(BOOL_WORDS)}", param_hint=f"'{option}'")
    negative = next(iter(param.secondary_opts), None) or (
        f"--no_{option[2:]}" if f"--no_{option[2:]}" in negatives else None)
    off.pop(param.name, None)
    if value is None or value in TRUE_WORDS:
      return [option]
    if negative:
      return [negative]
    off[param.name] = True
    return []

  rewrites = {o: functools.partial(rewrite, p, o) for p in params
              if getattr(p, "is_bool_flag", False) and p.expose_value
              for o in p.opts if o.startswith("--")}
  return rewrite_flags(args, takes_value, rewrites), list(off)
