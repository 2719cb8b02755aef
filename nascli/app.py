"""The `nascli` root command and `main()`, which turns known errors into one-line messages."""

import os
import sys
import traceback
from typing import Callable

import typer

from nascli import interrupts
from nascli.errors import NascliError

app = typer.Typer(
    name="nascli",
    help="Neural architecture search, training and TFRecord tooling on TensorFlow Model Garden.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def add_command(fn: Callable, name: str) -> None:
  """Registers `name` (Vertex's spelling) and its other spelling (dashes or underscores) as alias."""
  app.command(name)(fn)
  alias = name.replace("_", "-") if "_" in name else name.replace("-", "_")
  if alias != name:
    app.command(alias, hidden=True)(fn)


def _register_commands() -> None:
  # pylint: disable=g-import-not-at-top
  from nascli.commands import build, convert_data, eval as eval_command, export, list_trials
  from nascli.commands import search, search_in_local, train
  add_command(convert_data.convert_data, "convert-data")
  add_command(train.train, "train")
  add_command(eval_command.evaluate, "eval")
  add_command(export.export, "export")
  add_command(search_in_local.search_in_local, "search_in_local")
  add_command(search.search, "search")
  add_command(list_trials.list_trials, "list_trials")
  add_command(build.build, "build")


_register_commands()


def _one_line(message: str) -> str:
  return " ".join(str(message).split())


def _quiet_libraries() -> None:
  """TensorFlow and Model Garden log at INFO by default; nascli reports progress itself."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  try:
    from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
    absl_logging.set_verbosity(absl_logging.WARNING)
  except ImportError:
    pass


# Options that take several values after one flag, as Vertex's argparse `nargs="*"` did.
_MULTI_VALUE_OPTIONS = ("--search_docker_flags", "--search-docker-flags")


def _expand_multi_value(argv: list[str]) -> list[str]:
  """`--search_docker_flags a=1 b=2` -> `--search_docker_flags a=1 --search_docker_flags b=2`."""
  out, current = [], None
  for token in argv:
    if token in _MULTI_VALUE_OPTIONS:
      current = token
      continue
    if current and not token.startswith("-"):
      out += [current, token]
      continue
    current = None
    out.append(token)
  return out


def _interrupt_behind(error: BaseException) -> KeyboardInterrupt | None:
  seen = set()
  while error is not None and id(error) not in seen:
    if isinstance(error, KeyboardInterrupt):
      return error
    seen.add(id(error))
    error = error.__cause__ or error.__context__
  return None


def _report_interrupt(error: KeyboardInterrupt, debug: bool) -> int:
  if debug:
    traceback.print_exception(error)
  print(interrupts.message(error), file=sys.stderr)
  return interrupts.exit_code(error)


def main(argv: list[str] | None = None) -> int:
  """Entry point of the console script and `python -m nascli`; returns the exit code."""
  _quiet_libraries()
  argv = _expand_multi_value(list(sys.argv[1:] if argv is None else argv))
  debug = os.environ.get("NASCLI_DEBUG") == "1"
  try:
    # Standalone mode lets Typer print usage errors itself (exit code 2); what it does not handle
    # reaches the mapping below.
    with interrupts.handled():
      app(args=argv, prog_name="nascli", standalone_mode=True)
    return 0
  except SystemExit as e:
    interrupt = _interrupt_behind(e)  # Typer turns KeyboardInterrupt into a silent exit 130
    if interrupt is None:
      return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return _report_interrupt(interrupt, debug)
  except KeyboardInterrupt as e:  # interrupts.Interrupted too: SIGINT and SIGTERM
    return _report_interrupt(e, debug)
  except NascliError as e:
    if debug:
      traceback.print_exc()
    print(f"Error: {_one_line(e)}", file=sys.stderr)
    return 1
  except OSError as e:
    if debug:
      traceback.print_exc()
    culprit = f": {e.filename}" if getattr(e, "filename", None) else ""
    print(f"Error: {_one_line(e.strerror or e)}{culprit}", file=sys.stderr)
    return 1
  except Exception as e:  # pylint: disable=broad-except
    if debug:
      traceback.print_exc()
    print(f"Error: unexpected {type(e).__name__}: {_one_line(e)} (set NASCLI_DEBUG=1 for the"
          " traceback)", file=sys.stderr)
    return 1


def run() -> None:
  from nascli import process_exit  # pylint: disable=g-import-not-at-top
  process_exit.finish(main())
