"""Warm trial workers: the same results as a fresh process, isolation of a trial that dies, no
worker left behind by a killed driver, an exact resume, and no temporary files left over."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import convert_digits32
from conftest import journal_events

ROOT = Path(__file__).resolve().parents[1]
TESTING_YAML = str(ROOT / "tf_vision" / "test_files"
                   / "fast_nas_classification_search_for_testing.yaml")
SHORT = "trainer.train_steps=20,trainer.steps_per_loop=10,trainer.checkpoint_interval=10"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("nascli_cache"))


def _specs(job_dir: Path, data: str, architectures: list[dict]) -> list[str]:
  """trial_spec.json files, trial i training architectures[i - 1] with seed 11."""
  # pylint: disable=g-import-not-at-top
  from nascli import run_spec
  from nascli.search import trial
  settings = run_spec.TrialSettings(
      run=run_spec.RunSpec(config_files=[TESTING_YAML], params_override=SHORT,
                           data=run_spec.DataSpec(dataset_dir=data), seed=11),
      latency_runs=3)
  paths = []
  for index, nas_params in enumerate(architectures, start=1):
    spec = trial.TrialSpec(job_dir=str(job_dir), trial_id=str(index), search_space="mnasnet",
                           nas_params=nas_params, trial=settings, spawned_at=time.time())
    os.makedirs(spec.trial_dir, exist_ok=True)
    paths.append(os.path.join(spec.trial_dir, "trial_spec.json"))
    Path(paths[-1]).write_text(json.dumps(dataclasses.asdict(spec)))
  return paths


def _architectures(count: int) -> list[dict]:
  # pylint: disable=g-import-not-at-top
  from nascli.search import controller
  from tf_vision import search_spaces
  return controller.random_architectures(search_spaces.get_search_space("mnasnet"), count, 4)


def _analysis(job_dir: Path, trial_id: str) -> dict:
  return json.loads((job_dir / trial_id / "model_analysis.json").read_text())


# Slow tier: a worker trial's outputs and timing are checked in the default tier by
# tests/test_search_local.py's searches.
@pytest.mark.slow
def test_a_warm_worker_trains_as_a_fresh_process_and_leaves_no_temp_files(tmp_path):
  """One architecture trained with --seed as a warm worker's 1st and 5th trial (three others
  between) and in a fresh trial process: the same accuracy and loss, to the last bit. Neither
  process leaves a file in its temp folder (autograph's generated modules included)."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import warm_workers
  data = convert_digits32(tmp_path / "digits32", num_shards=2)
  a, b, c = _architectures(3)
  job = tmp_path / "job"
  specs = _specs(job, data, [a, b, c, b, a, a])
  temp = tmp_path / "tmp"
  temp.mkdir()
  env = dict(os.environ, TMPDIR=str(temp), TF_CPP_MIN_LOG_LEVEL="3")
  worker = warm_workers.Worker(env, str(ROOT), str(job / "workers" / "w.log"), max_requests=5)
  requests = [worker.submit("trial", str(job / str(i) / "trial.log"), spec=spec)
              for i, spec in enumerate(specs[:5], start=1)]
  deadline = time.monotonic() + 900
  while worker.result(requests[-1]) is None and worker.exit_code() is None:
    assert time.monotonic() < deadline
    time.sleep(0.2)
  assert [worker.result(r) for r in requests] == [0] * 5, (job / "1" / "trial.log").read_text()
  assert worker.process.wait(timeout=60) == 0  # it served its 5 and ended by itself
  worker.close()
  fresh = subprocess.run([sys.executable, "-m", "nascli.search.trial", specs[5]], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
  assert fresh.returncode == 0, (job / "6" / "trial.log").read_text()[-2000:]
  first, fifth, alone = (_analysis(job, t) for t in ("1", "5", "6"))
  assert first["step"] == fifth["step"] == alone["step"] == 20
  for key in ("accuracy", "validation_loss"):
    assert first["eval_metrics"][key] == fifth["eval_metrics"][key] == alone["eval_metrics"][key]
  assert first["params"] == fifth["params"] == alone["params"]
  assert _analysis(job, "2")["params"] != first["params"]  # other architectures between
  assert sorted(os.listdir(temp)) == []


def _search(job: Path, cache: str, *extra: str, env: dict | None = None, **kwargs):
  args = [sys.executable, "-m", "nascli", "search_in_local", "--prebuilt_search_space",
          "mnasnet", "--local_output_dir", str(job), "--seed", "3", "--params_override", SHORT,
          "--export_top_k", "0", *extra]
  full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NASCLI_CACHE_DIR=cache, **(env or {}))
  return args, full_env


# The fault, injected by the test into every Python process of the search (a sitecustomize
# on PYTHONPATH): the attempt of trial $ABORT_TRIAL kills its own process (os.abort) as it
# starts, as a segfault or an out-of-memory kill would.
_ABORTING_ATTEMPT = """
import os
from nascli.search import trial
_attempt = trial.attempt
def _aborting(spec_path):
  if trial.read_spec(spec_path).trial_id == os.environ["ABORT_TRIAL"]:
    os.abort()
  return _attempt(spec_path)
trial.attempt = _aborting
"""


# Slow tier: the rule (a worker that dies under an accepted trial fails it; the next trial
# gets a fresh worker) is checked with real workers in tests/test_executor_failures.py.
@pytest.mark.slow
def test_a_trial_that_kills_its_process_is_recorded_and_the_next_runs_in_a_fresh_worker(
    cache, tmp_path):
  job = tmp_path / "job"
  hook = tmp_path / "hook"
  hook.mkdir()
  (hook / "sitecustomize.py").write_text(_ABORTING_ATTEMPT)
  path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p)
  args, env = _search(job, cache, "--max_nas_trial", "3", "--json",
                      env={"PYTHONPATH": path, "ABORT_TRIAL": "2"})
  proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows = {r["trial_id"]: r for r in json.loads(proc.stdout)}
  assert [rows[t]["status"] for t in "123"] == ["completed", "failed", "completed"]
  failed = [e for e in journal_events(job) if e["event"] == "failed"]
  assert [e["trial_id"] for e in failed] == ["2"]
  assert "worker" in failed[0]["reason"] and "SIGABRT" in failed[0]["reason"], failed[0]
  # Trial 3 waited for a new worker's imports (trial 1's worker started with the driver); the
  # dead one's log and the new one's are kept.
  assert _analysis(job, "3")["timing"]["startup_s"] > 2
  assert _analysis(job, "1")["timing"]["startup_s"] < _analysis(job, "3")["timing"]["startup_s"]
  assert sorted(os.listdir(job / "workers")) == ["worker-1.log", "worker-2.log"]


def _worker_pids(parent: int) -> list[int]:
  """Live `nascli.search.worker` processes whose parent is `parent`."""
  pids = []
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      stat = Path(f"/proc/{entry}/stat").read_text()
      cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
    except OSError:
      continue
    fields = stat.rsplit(")", 1)[1].split()
    if int(fields[1]) == parent and (b"nascli.search.worker" in cmdline or b"nascli.search.preflight" in cmdline) and fields[0] != "Z":
      pids.append(int(entry))
  return pids


def _alive(pid: int) -> bool:
  try:
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
  except OSError:
    return False
  return state != "Z"


# Slow tier (a search SIGKILLed mid-trial and rerun, 65-95 s): the default tier checks that
# children die with their parent (tests/test_executor_failures.py::
# test_children_die_with_their_parent) and that a killed search resumes without repeating a
# trial (tests/test_gcs_search.py::test_killed_search_resumes_from_the_gcs_journal,
# tests/test_search_local.py's Ctrl-C test).
@pytest.mark.slow
def test_a_killed_driver_leaves_no_worker_and_resumes_with_exactly_max_trials(cache, tmp_path):
  job = tmp_path / "job"
  args, env = _search(job, cache, "--max_nas_trial", "2")
  driver = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.monotonic() + 600
    while not (job / "2" / "train_metrics.jsonl").exists():  # trial 2 is training
      assert driver.poll() is None and time.monotonic() < deadline
      time.sleep(0.2)
    workers = _worker_pids(driver.pid)
    assert len(workers) == 1
    driver.send_signal(signal.SIGKILL)
    driver.wait()
  finally:
    if driver.poll() is None:
      driver.kill()
  deadline = time.monotonic() + 10
  while _alive(workers[0]) and time.monotonic() < deadline:
    time.sleep(0.1)
  assert not _alive(workers[0]), "the worker outlived its driver"
  resumed = subprocess.run(args + ["--json"], env=env, capture_output=True, text=True,
                           timeout=900, check=False)
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  events = journal_events(job)
  assert [e["trial_id"] for e in events if e["event"] == "proposed"] == ["1", "2"]
  assert [e["trial_id"] for e in events if e["event"] == "completed"] == ["1", "2"]
  started = [(e["trial_id"], e["attempt"]) for e in events if e["event"] == "started"]
  assert started == [("1", 1), ("2", 1), ("2", 2)]  # trial 1 not repeated
  assert len(json.loads(resumed.stdout)) == 2
