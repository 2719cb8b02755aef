"""The search's own result files: trials.json / trials.csv, search_progress.png and, for a
multi-objective search, pareto.json / pareto_front.png. Each appears whole (nascli.storage writes
aside and renames, or one gs:// upload): a reader never sees half a table."""

from __future__ import annotations

import csv
import io
import json
import math
import os
from typing import Any, Mapping, Sequence

from nascli import storage
from nascli.search import pareto as pareto_lib
from nascli.search import results
from nascli.search import writers
from nascli.search.journal import COMPLETED
from nascli.search.journal import FAILED_STATUSES
from nascli.search.journal import JobState
from nascli.search.journal import STOPPED
from nascli.search.results import COLUMNS, PARETO_JSON, PARETO_PLOT, PROGRESS_PLOT
from nascli.search.results import TABLE_CSV, TABLE_JSON

def _csv_cell(value: Any) -> Any:
  if value is None:
    return ''
  if isinstance(value, (dict, list)):
    return json.dumps(value, separators=(',', ':'))
  return value


def write_tables(job_dir: str | os.PathLike[str], rows: Sequence[Mapping[str, Any]]) -> None:
  """`trials.json` (a list of rows) and `trials.csv` (nas_params as a JSON string)."""
  job_dir = os.fspath(job_dir)
  writers.remove_leftovers(job_dir, TABLE_JSON, TABLE_CSV)
  text = json.dumps([dict(r) for r in rows], indent=2, allow_nan=False) + '\n'
  writers.atomic_write(storage.join(job_dir, TABLE_JSON), text.encode('utf-8'), 'application/json')
  buffer = io.StringIO()
  columns = tuple(rows[0]) if rows else COLUMNS  # with PARETO_COLUMNS in a multi-objective job
  writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator='\n')
  writer.writeheader()
  for row in rows:
    writer.writerow({key: _csv_cell(row.get(key)) for key in columns})
  writers.atomic_write(storage.join(job_dir, TABLE_CSV), buffer.getvalue().encode('utf-8'),
                'text/csv; charset=utf-8')


def _trial_numbers(rows: Sequence[Mapping[str, Any]]) -> list[int]:
  """x positions: the integer trial ids, or 1, 2, ... when some id is not an integer."""
  ids = [str(r['trial_id']) for r in rows]
  if all(t.isdigit() for t in ids):
    return [int(t) for t in ids]
  return list(range(1, len(ids) + 1))


def write_progress_plot(job_dir: str | os.PathLike[str],
                        rows: Sequence[Mapping[str, Any]]) -> None:
  """`search_progress.png`: each completed trial's reward, the best so far, failed trials, and
  trials stopped early at their last rung's reward (hollow, not in the best so far)."""
  job_dir = os.fspath(job_dir)
  writers.remove_leftovers(job_dir, PROGRESS_PLOT)
  fig = progress_figure(results.plain_job_dir(job_dir).rsplit('/', 1)[-1], rows)
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png')
  writers.atomic_write(storage.join(job_dir, PROGRESS_PLOT), buffer.getvalue(), 'image/png')


def progress_figure(name: str, rows: Sequence[Mapping[str, Any]]) -> Any:
  """The matplotlib Figure of write_progress_plot, for the job named `name`."""
  # pylint: disable=g-import-not-at-top
  # Figure + the Agg canvas directly, not pyplot: no global backend switch, no GUI, no state
  # shared with whoever else in the process plots.
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  from matplotlib.ticker import MaxNLocator
  xs = _trial_numbers(rows)
  done = [(x, r['reward']) for x, r in zip(xs, rows)
          if r['status'] == COMPLETED and r.get('reward') is not None]
  failed = [x for x, r in zip(xs, rows) if r['status'] in FAILED_STATUSES]
  stopped = [(x, r['reward']) for x, r in zip(xs, rows)
             if r['status'] == STOPPED and r.get('reward') is not None]

  fig = Figure(figsize=(8, 4.5), dpi=100)
  FigureCanvasAgg(fig)
  ax = fig.add_subplot()
  if done:
    dx, dy = zip(*done)
    ax.scatter(dx, dy, s=22, color='tab:blue', zorder=3, label='reward')
    best, step_x, step_y = -math.inf, [], []
    for x, y in done:
      best = max(best, y)
      step_x.append(x)
      step_y.append(best)
    last = max([x for x, _ in done + stopped] + failed)
    if last > step_x[-1]:  # Carry the best on to the latest finished trial.
      step_x.append(last)
      step_y.append(step_y[-1])
    ax.step(step_x, step_y, where='post', color='tab:orange', label='best so far')
    top = max(done, key=lambda d: d[1])
    top_id = rows[xs.index(top[0])]['trial_id']
    title = f'{name}: best reward {top[1]:.4g} (trial {top_id})'
  else:
    ax.text(0.5, 0.5, 'no completed trial yet', transform=ax.transAxes, ha='center',
            va='center', color='gray')
    title = f'{name}: no completed trial yet'
  if stopped:
    sx, sy = zip(*stopped)
    ax.scatter(sx, sy, s=22, facecolors='none', edgecolors='tab:gray', zorder=3,
               label=f'stopped early ({len(stopped)}): last rung')
  if failed:
    # Failed trials have no reward: mark them along the bottom edge at their trial number.
    ax.scatter(failed, [0.03] * len(failed), transform=ax.get_xaxis_transform(), marker='x',
               color='tab:red', zorder=3, clip_on=False, label=f'failed ({len(failed)})')
  counts = f'{len(done)} completed' + (f', {len(stopped)} stopped' if stopped else '')
  ax.set_title(f'{title}, {counts}, {len(failed)} failed', fontsize=10)
  ax.set_xlabel('trial')
  ax.set_ylabel('reward')
  ax.xaxis.set_major_locator(MaxNLocator(integer=True))
  ax.grid(alpha=0.3)
  if done or failed or stopped:
    # Outside the axes, on the right: inside, wherever it went, some search's points (the last
    # trial's, at the right end, with 'lower right') would be under it.
    ax.legend(loc='upper left', bbox_to_anchor=(1.01, 1), borderaxespad=0, fontsize=8)
  fig.tight_layout()
  return fig


def write_pareto(job_dir: str | os.PathLike[str], state: JobState,
                 rows: Sequence[Mapping[str, Any]]) -> pareto_lib.Front | None:
  """`pareto.json` and `pareto_front.png` of a multi-objective search; None (nothing written)
  for a search of the scalar reward."""
  objectives = results.objectives_of(state)
  if not objectives:
    return None
  job_dir = os.fspath(job_dir)
  writers.remove_leftovers(job_dir, PARETO_JSON, PARETO_PLOT)
  front = pareto_lib.front_of(rows, objectives, state.completion_order)
  text = json.dumps(front.summary(), indent=2, allow_nan=False) + '\n'
  writers.atomic_write(storage.join(job_dir, PARETO_JSON), text.encode('utf-8'), 'application/json')
  target = results.number(((state.settings or {}).get('trial') or {}).get('target_device_latency_ms'))
  png = pareto_lib.plot_png(rows, front, results.plain_job_dir(job_dir).rsplit('/', 1)[-1], target)
  writers.atomic_write(storage.join(job_dir, PARETO_PLOT), png, 'image/png')
  return front



@writers.register('tables')
class TablesWriter(writers.Writer):
  """trials.json and trials.csv."""

  def write(self, snapshot: writers.Snapshot) -> None:
    write_tables(snapshot.job_dir, snapshot.rows)


@writers.register('progress_plot')
class ProgressPlotWriter(writers.Writer):
  """search_progress.png."""

  slow = True  # matplotlib: its first import alone held the next trial for seconds

  def write(self, snapshot: writers.Snapshot) -> None:
    write_progress_plot(snapshot.job_dir, snapshot.rows)


@writers.register('pareto')
class ParetoWriter(writers.Writer):
  """pareto.json and pareto_front.png of a multi-objective search."""

  slow = True  # matplotlib

  def write(self, snapshot: writers.Snapshot) -> None:
    write_pareto(snapshot.job_dir, snapshot.state, snapshot.rows)
