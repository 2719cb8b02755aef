"""`nascli run_latency_calculator_local` beside a running `search_in_local --latency_calculator
external`: rewards from the calculators' latencies, work shared by trial id, a late calculator
catching up, no trial measured twice; TFLite conversion checked against the Keras model; bad
flags refused before TensorFlow loads."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import tf_probe
from conftest import journal_events
from conftest import main_in_fresh_interpreter

TESTING_YAML = "tf_vision/test_files/fast_nas_classification_search_for_testing.yaml"
TINY = "trainer.train_steps=10,trainer.steps_per_loop=5,trainer.checkpoint_interval=10"
TARGET_MS = 2.0


def _popen(*args, env):
  return subprocess.Popen([sys.executable, "-m", "nascli", *map(str, args)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env))


def _calculator(job, worker_id, env):
  return _popen("run_latency_calculator_local", "--local_output_dir", job,
                "--num_latency_workers", "2", "--latency_worker_id", worker_id,
                "--poll_interval_s", "0.5", "--idle_timeout_s", "300", "--json", env=env)


def _wait_for(path, procs, seconds=300):
  deadline = time.monotonic() + seconds
  while not os.path.exists(path):
    for proc in procs:
      assert proc.poll() is None, proc.communicate()[1][-2000:]
    assert time.monotonic() < deadline, f"{path} never appeared"
    time.sleep(0.2)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
  """A 2-trial search whose latency comes from two calculators: worker 0 (trial 2) started
  with it, worker 1 (trial 1) only once trial 1 waits for its latency (worker 0, alone until
  then, leaves trial 1 waiting: it is not of its share)."""
  root = tmp_path_factory.mktemp("latency_calculator")
  job = root / "job"
  job.mkdir()  # the calculator needs the folder; it waits for the search's journal
  env = {"NASCLI_CACHE_DIR": str(root / "cache")}
  search = _popen("search_in_local", "--prebuilt_search_space", "mnasnet", "--local_output_dir",
                  job, "--max_nas_trial", "2", "--seed", "3", "--target_device_latency_ms",
                  TARGET_MS, "--latency_calculator", "external", "--latency_timeout_s", "300",
                  "--search_docker_flags", f"params_override={TINY}", "--export_top_k", "0",
                  "--early_stopping", "none", "--json", env=env)
  first = _calculator(job, 0, env)
  _wait_for(job / "1" / "latency_request.json", [search, first])
  late_start = time.time()
  late = _calculator(job, 1, env)
  outputs = {name: proc.communicate(timeout=400) + (proc.returncode,)
             for name, proc in (("search", search), ("worker0", first), ("worker1", late))}
  return {"job": job, "outputs": outputs, "late_start": late_start}


def _result(job, trial_id):
  return json.loads((job / trial_id / "latency_result.json").read_text())


def _completed(job):
  return {e["trial_id"]: e for e in journal_events(job) if e["event"] == "completed"}


def test_rewards_use_the_calculators_latency(searched):
  from nascli.search import reward  # pylint: disable=g-import-not-at-top
  job = searched["job"]
  for name, (_, err, code) in searched["outputs"].items():
    assert code == 0, f"{name}: {err[-2000:]}"
  completed = _completed(job)
  assert sorted(completed) == ["1", "2"]
  for trial_id, event in completed.items():
    result = _result(job, trial_id)
    latency = result["latency_ms"]
    assert latency > 0
    assert event["metrics"]["latency_ms"] == latency
    assert event["reward"] == pytest.approx(
        reward.compute(event["metrics"]["accuracy"], latency, TARGET_MS), rel=1e-12)
    analysis = json.loads((job / trial_id / "model_analysis.json").read_text())
    assert analysis["latency_ms"] == latency and analysis["reward"] == event["reward"]
    assert analysis["latency"]["measured_on"].startswith("the latency calculator")
    device = analysis["latency_device"]
    assert device["source"] == "calculator" and device["target_device_type"] == "cpu"
    assert device == result["latency_device"] == event["metrics"]["latency_device"]
    # The calculator timed the trained weights, from the trial's own folder.
    assert result["report"]["restored_checkpoint"] is True


def test_two_calculators_measure_disjoint_trials(searched):
  job = searched["job"]
  by_worker = {}
  for trial_id in ("1", "2"):
    worker = _result(job, trial_id)["worker"]
    assert worker["num_latency_workers"] == 2
    by_worker.setdefault(worker["latency_worker_id"], []).append(trial_id)
  assert by_worker == {0: ["2"], 1: ["1"]}
  # What each printed on stdout (a JSON line per trial) is what it wrote.
  for worker_id, trials in by_worker.items():
    out = searched["outputs"][f"worker{worker_id}"][0]
    lines = [json.loads(line) for line in out.splitlines()]
    assert [r["trial_id"] for r in lines] == trials
    assert [r["latency_ms"] for r in lines] == [_result(job, t)["latency_ms"] for t in trials]


def test_a_calculator_started_late_catches_up(searched):
  job = searched["job"]
  request = json.loads((job / "1" / "latency_request.json").read_text())
  # Trial 1 asked before worker 1 existed, and waited for it: no timeout, no failure.
  requested = time.mktime(time.strptime(request["requested_at"][:19], "%Y-%m-%dT%H:%M:%S"))
  assert requested - time.timezone <= searched["late_start"] + 1
  assert "0 trial(s) of its share already measured, 1 waiting" in (
      searched["outputs"]["worker1"][1])
  assert not [e for e in journal_events(job) if e["event"] == "failed"]


def test_a_restarted_calculator_measures_nothing_twice(searched):
  """Every trial of its share has a result: a rerun measures none (and loads no TensorFlow),
  the results stay as they were."""
  job = searched["job"]
  before = {t: (job / t / "latency_result.json").read_bytes() for t in ("1", "2")}
  proc, tf_loaded = tf_probe.run("run_latency_calculator_local", "--local_output_dir", job,
                                 "--num_latency_workers", "2", "--latency_worker_id", "1")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout == "" and not tf_loaded
  assert "1 trial(s) of its share already measured, 0 waiting" in proc.stderr
  assert "measured 0 trial(s); the search has ended (2 of 2 trials done)" in proc.stderr
  assert {t: (job / t / "latency_result.json").read_bytes() for t in before} == before


def test_list_trials_names_the_measured_device(searched):
  proc, _ = tf_probe.run("list_trials", searched["job"], "--json")
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows = json.loads(proc.stdout)
  assert len(rows) == 2
  for row in rows:
    assert row["latency_device"] == _result(searched["job"], row["trial_id"])["latency_device"]
    assert row["latency_device"]["host"] and row["latency_device"]["device"]


def test_tflite_conversion_is_the_keras_model(searched):
  """cpu-tflite: the interpreter computes what the trained Keras model computes, on the same
  input, and its latency is positive."""
  # pylint: disable=g-import-not-at-top
  from nascli import frameworks
  frameworks.load()
  from tf_vision.serving import device_latency, export_lib
  params, model, restored = device_latency.load_trial_model(str(searched["job"] / "2"))
  assert restored
  image = np.random.default_rng(5).standard_normal(
      [1, *export_lib.image_size_of(params), 3]).astype(np.float32)
  interpreter = device_latency.tflite_interpreter(
      device_latency.convert_tflite(params, model), num_threads=1)
  outputs = device_latency.run_tflite(interpreter, image,
                                      device_latency.output_names(params, model))
  logits = model(image, training=False).numpy()
  assert sorted(outputs) == ["logits", "probs"]
  np.testing.assert_allclose(outputs["logits"], logits, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(outputs["probs"][0].sum(), 1.0, rtol=1e-5)
  assert np.abs(logits).max() > 1e-3  # not a model of zeros
  report = device_latency.tflite_latency(params, model, num_threads=1, warmup=2, runs=5)
  assert report["latency_ms"] > 0 and report["tflite_bytes"] > 10_000


def test_a_trial_gives_up_naming_the_calculator(tmp_path):
  from nascli import latency_calculator  # pylint: disable=g-import-not-at-top
  trial = tmp_path / "7"
  trial.mkdir()
  latency_calculator.request(str(trial), "7", str(trial))
  assert json.loads((trial / "latency_request.json").read_text())["trial_id"] == "7"
  with pytest.raises(latency_calculator.LatencyTimeout,
                     match=r"^no latency for trial 7 from a latency calculator within 0.2 s"
                           r" \(--latency_timeout_s\): run `nascli run_latency_calculator_local"
                           rf" --local_output_dir {tmp_path}`"):
    latency_calculator.wait_for_result(str(trial), "7", 0.2, str(tmp_path), poll_s=0.05)
  (trial / "latency_result.json").write_text(json.dumps(
      {"trial_id": "7", "error": "NascliError: no params.yaml",
       "worker": {"latency_worker_id": 1, "num_latency_workers": 2, "host": "h"}}))
  with pytest.raises(latency_calculator.NascliError,
                     match=r"the latency calculator \(worker 1 of 2 on h\) could not measure"
                           r" trial 7: NascliError: no params.yaml"):
    latency_calculator.wait_for_result(str(trial), "7", 5, str(tmp_path))

def test_bad_flags_are_refused_before_tensorflow(tmp_path):
  job = tmp_path / "job"
  job.mkdir()
  command = ["run_latency_calculator_local", "--local_output_dir", str(job)]
  cases = [
      (command + ["--latency_worker_id", "2", "--num_latency_workers", "2"], 1,
       "--latency_worker_id 2 is out of range; allowed: 0 to 1 (--num_latency_workers 2)"),
      (command + ["--num_latency_workers", "0"], 1,
       "--num_latency_workers 0 is out of range; allowed: 1 or more"),
      (["run_latency_calculator_local"], 1,
       "give the search's job dir: --local_output_dir JOB_DIR (a folder or gs://BUCKET/PREFIX)"),
      (["run_latency_calculator_local", "--local_output_dir", str(tmp_path / "missing")], 1,
       f"--local_output_dir {tmp_path}/missing does not exist; start the search first (the"
       " calculator then waits for its trials)"),
      # An unknown choice of a command's own option is a usage error (exit 2), as for every
      # nascli command (help_layout.UsageError).
      (command + ["--target_device_type", "cpu_tflite"], 2,
       "unknown --target_device_type 'cpu_tflite' (did you mean 'cpu-tflite'?); known: cpu,"
       " gpu, cpu-tflite"),
      (["search_in_local", "--latency_calculator", "remote"], 2,
       "unknown --latency_calculator 'remote'; known: in_trial, external"),
      (["search_in_local", "--latency_calculator", "external", "--latency_timeout_s", "0"], 1,
       "--latency_timeout_s must be a positive number of seconds, got 0.0"),
  ]
  results = main_in_fresh_interpreter([c[0] for c in cases])
  for (argv, code, message), (got_code, err, tf_loaded) in zip(cases, results, strict=True):
    assert (got_code, err, tf_loaded) == (code, f"Error: {message}\n", False), argv
