"""bench/bench_schedulers.py, the tabular scheduler benchmark, on synthetic curves (seconds).

The harness must charge every scheduler the same compute, give each seed one arrival order,
drive Ray Tune's and Optuna's schedulers as their own loops do, and read recorded curves from
a search job's TensorFlow event files.
"""

import json
import math
import sys
from pathlib import Path

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
          '27', '--budget', str(8 * T)]
  first = bench.main(['--synthetic', '--save_curves', str(saved), '--out', str(out), *args])
  printed = capsys.readouterr().out
  assert first['table'] in printed
  assert len(first['table'].splitlines()) == 2 + 3
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
