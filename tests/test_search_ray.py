"""`nascli search` on a private Ray instance: the search_in_local outputs, a warm worker per
actor, and what dies mid-trial: a trial's worker (the trial fails, the next runs), its actor or
a task's Ray worker (the attempt is lost and retried), the driver (nothing is left behind)."""

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
from conftest import controller_proposals
from conftest import free_ports
from conftest import nascli_subprocess

pytest.importorskip("ray")

SHORT = "trainer.train_steps=20,trainer.steps_per_loop=10,trainer.checkpoint_interval=10"
WORKER = "nascli.search.worker"  # in a warm worker's command line


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("nascli_cache"))


def _new_ray_dir():
  # Ray's unix sockets live under its temp dir: keep the path short (the 107-byte limit).
  return tempfile.mkdtemp(prefix="ray", dir="/tmp")


@pytest.fixture
def ray_dir():
  path = _new_ray_dir()
  yield path
  shutil.rmtree(path, ignore_errors=True)


def _ray_flags(ray_dir):
  return ["--ray_address", "local", "--ray_num_cpus", "2", "--ray_temp_dir", ray_dir]


@pytest.fixture(scope="module")
def searched(cache, tmp_path_factory):
  """Three trials, two at a time, on two actors (the default --trial_isolation worker); no
  export at the end."""
  job = tmp_path_factory.mktemp("ray_search") / "job"
  ray_dir = _new_ray_dir()
  try:
    proc = nascli_subprocess("search", *_ray_flags(ray_dir), "--prebuilt_search_space",
                             "mnasnet", "--local_output_dir", job, "--seed", "4",
                             "--max_nas_trial", "3", "--max_parallel_nas_trial", "2",
                             "--target_device_latency_ms", "2", "--params_override", SHORT,
                             "--export_top_k", "0", "--json", env={"NASCLI_CACHE_DIR": cache})
    left = _processes_with(ray_dir)
  finally:
    shutil.rmtree(ray_dir, ignore_errors=True)
  return job, proc, left


def test_a_search_on_ray_writes_what_search_in_local_writes(searched):
  job, proc, left = searched
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows = json.loads(proc.stdout)
  assert [(r["trial_id"], r["status"]) for r in rows] == [
      ("1", "completed"), ("2", "completed"), ("3", "completed")]
  assert len({json.dumps(r["nas_params"], sort_keys=True) for r in rows}) == 3
  for r in rows:
    assert 0.0 <= r["accuracy"] <= 1.0 and r["latency_ms"] > 0
    assert r["reward"] == pytest.approx(r["accuracy"] * (2.0 / r["latency_ms"]) ** 0.07)
    for name in ("nas_params_str.json", "params.yaml", "model_analysis.json", "job_status.json",
                 "trial.log"):
      assert (job / r["trial_id"] / name).exists(), name
  # No SavedModel (--export_top_k 0; the end-of-search export: tests/test_search_local.py).
  assert not [r for r in rows if (job / r["trial_id"] / "export").exists()]
  assert len(json.loads((job / "trials.json").read_text())) == 3
  assert (job / "trials.csv").read_text().count("\n") == 4
  assert (job / "search_progress.png").stat().st_size > 5000
  assert sorted(p for p in os.listdir(job / "hparams") if p.startswith("trial-")) == [
      "trial-0001", "trial-0002", "trial-0003"]
  # The same seed proposes what search_in_local proposes: one controller, two executors.
  events = journal_events(job)
  assert [e["dna"] for e in events if e["event"] == "proposed"] == controller_proposals(
      "tpe", 4)  # the default algorithm
  listed = nascli_subprocess("list_trials", job, "--json")
  assert sorted(r["reward"] for r in json.loads(listed.stdout)) == sorted(
      r["reward"] for r in rows)
  # Ray is gone with the search: nothing of the private instance keeps running, no worker.
  assert not left
  assert not _workers_in(job)


def test_each_ray_actor_keeps_one_warm_worker(searched):
  """Trials 1 and 2 start the two actors, whose workers import TensorFlow; trial 3 goes to the
  actor that is free first, whose worker has it imported already."""
  job, proc, _ = searched
  assert proc.returncode == 0, proc.stderr[-2000:]
  startup = {t: json.loads((job / t / "model_analysis.json").read_text())["timing"]["startup_s"]
             for t in ("1", "2", "3")}
  assert startup["1"] > 2 and startup["2"] > 2 and startup["3"] < 1, startup
  # One worker per actor (slot.actor-worker), none replaced; the worker's own output is there.
  assert sorted(os.listdir(job / "workers")) == ["ray-0.1-1.log", "ray-1.2-1.log"]


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


def _output_of(pid):
  """Where the process's stdout goes ("" if it is gone)."""
  try:
    return os.readlink(f"/proc/{pid}/fd/1")
  except OSError:
    return ""


def _workers_in(job):
  """The warm workers whose output goes to the job dir: a trial's log, or between trials its
  worker log."""
  return [p for p in _processes_with(WORKER) if _output_of(p).startswith(f"{job}/")]


def _worker_running(job, trial_id, timeout_s=300):
  """The pid of the warm worker running the trial (its output goes to the trial's log)."""
  log = f"{job}/{trial_id}/trial.log"
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    for pid in _processes_with(WORKER):
      if _output_of(pid) == log:
        return pid
    time.sleep(0.2)
  return None


def _gone(pid, timeout_s=15):
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    try:
      with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
          return True  # dead, not yet reaped
    except OSError:
      return True
    time.sleep(0.2)
  return False


def _driver(job, cache, ray_dir, *extra, max_nas_trial=2):
  args = [sys.executable, "-m", "nascli", "search", *_ray_flags(ray_dir),
          "--prebuilt_search_space", "mnasnet", "--local_output_dir", str(job), "--seed", "6",
          "--max_nas_trial", str(max_nas_trial), "--max_parallel_nas_trial", "1",
          "--params_override", SHORT, "--export_top_k", "0", *extra]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NASCLI_CACHE_DIR=cache)
  return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env)


# Slow tier (three TensorFlow workers under Ray, 110-180 s): the default tier runs Ray's
# TrialActor with nascli's worker protocol on toy trials, killed at the same points
# (tests/test_executor_failures.py::test_rays_actor_follows_the_same_rules), and a Ray search
# end to end (test_a_search_on_ray_writes_what_search_in_local_writes).
@pytest.mark.slow
def test_a_killed_worker_fails_its_trial_and_a_killed_actor_loses_its_attempt(
    cache, tmp_path, ray_dir):
  """SIGKILL to trial 1's warm worker: trial 1 fails, naming the signal, and the same actor
  starts a fresh worker for trial 2. SIGKILL to that actor (the Ray worker process whose child
  the warm worker is): its worker dies with it, the attempt is lost, and trial 2 runs again on a
  new actor, to completion."""
  job = tmp_path / "job"
  driver = _driver(job, cache, ray_dir, "--json")
  try:
    first = _worker_running(job, "1")
    assert first is not None
    actor = _parent(first)
    os.kill(first, signal.SIGKILL)
    second = _worker_running(job, "2")
    assert second is not None and second != first
    assert _parent(second) == actor  # the same actor, a fresh worker
    os.kill(actor, signal.SIGKILL)
    assert _gone(second), "the warm worker outlived its actor"
    out, err = driver.communicate(timeout=900)
  finally:
    driver.kill()
  assert driver.returncode == 0, err[-2000:]
  assert "trial 2: attempt lost" in err
  rows = json.loads(out)
  assert [(r["trial_id"], r["status"]) for r in rows] == [("1", "failed"), ("2", "completed")]
  events = journal_events(job)
  trial1 = [e for e in events if e.get("trial_id") == "1"]
  assert [(e["event"], e.get("attempt")) for e in trial1] == [
      ("proposed", None), ("started", 1), ("failed", None)]
  assert trial1[-1]["reason"].startswith(f"the trial's worker (pid {first}, on node ")
  assert trial1[-1]["reason"].endswith(") was killed by SIGKILL")
  trial2 = [e for e in events if e.get("trial_id") == "2"]
  assert [(e["event"], e.get("attempt")) for e in trial2] == [
      ("proposed", None), ("started", 1), ("lost", 1), ("started", 2), ("completed", None)]
  assert trial2[2]["reason"].startswith("ActorDiedError: ")
  # Slot 0's first actor ran two workers; its second actor, one.
  assert sorted(os.listdir(job / "workers")) == ["ray-0.1-1.log", "ray-0.1-2.log",
                                                 "ray-0.2-1.log"]
  analysis = json.loads((job / "2" / "model_analysis.json").read_text())
  assert analysis["timing"]["startup_s"] > 2  # in the new actor's fresh worker
  assert not _workers_in(job) and not _processes_with(ray_dir)


# Slow tier: a lost attempt retried on Ray is checked in the default tier with actors
# (test_a_killed_worker_fails_its_trial_and_a_killed_actor_loses_its_attempt).
@pytest.mark.slow
def test_a_killed_ray_worker_has_its_trial_retried(cache, tmp_path, ray_dir):
  """--trial_isolation process: a Ray task per attempt; SIGKILL to the Ray worker running the
  task loses the attempt, and the trial runs again to completion."""
  job = tmp_path / "job"
  driver = _driver(job, cache, ray_dir, "--trial_isolation", "process", "--json",
                   max_nas_trial=1)
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
  assert [(r["trial_id"], r["status"]) for r in rows] == [("1", "completed")]
  assert not _processes_with(spec)


@pytest.mark.parametrize("isolation,recorded", [
    # Slow tier: an actor passing SIGTERM on to its worker is the warm workers' own rule,
    # checked in the default tier by tests/test_search_local.py's SIGTERM test.
    pytest.param("worker", "SIGTERM", marks=pytest.mark.slow), ("process", "SIGINT")])
def test_sigterm_stops_the_ray_trials_which_record_it(cache, tmp_path, ray_dir, isolation,
                                                      recorded):
  """SIGTERM to the driver: each actor passes it on to its worker (a task passes SIGINT on to
  its trial process), and the trial records `interrupted` itself at its checkpoint (a Ray
  worker blocks SIGINT; its children must not inherit that); one line, exit 143, the journal
  says `interrupted`."""
  job = tmp_path / "job"
  driver = _driver(job, cache, ray_dir, "--trial_isolation", isolation, max_nas_trial=1)
  metrics = job / "1" / "train_metrics.jsonl"
  deadline = time.monotonic() + 300
  while driver.poll() is None and time.monotonic() < deadline and not (
      metrics.exists() and metrics.read_text().strip()):
    time.sleep(0.2)
  driver.send_signal(signal.SIGTERM)
  _, err = driver.communicate(timeout=300)
  assert driver.returncode == 143, err[-2000:]
  status = json.loads((job / "1" / "job_status.json").read_text())
  assert (status["status"], status["signal"]) == ("interrupted", recorded), status
  log = (job / "1" / "trial.log").read_text()
  # Written by the trial (the driver's fallback would not log this line).
  said = "SIGTERM" if recorded == "SIGTERM" else "Ctrl-C"
  assert f"Interrupted ({said}): trial 1 (checkpoint at step " in log, log[-2000:]
  assert "Traceback" not in log
  assert err.strip().splitlines()[-1].startswith(
      f"Interrupted (SIGTERM): search {job} (0 of 1 trials done, trial 1 stopped at step")
  assert [e["event"] for e in journal_events(job)][-2:] == ["started", "interrupted"]
  assert not _processes_with(f"{job}/1/trial_spec.json") and not _workers_in(job)


# Slow tier (a Ray instance and a TensorFlow worker, 70 s): the default tier checks that
# children die with their parent (tests/test_executor_failures.py,
# test_children_die_with_their_parent) and that a Ray search leaves no process of its instance
# behind (test_a_search_on_ray_writes_what_search_in_local_writes).
@pytest.mark.slow
def test_a_sigkilled_driver_leaves_no_actor_or_worker_behind(cache, tmp_path, ray_dir):
  job = tmp_path / "job"
  driver = _driver(job, cache, ray_dir, max_nas_trial=1)
  try:
    worker = _worker_running(job, "1")
    assert worker is not None
    actor = _parent(worker)
  finally:
    driver.kill()
    driver.communicate()
  assert _gone(actor, 60) and _gone(worker, 30)
  deadline = time.monotonic() + 60
  while _processes_with(ray_dir) and time.monotonic() < deadline:
    time.sleep(0.5)
  assert not _processes_with(ray_dir) and not _workers_in(job)


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


def test_an_address_where_nothing_answers_is_one_line_at_once(tmp_path):
  """HOST:PORT with no Ray there: one line with the fix, in seconds, without Ray's log lines
  (ray.init alone tries for a minute). `auto` is not tested here: with no RAY_ADDRESS Ray falls
  back to any gcs_server it finds among this machine's processes, which a shared machine may
  have."""
  port = free_ports(1)[0]
  proc = nascli_subprocess("search", "--ray_address", f"127.0.0.1:{port}", "--local_output_dir",
                           tmp_path / "job")
  assert proc.returncode == 1 and proc.stdout == "", proc.stderr
  assert proc.stderr.strip().splitlines() == [
      f"Error: --ray_address 127.0.0.1:{port}: cannot connect to Ray: nothing answers there"
      " (Connection refused); start a cluster with `ray start --head` (it prints the address to"
      " give), or use --ray_address local for a private instance"]
  assert not (tmp_path / "job").exists()
