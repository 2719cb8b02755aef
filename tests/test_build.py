"""`nascli build`: the exact docker commands, a fake docker that records its argv, no docker, bad
names; the two Dockerfiles and .dockerignore; the built URI as `search --container_image`."""

import importlib
import importlib.util
import json
import os
import re
import shlex
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from conftest import nascli_subprocess
from nascli import containers
from nascli.commands.ray_flags import runtime_env as _runtime_env
from nascli.search import executors

REPO = Path(__file__).resolve().parents[1]
TRAINER_FILE = str(REPO / "tf_vision" / "nas_multi_trial.Dockerfile")
LATENCY_FILE = str(REPO / "tf_vision" / "latency_computation_using_saved_model.Dockerfile")
BASE = ["--project_id", "my-proj", "--region", "us-central1"]
BOTH = BASE + ["--trainer_docker_id", "nas-trainer", "--latency_calculator_docker_id",
               "nas-latency"]
TRAINER_URI = "us-central1-docker.pkg.dev/my-proj/nas/nas-trainer:latest"
LATENCY_URI = "us-central1-docker.pkg.dev/my-proj/nas/nas-latency:latest"


def dry_run_commands(cli, *args) -> list[list[str]]:
  code, out, err = cli("build", *args, "--dry_run")
  assert code == 0, err
  return [shlex.split(line) for line in out.splitlines()]


def test_dry_run_builds_and_pushes_both_images_in_vertex_order(cli):
  assert dry_run_commands(cli, *BOTH) == [
      ["docker", "build", "-f", TRAINER_FILE, "-t", TRAINER_URI, str(REPO)],
      ["docker", "push", TRAINER_URI],
      ["docker", "build", "-f", LATENCY_FILE, "-t", LATENCY_URI, str(REPO)],
      ["docker", "push", LATENCY_URI],
  ]


def test_dry_run_no_cache_no_push(cli):
  assert dry_run_commands(cli, *BOTH, "--no-use_cache", "--no-push") == [
      ["docker", "build", "--no-cache", "-f", TRAINER_FILE, "-t", TRAINER_URI, str(REPO)],
      ["docker", "build", "--no-cache", "-f", LATENCY_FILE, "-t", LATENCY_URI, str(REPO)],
  ]
  # The dashed spellings are the same switches.
  assert dry_run_commands(cli, *BOTH, "--no-use-cache", "--no-push") == dry_run_commands(
      cli, *BOTH, "--no-use_cache", "--no-push")


def test_dry_run_custom_registry_tag_files_and_context(cli, tmp_path, monkeypatch):
  (tmp_path / "my files").mkdir()
  dockerfile = tmp_path / "my files" / "trainer.Dockerfile"
  dockerfile.write_text("FROM scratch\n")
  (tmp_path / "ctx").mkdir()
  monkeypatch.chdir(tmp_path)  # relative paths are relative to the working directory
  commands = dry_run_commands(
      cli, *BASE, "--trainer_docker_id", "team/trainer", "--trainer_docker_file",
      "my files/trainer.Dockerfile", "--registry", "localhost:5000/nas/", "--tag", "v1.2",
      "--context", "ctx")
  assert commands == [
      ["docker", "build", "-f", str(dockerfile), "-t", "localhost:5000/nas/team/trainer:v1.2",
       str(tmp_path / "ctx")],
      ["docker", "push", "localhost:5000/nas/team/trainer:v1.2"],
  ]


def test_dry_run_json_and_domain_scoped_project(cli):
  code, out, _ = cli("build", "--project_id", "example.com:my-proj", "--region", "europe-west4",
                     "--latency_calculator_docker_id", "lat", "--dry_run", "--json")
  assert code == 0
  uri = "europe-west4-docker.pkg.dev/example.com/my-proj/nas/lat:latest"
  assert json.loads(out) == {
      "dry_run": True,
      "images": [{"role": "latency_calculator", "docker_id": "lat", "dockerfile": LATENCY_FILE,
                  "uri": uri, "pushed": False}],
      "commands": [["docker", "build", "-f", LATENCY_FILE, "-t", uri, str(REPO)],
                   ["docker", "push", uri]],
  }


def fake_docker(bin_dir: Path, log: Path, fail_on: str | None = None, code: int = 3) -> None:
  """A `docker` that appends its argv to LOG as a JSON line, talks on stdout and stderr, and
  exits CODE when its first argument is FAIL_ON."""
  bin_dir.mkdir(parents=True, exist_ok=True)
  script = bin_dir / "docker"
  script.write_text(textwrap.dedent(f"""\
      #!{sys.executable}
      import json, sys
      with open({str(log)!r}, "a", encoding="utf-8") as f:
        f.write(json.dumps(sys.argv[1:]) + "\\n")
      print("docker says hello on stdout")
      print("docker progress on stderr", file=sys.stderr)
      sys.exit({code} if sys.argv[1:2] == [{fail_on!r}] else 0)
      """))
  script.chmod(0o755)


def recorded(log: Path) -> list[list[str]]:
  return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_fake_docker_gets_exact_argv_in_order(tmp_path):
  fake_docker(tmp_path / "bin", tmp_path / "argv.jsonl")
  dockerfile = tmp_path / "odd dir" / "it's a \"trainer\" $HOME.Dockerfile"
  dockerfile.parent.mkdir()
  dockerfile.write_text("FROM scratch\n")
  env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
  result = nascli_subprocess("build", *BOTH, "--trainer_docker_file", dockerfile, env=env,
                             cwd=REPO)
  assert result.returncode == 0, result.stderr
  assert recorded(tmp_path / "argv.jsonl") == [
      ["build", "-f", str(dockerfile), "-t", TRAINER_URI, str(REPO)],
      ["push", TRAINER_URI],
      ["build", "-f", LATENCY_FILE, "-t", LATENCY_URI, str(REPO)],
      ["push", LATENCY_URI],
  ]
  # Results on stdout; everything docker printed (its stdout too) on stderr.
  assert result.stdout.splitlines() == [TRAINER_URI, LATENCY_URI]
  assert result.stderr.count("docker says hello on stdout") == 4
  assert result.stderr.count("docker progress on stderr") == 4


def test_json_real_run_without_push(cli, tmp_path, monkeypatch):
  fake_docker(tmp_path / "bin", tmp_path / "argv.jsonl")
  monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
  code, out, err = cli("build", *BOTH, "--no-push", "--json")
  assert code == 0, err
  result = json.loads(out)
  assert [(i["uri"], i["pushed"]) for i in result["images"]] == [(TRAINER_URI, False),
                                                                  (LATENCY_URI, False)]
  assert [c[1:] for c in result["commands"]] == recorded(tmp_path / "argv.jsonl") == [
      ["build", "-f", TRAINER_FILE, "-t", TRAINER_URI, str(REPO)],
      ["build", "-f", LATENCY_FILE, "-t", LATENCY_URI, str(REPO)]]
  assert "docker says hello on stdout" in err  # docker's stdout kept off ours


def test_failed_build_is_one_line_and_pushes_nothing(cli, tmp_path, monkeypatch):
  fake_docker(tmp_path / "bin", tmp_path / "argv.jsonl", fail_on="build", code=3)
  monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
  code, out, err = cli("build", *BOTH)
  assert code == 1 and out == ""
  assert recorded(tmp_path / "argv.jsonl") == [
      ["build", "-f", TRAINER_FILE, "-t", TRAINER_URI, str(REPO)]]
  error = [line for line in err.splitlines() if line.startswith("Error:")]
  build = shlex.join(["docker", "build", "-f", TRAINER_FILE, "-t", TRAINER_URI, str(REPO)])
  assert error == [f"Error: {build} failed with exit code 3"]
  assert err.splitlines()[-1] == error[0]  # docker's output before it, nothing after


def test_failed_push_stops_before_the_next_image(cli, tmp_path, monkeypatch):
  fake_docker(tmp_path / "bin", tmp_path / "argv.jsonl", fail_on="push", code=2)
  monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
  code, out, err = cli("build", *BOTH)
  assert code == 1 and out == ""
  assert [argv[0] for argv in recorded(tmp_path / "argv.jsonl")] == ["build", "push"]
  assert err.splitlines()[-1] == f"Error: docker push {TRAINER_URI} failed with exit code 2"


def test_no_docker_on_path(tmp_path):
  (tmp_path / "empty").mkdir()
  result = nascli_subprocess("build", *BOTH, env={"PATH": str(tmp_path / "empty")}, cwd=REPO)
  assert result.returncode == 1 and result.stdout == ""
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr
  first = shlex.join(["docker", "build", "-f", TRAINER_FILE, "-t", TRAINER_URI, str(REPO)])
  assert result.stderr.strip() == (f"Error: docker is not installed or not on PATH; it is"
                                   f" needed to run: {first}")


def test_dry_run_needs_no_docker(cli, tmp_path, monkeypatch):
  monkeypatch.setenv("PATH", str(tmp_path))
  code, out, _ = cli("build", *BOTH, "--dry_run")
  assert code == 0 and len(out.splitlines()) == 4


@pytest.mark.parametrize("args, flag", [
    (["--trainer_docker_id", "Nas-Trainer"], "--trainer_docker_id"),
    (["--trainer_docker_id", "nas trainer"], "--trainer_docker_id"),
    (["--trainer_docker_id", "-q"], "--trainer_docker_id"),
    (["--latency_calculator_docker_id", "lat/"], "--latency_calculator_docker_id"),
    (["--trainer_docker_id", "t", "--region", "US-central1"], "--region"),
    (["--trainer_docker_id", "t", "--region", "-H"], "--region"),
    (["--trainer_docker_id", "t", "--region", "us central1"], "--region"),
    (["--trainer_docker_id", "t", "--project_id", "My-Project"], "--project_id"),
    (["--trainer_docker_id", "t", "--project_id", "--rm"], "--project_id"),
    (["--trainer_docker_id", "t", "--tag", "-x"], "--tag"),
    (["--trainer_docker_id", "t", "--tag", "a b"], "--tag"),
    (["--trainer_docker_id", "t", "--registry", "-H evil.io"], "--registry"),
    (["--trainer_docker_id", "t", "--registry", "gcr.io/My-Team"], "--registry"),
])
def test_bad_names_are_one_line_naming_the_flag(cli, tmp_path, monkeypatch, args, flag):
  fake_docker(tmp_path / "bin", tmp_path / "argv.jsonl")
  monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
  # Later options win: the bad value replaces the good one in BASE.
  code, out, err = cli("build", *BASE, *args)
  assert code == 1 and out == ""
  assert len(err.strip().splitlines()) == 1 and err.startswith(f"Error: {flag} "), err
  assert recorded(tmp_path / "argv.jsonl") == []  # nothing ran


def test_missing_dockerfile_and_nothing_to_build(cli, tmp_path):
  missing = tmp_path / "nope.Dockerfile"
  code, _, err = cli("build", *BOTH, "--latency_calculator_docker_file", missing, "--dry_run")
  assert code == 1 and err.strip() == (f"Error: --latency_calculator_docker_file: no such"
                                       f" Dockerfile: {missing}")
  code, _, err = cli("build", *BASE, "--trainer_docker_id", "", "--dry_run")
  assert code == 1 and len(err.strip().splitlines()) == 1
  assert "--trainer_docker_id" in err and "--latency_calculator_docker_id" in err


def test_image_uri_is_vertex_one():
  assert containers.default_registry("us-central1", "proj-123") == (
      "us-central1-docker.pkg.dev/proj-123/nas")
  assert containers.image_uri("us-central1-docker.pkg.dev/proj-123/nas", "t") == (
      "us-central1-docker.pkg.dev/proj-123/nas/t:latest")


# The Dockerfiles.

def dockerfile_instructions(path: str) -> list[tuple[str, str]]:
  """(INSTRUCTION, arguments) pairs, comments dropped and continuation lines joined."""
  text = re.sub(r"\\\n", " ", Path(path).read_text())
  out = []
  for line in text.splitlines():
    line = line.strip()
    if line and not line.startswith("#"):
      keyword, _, rest = line.partition(" ")
      out.append((keyword.upper(), rest.strip()))
  return out


def only(instructions, keyword: str) -> str:
  values = [rest for kw, rest in instructions if kw == keyword]
  assert len(values) == 1, (keyword, values)
  return values[0]


def test_trainer_image_matches_tensorflow_pin_and_runs_the_trial_process():
  pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
  pins = [d for d in pyproject["project"]["dependencies"] if re.match(r"tensorflow\b", d)]
  version = re.fullmatch(r"tensorflow~=([\d.]+)", pins[0].replace(" ", "")).group(1)
  instructions = dockerfile_instructions(TRAINER_FILE)
  assert only(instructions, "FROM") == f"tensorflow/tensorflow:{version}-gpu"
  entrypoint = json.loads(only(instructions, "ENTRYPOINT"))
  # The local executor's own invocation: python -m nascli.search.trial SPEC.json.
  assert entrypoint[1:] == executors.trial_command("SPEC.json")[1:-1]
  assert entrypoint[0] == "python"
  module = importlib.import_module(entrypoint[2])
  assert callable(module.main)
  runs = " ".join(rest for kw, rest in instructions if kw == "RUN")
  assert 'pip install ".[ray]"' in runs  # a Ray worker for `search --container_image`
  assert "[test]" not in runs and "[dev]" not in runs


def test_latency_image_entry_module_exists():
  instructions = dockerfile_instructions(LATENCY_FILE)
  assert only(instructions, "FROM").startswith("tensorflow/tensorflow:")
  entrypoint = json.loads(only(instructions, "ENTRYPOINT"))
  assert entrypoint[:2] == ["python", "-m"]
  spec = importlib.util.find_spec(entrypoint[2])
  assert spec is not None and spec.origin.startswith(str(REPO))


def dockerignored(patterns: list[str], path: str) -> bool:
  """Docker's rule, enough for these patterns: a match of the path or of a folder above it."""
  parts = path.split("/")
  prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
  ignored = False
  for pattern in patterns:
    negate = pattern.startswith("!")
    pattern = pattern.lstrip("!").strip("/")
    regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*")
    if any(re.fullmatch(regex, p) for p in prefixes):
      ignored = not negate
  return ignored


def test_dockerignore_keeps_the_source_and_drops_the_rest():
  patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
  for kept in ("pyproject.toml", "README.md", "nascli/app.py", "nascli/commands/eval.py",
               "tf_vision/train_lib.py", "tf_vision/test_files/"
               "fast_nas_classification_search_for_testing.yaml",
               "tf_vision/configs/experiments/mnasnet_search_gpu.yaml", "scripts/setup.sh"):
    assert not dockerignored(patterns, kept), kept
  for dropped in (".git/config", ".venv/bin/python", "nascli/__pycache__/app.cpython-311.pyc",
                  ".pytest_cache/v", "nascli_output/search_mnasnet/journal.jsonl",
                  "nascli_data/digits/train-00000-of-00002.tfrecord", "bench/results/x.json",
                  "train_parallel/log", "nascli.egg-info/PKG-INFO", "data/a.tfrecord",
                  "runs/.nascli-tmp/x"):
    assert dockerignored(patterns, dropped), dropped


# The built image as `nascli search --container_image`.

def test_container_image_becomes_ray_image_uri(tmp_path):
  uri = containers.image_uri(containers.default_registry("us-central1", "my-proj"),
                             "nas-trainer")
  assert _runtime_env(None, uri) == {"image_uri": uri}
  assert _runtime_env('{"env_vars": {"NASCLI_CACHE_DIR": "/shared/cache"}}', uri) == {
      "env_vars": {"NASCLI_CACHE_DIR": "/shared/cache"}, "image_uri": uri}
  env_file = tmp_path / "env.json"
  env_file.write_text('{"env_vars": {"A": "1"}, "image_uri": "old:tag"}')
  assert _runtime_env(str(env_file), uri) == {"env_vars": {"A": "1"}, "image_uri": uri}
  assert _runtime_env(None, None) is None
  # Ray itself accepts it (image_uri combines with env_vars and config only).
  runtime_env = pytest.importorskip("ray.runtime_env")
  env = runtime_env.RuntimeEnv(**_runtime_env('{"env_vars": {"A": "1"}}', uri))
  assert env.image_uri() == uri and env.env_vars() == {"A": "1"}
