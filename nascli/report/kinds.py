"""The job kinds `nascli report` knows, and the proxy-task commands' sections and pages.

- a `search_proxy_task` job (its search_controller_state.json): each candidate's correlation
  with the reference against its cost, the correlation along training, the candidates' table;
- a search job (journal.jsonl), with a section for what the proxy-task commands added to it:
  `measure_proxy_task_variance`'s variance_and_smoothness.json (each run's score and the
  verdict) and `select_proxy_task_models`' proxy_task_models.json (the models chosen).
"""

from __future__ import annotations

import json
from typing import Any

from nascli import storage
from nascli.errors import NascliError
from nascli.report.page_kinds import page_kind
from nascli.report.page import Cell, Column, Page, finite

PROXY_STATE = 'search_controller_state.json'  # nascli.proxy.proxy_search_main.STATE_FILE
VARIANCE_FILE = 'variance_and_smoothness.json'  # nascli.proxy.variance_main.RESULT_FILE
MODELS_FILE = 'proxy_task_models.json'  # nascli.proxy.model_selection_main.MODELS_FILE


def _json(path: str) -> Any:
  try:
    return json.loads(storage.read_text(path))
  except ValueError as e:
    raise NascliError(f'{path} is not JSON: {e}') from None


def _fmt(value: Any) -> str:
  number = finite(value)
  return ('-' if value is None else str(value)) if number is None else f'{number:.4g}'


# --------------------------------------------------------------------------- search_proxy_task


def _is_proxy_search(job_dir: str) -> bool:
  return storage.exists(storage.join(job_dir, PROXY_STATE))


@page_kind('search_proxy_task', _is_proxy_search)
def proxy_search_page(job_dir: str) -> Page:
  """The candidates of a search_proxy_task job: tau against cost, tau along training."""
  state = _json(storage.join(job_dir, PROXY_STATE))
  candidates = state.get('candidates') or []
  targets = state.get('targets') or {}
  # Plotted: the candidates with a tau (a trained one whose scores all tie has none).
  trained = [c for c in candidates if (c.get('accuracy_correlation') or {}).get('tau')
             is not None]
  chosen = state.get('chosen')
  page = Page(f'nascli search_proxy_task {job_dir.rstrip("/").rsplit("/", 1)[-1]}',
              proxy_verdict(state))
  page.text(proxy_counts(state), css='summary')
  reference = state.get('reference') or {}
  for warning in reference.get('warnings') or []:
    page.text(f'Warning: {warning}.', css='summary')
  page.text(f'Reference: {reference.get("models")} models trained {reference.get("train_steps")}'
            f' steps at image size {reference.get("image_size")}, metric'
            f' {state.get("accuracy_metric")}.')
  hours = bool(trained) and all(c.get('cost_hours') is not None for c in trained)
  desired = finite(targets.get('desired_accuracy_correlation'))

  def cost(c: dict) -> float:
    return c['cost_hours'] * 60 if hours else c['relative_cost']

  data = []
  for key, name, color in (('accuracy_correlation', 'accuracy tau', '#1f77b4'),
                           ('latency_correlation', 'latency tau', '#2ca02c')):
    points = [c for c in trained if (c.get(key) or {}).get('tau') is not None]
    if points:
      data.append({'type': 'scatter', 'mode': 'markers+text', 'name': name, 'cliponaxis': False,
                   'x': [cost(c) for c in points], 'y': [c[key]['tau'] for c in points],
                   'text': [c['name'] for c in points], 'textposition': 'top center',
                   'hovertext': [f'{c["name"]}: {name} {c[key]["tau"]:.3f}'
                                 f' (p {_fmt(c[key].get("p_value"))}), {c["status"]}'
                                 for c in points],
                   'hoverinfo': 'text', 'customdata': [c['name'] for c in points],
                   'marker': {'size': 11, 'color': color,
                              'symbol': ['star' if c['name'] == chosen else 'circle'
                                         for c in points]}})
  figures = []
  if data:
    xs = [x for trace in data for x in trace['x']]
    pad = 0.2 * ((max(xs) - min(xs)) or max(abs(max(xs)), 1e-9))  # room for the labels
    layout = {'title': {'text': 'Correlation with the reference against cost'},
              'xaxis': {'title': {'text': 'cost (minutes, the median model)' if hours
                                  else 'cost (relative to the reference)'},
                        'range': [min(xs) - pad, max(xs) + pad]},
              'margin': {'t': 60, 'r': 40},
              'yaxis': {'title': {'text': "Kendall's tau"}}, 'hovermode': 'closest'}
    if desired is not None:
      layout['shapes'] = [{'type': 'line', 'xref': 'paper', 'x0': 0, 'x1': 1, 'y0': desired,
                           'y1': desired, 'line': {'color': '#d62728', 'dash': 'dash'}}]
    figures.append({'id': 'proxy-cost', 'data': data, 'layout': layout})
  over = []
  for c in trained:
    points = c.get('over_steps') or []
    if not points:
      continue
    over.append({'type': 'scatter', 'mode': 'lines+markers', 'name': c['name'],
                 'x': [p['step'] for p in points], 'y': [p['tau'] for p in points],
                 'hoverinfo': 'x+y+name'})
    if any(p.get('low') is not None for p in points):
      over.append({'type': 'scatter', 'mode': 'lines', 'name': f'{c["name"]} (interval\'s'
                   ' lower end)', 'x': [p['step'] for p in points],
                   'y': [p.get('low') for p in points], 'line': {'dash': 'dot'},
                   'hoverinfo': 'x+y+name'})
  if over:
    over_layout = {'title': {'text': 'Accuracy tau along training (dotted: the lower end of'
                                     ' its 90% interval)'},
                   'xaxis': {'title': {'text': 'step'}},
                   'yaxis': {'title': {'text': "Kendall's tau"}}, 'hovermode': 'closest'}
    figures.append({'id': 'proxy-over-steps', 'data': over, 'layout': over_layout})
  page.heading('Correlation against cost', 'Each trained candidate\'s Kendall tau with the'
               ' reference models\' ranking (on the validation split; proxies trained with'
               ' other seeds than the reference); the dashed line is'
               ' --desired_accuracy_correlation, which the lower end of tau\'s 90% bootstrap'
               ' interval must reach; the star is the chosen proxy.')
  if figures:
    page.plots(*figures)
  else:
    page.text('No candidate trained yet.')
  columns = [Column('candidate', numeric=False), Column('steps'), Column('image size'),
             Column('data fraction'), Column('relative cost'), Column('cost h'),
             Column('accuracy tau'), Column('90% interval', numeric=False), Column('p'),
             Column('latency tau'),
             Column('median accuracy'), Column('status', numeric=False),
             Column('reason', numeric=False), Column('job', numeric=False)]
  rows = []
  for c in candidates:
    acc, lat = c.get('accuracy_correlation') or {}, c.get('latency_correlation') or {}
    link = (storage.join(c['job_dir'], 'report.html') if storage.is_gcs(job_dir)
            else f'candidates/{c["name"]}/report.html')
    numbers = (c.get('train_steps'), c.get('image_size'), c.get('train_data_fraction'),
               c.get('relative_cost'), c.get('cost_hours'), acc.get('tau'))
    interval = acc.get('interval')
    shown = f'{_fmt(interval[0])} to {_fmt(interval[1])}' if interval else '-'
    rows.append([Cell(c['name'], c['name'])] + [Cell(_fmt(v), finite(v)) for v in numbers] + [
        Cell(shown, shown)] + [Cell(_fmt(v), finite(v)) for v in (
            acc.get('p_value'), lat.get('tau'), c.get('median_accuracy'))] + [
        Cell(c.get('status', ''), c.get('status', '')),
        Cell(c.get('reason') or '', c.get('reason') or ''),
        Cell('report' if c.get('status') not in (None, 'skipped') else '-', '',
             href=link if c.get('status') not in (None, 'skipped') else None)])
  page.heading('Candidates', 'Cheapest first, as they were tried.')
  page.table('trials', columns, rows)
  page.heading('Targets and result')
  page.preformatted('settings', json.dumps({k: v for k, v in state.items() if k != 'candidates'},
                                           indent=2, sort_keys=True, default=str))
  return page


def _tau_text(correlation: dict | None) -> str:
  correlation = correlation or {}
  tau = finite(correlation.get('tau'))
  if tau is None:
    return 'no tau'
  interval = correlation.get('interval')
  if interval and finite(interval[0]) is not None and finite(interval[1]) is not None:
    return (f'tau {tau:.3f} ({correlation.get("level", 0.9):.0%} interval'
            f' {interval[0]:.3f} to {interval[1]:.3f})')
  return f'tau {tau:.3f}'


def proxy_verdict(state: dict) -> str:
  """The page's first line: the chosen proxy and why, or that there is none (yet)."""
  candidates = state.get('candidates') or []
  chosen = next((c for c in candidates if c.get('name') == state.get('chosen')), None)
  desired = (state.get('targets') or {}).get('desired_accuracy_correlation')
  target = '' if desired is None else f' against --desired_accuracy_correlation {desired:g}'
  running = '' if state.get('finished') else ' (still running)'
  if chosen is not None:
    return (f'Chosen proxy{running}: {chosen["name"]} ({chosen.get("train_steps")} steps, image'
            f' size {chosen.get("image_size")}, training data fraction'
            f' {chosen.get("train_data_fraction")}): accuracy'
            f' {_tau_text(chosen.get("accuracy_correlation"))}{target}.')
  trained = [c for c in candidates if c.get('status') in ('succeeded', 'failed')]
  if not state.get('finished'):
    return f'No proxy chosen yet (still running): {len(trained)} candidate(s) trained so far.'
  best = max((c for c in trained if finite((c.get('accuracy_correlation') or {}).get('tau'))
              is not None), key=lambda c: c['accuracy_correlation']['tau'], default=None)
  return ('No proxy: no candidate met the targets' + (
      f'; the best, {best["name"]}, has accuracy {_tau_text(best["accuracy_correlation"])}'
      f'{target}' if best else '') + '.')


def proxy_counts(state: dict) -> str:
  """How many candidates were tried, by what became of them."""
  candidates = state.get('candidates') or []
  counts: dict[str, int] = {}
  for c in candidates:
    counts[c.get('status', '?')] = counts.get(c.get('status', '?'), 0) + 1
  trained = counts.get('succeeded', 0) + counts.get('failed', 0)
  parts = [f'{trained} trained ({counts.get("succeeded", 0)} succeeded,'
           f' {counts.get("failed", 0)} failed)', f'{counts.get("skipped", 0)} skipped untrained']
  left_out = state.get('left_out') or []
  text = f'{len(candidates)} candidate(s): ' + ', '.join(parts)
  if left_out:
    text += (f'; left out as the reference training itself: {", ".join(left_out)}')
  return text + '.'


# --------------------------------------------------------------------------- variance jobs


def is_variance(job_dir: str) -> bool:
  return storage.exists(storage.join(job_dir, VARIANCE_FILE))


def variance_verdict(result: dict) -> str:
  """The variance page's first line: whether the architectures differ by more than this
  noise (with --compare_with), then Vertex's two numbers with their verdicts."""
  runs = result.get('runs') or []

  def good(flag: Any) -> str:
    return 'n/a' if flag is None else ('good' if flag else 'NOT good')

  numbers = (f'{len(runs)} runs of one architecture: coefficient of variation'
             f' {_fmt(result.get("variance"))} ({good(result.get("variance_good"))}, <='
             f' {_fmt(result.get("max_variance_to_be_good"))}), smoothness'
             f' {_fmt(result.get("smoothness"))} ({good(result.get("smoothness_good"))}, <='
             f' {_fmt(result.get("max_smoothness_to_be_good"))}).')
  verdict = result.get('verdict') or {}
  message = verdict.get('message')
  if not message:
    return numbers
  where = (f' ({verdict.get("compared_with")}, {verdict.get("architectures")} architectures)'
           if verdict.get('compared_with') else '')
  return f'{message[0].upper()}{message[1:]}{where}. {numbers}'


@page_kind('measure_proxy_task_variance', is_variance)
def variance_job_page(job_dir: str, state: Any = None, rows: Any = None,
                      cache: dict[str, Any] | None = None) -> Page:
  """A measure_proxy_task_variance job: its verdict first, each run's score and curve, the
  runs' table; none of a search's reward, Pareto or latency-target views (one architecture)."""
  # pylint: disable=g-import-not-at-top
  from nascli.report import search_page
  from nascli.search import journal as journal_lib
  from nascli.search import results
  if state is None:
    state = journal_lib.replay(journal_lib.journal_for(job_dir).events())
  if rows is None:
    rows = results.trial_rows(job_dir, state)
  result = _json(storage.join(job_dir, VARIANCE_FILE))
  name = job_dir.rstrip('/').rsplit('/', 1)[-1]
  page = Page(f'nascli measure_proxy_task_variance {name}', variance_verdict(result))
  _variance_section(page, result)
  metric = result.get('accuracy_metric', 'accuracy')
  cache = {} if cache is None else cache
  curves = search_page.curve_figures(job_dir, state, rows, metric, cache.setdefault('curves', {}))
  if curves:
    page.heading('Learning curves', 'Each run (seed) of the architecture along its training.')
    page.plots(*curves)
  page.heading('Runs', 'One architecture, one row per seed; metrics on the validation split'
               ' (the test split is never read here).')
  search_page.trial_table(page, job_dir, rows, metric, state)
  page.heading('Settings')
  page.preformatted('settings', json.dumps(dict(state.settings or {}), indent=2,
                                           sort_keys=True, default=str))
  return page


# --------------------------------------------------------------------------- search jobs


def _is_search(job_dir: str) -> bool:
  from nascli.search import journal as journal_lib  # pylint: disable=g-import-not-at-top
  return journal_lib.journal_for(job_dir).exists()


@page_kind('search', _is_search)
def search_job_page(job_dir: str) -> Page:
  # pylint: disable=g-import-not-at-top
  from nascli.report import search_page
  from nascli.search import journal as journal_lib
  from nascli.search import results
  state = journal_lib.replay(journal_lib.journal_for(job_dir).events())
  page = search_page.build(job_dir, state, results.trial_rows(job_dir, state))
  add_job_extras(page, job_dir)
  return page


def add_job_extras(page: Page, job_dir: str) -> None:
  """The sections of what the proxy-task commands wrote into a search job, if they did."""
  path = storage.join(job_dir, VARIANCE_FILE)
  if storage.exists(path):
    _variance_section(page, _json(path))
  path = storage.join(job_dir, MODELS_FILE)
  if storage.exists(path):
    _models_section(page, _json(path))


def _variance_section(page: Page, result: dict) -> None:
  runs = result.get('runs') or []
  metric = result.get('accuracy_metric', 'accuracy')
  verdict = (result.get('verdict') or {}).get('message')
  page.heading('Variance and smoothness (measure_proxy_task_variance)',
               f'The same architecture trained {len(runs)} times: coefficient of variation'
               f' {_fmt(result.get("variance"))} (good at <= '
               f'{_fmt(result.get("max_variance_to_be_good"))}), smoothness'
               f' {_fmt(result.get("smoothness"))} (good at <='
               f' {_fmt(result.get("max_smoothness_to_be_good"))}).'
               + (f' {verdict}' if verdict else ''))
  page.plots({'id': 'variance', 'data': [{
      'type': 'bar', 'x': [f'run {r["trial_id"]} (seed {r.get("seed")})' for r in runs],
      'y': [r.get('accuracy') for r in runs], 'hoverinfo': 'x+y', 'name': metric}],
      'layout': {'title': {'text': f'Final {metric} per run (mean'
                                   f' {_fmt(result.get("mean_accuracy"))}, std'
                                   f' {_fmt(result.get("run_to_run_std"))})'},
                 'yaxis': {'title': {'text': metric}}}})


def _models_section(page: Page, selection: dict) -> None:
  models = selection.get('models') or []
  page.heading('Models chosen for the proxy study (select_proxy_task_models)',
               f'{len(models)} models spread over the reference search\'s accuracy (on the'
               ' validation split).')
  for warning in selection.get('warnings') or []:
    page.text(f'Warning: {warning}.', css='summary')
  rows = [[Cell(str(m.get('trial_id')), str(m.get('trial_id'))),
           Cell(_fmt(m.get('accuracy')), finite(m.get('accuracy'))),
           Cell(_fmt(m.get('latency_ms')), finite(m.get('latency_ms')))] for m in models]
  page.table('models', [Column('trial', numeric=False), Column('accuracy'),
                        Column('latency ms')], rows)
