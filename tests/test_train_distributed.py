"""Distributed `nascli train` on this CPU: mirrored over logical CPUs, and 2 local workers.

Each run is a fresh process (logical devices and TF_CONFIG must be set before TensorFlow starts).
Multi-worker steps cost ~3x a local step on 2 cores, so step counts are tiny.
"""

import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import assert_same_variables
from conftest import checkpoint_variables
from conftest import convert_digits32
from conftest import free_ports
from conftest import nascli_subprocess

_TIMEOUT_S = 300  # per run (or pair of workers); a hang fails instead of blocking the suite


@pytest.fixture(scope="module")
def digits32(tmp_path_factory):
  return convert_digits32(tmp_path_factory.mktemp("digits32"), num_shards=4)


@pytest.fixture(scope="module")
def mirrored_run(digits32, tmp_path_factory):
  """20 steps of MirroredStrategy over 2 logical CPU devices, then the final evaluation at a
  validation batch of 2, whose last batch (359 = 2 * 179 + 1 images) leaves one replica empty:
  (CompletedProcess, model_dir)."""
  model_dir = tmp_path_factory.mktemp("mirrored") / "run"
  proc = nascli_subprocess(
      "train", "--dataset_dir", digits32, "--model_dir", model_dir, "--strategy", "mirrored",
      "--num_gpus", "2", "--params_override", "trainer.train_steps=20,trainer.steps_per_loop=10,"
      "task.validation_data.global_batch_size=2", "--json", timeout=_TIMEOUT_S)
  return proc, model_dir


def _run_workers(tmp_path, model_dirs, *train_args) -> list[dict]:
  """Runs one `nascli train` per model dir as the workers of one cluster; their results.

  Worker i gets TMPDIR=tmp_path/tmp<i>, where Model Garden's `tempfile.mkdtemp()` puts a
  non-chief worker's checkpoints.
  """
  ports = free_ports(len(model_dirs))
  cluster = {"worker": [f"localhost:{p}" for p in ports]}
  procs, logs = [], []
  with contextlib.ExitStack() as files:
    try:
      for i, model_dir in enumerate(model_dirs):
        tmp = tmp_path / f"tmp{i}"
        tmp.mkdir()
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TMPDIR=str(tmp), TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": i}}))
        # Files, not pipes: a worker blocked on a full pipe would stall the other's collectives.
        out, err = (files.enter_context(open(tmp_path / f"w{i}.{kind}", "w+", encoding="utf-8"))
                    for kind in ("out", "err"))
        logs.append((out, err))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "nascli", "train", "--model_dir", str(model_dir),
             "--strategy", "multi_worker_mirrored", *map(str, train_args), "--json"],
            stdout=out, stderr=err, env=env))
      deadline = time.monotonic() + _TIMEOUT_S
      codes = [proc.wait(timeout=max(1.0, deadline - time.monotonic())) for proc in procs]
    finally:
      for proc in procs:
        if proc.poll() is None:
          proc.kill()
          proc.wait()
    outputs = []
    for out, err in logs:
      out.seek(0)
      err.seek(0)
      outputs.append((out.read(), err.read()))
  # A worker that fails makes the others fail too: show every worker's end of stderr.
  assert codes == [0] * len(procs), "\n".join(
      f"worker {i} exited {code}: ...{err[-1500:]}" for i, (code, (_, err))
      in enumerate(zip(codes, outputs)))
  return [json.loads(out) for out, _ in outputs]


def _non_chief_checkpoint(tmp_dir, step: int) -> str:
  found = glob.glob(str(tmp_dir / "tmp*" / f"ckpt-{step}.index"))
  assert len(found) == 1, os.listdir(tmp_dir)
  return found[0][:-len(".index")]


def _log_steps(model_dir) -> list[int]:
  with open(os.path.join(model_dir, "log"), encoding="utf-8") as f:
    return [int(line.split(" step: ")[1].split(",")[0]) for line in f]


def test_mirrored_over_two_logical_cpus(mirrored_run):
  proc, model_dir = mirrored_run
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(proc.stdout)
  assert result["status"] == "completed" and result["step"] == 20
  assert result["num_replicas"] == 2  # really two replicas, not a silent one-device fallback
  status = json.loads((model_dir / "job_status.json").read_text())
  assert status["status"] == "completed" and status["step"] == 20
  assert status["num_replicas"] == 2
  assert _log_steps(model_dir) == [10, 20]
  assert os.path.exists(model_dir / "ckpt-20.index")
  # Every validation image counted once, the odd one included (oneDNN failed on the empty
  # replica batch of a CPU-only mirrored evaluation).
  accuracy = result["eval_metrics"]["accuracy"]
  assert 0 <= accuracy <= 1 and round(accuracy * 359) == pytest.approx(accuracy * 359, abs=1e-3)


def test_two_workers_train_identical_weights_and_report_one_evaluation(digits32, tmp_path):
  dirs = [tmp_path / "worker0", tmp_path / "worker1"]
  results = _run_workers(tmp_path, dirs, "--dataset_dir", digits32, "--mode",
                         "train_and_post_eval", "--params_override",
                         "trainer.train_steps=10,trainer.steps_per_loop=5,"
                         "trainer.checkpoint_interval=5")
  for r in results:
    assert r["status"] == "completed" and r["step"] == 10 and r["resumed_from"] == 0
    assert r["num_replicas"] == 2  # one replica per worker, in sync
  # The post-run evaluation covers the whole validation split across both workers: one number.
  assert results[0]["eval_metrics"] == results[1]["eval_metrics"]
  with open(os.path.join(digits32, "dataset_info.json"), encoding="utf-8") as f:
    info = json.load(f)
  total = int(info["splits"]["validation"]["num_records"])  # 359, in 4 shards: 2 per worker
  accuracy = results[0]["eval_metrics"]["accuracy"]
  assert 0 < accuracy < 1
  assert round(accuracy * total) == pytest.approx(accuracy * total, abs=1e-3)  # k of all images

  # Worker 0 is the chief: it alone writes the run's files; worker 1 checkpoints in its TMPDIR.
  chief, other = dirs
  status = json.loads((chief / "job_status.json").read_text())
  assert status["status"] == "completed" and status["step"] == 10
  assert _log_steps(chief) == [5, 10]
  for name in ("log", "job_status.json", "params.yaml", "checkpoint", "train_metrics.jsonl"):
    assert not (other / name).exists(), name
  assert not glob.glob(str(tmp_path / "tmp0" / "tmp*" / "ckpt-*"))

  final = checkpoint_variables(str(chief / "ckpt-10"))
  assert_same_variables(final, checkpoint_variables(_non_chief_checkpoint(tmp_path / "tmp1", 10)))
  # The comparison can tell trained weights apart: the chief's step-5 weights differ.
  earlier = checkpoint_variables(str(chief / "ckpt-5"))
  kernels = [n for n in final if n.endswith("/kernel/.ATTRIBUTES/VARIABLE_VALUE")]
  assert any(not np.array_equal(earlier[n], final[n]) for n in kernels)


# Slow tier (two more TensorFlow workers, 50 s): the default tier trains the same two workers to
# identical weights (test_two_workers_train_identical_weights_and_report_one_evaluation) and
# resumes a killed run to the same end (tests/test_train_run.py, test_killed_run_resumes_...).
@pytest.mark.slow
def test_two_workers_resume_from_the_chiefs_checkpoint_in_a_shared_model_dir(
    digits32, mirrored_run, tmp_path):
  # Start from the mirrored run's step-20 checkpoint (checkpoints do not depend on the strategy).
  _, seed_dir = mirrored_run
  shared = tmp_path / "shared"
  shutil.copytree(seed_dir, shared)
  results = _run_workers(tmp_path, [shared, shared], "--dataset_dir", digits32, "--mode",
                         "train", "--params_override",
                         "trainer.train_steps=25,trainer.steps_per_loop=5")
  for r in results:
    assert r["status"] == "completed" and r["step"] == 25 and r["resumed_from"] == 20
  assert _log_steps(shared) == [10, 20, 25]
  resumed = checkpoint_variables(str(shared / "ckpt-25"))
  assert_same_variables(resumed, checkpoint_variables(_non_chief_checkpoint(tmp_path / "tmp1", 25)))
  assert int(resumed["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == 25
