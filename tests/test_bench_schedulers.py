"""bench/bench_schedulers.py, the tabular scheduler benchmark, on synthetic curves (seconds).

The harness must charge every scheduler the same compute, give each seed one arrival order,
drive Ray Tune's and Optuna's schedulers as their own loops do, and read recorded curves from
a search job's TensorFlow event files.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'bench'))
import bench_schedulers as bench  # pylint: disable=g-import-not-at-top,wrong-import-position

T = 810  # the synthetic curves' last step; rungs at 90, 270, 810
LADDER = bench.Ladder.of(None, 3, T)


def test_the_ladder_is_the_schedulers():
  assert LADDER.steps == (90, 270, 810)


@pytest.mark.parametrize('workers, completed', [(2, 10), (3, 9)])
def test_none_spends_exactly_its_budget_on_the_seeds_arrival_order(workers, completed):
  curves = bench.synthetic_curves(seed=5, num_archs=20)
  budget = 10 * T
  run = bench.simulate('none', curves, LADDER, seed=7, workers=workers, horizon=budget)
  assert run.spent == budget
  # W at a time, each a whole training: 10 with 2 workers; 9 with 3, and 3 cut at the end.
  assert len(run.completed) == completed
  assert run.trials_by(budget) == ({2: 10, 3: 12}[workers], completed)
  arrivals = bench.Arrivals(list(curves.curves), 7)
  first = [arrivals[i] for i in range(completed)]
  assert len(set(arrivals[i] for i in range(20))) == 20  # a permutation of the pool
  assert run.best_at(budget) == max(curves.reward(a, T) for a in first)
  # Another scheduler of the same seed sees the same architectures in the same order.
  assert bench.Arrivals(list(curves.curves), 7)[3] == arrivals[3]


def test_without_crossings_asha_promotions_reaches_nones_best_at_much_less_compute():
  curves = bench.synthetic_curves(seed=0, crossing=0.0)
  assert bench.rank_correlations(curves, LADDER) == [1.0, 1.0]  # no crossings
  result = bench.benchmark(curves, ['none', 'asha_promotions'], range(20), workers=2,
                           budget=16 * T, horizon=3.0, ladder=LADDER, reference='none')
  ours = result['summary']['asha_promotions']
  assert ours['reached'] == 20
  # Seen here: 0.27x of none's budget and 0.44x of the compute none took to reach it.
  assert ours['ratio_to_none_budget'][0] < 0.35, ours
  assert ours['ratio_to_none_compute'][0] < 0.6, ours
  # At equal compute it is never worse (seen: better on 14 seeds of 20, level on 6).
  vs = ours['vs_reference']
  assert vs['losses'] == 0 and vs['wins'] >= 10, vs


def _ordered_curves(seed, num_archs, better_later):
  """Curves on the ladder's steps whose quality falls (or rises) along the seed's arrival
  order, the same order at every rung."""
  keys = [f'a{i:02d}' for i in range(num_archs)]
  arrivals = bench.Arrivals(keys, seed)
  curves = {}
  for i in range(num_archs):
    final = 0.5 + 0.4 * (i if better_later else num_archs - 1 - i) / num_archs
    curves[arrivals[i]] = [0.5 * final, 0.8 * final, final]
  return bench.Curves('ordered', list(LADDER.steps), curves)


@pytest.mark.parametrize('better_later, first_done', [
    # Each new trial worse than the ones before: promotions wait for 3, 6, 9 results at rung 0
    # (the top 1, 2, 3), then 3 at rung 1.
    (False, 9 * 90 + 3 * 180 + 540),
    # Each new trial the best so far: it is the top 1/eta as soon as it reports (trial 4 with 4
    # results, 5 with 5), so after 5 trials rung 1 holds 3 results and the best goes on.
    (True, 5 * 90 + 3 * 180 + 540),
])
def test_asha_promotions_on_one_worker_follows_the_papers_get_job(better_later, first_done):
  curves = _ordered_curves(seed=0, num_archs=30, better_later=better_later)
  run = bench.simulate('asha_promotions', curves, LADDER, seed=0, workers=1, horizon=40 * T)
  assert run.completed[0] == first_done
  assert run.completed_trials[0] == ('5' if better_later else '1')


def test_ray_tunes_asha_through_its_api_decides_as_nascli_asha():
  pytest.importorskip('ray.tune.schedulers')
  curves = bench.synthetic_curves(seed=2, num_archs=40)
  for seed in range(3):
    ours = bench.simulate('asha', curves, LADDER, seed, workers=2, horizon=30 * T)
    ray = bench.simulate('ray_asha', curves, LADDER, seed, workers=2, horizon=30 * T)
    assert ray == ours
    assert len(ours.started) > 2 * len(ours.completed)  # it did stop trials


def test_ray_hyperband_runs_its_brackets_on_the_ladder():
  pytest.importorskip('ray.tune.schedulers')
  curves = bench.synthetic_curves(seed=3, num_archs=40)
  run = bench.simulate('ray_hyperband', curves, LADDER, seed=0, workers=2, horizon=30 * T)
  # max_t = 9 rung units, eta 3: brackets of 3 trials (trained whole), 5 (2 go on to the end)
  # and 9 (3 to rung 1, 1 to the end) per band of 17, as Ray's HyperBand sizes them.
  band = {str(i) for i in range(1, 18)}
  finished = [t for t in run.completed_trials if t in band]
  assert {'1', '2', '3'} <= set(finished)
  assert len(finished) == 3 + 2 + 1
  assert bench.simulate('ray_hyperband', curves, LADDER, seed=0, workers=2,
                        horizon=30 * T) == run


@pytest.mark.parametrize('name', ['optuna_sh', 'optuna_hyperband'])
def test_optuna_pruners_through_the_study_api_prune_and_replay(name):
  pytest.importorskip('optuna')
  curves = bench.synthetic_curves(seed=4, num_archs=40)
  run = bench.simulate(name, curves, LADDER, seed=1, workers=2, horizon=20 * T)
  assert run.spent == 20 * T
  assert len(run.started) > len(run.completed) + 10  # pruned trials
  assert bench.simulate(name, curves, LADDER, seed=1, workers=2, horizon=20 * T) == run


def test_main_prints_the_table_writes_json_and_reads_back_its_curves(tmp_path, capsys):
  saved, out = tmp_path / 'curves.json', tmp_path / 'result.json'
  args = ['--seeds', '3', '--schedulers', 'none,asha,asha_promotions', '--synthetic_archs',
          '27', '--budget', str(8 * T), '--repeat_noise', '0.004']
  first = bench.main(['--synthetic', '--save_curves', str(saved), '--out', str(out), *args])
  printed = capsys.readouterr().out
  assert first['table'] in printed
  assert len(first['table'].splitlines()) == 2 + 3
  assert list(first['accountings']) == ['old', 'fresh_repeats', 'charged']
  assert all(run['table'] in printed for run in first['accountings'].values())
  written = json.loads(out.read_text())
  assert written['rungs'] == [90, 270, 810] and written['budget'] == 8 * T
  assert set(written['summary']) == {'none', 'asha', 'asha_promotions'}
  assert all(len(rows) == 3 for rows in written['per_seed'].values())
  again = bench.main(['--curves', str(saved), '--out', str(tmp_path / 'again.json'), *args])
  assert again['summary'] == first['summary']


def test_a_bad_curves_file_is_a_one_line_error_naming_it(tmp_path):
  path = tmp_path / 'bad.json'
  path.write_text(json.dumps({'task': 't', 'steps': [10, 20], 'curves': {'a': [0.1]}}))
  with pytest.raises(SystemExit) as e:
    bench.main(['--curves', str(path)])
  assert str(e.value) == f"error: --curves {path}: curve 'a' has 1 values for 2 steps"
  path.write_text(json.dumps({'steps': [10, 20], 'curves': {'a': [0.1, 0.2]}}))
  with pytest.raises(SystemExit, match="missing key 'task'"):
    bench.main(['--curves', str(path)])
  with pytest.raises(SystemExit, match='--budget 810: below 2 full trainings'):
    bench.main(['--synthetic', '--budget', '810'])


def test_from_job_reads_the_validation_curves_of_a_search_job(tmp_path):
  tf = pytest.importorskip('tensorflow')
  job = tmp_path / 'job'

  def trial(trial_id, values, metric='accuracy', late=None):
    folder = job / trial_id
    (folder / 'validation').mkdir(parents=True)
    (folder / 'model_analysis.json').write_text(json.dumps(
        {'accuracy_metric': metric, 'step': max(values), 'timing': {'train_steps_s': 6.0}}))
    with tf.summary.create_file_writer(str(folder / 'validation')).as_default():
      for step, value in values.items():
        tf.summary.scalar(metric, value, step=step)
        tf.summary.scalar('validation_loss', 9.0, step=step)
      if late:  # the final evaluation writes the last step again, later
        tf.summary.scalar(metric, late, step=max(values))

  trial('1', {10: 0.25, 20: 0.5, 30: 0.625}, late=0.75)
  trial('2', {10: 0.125, 30: 0.875})  # evaluated less often: put on the union of the steps
  trial('3', {10: 0.5, 20: 0.5})  # stopped early: left out
  trial('12', {10: 0.25, 20: 0.375, 30: 0.5}, metric='AP')
  (job / 'latency').mkdir()  # not a trial folder
  curves = bench.curves_from_jobs([str(job)])
  assert curves.steps == [10, 20, 30]
  assert curves.curves == {'job/1': [0.25, 0.5, 0.75], 'job/2': [0.125, 0.5, 0.875],
                           'job/12': [0.25, 0.375, 0.5]}
  assert curves.seconds_per_step == pytest.approx(6.0 / 30)
  assert math.isclose(curves.reward('job/1', 15), 0.375)


def test_from_job_prefers_the_trials_validation_curve_file(tmp_path):
  """A search run with validation_curve_points writes validation_curve.jsonl: read without
  TensorFlow, a line cut by a kill skipped, a step evaluated twice keeping its later value."""
  job = tmp_path / 'job'
  for trial_id, lines in (('1', ['{"step": 30, "accuracy": 0.5}', '{"step": 60, "accura',
                                 '{"step": 60, "accuracy": 0.625}',
                                 '{"step": 90, "accuracy": 0.6}',
                                 '{"step": 90, "accuracy": 0.75}']),
                          ('2', ['{"step": 30, "accuracy": 0.25}',
                                 '{"step": 90, "accuracy": 0.875}'])):
    folder = job / trial_id
    folder.mkdir(parents=True)
    (folder / 'model_analysis.json').write_text(json.dumps(
        {'accuracy_metric': 'accuracy', 'step': 90, 'timing': {'train_steps_s': 9.0}}))
    (folder / 'validation_curve.jsonl').write_text('\n'.join(lines) + '\n')
  curves = bench.curves_from_jobs([str(job)])
  assert curves.steps == [30, 60, 90]
  assert curves.curves == {'job/1': [0.5, 0.625, 0.75], 'job/2': [0.25, 0.5625, 0.875]}
  assert curves.seconds_per_step == pytest.approx(0.1)
  assert curves.architectures is None and curves.overheads is None  # none recorded


def test_charged_costs_are_spent_as_steps_and_a_scheduler_that_starts_more_pays_more():
  curves = bench.synthetic_curves(seed=5, num_archs=30)
  charges = bench.Charges(start=90, resume=45, evaluation=10)
  # none on one worker: each trial 810 steps + a start + one evaluation = 910.
  run = bench.simulate('none', curves, LADDER, seed=0, workers=1, horizon=10 * 910,
                       charges=charges)
  assert run.completed == [910 * (i + 1) for i in range(10)]
  assert run.charged_by(10 * 910) == {'starts': 10, 'resumes': 0, 'evaluations': 10,
                                      'steps': 10 * 100}
  free = bench.simulate('asha_promotions', curves, LADDER, 0, 2, 20 * T)
  paid = bench.simulate('asha_promotions', curves, LADDER, 0, 2, 20 * T, charges=charges)
  assert free.charged_by(20 * T)['steps'] == 0
  spent = paid.charged_by(20 * T)
  # It starts a trial for every two rung-0 jobs or so and resumes paused trials from their
  # checkpoints (not the one its worker paused last: that one is in memory, free).
  assert spent['starts'] > 20 and 0 < spent['resumes'] < spent['evaluations'] - spent['starts']
  assert spent['steps'] == 90 * spent['starts'] + 45 * spent['resumes'] + 10 * spent['evaluations']
  assert len(paid.started) < len(free.started) and len(paid.completed) < len(free.completed)


def test_main_prints_the_charges_and_runs_old_and_new_accounting_side_by_side(tmp_path,
                                                                               capsys):
  out = tmp_path / 'result.json'
  result = bench.main(['--synthetic', '--synthetic_archs', '27', '--seeds', '4', '--schedulers',
                       'none,asha_promotions', '--reference', 'none', '--start_cost', '120',
                       '--resume_cost', '60', '--eval_cost', '25', '--out', str(out)])
  printed = capsys.readouterr().out
  assert 'charged: a trial start 120 steps (given), a resume from a checkpoint 60 steps' \
         ' (given), an evaluation 25 steps (given)' in printed
  written = json.loads(out.read_text())
  assert written['charges'] == {'start': 120, 'resume': 60, 'evaluation': 25}
  old, new = written['accountings']['old'], written['accountings']['charged']
  assert old['charges'] == {'start': 0, 'resume': 0, 'evaluation': 0}
  assert old['budget'] == 16 * T and new['budget'] == 16 * (T + 120 + 25) == written['budget']
  # The table shows what each scheduler was charged within the budget.
  assert 'fixed costs charged in the budget' in new['table']
  none, ours = new['summary']['none'], new['summary']['asha_promotions']
  assert none['charged_in_budget']['starts'] == 16 and none['completed'] == 16
  assert none['charged_in_budget']['steps'] == 16 * 145
  assert f"{16 * 145:,} (" in new['table'].splitlines()[2]
  # asha_promotions starts 3x as many trials: it pays 2x-3x what none pays, and starts fewer
  # trials per step than without the charges.
  assert ours['charged_in_budget']['steps'] > 2 * none['charged_in_budget']['steps']
  assert (ours['trials'] / new['budget']) < (
      written['accountings']['old']['summary']['asha_promotions']['trials'] / old['budget'])
  assert result['table'] == new['table']


def test_repeats_of_an_architecture_are_new_trainings_with_the_measured_seed_noise():
  steps = list(LADDER.steps)
  curves = bench.Curves('two seeds', steps, {
      's0/1': [0.5, 0.7, 0.9], 's1/1': [0.6, 0.7, 0.8], 's0/2': [0.4, 0.6, 0.7]},
      architectures={'s0/1': 'A', 's1/1': 'A', 's0/2': 'B'})
  assert bench.seed_spread(curves, LADDER) == pytest.approx([0.07071, 0.0, 0.07071], abs=1e-5)
  exact = bench.Pool(curves, LADDER, 'exact')
  fresh = bench.Pool(curves, LADDER, 'fresh')
  # The old accounting: every curve its own architecture, a repeat reports it again.
  assert exact.archs == ['s0/1', 's0/2', 's1/1']
  assert list(exact.rewards('s0/2', 1, 0, 3)) == [0.4, 0.6, 0.7]
  # Fresh: the first two trials of A are its two recordings.
  assert fresh.archs == ['A', 'B']
  assert list(fresh.rewards('A', 0, 0, 1)) == [0.5, 0.7, 0.9]
  assert list(fresh.rewards('A', 1, 0, 5)) == [0.6, 0.7, 0.8]
  # B's second trial: B's curve with one of A's two residuals (+-0.05, 0, -+0.05 from A's
  # mean, times sqrt(2): one training's spread), seeded by the seed and the trial.
  draws = {tuple(np.round(fresh.rewards('B', 1, seed, 3), 6)) for seed in range(20)}
  assert draws == {(0.329289, 0.6, 0.770711), (0.470711, 0.6, 0.629289)}
  assert np.array_equal(fresh.rewards('B', 1, 4, 3), fresh.rewards('B', 1, 4, 3))
  with pytest.raises(ValueError, match='seed-to-seed spread'):
    bench.Pool(bench.Curves('one seed', steps, {'a': [0.1, 0.2, 0.3]}), LADDER, 'fresh')
  # In a simulation the pool has no exact repeats past the recordings: none's 3rd trial (B
  # again, or A a third time) reports a value of its own.
  run = bench.simulate('none', curves, LADDER, seed=0, workers=1, horizon=6 * T,
                       repeats='fresh')
  assert len(run.completed) == 6


def test_from_job_records_the_architectures_and_the_fixed_costs(tmp_path):
  for job_name, seed_offset in (('s0', 0.0), ('s1', 0.125)):
    for trial_id, arch in (('1', {'k': '3'}), ('2', {'k': '5'})):
      folder = tmp_path / job_name / trial_id
      folder.mkdir(parents=True)
      (folder / 'nas_params_str.json').write_text(json.dumps(arch))
      (folder / 'model_analysis.json').write_text(json.dumps(
          {'accuracy_metric': 'accuracy', 'step': 90,
           'timing': {'train_steps_s': 9.0, 'eval_s': 2.0, 'train_overhead_s': 4.0,
                      'fixed_overhead_s': 7.0}}))
      (folder / 'validation_curve.jsonl').write_text(
          f'{{"step": 45, "accuracy": {0.25 + seed_offset}}}\n'
          f'{{"step": 90, "accuracy": {0.5 + seed_offset}}}\n')
  curves = bench.curves_from_jobs([str(tmp_path / 's0'), str(tmp_path / 's1')])
  # eval_s is the final evaluation; the curve's other point (step 45) was one more, not a
  # fixed cost of a trial: start 7 - 2, resume 4 - 2.
  assert curves.overheads == {'start_s': 5.0, 'eval_s': 2.0, 'resume_s': 2.0}
  assert curves.architectures['s0/1'] == curves.architectures['s1/1']
  assert curves.architectures['s0/1'] != curves.architectures['s0/2']
  saved = tmp_path / 'curves.json'
  saved.write_text(json.dumps(curves.to_json()))
  again = bench.load_curves(str(saved))
  assert again.architectures == curves.architectures and again.overheads == curves.overheads
  ladder = bench.Ladder.of(45, 2, 90)
  assert bench.seed_spread(again, ladder) == pytest.approx([0.08839] * 2, abs=1e-5)
