"""Help a person can use: one spelling per option, nothing cut at 80 columns, types and nascli's
defaults, examples that parse, `--version`, and both spellings still accepted."""

import os
import re
import shlex
import subprocess
import sys

import pytest
import typer

from nascli.app import app
from nascli.commands import examples, fastnn_options

COMMANDS = ("convert-data", "train", "eval", "export", "search_in_local", "search",
            "search_resume", "list_trials", "report", "run_latency_calculator_local",
            "build_latency_model", "select_proxy_task_models", "search_proxy_task",
            "measure_proxy_task_variance", "build")
HIDDEN_ALIASES = ("convert_data", "search-in-local", "search-resume", "list-trials", "select-proxy-task-models",
                  "search-proxy-task", "measure-proxy-task-variance",
                  "run-latency-calculator-local", "build-latency-model")


def _root():
  group = typer.main.get_command(app)
  return group, group.make_context("nascli", ["--help"], resilient_parsing=True)


def parse(command: str, *args: str) -> dict:
  """What Click makes of `nascli COMMAND ARGS` (the command's parameters), running nothing."""
  group, root = _root()
  cmd = group.get_command(root, command)
  return cmd.make_context(command, list(args), parent=root).params


def visible_options(command: str) -> list[str]:
  group, root = _root()
  cmd = group.get_command(root, command)
  return [o for p in cmd.get_params(root) if not getattr(p, "hidden", False)
          for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))
          if o.startswith("--")]


def help_text(cli, monkeypatch, columns: int, *command: str, raw: bool = False) -> str:
  """The help of `nascli COMMAND` at this width; without `raw`, Rich's padding stripped."""
  monkeypatch.setenv("COLUMNS", str(columns))
  code, out, err = cli(*command, "--help")
  assert code == 0, err
  return out if raw else "\n".join(line.rstrip() for line in out.splitlines())


def flat(text: str) -> str:
  """A message Rich wrapped into a panel, as one line."""
  return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.mark.parametrize("command", ("",) + COMMANDS)
def test_help_at_80_columns_shows_every_option_whole_and_once(cli, monkeypatch, command):
  out = help_text(cli, monkeypatch, 80, *filter(None, [command]), raw=True)
  lines = out.splitlines()
  assert max(len(line) for line in lines) == 80  # the width really applies
  assert "…" not in out
  for opt in visible_options(command) if command else ["--version", "--help"]:
    # The whole name, not a prefix of it: nothing cut, nothing folded inside a name.
    assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", out), opt
    if "_" in opt:
      assert not re.search(rf"(?<![\w-]){re.escape(opt.replace('_', '-'))}(?![\w-])", out), opt


def test_build_example_runs_as_written(cli):
  (_, line), = examples.EXAMPLES["build"]
  code, out, err = cli(*shlex.split(line)[1:])
  assert code == 0, err
  assert out.splitlines()[0].startswith("docker build -f ")
  assert "-t us-central1-docker.pkg.dev/my-proj/nas/nas-trainer:latest" in out


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_has_examples_that_parse_and_fit(cli, monkeypatch, command):
  out = help_text(cli, monkeypatch, 80, command)
  assert "\n Examples\n" in out
  for _, line in examples.EXAMPLES[command]:
    args = shlex.split(line)
    assert args[:2] == ["nascli", command]
    parse(command, *args[2:])  # raises on an option the command does not have
    assert args[2] in out
  assert all(len(line) <= 80 for line in out.splitlines())


def test_root_help_examples_parse_and_commands_come_in_workflow_order(cli, monkeypatch):
  out = help_text(cli, monkeypatch, 80)
  for _, line in examples.EXAMPLES["nascli"]:
    args = shlex.split(line)
    parse(args[1], *args[2:])
    shown = "\n".join("   " + part for part in examples.command_lines(line))
    assert shown in out
  listed = re.findall(r"^│ (\S+) ", out, flags=re.M)
  assert [c for c in listed if not c.startswith("-")] == list(COMMANDS)
  for alias in HIDDEN_ALIASES:
    assert alias not in out
  assert out.index("Data and models") < out.index("Architecture search")


def test_convert_data_usage_shows_name_as_required_and_verify_as_the_alternative(
    cli, monkeypatch):
  out = help_text(cli, monkeypatch, 80, "convert-data")
  usage = [line.strip() for line in out.splitlines() if "nascli convert-data" in line][:2]
  assert usage == ["Usage: nascli convert-data [OPTIONS] NAME",
                   "nascli convert-data --verify DIR [--json]"]
  assert "[NAME]" not in out and "[name]" not in out


def test_required_arguments_use_clicks_notation(cli, monkeypatch):
  out = help_text(cli, monkeypatch, 80, "list_trials")
  assert "Usage: nascli list_trials [OPTIONS] JOB_DIR\n" in out


def test_fastnn_options_show_types_and_nascli_defaults(cli, monkeypatch):
  out = help_text(cli, monkeypatch, 250, "train")
  rows = {m.group(1): m.group(0) for m in re.finditer(r"(?<=^│ )(--[a-z0-9_]+)\s.*", out,
                                                      flags=re.M)}
  for option, kind in (("--batch_size", "<int>"), ("--num_classes", "<int>"),
                       ("--learning_rate", "<float>"), ("--use_fp16", "<bool>"),
                       ("--optimizer", "<choice>"), ("--decay_scheme", "<choice>"),
                       ("--learning_rate_decay_type", "<choice>"), ("--hooks", "<str>")):
    assert re.match(rf"{option}\s+{kind}\s", rows[option]), rows[option]
  assert "One of: adadelta, adagrad, adam, ftrl, momentum, sgd, rmsprop, adamweightdecay." in (
      rows["--optimizer"])
  assert "One of: '', luong234, luong5, luong10." in rows["--decay_scheme"]
  assert "Unset: the data set's (dataset_info.json), else the config's." in rows["--num_classes"]
  assert "Unset: the config's runtime.mixed_precision_dtype." in rows["--use_fp16"]
  assert "Off: --no_use_fp16." in rows["--use_fp16"]
  # FastNN's own defaults are not nascli's: none is shown as a default.
  assert not re.search(r"default:? 100\b|FastNN default|\[default: True\]", out)
  assert "--no_use_fp16 " not in out.replace("Off: --no_use_fp16.", "")  # hidden
  assert fastnn_options.PANEL in out and fastnn_options.COMPAT_PANEL in out
  assert out.index("--enable_paisoar") > out.index(fastnn_options.COMPAT_PANEL)


def test_every_fastnn_key_has_help_and_only_no_effect_keys_are_in_the_compat_panel():
  # fastnn.py imports TensorFlow; its setter table is read from the source instead.
  import ast  # pylint: disable=g-import-not-at-top
  from tf_vision.configs import fastnn_keys  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(fastnn_keys.__file__), "fastnn.py")
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  setters = next(n.value for n in tree.body if isinstance(n, ast.AnnAssign)
                 and getattr(n.target, "id", None) == "_SETTERS")
  no_effect = {k.value for k, v in zip(setters.keys, setters.values)
               if isinstance(k, ast.Constant) and isinstance(v, ast.Call)
               and getattr(v.func, "id", None) == "_no_effect"}
  assert len(no_effect) == 12
  assert fastnn_options.NO_EFFECT == no_effect
  assert set(fastnn_options.HELP) == set(fastnn_options.OPTION_KEYS)


@pytest.mark.parametrize("dashed, underscored", [
    (["--model-dir", "X"], ["--model_dir", "X"]),
    (["--model-dir=X"], ["--model_dir=X"]),
    (["--batch-size", "3", "--learning-rate=0.5"], ["--batch_size=3", "--learning_rate", "0.5"]),
    (["--no-use-fp16"], ["--no_use_fp16"]),
    (["--retrain-use-search-job-checkpoint"], ["--retrain_use_search_job_checkpoint"]),
])
def test_both_spellings_parse_to_the_same_values(dashed, underscored):
  assert parse("train", *dashed) == parse("train", *underscored)


def test_parsed_values_are_typed_and_unset_options_are_none():
  params = parse("train", "--model-dir", "runs/x", "--batch-size", "3", "--learning_rate=0.5",
                 "--optimizer", "adam", "--use-fp16")
  assert params["model_dir"] == "runs/x"
  assert (params["batch_size"], params["learning_rate"], params["optimizer"]) == (3, 0.5, "adam")
  assert params["use_fp16"] is True
  unset = [k for k in fastnn_options.OPTION_KEYS if k not in ("batch_size", "learning_rate",
                                                               "optimizer", "use_fp16")]
  assert all(params[k] is None for k in unset)


def test_fastnn_values_reach_the_command_only_when_given():
  seen = {}

  def command(model_dir: str = "", fastnn: dict | None = None):
    seen.update(model_dir=model_dir, fastnn=fastnn)

  wrapped = fastnn_options.with_fastnn_options(command)
  wrapped(model_dir="m", batch_size=3, use_fp16=None, no_use_fp16=True, num_classes=None)
  assert seen == {"model_dir": "m", "fastnn": {"batch_size": 3, "use_fp16": False}}


@pytest.mark.parametrize("args, use_fp16, no_use_fp16", [
    (["--use_fp16", "False"], None, True),  # FastNN's spelling, with a value
    (["--use-fp16=false"], None, True),
    (["--use_fp16", "1"], True, False),
    (["--use_fp16"], True, False),
    (["--use_fp16", "--batch_size", "2"], True, False),
])
def test_fastnn_booleans_take_flags_and_fastnn_values(args, use_fp16, no_use_fp16):
  params = parse("train", *args)
  assert (params["use_fp16"], params["no_use_fp16"]) == (use_fp16, no_use_fp16)


def test_values_are_never_renamed():
  params = parse("train", "--params-override", "--use-fp16=False", "--config-file", "a-b.yaml")
  assert params["params_override"] == "--use-fp16=False"
  assert params["config_file"] == ["a-b.yaml"]
  assert params["use_fp16"] is None and params["no_use_fp16"] is False
  assert parse("build", "--project-id", "my-proj", "--region", "us-central1", "--no-use-cache",
               "--no-push")["use_cache"] is False


def test_unknown_option_still_gets_clicks_message_with_suggestions(cli):
  code, out, err = cli("train", "--model-dri", "x")
  assert code == 2 and out == ""
  assert "No such option: --model_dri (Possible options: --mode, --model, --model_dir)" in (
      flat(err))
  code, _, err = cli("train", "--use_fp16=maybe")
  assert code == 2
  assert "key 'use_fp16' must be True/False/true/false/1/0, got 'maybe'" in flat(err)
  assert err.startswith("Usage: nascli train [OPTIONS]\n")


def test_version_and_help_do_not_import_tensorflow():
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  script = ("import sys; from nascli.app import main; code = main(sys.argv[1:]);"
            " print('tensorflow' in sys.modules); sys.exit(code)")
  env = dict(os.environ, COLUMNS="80")
  for args in (["--version"], ["-V"], ["--help"], ["train", "--help"]):
    run = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                         env=env, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "False", args
    if args[0] in ("--version", "-V"):
      assert run.stdout.splitlines() == [f"nascli {metadata.version('nascli')}", "False"]


def test_a_mistyped_command_is_told_the_shown_names_only():
  """Hidden aliases (`search-in-local`) stay out of the did-you-mean, as out of the help."""
  proc = subprocess.run([sys.executable, "-m", "nascli", "serch_in_local"], capture_output=True,
                        text=True, check=False, env=dict(os.environ, COLUMNS="200"))
  assert proc.returncode == 2
  assert "No such command 'serch_in_local'. Did you mean 'search_in_local'?" in proc.stderr
  assert "search-in-local" not in proc.stderr


def _boolean_flags():
  """(command, option, its default) for every boolean flag of every command, from the commands
  themselves."""
  group, root = _root()
  for command in COMMANDS:
    for p in group.get_command(root, command).get_params(root):
      if getattr(p, "is_bool_flag", False) and p.expose_value and not p.hidden:
        yield command, p.name, p.opts[0], p.default


def test_every_boolean_flag_takes_vertexs_values():
  """`--use_prebuilt_trainer=True`, `--use_cache=false`, `--overwrite true` as Vertex's users
  type them, and the bare flag, for every boolean of every command."""
  required = {"build": ["--project_id", "p", "--region", "r"], "export": ["--model_dir", "m"],
              "convert-data": ["digits"], "list_trials": ["job"],
              "search_proxy_task": ["--proxy_task_model_selection_dir", "m"],
              "search_resume": ["--previous_job_dir", "p", "--max_nas_trial", "2"]}
  spellings = [([], True)] + [([f"={w}"], True) for w in ("true", "True", "1")] + [
      ([f"={w}"], False) for w in ("false", "False", "0")] + [
          ([" ", "true"], True), ([" ", "False"], False), ([" ", "0"], False)]
  group, root = _root()
  flags = list(_boolean_flags())
  assert len(flags) >= 20 and ("search_in_local", "use_prebuilt_trainer",
                               "--use_prebuilt_trainer", True) in flags
  for command, name, option, _ in flags:
    cmd = group.get_command(root, command)
    for words, want in spellings:
      args = [option + "".join(words)] if words[:1] != [" "] else [option, words[1]]
      params = cmd.make_context(command, [*required.get(command, []), *args], parent=root).params
      if name in fastnn_options.BOOL_KEYS:  # FastNN's three states: unset, on, off
        got = False if params[f"no_{name}"] else params[name]
      else:
        got = params[name]
      assert got is want, (command, args)


def test_a_false_boolean_value_turns_off_a_flag_that_has_no_negative():
  assert parse("search_in_local", "--use_prebuilt_trainer=False")["use_prebuilt_trainer"] is False
  assert parse("search_in_local")["use_prebuilt_trainer"] is True
  # The last one given wins, as for any option.
  assert parse("search_in_local", "--overwrite=false", "--overwrite")["overwrite"] is True
  assert parse("search_in_local", "--overwrite", "--overwrite=0")["overwrite"] is False
  # A value that only looks like a bool, given to an option that takes a value, is left alone.
  assert parse("list_trials", "job", "--status", "--json")["status"] == ["--json"]


def test_a_bad_boolean_value_is_a_usage_error_naming_the_flag(cli):
  code, out, err = cli("search_in_local", "--overwrite=maybe")
  assert (code, out) == (2, "")
  assert err.startswith("Usage: nascli search_in_local [OPTIONS]\n")
  assert ("Invalid value for '--overwrite': 'maybe' is not a boolean; give --overwrite, or"
          " --overwrite=true|True|1|false|False|0") in flat(err)


def test_helps_first_line_is_the_usage_line(cli, monkeypatch):
  for command in ("", "train"):
    out = help_text(cli, monkeypatch, 80, *filter(None, [command]))
    assert out.splitlines()[0].startswith(f" Usage: nascli {command}".rstrip())


@pytest.mark.parametrize("args, message", [
    (["list_trials", "job", "--status", "complete"],
     "Error: unknown --status 'complete' (did you mean 'completed'?); known: completed,"),
    (["train", "--mode", "bogus"],
     "Error: unknown --mode 'bogus'; known: train, train_and_eval, train_and_post_eval"),
    (["export", "--model_dir", ".", "--input_type", "bytes"],
     "Error: unknown --input_type 'bytes' (did you mean 'image_bytes'?); known: image_tensor,"),
    (["search_in_local", "--search_algorithm", "tpee"],
     "Error: unknown --search_algorithm 'tpee' (did you mean 'tpe'?); known:"),
])
def test_every_bad_choice_is_refused_alike_as_a_usage_error(cli, args, message):
  """One rule for a value outside an option's choices: one line naming it, exit 2 (the usage
  errors' code, as for Click's own)."""
  code, out, err = cli(*args)
  assert (code, out, err.count("\n")) == (2, "", 1), err
  assert err.startswith(message), err
