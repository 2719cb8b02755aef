"""`nascli search` on a private Ray instance: the search_in_local outputs, and a worker killed
mid-trial retried."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import journal_events
from conftest import nascli_subprocess

pytest.importorskip("ray")

SHORT = "trainer.train_steps=20,trainer.steps_per_loop=10,trainer.checkpoint_interval=10"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("nascli_cache"))


@pytest.fixture
def ray_dir():
  # Ray's unix sockets live under its temp dir: keep the path short (the 107-byte limit).
  path = tempfile.mkdtemp(prefix="ray", dir="/tmp")
  yield path
  shutil.rmtree(path, ignore_errors=True)


def _ray_flags(ray_dir):
  return ["--ray_address", "local", "--ray_num_cpus", "2", "--ray_temp_dir", ray_dir]


def test_two_trial_search_on_ray_writes_what_search_in_local_writes(cache, tmp_path, ray_dir):
  job = tmp_path / "job"
  proc = nascli_subprocess("search", *_ray_flags(ray_dir), "--prebuilt_search_space",
                           "mnasnet", "--local_output_dir", job, "--seed", "4",
                           "--max_nas_trial", "2", "--max_parallel_nas_trial", "2",
                           "--target_device_latency_ms", "2", "--params_override", SHORT,
                           "--json", env={"NASCLI_CACHE_DIR": cache})
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows = json.loads(proc.stdout)
  assert [(r["trial_id"], r["status"]) for r in rows] == [("1", "completed"), ("2", "completed")]
  assert rows[0]["nas_params"] != rows[1]["nas_params"]
  for r in rows:
    assert 0.0 <= r["accuracy"] <= 1.0 and r["latency_ms"] > 0
    assert r["reward"] == pytest.approx(r["accuracy"] * (2.0 / r["latency_ms"]) ** 0.07)
    for name in ("nas_params_str.json", "params.yaml", "model_analysis.json", "job_status.json",
                 "trial.log"):
      assert (job / r["trial_id"] / name).exists(), name
  assert len(json.loads((job / "trials.json").read_text())) == 2
  assert (job / "trials.csv").read_text().count("\n") == 3
  assert (job / "search_progress.png").stat().st_size > 5000
  assert sorted(p for p in os.listdir(job / "hparams") if p.startswith("trial-")) == [
      "trial-0001", "trial-0002"]
  # The same seed proposes what search_in_local proposes: one controller, two executors.
  events = journal_events(job)
  local = tmp_path / "local"
  from conftest import proposals_of  # pylint: disable=g-import-not-at-top
  assert [e["dna"] for e in events if e["event"] == "proposed"] == proposals_of(
      cache, local, 4, "random")[:2]
  listed = nascli_subprocess("list_trials", job, "--json")
  assert sorted(r["reward"] for r in json.loads(listed.stdout)) == sorted(
      r["reward"] for r in rows)
  # Ray is gone with the search: nothing of the private instance keeps running.
  assert not _processes_with(ray_dir)


def _processes_with(text):
  found = []
  for pid in os.listdir("/proc"):
    if not pid.isdigit():
      continue
    try:
      with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
      continue
    if text in cmdline:
      found.append(int(pid))
  return found


def _parent(pid):
  with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
    return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a_killed_ray_worker_has_its_trial_retried(cache, tmp_path, ray_dir):
  job = tmp_path / "job"
  args = [sys.executable, "-m", "nascli", "search", *_ray_flags(ray_dir),
          "--prebuilt_search_space", "mnasnet", "--local_output_dir", str(job), "--seed", "6",
          "--max_nas_trial", "2", "--max_parallel_nas_trial", "1", "--params_override", SHORT,
          "--json"]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NASCLI_CACHE_DIR=cache)
  driver = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
  spec = f"{job}/1/trial_spec.json"
  killed = None
  deadline = time.monotonic() + 300
  while time.monotonic() < deadline and driver.poll() is None and killed is None:
    trials = _processes_with(spec)
    if trials:
      time.sleep(2)  # the trial is under way
      worker = _parent(trials[0])
      os.kill(worker, signal.SIGKILL)
      killed = worker
    time.sleep(0.2)
  out, err = driver.communicate(timeout=900)
  assert killed is not None, err[-2000:]
  assert driver.returncode == 0, err[-2000:]
  assert "trial 1: attempt lost" in err
  events = journal_events(job)
  trial1 = [(e["event"], e.get("attempt")) for e in events if e.get("trial_id") == "1"]
  assert trial1 == [("proposed", None), ("started", 1), ("lost", 1), ("started", 2),
                    ("completed", None)]
  lost = next(e for e in events if e["event"] == "lost")
  assert "Worker" in lost["reason"] or "worker" in lost["reason"]
  rows = json.loads(out)
  assert [(r["trial_id"], r["status"]) for r in rows] == [("1", "completed"), ("2", "completed")]
  assert not _processes_with(spec)


def test_sigterm_stops_the_ray_trials_which_record_it(cache, tmp_path, ray_dir):
  """SIGTERM to the driver: its Ray task passes the stop on to the trial process, which records
  `interrupted` itself at its checkpoint (a Ray worker blocks SIGINT; its trial must not
  inherit that); one line, exit 143, the journal says `interrupted`."""
  job = tmp_path / "job"
  args = [sys.executable, "-m", "nascli", "search", *_ray_flags(ray_dir),
          "--prebuilt_search_space", "mnasnet", "--local_output_dir", str(job), "--seed", "6",
          "--max_nas_trial", "1", "--params_override", SHORT]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NASCLI_CACHE_DIR=cache)
  driver = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
  metrics = job / "1" / "train_metrics.jsonl"
  deadline = time.monotonic() + 300
  while driver.poll() is None and time.monotonic() < deadline and not (
      metrics.exists() and metrics.read_text().strip()):
    time.sleep(0.2)
  driver.send_signal(signal.SIGTERM)
  _, err = driver.communicate(timeout=300)
  assert driver.returncode == 143, err[-2000:]
  status = json.loads((job / "1" / "job_status.json").read_text())
  # Written by the trial (the task forwards SIGINT), not by the driver's fallback (SIGTERM).
  assert (status["status"], status["signal"]) == ("interrupted", "SIGINT"), status
  assert err.strip().splitlines()[-1].startswith(
      f"Interrupted (SIGTERM): search {job} (0 of 1 trials done, trial 1 stopped at step")
  assert "Traceback" not in (job / "1" / "trial.log").read_text()
  assert [e["event"] for e in journal_events(job)][-2:] == ["started", "interrupted"]
  assert not _processes_with(f"{job}/1/trial_spec.json")


def test_search_without_ray_says_how_to_install_it(cli, monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` does when it is absent
  code, stdout, stderr = cli("search", "--local_output_dir", tmp_path / "job")
  assert code == 1 and stdout == ""
  assert stderr.strip() == ("Error: Ray is not installed: pip install 'nascli[ray]' (or: pip"
                            " install 'ray[default]')")
  assert not (tmp_path / "job").exists()


def test_bad_runtime_env_is_one_line(cli, tmp_path):
  code, _, stderr = cli("search", "--runtime_env", "{not json", "--local_output_dir",
                        tmp_path / "job")
  assert code == 1 and stderr.startswith("Error: --runtime_env: not valid JSON")
  assert len(stderr.strip().splitlines()) == 1


def test_no_cluster_at_auto_is_one_line_with_a_hint(cli, tmp_path, monkeypatch):
  monkeypatch.delenv("RAY_ADDRESS", raising=False)
  code, _, stderr = cli("search", "--ray_address", "auto", "--local_output_dir",
                        tmp_path / "job")
  assert code == 1 and len(stderr.strip().splitlines()) == 1, stderr
  assert stderr.startswith("Error: --ray_address auto: cannot connect to Ray")
  assert "--ray_address local" in stderr
  assert not (tmp_path / "job").exists()
