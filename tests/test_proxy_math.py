"""The proxy-task math (nascli/proxy): model selection, Kendall tau over steps, variance.

Pure numpy/scipy, no TensorFlow. Hand-made cases check each rule; where Vertex AI NAS's own
functions can be loaded (its git mirror, NASCLI_VERTEX_NAS_GIT), they serve as an oracle on
random inputs: Vertex's modules import its cloud clients, so the pure functions are lifted out
of the source with `ast` and run against Vertex's real constants modules.
"""

import ast
import dataclasses
import itertools
import math
import os
import random
import subprocess
import types

import numpy as np
import pytest
from scipy import stats

from nascli.errors import NascliError
from nascli.proxy import correlation, selection, variance
from nascli.proxy.selection import SelectionRules, TrialScore


def _trials(accuracies, latencies=None):
  latencies = latencies or [None] * len(accuracies)
  return [TrialScore(str(i), a, l) for i, (a, l) in enumerate(zip(accuracies, latencies))]


def _kept_ids(iterations):
  return [t.trial_id for t in iterations[-1].kept]


# ---------------------------------------------------------------------------- model selection


def _anchors_and_crowd(seed=0):
  """Ten scores spread evenly over [0, 1] and twenty crowded into [0.49, 0.51]."""
  rng = np.random.default_rng(seed)
  anchors = [TrialScore(f"a{i}", i / 9) for i in range(10)]
  crowd = [TrialScore(f"c{i}", float(v)) for i, v in enumerate(rng.uniform(0.49, 0.51, 20))]
  return anchors, crowd


def test_selection_keeps_the_extremes_and_removes_the_crowded_middle():
  anchors, crowd = _anchors_and_crowd()
  trials = crowd[:10] + anchors + crowd[10:]
  iterations = selection.select_models(trials)
  assert [it.num_models for it in iterations] == [30, 25, 20, 15]
  assert all(len(it.removed) == 5 for it in iterations)
  assert sorted(_kept_ids(iterations)) == sorted(t.trial_id for t in anchors)
  # Deterministic, and independent of the order the trials come in.
  assert selection.select_models(trials) == iterations
  shuffled = list(trials)
  random.Random(1).shuffle(shuffled)
  assert sorted(_kept_ids(selection.select_models(shuffled))) == sorted(_kept_ids(iterations))


def test_selection_uses_latency_when_trials_carry_it():
  accuracies = [0.0, 0.45, 0.6, 1.0]
  rules = SelectionRules(start_num_models=4, final_num_models=3, num_models_to_remove_per_iter=1)
  # On accuracy alone 0.45 and 0.6 are closest and 0.6 sits nearer to its other neighbour.
  assert selection.select_models(_trials(accuracies), rules)[0].removed == ("2",)
  # With latency (1, 0, 1, 0) trials 1 and 3 are the closest pair in the plane.
  with_latency = selection.select_models(_trials(accuracies, [1.0, 0.0, 1.0, 0.0]), rules)
  assert with_latency[0].removed == ("1",)


def test_failed_trials_count_towards_the_removals():
  anchors, crowd = _anchors_and_crowd()
  failed = [TrialScore("f0", None), TrialScore("f1", math.nan), TrialScore("f2", 0.5, valid=False),
            TrialScore("f3", math.inf), TrialScore("f4", None), TrialScore("f5", None)]
  trials = anchors + crowd[:14] + failed
  iterations = selection.select_models(trials)
  assert set(iterations[0].failed) == {"f0", "f1", "f2", "f3", "f4", "f5"}
  assert iterations[0].removed == ()  # six failures already exceed the five to remove
  assert sorted(_kept_ids(iterations)) == sorted(t.trial_id for t in anchors)


def test_accuracy_zero_is_a_score_not_a_failure():
  trials = _trials([0.0, 0.2, 0.5, 0.51, 1.0])
  rules = SelectionRules(start_num_models=5, final_num_models=4, num_models_to_remove_per_iter=1)
  iteration = selection.select_models(trials, rules)[0]
  assert iteration.failed == () and "0" in [t.trial_id for t in iteration.kept]


def test_a_trial_without_latency_fails_once_others_report_one():
  trials = _trials([0.1, 0.3, 0.5, 0.9], [5.0, 6.0, None, 7.0])
  rules = SelectionRules(start_num_models=4, final_num_models=3, num_models_to_remove_per_iter=1,
                         max_allowed_failures=1, min_valid_ratio=0.5)
  assert selection.select_models(trials, rules)[0].failed == ("2",)


def test_more_failures_than_allowed_is_a_one_line_error():
  anchors, crowd = _anchors_and_crowd()
  trials = anchors + crowd[:13] + [TrialScore(f"f{i}", None) for i in range(7)]
  with pytest.raises(NascliError) as err:
    selection.select_models(trials)
  message = str(err.value)
  assert "\n" not in message
  assert "7 of 30 trials failed" in message and "more than the 6 allowed" in message
  assert "f0" in message


def test_a_valid_ratio_below_seventy_percent_is_an_error():
  rules = SelectionRules(start_num_models=10, final_num_models=5, max_allowed_failures=10)
  trials = _trials([0.1 * i for i in range(6)] + [None] * 4)
  with pytest.raises(NascliError, match=r"only 6 of 10 trials have valid scores \(60%\), below"
                                        r" the 70% required"):
    selection.select_models(trials, rules)
  # 7 of 10 is enough.
  assert len(_kept_ids(selection.select_models(_trials([0.1 * i for i in range(7)] + [None] * 3),
                                               rules))) == 5


def test_selection_rules_refuse_impossible_settings():
  with pytest.raises(NascliError, match="--final_num_models must be >= 2, got 1"):
    SelectionRules(final_num_models=1)
  with pytest.raises(NascliError, match=r"--max_nas_trial \(8, the models trained\) must be >= --final_num_models"):
    SelectionRules(start_num_models=8)
  with pytest.raises(NascliError, match="--num_models_to_remove_per_iter must be >= 1"):
    SelectionRules(num_models_to_remove_per_iter=0)
  with pytest.raises(NascliError, match="got 29 trials for --max_nas_trial=30"):
    selection.select_models(_trials([i / 29 for i in range(29)]))
  assert SelectionRules(start_num_models=50).allowed_failures == 10
  assert SelectionRules().allowed_failures == selection.MAX_ALLOWED_FAILURES == 6


def test_schedule_is_vertexs_partial_training_budget():
  plan = selection.schedule()
  assert [p.num_models for p in plan] == [30, 25, 20, 15, 10]
  expected = list(itertools.accumulate([1 / 30, 1 / 25, 1 / 20, 1 / 15])) + [1.0]
  assert [p.training_fraction for p in plan] == pytest.approx(expected)
  assert [p.num_models for p in selection.schedule(SelectionRules(12, 10, 5))] == [12, 10]


# ------------------------------------------------------------------------- rank correlation


def test_tau_equals_scipys_and_ignores_failed_models():
  rng = np.random.default_rng(3)
  reference = rng.uniform(0.5, 1.0, 10)
  proxy = reference + rng.normal(0, 0.1, 10)
  corr = correlation.rank_correlation(proxy, reference)
  expected = stats.kendalltau(proxy, reference)
  assert corr.enough and corr.num_valid == 10
  assert corr.tau == pytest.approx(expected.statistic) and corr.p_value == pytest.approx(
      expected.pvalue)
  proxy_failed = list(proxy)
  proxy_failed[2], proxy_failed[7] = None, math.nan
  reference_failed = list(reference)
  reference_failed[4] = math.nan
  corr = correlation.rank_correlation(proxy_failed, reference_failed)
  keep = [0, 1, 3, 5, 6, 8, 9]
  assert corr.num_valid == 7 and corr.enough
  assert corr.tau == pytest.approx(stats.kendalltau(proxy[keep], reference[keep]).statistic)


def test_too_few_valid_pairs_is_a_not_enough_result():
  corr = correlation.rank_correlation([0.1, 0.2, 0.3, 0.4, None], [0.2, 0.1, 0.4, 0.3, 0.5])
  assert not corr.enough and math.isnan(corr.tau)
  assert corr.reason == "not enough valid pairs: 4 of 5, 5 needed"
  # Five valid pairs, but only 5 of 8 models (62%): below Vertex's 0.7 ratio.
  corr = correlation.rank_correlation([1, 2, 3, 4, 5, None, None, None], list(range(8)))
  assert not corr.enough and "5 of 8 (62%), 70% needed" in corr.reason
  corr = correlation.rank_correlation([0.5] * 6, list(range(6)))
  assert not corr.enough and "all proxy scores or all reference scores are equal" in corr.reason


def test_the_bootstrap_interval_of_tau_is_scipys_tau_over_resampled_models():
  """Ten models, two swapped pairs: tau 0.822, above a 0.65 target, but its 90% interval over
  the models reaches down to about 0.57. Deterministic by seed, another seed draws other
  resamples; the interval holds the point estimate; each resample's tau is scipy's tau-b
  (a model drawn twice is a pair tied on both sides) and the ends are their 5th and 95th
  percentiles, recomputed here with scipy on the same draws."""
  reference = np.arange(10.0)
  proxy = reference.copy()
  proxy[[2, 3]] = proxy[[3, 2]]
  proxy[[6, 8]] = proxy[[8, 6]]
  tau = stats.kendalltau(proxy, reference).statistic
  low, high = correlation.bootstrap_interval(proxy, reference, seed=0)
  assert tau == pytest.approx(0.8222, abs=1e-4)
  assert low < 0.65 <= tau <= high
  assert correlation.bootstrap_interval(proxy, reference, seed=0) == (low, high)
  assert correlation.bootstrap_interval(proxy, reference, seed=1) != (low, high)
  draws = np.random.default_rng(0).integers(0, 10, size=(2000, 10))
  taus = [stats.kendalltau(proxy[d], reference[d]).statistic for d in draws]
  taus = np.array([t for t in taus if np.isfinite(t)])
  assert (low, high) == pytest.approx(tuple(np.quantile(taus, [0.05, 0.95])))
  # Failed models are left out, as in the tau; too few valid pairs: no interval.
  with_failures = list(proxy) + [None]
  assert correlation.bootstrap_interval(with_failures, list(reference) + [3.0], seed=0) == (
      low, high)
  assert correlation.bootstrap_interval([0.1, None], [0.2, 0.3], seed=0) is None
  assert correlation.bootstrap_interval([1, 2, 3], [1, 2, 3], seed=0) == (1.0, 1.0)


def _crossing_lines():
  """Six models whose proxy curves start in reverse reference order and end in order.

  Model i's curve is c_i + g_i * step with c falling and g rising in i, so every pair swaps
  at its own step; tau at a step is (2 * swapped_pairs - 15) / 15.
  """
  c = np.array([5.0, 4.0, 3.2, 2.1, 1.3, 0.0])
  g = np.array([0.0, 0.011, 0.023, 0.037, 0.048, 0.066])
  reference = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
  swap = {(i, j): (c[i] - c[j]) / (g[j] - g[i]) for i, j in itertools.combinations(range(6), 2)}
  return c, g, reference, swap


def test_tau_over_steps_rises_as_curves_cross_and_the_first_step_is_found():
  c, g, reference, swap = _crossing_lines()
  schedules = [np.arange(0, 201, 10), np.arange(0, 201, 25), np.arange(0, 201, 10),
               np.arange(0, 201, 20), np.arange(0, 201, 10), np.arange(0, 201, 50)]
  curves = [(s, c[i] + g[i] * s) for i, s in enumerate(schedules)]
  over = correlation.correlation_over_steps(curves, reference)
  assert over.steps.tolist() == sorted(set(np.concatenate(schedules).tolist()))
  swapped = np.array([sum(step > t for t in swap.values()) for step in over.steps])
  assert over.taus == pytest.approx((2 * swapped - 15) / 15)
  assert over.taus[0] == pytest.approx(-1.0) and over.taus[-1] == pytest.approx(1.0)
  # tau >= 0.65 needs 13 swapped pairs: the first step past the 13th-smallest swap step.
  thirteenth = sorted(swap.values())[12]
  crossing = correlation.first_step_reaching(over, 0.65)
  assert crossing.step == pytest.approx(
      linear_crossing(over.steps, over.taus, crossing.step_index, 0.65))
  assert over.steps[crossing.step_index] == min(s for s in over.steps if s > thirteenth)
  assert over.steps[crossing.step_index - 1] < crossing.step <= over.steps[crossing.step_index]
  assert correlation.first_step_reaching(over, 1.01) is None


def linear_crossing(steps, taus, j, target):
  return steps[j - 1] + (target - taus[j - 1]) / (taus[j] - taus[j - 1]) * (steps[j] - steps[j - 1])


def test_a_curve_that_ends_early_leaves_the_later_steps_with_fewer_pairs():
  c, g, reference, _ = _crossing_lines()
  steps = np.arange(0, 201, 20)
  curves = [(steps, c[i] + g[i] * steps) for i in range(6)]
  curves[3] = (steps[:5], curves[3][1][:5])  # model 3 stopped reporting after step 80
  curves[5] = None  # ...and model 5 never reported: 5 of 6 valid until step 80
  over = correlation.correlation_over_steps(curves, reference)
  assert over.num_valid.tolist() == [5] * 5 + [4] * 6
  assert np.isfinite(over.taus[:5]).all() and np.isnan(over.taus[5:]).all()
  assert np.isnan(over.median_accuracy[5:]).all()


def test_median_accuracy_and_cost_follow_the_median_model():
  steps = [100, 200]
  values = [[0.1, 0.6], [0.2, 0.5], [0.3, 0.4], [0.4, 0.3], [0.5, 0.2], [0.6, 0.1]]
  curves = [(steps, v) for v in values]
  over = correlation.correlation_over_steps(curves, [1, 2, 3, 4, 5, 6],
                                            seconds_per_step=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
  # Vertex's median of six values is the upper one, a value some model reached (not 0.35):
  # model 3 at step 100, model 2 at step 200.
  assert over.median_accuracy.tolist() == [0.4, 0.4]
  assert over.cost_hours == pytest.approx([4.0 * 100 / 3600, 3.0 * 200 / 3600])


def _over(taus, accuracy=None, hours=None, steps=None):
  n = len(taus)
  return correlation.CorrelationOverSteps(
      np.array(steps or [100.0 * (i + 1) for i in range(n)]), np.array(taus, dtype=float),
      np.zeros(n), np.full(n, 10), np.array(accuracy or [0.5] * n, dtype=float),
      None if hours is None else np.array(hours, dtype=float))


def test_stopping_condition_reasons_in_vertexs_order():
  rules = correlation.StoppingRules(desired_accuracy_correlation=0.65, desired_accuracy=0.9,
                                    training_time_hrs_limit=3.0)
  hours = [1.0, 2.0, 3.0, 4.0]
  assert correlation.stopping_condition(_over([0.1, 0.2, 0.3, 0.4], hours=[0.5] * 4),
                                        rules) is None
  stop = correlation.stopping_condition(_over([0.2, 0.5, 0.8, 0.9], hours=hours), rules)
  assert stop.reason is correlation.StopReason.MET_DESIRED_ACCURACY_CORRELATION
  assert stop.reason.success and stop.step_index == 2
  assert stop.step == pytest.approx(250.0) and stop.cost_hours == pytest.approx(2.5)
  stop = correlation.stopping_condition(
      _over([0.2, 0.3, 0.4, 0.5], accuracy=[0.7, 0.95, 0.99, 0.99], hours=hours), rules)
  assert stop.reason is correlation.StopReason.MET_DESIRED_ACCURACY and stop.step_index == 1
  assert stop.step == pytest.approx(100 + 100 * (0.9 - 0.7) / (0.95 - 0.7))
  stop = correlation.stopping_condition(_over([0.2, 0.3, 0.4, 0.5], hours=hours), rules)
  assert stop.reason is correlation.StopReason.EXCEEDED_TRAIN_TIME_LIMIT
  assert not stop.reason.success and (stop.step_index, stop.cost_hours) == (2, 3.0)
  stop = correlation.stopping_condition(_over([0.2, 0.3, 0.4, 0.5], hours=hours), rules,
                                        best_cost_hours=1.5)
  assert stop.reason is correlation.StopReason.EXCEEDED_BEST_TRAIN_TIME and stop.step_index == 1
  no_early = dataclasses.replace(rules, early_stop_proxy_task_if_not_best=False)
  stop = correlation.stopping_condition(_over([0.2, 0.3, 0.4, 0.5], hours=hours), no_early,
                                        best_cost_hours=1.5)
  assert stop.reason is correlation.StopReason.EXCEEDED_TRAIN_TIME_LIMIT
  # Within one step the correlation wins over the time limit.
  stop = correlation.stopping_condition(_over([0.2, 0.3, 0.7, 0.5], hours=hours), rules)
  assert stop.reason is correlation.StopReason.MET_DESIRED_ACCURACY_CORRELATION
  # A crossing right after an undefined step is reported at the step itself.
  stop = correlation.stopping_condition(_over([math.nan, 0.8], hours=[1.0, 2.0]), rules)
  assert (stop.step_index, stop.step, stop.cost_hours) == (1, 200.0, 2.0)
  with pytest.raises(ValueError, match="seconds_per_step"):
    correlation.stopping_condition(_over([0.1, 0.2]), rules)


# ---------------------------------------------------------------------------------- variance


def test_coefficient_of_variation_by_hand():
  assert variance.coefficient_of_variation([0.9, 1.0, 1.1]) == pytest.approx(
      math.sqrt(2 / 3) * 0.1)
  assert variance.coefficient_of_variation([0.9, None, 1.0, math.nan, 1.1]) == pytest.approx(
      math.sqrt(2 / 3) * 0.1)
  with pytest.raises(NascliError, match="at least 2 finished runs with a score, got 1 of 2"):
    variance.coefficient_of_variation([0.9, None])
  assert variance.run_to_run_std([0.9, 1.0, 1.1]) == pytest.approx(0.1)


def test_smoothness_by_hand():
  # Normalized: rises over the first half, then falls with slope -1 over the second half; of
  # Vertex's 30 sample points 0.56, 0.63 and the 20 of [0.7, 1.0) lie on the fall.
  assert variance.smoothness([0, 50, 100], [0.0, 1.0, 0.5]) == pytest.approx(22.0)
  assert variance.smoothness([0, 10, 30, 60, 100], [0.1, 0.5, 0.6, 0.8, 0.81]) == 0.0
  assert variance.smoothness([0, 100], [0.7, 0.7]) == 0.0
  assert variance.mean_smoothness([([0, 50, 100], [0.0, 1.0, 0.5]),
                                   ([0, 100], [0.1, 0.9])]) == pytest.approx(11.0)
  measured = variance.measure([0.9, 1.0, 1.1], [([0, 50, 100], [0.0, 1.0, 0.5])])
  assert measured.variance_good and not measured.smoothness_good
  with pytest.raises(NascliError, match="increasing steps"):
    variance.smoothness([0, 50, 50], [0.1, 0.2, 0.3])


def test_noise_verdict_by_hand():
  scores = [0.80, 0.85, 0.90, 0.95, 1.00]
  spread = np.std(scores, ddof=1)
  # rho = 1 - noise^2 / spread^2: 1/2 gives tau = (2/pi) * (pi/6) = 1/3.
  half = variance.noise_verdict(scores, spread / math.sqrt(2))
  assert half.expected_tau == pytest.approx(1 / 3) and not half.distinguishable
  assert variance.noise_verdict(scores, 0.0).expected_tau == pytest.approx(1.0)
  assert variance.noise_verdict(scores, spread * 2).expected_tau == 0.0
  # The default target 0.65 sits at a spread of about 2.6 times the noise.
  assert variance.noise_verdict(scores, spread / 2.7).distinguishable
  assert not variance.noise_verdict(scores, spread / 2.5).distinguishable
  message = variance.noise_verdict(scores, spread / 2.5).message()
  assert message.startswith("differences between architectures do not exceed the run-to-run")


def test_noise_verdicts_tau_matches_simulated_repeat_runs():
  rng = np.random.default_rng(7)
  measured, predicted = [], []
  for _ in range(200):
    true = rng.normal(0.0, 1.0, 40)
    run1, run2 = true + rng.normal(0, 0.5, 40), true + rng.normal(0, 0.5, 40)
    measured.append(stats.kendalltau(run1, run2).statistic)
    predicted.append(variance.noise_verdict(run1, 0.5).expected_tau)
  assert np.mean(predicted) == pytest.approx(np.mean(measured), abs=0.03)


# ------------------------------------------------------------------- Vertex's code as oracle

_VERTEX_GIT = os.environ.get("NASCLI_VERTEX_NAS_GIT", "/work/.mirror/google+vertex-ai-nas/repo")


def _vertex_source(path):
  try:
    return subprocess.run(["git", "-C", _VERTEX_GIT, "show", f"HEAD:{path}"], check=True,
                          capture_output=True, text=True).stdout
  except (OSError, subprocess.CalledProcessError):
    pytest.skip(f"Vertex AI NAS source not available at {_VERTEX_GIT} (NASCLI_VERTEX_NAS_GIT)")


def _constants(name):
  module = types.ModuleType(name)
  source = _vertex_source(f"proxy_task/{name}.py")
  exec(compile(source, name, "exec"), module.__dict__)  # pylint: disable=exec-used
  return module


def _lift(path, names, namespace):
  """Runs only the named top-level functions and classes of a Vertex module in `namespace`."""
  tree = ast.parse(_vertex_source(path))
  tree.body = [node for node in tree.body if getattr(node, "name", None) in names]
  exec(compile(tree, path, "exec"), namespace)  # pylint: disable=exec-used
  return types.SimpleNamespace(**{name: namespace[name] for name in names})


@pytest.fixture(scope="module")
def vertex():
  import enum  # pylint: disable=g-import-not-at-top
  import logging  # pylint: disable=g-import-not-at-top
  import typing  # pylint: disable=g-import-not-at-top
  from scipy import interpolate  # pylint: disable=g-import-not-at-top
  base = {"np": np, "math": math, "logging": logging, "stats": stats, "interpolate": interpolate,
          "dataclasses": dataclasses, "enum": enum,
          **{k: v for k, v in vars(typing).items() if not k.startswith("_")}}
  lifted = {}
  lifted.update(vars(_lift(
      "proxy_task/proxy_task_model_selection_lib.py",
      ["normalize_trial_scores", "find_trial_to_remove"],
      dict(base, model_selection_constants=_constants(
          "proxy_task_model_selection_lib_constants")))))
  lifted.update(vars(_lift(
      "proxy_task/proxy_task_search_controller_lib.py",
      ["ProxyTaskStoppingState", "ProxyTaskStats", "get_trials_with_valid_metrics",
       "trial_idx_to_id", "compute_rank_correlation", "has_enough_trials_for_correlation",
       "compute_accuracy_correlation_over_step",
       "compute_median_accuracy_and_training_time_over_step", "get_interpolated_step_idx",
       "get_interpolated_val", "check_stopping_condition_and_update_proxy_task_stats"],
      dict(base, search_controller_constants=_constants(
          "proxy_task_search_controller_lib_constants")))))
  lifted.update(vars(_lift(
      "proxy_task/proxy_task_variance_measurement_lib.py",
      ["_normalize_to_unit", "_calculate_variance", "_compute_smoothness_from_metrics"],
      dict(base, variance_measurement_constants=_constants(
          "proxy_task_variance_measurement_lib_constants")))))
  lifted["ms_constants"] = _constants("proxy_task_model_selection_lib_constants")
  return types.SimpleNamespace(**lifted)


def _vertex_cut(vertex, trials, removals):
  """Vertex's filter loop (the pure part of filter_trials_based_on_scores) on valid trials."""
  c = vertex.ms_constants
  scores = np.recarray((len(trials),), dtype=[(c.TRIAL_ID, object), (c.ACCURACY, float),
                                               (c.LATENCY, float)])
  for i, t in enumerate(trials):
    scores[i] = (t.trial_id, t.accuracy, 0.0 if t.latency is None else t.latency)
  normalized = vertex.normalize_trial_scores(scores.copy())
  removed = []
  for _ in range(min(removals, len(trials) - c.MIN_NUM_FILTERED_TRIALS)):
    index = vertex.find_trial_to_remove(normalized)
    removed.append(normalized[index][c.TRIAL_ID])
    normalized = np.delete(normalized, index)
  return removed


@pytest.mark.parametrize("with_latency", [False, True])
def test_selection_matches_vertex_on_random_scores(vertex, with_latency):
  rng = np.random.default_rng(11)
  for _ in range(8):
    accuracies = rng.beta(5, 2, 30).tolist()
    latencies = rng.lognormal(1, 0.5, 30).tolist() if with_latency else None
    trials = _trials(accuracies, latencies)
    assert list(selection.filter_trials(trials, 20).removed) == _vertex_cut(vertex, trials, 20)
    current, removed = trials, []
    while len(current) > 10:
      cut = _vertex_cut(vertex, current, min(5, len(current) - 10))
      removed.append(tuple(cut))
      current = [t for t in current if t.trial_id not in cut]
    assert [it.removed for it in selection.select_models(trials)] == removed


def test_rank_correlation_matches_vertex_on_random_scores(vertex):
  rng = np.random.default_rng(12)
  for _ in range(200):
    n = int(rng.integers(3, 12))
    proxy, reference = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    proxy[rng.uniform(size=n) < 0.2] = math.nan
    reference[rng.uniform(size=n) < 0.1] = math.nan
    ours = correlation.rank_correlation(proxy, reference)
    tau, p_value, _, _ = vertex.compute_rank_correlation(proxy.tolist(), reference.tolist())
    assert ours.enough == (not math.isnan(tau))
    if ours.enough:
      assert (ours.tau, ours.p_value) == pytest.approx((tau, p_value))


def test_correlation_over_steps_matches_vertex_on_a_shared_schedule(vertex):
  rng = np.random.default_rng(13)
  for _ in range(30):
    models, steps = 8, np.arange(100, 1100, 100)
    reference = rng.uniform(0.5, 1.0, models)
    table = reference[:, None] * (1 - np.exp(-steps[None, :] / rng.uniform(100, 800, (models, 1))))
    table += rng.normal(0, 0.02, table.shape)
    ends = rng.integers(3, len(steps) + 1, models)  # some models stop reporting early
    curves = [(steps[:e], table[i, :e]) for i, e in enumerate(ends)]
    speed = rng.uniform(0.1, 2.0, models)
    ours = correlation.correlation_over_steps(curves, reference, steps=steps,
                                              seconds_per_step=speed)
    grid = np.full(table.shape, -1.0)  # Vertex's INVALID_ACCURACY where nothing was logged
    for i, e in enumerate(ends):
      grid[i, :e] = table[i, :e]
    taus, p_values = vertex.compute_accuracy_correlation_over_step(grid, reference.tolist(),
                                                                   steps.tolist())
    valid = taus != -5.0
    assert np.isfinite(ours.taus).tolist() == valid.tolist()
    assert ours.taus[valid] == pytest.approx(taus[valid])
    assert ours.p_values[valid] == pytest.approx(p_values[valid])
    training = [types.SimpleNamespace(training_time=types.SimpleNamespace(
        total_training_time_in_secs=s * 1000, total_training_steps=1000)) for s in speed]
    medians, hours = vertex.compute_median_accuracy_and_training_time_over_step(
        training, grid, steps.tolist(), taus)
    assert ours.median_accuracy[valid] == pytest.approx(medians[valid])
    assert ours.cost_hours[valid] == pytest.approx(hours[valid])


def test_stopping_condition_matches_vertex_on_random_series(vertex):
  rng = np.random.default_rng(14)
  checked = set()
  for _ in range(300):
    n = 8
    taus = np.sort(rng.uniform(-0.2, 1.0, n)) if rng.uniform() < 0.5 else rng.uniform(-1, 1, n)
    accuracy = np.sort(rng.uniform(0.3, 1.0, n))
    hours = np.sort(rng.uniform(0, 4, n))
    steps = [100.0 * (i + 1) for i in range(n)]
    rules = correlation.StoppingRules(
        desired_accuracy_correlation=float(rng.uniform(0.5, 0.9)),
        desired_accuracy=float(rng.uniform(0.8, 1.2)) if rng.uniform() < 0.5 else None,
        training_time_hrs_limit=float(rng.uniform(1, 5)),
        early_stop_proxy_task_if_not_best=bool(rng.uniform() < 0.5))
    best = float(rng.uniform(0.5, 4)) if rng.uniform() < 0.5 else None
    ours = correlation.stopping_condition(
        correlation.CorrelationOverSteps(np.array(steps), taus, np.zeros(n), np.full(n, 8),
                                         accuracy, hours), rules, best)
    theirs = vertex.ProxyTaskStats(
        training_steps=steps, accuracy_correlation_over_step=taus.tolist(),
        median_accuracy_over_step=accuracy.tolist(),
        median_training_time_hrs_over_step=hours.tolist())
    stopped = vertex.check_stopping_condition_and_update_proxy_task_stats(
        theirs, rules.early_stop_proxy_task_if_not_best, rules.desired_accuracy_correlation,
        rules.desired_accuracy, rules.training_time_hrs_limit, best)
    assert (ours is not None) == stopped
    if ours is None:
      continue
    checked.add(ours.reason)
    assert ours.reason.value == theirs.stopping_state.value
    if ours.reason.success:
      assert int(ours.step) == theirs.final_training_steps
      assert ours.cost_hours == pytest.approx(theirs.final_training_time_in_hours)
  assert len(checked) == 4  # every reason came up


def test_variance_and_smoothness_match_vertex_on_random_curves(vertex):
  rng = np.random.default_rng(15)
  for _ in range(100):
    finals = rng.uniform(0.5, 1.0, 5)
    assert variance.coefficient_of_variation(finals) == pytest.approx(
        vertex._calculate_variance(finals))  # pylint: disable=protected-access
    steps = np.sort(rng.choice(np.arange(1, 1000), int(rng.integers(3, 30)), replace=False))
    values = np.cumsum(rng.normal(0.01, 0.03, len(steps)))
    metrics = types.SimpleNamespace(training_accuracy_over_steps=[
        types.SimpleNamespace(training_step_pct=float(s), accuracy=float(v))
        for s, v in zip(steps, values)])
    theirs = vertex._compute_smoothness_from_metrics(metrics)  # pylint: disable=protected-access
    assert variance.smoothness(steps, values) == pytest.approx(theirs, rel=1e-3, abs=1e-6)
