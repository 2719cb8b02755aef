"""`nascli search_proxy_task`'s decisions (nascli/proxy/proxy_search.py), without training (its
end-to-end run: tests/test_proxy_end_to_end.py)."""

import json
import os

import pytest
from scipy import stats

import tf_probe
from nascli.commands import search_proxy_task as command
from nascli.errors import NascliError
from nascli.proxy import correlation
from nascli.proxy import proxy_search
from nascli.proxy import proxy_search_main as main


def test_the_cli_defaults_are_the_libraries():
  assert command.DEFAULT_TRAIN_STEPS == proxy_search.DEFAULT_TRAIN_STEPS
  assert command.DESIRED_CORRELATION == correlation.DESIRED_ACCURACY_CORRELATION == (
      correlation.DESIRED_LATENCY_CORRELATION)
  assert command.TRAINING_TIME_HRS_LIMIT == correlation.TRAINING_TIME_HRS_LIMIT


def test_train_steps_are_counts_or_shares_of_the_reference():
  assert proxy_search.parse_train_steps("10%,25%,200", 1000) == [100, 200, 250]
  assert proxy_search.parse_train_steps("50%, 50%", 7) == [4]
  assert proxy_search.parse_train_steps("1%", 10) == [1]  # never 0 steps
  for text, message in (("0", "must be at least 1 step"), ("150%", r"share in \(0%, 100%\]"),
                        ("ten", "neither a step count"), ("10,,20", "comma-separated")):
    with pytest.raises(NascliError, match=message):
      proxy_search.parse_train_steps(text)


def test_sizes_and_fractions_are_checked():
  assert proxy_search.parse_image_sizes(None) is None
  assert proxy_search.parse_image_sizes("24,32,24") == [24, 32]
  assert proxy_search.parse_data_fractions("0.5,1") == [0.5, 1.0]
  with pytest.raises(NascliError, match="--proxy_image_sizes: '2.5' is not an image size"):
    proxy_search.parse_image_sizes("2.5")
  with pytest.raises(NascliError, match=r"--proxy_train_data_fractions: '0' must be a"):
    proxy_search.parse_data_fractions("0")


def test_candidates_run_cheapest_first_more_data_first_at_equal_cost():
  grid = proxy_search.candidates([100, 40], [32, 16], [0.5, 1.0], reference_image_size=32)
  assert [c.name for c in grid[:4]] == ["steps40-size16-data1", "steps40-size16-data0.5",
                                        "steps100-size16-data1", "steps100-size16-data0.5"]
  costs = [c.relative_cost(32) for c in grid]
  assert costs == sorted(costs) and costs[0] == 10 and costs[-1] == 100
  assert proxy_search.estimated_hours(grid[0], 32, 36.0) == pytest.approx(0.1)
  assert proxy_search.estimated_hours(grid[0], 32, None) is None


def test_the_reference_training_itself_is_no_candidate():
  """The docs' grid 25%,50%,100% of a 40-step reference at its own image size: 100% on all the
  data is the reference training again, left out; on half the data or smaller images it is a
  proxy; a grid of nothing but the reference is refused before anything trains."""
  steps = proxy_search.parse_train_steps("25%,50%,100%", 40)
  kept, left_out = proxy_search.without_reference(
      proxy_search.candidates(steps, [32], [1.0], 32), 40, 32)
  assert [c.name for c in kept] == ["steps10-size32-data1", "steps20-size32-data1"]
  assert [c.name for c in left_out] == ["steps40-size32-data1"]
  kept, left_out = proxy_search.without_reference(
      proxy_search.candidates([40], [16, 32], [0.5, 1.0], 32), 40, 32)
  assert [c.name for c in kept] == ["steps40-size16-data1", "steps40-size16-data0.5",
                                    "steps40-size32-data0.5"]
  with pytest.raises(NascliError, match=r"^every candidate is the reference training itself"
                                        r" \(40 steps, 32px, all the training data\), not a"
                                        " proxy of it: give shorter --proxy_train_steps"):
    proxy_search.without_reference(proxy_search.candidates([40], [32], [1.0], 32), 40, 32)


def test_a_candidate_is_skipped_when_it_cannot_win_or_exceeds_the_limit():
  targets = proxy_search.Targets(training_time_hrs_limit=1.0)
  assert proxy_search.skip_reason(10, None, targets, 0.5) is None
  assert proxy_search.skip_reason(10, 10, targets, 0.5).startswith("Exceeded best training")
  assert proxy_search.skip_reason(10, 20, targets, 0.5) is None
  assert proxy_search.skip_reason(10, None, targets, 1.0).startswith(
      "Exceeded training time limit: estimated 1 h")
  no_early = proxy_search.Targets(early_stop_proxy_task_if_not_best=False)
  assert proxy_search.skip_reason(10, 5, no_early, None) is None


REFERENCE = [0.50, 0.60, 0.70, 0.80, 0.90, 0.95]
LATENCY = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def _curves(finals):
  return [([10.0, 20.0], [f / 2, f]) for f in finals]


def test_evaluate_is_kendall_tau_against_the_reference_and_the_median_models_cost():
  """Tau 0.867 is above the 0.65 target, but one discordant pair among six models leaves the
  lower end of its 90% interval at about 0.45: not accepted. The same ranking without that
  pair (tau 1) is."""
  proxy = [0.30, 0.35, 0.32, 0.50, 0.55, 0.60]
  speeds = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
  result = proxy_search.evaluate(proxy, REFERENCE, LATENCY, LATENCY, _curves(proxy), speeds,
                                 train_steps=360, targets=proxy_search.Targets(), seed=3)
  tau = stats.kendalltau(proxy, REFERENCE).statistic
  accuracy = result["accuracy_correlation"]
  assert accuracy["tau"] == pytest.approx(tau) and tau >= 0.65
  low, high = accuracy["interval"]
  assert (low, high) == correlation.bootstrap_interval(proxy, REFERENCE, seed=3)
  assert low < 0.65 <= tau <= high and accuracy["level"] == 0.9
  assert result["status"] == "failed"
  assert result["reason"] == (f"accuracy tau {tau:.3f}, 90% interval {low:.3f} to {high:.3f}:"
                              " its lower end is below --desired_accuracy_correlation 0.65")
  assert result["latency_correlation"]["tau"] == pytest.approx(1.0)
  # The upper median of the proxy scores is 0.50 (model 4): its speed costs the proxy.
  assert result["median_accuracy"] == 0.50
  assert result["cost_hours"] == pytest.approx(0.4 * 360 / 3600)
  assert [p["step"] for p in result["over_steps"]] == [10.0, 20.0]
  ordered = sorted(proxy)
  good = proxy_search.evaluate(ordered, REFERENCE, LATENCY, LATENCY, _curves(ordered), speeds,
                               train_steps=360, targets=proxy_search.Targets(), seed=3)
  assert good["status"] == "succeeded" and good["accuracy_correlation"]["interval"] == [1.0, 1.0]
  assert good["reason"] == "Met desired correlation"
  # Halved curves rank the same at step 10: the target holds from the first evaluation on.
  assert good["correlation_holds_from_step"] == 10.0


def test_the_first_rung_is_a_measured_step_from_which_the_target_holds_to_the_end():
  """Not the first crossing: tau's lower end meets 0.65 at step 10, falls below it at 20 and
  holds from 30 on, so the rung is 30; a step that only some models were evaluated at (an
  interpolated tau) is never one; a proxy whose last evaluation misses the target has none."""
  points = [{"step": 10.0, "low": 0.7}, {"step": 20.0, "low": 0.5},
            {"step": 30.0, "low": 0.66}, {"step": 40.0, "low": 0.8}]
  assert proxy_search.holds_from(points, 0.65) == 30.0
  assert proxy_search.holds_from(points[:2], 0.65) is None
  assert proxy_search.holds_from(points[:1] + [{"step": 20.0, "low": None}] + points[2:],
                                 0.65) == 30.0
  assert main.rungs_from({"correlation_holds_from_step": 30.0, "train_steps": 40}) == {
      "early_stopping": "asha_promotions", "min_steps": 30}
  assert main.rungs_from({"correlation_holds_from_step": 40.0, "train_steps": 40}) is None
  assert main.rungs_from({"correlation_holds_from_step": None, "train_steps": 40}) is None
  # Model 1 was evaluated at 10, 25 and 40, the others at 20 and 40 (and a failed model never
  # counts): tau is measured at 40 only.
  curves = [([10.0, 25.0, 40.0], [0.1, 0.2, 0.3])] + [([20.0, 40.0], [0.1, f]) for f in
                                                       (0.4, 0.5, 0.6, 0.7)] + [([10.0], [0.1])]
  assert proxy_search.measured_steps(curves, [0.3, 0.4, 0.5, 0.6, 0.7, None]) == [40.0]
  result = proxy_search.evaluate([0.3, 0.4, 0.5, 0.6, 0.7, None], REFERENCE, LATENCY, LATENCY,
                                 curves, [0.1] * 6, 40, proxy_search.Targets())
  assert [p["step"] for p in result["over_steps"]] == [40.0]
  assert result["over_steps"][0]["low"] == 1.0 and result["correlation_holds_from_step"] == 40.0


def test_proxies_train_with_other_seeds_than_their_reference():
  reference = main.Reference(models=[{}] * 3, accuracy_metric="accuracy",
                             search_space="mnasnet", search_space_module=None, trial=None,
                             train_steps=40, image_size=32, seconds_per_step=None,
                             seeds=(0, 0, 5))
  assert main.proxy_seeds(reference, None) == [1, 1, 6]  # each reference seed + 1
  assert main.proxy_seeds(reference, 7) == [7, 7, 7]
  with pytest.raises(NascliError, match=r"^--seed 5 is the seed the reference models trained"
                                        " with: proxy and reference would share their training"
                                        " noise"):
    main.proxy_seeds(reference, 5)


def test_evaluate_fails_a_proxy_that_ranks_badly_or_whose_latency_disagrees():
  shuffled = [0.6, 0.3, 0.55, 0.35, 0.5, 0.32]
  bad = proxy_search.evaluate(shuffled, REFERENCE, LATENCY, LATENCY, _curves(shuffled),
                              [0.1] * 6, 100, proxy_search.Targets())
  assert bad["status"] == "failed" and bad["reason"].endswith(
      "its lower end is below --desired_accuracy_correlation 0.65")
  good = [0.30, 0.35, 0.40, 0.50, 0.55, 0.60]
  reversed_latency = list(reversed(LATENCY))
  slow = proxy_search.evaluate(good, REFERENCE, reversed_latency, LATENCY, _curves(good),
                               [0.1] * 6, 100, proxy_search.Targets())
  assert slow["status"] == "failed" and "latency tau -1.000" in slow["reason"]
  # No reference latency (select_proxy_task_models --latency_metric_id none): not checked.
  unmeasured = proxy_search.evaluate(good, REFERENCE, LATENCY, [None] * 6, _curves(good),
                                     [0.1] * 6, 100, proxy_search.Targets())
  assert unmeasured["status"] == "succeeded" and unmeasured["latency_correlation"] is None
  # Too many failed trainings: no tau, said so.
  failed = proxy_search.evaluate([0.3, None, None, 0.5, 0.6, 0.7], REFERENCE, LATENCY,
                                 LATENCY, _curves([0.3, 0.1, 0.1, 0.5, 0.6, 0.7]),
                                 [0.1] * 6, 100, proxy_search.Targets())
  assert failed["status"] == "failed" and failed["accuracy_correlation"]["tau"] is None
  # Over the time limit, measured.
  costly = proxy_search.evaluate(good, REFERENCE, LATENCY, LATENCY, _curves(good), [60.0] * 6,
                                 360, proxy_search.Targets(training_time_hrs_limit=3.0))
  assert costly["status"] == "failed" and "Exceeded training time limit" in costly["reason"]


def test_default_job_dir_is_beside_the_selection():
  assert main.default_job_dir(os.path.join("runs", "proxy_models_mnasnet")) == os.path.join(
      "runs", "proxy_search_mnasnet")


def test_bad_flags_are_refused_before_tensorflow_loads(tmp_path):
  job = str(tmp_path / "job")
  missing = str(tmp_path / "nope")
  for args, message in (
      (["--proxy_task_model_selection_dir", missing], f"{missing} does not exist"),
      (["--proxy_task_model_selection_dir", str(tmp_path)],
       f"--proxy_task_model_selection_dir {tmp_path}: no search journal there"),
      (["--proxy_task_model_selection_dir", missing, "--proxy_train_steps", "1O"],
       "--proxy_train_steps: '1O' is neither"),
      (["--proxy_task_model_selection_dir", missing, "--desired_accuracy_correlation", "2"],
       "--desired_accuracy_correlation must be a Kendall tau in [-1, 1], got 2.0"),
      (["--proxy_task_model_selection_dir", missing, "--previous_proxy_task_search_dir", "a"],
       "--previous_proxy_task_search_dir and --local_output_dir name different jobs")):
    proc, tf_loaded = tf_probe.run("search_proxy_task", "--local_output_dir", job, *args)
    assert proc.returncode == 1 and not tf_loaded, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and message in line, proc.stderr
  assert not os.path.exists(job)


def test_list_trials_of_a_proxy_search_names_its_candidates(tmp_path, cli):
  (tmp_path / main.STATE_FILE).write_text("{}")
  (tmp_path / main.CANDIDATES_DIR / "steps10-size32-data1").mkdir(parents=True)
  (tmp_path / main.CANDIDATES_DIR / "steps10-size32-data1" / "journal.jsonl").write_text("")
  code, _, err = cli("list_trials", str(tmp_path))
  assert code == 1
  assert " ".join(err.split()) == (
      f"Error: {tmp_path} is a search_proxy_task job: each candidate is a search job, e.g."
      f" `nascli list_trials {tmp_path}/candidates/steps10-size32-data1` (candidates:"
      " steps10-size32-data1)")


def _settings(seed=0, steps="25%,50%", target=0.65):
  return {"model_selection_dir": "/abs/runs/proxy_models", "reference_models": ["1", "2"],
          "seed": seed, "train_steps": steps, "image_sizes": None, "train_data_fractions": "1",
          "targets": {"desired_accuracy_correlation": target}}


def _snapshot(folder):
  """Every file under `folder`: its bytes and its mtime (ns)."""
  return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
          for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_proxy_job_with_other_settings_is_refused_and_left_as_it_was(tmp_path):
  """The first run records its settings; a rerun with the same ones, or another grid or target
  (mutable), goes on; another seed is refused in one line naming it, and no file changes."""
  job = tmp_path / "job"
  main.check_job(str(job), _settings(), overwrite=False)
  record = json.loads((job / main.SETTINGS_FILE).read_text())
  assert record["settings"] == _settings()
  (job / main.CANDIDATES_DIR / "steps10-size32-data1").mkdir(parents=True)
  (job / main.CANDIDATES_DIR / "steps10-size32-data1" / "journal.jsonl").write_text("{}\n")
  (job / main.STATE_FILE).write_text("{}")
  main.check_job(str(job), _settings(), overwrite=False)
  main.check_job(str(job), _settings(steps="10%,25%,50%", target=0.5), overwrite=False)
  assert json.loads((job / main.SETTINGS_FILE).read_text())["settings"]["targets"] == {
      "desired_accuracy_correlation": 0.5}  # the latest mutable settings are recorded
  before = _snapshot(job)
  with pytest.raises(NascliError) as refused:
    main.check_job(str(job), _settings(seed=1), overwrite=False)
  assert str(refused.value) == (
      f"{job} was started with other settings (differs in: seed 0 -> 1); pass --overwrite to"
      " delete it and start over, or use another --local_output_dir")
  assert _snapshot(job) == before


def test_overwrite_deletes_the_proxy_job_once_and_its_candidates_never_get_it(tmp_path):
  job = tmp_path / "job"
  main.check_job(str(job), _settings(), overwrite=False)
  (job / main.CANDIDATES_DIR / "steps10-size32-data1").mkdir(parents=True)
  for name in (main.STATE_FILE, main.PROXY_YAML, main.PLOT_FILE, "report.html", "notes.txt"):
    (job / name).write_text("x")
  main.check_job(str(job), _settings(seed=1), overwrite=True)
  assert sorted(p.name for p in job.iterdir()) == ["notes.txt", main.SETTINGS_FILE]
  assert json.loads((job / main.SETTINGS_FILE).read_text())["settings"]["seed"] == 1
  # Outputs of an earlier nascli (no settings file) are refused without --overwrite.
  old = tmp_path / "old"
  (old / main.CANDIDATES_DIR).mkdir(parents=True)
  (old / main.STATE_FILE).write_text("{}")
  with pytest.raises(NascliError, match=f"{old} holds search_proxy_task outputs"
                                        f" \\({main.STATE_FILE}, candidates\\) but no"):
    main.check_job(str(old), _settings(), overwrite=False)
  search = tmp_path / "search"
  search.mkdir()
  (search / "journal.jsonl").write_text("")
  with pytest.raises(NascliError, match="is a search job .* not a search_proxy_task job"):
    main.check_job(str(search), _settings(), overwrite=True)
  # A candidate's search job is run without --overwrite, whatever the command had.
  from nascli.run_spec import TrialSettings  # pylint: disable=g-import-not-at-top
  from nascli.search.search_loop import SearchArgs  # pylint: disable=g-import-not-at-top
  reference = main.Reference(models=[{}, {}], accuracy_metric="accuracy", search_space="mnasnet",
                             search_space_module=None, trial=TrialSettings(), train_steps=40,
                             image_size=32, seconds_per_step=None)
  args = main.candidate_args(SearchArgs(job_dir=str(job), overwrite=True), str(job), reference,
                             proxy_search.Candidate(10, 32, 1.0), [[0], [1]])
  assert args.overwrite is False
  assert args.job_dir == str(job / main.CANDIDATES_DIR / "steps10-size32-data1")


def test_only_failed_trainings_fail_a_candidate():
  """The search engine raises TrialsFailedError for a search stopped by its trials' failures,
  which search_proxy_task turns into a failed candidate; any other error of a candidate's job
  is the command's (tests/test_proxy_end_to_end.py: a candidate job of other settings)."""
  from nascli.errors import TrialsFailedError  # pylint: disable=g-import-not-at-top
  from nascli.search import job_state  # pylint: disable=g-import-not-at-top
  from nascli.search import search_loop  # pylint: disable=g-import-not-at-top
  state = job_state.replay([
      {"seq": 1, "time": "t", "event": "search_started", "settings": {}},
      {"seq": 2, "time": "t", "event": "proposed", "trial_id": "1", "dna": [0],
       "nas_params": {}},
      {"seq": 3, "time": "t", "event": "started", "trial_id": "1"},
      {"seq": 4, "time": "t", "event": "failed", "trial_id": "1", "reason": "ValueError: boom"}])
  error = search_loop.all_failed("job", state)
  assert isinstance(error, TrialsFailedError) and "every trial of job failed" in str(error)
