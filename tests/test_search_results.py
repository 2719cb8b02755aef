"""The search's derived outputs (trials.json/csv, progress plot, HParams) and `list_trials`.

The job dirs here are real: a journal written with `Journal` and trial folders holding the
model_analysis.json files a trial would write; nothing under test is replaced.
"""

import csv
import glob
import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

from conftest import png_size

from nascli.app import main
from nascli.search import journal as journal_lib
from nascli.search import hparams
from nascli.search import outputs
from nascli.search import result_files
from nascli.search import results
from nascli.search.journal import Journal

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = ('blocks[0].kernel_size', 'blocks[0].block_fn')
DOMAINS = {KEYS[0]: [3, 5], KEYS[1]: ["'conv'", "'mbconv'"]}


def _nas(kernel: int, fn: str) -> dict[str, str]:
  return {KEYS[0]: f'{[3, 5].index(kernel)}/2 ({kernel})',
          KEYS[1]: f"{['conv', 'mbconv'].index(fn)}/2 ('{fn}')"}


ARCHS = {'1': _nas(3, 'conv'), '2': _nas(5, 'conv'), '3': _nas(3, 'mbconv'),
         '4': _nas(5, 'mbconv'), '5': _nas(3, 'conv'), '6': _nas(5, 'conv')}


def _analysis(trial_dir, **fields):
  os.makedirs(trial_dir, exist_ok=True)
  with open(os.path.join(trial_dir, 'model_analysis.json'), 'w', encoding='utf-8') as f:
    json.dump(fields, f)


def _make_job(job_dir, events=(), space='mnasnet', metric='accuracy'):
  """Six trials: 1, 2, 4 completed (rewards 0.5, 0.8, 0.6), 3 NaN, 5 running, 6 pending."""
  j = Journal.in_dir(job_dir)
  with j.open_for_writing():
    j.append({'event': 'search_started', 'settings': {'search_space': space},
              'fingerprint': 'f'})
    for trial_id in sorted(ARCHS, key=int):
      j.append({'event': 'proposed', 'trial_id': trial_id, 'dna': [int(trial_id)],
                'nas_params': ARCHS[trial_id]})
    for trial_id in ('1', '2', '3', '4', '5'):
      j.append({'event': 'started', 'trial_id': trial_id, 'attempt': 1})
    j.append({'event': 'completed', 'trial_id': '1', 'reward': 0.5,
              'metrics': {'accuracy': 0.55, 'latency_ms': 2.0}})
    j.append({'event': 'failed', 'trial_id': '3', 'status': 'failed_with_nan',
              'reason': 'loss is NaN at step 3'})
    j.append({'event': 'completed', 'trial_id': '2', 'reward': 0.8,
              'metrics': {'accuracy': 0.85, 'latency_ms': 1.5, 'flops': 2_000_000,
                          'wall_s': 240.0, 'accuracy_metric': metric}})
    j.append({'event': 'completed', 'trial_id': '4', 'reward': 0.6, 'metrics': {}})
    for event in events:
      j.append(event)
  _analysis(job_dir / '1', trial_id='1', accuracy=0.99, accuracy_metric=metric,
            latency_ms=9.0, reward=0.5, params=31000, flops=1_200_000, seconds=12.5)
  _analysis(job_dir / '2', trial_id='2', accuracy=0.85, latency_ms=1.5, reward=0.8,
            params=45000, flops=9_999_999, seconds=20.0)
  _analysis(job_dir / '4', trial_id='4', accuracy=0.7, latency_ms=3.25, reward=0.6,
            params=52000, flops=3_100_000, seconds=7.0)
  # Left by an attempt of trial 5 that the journal never recorded as completed.
  _analysis(job_dir / '5', trial_id='5', accuracy=0.9, latency_ms=1.0, reward=0.9,
            params=1, flops=1, seconds=1.0)
  return journal_lib.replay(Journal.in_dir(job_dir).events())


@pytest.fixture
def job(tmp_path):
  job_dir = tmp_path / 'search_job'
  return job_dir, _make_job(job_dir)


def test_rows_merge_the_journal_with_model_analysis(job):
  job_dir, state = job
  rows = results.trial_rows(job_dir, state)
  assert [r['trial_id'] for r in rows] == ['1', '2', '3', '4', '5', '6']
  assert [r['status'] for r in rows] == ['completed', 'completed', 'failed_with_nan',
                                         'completed', 'running', 'pending']
  assert all(list(r) == list(results.COLUMNS) for r in rows)
  by_id = {r['trial_id']: r for r in rows}
  # The journal's metrics win over model_analysis.json; the file fills in what they lack.
  wall_1 = by_id['1'].pop('wall_s')
  assert by_id['1'] == {
      'trial_id': '1', 'status': 'completed', 'reward': 0.5, 'accuracy': 0.55,
      'accuracy_metric': 'accuracy', 'latency_ms': 2.0,
      # A job from before trials named their latency's device: timed in the trial, as then.
      'latency_source': 'measured in the trial', 'flops': 1_200_000, 'params': 31000,
      'seconds': 12.5, 'nas_params': ARCHS['1'], 'trial_dir': str(job_dir / '1')}
  # wall_s: the driver's measurement when journaled, else the journal's start-to-end time.
  assert 0 <= wall_1 < 60
  assert (by_id['2']['flops'], by_id['2']['params']) == (2_000_000, 45000)
  assert (by_id['2']['seconds'], by_id['2']['wall_s']) == (20.0, 240.0)
  assert (by_id['4']['accuracy'], by_id['4']['latency_ms'], by_id['4']['seconds']) == (
      0.7, 3.25, 7.0)
  # A failed trial: no reward, no measurements, but how long it ran (journal times).
  failed = by_id['3']
  assert (failed['reward'], failed['accuracy'], failed['params']) == (None, None, None)
  assert failed['seconds'] is not None and 0 <= failed['seconds'] < 60
  assert failed['wall_s'] == failed['seconds']
  # Trial 5 is running: its stray model_analysis.json is not its result.
  assert {k: by_id['5'][k] for k in results.MEASURED + ('reward',)} == dict.fromkeys(
      results.MEASURED + ('reward',))
  assert by_id['6']['seconds'] is None and by_id['6']['nas_params'] == ARCHS['6']
  assert by_id['6']['wall_s'] is None and by_id['6']['accuracy_metric'] == 'accuracy'


def test_rows_ignore_an_unreadable_or_foreign_model_analysis(job, caplog):
  job_dir, state = job
  (job_dir / '2' / 'model_analysis.json').write_text('{"trial_id": "2", "accur')
  _analysis(job_dir / '4', trial_id='9', accuracy=0.1, params=7)
  by_id = {r['trial_id']: r for r in results.trial_rows(job_dir, state)}
  assert (by_id['2']['reward'], by_id['2']['accuracy'], by_id['2']['params']) == (
      0.8, 0.85, None)
  assert (by_id['4']['reward'], by_id['4']['accuracy'], by_id['4']['params']) == (
      0.6, None, None)
  assert 'model_analysis.json' in caplog.text and "trial 9's" in caplog.text


def test_sort_by_reward_puts_unrewarded_trials_last_in_trial_order(job):
  rows = results.trial_rows(*job)
  assert [r['trial_id'] for r in results.sort_by_reward(rows)] == ['2', '4', '1', '3', '5', '6']


def test_tables_are_written_whole_and_equal_the_rows(job):
  job_dir, state = job
  rows = results.trial_rows(job_dir, state)
  result_files.write_tables(job_dir, rows)
  with open(job_dir / 'trials.json', encoding='utf-8') as f:
    assert json.load(f) == rows
  with open(job_dir / 'trials.csv', newline='', encoding='utf-8') as f:
    reader = csv.DictReader(f)
    assert tuple(reader.fieldnames) == results.COLUMNS
    table = list(reader)
  assert len(table) == len(rows)
  for line, row in zip(table, rows):
    assert json.loads(line['nas_params']) == row['nas_params']
    for key in results.COLUMNS:
      if key == 'nas_params':
        continue
      value = row[key]
      if value is None:
        assert line[key] == ''
      elif isinstance(value, (int, float)):
        assert float(line[key]) == value
      else:
        assert line[key] == value
  # Rewriting replaces the files and leaves no temporary file behind, nor one a killed
  # writer left.
  (job_dir / '.trials.csv.abc123.tmp').write_text('half a tab')
  result_files.write_tables(job_dir, rows[:2])
  with open(job_dir / 'trials.json', encoding='utf-8') as f:
    assert [r['trial_id'] for r in json.load(f)] == ['1', '2']
  assert not [n for n in os.listdir(job_dir) if n.endswith('.tmp')]


def test_progress_plot_is_a_real_png(job):
  job_dir, state = job
  result_files.write_progress_plot(job_dir, results.trial_rows(job_dir, state))
  path = job_dir / 'search_progress.png'
  assert png_size(path) == (800, 450)
  assert os.path.getsize(path) > 10_000
  # A job with no finished trial still gets a plot (that says so).
  empty = job_dir.parent / 'empty'
  empty.mkdir()
  result_files.write_progress_plot(empty, [])
  assert png_size(empty / 'search_progress.png') == (800, 450)
  assert not [n for n in os.listdir(job_dir) if n.endswith('.tmp')]


def test_progress_plot_legend_covers_no_point():
  """The last trial, with a low reward, sits at the lower right: where the legend used to be."""
  rows = [{'trial_id': str(i), 'status': 'completed', 'reward': 0.5 + 0.04 * i}
          for i in range(1, 9)]
  rows += [{'trial_id': '9', 'status': 'stopped', 'reward': 0.3},
           {'trial_id': '10', 'status': 'failed', 'reward': None},
           {'trial_id': '11', 'status': 'completed', 'reward': 0.1}]
  fig = result_files.progress_figure('job', rows)
  renderer = fig.canvas.get_renderer()
  ax, = fig.axes
  legend = ax.get_legend().get_window_extent(renderer)
  points = [xy for c in ax.collections for xy in c.get_offset_transform().transform(
      c.get_offsets())]
  assert len(points) == 11
  margin = 5  # pixels: a marker's radius
  covered = [(x, y) for x, y in points if legend.x0 - margin <= x <= legend.x1 + margin
             and legend.y0 - margin <= y <= legend.y1 + margin]
  assert covered == []
  assert legend.x1 <= fig.bbox.x1  # and the legend is not cut off the figure either


def test_hparam_values_are_the_literals_as_strings():
  assert hparams.hparam_value('1/3 (3)') == '3'
  assert hparams.hparam_value("0/2 ('conv')") == 'conv'
  assert hparams.hparam_value('2/3 (0.25)') == '0.25'
  assert hparams.hparam_value('1/4 (-1)') == '-1'
  assert hparams.hparam_value('1/3') == '1/3'
  assert hparams.hparam_value(0.5) == '0.5'
  assert hparams.hparam_value("'mbconv'") == 'mbconv'


def test_decision_domains_cover_every_value_of_a_real_space():
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  from tf_vision.search_spaces import nas_params, registry  # pylint: disable=g-import-not-at-top
  space = registry.get_search_space('mnasnet')
  domains = hparams.decision_domains(space)
  assert domains['blocks[0].block_fn'] == ['conv', 'mbconv']
  assert domains['blocks[0].expand_ratio'] == ['1', '3', '6']
  for seed in range(3):
    params = nas_params.to_nas_params(space, pg.random_dna(pg.dna_spec(space),
                                                           random.Random(seed)))
    assert list(params) == list(domains)
    assert all(hparams.hparam_value(v) in domains[k] for k, v in params.items())


def _events(directory):
  # pylint: disable=g-import-not-at-top
  from tensorboard.backend.event_processing import event_file_loader
  files = sorted(glob.glob(os.path.join(directory, '*tfevents*')))
  return files, [e for f in files for e in event_file_loader.EventFileLoader(f).Load()]


def _values(events):
  return {v.tag: (e.step, v) for e in events for v in e.summary.value}


def test_hparams_follow_tensorboards_layout(job):
  # pylint: disable=g-import-not-at-top
  from tensorboard.plugins.hparams import metadata
  job_dir, state = job
  rows = results.trial_rows(job_dir, state)
  written = hparams.write_hparams(job_dir, rows, DOMAINS)
  assert written == {'1', '2', '4'}
  root = job_dir / 'hparams'
  assert sorted(os.listdir(root))[1:] == ['trial-0001', 'trial-0002', 'trial-0004']

  files, events = _events(root)
  assert len(files) == 1
  config = metadata.parse_experiment_plugin_data(
      _values(events)['_hparams_/experiment'][1].metadata.plugin_data.content)
  assert [h.name for h in config.hparam_infos] == list(KEYS)
  assert [[v.string_value for v in h.domain_discrete.values] for h in config.hparam_infos] == [
      ['3', '5'], ['conv', 'mbconv']]
  assert [m.name.tag for m in config.metric_infos] == ['reward', 'accuracy', 'latency_ms']

  expected = {'1': ('3', 'conv', 0.5, 0.55), '2': ('5', 'conv', 0.8, 0.85),
              '4': ('5', 'mbconv', 0.6, 0.7)}
  for trial_id, (kernel, fn, reward, accuracy) in expected.items():
    files, events = _events(root / hparams.run_name(trial_id))
    assert len(files) == 1
    values = _values(events)
    start = metadata.parse_session_start_info_plugin_data(
        values['_hparams_/session_start_info'][1].metadata.plugin_data.content)
    assert start.group_name == trial_id
    assert {k: v.string_value for k, v in start.hparams.items()} == {KEYS[0]: kernel,
                                                                    KEYS[1]: fn}
    for tag, want in (('reward', reward), ('accuracy', accuracy)):
      step, value = values[tag]
      assert step == 0
      assert list(value.tensor.float_val) == [pytest.approx(want)]
      assert value.metadata.plugin_data.plugin_name == 'scalars'
    assert 'latency_ms' in values


def test_hparams_are_written_once_across_a_resume(job):
  job_dir, state = job
  rows = results.trial_rows(job_dir, state)
  hparams.write_hparams(job_dir, rows, DOMAINS)
  root = job_dir / 'hparams'
  before = sorted(glob.glob(str(root / '**' / '*tfevents*'), recursive=True))
  # A fresh process (no `written` set) and a second call with one: nothing is added.
  assert hparams.write_hparams(job_dir, rows, DOMAINS) == {'1', '2', '4'}
  written = set()
  hparams.write_hparams(job_dir, rows, list(KEYS), written)
  assert written == {'1', '2', '4'}
  assert sorted(glob.glob(str(root / '**' / '*tfevents*'), recursive=True)) == before
  # A trial completed later gets its own run; a killed writer's leftovers are cleaned.
  (root / '.trial-0005.x.tmp').mkdir()
  state = journal_lib.replay(Journal.in_dir(job_dir).events() + [
      {'event': 'completed', 'trial_id': '5', 'reward': 0.7,
       'metrics': {'accuracy': 0.75, 'latency_ms': 1.2}}])
  assert hparams.write_hparams(job_dir, results.trial_rows(job_dir, state), DOMAINS,
                               written) == {'1', '2', '4', '5'}
  after = sorted(glob.glob(str(root / '**' / '*tfevents*'), recursive=True))
  assert len(after) == len(before) + 1 and set(before) < set(after)
  assert sorted(os.listdir(root))[1:] == ['trial-0001', 'trial-0002', 'trial-0004',
                                          'trial-0005']


def test_outputs_are_written_without_tensorflow(job):
  """The search process hands GPUs to its trials: loading TensorFlow there would claim them."""
  job_dir, _ = job
  code = textwrap.dedent(f'''
      import sys
      import nascli.report
      from nascli.search import journal, outputs
      state = journal.replay(journal.Journal.in_dir({str(job_dir)!r}).events())
      outputs.write_all({str(job_dir)!r}, state, {list(KEYS)!r})
      assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'
      ''')
  done = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True,
                        timeout=120, check=False)
  assert done.returncode == 0, done.stderr
  assert sorted(os.listdir(job_dir / 'hparams'))[1:] == ['trial-0001', 'trial-0002',
                                                         'trial-0004']


def test_tensorboard_lists_every_trial(job):
  """TensorBoard's own HParams backend reads the files: every trial, its values and metrics."""
  # pylint: disable=g-import-not-at-top
  from tensorboard import context
  from tensorboard.backend.event_processing import data_provider
  from tensorboard.backend.event_processing import plugin_event_multiplexer
  from tensorboard.plugins import base_plugin
  from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment
  from tensorboard.plugins.hparams import list_session_groups
  job_dir, state = job
  outputs.write_all(job_dir, state, DOMAINS)
  logdir = str(job_dir / 'hparams')
  multiplexer = plugin_event_multiplexer.EventMultiplexer()
  multiplexer.AddRunsFromDirectory(logdir)
  multiplexer.Reload()
  backend = backend_context.Context(base_plugin.TBContext(
      data_provider=data_provider.MultiplexerDataProvider(multiplexer, logdir),
      logdir=logdir, multiplexer=multiplexer))
  ctx = context.RequestContext()
  experiment = get_experiment.Handler(ctx, backend, '', api_pb2.GetExperimentRequest()).run()
  # Ask as the UI does: every value of every domain checked.
  request = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=100,
                                             allowed_statuses=[0, 1, 2, 3])
  for info in experiment.hparam_infos:
    request.col_params.add(hparam=info.name).filter_discrete.values.extend(
        info.domain_discrete.values)
  for info in experiment.metric_infos:
    request.col_params.add().metric.CopyFrom(info.name)
  groups = list_session_groups.Handler(ctx, backend, '', request).run().session_groups
  got = {g.name: ({k: v.string_value for k, v in g.hparams.items()},
                  {m.name.tag: round(m.value, 4) for m in g.metric_values}) for g in groups}
  assert got == {
      '1': ({KEYS[0]: '3', KEYS[1]: 'conv'}, {'reward': 0.5, 'accuracy': 0.55,
                                               'latency_ms': 2.0}),
      '2': ({KEYS[0]: '5', KEYS[1]: 'conv'}, {'reward': 0.8, 'accuracy': 0.85,
                                               'latency_ms': 1.5}),
      '4': ({KEYS[0]: '5', KEYS[1]: 'mbconv'}, {'reward': 0.6, 'accuracy': 0.7,
                                                 'latency_ms': 3.25})}


def test_hparams_with_keys_only_leave_domains_open(job):
  """A domain built from the values seen so far would hide later trials in TensorBoard."""
  from tensorboard.plugins.hparams import metadata  # pylint: disable=g-import-not-at-top
  job_dir, state = job
  hparams.write_hparams(job_dir, results.trial_rows(job_dir, state), list(KEYS))
  _, events = _events(job_dir / 'hparams')
  config = metadata.parse_experiment_plugin_data(
      _values(events)['_hparams_/experiment'][1].metadata.plugin_data.content)
  assert [h.name for h in config.hparam_infos] == list(KEYS)
  assert [h.HasField('domain_discrete') for h in config.hparam_infos] == [False, False]


def test_update_all_writes_every_output(job):
  job_dir, state = job
  rows = outputs.write_all(job_dir, state, DOMAINS)
  assert rows == results.trial_rows(job_dir, state)
  for name in ('trials.json', 'trials.csv', 'search_progress.png', 'hparams'):
    assert os.path.exists(job_dir / name)
  # The journal's --overwrite removes exactly these (and a multi-objective search's, which
  # tests/test_pareto.py checks).
  assert set(journal_lib.DERIVED_OUTPUTS) == {'trials.json', 'trials.csv',
                                              'search_progress.png', 'hparams',
                                              results.PARETO_JSON, results.PARETO_PLOT}


# --------------------------------------------------------------------------- list_trials


def _table_ids(text):
  """Trial ids of the Rich table's body rows, top to bottom."""
  ids = []
  for line in text.splitlines():
    cells = [c.strip() for c in line.strip('│┃ ').split('│')]
    if len(cells) == 8 and cells[0].isdigit():
      ids.append(cells[0])
  return ids


def test_list_trials_sorts_by_reward(job, capsys):
  job_dir, _ = job
  assert main(['list_trials', str(job_dir)]) == 0
  out = capsys.readouterr().out
  assert _table_ids(out) == ['2', '4', '1', '3', '5', '6']
  line = next(l for l in out.splitlines() if l.strip('│ ').startswith('2 '))
  cells = [c.strip() for c in line.strip('│ ').split('│')]
  assert cells == ['2', 'completed', '0.8000', '0.8500', '1.500', '45,000', '2M', '240.0']
  header = next(l for l in out.splitlines() if 'trial_id' in l)
  assert [c.strip() for c in header.strip('┃ ').split('┃')] == [
      'trial_id', 'status', 'reward', 'accuracy', 'latency_ms (measured in the trial)', 'params',
      'flops', 'wall_s']
  assert '3 completed, 1 failed_with_nan, 1 running, 1 pending' in out


def _cells(line):
  return [c.strip() for c in line.strip('│┃ ').split('│' if '│' in line else '┃')]


def test_list_trials_names_the_metric_of_a_detection_search(tmp_path, capsys):
  """A spinenet search's accuracy is COCO AP: the header says so, whether the journal recorded
  the metric (newer searches) or only the search space tells (older journals)."""
  job_dir = tmp_path / 'detection'
  _make_job(job_dir, space='spinenet', metric='AP')
  assert main(['list_trials', str(job_dir)]) == 0
  out = capsys.readouterr().out
  header = _cells(next(l for l in out.splitlines() if 'trial_id' in l))
  assert header == ['trial_id', 'status', 'reward', 'AP', 'latency_ms (measured in the trial)',
                    'params', 'flops', 'wall_s']
  assert 'accuracy' not in out
  assert main(['list_trials', str(job_dir), '--json']) == 0
  rows = {r['trial_id']: r for r in json.loads(capsys.readouterr().out)}
  # Trial 2's completed event recorded AP, trial 1's model_analysis.json did; trial 4 recorded
  # neither (an older search): its search space's metric.
  assert {r['accuracy_metric'] for r in rows.values()} == {'AP'}
  # A job whose trials recorded two metrics says both.
  other = tmp_path / 'mixed'
  _make_job(other, space='spinenet', metric='accuracy')
  assert main(['list_trials', str(other)]) == 0
  assert 'accuracy/AP' in capsys.readouterr().out


def test_piped_list_trials_table_is_whole(tmp_path):
  """Piped (a script reads it), nothing is cut: the deep job dir, every column and cell."""
  job_dir = tmp_path / ('deep_folder_' * 8) / ('nested_' * 10) / 'search_job_with_a_long_name'
  _make_job(job_dir, space='spinenet', metric='AP')
  proc = subprocess.run([sys.executable, '-m', 'nascli', 'list_trials', str(job_dir)],
                        capture_output=True, text=True, check=False, cwd=REPO,
                        env=dict(os.environ, COLUMNS='80'))
  assert proc.returncode == 0, proc.stderr
  lines = proc.stdout.splitlines()
  assert '…' not in proc.stdout and len(str(job_dir)) > 200
  assert lines[0] == f'{job_dir}: 3 completed, 1 failed_with_nan, 1 running, 1 pending'
  header = _cells(next(l for l in lines if 'trial_id' in l))
  assert header == ['trial_id', 'status', 'reward', 'AP', 'latency_ms (measured in the trial)',
                    'params', 'flops', 'wall_s']
  rows = [_cells(l) for l in lines if l.startswith('│')]
  assert rows[0] == ['2', 'completed', '0.8000', '0.8500', '1.500', '45,000', '2M', '240.0']
  assert [r[:2] for r in rows[3:]] == [['3', 'failed_with_nan'], ['5', 'running'],
                                       ['6', 'pending']]


def test_list_trials_shows_interrupted_trials(tmp_path, capsys):
  job_dir = tmp_path / 'job'
  _make_job(job_dir, events=[{'event': 'interrupted', 'trial_id': '5', 'attempt': 1,
                              'signal': 'SIGINT'}])
  assert main(['list_trials', str(job_dir), '--json', '--status', 'interrupted']) == 0
  [row] = json.loads(capsys.readouterr().out)
  assert (row['trial_id'], row['status']) == ('5', 'interrupted')
  assert row['wall_s'] is not None and row['reward'] is None
  assert main(['list_trials', str(job_dir)]) == 0
  assert '3 completed, 1 failed_with_nan, 1 interrupted, 1 pending' in capsys.readouterr().out


def test_list_trials_limits_filters_and_prints_json(job, capsys):
  job_dir, state = job
  assert main(['list-trials', str(job_dir), '--max_trials', '2']) == 0
  assert _table_ids(capsys.readouterr().out) == ['2', '4']
  assert main(['list_trials', str(job_dir), '--json', '--max-trials', '2']) == 0
  rows = json.loads(capsys.readouterr().out)
  by_id = {r['trial_id']: r for r in results.trial_rows(job_dir, state)}
  assert rows == [by_id['2'], by_id['4']]
  assert main(['list_trials', str(job_dir), '--json', '--status', 'failed_with_nan,pending']) == 0
  assert [r['trial_id'] for r in json.loads(capsys.readouterr().out)] == ['3', '6']
  assert main(['list_trials', str(job_dir), '--json', '--status', 'completed',
               '--status', 'running']) == 0
  assert [r['trial_id'] for r in json.loads(capsys.readouterr().out)] == ['2', '4', '1', '5']
  assert main(['list_trials', str(job_dir), '--status', 'done']) == 2
  assert capsys.readouterr().err.startswith("Error: unknown --status 'done'; known: completed,")


def test_list_trials_refuses_a_folder_that_is_not_a_search_job(tmp_path, capsys):
  for folder, why in ((tmp_path, 'is not a nascli search job (no journal.jsonl)'),
                      (tmp_path / 'missing', 'does not exist')):  # as report says
    assert main(['list_trials', str(folder)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ''
    assert captured.err == f'Error: {folder} {why}\n'


def test_list_trials_reports_a_damaged_journal_in_one_line(job, capsys):
  job_dir, _ = job
  with open(job_dir / 'journal.jsonl', 'r+b') as f:
    f.seek(5)
    f.write(b'#')
  assert main(['list_trials', str(job_dir)]) == 1
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and 'line 1' in err and 'journal.jsonl' in err
