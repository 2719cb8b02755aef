"""search_in_local for real on CPU: trials, outputs, list_trials, kill/resume, NaN failures."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

import report_jobs
import tf_probe
from conftest import journal_events as _events
from conftest import nascli_subprocess
from conftest import read_examples
from conftest import FINISHED_TRIAL_FILES
from conftest import controller_proposals
from conftest import trial_files

SHORT = "trainer.train_steps=20,trainer.steps_per_loop=10,trainer.checkpoint_interval=10"
# The spinenet testing YAML trains 300 steps (enough to rank); a smoke test needs a few.
SPINENET_SHORT = ("trainer.train_steps=20,trainer.steps_per_loop=10,"
                  "trainer.checkpoint_interval=20,trainer.validation_interval=20,"
                  "trainer.optimizer_config.learning_rate.cosine.decay_steps=20")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("nascli_cache"))


def _search(job_dir, cache, *extra, seed=7):
  return nascli_subprocess("search_in_local", "--prebuilt_search_space", "mnasnet",
                           "--local_output_dir", job_dir, "--seed", str(seed),
                           "--target_device_latency_ms", "2", *extra,
                           env={"NASCLI_CACHE_DIR": cache})


def _probe_search(job_dir, cache, *extra, seed=7):
  """_search through tests/tf_probe.py: (the process, whether it imported TensorFlow)."""
  return tf_probe.run("search_in_local", "--prebuilt_search_space", "mnasnet",
                      "--local_output_dir", job_dir, "--seed", str(seed),
                      "--target_device_latency_ms", "2", *extra,
                      env={"NASCLI_CACHE_DIR": cache})


def _assert_scored_validation_not_test(params_yaml):
  from tf_vision.params import load_yaml_source  # pylint: disable=g-import-not-at-top
  task = load_yaml_source(str(params_yaml), "params.yaml")["task"]
  scored, trained = task["validation_data"]["input_path"], task["train_data"]["input_path"]
  folder = os.path.dirname(scored)
  assert os.path.basename(scored).startswith("validation-")
  info = json.loads(open(os.path.join(folder, "dataset_info.json"), encoding="utf-8").read())
  test = os.path.join(folder, info["splits"]["test"]["file_pattern"])
  ids = {p: {r["image/source_id"][0] for r in read_examples(p)}
         for p in (scored, trained, test)}
  assert len(ids[test]) == info["splits"]["test"]["num_records"] > 0
  assert not ids[test] & ids[scored] and not ids[test] & ids[trained]


def test_three_trial_search_records_everything(cache, tmp_path):
  job = tmp_path / "job"
  proc = _search(job, cache, "--max_nas_trial", "3", "--search_docker_flags",
                 f"params_override={SHORT}", "--export_top_k", "1", "--json")
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows = json.loads(proc.stdout)
  assert [r["trial_id"] for r in rows] == ["1", "2", "3"]
  assert all(r["status"] == "completed" for r in rows)
  assert len({json.dumps(r["nas_params"], sort_keys=True) for r in rows}) == 3
  best = max(rows, key=lambda r: r["reward"])
  for r in rows:
    assert 0.0 <= r["accuracy"] <= 1.0 and r["latency_ms"] > 0
    assert r["reward"] == pytest.approx(r["accuracy"] * (2.0 / r["latency_ms"]) ** 0.07)
    trial = job / r["trial_id"]
    for name in ("nas_params_str.json", "params.yaml", "model_analysis.json", "job_status.json"):
      assert (trial / name).exists(), name
    assert json.loads((trial / "nas_params_str.json").read_text()) == r["nas_params"]
    # The trial scored the validation split; the test split `eval` reports is another set of
    # images that no trial read.
    _assert_scored_validation_not_test(trial / "params.yaml")
    analysis = json.loads((trial / "model_analysis.json").read_text())
    assert analysis["params"] > 10_000 and analysis["flops"] > analysis["params"]
    timing = analysis["timing"]
    # One warm worker ran all three (started with the driver, it checked the config first: the
    # worker logs below); no trial exported a SavedModel itself, the search exported its best
    # at the end (--export_top_k 1), and only it.
    assert timing["train_steps_s"] > 0 and timing["export_s"] == 0
    assert trial_files(str(p.relative_to(trial)) for p in trial.rglob("*") if p.is_file()) == (
        FINISHED_TRIAL_FILES if r == best else
        [n for n in FINISHED_TRIAL_FILES if not n.startswith("export/")])
    assert analysis["latency"]["measured_on"] == "serving function of the trained model"
    assert timing["total_s"] == pytest.approx(
        timing["startup_s"] + timing["train_total_s"] + timing["export_s"] + timing["latency_s"]
        + timing["analysis_s"], abs=0.01)
    assert 0 < timing["fixed_overhead_share"] < 1
  # Different architectures, different models: the sizes differ too.
  assert len({json.loads((job / r["trial_id"] / "model_analysis.json").read_text())["params"]
              for r in rows}) > 1
  assert (job / "search_progress.png").stat().st_size > 5000
  assert len(json.loads((job / "trials.json").read_text())) == 3
  assert sorted(p for p in os.listdir(job / "hparams") if p.startswith("trial-")) == [
      "trial-0001", "trial-0002", "trial-0003"]
  assert sorted(os.listdir(job / "workers")) == ["export.log", "worker-1.log"]
  # The page the search refreshed as trials ended: every trial, its reward, its loss curve.
  figs = report_jobs.figures(job / "report.html")
  done = report_jobs.trace(figs["progress-trials"], "completed")
  assert dict(zip(done["customdata"], done["y"])) == {r["trial_id"]: r["reward"] for r in rows}
  logged = [json.loads(line)
            for line in (job / "1" / "train_metrics.jsonl").read_text().splitlines()]
  assert report_jobs.trace(figs["loss"], "trial 1")["y"] == [m["loss"] for m in logged]
  listed = nascli_subprocess("list_trials", job, "--json")
  rewards = [r["reward"] for r in json.loads(listed.stdout)]
  assert rewards == sorted(rewards, reverse=True) and len(rewards) == 3
  # The finished job answers from its journal: no worker, no TensorFlow, the same rows; flags
  # of how trials run are said to be ignored.
  again, tf_loaded = _probe_search(job, cache, "--max_nas_trial", "3", "--search_docker_flags",
                                   f"params_override={SHORT}", "--json",
                                   "--trial_isolation", "process", "--export_top_k", "0")
  assert again.returncode == 0, again.stderr[-2000:]
  assert json.loads(again.stdout) == rows
  assert not tf_loaded
  assert ("note: ignored, no trial is left to run or export: --trial_isolation process (the job"
          " began with worker); --export_top_k 0 (the job began with 1)") in again.stderr
  assert sorted(os.listdir(job / "workers")) == ["export.log", "worker-1.log"]  # none started
  # Stage 2 of a real search job: tests/test_gcs_search.py (its job dir on gs://), and in-process
  # on a local job, warm start included: tests/test_stage2.py.


def _wait_for(predicate, driver, what, timeout=600):
  deadline = time.monotonic() + timeout
  while not predicate():
    assert driver.poll() is None, f"the search exited with {driver.returncode} before {what}"
    assert time.monotonic() < deadline, f"no {what} after {timeout} s"
    time.sleep(0.2)


TRAINING_2 = re.compile(r"^progress: 1/2 trials done; running 2 \(step (\d+), loss [0-9.e+-]+\);"
                        r" best reward [0-9.]+ \(trial 1\); elapsed \S+, ETA \S+$", re.M)
# Trials long enough that one cannot end between the progress line that shows trial 2 training
# and the Ctrl-C the test sends on seeing it (10 steps a loop and a checkpoint: 30 steps left,
# seconds of training; the test sends it within 1.2 s of the line).
LONG_STEPS = 40
LONG = (f"trainer.train_steps={LONG_STEPS},trainer.steps_per_loop=10,"
        "trainer.checkpoint_interval=10")


def test_ctrl_c_stops_the_search_cleanly_and_the_same_command_resumes(cache, tmp_path):
  """Ctrl-C at a terminal (SIGINT to the search's process group) while trial 2 trains: one
  line, exit 130, trial 2 recorded `interrupted` at its checkpoint; the same command then
  re-runs trial 2 from there, trial 1 is not repeated. With stderr in a file
  the search printed progress lines meanwhile."""
  job = tmp_path / "job"
  args = [sys.executable, "-m", "nascli", "search_in_local", "--prebuilt_search_space",
          "mnasnet", "--local_output_dir", str(job), "--seed", "3", "--max_nas_trial", "2",
          "--params_override", LONG, "--export_top_k", "0"]  # exports: the 3-trial test
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NASCLI_CACHE_DIR=cache,
             NASCLI_PROGRESS_SECONDS="1")
  log = tmp_path / "stderr.log"
  with open(log, "w", encoding="utf-8") as err:
    driver = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, env=env,
                              start_new_session=True)  # its own group, as a terminal's job
  try:
    # Trial 2 has trained a loop (10 steps, then a checkpoint), and a progress line said so; the
    # interrupt stops it inside its next loop, at the step after the signal.
    _wait_for(lambda: any(int(m.group(1)) >= 10 for m in TRAINING_2.finditer(log.read_text())),
              driver, "trial 2 training")
    os.killpg(driver.pid, signal.SIGINT)
    assert driver.wait(timeout=180) == 130
  finally:
    if driver.poll() is None:
      os.killpg(driver.pid, signal.SIGKILL)
  status = json.loads((job / "2" / "job_status.json").read_text())
  assert status["status"] == "interrupted" and 10 <= status["step"] < LONG_STEPS, status  # at the next step
  step = status["step"]
  stderr = log.read_text()
  assert stderr.strip().splitlines()[-1] == (
      f"Interrupted (Ctrl-C): search {job} (1 of 2 trials done, trial 2 stopped at step"
      f" {step}); run the same command again to resume (trial 2 runs again first, from step"
      f" {step})")
  assert "Traceback" not in stderr and stderr.count("Interrupted") == 1
  trial_log = (job / "2" / "trial.log").read_text()
  assert "Traceback" not in trial_log
  assert trial_log.strip().splitlines()[-1].startswith("Interrupted (Ctrl-C): trial 2")
  # Off a terminal: a progress line at each trial start and end and every second between.
  progress = [l for l in stderr.splitlines() if l.startswith("progress: ")]
  assert re.fullmatch(r"progress: 0/2 trials done; running 1 \(starting\); elapsed \ds",
                      progress[0]), progress
  assert len(progress) >= 5 and TRAINING_2.search(stderr)
  before = _events(job)
  assert [(e["event"], e["trial_id"]) for e in before[-2:]] == [
      ("started", "2"), ("interrupted", "2")]
  assert before[-1]["signal"] == "SIGINT" and before[-1]["attempt"] == 1
  listed = json.loads(nascli_subprocess("list_trials", job, "--json").stdout)
  assert [r["status"] for r in sorted(listed, key=lambda r: r["trial_id"])] == [
      "completed", "interrupted"]
  interrupted_dna = next(e["dna"] for e in before if e["event"] == "proposed"
                         and e["trial_id"] == "2")

  resumed = subprocess.run(args + ["--json"], capture_output=True, text=True, env=env,
                           timeout=900, check=False)
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  assert "re-running interrupted trial(s) 2" in resumed.stderr
  assert f"resuming from the checkpoint at step {step}" in (job / "2" / "trial.log").read_text()
  events = _events(job)
  assert events[:len(before)] == before
  proposed = [e for e in events if e["event"] == "proposed"]
  assert [e["trial_id"] for e in proposed] == ["1", "2"]  # no duplicate ids
  assert [e["trial_id"] for e in events if e["event"] == "completed"] == ["1", "2"]
  assert [(e["event"], e["trial_id"], e["attempt"]) for e in events
          if e["event"] == "started"] == [("started", "1", 1), ("started", "2", 1),
                                          ("started", "2", 2)]
  assert proposed[1]["dna"] == interrupted_dna
  assert len({tuple(e["dna"]) for e in proposed}) == 2
  assert json.loads((job / "2" / "job_status.json").read_text())["status"] == "completed"


def test_sigterm_to_the_driver_alone_stops_its_trials_and_marks_them(cache, tmp_path):
  """SIGTERM to the search process only (a scheduler's stop): it stops its starting trial,
  which ends `interrupted` (never left `running`), journals it, and exits 143."""
  job = tmp_path / "job"
  args = [sys.executable, "-m", "nascli", "search_in_local", "--prebuilt_search_space",
          "mnasnet", "--local_output_dir", str(job), "--seed", "3", "--max_nas_trial", "2",
          "--params_override", SHORT]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NASCLI_CACHE_DIR=cache)
  driver = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            text=True)
  try:
    _wait_for(lambda: (job / "journal.jsonl").exists() and any(
        e["event"] == "started" for e in _events(job)), driver, "a trial start")
    driver.send_signal(signal.SIGTERM)
    _, stderr = driver.communicate(timeout=180)
  finally:
    if driver.poll() is None:
      driver.kill()
  assert driver.returncode == 143, stderr
  status = json.loads((job / "1" / "job_status.json").read_text())
  assert status["status"] == "interrupted"
  # The signal lands while trial 1 builds its model or trains: it says which, from its status.
  where = (f"stopped at step {status['step']}); run the same command again to resume (trial 1"
           f" runs again first, from step {status['step']})" if status.get("step") else
           "stopped before its first checkpoint); run the same command again to resume (trial 1"
           " runs again first)")
  assert stderr.strip().splitlines()[-1] == (
      f"Interrupted (SIGTERM): search {job} (0 of 2 trials done, trial 1 {where}")
  assert [e["event"] for e in _events(job)][-2:] == ["started", "interrupted"]
  assert "Traceback" not in (job / "1" / "trial.log").read_text()


NAN = ("--max_nas_trial", "3", "--max_failed_nas_trial", "1", "--search_algorithm",
       "regularized_evolution", "--params_override",
       "trainer.train_steps=20,trainer.steps_per_loop=5,"
       "trainer.optimizer_config.learning_rate.cosine.initial_learning_rate=1e12,"
       "trainer.optimizer_config.warmup.type=null")


def test_nan_trials_are_recorded_and_the_failure_limit_stops_the_search(cli, cache, tmp_path,
                                                                        monkeypatch):
  """NaN trials are `failed_with_nan`; each failed trial's worker is replaced by a fresh one.

  The same job shows that --seed and --search_algorithm reach the driver's controller: its
  proposals are those of a controller of that algorithm and seed (not the default tpe, so the
  flag is seen to count; per-seed determinism of every controller: test_search_controller.py).
  Run again with another seed, it is refused in one line and left untouched."""
  job = tmp_path / "job"
  proc = _search(job, cache, *NAN, seed=11)
  assert proc.returncode == 1
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith(
      f"Error: search stopped: 2 failed trials exceed --max_failed_nas_trial 1; every trial of"
      f" {job} failed (2 trial(s); trial 1: ")
  assert last.endswith("fix the cause, then run the command again with --overwrite (it deletes"
                       " the failed trials and starts over)")
  failed = [e for e in _events(job) if e["event"] == "failed"]
  assert [(e["trial_id"], e["status"]) for e in failed] == [("1", "failed_with_nan"),
                                                            ("2", "failed_with_nan")]
  assert all("training loss is" in e["reason"] for e in failed)  # NaN, inf, or diverged
  assert json.loads((job / "1" / "job_status.json").read_text())["status"] == "failed_with_nan"
  assert sorted(os.listdir(job / "workers")) == ["worker-1.log", "worker-2.log"]
  # Run again, the finished job says the same at once, without TensorFlow.
  again, tf_loaded = _probe_search(job, cache, *NAN, seed=11)
  assert again.returncode == 1 and again.stderr.strip().splitlines()[-1] == last
  assert not tf_loaded and again.stdout == ""
  # The seed and the algorithm chose the architectures.
  first = [e["dna"] for e in _events(job) if e["event"] == "proposed"]
  assert first == controller_proposals("regularized_evolution", 11, 2)
  assert len({tuple(d) for d in first}) == 2
  assert controller_proposals("regularized_evolution", 12, 2) != first
  assert controller_proposals("tpe", 11, 2) != first  # the default would have proposed others
  monkeypatch.setenv("NASCLI_CACHE_DIR", cache)
  before = (job / "journal.jsonl").read_bytes()
  code, _, stderr = cli("search_in_local", "--prebuilt_search_space", "mnasnet",
                        "--local_output_dir", job, "--seed", "12",
                        "--target_device_latency_ms", "2", *NAN)
  assert code == 1 and len(stderr.strip().splitlines()) == 1, stderr
  assert "seed 11 -> 12" in stderr and "--overwrite" in stderr, stderr
  assert (job / "journal.jsonl").read_bytes() == before  # untouched


# Slow tier (2 RetinaNet trials): the default tier builds searched SpineNets through Model
# Garden's factory (tests/test_tunable_backbones.py) and trains RetinaNet
# (tests/test_train_detection.py).
@pytest.mark.slow
def test_spinenet_detection_search_smoke(cache, tmp_path):
  """Two RetinaNet + tunable SpineNet trials on the embedded shapes, the detection testing YAML."""
  job = tmp_path / "job"
  began = time.monotonic()
  proc = nascli_subprocess("search_in_local", "--prebuilt_search_space", "spinenet",
                           "--local_output_dir", job, "--seed", "5", "--max_nas_trial", "2",
                           "--max_parallel_nas_trial", "2", "--target_device_latency_ms", "20",
                           "--params_override", SPINENET_SHORT, "--json",
                           env={"NASCLI_CACHE_DIR": cache})
  elapsed = time.monotonic() - began
  assert proc.returncode == 0, proc.stderr[-2000:]
  rows = json.loads(proc.stdout)
  assert [r["status"] for r in rows] == ["completed", "completed"]
  assert rows[0]["nas_params"] != rows[1]["nas_params"]
  assert len(rows[0]["nas_params"]) == 75  # Vertex's spinenet decisions
  for r in rows:
    analysis = json.loads((job / r["trial_id"] / "model_analysis.json").read_text())
    assert analysis["accuracy_metric"] == "AP"
    metrics = analysis["eval_metrics"]
    assert 0.0 <= metrics["AP"] <= 1.0 and 0.0 <= metrics["AP50"] <= 1.0
    assert metrics["AP"] == r["accuracy"] and all(
        v == v and abs(v) != float("inf") for v in metrics.values())
    assert r["latency_ms"] > 0 and analysis["params"] > 100_000 and analysis["flops"] > 0
    assert r["reward"] == pytest.approx(r["accuracy"] * (20.0 / r["latency_ms"]) ** 0.07)
    saved = (job / r["trial_id"] / "params.yaml").read_text()
    assert "tunable_spinenet" in saved and "block_specs_json" in saved
    assert (job / r["trial_id"] / "export" / "saved_model" / "saved_model.pb").exists()
    # wall_s: the whole trial as the driver saw it, start-up, export and latency included;
    # `seconds` is its training and evaluation only.
    assert r["accuracy_metric"] == "AP"
    assert analysis["timing"]["total_s"] <= r["wall_s"] < elapsed
    assert r["seconds"] < analysis["timing"]["total_s"]
  listed = nascli_subprocess("list_trials", job)
  header = next(l for l in listed.stdout.splitlines() if "trial_id" in l)
  header = [c.strip() for c in header.strip("┃ ").split("┃")]
  assert header[:4] + header[5:] == [
      "trial_id", "status", "reward", "AP", "params", "flops", "wall_s"]
  # The latency's header says what it is: timed in the trial, on the serving function's CPU.
  assert header[4].startswith("latency_ms (measured in the trial, cpu")
  assert any(l.startswith("latency: measured in the trial (TF serving function, CPU")
             for l in listed.stdout.splitlines())
  assert any(l.startswith("target 20 ms: ") for l in listed.stdout.splitlines())


@pytest.mark.parametrize("args,culprit,exit_code", [
    (["--search_docker_flags", "bogus=1"], "'bogus=1'", 1),
    (["--search_docker_flags", "model=retinanet"], "model=retinanet", 1),
    # A value outside an option's choices is a usage error, as Click's own: exit 2.
    (["--prebuilt_search_space", "nasfpn"], "'nasfpn'", 2),
    (["--search_space_module", "no_such_pkg.spaces.build"], "no_such_pkg.spaces.build", 1),
    (["--search_algorithm", "annealing"], "annealing", 2),
    (["--latency_constraint", "firm"], "firm", 2),
])
def test_bad_search_input_one_line(cli, cache, tmp_path, monkeypatch, args, culprit, exit_code):
  monkeypatch.setenv("NASCLI_CACHE_DIR", cache)
  job = tmp_path / "job"
  code, stdout, stderr = cli("search_in_local", "--local_output_dir", job, *args)
  lines = stderr.strip().splitlines()
  assert code == exit_code and len(lines) == 1 and lines[0].startswith("Error: "), stderr
  assert culprit in lines[0]
  assert stdout == ""
  assert not (job / "journal.jsonl").exists()


def test_a_bad_trial_config_is_refused_before_any_trial(cache, tmp_path):
  """The trials' config is built once, by the first warm worker, as `train` builds it: a bad
  key is refused in train's one line by a driver that has not loaded TensorFlow, before
  anything is journaled."""
  (tmp_path / "unk.yaml").write_text("task:\n  model:\n    num_clases: 10\n")
  job = tmp_path / "job"
  proc, tf_loaded = tf_probe.run("search_in_local", "--local_output_dir", job, "--config_file",
                                 "unk.yaml", env={"NASCLI_CACHE_DIR": cache}, cwd=tmp_path)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines() == [
      f"Error: unknown config key 'task.model.num_clases' in --config_file {tmp_path}/unk.yaml"
      " (did you mean 'num_classes'?)"]
  assert not tf_loaded and proc.stdout == ""
  assert not (job / "journal.jsonl").exists()
  assert "config check: " in (job / "workers" / "worker-1.log").read_text()


def test_the_config_check_gives_the_trials_budget_early_stopping_must_fit(cache, monkeypatch,
                                                                          tmp_path):
  """What the check's worker runs (here in-process): the trials' train_steps, against which
  --early_stopping asha --min_steps 500 is refused (the testing YAML trains 100 steps)."""
  # pylint: disable=g-import-not-at-top
  from nascli.commands import search_flags
  from nascli.commands.search_in_local import search_in_local
  from nascli.errors import NascliError
  from nascli.search import local_main, preflight, search_loop
  from nascli.search import scheduler as scheduler_lib
  import inspect
  monkeypatch.setenv("NASCLI_CACHE_DIR", cache)
  values = {k: p.default for k, p in inspect.signature(search_in_local).parameters.items()}
  default_early_stopping = values["early_stopping"]
  values.update(local_output_dir=str(tmp_path / "job"), early_stopping="asha", min_steps=500)
  args = search_flags.from_flags(values)
  args.trial.run.data.dataset_dir = local_main.embedded_dataset("mnasnet")
  args.trial.run.config_files = [
      "tf_vision/test_files/fast_nas_classification_search_for_testing.yaml"]
  check = preflight.prepare(args)
  try:
    result = preflight.run_check(check.spec_path)
  finally:
    check.remove()
  # The embedded digits: 1,079 training images in batches of 32.
  # The latency input size is the testing YAML's 32x32 (no --latency_input_size, no proxy).
  assert result == {"train_steps": 100, "steps_per_epoch": 33, "latency_input_size": 32}
  with pytest.raises(NascliError, match=r"^--early_stopping asha --min_steps 500: the trials"
                     r" train 100 steps \(trainer.train_steps\), so no rung comes before the"
                     r" end"):
    search_loop.check_budget(args.scheduler, result["train_steps"])
  args.scheduler.min_steps = 50
  search_loop.check_budget(args.scheduler, result["train_steps"])
  # The default, auto, on this budget: a first rung of 12 steps (0.36 epochs) ranks at chance,
  # so no early stopping; 810 steps put it at 90 (2 epochs): promotions, rungs 90/270/810.
  auto = scheduler_lib.SchedulerSettings(default_early_stopping)
  assert auto.name == "auto"
  resolved, why = scheduler_lib.resolve(auto, result["train_steps"], result["steps_per_epoch"])
  assert (resolved.name, why) == ("none", "early stopping (auto): none (a first rung would"
                                  " train 12 steps, 0.36 epochs, under 2 epochs, too short to"
                                  " rank architectures; --early_stopping asha_promotions forces"
                                  " rungs)")  # as docs/commands/search_in_local.md shows it
  resolved, why = scheduler_lib.resolve(auto, 810, result["steps_per_epoch"])
  assert (resolved.name, why) == ("asha_promotions", "early stopping (auto): asha_promotions,"
                                  " rungs at 90, 270, 810 steps (the first trains 90 steps, 2.7"
                                  " epochs; --early_stopping none turns it off)")


