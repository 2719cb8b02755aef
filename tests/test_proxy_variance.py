"""`nascli measure_proxy_task_variance` and what it reads of finished trials, without training
(its end-to-end runs: tests/test_proxy_end_to_end.py)."""

import ast
import json
import math
import os
from pathlib import Path

import pytest

import tf_probe
from nascli import training
from nascli.errors import NascliError
from nascli.proxy import trial_curves
from nascli.proxy import variance
from nascli.proxy import variance_main as main
from nascli.search import job_state

ROOT = Path(__file__).resolve().parent.parent


def test_the_curve_file_is_the_one_training_writes():
  tree = ast.parse((ROOT / "tf_vision" / "train_lib.py").read_text())
  assigned = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
  assert assigned["CURVE_FILE"] == trial_curves.CURVE_FILE


@pytest.mark.parametrize("points,train_steps,loop,interval", [
    (None, 100, 10, None),   # the final evaluation only
    (10, 100, 10, 10),       # one evaluation per loop
    (4, 100, 10, 30),        # 25 rounded up to whole loops
    (10, 40, 20, 20),        # never less than a loop
    (3, 7, 1, 3),
])
def test_curve_interval_is_whole_loops(points, train_steps, loop, interval):
  args = training.TrainArgs(run=None, curve_points=points)
  assert args.curve_interval(train_steps, loop) == interval


def _trial(tmp_path, name, curve_lines, timing=None):
  trial = tmp_path / name
  trial.mkdir()
  (trial / trial_curves.CURVE_FILE).write_text("".join(curve_lines))
  if timing:
    (trial / trial_curves.ANALYSIS_FILE).write_text(json.dumps(timing))
  return str(trial)


def test_read_curve_keeps_the_last_value_per_step_and_skips_cut_lines(tmp_path):
  trial = _trial(tmp_path, "1", [
      '{"step": 10, "accuracy": 0.5, "loss": 1.0}\n',
      '{"step": 20, "accuracy": 0.6}\n',
      '{"step": 20, "accuracy": 0.65}\n',   # evaluated again after a resume
      '{"step": 30, "accuracy": true}\n',   # not a number
      '{"step": 30, "accur'])               # cut by a kill
  assert trial_curves.read_curve(trial, "accuracy") == ([10.0, 20.0], [0.5, 0.65])
  assert trial_curves.read_curve(trial, "AP") is None
  assert trial_curves.read_curve(str(tmp_path / "none"), "accuracy") is None


def test_seconds_per_step_counts_only_the_steps_this_attempt_trained(tmp_path):
  trial = _trial(tmp_path, "1", [], {"step": 100, "resumed_from": 60,
                                     "timing": {"train_steps_s": 2.0}})
  assert trial_curves.seconds_per_step(trial) == pytest.approx(0.05)
  assert trial_curves.seconds_per_step(_trial(tmp_path, "2", [], {"step": 0})) is None
  assert trial_curves.seconds_per_step(str(tmp_path / "none")) is None


def _row(trial_dir, trial_id, accuracy, status="completed"):
  return {"trial_id": trial_id, "status": status, "accuracy": accuracy,
          "accuracy_metric": "accuracy", "trial_dir": trial_dir,
          "nas_params": {"blocks[0].kernel_size": "0/2 (3)"}}


def test_measure_reports_vertex_variance_and_smoothness_of_the_finished_runs(tmp_path):
  curves = {"1": [0.5, 0.70, 0.80], "2": [0.4, 0.75, 0.82], "3": [0.6, 0.72, 0.78]}
  rows = [_row(_trial(tmp_path, t, [json.dumps({"step": 10 * (i + 1), "accuracy": v}) + "\n"
                                    for i, v in enumerate(values)]), t, values[-1])
          for t, values in curves.items()]
  rows.append(_row(str(tmp_path / "4"), "4", None, status="failed"))
  result = main.measure(str(tmp_path), rows, {"1": 0, "2": 1, "3": 2, "4": 3},
                        main.VarianceSettings())
  finals = [0.80, 0.82, 0.78]
  assert result["variance"] == pytest.approx(variance.coefficient_of_variation(finals))
  assert result["run_to_run_std"] == pytest.approx(variance.run_to_run_std(finals))
  assert result["mean_accuracy"] == pytest.approx(0.8)
  expected_smooth = variance.mean_smoothness(
      [([10.0, 20.0, 30.0], v) for v in curves.values()])
  assert result["smoothness"] == pytest.approx(expected_smooth)
  assert [r["seed"] for r in result["runs"]] == [0, 1, 2]
  assert [r["evaluations"] for r in result["runs"]] == [3, 3, 3]
  assert result["failed"] == ["4"] and result["verdict"] is None
  assert result["variance_good"] == (result["variance"] <= variance.MAX_VARIANCE_TO_BE_GOOD)
  written = json.loads((tmp_path / main.RESULT_FILE).read_text())
  assert written == result


def test_measure_needs_two_finished_runs(tmp_path):
  rows = [_row(_trial(tmp_path, "1", []), "1", 0.5), _row(str(tmp_path), "2", None, "failed")]
  with pytest.raises(NascliError, match=r"1 run\(s\) finished with a score \(1 failed: 2\)"):
    main.measure(str(tmp_path), rows, {}, main.VarianceSettings())
  assert not (tmp_path / main.RESULT_FILE).exists()


def test_default_job_dir_names_the_architecture_it_measures():
  search = os.path.join("nascli_output", "search_mnasnet-1a2b3c4d")
  plain = main.default_job_dir(search)
  assert plain == os.path.join("nascli_output", "proxy_variance_mnasnet-1a2b3c4d")
  one = main.default_job_dir(search, {"a": "0/2 (3)"})
  other = main.default_job_dir(search, {"a": "1/2 (5)"})
  assert one.startswith(plain + "-") and one != other


def test_the_journal_keeps_each_trials_run_seed():
  events = [{"event": "search_started", "settings": {}},
            {"event": "proposed", "trial_id": "1", "dna": [0], "nas_params": {}, "seed": 4},
            {"event": "proposed", "trial_id": "2", "dna": [0], "nas_params": {}}]
  state = job_state.replay(events)
  assert state.proposals["1"].seed == 4 and state.proposals["2"].seed is None
  with pytest.raises(NascliError, match="has seed 'x' for trial 3, not an integer"):
    job_state.replay(events + [{"event": "proposed", "trial_id": "3", "dna": [0],
                                "nas_params": {}, "seed": "x"}])


def test_bad_flags_are_refused_before_tensorflow_loads(tmp_path):
  job = str(tmp_path / "job")
  for args, message in (
      (["--max_nas_trial", "1"], "--max_nas_trial must be at least 2"),
      (["--compare_with", str(tmp_path / "nope")], f"--compare_with {tmp_path / 'nope'} does"
                                                   " not exist"),
      (["--nas_params_str", "{not json"], "nas_params_str: malformed JSON"),
      (["--max_parallel_nas_trial", "0"], "--max_parallel_nas_trial must be at least 1")):
    proc, tf_loaded = tf_probe.run("measure_proxy_task_variance", "--local_output_dir", job,
                                   *args)
    assert proc.returncode == 1 and not tf_loaded, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and message in line, proc.stderr
  assert not os.path.exists(job)
