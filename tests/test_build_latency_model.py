"""`nascli build_latency_model`: the model file a search loads, a journal that survives Ctrl-C,
SIGKILL and a torn line without measuring anything twice, the reference re-timed at every
session, measuring in a Ray actor, and refusals in one line before TensorFlow loads.

One job is built for the module (10 + 3 mnasnet architectures at 32x32, 5 timed runs each), in
three sessions: Ctrl-C after two measurements, SIGKILL after two more, and the rest on a private
Ray instance (the driver journals, an actor measures)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types

import pytest

from conftest import main_in_fresh_interpreter
from conftest import nascli_subprocess

pytest.importorskip("ray")

SEED = 3
SMALL = ("--latency_input_size", "32", "--num_architectures", "10", "--num_heldout", "3",
         "--runs", "5", "--seed", str(SEED))
TOTAL = 13
TORN = '{"event": "measured", "index": 99, "split": "tr'  # a line cut by a kill mid-write


def _events(job) -> list[dict]:
  with open(os.path.join(job, "measurements.jsonl"), encoding="utf-8") as f:
    return [json.loads(line) for line in f.read().splitlines() if line.strip()]


def _measured(job) -> list[dict]:
  try:
    with open(os.path.join(job, "measurements.jsonl"), encoding="utf-8") as f:
      lines = f.read().split("\n")[:-1]  # whole lines only
  except FileNotFoundError:
    return []
  return [e for e in map(json.loads, lines) if e["event"] == "measured"]


def _start(job, *extra) -> subprocess.Popen:
  return subprocess.Popen(
      [sys.executable, "-m", "nascli", "build_latency_model", *SMALL, "--local_output_dir",
       str(job), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))


def _wait_for(job, proc: subprocess.Popen, count: int, timeout_s: float = 600) -> None:
  """Until the journal holds `count` measurements (the process still running)."""
  deadline = time.monotonic() + timeout_s
  while len(_measured(job)) < count:
    if proc.poll() is not None:
      pytest.fail(f"build_latency_model ended ({proc.returncode}) before {count} measurements:"
                  f" {proc.stderr.read()[-2000:]}")
    if time.monotonic() > deadline:
      proc.kill()
      pytest.fail(f"no {count} measurements within {timeout_s} s")
    time.sleep(0.2)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  job = tmp_path_factory.mktemp("latency") / "job"
  first = _start(job)
  _wait_for(job, first, 2)
  first.send_signal(signal.SIGINT)
  _, interrupted_err = first.communicate(timeout=300)
  after_interrupt = [e["index"] for e in _measured(job)]

  second = _start(job)
  _wait_for(job, second, len(after_interrupt) + 2)
  second.kill()  # SIGKILL, while it measures the next one
  second.communicate(timeout=60)
  after_kill = [e["index"] for e in _measured(job)]
  with open(os.path.join(job, "measurements.jsonl"), "a", encoding="utf-8") as f:
    f.write(TORN)  # as if a kill had cut the last line

  ray_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's sockets need a short path
  try:
    third = subprocess.run(
        [sys.executable, "-m", "nascli", "build_latency_model", *SMALL, "--local_output_dir",
         str(job), "--ray_address", "local", "--ray_num_cpus", "1", "--ray_temp_dir", ray_dir],
        capture_output=True, text=True, timeout=900,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  finally:
    shutil.rmtree(ray_dir, ignore_errors=True)
  assert third.returncode == 0, third.stderr[-3000:]
  return types.SimpleNamespace(
      job=str(job), model=os.path.join(job, "latency_model.json"),
      interrupted=(first.returncode, interrupted_err), after_interrupt=after_interrupt,
      killed=second.returncode, after_kill=after_kill, last=third)


def test_the_model_file_is_one_a_search_loads_for_this_target(built):
  # pylint: disable=g-import-not-at-top
  from nascli import latency_calculator, latency_model
  model = latency_model.load(built.model)
  assert (model.space, model.runtime, model.input_size, model.num_threads) == (
      "mnasnet", "cpu-tflite", 32, 1)
  assert model.runtime_version.startswith("ai-edge-litert ")
  assert model.device == latency_calculator.cpu_model()
  assert model.measurements == 10 and model.seed == SEED
  latency_model.check_matches(model, space="mnasnet",
                              decisions=latency_model.decisions_of_space("mnasnet"),
                              runtime="cpu-tflite", input_size=32, path=built.model)
  # The held-out error is the model's on the held-out rows, which it was not fitted on.
  measured = sorted((e for e in _events(built.job) if e["event"] == "measured"),
                    key=lambda e: e["index"])  # the order the job fits and evaluates in
  heldout = [(e["nas_params"], e["latency_ms"]) for e in measured if e["split"] == "heldout"]
  assert len(heldout) == 3 and model.heldout == latency_model.evaluate(model, heldout)
  out = built.last.stdout
  assert out.splitlines()[:2] == [f"latency model: {built.model}", model.describe()]
  assert re.search(r"^  Kendall tau +-?\d\.\d{3}$", out, re.M), out
  assert re.search(r"^  within ±10% +\d+\.\d%$", out, re.M), out
  assert re.search(r"^  MAPE +\d+\.\d%$", out, re.M), out
  assert "measurements: 13 in 3 session(s)" in out


def test_the_architectures_are_seeded_and_the_held_out_ones_are_others(built):
  # pylint: disable=g-import-not-at-top
  from nascli.search import controller
  from tf_vision import search_spaces
  measured = sorted((e for e in _events(built.job) if e["event"] == "measured"),
                    key=lambda e: e["index"])
  train = [e["nas_params"] for e in measured if e["split"] == "train"]
  heldout = [e["nas_params"] for e in measured if e["split"] == "heldout"]
  space = search_spaces.get_search_space("mnasnet")
  assert train == controller.random_architectures(space, 10, SEED)
  assert len(heldout) == 3 and not [p for p in heldout if p in train]
  assert len({json.dumps(p, sort_keys=True) for p in heldout}) == 3


def test_ctrl_c_and_sigkill_lose_nothing_and_measure_nothing_twice(built):
  code, err = built.interrupted
  assert code == 130, err[-2000:]
  done = len(built.after_interrupt)
  assert err.strip().splitlines()[-1] == (
      f"Interrupted (Ctrl-C): latency measurements in {built.job} after {done} of {TOTAL}"
      " architectures; run the same command again to continue: what is measured is kept")
  assert built.killed == -signal.SIGKILL
  assert len(built.after_kill) >= done + 2
  assert built.after_kill[:done] == built.after_interrupt
  indices = [e["index"] for e in _events(built.job) if e["event"] == "measured"]
  assert indices[:len(built.after_kill)] == built.after_kill  # kept, in order
  assert sorted(indices) == list(range(TOTAL))  # each once: none again, none lost
  with open(os.path.join(built.job, "measurements.jsonl"), encoding="utf-8") as f:
    text = f.read()
  assert TORN not in text and text.endswith("\n")  # the torn line was dropped, not kept
  third = built.last.stderr
  assert f"{TOTAL - len(built.after_kill)} of {TOTAL} architectures to measure" in third
  assert f"measured {TOTAL}/{TOTAL}: " in third


def test_every_session_re_times_the_reference(built):
  sessions = [e for e in _events(built.job) if e["event"] == "session"]
  assert [s["session"] for s in sessions] == [1, 2, 3]
  references = [s["reference"] for s in sessions]
  assert all(r["latency_ms"] > 0 and r["runs"] >= 5 for r in references)
  assert all(r["nas_params"] == references[0]["nas_params"] for r in references)
  assert all(v.startswith("0/") for v in references[0]["nas_params"].values())
  assert all(s["device"] == sessions[0]["device"] for s in sessions)
  assert [bool(s["ray"]) for s in sessions] == [False, False, True]  # the 3rd: a Ray actor
  first, last = references[0]["latency_ms"], references[-1]["latency_ms"]
  line = next(l for l in built.last.stderr.splitlines() if l.startswith("reference: "))
  assert line.startswith(f"reference: {last:.3g} ms now, {first:.3g} ms when the job began ("), line
  model = json.loads(open(built.model, encoding="utf-8").read())
  assert model["reference"]["ms"] == first
  assert model["reference"]["sessions"] == [r["latency_ms"] for r in references]


def _flags(job):
  return ["build_latency_model", *SMALL, "--local_output_dir", job]


def test_other_settings_are_refused_in_one_line_and_nothing_is_touched(built):
  paths = [os.path.join(built.job, n) for n in ("measurements.jsonl", "latency_model.json")]
  before = [(open(p, "rb").read(), os.stat(p).st_mtime_ns) for p in paths]
  results = main_in_fresh_interpreter([
      _flags(built.job) + ["--num_threads", "2"],
      _flags(built.job) + ["--runs", "6"],
  ])
  assert results == [
      (1, f"Error: {built.job} holds measurements of other settings (--num_threads 1 -> 2):"
          " rerun with those to continue, --overwrite to start over, or another"
          " --local_output_dir\n", False),
      (1, f"Error: {built.job} holds measurements of other settings (--runs 5 -> 6): rerun"
          " with those to continue, --overwrite to start over, or another --local_output_dir\n",
       False)]
  assert [(open(p, "rb").read(), os.stat(p).st_mtime_ns) for p in paths] == before


def test_a_finished_job_is_refitted_from_its_journal_without_tensorflow(built, tmp_path):
  out = tmp_path / "again.json"
  (code, err, tensorflow), = main_in_fresh_interpreter(
      [_flags(built.job) + ["--output", out]])
  assert (code, tensorflow) == (0, False), err
  assert f"all {TOTAL} architectures are measured" in err
  again = json.loads(out.read_text())
  first = json.loads(open(built.model, encoding="utf-8").read())
  assert {k: v for k, v in again.items() if k != "created"} == {
      k: v for k, v in first.items() if k != "created"}
  proc = nascli_subprocess(*_flags(built.job), "--output", out, "--json")
  assert proc.returncode == 0, proc.stderr
  result = json.loads(proc.stdout)
  assert result["model"] == str(out) and result["measured"] == TOTAL
  assert result["sessions"] == 3 and result["latency_model"]["heldout"]["n"] == 3


def test_bad_flags_are_refused_in_one_line_before_tensorflow(tmp_path):
  not_a_folder = tmp_path / "file"
  not_a_folder.write_text("x")
  cases = [
      (["--target_device_type", "cpu_tflite"], 2,
       "unknown --target_device_type 'cpu_tflite' (did you mean 'cpu-tflite'?); known:"
       " cpu-tflite, cpu, gpu"),
      (["--latency_input_size", "0"], 1,
       "--latency_input_size must be a positive number of pixels, got 0"),
      (["--prebuilt_search_space", "mnasnt"], 2,
       "unknown --prebuilt_search_space 'mnasnt' (did you mean 'mnasnet'?); known: mnasnet,"
       " spinenet"),
      (["--prebuilt_search_space", "spinenet", "--latency_input_size", "600"], 1,
       "--latency_input_size 600: spinenet models need a multiple of 128 (e.g. 640)"),
      (["--num_architectures", "5"], 1, "--num_architectures must be at least 10, got 5"),
      (["--pin_cpus", "1-0"], 1, "--pin_cpus '1-0': expected CPU numbers such as 0, 2,3 or 0-3"),
      (["--search_space_module", "nodots"], 1,
       "--search_space_module 'nodots': expected a dotted path 'package.module.function'"),
      (["--ray_node_ip", "10.0.0.5"], 1, "--ray_node_ip is an option of --ray_address"),
      (["--local_output_dir", str(not_a_folder)], 1,
       f"--local_output_dir {not_a_folder} is a file; the job needs a folder there"),
  ]
  results = main_in_fresh_interpreter([["build_latency_model", *argv] for argv, _, _ in cases])
  for (argv, code, message), result in zip(cases, results):
    assert result == (code, f"Error: {message}\n", False), argv
