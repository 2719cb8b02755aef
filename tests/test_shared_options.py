"""The options the search-family and latency commands share are declared once
(nascli/commands/options.py `shared`), reach every command that takes them through its real
parsing, and the docs' option tables agree with the declarations.
"""

import inspect
import pathlib
import re
import typing
from typing import Annotated, Any

import pytest
import typer
from typer.testing import CliRunner

from nascli import app as app_lib
from nascli.commands import options
from nascli.commands import search_flags
from nascli.commands.help_layout import NascliCommand

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The commands that take shared options, and the function each runs.
TAKERS = ("search_in_local", "search", "search_resume", "select_proxy_task_models",
          "search_proxy_task", "measure_proxy_task_variance", "build_latency_model")

# A command's own parameter of a shared option's name is another option (its own help or
# default): these, and no new copy of a declaration.
OWN_VARIANTS = {
    "search_resume": {"max_nas_trial", "local_output_dir", "max_parallel_nas_trial",
                      "trial_isolation", "max_trials_per_worker", "export_top_k",
                      "paused_trials_per_worker", "max_trial_retries", "ray_address"},
    "select_proxy_task_models": {"max_nas_trial"},
    "search_proxy_task": {"seed"},
    "measure_proxy_task_variance": {"seed", "max_nas_trial"},
    "build_latency_model": {"latency_input_size", "local_output_dir", "as_json"},
}


def _root() -> Any:
  return typer.main.get_command(app_lib.app)


def _callback(command: str):
  import importlib  # pylint: disable=g-import-not-at-top
  return getattr(importlib.import_module(f"nascli.commands.{command}"), command)


def _shared_taken(command: str) -> dict[str, inspect.Parameter]:
  """The command's parameters that are a shared declaration (its annotation, the same object)."""
  return {name: p for name, p in inspect.signature(_callback(command)).parameters.items()
          if name in options.SHARED and p.annotation is options.SHARED[name].annotation}


@pytest.mark.parametrize("command", TAKERS)
def test_a_shared_option_is_taken_from_its_one_declaration(command):
  params = inspect.signature(_callback(command)).parameters
  copies = {name for name, p in params.items() if name in options.SHARED
            and p.annotation is not options.SHARED[name].annotation}
  assert copies == OWN_VARIANTS.get(command, set())
  assert len(_shared_taken(command)) >= 6


def test_the_searches_take_every_search_flag_and_differ_only_where_declared():
  local, ray = _shared_taken("search_in_local"), _shared_taken("search")
  assert set(local) == set(search_flags.SEARCH)
  assert set(ray) == set(search_flags.SEARCH) | set(search_flags.RAY)
  assert len(search_flags.RAY) == 8
  differing = {n: (local[n].default, ray[n].default) for n in local
               if local[n].default != ray[n].default}
  assert differing == {"max_parallel_nas_trial": (1, 2)}
  assert ray["ray_address"].default == "auto"
  assert options.SHARED["ray_address"].default is None  # the proxy commands: on this machine


def _value_for(param: Any, declared: inspect.Parameter) -> tuple[list[str], object]:
  """Arguments that give `param` a value other than its default, and the value expected."""
  name = param.opts[0]
  if param.is_flag:
    return ([f"{name}=false"], False) if param.default else ([name], True)
  kind = typing.get_args(declared.annotation)[0]  # Annotated[kind, Option]
  kind = next((k for k in typing.get_args(kind) if k is not type(None)), kind)  # Optional
  listed = typing.get_origin(kind) is list
  kind = typing.get_args(kind)[0] if listed else kind
  value = {int: 7, float: 7.5}.get(kind, f"given-{param.name}")
  if listed:
    return [name, str(value), name, f"{value}2"], [value, f"{value}2"]
  return [name, str(value)], value


class _Recorded(Exception):
  pass


@pytest.fixture(name="recorder")
def _recorder(monkeypatch, tmp_path):
  """Replaces the first check each command runs on its parameters with one that keeps them."""
  seen = {}

  def record(values, *_):
    seen.update(values)
    raise _Recorded("recorded")

  for name in ("check", "check_counts", "check_space"):
    monkeypatch.setattr(search_flags, name, record)
  from nascli.proxy import jobs  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(jobs, "job_settings", lambda *_: {"search_space": "mnasnet"})
  seen["_tmp"] = tmp_path
  return seen


_REQUIRED = {"search_resume": ["--previous_job_dir", "JOB", "--max_nas_trial", "9"],
             "search_proxy_task": ["--proxy_task_model_selection_dir", "."]}


@pytest.mark.parametrize("command", TAKERS)
def test_every_shared_option_reaches_the_command_through_its_parsing(command, recorder):
  """The real command line (nascli.app.main): each shared option the command takes given a
  value other than its default, and that value, typed, in what the command checks."""
  click_command = _root().commands[command]
  taken = _shared_taken(command)
  argv, expected = [command, *_REQUIRED.get(command, [])], {}
  for param in click_command.params:
    if param.name in taken:
      args, value = _value_for(param, taken[param.name])
      argv += args
      expected[param.name] = value
  assert len(expected) == len(taken)
  assert app_lib.main(argv) == 1  # the recorder's refusal
  assert {name: recorder[name] for name in expected} == expected


@pytest.mark.parametrize("command", TAKERS)
def test_an_option_left_out_has_its_declared_default(command, recorder):
  assert app_lib.main([command, *_REQUIRED.get(command, [])]) == 1
  defaults = {n: p.default for n, p in _shared_taken(command).items()}
  assert {name: recorder[name] for name in defaults} == defaults


def test_a_bad_shared_value_is_one_line_naming_the_flag_in_every_command(capsys):
  """Unpatched: --trial_timeout's parser is the declaration's, in every command that takes it."""
  for command in ("search_in_local", "search", "search_resume", "select_proxy_task_models",
                  "search_proxy_task", "measure_proxy_task_variance"):
    code = app_lib.main([command, *_REQUIRED.get(command, []), "--trial_timeout", "-3"])
    err = capsys.readouterr().err
    assert code != 0, command
    assert "--trial_timeout must be a positive number of seconds, got -3" in err, (command, err)


def test_positional_arguments_survive_the_declaration():
  """Typer's #1898: a signature-rewriting wrapper lost a command's positional arguments.
  `takes` wraps nothing: a positional argument and a command's own option bind as before."""
  app = typer.Typer()
  got = {}

  @options.takes("seed", search_flags.SPACE)
  def toy(job_dir: Annotated[str, typer.Argument()], limit: int = 3, **shared) -> None:
    got.update(shared, job_dir=job_dir, limit=limit)

  app.command(cls=NascliCommand)(toy)
  app.command("other")(lambda: None)
  result = CliRunner().invoke(
      app, ["toy", "JOB", "--limit", "4", "--seed", "5", "--prebuilt_search_space", "spinenet"])
  assert result.exit_code == 0, result.output
  assert got == {"job_dir": "JOB", "limit": 4, "seed": 5,
                 "prebuilt_search_space": "spinenet", "search_space_module": None}
  assert list(inspect.signature(toy).parameters) == [
      "job_dir", "limit", "seed", "prebuilt_search_space", "search_space_module"]


def test_takes_refuses_an_undeclared_name_and_a_stray_default():
  with pytest.raises(ValueError, match="no shared option bogus"):
    options.takes("bogus")(lambda **shared: None)
  with pytest.raises(ValueError, match="defaults of options it does not take"):
    options.takes("seed", max_nas_trial=3)(lambda **shared: None)
  with pytest.raises(ValueError, match="declared twice"):
    options.shared("seed", int, 0, help="again")


# --------------------------------------------------------------------------- docs' tables

_UNSET_WORDS = ("", "off", "unset", "none", "no limit")


def _table_rows(page: pathlib.Path) -> list[tuple[list[str], str]]:
  """(the options, the default cell) of each row of the page's "Options" table(s)."""
  rows, in_options = [], False
  for line in page.read_text(encoding="utf-8").splitlines():
    heading = re.match(r"(#+)\s+(.*)", line)
    if heading:
      in_options = heading.group(2).startswith("Options")
      continue
    cells = [c.strip() for c in line.split("|")[1:-1]] if line.startswith("|") else []
    if in_options and len(cells) >= 3 and cells[1] not in ("default", "---"):
      flags = re.findall(r"`(--[a-z][a-z0-9_]*)`", cells[0])
      if flags:
        rows.append((flags, cells[1]))
  return rows


def _agrees(cell: str, param: Any) -> bool:
  """Whether a docs default cell states `param`'s default: a literal (a number, a `token`)
  for a default value; on/off for a flag; for an unset default, what unset means (prose), never
  a bare number."""
  default, number = param.default, re.fullmatch(r"-?\d+(\.\d+)?", cell)
  if param.required:
    return cell == "required"
  if isinstance(default, bool):
    return cell == ("on" if default else "off") or (not default and cell == "")
  if default is None:
    return not number and cell != "on"
  if number:
    return float(cell) == float(default)
  return cell == f"`{default}`"


@pytest.mark.parametrize("command", ["search_in_local", "search", "search_resume",
                                     "build_latency_model"])
def test_docs_option_tables_state_the_declared_defaults(command):
  params = {p.opts[0]: p for p in _root().commands[command].params if p.opts}
  rows = _table_rows(ROOT / "docs" / "commands" / f"{command}.md")
  assert len(rows) >= 5
  problems = []
  for flags, cell in rows:
    missing = [f for f in flags if f not in params]
    if missing:
      problems.append(f"{missing}: no such option")
    elif len(flags) == 1 and not _agrees(cell, params[flags[0]]):
      problems.append(f"{flags[0]}: docs say {cell!r}, the declaration"
                      f" {params[flags[0]].default!r}")
    elif len(flags) > 1 and cell in _UNSET_WORDS:
      problems += [f"{f}: docs say {cell!r}" for f in flags
                   if params[f].default not in (None, False)]
  assert not problems, f"docs/commands/{command}.md: " + "; ".join(problems)


def test_the_latency_commands_share_the_target_device_declaration(capsys, monkeypatch):
  """build_latency_model and run_latency_calculator_local time on the same runtimes: one
  declaration (help, spelling), each command's default, each command's check of the value
  (the calculator's bad values: tests/test_latency_calculator.py)."""
  declared = options.SHARED["target_device_type"]
  build = inspect.signature(_callback("build_latency_model")).parameters["target_device_type"]
  calculator = inspect.signature(_callback("run_latency_calculator_local")).parameters[
      "target_device_type"]
  assert build.annotation is calculator.annotation is declared.annotation
  assert (build.default, calculator.default) == ("cpu-tflite", "cpu")
  assert app_lib.main(["build_latency_model", "--target_device_type", "cpu_tflite"]) == 2
  assert "unknown --target_device_type 'cpu_tflite' (did you mean 'cpu-tflite'?)" in (
      capsys.readouterr().err)
  from nascli import latency_calculator  # pylint: disable=g-import-not-at-top
  seen = []

  def record(args):
    seen.append(args.target_device_type)
    raise _Recorded("recorded")

  monkeypatch.setattr(latency_calculator, "check_args", record)
  for given in ([], ["--target_device_type", "gpu"]):
    assert app_lib.main(["run_latency_calculator_local", "--local_output_dir", "JOB", *given]) == 1
  assert seen == ["cpu", "gpu"]
