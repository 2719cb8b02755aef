"""The GPU-cluster launchers in scripts/, run as the product card spells them (`sh`, which is
dash on Debian; bash too where it is cheap), here on CPU devices and local processes."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_same_variables
from conftest import checkpoint_variables
from conftest import convert_digits32
from conftest import free_ports

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
SHORT = "trainer.train_steps=10,trainer.steps_per_loop=5,trainer.checkpoint_interval=5"
LAUNCHERS = ("run_standalone_train_gpu.sh", "run_distribute_train_gpu.sh", "run_eval_gpu.sh",
             "run_distribute_train_multihost.sh")
SHELLS = ("sh", "bash")
# TensorFlow's C++ log lines in its own format (`2025-01-02 03:04:05.678901: I external/...`),
# which TF_CPP_MIN_LOG_LEVEL controls.
TF_CPP_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] ", re.MULTILINE)
# C++ log lines in absl's format, which TF_CPP_MIN_LOG_LEVEL does not reach (TF 2.20: grappler's,
# under Model Garden's FLOPs count): `I1231 23:59:59.123456   12345 devices.cc:67] ...`, or
# before absl's logging is initialized `I0000 00:00:1733044860.123456   12345 ...` after a
# `WARNING: All log messages before absl::InitializeLog() ...` line.
ABSL_CPP_LINE = re.compile(r"^([IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\] "
                           r"|WARNING: All log messages before absl::InitializeLog\(\))",
                           re.MULTILINE)
LOG_LINE = re.compile(r"^epoch: (\d+) step: (\d+), loss is (\S+)$")


@pytest.fixture(scope="module")
def digits32(tmp_path_factory):
  return convert_digits32(tmp_path_factory.mktemp("digits32"), num_shards=4, num_workers=2)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  """The launchers' environment: NASCLI is this interpreter's nascli, whatever the cwd, and
  TF_CPP_MIN_LOG_LEVEL is unset, as in a user's shell (the launchers set it)."""
  wrapper = tmp_path_factory.mktemp("bin") / "nascli"
  wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m nascli "$@"\n')
  wrapper.chmod(0o755)
  out = dict(os.environ, NASCLI=str(wrapper),
             PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
  out.pop("TF_CPP_MIN_LOG_LEVEL", None)
  return out


_PROBE = """\
import json, os, sys
keys = ("TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES", "TF_CONFIG", "TMPDIR")
seen = {"argv": sys.argv[1:], "cwd": os.getcwd(), **{k: os.environ.get(k) for k in keys}}
with open(os.environ["PROBE_LOG"], "a") as f:  # one line per call, in the order of the calls
  f.write(json.dumps(seen) + "\\n")
task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index")
if os.environ.get("PROBE_EXIT") and os.environ.get("PROBE_FAIL_TASK", str(task)) == str(task):
  print("progress line", file=sys.stderr)
  print(f"Error: probe failed (task {task})", file=sys.stderr)
  sys.exit(int(os.environ["PROBE_EXIT"]))
print("probe output")
print(f"result: probe task={task}")
"""


@pytest.fixture
def probe(tmp_path, env):
  """NASCLI as a program that records the command line and environment a launcher gives it:
  what the launcher itself produces, checked without TensorFlow. Returns (env, calls())."""
  seen = tmp_path / "probe_calls.jsonl"
  program = tmp_path / "probe_nascli"
  (tmp_path / "probe.py").write_text(_PROBE)
  program.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{tmp_path / "probe.py"}" "$@"\n')
  program.chmod(0o755)

  def calls():
    return [json.loads(line) for line in seen.read_text().splitlines()]

  return dict(env, NASCLI=str(program), PROBE_LOG=str(seen)), calls


def _launch(script, *args, cwd, env, shell="sh", timeout=600):
  """Runs `SHELL path/to/scripts/SCRIPT ARGS` from cwd, the script named relative to cwd (as
  in `sh scripts/run_eval_gpu.sh ...`), so the launcher must find its own folder from $0."""
  path = os.path.relpath(SCRIPTS / script, cwd)
  return subprocess.run([shell, path, *map(str, args)], cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=timeout, check=False)


def _assert_no_tf_cpp_log(*texts, absl=False):
  for text in texts:
    assert TF_CPP_LINE.findall(text) == [], text[:2000]
    if absl:
      assert ABSL_CPP_LINE.findall(text) == [], text[:2000]
    assert "cudart_stub" not in text and "oneDNN custom operations" not in text, text[:2000]


@pytest.mark.parametrize("script", LAUNCHERS + ("_launch_common.sh",))
def test_launchers_are_posix_sh(script):
  """dash rejects bash syntax (`[[`, arrays, `set -o pipefail`...) at parse time."""
  if shutil.which("dash") is None:
    pytest.skip("dash is not installed")
  path = SCRIPTS / script
  assert path.read_text().startswith("#!/bin/sh\n")
  proc = subprocess.run(["dash", "-n", str(path)], capture_output=True, text=True, check=False)
  assert (proc.returncode, proc.stderr) == (0, "")
  if shutil.which("checkbashisms") is not None:  # Debian's devscripts: also what dash accepts
    proc = subprocess.run(["checkbashisms", "-p", "-x", str(path)], capture_output=True,
                          text=True, check=False)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_every_launcher_is_tested():
  assert sorted(p.name for p in SCRIPTS.glob("run_*.sh")) == sorted(LAUNCHERS)


USAGE = {
    "run_standalone_train_gpu.sh": "DATASET_PATH [DEVICE_ID] [nascli train options...]",
    "run_distribute_train_gpu.sh": "DATASET_PATH DEVICE_NUM [nascli train options...]",
    "run_eval_gpu.sh": "DATASET_PATH CHECKPOINT_PATH [nascli eval options...]",
    "run_distribute_train_multihost.sh":
        "HOSTFILE DATASET_PATH INDEX|all [nascli train options...]",
}


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("script,args", [
    ("run_standalone_train_gpu.sh", []),
    ("run_distribute_train_gpu.sh", ["data"]),
    ("run_eval_gpu.sh", ["data"]),
    ("run_distribute_train_multihost.sh", ["hosts", "data"]),
])
def test_wrong_argument_count_prints_usage_and_exits_1(script, args, shell, tmp_path, env):
  proc = _launch(script, *args, cwd=tmp_path, env=env, shell=shell)
  assert proc.returncode == 1
  path = os.path.relpath(SCRIPTS / script, tmp_path)
  assert proc.stderr == f"Usage: sh {path} {USAGE[script]}\n"
  assert proc.stdout == ""
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("script,args,culprit", [
    ("run_standalone_train_gpu.sh", ["nope"], "DATASET_PATH nope does not exist"),
    ("run_distribute_train_gpu.sh", ["nope", "2"], "DATASET_PATH nope does not exist"),
    ("run_distribute_train_gpu.sh", [".", "two"], "DEVICE_NUM must be a positive integer"),
    ("run_distribute_train_gpu.sh", [".", "0"], "DEVICE_NUM must be a positive integer"),
    ("run_eval_gpu.sh", ["nope", "ckpt-1"], "DATASET_PATH nope does not exist"),
    ("run_eval_gpu.sh", [".", "run/ckpt-7"], "CHECKPOINT_PATH run/ckpt-7 does not exist"),
    ("run_distribute_train_multihost.sh", ["hosts.txt", ".", "all"],
     "HOSTFILE hosts.txt does not exist"),
])
def test_missing_paths_are_named(script, args, culprit, shell, tmp_path, env):
  proc = _launch(script, *args, cwd=tmp_path, env=env, shell=shell)
  assert proc.returncode == 1
  assert proc.stderr.startswith(f"Error: {culprit}"), proc.stderr
  assert len(proc.stderr.splitlines()) == 1
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("hosts,which,message", [
    ("localhost:2222\nlocalhost:22;rm -rf /\n", "all",
     "HOSTFILE hosts line 2: expected host:port, got 'localhost:22;rm-rf/'"),
    ("a:1\nb:123456\n", "0", "HOSTFILE hosts line 2: expected host:port, got 'b:123456'"),
    ("a:1:2\n", "0", "HOSTFILE hosts line 1: expected host:port, got 'a:1:2'"),
    ("# none\n\n", "0", "HOSTFILE hosts names no host:port"),
    ("localhost:1\nlocalhost:2", "2",
     "INDEX must be all or a HOSTFILE line index 0..1, got '2'"),
    ("localhost:1\nlocalhost:2", "01",
     "INDEX must be all or a HOSTFILE line index 0..1, got '01'"),
    ("localhost:1\nnode7:2\n", "all",
     "'all' starts every worker here, but HOSTFILE names node7; run INDEX mode on it"),
])
def test_bad_hostfile_or_index_is_named(hosts, which, message, shell, tmp_path, env):
  (tmp_path / "hosts").write_text(hosts)
  proc = _launch("run_distribute_train_multihost.sh", "hosts", ".", which, cwd=tmp_path,
                 env=env, shell=shell)
  assert (proc.returncode, proc.stderr) == (1, f"Error: {message}\n")
  assert sorted(os.listdir(tmp_path)) == ["hosts"]  # refused before anything is written


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("script,args", [
    ("run_distribute_train_gpu.sh", [".", "8"]),
    ("run_eval_gpu.sh", [".", "run/ckpt-1"]),  # where nascli's stderr goes to eval/stderr.log
])
def test_missing_nascli_is_named(script, args, shell, tmp_path, env):
  """A copy of scripts/ with no .venv beside it, no NASCLI, no nascli on PATH."""
  if any(os.access(os.path.join(d, "nascli"), os.X_OK) for d in ("/usr/bin", "/bin")):
    pytest.skip("nascli is installed in /usr/bin")
  shutil.copytree(SCRIPTS, tmp_path / "repo" / "scripts")
  cwd = tmp_path / "cwd"
  (cwd / "run").mkdir(parents=True)
  (cwd / "run" / "ckpt-1.index").write_text("")
  bare = {k: v for k, v in env.items() if k != "NASCLI"}
  proc = subprocess.run([shell, "../repo/scripts/" + script, *args], cwd=cwd,
                        env=dict(bare, PATH="/usr/bin:/bin"), capture_output=True, text=True,
                        check=False)
  assert (proc.returncode, proc.stderr) == (
      1, "Error: nascli not found: install it (bash scripts/setup.sh) or set NASCLI\n")
  assert os.listdir(cwd) == ["run"]


@pytest.mark.parametrize("shell", SHELLS)
def test_train_launchers_pass_nascli_their_arguments(shell, tmp_path, probe):
  env, calls = probe
  data = tmp_path / "data"
  data.mkdir()
  # The product card's command: sh scripts/run_distribute_train_gpu.sh DATA 8
  proc = _launch("run_distribute_train_gpu.sh", "data", 8, "--params_override", "a=1, b=2",
                 cwd=tmp_path, env=env, shell=shell)
  assert proc.returncode == 0, proc.stderr
  assert proc.stderr == ("training with 8 replicas into ./train_parallel"
                         " (log: ./train_parallel/log)\n")
  assert proc.stdout == "probe output\nresult: probe task=None\n"
  proc = _launch("run_standalone_train_gpu.sh", "data", 3, "--json", cwd=tmp_path, env=env,
                 shell=shell)
  assert proc.returncode == 0, proc.stderr
  assert proc.stderr == "training on device 3 into ./train (log: ./train/log)\n"
  proc = _launch("run_standalone_train_gpu.sh", "data", "--json", cwd=tmp_path, env=env,
                 shell=shell)
  assert proc.returncode == 0, proc.stderr
  parallel, standalone, default_device = calls()
  assert parallel["argv"] == ["train", "--dataset_dir", str(data), "--model_dir",
                              "train_parallel", "--strategy", "mirrored", "--num_gpus", "8",
                              "--params_override", "a=1, b=2"]
  assert standalone["argv"] == ["train", "--dataset_dir", str(data), "--model_dir", "train",
                                "--strategy", "one_device", "--json"]
  assert default_device["argv"] == standalone["argv"]
  assert [c["CUDA_VISIBLE_DEVICES"] for c in calls()] == [env.get("CUDA_VISIBLE_DEVICES"), "3",
                                                          "0"]
  assert [c["TF_CPP_MIN_LOG_LEVEL"] for c in calls()] == ["3", "3", "3"]
  assert {c["cwd"] for c in calls()} == {str(tmp_path)}
  assert sorted(os.listdir(tmp_path)) == ["data", "probe.py", "probe_calls.jsonl", "probe_nascli",
                                          "train", "train_parallel"]


@pytest.mark.parametrize("shell", SHELLS)
def test_a_tf_log_level_the_user_set_wins(shell, tmp_path, probe):
  env, calls = probe
  proc = _launch("run_distribute_train_gpu.sh", ".", 2, cwd=tmp_path,
                 env=dict(env, TF_CPP_MIN_LOG_LEVEL="0"), shell=shell)
  assert proc.returncode == 0, proc.stderr
  assert [c["TF_CPP_MIN_LOG_LEVEL"] for c in calls()] == ["0"]


@pytest.mark.parametrize("shell", SHELLS)
def test_eval_launcher_passes_the_checkpoint_and_keeps_nascli_exit_code(shell, tmp_path, probe):
  env, calls = probe
  (tmp_path / "run").mkdir()
  (tmp_path / "run" / "ckpt-5.index").write_text("")
  proc = _launch("run_eval_gpu.sh", ".", "run/ckpt-5", "--json", cwd=tmp_path, env=env,
                 shell=shell)
  assert (proc.returncode, proc.stdout, proc.stderr) == (0, "result: probe task=None\n", "")
  assert (tmp_path / "eval" / "log").read_text() == "probe output\nresult: probe task=None\n"
  proc = _launch("run_eval_gpu.sh", ".", "run", cwd=tmp_path, env=env, shell=shell)
  assert proc.returncode == 0, proc.stderr
  prefix, folder = calls()
  assert prefix["argv"] == ["eval", "--model_dir", "run", "--dataset_dir", str(tmp_path),
                            "--output", "eval/eval_metrics.json", "--checkpoint_path",
                            "run/ckpt-5", "--json"]
  assert folder["argv"] == ["eval", "--model_dir", "run", "--dataset_dir", str(tmp_path),
                            "--output", "eval/eval_metrics.json"]
  # nascli's own exit status and its last stderr line (the `Error: ...` line) come through.
  proc = _launch("run_eval_gpu.sh", ".", "run", cwd=tmp_path, env=dict(env, PROBE_EXIT="3"),
                 shell=shell)
  assert (proc.returncode, proc.stdout, proc.stderr) == (
      3, "", "Error: probe failed (task None)\n")


@pytest.mark.parametrize("shell", SHELLS)
def test_multihost_launcher_gives_each_worker_its_tf_config(shell, tmp_path, probe):
  env, calls = probe
  (tmp_path / "hosts").write_text("# two workers\nlocalhost:2222  # chief\n\n127.0.0.1:2223")
  proc = _launch("run_distribute_train_multihost.sh", "hosts", ".", "all", "--mode", "train",
                 cwd=tmp_path, env=env, shell=shell)
  assert proc.returncode == 0, proc.stderr
  run = tmp_path / "train_multihost"
  assert proc.stdout == "probe output\nresult: probe task=0\n"
  assert proc.stderr == (f"started 2 workers (output: {run}/worker_<INDEX>.out and .err)\n")
  assert (run / "worker_1.out").read_text() == "probe output\nresult: probe task=1\n"
  workers = sorted(calls(), key=lambda c: json.loads(c["TF_CONFIG"])["task"]["index"])
  for index, worker in enumerate(workers):
    assert json.loads(worker["TF_CONFIG"]) == {
        "cluster": {"worker": ["localhost:2222", "127.0.0.1:2223"]},
        "task": {"type": "worker", "index": index}}
    assert worker["argv"] == ["train", "--dataset_dir", str(tmp_path), "--model_dir", str(run),
                              "--strategy", "multi_worker_mirrored", "--mode", "train"]
    assert worker["TMPDIR"] == str(run / f"tmp_worker_{index}")
    assert worker["TF_CPP_MIN_LOG_LEVEL"] == "3"

  # One host's share, as a cluster launcher starts it: in the foreground, output not redirected.
  proc = _launch("run_distribute_train_multihost.sh", "hosts", ".", "1", cwd=tmp_path, env=env,
                 shell=shell)
  assert (proc.returncode, proc.stdout) == (0, "probe output\nresult: probe task=1\n")
  assert len(calls()) == 3

  # A failed worker is named with its Error line, and the launcher fails.
  proc = _launch("run_distribute_train_multihost.sh", "hosts", ".", "all", cwd=tmp_path,
                 env=dict(env, PROBE_EXIT="1", PROBE_FAIL_TASK="1"), shell=shell)
  assert proc.returncode == 1
  assert proc.stderr.splitlines()[1:] == ["worker 1 failed: Error: probe failed (task 1)"]
  assert proc.stdout == ""


def _steps_in_log(path):
  return [int(line.split(" step: ")[1].split(",")[0]) for line in path.read_text().splitlines()]


def _losses(text):
  """The losses of the THOR-style step lines in text, checking each line's format."""
  out = []
  for line in text.splitlines():
    match = LOG_LINE.match(line)
    if match:
      out.append(float(match.group(3)))
  return out


@pytest.fixture(scope="module")
def parallel_run(digits32, tmp_path_factory, env):
  """`sh scripts/run_distribute_train_gpu.sh DATA 2`, for 10 steps: trained once, then
  evaluated by the eval launcher. Returns (its working directory, the process)."""
  cwd = tmp_path_factory.mktemp("launch")
  proc = _launch("run_distribute_train_gpu.sh", digits32, 2, "--params_override", SHORT,
                 "--json", cwd=cwd, env=env)
  return cwd, proc


def test_distribute_train_on_two_replicas(parallel_run):
  cwd, proc = parallel_run
  assert proc.returncode == 0, proc.stderr[-2000:]
  result = json.loads(proc.stdout)
  assert result["num_replicas"] == 2 and result["step"] == 10
  run = cwd / "train_parallel"
  log = (run / "log").read_text()
  assert [bool(LOG_LINE.match(line)) for line in log.splitlines()] == [True, True]
  assert _steps_in_log(run / "log") == [5, 10]
  losses = _losses(log)
  assert all(math.isfinite(x) and x > 0 for x in losses)
  assert _losses(proc.stderr) == losses  # the step lines are on stderr too
  assert proc.stderr.splitlines()[0] == ("training with 2 replicas into ./train_parallel"
                                         " (log: ./train_parallel/log)")
  assert (run / "ckpt-10.index").exists()
  _assert_no_tf_cpp_log(proc.stdout, proc.stderr, log)


def test_distribute_train_prints_no_absl_cpp_log_lines(parallel_run):
  _, proc = parallel_run
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert ABSL_CPP_LINE.findall(proc.stderr) == [], proc.stderr[-2000:]


def test_eval_launcher_on_the_trained_checkpoint(parallel_run, digits32, env):
  cwd, trained = parallel_run
  assert trained.returncode == 0, trained.stderr[-2000:]
  evaluated = _launch("run_eval_gpu.sh", digits32, "train_parallel/ckpt-5", cwd=cwd, env=env)
  assert evaluated.returncode == 0, evaluated.stderr[-2000:]
  assert evaluated.stderr == ""
  line = evaluated.stdout.strip()
  assert re.fullmatch(r"result: \{'top_5_accuracy': [0-9.]+, 'top_1_accuracy': [0-9.]+\}"
                      r" ckpt=train_parallel/ckpt-5", line), line
  assert (cwd / "eval" / "log").read_text().strip().splitlines()[-1] == line
  saved = json.loads((cwd / "eval" / "eval_metrics.json").read_text())
  top1 = float(line.split("'top_1_accuracy': ")[1].split("}")[0])
  assert 0.0 < top1 < 1.0 and top1 in _numbers(saved)
  _assert_no_tf_cpp_log(evaluated.stdout, (cwd / "eval" / "stderr.log").read_text(),
                        (cwd / "eval" / "log").read_text(), absl=True)


def _numbers(tree):
  if isinstance(tree, dict):
    return [n for v in tree.values() for n in _numbers(v)]
  return [tree] if isinstance(tree, float) else []


def _assert_workers_quiet(proc, run):
  _assert_no_tf_cpp_log(proc.stdout, proc.stderr, (run / "log").read_text(),
                        *(p.read_text() for p in sorted(run.glob("worker_*.*"))))
  assert sorted(p.name for p in run.glob("worker_*.*")) == [
      "worker_0.err", "worker_0.out", "worker_1.err", "worker_1.out"]


def test_multihost_launcher_two_local_workers(digits32, tmp_path, env):
  ports = free_ports(2)
  (tmp_path / "hosts").write_text(f"# two workers\nlocalhost:{ports[0]}\n127.0.0.1:{ports[1]}\n")
  proc = _launch("run_distribute_train_multihost.sh", "hosts", digits32, "all",
                 "--mode", "train", "--params_override", SHORT, "--json", cwd=tmp_path,
                 env=env, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  run = tmp_path / "train_multihost"
  result = json.loads(proc.stdout)
  assert result["num_replicas"] == 2 and result["step"] == 10
  assert _steps_in_log(run / "log") == [5, 10]
  _assert_workers_quiet(proc, run)
  # Both workers end with the same weights: the chief's checkpoint and worker 1's (Model Garden
  # puts a non-chief's checkpoints in its TMPDIR).
  other = list((run / "tmp_worker_1").glob("*/ckpt-10.index"))
  assert len(other) == 1, list((run / "tmp_worker_1").rglob("*"))
  assert_same_variables(checkpoint_variables(run / "ckpt-10"),
                        checkpoint_variables(str(other[0])[:-len(".index")]))

  # Each worker reads a disjoint, equal share of the training shards: Model Garden's own file
  # sharding, fed the seed nascli gave every worker (params.yaml).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official.core import input_reader  # pylint: disable=g-import-not-at-top
  from tf_vision.model_dir import load_params  # pylint: disable=g-import-not-at-top
  params = load_params(str(run))
  seed = params.task.train_data.seed
  assert seed is not None
  files = input_reader.match_files(params.task.train_data.input_path)
  assert len(files) == 4
  shares = []
  for worker in range(2):
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker,
                                         num_replicas_in_sync=2)
    dataset = input_reader._shard_files_then_read(  # pylint: disable=protected-access
        files, tf.data.Dataset.from_tensors, context, seed=seed, is_training=True,
        sharding=True, deterministic=True)
    shares.append(sorted(f.decode() for f in dataset.take(2).as_numpy_iterator()))
  assert len(set(shares[0])) == 2 and len(set(shares[1])) == 2
  assert not set(shares[0]) & set(shares[1])


# Slow tier: the default tier runs the multi-host launcher (test_multihost_launcher_two_local_
# workers) and THOR's distributed preconditioner in-process (tests/test_thor_optimizer.py).
@pytest.mark.slow
def test_multihost_thor_workers_share_one_preconditioner(digits32, tmp_path, env):
  """THOR under MultiWorkerMirroredStrategy: the factors are averaged over the workers at each
  refresh, so both apply the same inverses and end with the same weights and THOR state."""
  ports = free_ports(2)
  (tmp_path / "hosts").write_text(f"localhost:{ports[0]}\nlocalhost:{ports[1]}\n")
  recipe = ROOT / "tf_vision" / "configs" / "experiments" / "digits_resnet10_thor_cpu.yaml"
  override = SHORT + (",trainer.summary_interval=5,trainer.validation_interval=10"
                      ",trainer.optimizer_config.optimizer.thor.frequency=4")
  proc = _launch("run_distribute_train_multihost.sh", "hosts", digits32, "all",
                 "--config_file", recipe, "--mode", "train", "--params_override", override,
                 "--json", cwd=tmp_path, env=env, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert json.loads(proc.stdout)["num_replicas"] == 2
  run = tmp_path / "train_multihost"
  _assert_workers_quiet(proc, run)
  other = list((run / "tmp_worker_1").glob("*/ckpt-10.index"))
  assert len(other) == 1, list((run / "tmp_worker_1").rglob("*"))
  chief = checkpoint_variables(run / "ckpt-10")
  assert_same_variables(chief, checkpoint_variables(str(other[0])[:-len(".index")]))
  # The THOR state is in both checkpoints (compared above) and was really used: the last
  # refresh was at step 8, and the inverses are no longer the identity they start as.
  refreshed = [v for n, v in chief.items() if "thor_refreshed_at" in n]
  assert [int(v) for v in refreshed] == [8]
  inverses = [v for n, v in chief.items() if "thor_a_inv" in n or "thor_g_inv" in n]
  assert len(inverses) == 2 * 14  # ResNet-10: 13 convolutions and the classifier
  eye = [np.broadcast_to(np.eye(v.shape[-1]), v.shape) for v in inverses]
  assert all(np.abs(v - e).max() > 1e-3 for v, e in zip(inverses, eye))
