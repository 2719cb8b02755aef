"""The GPU-cluster launchers in scripts/, run here on CPU devices and local processes."""

import json
import os
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


@pytest.fixture(scope="module")
def digits32(tmp_path_factory):
  return convert_digits32(tmp_path_factory.mktemp("digits32"), num_shards=4, num_workers=2)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
  """The launchers' environment: NASCLI is this interpreter's nascli, whatever the cwd."""
  wrapper = tmp_path_factory.mktemp("bin") / "nascli"
  wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m nascli "$@"\n')
  wrapper.chmod(0o755)
  return dict(os.environ, NASCLI=str(wrapper), TF_CPP_MIN_LOG_LEVEL="3",
              PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def _launch(script, *args, cwd, env, timeout=600):
  return subprocess.run(["bash", str(SCRIPTS / script), *map(str, args)], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("script,args", [
    ("run_standalone_train_gpu.sh", []),
    ("run_distribute_train_gpu.sh", ["data"]),
    ("run_eval_gpu.sh", ["data"]),
    ("run_distribute_train_multihost.sh", ["hosts", "data"]),
])
def test_wrong_argument_count_prints_usage_and_exits_1(script, args, tmp_path, env):
  proc = _launch(script, *args, cwd=tmp_path, env=env)
  assert proc.returncode == 1
  assert proc.stderr.strip() == proc.stderr.strip().splitlines()[0]
  assert proc.stderr.startswith(f"Usage: bash {SCRIPTS / script} ")
  assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("script,args,culprit", [
    ("run_standalone_train_gpu.sh", ["nope"], "DATASET_PATH nope does not exist"),
    ("run_distribute_train_gpu.sh", ["nope", "2"], "DATASET_PATH nope does not exist"),
    ("run_distribute_train_gpu.sh", [".", "two"], "DEVICE_NUM must be a positive integer"),
    ("run_eval_gpu.sh", ["nope", "ckpt-1"], "DATASET_PATH nope does not exist"),
    ("run_eval_gpu.sh", [".", "run/ckpt-7"], "CHECKPOINT_PATH run/ckpt-7 does not exist"),
    ("run_distribute_train_multihost.sh", ["hosts.txt", ".", "all"],
     "HOSTFILE hosts.txt does not exist"),
])
def test_missing_paths_are_named(script, args, culprit, tmp_path, env):
  proc = _launch(script, *args, cwd=tmp_path, env=env)
  assert proc.returncode == 1
  assert proc.stderr.strip() == f"Error: {culprit}" or proc.stderr.strip().startswith(
      f"Error: {culprit}"), proc.stderr
  assert len(proc.stderr.strip().splitlines()) == 1


def test_bad_hostfile_line_is_named(tmp_path, env):
  (tmp_path / "hosts").write_text("localhost:2222\nlocalhost:22;rm -rf /\n")
  proc = _launch("run_distribute_train_multihost.sh", "hosts", ".", "all", cwd=tmp_path,
                 env=env)
  assert proc.returncode == 1
  assert proc.stderr.strip() == ("Error: HOSTFILE hosts line 2: expected host:port, got"
                                 " 'localhost:22;rm-rf/'")


def _steps_in_log(path):
  return [int(line.split(" step: ")[1].split(",")[0]) for line in path.read_text().splitlines()]


def test_distribute_train_on_two_replicas_then_eval(digits32, tmp_path, env):
  proc = _launch("run_distribute_train_gpu.sh", digits32, 2, "--params_override", SHORT,
                 "--json", cwd=tmp_path, env=env)
  assert proc.returncode == 0, proc.stderr[-2000:]
  result = json.loads(proc.stdout)
  assert result["num_replicas"] == 2 and result["step"] == 10
  run = tmp_path / "train_parallel"
  assert _steps_in_log(run / "log") == [5, 10]
  assert (run / "ckpt-10.index").exists()

  evaluated = _launch("run_eval_gpu.sh", digits32, "train_parallel/ckpt-5", cwd=tmp_path,
                      env=env)
  assert evaluated.returncode == 0, evaluated.stderr[-2000:]
  line = evaluated.stdout.strip().splitlines()[-1]
  assert line.startswith("result: {'top_5_accuracy': ") and "'top_1_accuracy': " in line
  assert line.endswith(" ckpt=train_parallel/ckpt-5")
  assert (tmp_path / "eval" / "log").read_text().strip().splitlines()[-1] == line
  saved = json.loads((tmp_path / "eval" / "eval_metrics.json").read_text())
  top1 = float(line.split("'top_1_accuracy': ")[1].split("}")[0])
  assert 0.0 < top1 < 1.0 and top1 in _numbers(saved)


def _numbers(tree):
  if isinstance(tree, dict):
    return [n for v in tree.values() for n in _numbers(v)]
  return [tree] if isinstance(tree, float) else []


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
