"""Job dirs for the report tests: real journals (written with `Journal`, as the search loop
writes them), real curve files in each trial folder, and the derived outputs written by the
search's own writers (`outputs.write_all`, report.html among them).

- `early_stopping_job`: 10 trials of a scalar search with ASHA rungs: completed (some promoted
  through a rung), stopped at a rung, failed, and paused; the reward depends on decision `op`
  only, the other decision `width` is noise, so decision importance has a known answer.
- `two_objective_job`: accuracy:max, latency_ms:min over 6 trials; the front is {2, 4, 6}.
- `proxy_search_job`: a search_proxy_task job's search_controller_state.json.
"""

from __future__ import annotations

import contextlib
import datetime
import html.parser
import json
import os
from unittest import mock

from nascli.search import journal as journal_lib
from nascli.search import journal_file
from nascli.search import results
import nascli.report  # noqa: F401  pylint: disable=unused-import (its writer: report.html)
from nascli.search import outputs
from nascli.search.journal import Journal

OPS = ('conv', 'sep', 'skip')
DOMAINS = {'op': list(OPS), 'width': [8, 16, 24, 32]}
TARGET_MS = 5.0
START = datetime.datetime(2026, 12, 6, 10, 0, tzinfo=datetime.timezone.utc)
# An architecture value as the search journals it, with markup that must stay text.
EVIL = '</script><script>window.pwned=1</script>'


def _params(op: int, width: int, extra: dict | None = None) -> dict:
  params = {'op': f'{op}/3 ({OPS[op]!r})', 'width': f'{width}/4 ({DOMAINS["width"][width]})'}
  return {**params, **(extra or {})}


class _Clock:
  """The journal's clock (journal_file._now) set by the job builder: trials that take
  minutes, as real ones do, without waiting for them."""

  def __init__(self):
    self.minutes = 0.0

  def __call__(self) -> str:
    moment = START + datetime.timedelta(minutes=self.minutes)
    return moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')


@contextlib.contextmanager
def _clocked():
  clock = _Clock()
  with mock.patch.object(journal_file, '_now', clock):
    yield clock


def _metrics(accuracy: float, latency: float, step: int, **extra) -> dict:
  return {'accuracy': accuracy, 'latency_ms': latency, 'flops': 1_000_000 + int(latency * 1e5),
          'params': 20_000, 'seconds': 10.0, 'wall_s': 12.0, 'accuracy_metric': 'accuracy',
          'step': step, **extra}


def _curves(job_dir, trial_id: str, losses: list[float], evaluations: dict[int, float]):
  trial = os.path.join(job_dir, trial_id)
  os.makedirs(trial, exist_ok=True)
  with open(os.path.join(trial, 'train_metrics.jsonl'), 'w') as f:
    for n, loss in enumerate(losses, 1):
      f.write(json.dumps({'step': 10 * n, 'loss': loss}) + '\n')
  with open(os.path.join(trial, 'validation_curve.jsonl'), 'w') as f:
    for step, value in evaluations.items():
      f.write(json.dumps({'step': step, 'accuracy': value}) + '\n')


# trial: (op, width); accuracy = 0.4 + 0.2 * op + 0.02 * width (+ 0.05 at the last step).
ES_TRIALS = {'1': (2, 0), '2': (0, 1), '3': (1, 2), '4': (2, 3), '5': (0, 0), '6': (1, 1),
             '7': (2, 1), '8': (0, 3), '9': (1, 3), '10': (0, 2)}
ES_COMPLETED = ('1', '3', '4', '7', '9', '10')  # promoted at rung 0 (step 30), completed at step 90
ES_STOPPED = ('2', '6')  # stopped at rung 0
ES_FAILED = ('5',)
ES_PAUSED = ('8',)  # reported rung 0, no decision yet


def es_accuracy(trial_id: str, step: int) -> float:
  op, width = ES_TRIALS[trial_id]
  return round(0.4 + 0.2 * op + 0.02 * width + (0.05 if step >= 90 else 0.0), 4)


def early_stopping_job(job_dir) -> tuple[str, journal_lib.JobState]:
  job_dir = str(job_dir)
  j = Journal.in_dir(job_dir)
  settings = {'search_space': 'mnasnet', 'search_algorithm': 'tpe', 'max_nas_trial': 10,
              'scheduler': {'name': 'asha_promotions', 'min_steps': 30, 'reduction_factor': 3},
              'trial': {'target_device_latency_ms': TARGET_MS}}
  with _clocked() as clock, j.open_for_writing():
    j.append({'event': 'search_started', 'settings': settings, 'fingerprint': 'f'})
    for trial_id, (op, width) in ES_TRIALS.items():
      extra = {'label': EVIL} if trial_id == '3' else None
      j.append({'event': 'proposed', 'trial_id': trial_id, 'dna': [op, width],
                'nas_params': _params(op, width, extra)})
    for trial_id in ES_TRIALS:
      latency = 2.0 + int(trial_id) * 0.5
      clock.minutes = int(trial_id) * 1.5  # two at a time, a trial every 1.5 minutes
      j.append({'event': 'started', 'trial_id': trial_id, 'attempt': 1, 'rung': 0})
      clock.minutes += 1.0
      if trial_id in ES_FAILED:
        j.append({'event': 'failed', 'trial_id': trial_id, 'status': 'failed',
                  'reason': 'out of memory'})
        continue
      rung0 = es_accuracy(trial_id, 30)
      j.append({'event': 'rung', 'trial_id': trial_id, 'rung': 0, 'step': 30, 'reward': rung0,
                'metrics': _metrics(rung0, latency, 30, rung=0, resumed_from=0)})
      _curves(job_dir, trial_id, [2.0 - 0.1 * n - 0.05 * ES_TRIALS[trial_id][0]
                                  for n in range(9 if trial_id in ES_COMPLETED else 3)],
              {30: rung0} if trial_id not in ES_COMPLETED else
              {30: rung0, 60: es_accuracy(trial_id, 60), 90: es_accuracy(trial_id, 90)})
      if trial_id in ES_STOPPED:
        j.append({'event': 'stopped', 'trial_id': trial_id, 'rung': 0, 'step': 30,
                  'reward': rung0, 'metrics': _metrics(rung0, latency, 30, rung=0),
                  'reason': 'asha_promotions: not in the top third'})
      elif trial_id in ES_COMPLETED:
        j.append({'event': 'promoted', 'trial_id': trial_id, 'rung': 0})
        j.append({'event': 'started', 'trial_id': trial_id, 'attempt': 2, 'rung': 1})
        clock.minutes += 2.0
        final = es_accuracy(trial_id, 90)
        j.append({'event': 'completed', 'trial_id': trial_id, 'reward': final,
                  'metrics': _metrics(final, latency, 90, rung=1, resumed_from=30)})
  state = journal_lib.replay(j.events())
  outputs.write_all(job_dir, state, DOMAINS)
  return job_dir, state


# trial: (accuracy, latency_ms); the front (accuracy up, latency down) is {2, 4, 6}.
MO_TRIALS = {'1': (0.80, 4.0), '2': (0.90, 6.0), '3': (0.70, 5.0), '4': (0.85, 3.0),
             '5': (0.60, 7.0), '6': (0.50, 1.0)}
MO_FRONT = ('2', '4', '6')


def two_objective_job(job_dir) -> tuple[str, journal_lib.JobState]:
  job_dir = str(job_dir)
  j = Journal.in_dir(job_dir)
  settings = {'search_space': 'mnasnet', 'search_algorithm': 'nsga2',
              'objectives': ['accuracy:max', 'latency_ms:min'],
              'trial': {'target_device_latency_ms': TARGET_MS}}
  with _clocked() as clock, j.open_for_writing():
    j.append({'event': 'search_started', 'settings': settings, 'fingerprint': 'f'})
    for trial_id in MO_TRIALS:
      n = int(trial_id)
      j.append({'event': 'proposed', 'trial_id': trial_id, 'dna': [n % 3, n % 4],
                'nas_params': _params(n % 3, n % 4)})
    for trial_id, (accuracy, latency) in MO_TRIALS.items():
      clock.minutes = int(trial_id)
      j.append({'event': 'started', 'trial_id': trial_id, 'attempt': 1})
      clock.minutes += 0.8
      j.append({'event': 'completed', 'trial_id': trial_id, 'reward': [accuracy, -latency],
                'metrics': _metrics(accuracy, latency, 100)})
      _curves(job_dir, trial_id, [2.0, 1.5, 1.2], {})
  state = journal_lib.replay(j.events())
  outputs.write_all(job_dir, state, DOMAINS)
  return job_dir, state


PROXY_CANDIDATES = (  # name, relative cost, accuracy tau, status
    ('steps10', 0.1, 0.30, 'failed'), ('steps25', 0.25, 0.71, 'succeeded'),
    ('steps50', 0.5, None, 'skipped'))


def proxy_search_job(job_dir) -> str:
  job_dir = str(job_dir)
  os.makedirs(job_dir, exist_ok=True)
  candidates = []
  for name, cost, tau, status in PROXY_CANDIDATES:
    candidates.append({
        'name': name, 'train_steps': int(cost * 400), 'image_size': 32,
        'train_data_fraction': 1.0, 'relative_cost': cost, 'cost_hours': None,
        'status': status, 'reason': 'why ' + name,
        'job_dir': os.path.join(job_dir, 'candidates', name),
        'accuracy_correlation': None if tau is None else {'tau': tau, 'p_value': 0.01,
                                                          'num_valid': 10, 'num_total': 10},
        'latency_correlation': None, 'median_accuracy': None if tau is None else 0.8,
        'over_steps': [] if tau is None else [{'step': 10.0, 'tau': tau / 2},
                                              {'step': cost * 400, 'tau': tau}]})
  state = {'job_dir': job_dir, 'accuracy_metric': 'accuracy',
           'reference': {'train_steps': 400, 'image_size': 32, 'models': 10},
           'targets': {'desired_accuracy_correlation': 0.65}, 'candidates': candidates,
           'chosen': 'steps25', 'finished': True}
  with open(os.path.join(job_dir, 'search_controller_state.json'), 'w') as f:
    json.dump(state, f)
  return job_dir


class _FiguresParser(html.parser.HTMLParser):
  def __init__(self):
    super().__init__()
    self.inside = False
    self.text = ''

  def handle_starttag(self, tag, attrs):
    self.inside = tag == 'script' and dict(attrs).get('id') == 'figures'

  def handle_data(self, data):
    if self.inside:
      self.text += data

  def handle_endtag(self, tag):
    self.inside = False


def figures(report_path) -> dict[str, dict]:
  """{figure id: {data, layout}} as the page embeds them (what plotly.js draws)."""
  parser = _FiguresParser()
  with open(report_path, encoding='utf-8') as f:
    parser.feed(f.read())
  return {fig['id']: fig for fig in json.loads(parser.text)}


def trace(figure: dict, name: str) -> dict:
  matches = [t for t in figure['data']
             if t.get('name') == name or t.get('name', '').startswith(name + ' ')]
  assert len(matches) == 1, [t.get('name') for t in figure['data']]
  return matches[0]
