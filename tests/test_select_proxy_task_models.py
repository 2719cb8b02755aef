"""`nascli select_proxy_task_models`: reference trainings through the search engine, then the
spread set (the selection's own rules: tests/test_proxy_math.py)."""

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

import tf_probe
from conftest import journal_events, nascli_subprocess
from nascli.commands import select_proxy_task_models as command
from nascli.errors import NascliError
from nascli.proxy import model_selection_main as main
from nascli.proxy import selection

SHORT = "trainer.train_steps=10,trainer.steps_per_loop=5,trainer.checkpoint_interval=5"


def test_the_cli_defaults_are_the_selections():
  assert (command.START_NUM_MODELS, command.FINAL_NUM_MODELS,
          command.NUM_MODELS_TO_REMOVE_PER_ITER) == (
              selection.START_NUM_MODELS, selection.FINAL_NUM_MODELS,
              selection.NUM_MODELS_TO_REMOVE_PER_ITER)


def _row(trial_id, accuracy, latency, status="completed"):
  return {"trial_id": trial_id, "status": status, "accuracy": accuracy,
          "accuracy_metric": "accuracy", "latency_ms": latency,
          "nas_params": {"blocks[0].kernel_size": f"{int(trial_id) % 2}/2 (3)"},
          "trial_dir": f"job/{trial_id}"}


def test_select_writes_the_spread_models_with_their_architectures(tmp_path):
  """Six rows, accuracies crowded in the middle: the extremes stay, the crowd goes; a failed
  trial is the first removal; the file holds each kept model's architecture and scores."""
  rows = [_row("1", 0.10, 1.0), _row("2", 0.50, 1.0), _row("3", 0.51, 1.0),
          _row("4", 0.52, 1.0), _row("5", 0.90, 1.0), _row("6", None, None, "failed")]
  rules = selection.SelectionRules(start_num_models=6, final_num_models=3,
                                   num_models_to_remove_per_iter=2, max_allowed_failures=1)
  settings = main.SelectionSettings(rules, latency_metric_id=main.NO_LATENCY)
  result = main.select(str(tmp_path), rows, settings)
  kept = [m["trial_id"] for m in result["models"]]
  assert kept[0] == "1" and kept[-1] == "5" and len(kept) == 3
  assert len(set(kept) & {"2", "3", "4"}) == 1
  assert result["iterations"][0]["failed"] == ["6"]
  written = json.loads((tmp_path / main.MODELS_FILE).read_text())
  assert written == result
  assert written["models"][0]["nas_params"] == rows[0]["nas_params"]
  assert main.read(str(tmp_path)) == result


def test_latency_takes_part_unless_told_not_to(tmp_path):
  """Same accuracies, latencies that spread: with latency_ms the pick differs from none."""
  rows = [_row(str(i), acc, lat) for i, (acc, lat) in
          enumerate([(0.1, 5.0), (0.5, 1.0), (0.5, 9.0), (0.52, 1.1), (0.9, 5.0)], 1)]
  rules = selection.SelectionRules(start_num_models=5, final_num_models=3,
                                   num_models_to_remove_per_iter=2)
  with_latency = main.select(str(tmp_path), rows, main.SelectionSettings(rules))
  without = main.select(str(tmp_path), rows, main.SelectionSettings(
      rules, latency_metric_id=main.NO_LATENCY))
  assert ({m["trial_id"] for m in with_latency["models"]}
          != {m["trial_id"] for m in without["models"]})
  assert all(m["latency_ms"] is None for m in without["models"])


def test_a_metric_the_trials_did_not_measure_is_one_line(tmp_path):
  rules = selection.SelectionRules(start_num_models=2, final_num_models=2)
  with pytest.raises(NascliError, match="--accuracy_metric_id AP: the trials measured accuracy"):
    main.select(str(tmp_path), [_row("1", 0.1, 1.0), _row("2", 0.2, 1.0)],
                main.SelectionSettings(rules, accuracy_metric_id="AP"))


def test_no_selection_yet_is_one_line(tmp_path):
  with pytest.raises(NascliError, match="has no proxy_task_models.json: run `nascli"
                                        " select_proxy_task_models"):
    main.read(str(tmp_path))


def test_bad_counts_are_refused_before_tensorflow_loads(tmp_path):
  job = str(tmp_path / "job")
  for args, message in (
      (["--final_num_models", "1"], "--final_num_models must be >= 2, got 1"),
      (["--max_nas_trial", "4"], "--max_nas_trial (4, the models trained) must be >="
                                 " --final_num_models (10)"),
      (["--max_parallel_nas_trial", "0"], "--max_parallel_nas_trial must be at least 1"),
      (["--previous_model_selection_dir", "a"], "--previous_model_selection_dir and"
                                                 " --local_output_dir name different jobs")):
    proc, tf_loaded = tf_probe.run("select_proxy_task_models", "--local_output_dir", job, *args)
    assert proc.returncode == 1 and not tf_loaded, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith(f"Error: {message}"), proc.stderr
  assert not os.path.exists(job)


def test_metric_ids_are_checked_before_anything_trains(tmp_path):
  """A latency id the trials do not report (`latency` for latency_ms, FLOPs), or an accuracy id
  that is not the space's metric: one line before TensorFlow loads, nothing written; exit 2 for
  a value outside the option's choices (as every nascli option), 1 for the accuracy id."""
  job = str(tmp_path / "job")
  for args, code, message in (
      (["--latency_metric_id", "latency"], 2, "unknown --latency_metric_id 'latency' (did you"
                                              " mean 'latency_ms'?); known: latency_ms, none"),
      (["--latency_metric_id", "flops"], 2, "unknown --latency_metric_id 'flops'; known:"
                                            " latency_ms, none"),
      (["--accuracy_metric_id", "top_1_accuracy"], 1, "--accuracy_metric_id 'top_1_accuracy':"
                                                      " the trials of search space mnasnet"
                                                      " report accuracy; give accuracy or leave"
                                                      " the flag out"),
      (["--prebuilt_search_space", "spinenet", "--accuracy_metric_id", "accuracy"], 1,
       "--accuracy_metric_id 'accuracy': the trials of search space spinenet report AP")):
    proc, tf_loaded = tf_probe.run("select_proxy_task_models", "--local_output_dir", job,
                                   "--max_nas_trial", "2", "--final_num_models", "2", *args)
    assert proc.returncode == code and not tf_loaded, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith(f"Error: {message}"), proc.stderr
  assert not os.path.exists(job)


def _scores(*accuracies):
  return [selection.TrialScore(str(i), a) for i, a in enumerate(accuracies, 1)]


def test_models_near_chance_or_tied_are_a_warning_that_names_the_fix():
  """The issue's selection (0.114-0.189 on 10 classes, two tied): both warnings; a spread set
  above chance: none; half near chance is enough; AP (no chance level) only checks ties."""
  near = selection.quality_warnings(_scores(0.1142, 0.1406, 0.189, 0.1406, 0.1198), "accuracy",
                                    10)
  assert near == [
      "5 of 5 reference models score near chance (accuracy below 0.19; chance is 0.1 on 10"
      " classes: trials 1, 2, 3, 4, 5): their order is training noise, and no proxy can be"
      " judged against it; train the reference longer (--params_override"
      " trainer.train_steps=...) or on more data",
      "trials 2 and 4 tie at accuracy 0.1406: Kendall tau cannot order them; a longer reference"
      " training or more validation data separates them"]
  assert selection.quality_warnings(_scores(0.38, 0.52, 0.61, 0.7, 0.83), "accuracy", 10) == []
  assert selection.quality_warnings(_scores(0.15, 0.18, 0.6, 0.7), "accuracy", 10)[0].startswith(
      "2 of 4 reference models score near chance")
  assert selection.quality_warnings(_scores(0.15, 0.6, 0.7), "accuracy", 10) == []
  assert selection.quality_warnings(_scores(0.01, 0.02, 0.02), "AP", None) == [
      "trials 2 and 3 tie at AP 0.02: Kendall tau cannot order them; a longer reference"
      " training or more validation data separates them"]
  assert selection.near_chance_bound(2) == pytest.approx(0.55)


def test_default_job_dir_is_never_a_searchs():
  assert main.default_job_dir(os.path.join("nascli_output", "search_mnasnet-1a2b3c4d")) == (
      os.path.join("nascli_output", "proxy_models_mnasnet-1a2b3c4d"))


# Slow tier: a search's journaled, resumable run is the engine's (tests/test_search_local.py,
# tests/test_warm_workers.py); the selection on its rows is checked above.
@pytest.mark.slow
def test_end_to_end_on_the_embedded_digits_killed_and_resumed(tmp_path):
  """4 random architectures, 10 steps each, 2 kept; SIGKILL while trial 2 trains; the same
  command then finishes without retraining trial 1 and writes the selection; run again, it
  answers from the journal with the same selection."""
  job = tmp_path / "job"
  args = [sys.executable, "-m", "nascli", "select_proxy_task_models", "--max_nas_trial", "4",
          "--final_num_models", "2", "--num_models_to_remove_per_iter", "1",
          "--params_override", SHORT, "--local_output_dir", str(job), "--json"]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  driver = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
  deadline = time.monotonic() + 600
  while time.monotonic() < deadline and driver.poll() is None:
    if (job / "journal.jsonl").exists() and any(
        e["event"] == "started" and e["trial_id"] == "2" for e in journal_events(job)):
      break
    time.sleep(0.2)
  driver.send_signal(signal.SIGKILL)
  driver.wait()
  assert not (job / main.MODELS_FILE).exists()
  resumed = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900,
                           check=False)
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  result = json.loads(resumed.stdout)
  events = journal_events(job)
  assert [e["trial_id"] for e in events if e["event"] == "completed"] == ["1", "2", "3", "4"]
  assert [e["trial_id"] for e in events if e["event"] == "started"].count("1") == 1
  assert len(result["models"]) == 2 and len(result["iterations"]) == 2
  assert all(0 <= m["accuracy"] <= 1 and m["latency_ms"] > 0 for m in result["models"])
  assert events[0]["settings"]["search_algorithm"] == "random"
  again = nascli_subprocess(*args[3:])
  assert again.returncode == 0 and json.loads(again.stdout) == result
  assert not math.isnan(result["models"][0]["accuracy"])
