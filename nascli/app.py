"""The `nascli` root command and `main()`, which turns known errors into one-line messages."""

import os
import sys
import traceback
from typing import Annotated, Callable, Optional

import typer

from nascli import interrupts, runtime
from nascli.commands import examples
from nascli.commands.help_layout import NascliCommand, NascliGroup, UsageError
from nascli.commands.options import normalize_token
from nascli.errors import NascliError

app = typer.Typer(
    name="nascli",
    cls=NascliGroup,
    help="Neural architecture search, training and TFRecord tooling on TensorFlow Model Garden.",
    epilog=examples.epilog("nascli"),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    # `--flag-name` and `--flag_name` are one option; help shows the underscore spelling.
    context_settings={"help_option_names": ["-h", "--help"],
                      "token_normalize_func": normalize_token},
)


def _package_version() -> str:
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  try:
    return metadata.version("nascli")
  except metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
    from nascli import __version__  # pylint: disable=g-import-not-at-top
    return __version__


def _print_version(value: bool) -> None:
  if value:
    print(f"nascli {_package_version()}")
    raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[Optional[bool], typer.Option(
        "--version", "-V", is_eager=True, callback=_print_version,
        help="Print nascli's version and exit.")] = None,
) -> None:
  del version


def _short_help(fn: Callable) -> str | None:
  """The docstring's first paragraph on one line (Rich mode keeps a docstring's line breaks)."""
  first = (fn.__doc__ or "").strip().split("\n\n")[0]
  return " ".join(first.split()) or None


def add_command(fn: Callable, name: str, panel: str | None = None) -> None:
  """Registers `name` (Vertex's spelling) in `panel` of the root help, and its other spelling
  (dashes or underscores) as a hidden alias; examples and usage lines from `examples`."""
  cls = type("Command", (NascliCommand,), {
      "usage_lines": examples.USAGE.get(name, ()),
      "args_hook": staticmethod(fn.args_hook) if hasattr(fn, "args_hook") else None})
  app.command(name, cls=cls, epilog=examples.epilog(name), short_help=_short_help(fn),
              rich_help_panel=panel)(fn)
  alias = name.replace("_", "-") if "_" in name else name.replace("-", "_")
  if alias != name:
    app.command(alias, cls=cls, hidden=True, epilog=examples.epilog(name))(fn)


_DATA_AND_MODELS = "Data and models"
_SEARCH = "Architecture search"
_IMAGES = "Container images"


def _register_commands() -> None:
  """In the order of the workflow: data, train, evaluate, export; then search; then images."""
  # pylint: disable=g-import-not-at-top
  from nascli.commands import build, convert_data, eval as eval_command, export, list_trials
  from nascli.commands import measure_proxy_task_variance, search, search_in_local
  from nascli.commands import report, search_resume
  from nascli.commands import run_latency_calculator_local
  from nascli.commands import build_latency_model
  from nascli.commands import search_proxy_task, select_proxy_task_models, train
  add_command(convert_data.convert_data, "convert-data", _DATA_AND_MODELS)
  add_command(train.train, "train", _DATA_AND_MODELS)
  add_command(eval_command.evaluate, "eval", _DATA_AND_MODELS)
  add_command(export.export, "export", _DATA_AND_MODELS)
  add_command(search_in_local.search_in_local, "search_in_local", _SEARCH)
  add_command(search.search, "search", _SEARCH)
  add_command(search_resume.search_resume, "search_resume", _SEARCH)
  add_command(list_trials.list_trials, "list_trials", _SEARCH)
  add_command(report.report, "report", _SEARCH)
  add_command(run_latency_calculator_local.run_latency_calculator_local,
              "run_latency_calculator_local", _SEARCH)
  add_command(build_latency_model.build_latency_model, "build_latency_model", _SEARCH)
  add_command(select_proxy_task_models.select_proxy_task_models, "select_proxy_task_models",
              _SEARCH)
  add_command(search_proxy_task.search_proxy_task, "search_proxy_task", _SEARCH)
  add_command(measure_proxy_task_variance.measure_proxy_task_variance,
              "measure_proxy_task_variance", _SEARCH)
  add_command(build.build, "build", _IMAGES)


_register_commands()


def _one_line(message: str) -> str:
  return " ".join(str(message).split())


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


def _report_interrupt(error: BaseException, debug: bool) -> int:
  if debug:
    traceback.print_exception(error)
  print(interrupts.message(error), file=sys.stderr)
  return interrupts.exit_code(error)


def main(argv: list[str] | None = None) -> int:
  """Entry point of the console script and `python -m nascli`; returns the exit code."""
  runtime.quiet_libraries()
  argv = _expand_multi_value(list(sys.argv[1:] if argv is None else argv))
  debug = runtime.debug()
  try:
    # Standalone mode lets Typer print usage errors itself (exit code 2); what it does not handle
    # reaches the mapping below.
    with interrupts.handled():
      app(args=argv, prog_name="nascli", standalone_mode=True)
    sys.stdout.flush()
    return 0
  except BrokenPipeError:
    return _stdout_closed()
  except SystemExit as e:
    if isinstance(e.__context__, BrokenPipeError):  # Rich and Typer exit 1 on it
      return _stdout_closed()
    interrupt = _interrupt_behind(e)  # Typer turns KeyboardInterrupt into a silent exit 130
    if interrupt is None:
      return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return _report_interrupt(interrupt, debug)
  except KeyboardInterrupt as e:  # interrupts.Interrupted too: SIGINT and SIGTERM
    return _report_interrupt(e, debug)
  except Exception as e:  # pylint: disable=broad-except
    if interrupts.caused(e):  # a signal that came back as another library's error
      return _report_interrupt(e, debug)
    return _report_error(e, debug)


# What a shell reports for a command killed by SIGPIPE (128 + 13), as `yes | head -1` gives.
STDOUT_CLOSED_EXIT = 141


def _stdout_closed() -> int:
  """stdout's reader went away (`nascli --help | head -1`): what it read stays printed, nothing
  more is said, and what is still buffered goes nowhere instead of failing at exit."""
  try:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
  except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
    pass
  return STDOUT_CLOSED_EXIT


def _report_error(error: Exception, debug: bool) -> int:
  """Known errors as one line naming the culprit, exit 1 (2 for a usage error, as Click's);
  anything else says it is unexpected."""
  if debug:
    traceback.print_exception(error)
  if isinstance(error, NascliError):
    print(f"Error: {_one_line(error)}", file=sys.stderr)
    return 2 if isinstance(error, UsageError) else 1
  elif isinstance(error, OSError):
    culprit = f": {error.filename}" if getattr(error, "filename", None) else ""
    print(f"Error: {_one_line(error.strerror or error)}{culprit}", file=sys.stderr)
  else:
    print(f"Error: unexpected {type(error).__name__}: {_one_line(error)} (set NASCLI_DEBUG=1"
          " for the traceback)", file=sys.stderr)
  return 1


def run() -> None:
  runtime.finish(main())
