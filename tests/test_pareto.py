"""Multi-objective search (`--objectives`): the front, the hypervolume, the plot, `--pareto`.

The job dirs here are real: a journal written with `Journal`, as the search loop writes it for
a multi-objective search (each `completed` reward the list of sign-adjusted objective values),
and the derived outputs written by `outputs.write_all`.
"""

import csv
import itertools
import json
import os
import random

import pytest

from conftest import png_size

from nascli.errors import NascliError
from nascli.search import journal as journal_lib
from nascli.search import pareto
from nascli.search import results
from nascli.search import outputs
from nascli.search.journal import Journal
from test_search_flags import _refusals  # pylint: disable=g-bad-import-order

OBJECTIVES = ['accuracy:max', 'latency_ms:min']
TARGET_MS = 5.0
# trial: (accuracy, latency_ms). 3 is dominated by 1, 1 by 4: the front is {2, 4}.
MEASURED = {'1': (0.80, 4.0), '2': (0.90, 6.0), '3': (0.70, 5.0), '4': (0.85, 3.0)}
COMPLETION = ['2', '1', '5', '3', '4']  # 5 fails; 6 stays pending
# The reference point: accuracy 0, latency 1.1 x the worst (trial 2's 6.0 ms) = 6.6 ms. The
# hypervolume after each completed trial, by hand: the area of the union of the boxes
# [0, accuracy] x [latency, 6.6] of the trials so far.
HAND_VOLUMES = {
    '2': 0.9 * (6.6 - 6),  # 0.54
    '1': 0.9 * (6.6 - 6) + 0.8 * (6 - 4),  # 2.14: 1 adds the strip below 2's latency
    '3': 0.9 * (6.6 - 6) + 0.8 * (6 - 4),  # dominated: unchanged
    '4': 0.9 * (6.6 - 6) + 0.85 * (6 - 3),  # 3.09: 4 dominates 1
}


def _make_job(job_dir, objectives=OBJECTIVES):
  j = Journal.in_dir(job_dir)
  settings = {'search_space': 'mnasnet', 'search_algorithm': 'random',
              'trial': {'target_device_latency_ms': TARGET_MS}}
  if objectives:
    settings['objectives'] = objectives
  with j.open_for_writing():
    j.append({'event': 'search_started', 'settings': settings, 'fingerprint': 'f'})
    for trial_id in '123456':
      j.append({'event': 'proposed', 'trial_id': trial_id, 'dna': [int(trial_id)],
                'nas_params': {'blocks[0].kernel_size': f'{int(trial_id) % 2}/2'}})
    for trial_id in COMPLETION:
      j.append({'event': 'started', 'trial_id': trial_id, 'attempt': 1})
      if trial_id == '5':
        j.append({'event': 'failed', 'trial_id': '5', 'status': 'failed', 'reason': 'OOM'})
        continue
      accuracy, latency = MEASURED[trial_id]
      reward = [accuracy, -latency] if objectives else accuracy
      j.append({'event': 'completed', 'trial_id': trial_id, 'reward': reward,
                'metrics': {'accuracy': accuracy, 'latency_ms': latency, 'flops': 1000,
                            'params': 10, 'seconds': 1.0, 'wall_s': 2.0,
                            'accuracy_metric': 'accuracy'}})
  return journal_lib.replay(j.events())


@pytest.fixture
def job(tmp_path):
  job_dir = tmp_path / 'mo_job'
  return job_dir, _make_job(job_dir)


# --------------------------------------------------------------------------- the flag


def test_objectives_parse_to_their_canonical_form():
  assert pareto.canonical(' accuracy:max , latency_ms:min') == OBJECTIVES
  assert pareto.canonical(['params:min', 'flops:min', 'seconds:min']) == [
      'params:min', 'flops:min', 'seconds:min']
  objectives = pareto.parse_objectives('accuracy:max,latency_ms:min')
  assert [(o.metric, o.sign) for o in objectives] == [('accuracy', 1.0), ('latency_ms', -1.0)]
  assert pareto.signed_values(objectives, {'accuracy': 0.5, 'latency_ms': 2}) == (0.5, -2.0)
  assert pareto.signed_values(objectives, {'accuracy': 0.5, 'latency_ms': None}) is None
  assert pareto.missing_metrics(objectives, {'accuracy': float('nan')}) == [
      'accuracy', 'latency_ms']


BAD_OBJECTIVES = [
    ('accuracy:max', '--objectives needs at least 2 objectives, got 1 (accuracy:max); a'
     ' single-objective search uses the MnasNet reward (no --objectives)'),
    ('acuracy:max,latency_ms:min', "--objectives 'acuracy:max': unknown metric 'acuracy' (did"
     " you mean 'accuracy'?); known: accuracy, latency_ms, flops, params, seconds"),
    ('accuracy:max,latency_ms:minimize', "--objectives 'latency_ms:minimize': direction"
     " 'minimize' is neither max nor min"),
    ('accuracy:mx,latency_ms:min', "--objectives 'accuracy:mx': direction 'mx' is neither max"
     " nor min (did you mean 'max'?)"),
    ('accuracy:max,accuracy:min', '--objectives names accuracy twice'),
    ('accuracy,latency_ms:min', "--objectives 'accuracy': expected METRIC:max or METRIC:min,"
     ' e.g. accuracy:max,latency_ms:min'),
]


@pytest.mark.parametrize('spec,message', BAD_OBJECTIVES)
def test_bad_objectives_are_refused_in_one_line(spec, message):
  with pytest.raises(NascliError) as e:
    pareto.parse_objectives(spec)
  assert str(e.value) == message


def test_objectives_name_what_trials_journal():
  assert pareto.METRICS == results.MEASURED


def test_bad_objectives_are_refused_before_any_framework_loads(tmp_path):
  job = str(tmp_path / 'job')
  argvs = [[command, '--local_output_dir', job, '--objectives', spec]
           for command in ('search_in_local', 'search') for spec, _ in BAD_OBJECTIVES]
  outcomes, imported = _refusals(argvs)
  assert imported == []
  for argv, message, (code, stdout, stderr) in zip(
      argvs, [m for _ in range(2) for _, m in BAD_OBJECTIVES], outcomes):
    assert (code, stdout, stderr) == (1, '', f'Error: {message}\n'), argv
  assert not os.path.exists(job)


def test_a_scalar_algorithm_is_refused_with_objectives(tmp_path):
  # pylint: disable=g-import-not-at-top
  from nascli.search import search_loop
  args = search_loop.SearchArgs(job_dir=str(tmp_path / 'job'), objectives=OBJECTIVES,
                                search_algorithm='regularized_evolution')
  with pytest.raises(NascliError, match=r"^search algorithm 'regularized_evolution' optimizes"
                     r" one scalar reward, not 2 objectives \(--objectives\); use: .*\bnsga2\b"):
    search_loop.SearchLoop(args, executor=object())  # refused before it touches the executor
  assert not (tmp_path / 'job').exists()
  # What the journal's settings record (and results read back).
  assert search_loop.SearchArgs(job_dir='j', objectives=OBJECTIVES).settings()[
      'objectives'] == OBJECTIVES
  assert 'objectives' not in search_loop.SearchArgs(job_dir='j').settings()  # old jobs resume


# --------------------------------------------------------------------------- the math


def test_non_dominated_sort_ranks_fronts():
  points = [(1, 5), (2, 4), (1, 4), (3, 1), (0, 0), (2, 4), (0, 6)]
  assert pareto.non_dominated(points) == [True, True, False, True, False, True, True]
  assert pareto.nondominated_sort(points) == [0, 0, 1, 0, 2, 0, 0]
  assert pareto.dominates((1, 2), (1, 1)) and not pareto.dominates((1, 1), (1, 1))


def test_hypervolume_by_hand():
  assert pareto.hypervolume([], (0, 0)) == 0.0
  assert pareto.hypervolume([(0.8, -4.0)], (0.0, -8.0)) == pytest.approx(3.2)
  assert pareto.hypervolume([(0.8, -4.0), (0.9, -6.0), (0.7, -5.0)], (0.0, -8.0)) == (
      pytest.approx(0.9 * 2 + 0.8 * 2))
  # A point no better than the reference in one objective adds nothing.
  assert pareto.hypervolume([(0.5, -9.0), (-1.0, -1.0)], (0.0, -8.0)) == 0.0
  # 3-D: a unit cube and a 2 x 0.5 x 0.5 box overlapping it in 1 x 0.5 x 0.5.
  assert pareto.hypervolume([(1, 1, 1), (2, 0.5, 0.5)], (0, 0, 0)) == pytest.approx(1.25)


@pytest.mark.parametrize('dims', [2, 3, 4])
def test_hypervolume_equals_a_count_of_unit_cells(dims):
  """Integer points: the volume is exactly the number of unit cells some point dominates."""
  rng = random.Random(dims)
  points = [tuple(rng.randint(1, 5) for _ in range(dims)) for _ in range(12)]
  cells = sum(1 for cell in itertools.product(range(5), repeat=dims)
              if any(all(c < p for c, p in zip(cell, point)) for point in points))
  assert pareto.hypervolume(points, (0,) * dims) == pytest.approx(cells)


# --------------------------------------------------------------------------- the outputs


def test_journal_replays_list_rewards(job):
  _, state = job
  assert state.reward_vectors == {t: (a, -l) for t, (a, l) in MEASURED.items()}
  assert state.rewards == {t: a for t, (a, _) in MEASURED.items()}  # the first objective
  assert state.best() == '2'  # the front's best first objective
  assert state.completion_order == COMPLETION


def test_update_all_writes_the_front(job):
  job_dir, state = job
  rows = outputs.write_all(job_dir, state, {})
  by_id = {r['trial_id']: r for r in rows}
  assert list(rows[0])[:5] == ['trial_id', 'status', 'reward', 'pareto', 'hypervolume']
  assert {t: r['pareto'] for t, r in by_id.items()} == {
      '1': False, '2': True, '3': False, '4': True, '5': None, '6': None}
  assert {t: r['hypervolume'] for t, r in by_id.items() if r['hypervolume'] is not None} == (
      pytest.approx(HAND_VOLUMES))
  assert by_id['5']['hypervolume'] is None and by_id['6']['hypervolume'] is None
  with open(job_dir / 'trials.json', encoding='utf-8') as f:
    assert json.load(f) == rows
  with open(job_dir / 'trials.csv', newline='', encoding='utf-8') as f:
    table = {line['trial_id']: line for line in csv.DictReader(f)}
  assert [table[t]['pareto'] for t in '123456'] == ['False', 'True', 'False', 'True', '', '']
  assert float(table['4']['hypervolume']) == pytest.approx(3.09)

  with open(job_dir / 'pareto.json', encoding='utf-8') as f:
    summary = json.load(f)
  assert summary['objectives'] == OBJECTIVES
  assert summary['reference_point'] == {'accuracy': 0.0, 'latency_ms': pytest.approx(6.6)}
  assert summary['front'] == ['2', '4']
  assert summary['hypervolume'] == pytest.approx(3.09)
  assert [(h['trial_id'], h['completed']) for h in summary['history']] == [
      ('2', 1), ('1', 2), ('3', 3), ('4', 4)]
  assert [h['hypervolume'] for h in summary['history']] == pytest.approx(
      [HAND_VOLUMES[t] for t in ('2', '1', '3', '4')])


def test_an_explicit_reference_point_is_used_as_given(job):
  """Searches compare with one reference: (accuracy 0, latency 12 ms) for this one."""
  rows = results.trial_rows(*job)
  front = pareto.front_of(rows, pareto.parse_objectives(OBJECTIVES), COMPLETION,
                          reference={'accuracy': 0.0, 'latency_ms': 12.0})
  assert front.reference == {'accuracy': 0.0, 'latency_ms': 12.0}
  assert [h['hypervolume'] for h in front.history] == pytest.approx(
      [0.9 * 6, 0.9 * 6 + 0.8 * 2, 0.9 * 6 + 0.8 * 2, 0.9 * 6 + 0.85 * 3])


def test_pareto_plot_is_a_png_with_the_front_and_the_target(job):
  # pylint: disable=g-import-not-at-top
  import numpy as np
  from matplotlib import image
  job_dir, state = job
  outputs.write_all(job_dir, state, {})
  path = job_dir / 'pareto_front.png'
  assert png_size(path) == (800, 600)
  pixels = (image.imread(path)[..., :3] * 255).round()

  def count(rgb):  # pixels of one of matplotlib's tab: colours
    return int((np.abs(pixels - np.array(rgb)).max(axis=-1) < 8).sum())

  assert count((255, 127, 14)) > 100  # the front (tab:orange markers and staircase)
  assert count((31, 119, 180)) > 20  # the other trials (tab:blue)
  assert count((214, 39, 40)) > 100  # the target latency (tab:red, dashed)
  assert not [n for n in os.listdir(job_dir) if n.endswith('.tmp')]


def test_a_scalar_search_has_no_pareto_outputs(tmp_path):
  job_dir = tmp_path / 'scalar'
  state = _make_job(job_dir, objectives=None)
  rows = outputs.write_all(job_dir, state, {})
  assert list(rows[0]) == list(results.COLUMNS)
  assert not (job_dir / 'pareto.json').exists() and not (job_dir / 'pareto_front.png').exists()
  assert {results.PARETO_JSON, results.PARETO_PLOT} <= set(journal_lib.DERIVED_OUTPUTS)


# --------------------------------------------------------------------------- list_trials


def _table_ids(text):
  ids = []
  for line in text.splitlines():
    cells = [c.strip() for c in line.strip('│┃ ').split('│')]
    if cells[0].isdigit():
      ids.append(cells[0])
  return ids


def test_list_trials_pareto_shows_exactly_the_front(job, cli):
  job_dir, _ = job
  code, out, err = cli('list_trials', job_dir, '--pareto')
  assert code == 0, err
  assert _table_ids(out) == ['2', '4']  # best first objective first
  header = next(line for line in out.splitlines() if 'trial_id' in line)
  assert [c.strip() for c in header.strip('┃ ').split('┃')][:4] == [
      'trial_id', 'status', 'reward', 'pareto']
  assert 'Pareto front: 2 trials, hypervolume 3.09' in out
  assert '(showing 2)' in out
  code, out, _ = cli('list_trials', job_dir, '--pareto', '--json')
  assert code == 0
  assert [(r['trial_id'], r['pareto']) for r in json.loads(out)] == [('2', True), ('4', True)]
  # Without --pareto every trial, the front marked.
  code, out, _ = cli('list_trials', job_dir)
  assert _table_ids(out) == ['2', '4', '1', '3', '5', '6']


def test_list_trials_pareto_refuses_a_scalar_search(tmp_path, cli):
  job_dir = tmp_path / 'scalar'
  _make_job(job_dir, objectives=None)
  code, out, err = cli('list_trials', job_dir, '--pareto')
  assert (code, out) == (1, '')
  assert err == (f'Error: {job_dir} has no Pareto front: it searched one reward (no'
                 ' --objectives)\n')
