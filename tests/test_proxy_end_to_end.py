"""The proxy-task workflow end to end on the embedded digits, as docs/proxy_tasks.md runs it:
select_proxy_task_models -> search_proxy_task (killed and resumed) -> search_in_local's config
-> measure_proxy_task_variance. Tiny trainings (40 reference steps: the models score near
chance, and select_proxy_task_models says so); the decisions' rules are tested without training
in tests/test_search_proxy_task.py, tests/test_select_proxy_task_models.py and
tests/test_proxy_variance.py."""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml
from scipy import stats

import tf_probe
from conftest import journal_events, nascli_subprocess
from nascli.proxy import correlation
from nascli.proxy import model_selection_main
from nascli.proxy import proxy_search

SHORT = "trainer.train_steps=40,trainer.steps_per_loop=10,trainer.checkpoint_interval=10"
MODELS = 5  # Kendall tau needs 5 valid pairs


@pytest.fixture(scope="module")
def selection(tmp_path_factory):
  """Five random architectures trained 40 steps each, all kept; latency left out (the serving
  times of these tiny models differ by less than their measurement noise here)."""
  job = tmp_path_factory.mktemp("proxy") / "proxy_models"
  proc = nascli_subprocess(
      "select_proxy_task_models", "--max_nas_trial", str(MODELS), "--final_num_models",
      str(MODELS), "--latency_metric_id", "none", "--params_override", SHORT, "--local_output_dir", str(job), "--json")
  assert proc.returncode == 0, proc.stderr[-2000:]
  return job, json.loads(proc.stdout)


def _started(job, trial_id):
  return (job / "journal.jsonl").exists() and any(
      e["event"] == "started" and e["trial_id"] == trial_id for e in journal_events(job))


def _kill_once_started(argv, job, trial_id) -> None:
  """Runs `argv` and SIGKILLs it once the journal in `job` says trial `trial_id` started (or
  after 600 s)."""
  driver = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  deadline = time.monotonic() + 600
  while time.monotonic() < deadline and driver.poll() is None and not _started(job, trial_id):
    time.sleep(0.2)
  driver.send_signal(signal.SIGKILL)
  driver.wait()


# The docs' grid with 100% (the reference training itself, left out) and half the data: three
# candidates; the target is any ranking (-1), as this test is about the mechanics, not the proxy
# a 40-step reference near chance could give (it gives none at the default target).
PROXY_ARGS = ["--proxy_train_steps", "50%,100%", "--proxy_train_data_fractions", "0.5,1",
              "--desired_accuracy_correlation", "-1"]
CANDIDATE = "steps20-size32-data1"


@pytest.fixture(scope="module")
def proxy_job(selection, tmp_path_factory):
  """search_proxy_task on the selection, SIGKILLed while its first candidate's third model
  trains, then the same command again to the end: (job dir, its argv, the resumed run)."""
  sel_dir, _ = selection
  job = tmp_path_factory.mktemp("proxy_search") / "proxy_search"
  args = [sys.executable, "-m", "nascli", "search_proxy_task",
          "--proxy_task_model_selection_dir", str(sel_dir), *PROXY_ARGS,
          "--local_output_dir", str(job), "--json"]
  _kill_once_started(args, job / "candidates" / CANDIDATE, "3")
  assert not (job / "proxy_task.yaml").exists()
  resumed = subprocess.run(args, capture_output=True, text=True, timeout=900, check=False,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  return job, args, resumed


def test_search_proxy_task_killed_and_resumed_picks_the_cheapest_and_its_yaml_reproduces_it(
    selection, proxy_job):
  """The grid 50%,100% x data 0.5,1 of the 40-step reference: steps40 on all the data is the
  reference training itself, left out (not a proxy). Of the three left, the cheapest with more
  data trains first and meets the (any-ranking) target; the two others cannot be cheaper and are
  skipped untrained. SIGKILL while its third model trains; the same command finishes it without
  retraining the first two. proxy_task.yaml plans the very config it trained."""
  _, models = selection
  job, _, resumed = proxy_job
  cand = job / "candidates" / CANDIDATE
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  result = json.loads(resumed.stdout)
  events = journal_events(cand)
  assert [e["trial_id"] for e in events if e["event"] == "completed"] == ["1", "2", "3", "4",
                                                                          "5"]
  started = [e["trial_id"] for e in events if e["event"] == "started"]
  assert started.count("1") == started.count("2") == 1
  assert sorted(os.listdir(job / "candidates")) == [CANDIDATE]
  assert result["left_out"] == ["steps40-size32-data1"]
  assert ("candidate steps40-size32-data1 left out: it is the reference training itself, not a"
          " proxy") in resumed.stderr
  assert [c["name"] for c in result["candidates"]] == [
      CANDIDATE, "steps20-size32-data0.5", "steps40-size32-data0.5"]
  first, *others = result["candidates"]
  assert first["status"] == "succeeded" and result["chosen"] == CANDIDATE
  assert all(c["status"] == "skipped" and c["reason"].startswith("Exceeded best training time")
             for c in others)
  # The reference's quality, as select_proxy_task_models judged it, travels with the study.
  assert result["reference"]["warnings"] == models["warnings"] == (
      model_selection_main.quality_warnings(models["models"], "accuracy"))
  # The candidate's models are the selection's, in order, and its tau is scipy's.
  trials = json.loads((cand / "trials.json").read_text())
  by_id = {t["trial_id"]: t for t in trials}
  assert [by_id[str(i)]["nas_params"] for i in range(1, MODELS + 1)] == [
      m["nas_params"] for m in models["models"]]
  # Proxy and reference do not share their noise: each model's proxy trainings ran with its
  # reference training's seed + 1, as the trials recorded what they ran (run seed and the
  # training data's seed in params.yaml).
  def seeds(trial_dir):
    spec = json.loads((trial_dir / "trial_spec.json").read_text())["trial"]["run"]["seed"]
    params = yaml.load((trial_dir / "params.yaml").read_text(), Loader=yaml.UnsafeLoader)  # noqa: S506 - our own file
    return spec, params["task"]["train_data"]["seed"]

  reference_seeds = [seeds(pathlib.Path(m["trial_dir"])) for m in models["models"]]
  proxy_seeds = [seeds(cand / str(i)) for i in range(1, MODELS + 1)]
  assert all(a == b for a, b in reference_seeds + proxy_seeds)
  assert [p for p, _ in proxy_seeds] == [r + 1 for r, _ in reference_seeds]
  assert result["proxy_seeds"] == [p for p, _ in proxy_seeds]
  assert result["reference"]["seeds"] == [r for r, _ in reference_seeds]
  # Tau is scipy's, with its bootstrap interval over the models (seeded by the proxies' seed).
  proxy_scores = [by_id[str(i)]["accuracy"] for i in range(1, MODELS + 1)]
  reference = [m["accuracy"] for m in models["models"]]
  accuracy = first["accuracy_correlation"]
  assert accuracy["tau"] == pytest.approx(stats.kendalltau(proxy_scores, reference).statistic)
  assert accuracy["interval"] == list(correlation.bootstrap_interval(
      proxy_scores, reference, seed=result["proxy_seeds"][0]))
  assert accuracy["interval"][0] <= accuracy["tau"] <= accuracy["interval"][1]
  assert first["latency_correlation"] is None
  # Evaluated along training, every loop: the per-step taus, at measured steps only.
  curve = [json.loads(line)["step"] for line in (cand / "1" / "validation_curve.jsonl")
           .read_text().splitlines()]
  assert curve == [5, 10, 15, 20]  # the loop shrinks with the schedule
  assert [p["step"] for p in first["over_steps"]] == [5.0, 10.0, 15.0, 20.0]
  assert (job / "proxy_task_search.png").read_bytes()[:4] == b"\x89PNG"
  state = json.loads((job / "search_controller_state.json").read_text())
  assert state == result and state["finished"]
  # The rungs its curves support: from the evaluated step on which tau's lower end stays at the
  # target to the end, if before the end (the table's last lines print the flags by the YAML).
  holds = first["correlation_holds_from_step"]
  assert holds == proxy_search.holds_from(first["over_steps"], -1) and holds in curve
  assert state["early_stopping"] == (
      None if holds >= 20 else {"early_stopping": "asha_promotions", "min_steps": int(holds)})
  # proxy_task.yaml: the candidate's trial 1 config, less the architecture and the data; the
  # candidate's folder holds the same file (every trained candidate's recipe).
  proxy = yaml.safe_load((job / "proxy_task.yaml").read_text())
  assert (cand / "proxy_task.yaml").read_text() == (job / "proxy_task.yaml").read_text()
  trial1 = yaml.load((cand / "1" / "params.yaml").read_text(), Loader=yaml.UnsafeLoader)  # noqa: S506 - our own file
  assert proxy["trainer"]["train_steps"] == trial1["trainer"]["train_steps"] == 20
  assert "input_path" not in proxy["task"]["train_data"]
  assert "block_specs_json" not in proxy["task"]["model"]["backbone"]["tunable_mnasnet"]
  _the_yaml_plans_the_candidates_config(job / "proxy_task.yaml", cand, trial1)
  # The page leads with the verdict and counts by status.
  page = (job / "report.html").read_text()
  assert page.split('<p class="summary">')[1].startswith(f"Chosen proxy: {CANDIDATE} (20 steps")
  assert ("3 candidate(s): 1 trained (1 succeeded, 0 failed), 2 skipped untrained; left out as"
          " the reference training itself: steps40-size32-data1.") in page


def test_a_grid_of_only_the_reference_is_refused_before_anything_trains(selection, tmp_path):
  """The former documented run's 100% on its own, or the reference's own seed for the proxies:
  one line, exit 1, no job dir."""
  sel_dir, _ = selection
  job = tmp_path / "job"
  proc, tf_loaded = tf_probe.run("search_proxy_task", "--proxy_task_model_selection_dir",
                                 sel_dir, "--proxy_train_steps", "100%",
                                 "--local_output_dir", job)
  assert proc.returncode == 1 and not tf_loaded, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1] == (
      "Error: every candidate is the reference training itself (40 steps, 32px, all the"
      " training data), not a proxy of it: give shorter --proxy_train_steps (e.g. 25%,50%),"
      " smaller --proxy_image_sizes or --proxy_train_data_fractions below 1")
  # The reference models' own seed for the proxies: refused too, before anything trains.
  proc, tf_loaded = tf_probe.run("search_proxy_task", "--proxy_task_model_selection_dir",
                                 sel_dir, "--proxy_train_steps", "50%", "--seed", "0",
                                 "--local_output_dir", job)
  assert proc.returncode == 1 and not tf_loaded, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "Error: --seed 0 is the seed the reference models trained with: proxy and reference would"
      " share their training noise")
  assert not job.exists()


def _snapshot(folder):
  """Every file under `folder`: its bytes and its mtime (ns)."""
  return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
          for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_rerun_with_another_setting_is_refused_and_changes_nothing(proxy_job):
  """The finished job rerun with --seed 7: one line naming the seed, exit 1, before TensorFlow
  loads, and not one file of the job written (bytes and mtimes); its candidates stay as they
  were (a candidate job of other settings used to be read as failed trainings)."""
  job, args, resumed = proxy_job
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  before = _snapshot(job)
  proc, tf_loaded = tf_probe.run(*args[3:], "--seed", "7")
  assert proc.returncode == 1 and not tf_loaded, proc.stderr[-2000:]
  assert proc.stderr.strip().splitlines()[-1] == (
      f"Error: {job} was started with other settings (differs in: seed 1 -> 7); pass"
      " --overwrite to delete it and start over, or use another --local_output_dir")
  assert proc.stdout == ""
  assert _snapshot(job) == before


def test_a_candidate_job_of_other_settings_is_an_error_not_a_failed_candidate(proxy_job,
                                                                              tmp_path):
  """A copy of the finished job whose candidate's journal began with another seed (as a job
  of an earlier nascli would): the candidate's search refuses it, and the command says so in
  one line and exits 1; the state still says the candidate succeeded."""
  job, args, resumed = proxy_job
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  copy = tmp_path / "copy"
  shutil.copytree(job, copy)
  journal = copy / "candidates" / CANDIDATE / "journal.jsonl"
  lines = journal.read_text().splitlines()
  first = json.loads(lines[0])
  first["settings"]["trial"]["run"]["seed"] = 99
  journal.write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
  state = (copy / "search_controller_state.json").read_bytes()
  argv = [a if a != str(job) else str(copy) for a in args[3:]]
  proc = nascli_subprocess(*argv)
  assert proc.returncode == 1, proc.stderr[-2000:]
  line = proc.stderr.strip().splitlines()[-1]
  assert line.startswith(f"Error: {copy / 'candidates' / CANDIDATE} was started with other"
                         " settings (differs in: trial.run.seed 99 -> 1)"), proc.stderr[-2000:]
  assert (copy / "search_controller_state.json").read_bytes() == state


def _the_yaml_plans_the_candidates_config(proxy_yaml, cand, trial1):
  # pylint: disable=g-import-not-at-top
  from nascli import training
  from nascli.run_spec import Architecture, RunSpec, from_dict
  spec = json.loads((cand / "1" / "trial_spec.json").read_text())
  run = from_dict(RunSpec, spec["trial"]["run"])
  planned = training.plan(training.TrainArgs(run=RunSpec(
      config_files=[str(proxy_yaml)], data=run.data, seed=run.seed,
      architecture=Architecture("mnasnet", spec["nas_params"])))).params
  got = yaml.safe_load(yaml.safe_dump(json.loads(json.dumps(planned.as_dict(), default=list))))
  want = json.loads(json.dumps(trial1, default=list))
  assert got["trainer"] == want["trainer"]
  assert got["task"] == want["task"]


def test_measure_proxy_task_variance_trains_one_model_with_seeds_and_compares(selection,
                                                                               tmp_path):
  """One selected model, 2 runs (seeds 0 and 1), compared with the selection's spread; SIGKILL
  while the second run trains, and the same command finishes without retraining the first."""
  sel_dir, models = selection
  nas_params = tmp_path / "nas_params.json"
  nas_params.write_text(json.dumps(models["models"][0]["nas_params"]))
  job = tmp_path / "variance"
  args = ["measure_proxy_task_variance", "--nas_params_str", str(nas_params), "--max_nas_trial",
          "2", "--params_override", SHORT, "--compare_with", str(sel_dir), "--local_output_dir",
          str(job), "--json"]
  _kill_once_started([sys.executable, "-m", "nascli", *args], job, "2")
  assert not (job / "variance_and_smoothness.json").exists()
  proc = nascli_subprocess(*args)
  assert proc.returncode == 0, proc.stderr[-2000:]
  started = [e["trial_id"] for e in journal_events(job) if e["event"] == "started"]
  assert started.count("1") == 1 and "2" in started
  result = json.loads(proc.stdout)
  assert [r["seed"] for r in result["runs"]] == [0, 1]
  assert result["nas_params"] == models["models"][0]["nas_params"]
  seeds = [yaml.load((job / t / "params.yaml").read_text(), Loader=yaml.UnsafeLoader)  # noqa: S506
           ["task"]["train_data"]["seed"] for t in ("1", "2")]
  assert seeds == [0, 1]
  scores = [r["accuracy"] for r in result["runs"]]
  assert result["mean_accuracy"] == pytest.approx(sum(scores) / 2)
  assert all(r["evaluations"] == 4 for r in result["runs"])  # steps 10, 20, 30, 40
  verdict = result["verdict"]
  assert verdict["architectures"] == MODELS and verdict["compared_with"] == str(sel_dir)
  assert json.loads((job / "variance_and_smoothness.json").read_text()) == result
  # Its page opens on that verdict, not on a search's views of one architecture.
  page = (job / "report.html").read_text()
  summary = page.split('<p class="summary">')[1].split("</p>")[0]
  assert summary.startswith(verdict["message"][0].upper() + verdict["message"][1:25])
  again = nascli_subprocess(*proc.args[3:])
  assert again.returncode == 0 and json.loads(again.stdout) == result


# Slow tier (177 s): the proxy commands run their trainings through the search engine, whose Ray
# executor the default tier checks with `nascli search` (tests/test_search_ray.py,
# tests/test_ray_cluster.py); the proxy search itself, killed and resumed, stays in the default tier.
@pytest.mark.slow
def test_search_proxy_task_on_ray_trains_the_same_models_to_the_same_scores(selection, proxy_job,
                                                                          tmp_path):
  """The local study's chosen candidate as the one candidate, on a private Ray instance, two
  trainings at a time: the Ray actors train the selection's models to the very scores the
  local warm workers gave them."""
  sel_dir, _ = selection
  local_job, _, resumed = proxy_job
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  job = tmp_path / "proxy_search_ray"
  proc = nascli_subprocess(
      "search_proxy_task", "--proxy_task_model_selection_dir", str(sel_dir),
      "--proxy_train_steps", "50%", "--desired_accuracy_correlation", "-1", "--ray_address",
      "local", "--ray_num_cpus", "2", "--max_parallel_nas_trial", "2", "--local_output_dir",
      str(job), "--json")
  assert proc.returncode == 0, proc.stderr[-2000:]
  result = json.loads(proc.stdout)
  (candidate,) = result["candidates"]
  assert candidate["name"] == CANDIDATE and result["chosen"] == CANDIDATE

  def scores(folder):
    trials = json.loads((folder / "candidates" / CANDIDATE / "trials.json").read_text())
    by_id = {t["trial_id"]: t["accuracy"] for t in trials}
    return [by_id[str(i)] for i in range(1, MODELS + 1)]

  assert scores(job) == scores(local_job)
