"""The page of a search job: progress, trade-off and front, learning curves, importance, table.

Built from what `nascli list_trials` reads (the journal's JobState and `results.trial_rows`)
plus each trial's own curve files (tf_vision.train_lib writes `train_metrics.jsonl`, the
training loss every log interval, and `validation_curve.jsonl`, each evaluation), read without
TensorFlow so that the search can refresh the page after every trial.
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any, Mapping, Sequence

from nascli import storage
from nascli.report import importance as importance_lib
from nascli.report.page import Cell, Column, Page, finite
from nascli.search import pareto as pareto_lib
from nascli.search import hparams
from nascli.search import results
from nascli.search import summary
from nascli.search.job_state import COMPLETED, FAILED_STATUSES, FINAL_STATUSES, STOPPED
from nascli.search.job_state import JobState
from nascli.search.results import OVER_TARGET

# A proposal predicted over the latency target and not trained (issue 46): how it is drawn.
NOT_TRAINED = 'not trained: predicted over the target'
_OVER_MARKER = {'color': 'rgba(0,0,0,0)', 'symbol': 'triangle-right', 'size': 10,
                'line': {'color': '#c45a00', 'width': 1.5}}

TRAIN_METRICS = 'train_metrics.jsonl'  # tf_vision.train_lib.METRICS_FILE
VALIDATION_CURVE = 'validation_curve.jsonl'  # tf_vision.train_lib.CURVE_FILE
_BLUE, _ORANGE, _GRAY, _RED, _GREEN = '#1f77b4', '#ff7f0e', '#7f7f7f', '#d62728', '#2ca02c'


def _layout(title: str, x: str, y: str, **extra: Any) -> dict[str, Any]:
  return {'title': {'text': title, 'font': {'size': 14}}, 'xaxis': {'title': {'text': x}},
          'yaxis': {'title': {'text': y}}, 'margin': {'l': 60, 'r': 20, 't': 50, 'b': 50},
          'hovermode': 'closest', 'legend': {'orientation': 'h', 'y': -0.2}, **extra}


def _fmt(value: Any, digits: int = 4) -> str:
  number = finite(value)
  if number is None:
    return '-' if value is None else str(value)
  if number == int(number) and abs(number) >= 1000:
    return f'{int(number):,}'
  return f'{number:.{digits}g}'


def decisions(row: Mapping[str, Any]) -> list[str]:
  """`key=value` per decision, the candidates' literals as HParams shows them."""
  return [f'{k}={hparams.hparam_value(v)}' for k, v in (row.get('nas_params') or {}).items()]


def architecture(row: Mapping[str, Any]) -> str:
  return ', '.join(decisions(row))


def _hover(row: Mapping[str, Any], metric: str) -> str:
  skipped = row['status'] == OVER_TARGET
  lines = [f'trial {row["trial_id"]} ({NOT_TRAINED if skipped else row["status"]})']
  for key, label in (('reward', 'penalty reward' if skipped else 'reward'), ('accuracy', metric),
                     ('latency_ms', 'latency ms'), ('step', 'step')):
    if row.get(key) is not None:
      lines.append(f'{label} {_fmt(row[key])}')
      if key == 'latency_ms':  # what that latency is: predicted or measured, where
        lines[-1] += ' (noisy)' if results.is_noisy(row) else ''
        lines.append(str(row.get('latency_source') or results.latency_label(None)))
  arch = decisions(row)
  # A few decisions per line: hover boxes wider than the plot are cut off.
  lines += [', '.join(arch[i:i + 4]) for i in range(0, len(arch), 4)]
  return '<br>'.join(lines)


def _trial_x(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
  ids = [str(r['trial_id']) for r in rows]
  if all(t.isdigit() for t in ids):
    return {t: int(t) for t in ids}
  return {t: n for n, t in enumerate(ids, 1)}


def _minutes(state: JobState) -> dict[str, float]:
  """Each finished trial's end, in minutes since the search started (its first
  search_started event; a resumed search keeps that origin)."""
  def parse(text: Any) -> datetime.datetime | None:
    try:
      return datetime.datetime.fromisoformat(str(text).replace('Z', '+00:00'))
    except ValueError:
      return None
  starts = [t for t in (parse(v) for v in [state.started, *state.started_time.values()])
            if t is not None]
  if not starts:
    return {}
  origin = min(starts)
  out = {}
  for trial_id, text in state.finished_time.items():
    end = parse(text)
    if end is not None:
      out[trial_id] = round((end - origin).total_seconds() / 60, 3)
  return out


def _best_so_far(points: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
  xs, ys, best = [], [], -math.inf
  for x, y in sorted(points):
    if y > best:
      best = y
      xs.append(x)
      ys.append(y)
  return xs, ys


def progress_figures(state: JobState, rows: Sequence[Mapping[str, Any]], metric: str
                     ) -> list[dict[str, Any]]:
  """Best reward over trials and over time; each completed trial a point, stopped trials hollow
  at their last rung, failed trials crosses along the bottom."""
  xs = _trial_x(rows)
  minutes = _minutes(state)
  done = [r for r in rows if r['status'] == COMPLETED and r.get('reward') is not None]
  stopped = [r for r in rows if r['status'] == STOPPED and r.get('reward') is not None]
  failed = [r for r in rows if r['status'] in FAILED_STATUSES]
  skipped = [r for r in rows if r['status'] == OVER_TARGET]
  low = min((r['reward'] for r in done + stopped), default=0.0)
  figures = []
  for fig_id, title, axis, where in (
      ('progress-trials', 'Reward by trial', 'trial', lambda r: xs[str(r['trial_id'])]),
      ('progress-time', 'Best reward over time', 'minutes since the search started',
       lambda r: minutes.get(str(r['trial_id'])))):
    placed = [(r, where(r)) for r in done if where(r) is not None]
    data = [{'type': 'scatter', 'mode': 'markers', 'name': 'completed',
             'x': [x for _, x in placed], 'y': [r['reward'] for r, _ in placed],
             'text': [_hover(r, metric) for r, _ in placed], 'hoverinfo': 'text',
             'customdata': [str(r['trial_id']) for r, _ in placed],
             'marker': {'color': _BLUE, 'size': 9}}]
    line_x, line_y = _best_so_far([(x, r['reward']) for r, x in placed])
    if line_x:
      last = max([x for _, x in placed] + [v for v in (where(r) for r in stopped + failed
                                                       + skipped) if v is not None])
      data.append({'type': 'scatter', 'mode': 'lines', 'name': 'best so far',
                   'x': line_x + [last], 'y': line_y + [line_y[-1]], 'hoverinfo': 'skip',
                   'line': {'shape': 'hv', 'color': _ORANGE}})
    placed_stop = [(r, where(r)) for r in stopped if where(r) is not None]
    if placed_stop:
      data.append({'type': 'scatter', 'mode': 'markers', 'name': 'stopped early (last rung)',
                   'x': [x for _, x in placed_stop], 'y': [r['reward'] for r, _ in placed_stop],
                   'text': [_hover(r, metric) for r, _ in placed_stop], 'hoverinfo': 'text',
                   'customdata': [str(r['trial_id']) for r, _ in placed_stop],
                   'marker': {'color': 'rgba(0,0,0,0)', 'size': 9,
                              'line': {'color': _GRAY, 'width': 1.5}}})
    placed_fail = [(r, where(r)) for r in failed if where(r) is not None]
    if placed_fail:
      data.append({'type': 'scatter', 'mode': 'markers', 'name': 'failed',
                   'x': [x for _, x in placed_fail], 'y': [low] * len(placed_fail),
                   'text': [f'trial {r["trial_id"]} {r["status"]}' for r, _ in placed_fail],
                   'hoverinfo': 'text', 'customdata': [str(r['trial_id']) for r, _ in placed_fail],
                   'marker': {'color': _RED, 'symbol': 'x', 'size': 9}})
    placed_skip = [(r, where(r)) for r in skipped if where(r) is not None]
    if placed_skip:  # their penalty is no result: along the bottom, as failed trials are
      data.append({'type': 'scatter', 'mode': 'markers', 'name': NOT_TRAINED,
                   'x': [x for _, x in placed_skip], 'y': [low] * len(placed_skip),
                   'text': [_hover(r, metric) for r, _ in placed_skip], 'hoverinfo': 'text',
                   'customdata': [str(r['trial_id']) for r, _ in placed_skip],
                   'marker': _OVER_MARKER})
    figures.append({'id': fig_id, 'data': data,
                    'layout': _layout(title, axis, 'reward')})
  return figures


def _front_ids(rows: Sequence[Mapping[str, Any]], objectives: Sequence[pareto_lib.Objective],
               ) -> set[str]:
  done = [r for r in rows if r['status'] == COMPLETED]
  points = [(str(r['trial_id']), pareto_lib.signed_values(objectives, r)) for r in done]
  points = [(t, p) for t, p in points if p is not None]
  flags = pareto_lib.non_dominated([p for _, p in points])
  return {t for (t, _), on in zip(points, flags) if on}


def tradeoff_figures(state: JobState, rows: Sequence[Mapping[str, Any]], metric: str
                     ) -> list[dict[str, Any]]:
  """Each objective (the reward of a one-objective search) against latency, the front of the
  two highlighted and joined, the latency target as a dashed line."""
  objectives = results.objectives_of(state)
  if objectives:
    others = [o for o in objectives if o.metric != 'latency_ms']
    x_objective = next((o for o in objectives if o.metric == 'latency_ms'), None)
    if x_objective is None:  # two objectives without latency: the second on the x axis
      x_objective, others = objectives[1], [objectives[0]]
    pairs = [(o.metric, o, x_objective) for o in others]
  else:
    pairs = [('reward', pareto_lib.Objective('reward', 'max'),
              pareto_lib.Objective('latency_ms', 'min'))]
  target = summary.target_of(state)
  figures = []
  for n, (y_key, y_obj, x_obj) in enumerate(pairs):
    done = [r for r in rows if r['status'] == COMPLETED and finite(r.get(y_key)) is not None
            and finite(r.get(x_obj.metric)) is not None]
    # Not trained: at their predicted latency, along the bottom (a penalty is no result).
    skipped = ([r for r in rows if r['status'] == OVER_TARGET
                and finite(r.get('latency_ms')) is not None]
               if x_obj.metric == 'latency_ms' else [])
    if not done and not skipped:
      continue
    front = _front_ids(done, (y_obj, x_obj))
    on = sorted((r for r in done if str(r['trial_id']) in front),
                key=lambda r: r[x_obj.metric])
    label = metric if y_key == 'accuracy' else y_key
    data = [{'type': 'scatter', 'mode': 'markers', 'name': 'trials',
             'x': [r[x_obj.metric] for r in done], 'y': [r[y_key] for r in done],
             'text': [_hover(r, metric) for r in done], 'hoverinfo': 'text',
             'customdata': [str(r['trial_id']) for r in done],
             'marker': {'color': _BLUE, 'size': 9, 'opacity': 0.6}},
            {'type': 'scatter', 'mode': 'lines+markers', 'name': f'Pareto front ({len(on)})',
             'x': [r[x_obj.metric] for r in on], 'y': [r[y_key] for r in on],
             'text': [_hover(r, metric) for r in on], 'hoverinfo': 'text',
             'customdata': [str(r['trial_id']) for r in on],
             'line': {'shape': 'hv' if x_obj.direction == 'min' else 'linear', 'color': _ORANGE},
             'marker': {'color': _ORANGE, 'size': 11, 'symbol': 'diamond'}}]
    if skipped:
      low = min((r[y_key] for r in done), default=finite(skipped[0].get(y_key)) or 0.0)
      data.append({'type': 'scatter', 'mode': 'markers', 'name': f'{NOT_TRAINED} ({len(skipped)})',
                   'x': [r['latency_ms'] for r in skipped], 'y': [low] * len(skipped),
                   'text': [_hover(r, metric) for r in skipped], 'hoverinfo': 'text',
                   'customdata': [str(r['trial_id']) for r in skipped], 'marker': _OVER_MARKER})
    x_title = (latency_axis(state, done + skipped) if x_obj.metric == 'latency_ms'
               else x_obj.metric)
    layout = _layout(f'{label} against {x_obj.metric}', x_title, label)
    if target is not None and x_obj.metric == 'latency_ms':
      layout['shapes'] = [{'type': 'line', 'xref': 'x', 'yref': 'paper', 'x0': target,
                           'x1': target, 'y0': 0, 'y1': 1,
                           'line': {'color': _RED, 'dash': 'dash', 'width': 1.5}}]
      layout['annotations'] = [{'x': target, 'y': 1, 'xref': 'x', 'yref': 'paper',
                                'text': f'target {target:g} ms', 'showarrow': False,
                                'yanchor': 'bottom', 'font': {'color': _RED, 'size': 11}}]
    figures.append({'id': f'tradeoff-{n}' if n else 'tradeoff', 'data': data,
                    'layout': layout})
  return figures


def latency_axis(state: JobState, rows: Sequence[Mapping[str, Any]]) -> str:
  """The latency axis's title: what the latency is (`latency ms: predicted by latency model
  lm.json (cpu-tflite, 1 thread, 32x32)`), or that the points differ (hover says each)."""
  labels = {results.latency_label(r.get(results.LATENCY_DEVICE_COLUMN), state, short=True)
            for r in rows if r.get('latency_ms') is not None}
  if len(labels) == 1:
    return f'latency ms: {labels.pop()}'
  if not labels:
    return 'latency ms'
  return f'latency ms ({len(labels)} sources: hover a point for its own)'


def _jsonl(path: str) -> list[dict[str, Any]]:
  try:
    text = storage.read_text(path)
  except Exception:  # pylint: disable=broad-except
    return []  # no file yet (a trial that has not logged), or unreadable: no curve
  out = []
  for line in text.splitlines():
    try:
      item = json.loads(line)
    except ValueError:
      continue  # a line cut by a kill
    if isinstance(item, dict) and isinstance(item.get('step'), int):
      out.append(item)
  return out


def trial_curves(job_dir: str, trial_id: str, metric: str) -> dict[str, list]:
  """{'loss': [(step, loss)], 'validation': [(step, metric)]} of one trial's files."""
  trial_dir = storage.join(job_dir, trial_id)
  loss = [(i['step'], finite(i.get('loss'))) for i in _jsonl(storage.join(trial_dir,
                                                                          TRAIN_METRICS))]
  validation = {i['step']: finite(i.get(metric))
                for i in _jsonl(storage.join(trial_dir, VALIDATION_CURVE))}
  return {'loss': [(s, v) for s, v in loss if v is not None],
          'validation': sorted((s, v) for s, v in validation.items() if v is not None)}


def curve_figures(job_dir: str, state: JobState, rows: Sequence[Mapping[str, Any]],
                  metric: str, cache: dict[str, dict[str, list]]) -> list[dict[str, Any]]:
  """The validation metric along training (evaluations and rung reports; a stopped trial
  dashed, its stop a cross; a promotion a circle) and the training loss, one line per trial."""
  validation, loss = [], []
  for row in rows:
    trial_id = str(row['trial_id'])
    curves = cache.get(trial_id)
    if curves is None:
      curves = trial_curves(job_dir, trial_id, metric)
      if row['status'] in FINAL_STATUSES:
        cache[trial_id] = curves  # a finished trial's files no longer change
    points = dict(curves['validation'])
    rungs = state.rungs.get(trial_id, [])
    for report in rungs:
      value = finite((report.get('metrics') or {}).get('accuracy'))
      if value is not None and isinstance(report.get('step'), int):
        points[report['step']] = value
    if row['status'] == COMPLETED and finite(row.get('accuracy')) is not None:
      step = row.get('step') or (state.metrics.get(trial_id) or {}).get('step')
      if isinstance(step, int):
        points[step] = row['accuracy']
    stopped = row['status'] == STOPPED
    style = {'dash': 'dot', 'color': _GRAY} if stopped else {}
    name = f'trial {trial_id}' + (' (stopped)' if stopped else '')
    verdicts = {}  # step -> (rung, what the scheduler decided there)
    for n, report in enumerate(rungs):
      if isinstance(report.get('step'), int):
        last = n == len(rungs) - 1
        verdicts[report['step']] = (n, 'stopped here' if stopped and last else
                                    'awaiting decision' if last and row['status']
                                    not in FINAL_STATUSES else 'promoted')
    if points:
      steps = sorted(points)
      text = [f'trial {trial_id}, step {s}: {metric} {_fmt(points[s])}' for s in steps]
      # A rung's point says its decision whichever trace the hover picks there.
      text = [t + (f' (rung {verdicts[s][0]}: {verdicts[s][1]})' if s in verdicts else '')
              for s, t in zip(steps, text)]
      validation.append({
          'type': 'scatter', 'mode': 'lines+markers', 'name': name, 'legendgroup': trial_id,
          'x': steps, 'y': [points[s] for s in steps], 'text': text,
          'hoverinfo': 'text', 'customdata': [trial_id] * len(steps), 'line': style,
          'marker': {'size': 5}})
      for step, (n, verdict) in verdicts.items():
        if step not in points:
          continue
        symbol = 'x' if verdict == 'stopped here' else 'circle-open'
        validation.append({
            'type': 'scatter', 'mode': 'markers', 'showlegend': False, 'legendgroup': trial_id,
            'x': [step], 'y': [points[step]], 'hoverinfo': 'text',
            'text': [f'trial {trial_id}, step {step}: {metric} {_fmt(points[step])}'
                     f' (rung {n}: {verdict})'],
            'customdata': [trial_id],
            'marker': {'symbol': symbol, 'size': 12,
                       'color': _RED if symbol == 'x' else _GREEN}})
    if curves['loss']:
      loss.append({'type': 'scatter', 'mode': 'lines', 'name': name, 'legendgroup': trial_id,
                   'x': [s for s, _ in curves['loss']], 'y': [v for _, v in curves['loss']],
                   'text': [f'trial {trial_id}, step {s}: loss {_fmt(v)}'
                            for s, v in curves['loss']],
                   'hoverinfo': 'text', 'customdata': [trial_id] * len(curves['loss']),
                   'line': style})
  figures = []
  if validation:
    figures.append({'id': 'curves', 'data': validation,
                    'layout': _layout(f'Validation {metric} along training', 'step', metric)})
  if loss:
    figures.append({'id': 'loss', 'data': loss,
                    'layout': _layout('Training loss', 'step', 'loss')})
  return figures


def importance_figures(state: JobState, rows: Sequence[Mapping[str, Any]],
                       cache: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], str]:
  """fANOVA importance of each decision for the reward (each objective of a multi-objective
  search), and a note saying what it was computed from or why there is none.

  With a `cache` (a running search's), it is computed again only once the completed trials
  have grown by a tenth since the last time: fANOVA is most of a refresh's cost (2 s at 400
  trials, bench/bench_report.py) and a few more trials barely move it.
  """
  done = [r for r in rows if r['status'] == COMPLETED and r.get('reward') is not None]
  if cache is not None:
    last = cache.get('count', 0)
    if 'figures' in cache and len(done) < max(last + 1, math.ceil(last * 1.1)):
      return cache['figures'], cache['note']
    figures, note = importance_figures(state, rows)
    cache.update(count=len(done), figures=figures, note=note)
    return figures, note
  objectives = results.objectives_of(state)
  targets = ([(str(o), [state.reward_vectors.get(str(r['trial_id']), (None,) * len(objectives))[k]
                        for r in done]) for k, o in enumerate(objectives)]
             if objectives else [('reward', [r['reward'] for r in done])])
  computed = []
  for name, values in targets:
    pairs = [(r['nas_params'], v) for r, v in zip(done, values) if finite(v) is not None]
    scores = importance_lib.importances([p for p, _ in pairs], [v for _, v in pairs])
    if scores:
      computed.append((name, scores))
  # The decisions that matter most to any objective, the largest at the top of the chart.
  ranked = sorted({k for _, scores in computed for k in scores},
                  key=lambda k: -max(scores.get(k, 0.0) for _, scores in computed))
  keys = list(reversed(ranked[:_SHOWN_IMPORTANCES]))
  data = [{'type': 'bar', 'orientation': 'h', 'name': name,
           'x': [scores.get(k, 0.0) for k in keys], 'y': keys,
           'hovertext': [f'{k}: {scores.get(k, 0.0):.3f} of {name}' for k in keys],
           'hoverinfo': 'text'} for name, scores in computed]
  if not data:
    return [], (f'Decision importance needs at least {importance_lib.MIN_TRIALS} completed'
                f' trials whose decisions differ ({len(done)} completed so far).')
  shown = (f'the {len(keys)} of {len(ranked)} decisions that matter most'
           if len(ranked) > len(keys) else 'every decision')
  layout = _layout(f'Decision importance (fANOVA): {shown}', 'share of the variance explained',
                   '', barmode='group', height=max(320, 18 * len(keys) * len(data) + 140))
  layout['margin'] = {'l': 160, 'r': 20, 't': 50, 'b': 50}
  return [{'id': 'importance', 'data': data, 'layout': layout}], (
      f'Optuna\'s fANOVA over {len(done)} completed trials ({importance_lib.N_TREES} trees,'
      ' seeded): the share of the variance of the reward that each decision explains. With'
      ' few trials it is a hint, not a finding.')


def _architecture_cell(row: Mapping[str, Any]) -> Cell:
  """All decisions, folded behind the first few when there are many (mnasnet has 49)."""
  parts = decisions(row)
  text = ', '.join(parts)
  if len(parts) <= _SHOWN_DECISIONS:
    return Cell(text, text)
  head = ', '.join(parts[:_SHOWN_DECISIONS])
  return Cell(f'{head}, ... ({len(parts)} decisions)', text, details=text)


_SHOWN_DECISIONS = 3


_SHOWN_IMPORTANCES = 15  # bars; mnasnet has 49 decisions


def _link(job_dir: str, trial_id: str) -> str:
  """Where a trial's folder opens from the page: relative on disk (the page sits in the job
  dir, so a copied folder keeps working), the Cloud console for gs://."""
  if storage.is_gcs(job_dir):
    return 'https://console.cloud.google.com/storage/browser/' + storage.join(
        job_dir, trial_id)[len('gs://'):]
  return f'{trial_id}/'


def trial_table(page: Page, job_dir: str, rows: Sequence[Mapping[str, Any]], metric: str,
                state: JobState | None = None) -> None:
  """Every trial, best reward first; click a header to sort. The latency header names the
  latency's source when the trials share one, else a column does; a noisy one is marked."""
  latency_header, per_row = summary.latency_header(rows, 'latency ms', state)
  keys = [('trial_id', Column('trial')), ('status', Column('status', numeric=False))]
  if any('step' in r for r in rows):
    keys.append(('step', Column('step')))
  keys.append(('reward', Column('reward')))
  if any('pareto' in r for r in rows):
    keys.append(('pareto', Column('Pareto', numeric=False)))
  keys += [('accuracy', Column(metric)), ('latency_ms', Column(latency_header))]
  if per_row:
    keys.append(('latency_source', Column('latency source', numeric=False)))
  if any(r.get(results.MEASURED_COLUMN) is not None for r in rows):
    keys.append((results.MEASURED_COLUMN, Column('measured ms (exported)')))
  keys += [('flops', Column('FLOPs')), ('params', Column('params')),
           ('seconds', Column('train s')), ('wall_s', Column('wall s')),
           ('nas_params', Column('architecture', numeric=False, css='arch'))]
  table_rows = []
  for row in results.sort_by_reward(rows):
    trial_id = str(row['trial_id'])
    cells = []
    for key, _ in keys:
      value = row.get(key)
      if key == 'trial_id':
        cells.append(Cell(trial_id, int(trial_id) if trial_id.isdigit() else trial_id,
                          href=_link(job_dir, trial_id)))
      elif key == 'status':
        text = f'{value} (not trained)' if value == OVER_TARGET else str(value)
        cells.append(Cell(text, str(value), css=f'status-{value}'))
      elif key == 'latency_ms' and value is not None:
        cells.append(Cell(summary.latency_text(value, row.get(results.LATENCY_DEVICE_COLUMN)),
                          finite(value)))
      elif key == 'latency_source':
        tag = (results.latency_tag(row.get(results.LATENCY_DEVICE_COLUMN), state)
               if row.get('latency_ms') is not None else '')
        cells.append(Cell(tag, tag))
      elif key == 'pareto':
        cells.append(Cell('yes' if value else '-', 'yes' if value else ''))
      elif key == 'nas_params':
        cells.append(_architecture_cell(row))
      else:
        cells.append(Cell(_fmt(value), finite(value)))
    table_rows.append(cells)
  page.table('trials', [c for _, c in keys], table_rows)


def _summary(state: JobState, rows: Sequence[Mapping[str, Any]]) -> str:
  counts: dict[str, int] = {}
  for row in rows:
    counts[row['status']] = counts.get(row['status'], 0) + 1
  text = f'{len(rows)} trials: ' + (', '.join(f'{n} {s}' for s, n in counts.items()) or 'none')
  best = state.best()
  if best is not None:
    text += f'; best reward {_fmt(state.rewards.get(best))} (trial {best})'
  now = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
  return text + f'; written {now}.'


def _target_drawn(figures: Sequence[Mapping[str, Any]]) -> bool:
  return any(f['layout'].get('shapes') for f in figures)


def build(job_dir: str, state: JobState, rows: Sequence[Mapping[str, Any]],
          cache: dict[str, Any] | None = None) -> Page:
  """The whole page of the search job at `job_dir` (rows: `results.trial_rows`); `cache`, kept
  by a running search across refreshes: finished trials' curves, the last importance."""
  metric = next((r['accuracy_metric'] for r in rows if r.get('accuracy_metric')), 'accuracy')
  name = job_dir.rstrip('/').rsplit('/', 1)[-1]
  page = Page(f'nascli search {name}', _summary(state, rows))
  outcome = summary.target_outcome(state, rows=rows)
  if outcome:  # the first thing a latency-constrained search must say
    page.text(outcome[0].upper() + outcome[1:] + '.', css='summary')
  page.heading('Progress', 'Each completed trial\'s reward and the best so far, on the'
               ' validation data the search selects on; hover a point for its trial and'
               ' architecture.')
  page.plots(*progress_figures(state, rows, metric))
  tradeoff = tradeoff_figures(state, rows, metric)
  if tradeoff:
    page.heading('Trade-off against latency', 'The Pareto front: no other completed trial is'
                 ' at least as good on both axes.'
                 + (' The dashed line is the latency target.' if _target_drawn(tradeoff)
                    else '')
                 + (f' Hollow triangles: {NOT_TRAINED}, at their predicted latency along the'
                    ' bottom (their reward is the penalty).'
                    if any(t.get('name', '').startswith(NOT_TRAINED)
                           for f in tradeoff for t in f['data']) else ''))
    page.plots(*tradeoff)
  cache = {} if cache is None else cache
  curves = curve_figures(job_dir, state, rows, metric, cache.setdefault('curves', {}))
  if curves:
    page.heading('Learning curves', 'Per trial. With early stopping, circles are rungs the'
                 ' scheduler promoted, crosses where it stopped a trial (dotted).')
    page.plots(*curves)
  figures, note = importance_figures(state, rows, cache.setdefault('importance', {}))
  page.heading('Which decisions matter', note)
  if figures:
    page.plots(*figures)
  page.heading('Trials', 'Best reward first'
               + ('; then the proposals not trained, predicted over the target'
                  if any(r['status'] == OVER_TARGET for r in rows) else '')
               + '; click a column to sort, a trial to open its folder.')
  trial_table(page, job_dir, rows, metric, state)
  for note in [summary.split_note(metric)] + summary.latency_notes(rows, state):
    page.text(note)
  settings = dict(state.settings or {})
  if state.early_stopping:
    settings['early_stopping_chosen'] = state.early_stopping
  page.heading('Search settings')
  page.preformatted('settings', json.dumps(settings, indent=2, sort_keys=True, default=str))
  return page
