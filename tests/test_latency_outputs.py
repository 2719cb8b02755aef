"""Every latency says what it is, and the latency target's outcome is said (issue 46, item 4).

Job dirs are real journals written with `Journal` as the search writes them (completed trials
with a `latency_device`, `over_target` proposals a latency model skipped); the outputs under
test are the real ones: `nascli list_trials` (table and --json), report.html, the search's
table and per-trial line, and the target's outcome line. No training, no TensorFlow.
"""

import io
import json
import os

import pytest
from rich.console import Console

from report_jobs import figures, trace

from nascli import report
from nascli.app import main
from nascli.search import journal as journal_lib
from nascli.search import results
from nascli.search import result_files
from nascli.search import summary
from nascli.search.journal import Journal

PREDICTED = {'source': 'latency_model', 'target_device_type': 'cpu-tflite', 'device': 'Test CPU',
             'host': 'h', 'input_size': 32, 'num_threads': 1, 'model': 'lm.json'}
MEASURED = {'source': 'trial', 'target_device_type': 'cpu', 'device': 'Test CPU', 'host': 'h',
            'input_size': [32, 32]}
PREDICTED_LABEL = 'predicted by latency model lm.json (cpu-tflite, 1 thread, 32x32, on Test CPU)'
MEASURED_LABEL = 'measured in the trial (TF serving function, CPU, 32x32, on Test CPU)'


def _nas(n: int) -> dict:
  return {'blocks[0].kernel_size': f'{n % 2}/2 ({[3, 5][n % 2]})', 'width': f'{n % 3}/3 ({n})'}


def _job(job_dir, trained, over=(), target=2.0, settings=None):
  """trained: [(latency_ms, reward, latency_device)]; over: [predicted latency_ms], proposed
  after them, each journaled `over_target` with the penalty reward -0.5 (that of
  nascli/search/latency_gate.py, which writes the event)."""
  j = Journal.in_dir(str(job_dir))
  settings = settings if settings is not None else {
      'search_space': 'mnasnet', 'search_algorithm': 'random',
      'trial': {} if target is None else {'target_device_latency_ms': target}}
  with j.open_for_writing():
    j.append({'event': 'search_started', 'settings': settings, 'fingerprint': 'f'})
    n = 0
    for latency, reward, device in trained:
      n += 1
      trial_id = str(n)
      j.append({'event': 'proposed', 'trial_id': trial_id, 'dna': [n], 'nas_params': _nas(n)})
      j.append({'event': 'started', 'trial_id': trial_id, 'attempt': 1})
      metrics = {'accuracy': reward + 0.05, 'latency_ms': latency, 'flops': 1000,
                 'params': 100, 'accuracy_metric': 'accuracy'}
      if device is not None:
        metrics['latency_device'] = device
      j.append({'event': 'completed', 'trial_id': trial_id, 'reward': reward,
                'metrics': metrics})
    for latency in over:
      n += 1
      trial_id = str(n)
      j.append({'event': 'proposed', 'trial_id': trial_id, 'dna': [n], 'nas_params': _nas(n)})
      j.append({'event': 'over_target', 'trial_id': trial_id, 'latency_ms': latency,
                'target_ms': target, 'margin': 0.0, 'reward': -0.5,
                'latency_device': PREDICTED})
  return journal_lib.replay(j.events())


def _list(capsys, job_dir, *flags):
  assert main(['list_trials', str(job_dir), *flags]) == 0
  return capsys.readouterr().out


def _cells(line):
  return [c.strip() for c in line.strip('│┃ ').split('│' if '│' in line else '┃')]


def _table(out):
  lines = out.splitlines()
  header = _cells(next(l for l in lines if 'trial_id' in l))
  return header, [_cells(l) for l in lines if l.startswith('│')]


# --------------------------------------------------------------------------- list_trials


def test_list_trials_names_a_predicted_latency_and_shows_the_skipped_proposals(tmp_path,
                                                                                capsys):
  job_dir = tmp_path / 'predicted'
  _job(job_dir, [(1.5, 0.8, PREDICTED), (1.9, 0.7, PREDICTED), (2.4, 0.9, PREDICTED)],
       over=[3.5, 4.0])
  out = _list(capsys, job_dir)
  header, rows = _table(out)
  assert header[4] == 'latency_ms (predicted, cpu-tflite 32x32)'
  assert 'latency_source' not in header  # one source: the header says it
  # Trained first (best reward first), then the proposals skipped as over the target.
  assert [(r[0], r[1]) for r in rows] == [('3', 'completed'), ('1', 'completed'),
                                          ('2', 'completed'), ('4', 'over_target'),
                                          ('5', 'over_target')]
  assert rows[3][2:5] == ['-0.5000', '-', '3.500']  # the penalty, no accuracy, the prediction
  lines = out.splitlines()
  assert f'latency: {PREDICTED_LABEL}' in lines
  assert lines[-1] == ('target 2 ms: 2 of 3 trained trials meet it (predicted by latency model'
                       ' lm.json, cpu-tflite, 1 thread, 32x32, on Test CPU); 2 proposals'
                       ' skipped as over target (predicted 3.5-4 ms)')
  assert lines[0].endswith(': 3 completed, 2 over_target')


def test_list_trials_json_has_each_latencys_device_and_source(tmp_path, capsys):
  job_dir = tmp_path / 'predicted'
  _job(job_dir, [(1.5, 0.8, PREDICTED), (2.4, 0.9, PREDICTED)], over=[3.5])
  rows = json.loads(_list(capsys, job_dir, '--json'))
  assert [r['trial_id'] for r in rows] == ['2', '1', '3']
  for row in rows:
    assert row['latency_device'] == PREDICTED
    assert row['latency_source'] == PREDICTED_LABEL
  skipped = rows[2]
  assert (skipped['status'], skipped['latency_ms'], skipped['reward']) == (
      'over_target', 3.5, -0.5)
  assert skipped['accuracy'] is None and skipped['seconds'] is None
  only = json.loads(_list(capsys, job_dir, '--json', '--status', 'over_target'))
  assert [r['trial_id'] for r in only] == ['3']
  # trials.json and trials.csv hold them too.
  state = journal_lib.replay(Journal.in_dir(str(job_dir)).events())
  result_files.write_tables(job_dir, results.trial_rows(job_dir, state))
  written = json.loads((job_dir / 'trials.json').read_text())
  assert [r['status'] for r in written] == ['completed', 'completed', 'over_target']
  csv_text = (job_dir / 'trials.csv').read_text()
  assert 'latency_source' in csv_text.splitlines()[0] and ',over_target,' in csv_text


def test_no_trial_meets_the_target_says_what_the_trials_measured(tmp_path, capsys):
  job_dir = tmp_path / 'measured'
  state = _job(job_dir, [(2.6, 0.8, MEASURED), (7.1, 0.9, MEASURED), (4.85, 0.7, MEASURED)])
  line = ('target 2 ms: no trial meets it; the trials measured 2.6-7.1 ms (measured in the'
          ' trial, TF serving function, CPU, 32x32, on Test CPU): the target is below what this'
          ' space reaches here')
  assert summary.target_outcome(state) == line
  out = _list(capsys, job_dir)
  assert out.splitlines()[-1] == line
  assert _table(out)[0][4] == 'latency_ms (measured in the trial, cpu 32x32)'
  # The same job without a target: no line.
  other = tmp_path / 'untargeted'
  state = _job(other, [(2.6, 0.8, MEASURED)], target=None)
  assert summary.target_outcome(state) is None
  assert not [l for l in _list(capsys, other).splitlines() if l.startswith('target')]


def test_the_target_outcome_of_a_predicted_job_and_of_one_that_skipped_everything(tmp_path):
  state = _job(tmp_path / 'a', [(2.5, 0.8, PREDICTED), (3.0, 0.9, PREDICTED)], over=[9.0])
  assert summary.target_outcome(state) == (
      'target 2 ms: no trial meets it; the trials were predicted at 2.5-3 ms (predicted by'
      ' latency model lm.json, cpu-tflite, 1 thread, 32x32, on Test CPU): the target is below'
      ' what this space reaches here; 1 proposal skipped as over target (predicted 9 ms)')
  state = _job(tmp_path / 'b', [(1.0, 0.8, PREDICTED)])
  assert summary.target_outcome(state).startswith('target 2 ms: 1 of 1 trained trial meet it')
  state = _job(tmp_path / 'c', [], over=[3.0, 5.0])
  assert summary.target_outcome(state).startswith(
      'target 2 ms: no trial trained; 2 proposals skipped as over target (predicted 3-5 ms)')


def test_trials_of_several_sources_get_a_source_column(tmp_path, capsys):
  job_dir = tmp_path / 'mixed'
  calculator = {'source': 'calculator', 'target_device_type': 'cpu-tflite', 'device': 'Phone',
                'input_size': 224, 'num_threads': 4}
  _job(job_dir, [(1.5, 0.8, MEASURED), (2.4, 0.9, calculator)])
  header, rows = _table(_list(capsys, job_dir))
  assert header[4:6] == ['latency_ms', 'latency_source']
  assert {r[0]: r[5] for r in rows} == {'1': 'measured in the trial, cpu 32x32',
                                        '2': 'measured by the calculator, cpu-tflite 224x224'}


def test_a_noisy_measurement_is_marked(tmp_path, capsys):
  job_dir = tmp_path / 'noisy'
  _job(job_dir, [(7.9, 0.8, {**MEASURED, 'noisy': True, 'spread': 0.23}),
                 (5.0, 0.7, MEASURED)], target=None)
  out = _list(capsys, job_dir)
  _, rows = _table(out)
  assert {r[0]: r[4] for r in rows} == {'1': '7.900*', '2': '5.000'}
  assert summary.noisy_note() in out.splitlines()
  assert summary.noisy_note().startswith('* noisy: the medians of the two halves of its timed runs')
  # Where only the trial's model_analysis.json `latency` report says so (read when the journal
  # lacks a measurement).
  job_dir = tmp_path / 'noisy_analysis'
  j = Journal.in_dir(str(job_dir))
  with j.open_for_writing():
    j.append({'event': 'search_started', 'settings': {'search_space': 'mnasnet'},
              'fingerprint': 'f'})
    j.append({'event': 'proposed', 'trial_id': '1', 'dna': [1], 'nas_params': _nas(1)})
    j.append({'event': 'started', 'trial_id': '1', 'attempt': 1})
    j.append({'event': 'completed', 'trial_id': '1', 'reward': 0.5, 'metrics': {}})
  os.makedirs(job_dir / '1')
  (job_dir / '1' / 'model_analysis.json').write_text(json.dumps(
      {'trial_id': '1', 'accuracy': 0.5, 'latency_ms': 4.85, 'latency_device': MEASURED,
       'latency': {'median_ms': 4.85, 'spread': 0.4, 'noisy': True}}))
  out = _list(capsys, job_dir)
  assert _table(out)[1][0][4] == '4.850*' and summary.noisy_note() in out


def test_old_journals_without_the_new_fields_still_list(tmp_path, capsys):
  """A job from before trials recorded latency_device, input sizes or sources: it lists, each
  latency labelled with what its settings say (timed in the trial, or by the calculator)."""
  job_dir = tmp_path / 'old'
  _job(job_dir, [(2.0, 0.8, None), (3.0, 0.6, {'host': 'h', 'device': 'Old CPU',
                                               'target_device_type': 'cpu'})],
       settings={'search_space': 'mnasnet'})
  out = _list(capsys, job_dir)
  header, rows = _table(out)
  assert header[4] == 'latency_ms' and header[5] == 'latency_source'
  assert [r[0] for r in rows] == ['1', '2']
  rows = json.loads(_list(capsys, job_dir, '--json'))
  assert rows[0]['latency_source'] == 'measured in the trial'
  assert rows[0]['latency_device'] is None
  assert rows[1]['latency_source'] == 'measured (TF serving function, CPU, on Old CPU)'
  job_dir = tmp_path / 'old_calculator'
  _job(job_dir, [(2.0, 0.8, None)],
       settings={'search_space': 'mnasnet', 'trial': {'latency_calculator': 'external'}})
  rows = json.loads(_list(capsys, job_dir, '--json'))
  assert rows[0]['latency_source'] == 'measured by run_latency_calculator_local'
  assert 'latency_device' not in rows[0]


# --------------------------------------------------------------------------- the search's screen


def _render(renderable) -> str:
  buffer = io.StringIO()
  Console(file=buffer, width=300).print(renderable)
  return buffer.getvalue()


def test_the_searchs_table_and_trial_lines_name_the_source(tmp_path):
  state = _job(tmp_path / 'job', [(1.5, 0.8, PREDICTED), (2.4, 0.9, PREDICTED)], over=[3.5])
  text = _render(summary.table('job', 'mnasnet', 'random', 'accuracy', state, ['2']))
  header = _cells(next(l for l in text.splitlines() if 'trial' in l and 'state' in l))
  assert header == ['trial', 'state', 'accuracy', 'latency ms (predicted, cpu-tflite 32x32)',
                    'reward', 'best so far']
  rows = [_cells(l) for l in text.splitlines() if l.startswith('│')]
  assert rows[1][:2] == ['2', 'running'] and rows[2][:2] == ['3', 'over_target']
  assert rows[2][3:] == ['3.5', '-0.5', '0.9']  # the penalty is no best so far
  assert f'latency: {PREDICTED_LABEL}' in text
  assert summary.trial_line(state, '1') == (
      'trial 1: reward 0.8, accuracy 0.85, latency 1.5 ms, predicted by latency model lm.json'
      ' (cpu-tflite, 1 thread, 32x32)')
  assert summary.trial_line(state, '3') == (
      'trial 3: not trained: latency 3.5 ms, predicted by latency model lm.json (cpu-tflite,'
      ' 1 thread, 32x32), over the 2 ms target; penalty reward -0.5')
  noisy = _job(tmp_path / 'noisy', [(7.9, 0.8, {**MEASURED, 'noisy': True, 'spread': 0.23})])
  assert summary.trial_line(noisy, '1').endswith(
      'latency 7.9 ms, measured in the trial (TF serving function, CPU, 32x32); noisy'
      ' (spread 23%)')
  assert '7.9*' in _render(summary.table('j', 'mnasnet', 'random', 'accuracy', noisy, []))
  # The line the search prints at its end, on its stderr.
  buffer = io.StringIO()
  summary.say_target_outcome(Console(file=buffer, width=80), state)
  assert buffer.getvalue() == summary.target_outcome(state) + '\n'


# --------------------------------------------------------------------------- report.html


def _page(job_dir) -> str:
  """report.html as `nascli report` writes it, without plotly.js and the style sheet."""
  from plotly.offline import get_plotlyjs  # pylint: disable=g-import-not-at-top
  report.write(str(job_dir))
  page = (job_dir / 'report.html').read_text(encoding='utf-8').replace(get_plotlyjs(), '')
  return page[:page.index('<style>')] + page[page.index('</style>'):]


def test_the_report_names_the_source_and_shows_the_skipped_proposals(tmp_path):
  job_dir = tmp_path / 'predicted'
  state = _job(job_dir, [(1.5, 0.8, PREDICTED), (1.9, 0.7, PREDICTED), (2.4, 0.9, PREDICTED)],
               over=[3.5, 4.0])
  page = _page(job_dir)
  fig = figures(job_dir / 'report.html')['tradeoff']
  assert fig['layout']['xaxis']['title']['text'] == (
      'latency ms: predicted by latency model lm.json (cpu-tflite, 1 thread, 32x32)')
  skipped = trace(fig, 'not trained: predicted over the target')
  assert skipped['customdata'] == ['4', '5'] and skipped['x'] == [3.5, 4.0]
  assert skipped['y'] == [0.7, 0.7]  # along the bottom: the penalty is no result
  assert 'penalty reward -0.5' in skipped['text'][0]
  assert 'predicted by latency model lm.json' in trace(fig, 'trials')['text'][0]  # hover
  assert fig['layout']['shapes'][0]['x0'] == 2.0
  assert 'The dashed line is the latency target.' in page
  progress = figures(job_dir / 'report.html')['progress-trials']
  assert trace(progress, 'not trained: predicted over the target')['x'] == [4, 5]
  # The target's outcome, said at the top of the page.
  outcome = summary.target_outcome(state)
  assert outcome.startswith('target 2 ms: 2 of 3 trained trials meet it')
  assert f'<p class="summary">T{outcome[1:]}.</p>' in page.replace('&#x27;', "'")
  # The table: every trial, the skipped ones after the trained, said not trained.
  table = page[page.index('<table class="sortable" id="trials">'):]
  table = table[:table.index('</table>')]
  assert 'latency ms (predicted, cpu-tflite 32x32)' in table
  body = table.split('<tr>')[2:]
  assert [r.split('href="')[1].split('/')[0] for r in body] == ['3', '1', '2', '4', '5']
  assert 'over_target (not trained)' in body[3] and 'status-over_target' in body[3]


def test_the_report_speaks_of_a_target_line_only_when_there_is_a_target(tmp_path):
  job_dir = tmp_path / 'free'
  _job(job_dir, [(2.6, 0.8, {**MEASURED, 'noisy': True}), (7.1, 0.9, MEASURED)], target=None)
  page = _page(job_dir)
  fig = figures(job_dir / 'report.html')['tradeoff']
  assert 'shapes' not in fig['layout']
  assert 'dashed line' not in page and 'target' not in page.split('<h2>Search settings')[0]
  assert 'target' not in json.dumps(fig)
  assert 'not trained' not in page  # no proposal was skipped
  assert fig['layout']['xaxis']['title']['text'] == (
      'latency ms: measured in the trial (TF serving function, CPU, 32x32)')
  assert '2.6*' in page and 'noisy: the medians of the two halves of its timed runs' in page


def test_an_old_job_reports_with_what_is_known(tmp_path):
  job_dir = tmp_path / 'old'
  _job(job_dir, [(2.0, 0.8, None), (3.0, 0.6, None)], settings={'search_space': 'mnasnet'})
  _page(job_dir)
  fig = figures(job_dir / 'report.html')['tradeoff']
  assert fig['layout']['xaxis']['title']['text'] == 'latency ms: measured in the trial'


@pytest.mark.parametrize('status', ['over_target'])
def test_over_target_is_a_known_status_of_list_trials(tmp_path, capsys, status):
  job_dir = tmp_path / 'none_over'
  _job(job_dir, [(1.0, 0.8, PREDICTED)])
  assert json.loads(_list(capsys, job_dir, '--json', '--status', status)) == []


def test_a_finished_searchs_report_says_the_target_outcome(tmp_path, capsys):
  """A rerun of a finished search reports it from the journal (search_loop.report_finished):
  its table names the latency's source, then the target's outcome."""
  from nascli.search import search_loop  # pylint: disable=g-import-not-at-top
  job_dir = tmp_path / 'done'
  state = _job(job_dir, [(2.6, 0.8, MEASURED), (7.1, 0.9, MEASURED)], over=[9.0])
  search_loop.report_finished(search_loop.SearchArgs(job_dir=str(job_dir)), state, 'mnasnet',
                              'accuracy')
  err = capsys.readouterr().err
  rows = [_cells(l) for l in err.splitlines() if l.startswith('│')]
  # Trained trials measured, the skipped one predicted: each row says which.
  assert [r[3:5] for r in rows] == [['2.6', 'measured in the trial, cpu 32x32'],
                                    ['7.1', 'measured in the trial, cpu 32x32'],
                                    ['9', 'predicted, cpu-tflite 32x32']]
  assert f'latency: {MEASURED_LABEL}' in err.splitlines()
  assert f'latency: {PREDICTED_LABEL}' in err.splitlines()
  assert err.splitlines()[-1] == summary.target_outcome(state)
  assert err.splitlines()[-1].startswith('target 2 ms: no trial meets it; the trials measured'
                                         ' 2.6-7.1 ms')
