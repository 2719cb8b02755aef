"""How nascli's help is laid out: one spelling per option, names never cut, fixed usage lines.

Typer renders the help; these command classes adjust what it renders. Matching of the dashed
spellings is the root context's `token_normalize_func` (nascli/commands/options.py).
"""

import difflib
import re
from typing import Any, Callable, Optional

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from nascli.commands.options import normalize_option


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
    rich_utils.Table = _options_table_class(typer_table)
    try:
      super().format_help(ctx, formatter)
    finally:
      rich_utils.Table = typer_table


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
    if self.args_hook is not None:
      takes_value = frozenset(o for p in self.params if not getattr(p, "is_flag", True)
                              for o in p.opts)
      try:
        args = self.args_hook(args, takes_value)
      except typer.BadParameter as e:
        e.ctx = e.ctx or ctx  # so that the message comes with the usage line, as Click's do
        raise
    return super().parse_args(ctx, args)
