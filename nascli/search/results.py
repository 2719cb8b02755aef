"""What a search produced, derived from its journal: trial tables, a progress plot, HParams.

Everything here is rebuilt from the journal's `JobState` plus each completed trial's
`model_analysis.json`, and every file appears whole (nascli.storage: written aside and renamed,
or one complete gs:// upload), so a reader (`nascli list_trials`, TensorBoard, a spreadsheet)
never sees half a table and a killed search leaves nothing that looks complete but is not. The
job dir may be a local folder or a gs:// URL.

HParams event files are written with TensorBoard's own protos and record writer instead of
`tf.summary`: the search process that hands GPUs to its trials must not load TensorFlow (10 s)
or start a TensorFlow runtime, which would claim the memory of every visible GPU.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import datetime
import io
import json
import logging
import math
import os
import re
import shutil
import socket
import tempfile
import time
from typing import Any, Iterable, Mapping, Sequence

from nascli import latency_source
from nascli import storage
from nascli.errors import InputError
from nascli.errors import NascliError
from nascli.errors import StorageError
from nascli.errors import StorageExistsError
from nascli.errors import StorageNotFoundError
from nascli.search import pareto as pareto_lib
from nascli.search.journal import COMPLETED
from nascli.search.journal import FAILED_STATUSES
from nascli.search.journal import JobState
from nascli.search.journal import MEASURED  # the columns a trial measures
from nascli.search.journal import OVER_TARGET  # predicted over the latency target: not trained
from nascli.search.journal import STOPPED

logger = logging.getLogger(__name__)

# Columns of trials.json items and trials.csv, in this order. `accuracy` is the metric that
# `accuracy_metric` names (top-1 `accuracy` for classification, COCO `AP` for detection);
# `seconds` is the trial's training and final evaluation, `wall_s` its last attempt's wall time
# from process start to end (export, latency and start-up included).
# `latency_source` says what `latency_ms` is (nascli.latency_source.describe: predicted by which
# latency model, or measured by whom, on which runtime, at which input size).
COLUMNS = ('trial_id', 'status', 'reward', 'accuracy', 'accuracy_metric', 'latency_ms',
           'latency_source', 'flops', 'params', 'seconds', 'wall_s', 'nas_params', 'trial_dir')
TABLE_JSON = 'trials.json'
TABLE_CSV = 'trials.csv'
PROGRESS_PLOT = 'search_progress.png'
HPARAMS_DIR = 'hparams'
HPARAM_METRICS = ('reward', 'accuracy', 'latency_ms')
ANALYSIS_NAME = 'model_analysis.json'
# A multi-objective search (--objectives) adds, after `reward` (its first objective, larger
# better): `pareto` (on the front; None unless completed) and `hypervolume` (the front's once
# the trial completed), and writes these two files (nascli/search/pareto.py).
PARETO_COLUMNS = ('pareto', 'hypervolume')
# A search with early stopping (--early_stopping) adds, after `status`: `step`, the training
# step its metrics were measured at (a stopped trial's last rung; train_steps when completed).
EARLY_STOPPING_COLUMNS = ('step',)
# A search on a Ray cluster adds, last: `nodes`, where each attempt of the trial ran, in order
# ({attempt, ended, node_id, host, ip}; JobState.nodes).
NODE_COLUMNS = ('nodes',)
# Trials that name where their latency was measured (journaled since issue 27) add
# `latency_device`: {host, device, target_device_type, source, input_size, num_threads, model,
# noisy} (nascli/latency_source.py); `noisy` is true where the measurement's spread stayed
# large (also when only the trial's model_analysis.json `latency` report says so).
LATENCY_DEVICE_COLUMN = 'latency_device'
# With a latency model: the exported trials' latency measured on its runtime (measured.py).
MEASURED_COLUMN = 'measured_latency_ms'
# Trials with a reward and metrics: completed, or stopped early with its last rung's.
RESULT_STATUSES = (COMPLETED, STOPPED)
PARETO_JSON = 'pareto.json'
PARETO_PLOT = 'pareto_front.png'

_TMP_SUFFIX = '.tmp'
# A nas_params value: "<index>/<num_candidates> (<literal>)", the literal part optional.
_VALUE_RE = re.compile(r'(\d+)/(\d+)(?: \((.*)\))?', re.S)


# --------------------------------------------------------------------------- rows


def trial_rows(job_dir: str | os.PathLike[str], state: JobState) -> list[dict[str, Any]]:
  """One row per proposed trial, in proposal order (the columns of `COLUMNS`).

  The journal decides status and reward; a completed trial's measurements come from its
  `completed` metrics, then from its model_analysis.json. A trial that is not completed gets
  no reward and none of a model_analysis.json left by an attempt the journal never recorded
  (it runs again on resume). `seconds` is the trial's own measurement, else the journal's
  start-to-finish time of its last attempt (so failed trials show how long they ran). `wall_s`
  is the driver's measurement of the last attempt, else the journal's start-to-finish time.
  model_analysis.json is read only when the journal lacks a measurement (one object per trial
  less to fetch from gs://). `accuracy_metric` is what the trial recorded, else its search
  space's metric. A trial the scheduler stopped (`stopped`) has the reward and measurements of
  its last rung, as the journal's `stopped` event holds them.
  """
  job_dir = _job_dir(job_dir)
  space_metric = _space_metric((state.settings or {}).get('search_space'))
  rows = []
  devices: dict[str, dict[str, Any] | None] = {}
  for trial_id, proposal in state.proposals.items():
    status = state.status[trial_id]
    trial_dir = storage.join(job_dir, trial_id)
    completed = status in RESULT_STATUSES
    # Predicted over the target and not trained: the predicted latency and the penalty reward.
    skipped = status == OVER_TARGET
    journaled = state.metrics.get(trial_id, {}) if completed or skipped else {}
    analysis = None
    row: dict[str, Any] = {
        'trial_id': trial_id,
        'status': status,
        'reward': _number(state.rewards.get(trial_id)) if completed or skipped else None,
    }
    for key in MEASURED:
      value = _number(journaled.get(key))
      if value is None and completed:
        if analysis is None:
          analysis = _read_analysis(trial_dir, trial_id)
        value = _number(analysis.get(key))
      row[key] = value
    elapsed = _elapsed(state.started_time.get(trial_id), state.finished_time.get(trial_id))
    if row['seconds'] is None:
      row['seconds'] = elapsed
    row['wall_s'] = _number(journaled.get('wall_s'))
    if row['wall_s'] is None:
      row['wall_s'] = elapsed
    metric = journaled.get('accuracy_metric') or (analysis or {}).get('accuracy_metric')
    row['accuracy_metric'] = metric if isinstance(metric, str) else space_metric
    row['nas_params'] = dict(proposal.nas_params)
    row['trial_dir'] = trial_dir
    devices[trial_id] = _latency_device(journaled, analysis)
    row['latency_source'] = (None if row['latency_ms'] is None else
                             latency_label(devices[trial_id], state))
    rows.append({key: row[key] for key in COLUMNS})
  if has_early_stopping(state):
    rows = [_with_step(row, state) for row in rows]
  objectives = objectives_of(state)
  if objectives:
    rows = _with_front(rows, pareto_lib.front_of(rows, objectives, state.completion_order))
  if state.nodes:
    rows = [{**row, 'nodes': list(state.nodes.get(row['trial_id'], []))} for row in rows]
  if state.measured:  # exported trials timed for real beside their prediction (measured.py)
    rows = [{**row, MEASURED_COLUMN: _number((state.measured.get(row['trial_id']) or {}).get(
        'latency_ms'))} for row in rows]
  if any(devices.values()):  # where each latency was measured (nascli/latency_source.py)
    rows = [{**row, LATENCY_DEVICE_COLUMN: devices[row['trial_id']]} for row in rows]
  return rows


def _latency_device(journaled: Mapping[str, Any],
                    analysis: Mapping[str, Any] | None) -> dict[str, Any] | None:
  """The trial's latency_device as the journal has it, else as a model_analysis.json read
  anyway has it; `noisy` (and `spread`) from the analysis's `latency` report where the device
  lacks them (the file is not fetched for that alone: one object per trial on gs://)."""
  device = journaled.get(LATENCY_DEVICE_COLUMN)
  if not isinstance(device, Mapping) and analysis:
    device = analysis.get(LATENCY_DEVICE_COLUMN)
  if not isinstance(device, Mapping):
    return None
  device = dict(device)
  report = (analysis or {}).get('latency')
  if isinstance(report, Mapping) and report.get('noisy') and 'noisy' not in device:
    device['noisy'] = True
    if _number(report.get('spread')) is not None:
      device.setdefault('spread', report['spread'])
  return device


def latency_label(device: Mapping[str, Any] | None, state: JobState | None = None,
                  short: bool = False) -> str:
  """What a latency is (nascli.latency_source.describe). A trial of a job from before trials
  recorded their latency_device was timed by whom its settings say: in the trial, or by
  run_latency_calculator_local."""
  return latency_source.describe(_known_device(device, state), short=short)


def _known_device(device: Mapping[str, Any] | None, state: JobState | None) -> Mapping[str, Any]:
  if device:
    return device
  trial = ((state.settings if state else None) or {}).get('trial') or {}
  return {'source': 'calculator' if trial.get('latency_calculator') == 'external' else 'trial'}


def latency_tag(device: Mapping[str, Any] | None, state: JobState | None = None) -> str:
  """The few words of a column header or an axis: `predicted, cpu-tflite 32x32`,
  `measured in the trial, cpu 32x32`."""
  device = _known_device(device, state)
  source = str(device.get('source') or '')
  words = {'latency_model': 'predicted', 'trial': 'measured in the trial',
           'calculator': 'measured by the calculator',
           'export': 'measured on the export'}.get(source, 'measured')
  parts = [str(device['target_device_type'])] if device.get('target_device_type') else []
  size = device.get('input_size')
  if isinstance(size, (list, tuple)) and len(size) >= 2:
    parts.append(f'{size[0]}x{size[1]}')
  elif isinstance(size, int) and not isinstance(size, bool):
    parts.append(f'{size}x{size}')
  return ', '.join([words] + ([' '.join(parts)] if parts else []))


def is_noisy(row: Mapping[str, Any]) -> bool:
  """The row's latency was measured with a large spread (the measurement marks it)."""
  device = row.get(LATENCY_DEVICE_COLUMN)
  return isinstance(device, Mapping) and bool(device.get('noisy'))


def has_early_stopping(state: JobState) -> bool:
  """The search stops weak trials early: its settings name a scheduler other than none, or
  `auto` chose one (its journaled decision; before that, any rung report says so)."""
  name = ((state.settings or {}).get('scheduler') or {}).get('name', 'none')
  if name == 'auto':
    return state.early_stopping != 'none' if state.early_stopping else bool(state.rungs)
  return name != 'none'


def _with_step(row: dict[str, Any], state: JobState) -> dict[str, Any]:
  """The row with EARLY_STOPPING_COLUMNS after `status`."""
  trial_id = str(row['trial_id'])
  step = (_number(state.metrics.get(trial_id, {}).get('step'))
          if row['status'] in RESULT_STATUSES else None)
  items = list(row.items())
  at = list(row).index('status') + 1
  return dict(items[:at] + [('step', step)] + items[at:])


def objectives_of(state: JobState) -> tuple[pareto_lib.Objective, ...] | None:
  """The search's --objectives, None for a search of the scalar reward."""
  spec = (state.settings or {}).get('objectives')
  return pareto_lib.parse_objectives(spec) if spec else None


def _with_front(rows: list[dict[str, Any]], front: pareto_lib.Front) -> list[dict[str, Any]]:
  """The rows with PARETO_COLUMNS after `reward`."""
  out = []
  for row in rows:
    trial_id = str(row['trial_id'])
    extra = {'pareto': front.on_front.get(trial_id),
             'hypervolume': front.hypervolume_after.get(trial_id)}
    items = list(row.items())
    at = list(row).index('reward') + 1
    out.append(dict(items[:at] + list(extra.items()) + items[at:]))
  return out


def _space_metric(space: Any) -> str | None:
  """The metric a prebuilt search space's trials report as their accuracy (a module's space
  is not imported for a fallback: its trials record their metric)."""
  from tf_vision.search_spaces import registry  # pylint: disable=g-import-not-at-top
  try:
    binding = registry.get_entry(space).binding if isinstance(space, str) else None
  except NascliError:
    return None
  return binding.metric if binding else None


def sort_by_reward(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """Best reward first; trials without a reward after them, all ties in trial order. Trials
  stopped early come after the completed ones: a partial budget's reward is no rival; after
  them the proposals predicted over the target, whose reward is a penalty, not a result."""
  rows = [dict(r) for r in rows]
  rewarded = [r for r in rows if r.get('reward') is not None]
  rank = {STOPPED: 1, OVER_TARGET: 2}
  # A stable sort keeps trial order on ties.
  rewarded.sort(key=lambda r: (rank.get(r.get('status'), 0), -r['reward']))
  return rewarded + [r for r in rows if r.get('reward') is None]


def _job_dir(job_dir: str | os.PathLike[str]) -> str:
  """A local job dir as an absolute path; a gs:// URL as it is, without a trailing '/'."""
  job_dir = os.fspath(job_dir)
  return job_dir.rstrip('/') if storage.is_gcs(job_dir) else os.path.abspath(job_dir)


def _read_analysis(trial_dir: str, trial_id: str) -> dict[str, Any]:
  """The trial's model_analysis.json; {} (with a warning) when unreadable or another trial's."""
  path = storage.join(trial_dir, ANALYSIS_NAME)
  try:
    data = json.loads(storage.read_text(path))
  except StorageNotFoundError:
    return {}
  except (StorageError, InputError, ValueError) as e:
    logger.warning('ignoring %s: %s', path, ' '.join(str(e).split()))
    return {}
  if not isinstance(data, dict):
    logger.warning('ignoring %s: not a JSON object', path)
    return {}
  if 'trial_id' in data and str(data['trial_id']) != trial_id:
    logger.warning('ignoring %s: it is trial %s\'s, not trial %s\'s', path, data['trial_id'],
                   trial_id)
    return {}
  return data


def _number(value: Any) -> int | float | None:
  """A finite number, else None: JSON has no NaN and a NaN sorts nowhere."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return None
  if isinstance(value, float) and not math.isfinite(value):
    return None
  return value


def _parse_time(text: Any) -> datetime.datetime | None:
  if not isinstance(text, str):
    return None
  try:
    return datetime.datetime.fromisoformat(text.replace('Z', '+00:00'))
  except ValueError:
    return None


def _elapsed(start: Any, end: Any) -> float | None:
  begin, finish = _parse_time(start), _parse_time(end)
  if begin is None or finish is None or finish < begin:
    return None
  return round((finish - begin).total_seconds(), 3)


# --------------------------------------------------------------------------- files


def _atomic_write(path: str, data: bytes, content_type: str) -> None:
  """Readers see the old file or object or the new one (nascli.storage owns atomic writes)."""
  storage.write_bytes(path, data, content_type=content_type)


def _csv_cell(value: Any) -> Any:
  if value is None:
    return ''
  if isinstance(value, (dict, list)):
    return json.dumps(value, separators=(',', ':'))
  return value


def write_tables(job_dir: str | os.PathLike[str], rows: Sequence[Mapping[str, Any]]) -> None:
  """`trials.json` (a list of rows) and `trials.csv` (nas_params as a JSON string)."""
  job_dir = os.fspath(job_dir)
  _remove_leftovers(job_dir, TABLE_JSON, TABLE_CSV)
  text = json.dumps([dict(r) for r in rows], indent=2, allow_nan=False) + '\n'
  _atomic_write(storage.join(job_dir, TABLE_JSON), text.encode('utf-8'), 'application/json')
  buffer = io.StringIO()
  columns = tuple(rows[0]) if rows else COLUMNS  # with PARETO_COLUMNS in a multi-objective job
  writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator='\n')
  writer.writeheader()
  for row in rows:
    writer.writerow({key: _csv_cell(row.get(key)) for key in columns})
  _atomic_write(storage.join(job_dir, TABLE_CSV), buffer.getvalue().encode('utf-8'),
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
  _remove_leftovers(job_dir, PROGRESS_PLOT)
  fig = progress_figure(_job_dir(job_dir).rsplit('/', 1)[-1], rows)
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png')
  _atomic_write(storage.join(job_dir, PROGRESS_PLOT), buffer.getvalue(), 'image/png')


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
  objectives = objectives_of(state)
  if not objectives:
    return None
  job_dir = os.fspath(job_dir)
  _remove_leftovers(job_dir, PARETO_JSON, PARETO_PLOT)
  front = pareto_lib.front_of(rows, objectives, state.completion_order)
  text = json.dumps(front.summary(), indent=2, allow_nan=False) + '\n'
  _atomic_write(storage.join(job_dir, PARETO_JSON), text.encode('utf-8'), 'application/json')
  target = _number(((state.settings or {}).get('trial') or {}).get('target_device_latency_ms'))
  png = pareto_lib.plot_png(rows, front, _job_dir(job_dir).rsplit('/', 1)[-1], target)
  _atomic_write(storage.join(job_dir, PARETO_PLOT), png, 'image/png')
  return front


# --------------------------------------------------------------------------- HParams


def hparam_value(value: Any) -> str:
  """A decision's value as one HParams string: "1/3 (3)" -> "3", "0/2 ('conv')" -> "conv".

  Always a string, so that one hparam never mixes types (which turns TensorBoard's column into
  text or drops trials); also applied to a space's candidate literals (3, "'conv'") so the
  domain and the values match.
  """
  if not isinstance(value, str):
    return str(value)
  text = value
  match = _VALUE_RE.fullmatch(value.strip())
  if match and match.group(3) is not None:
    text = match.group(3)
  try:
    literal = ast.literal_eval(text)
  except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
    return text
  return literal if isinstance(literal, str) else text


def decision_domains(space: Any) -> dict[str, list[str]]:
  """{decision key: every candidate as an HParams string} of a pyglove space or DNASpec.

  Pass this to `write_hparams`/`update_all` so that TensorBoard's HParams domains list every
  candidate, not only those the first trials happened to pick. Float decisions
  (`pg.floatv`) have no finite candidate list and are left out.
  """
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  spec = space if isinstance(space, pg.DNASpec) else pg.dna_spec(space)
  domains = {}
  for point in spec.decision_points:
    literals = getattr(point, 'literal_values', None)
    if literals:
      domains[str(point.id)] = [hparam_value(v) for v in literals]
  return domains


def run_name(trial_id: str) -> str:
  """A trial's HParams folder: `trial-0007` (zero-padded, so TensorBoard lists runs in order)."""
  return f'trial-{int(trial_id):04d}' if trial_id.isdigit() else f'trial-{trial_id}'


def _hparam_domains(decisions: Sequence[str] | Mapping[str, Sequence[str]],
                    rows: Sequence[Mapping[str, Any]]) -> dict[str, list[str] | None]:
  """Each hparam's discrete values: the given candidates plus any value a trial used.

  TensorBoard's HParams UI filters trials by the checked values of a discrete domain, so a
  domain missing a value hides every trial that used it: a key given without candidates (or
  one only some trials have) gets no domain (None) instead of a partial one.
  """
  given = decisions if isinstance(decisions, Mapping) else dict.fromkeys(decisions)
  domains: dict[str, list[str] | None] = {}
  for key, candidates in given.items():
    domains[str(key)] = (list(dict.fromkeys(hparam_value(v) for v in candidates))
                         if candidates else None)
  for row in rows:
    for key, value in (row.get('nas_params') or {}).items():
      values = domains.setdefault(key, None)
      if values is not None and hparam_value(value) not in values:
        values.append(hparam_value(value))
  return domains


def _event_file_bytes(summaries: Sequence[Any], wall_time: float) -> bytes:
  """An event file holding `summaries` at step 0, as `tf.summary` would write it."""
  # pylint: disable=g-import-not-at-top
  from tensorboard.compat.proto import event_pb2
  from tensorboard.summary.writer.record_writer import RecordWriter
  buffer = io.BytesIO()
  writer = RecordWriter(buffer)
  writer.write(event_pb2.Event(
      wall_time=wall_time, file_version='brain.Event:2',
      source_metadata=event_pb2.SourceMetadata(writer='nascli')).SerializeToString())
  for summary in summaries:
    writer.write(event_pb2.Event(wall_time=wall_time, step=0,
                                 summary=summary).SerializeToString())
  return buffer.getvalue()


def _event_file_name(wall_time: float) -> str:
  return f'events.out.tfevents.{int(wall_time):010d}.{socket.gethostname()}.{os.getpid()}.nascli'


def _has_event_file(directory: str) -> bool:
  return any('tfevents' in name and not name.startswith('.')
             for name in storage.list_names(directory, recursive=False))


def _remove_leftovers(directory: str, *names: str) -> None:
  """Temporary files and folders of a writer killed mid-write (of `names` only, if given).

  Only local folders have them: a gs:// object appears only when its upload is complete.
  """
  if storage.is_gcs(directory):
    return
  prefixes = tuple(f'.{n}.' for n in names) or ('.',)
  with contextlib.suppress(FileNotFoundError):
    for name in os.listdir(directory):
      if name.startswith(prefixes) and name.endswith(_TMP_SUFFIX):
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
          shutil.rmtree(path, ignore_errors=True)
        else:
          with contextlib.suppress(OSError):
            os.remove(path)


def _write_run(root: str, name: str, summaries: Sequence[Any]) -> bool:
  """Creates `root/name/` holding one event file, whole or not at all; False if it exists."""
  now = time.time()
  if storage.is_gcs(root):
    # One object is the whole run: it appears complete or not at all.
    try:
      storage.create_bytes(storage.join(root, name, _event_file_name(now)),
                           _event_file_bytes(summaries, now))
    except StorageExistsError:
      return False
    return True
  tmp = tempfile.mkdtemp(dir=root, prefix=f'.{name}.', suffix=_TMP_SUFFIX)
  try:
    _atomic_write(os.path.join(tmp, _event_file_name(now)), _event_file_bytes(summaries, now),
                  'application/octet-stream')
    os.chmod(tmp, 0o755)
    try:
      os.rename(tmp, os.path.join(root, name))
    except OSError:
      if os.path.isdir(os.path.join(root, name)):
        return False  # Another writer got there first; its folder is complete too.
      raise
  finally:
    if os.path.isdir(tmp):
      shutil.rmtree(tmp, ignore_errors=True)
  return True


def write_hparams(job_dir: str | os.PathLike[str], rows: Sequence[Mapping[str, Any]],
                  decision_keys: Sequence[str] | Mapping[str, Sequence[str]],
                  written: set[str] | None = None, early_stopping: bool = False) -> set[str]:
  """TensorBoard HParams of the search, in the shape of Optuna's TensorBoardCallback.

  `JOB_DIR/hparams/` holds the experiment config (every decision as a string hparam; metrics
  reward, accuracy, latency_ms), written once; each completed trial gets its own run,
  `hparams/trial-0007/`, written once with `hparams(values, trial_id="7")` and its metrics
  as scalars at step 0. A run folder appears only when complete, so its presence is what
  says a trial is written and a resumed search never writes it twice.

  Args:
    job_dir: The search job dir.
    rows: `trial_rows(...)`.
    decision_keys: The decisions: their keys, or {key: candidate values} (see
      `decision_domains`), which gives each hparam a discrete domain with every candidate.
      With keys only, a domain is left open: one made of the values seen so far would hide
      later trials that use other values in TensorBoard.
    written: Trial ids already written, kept by the caller across calls; updated in place.
    early_stopping: The search stops trials early: trials it stopped get runs too, with their
      last rung's metrics, and every run has a `status` hparam (completed or stopped, to
      filter by) and the `step` its metrics were measured at.

  Returns:
    The trial ids whose runs exist now (`written`, updated).
  """
  # pylint: disable=g-import-not-at-top
  # summary_v2 is the module `tensorboard.plugins.hparams.api` re-exports; the api module
  # itself imports TensorFlow (for its Keras callback).
  from tensorboard.plugins.hparams import summary_v2 as hp
  from tensorboard.plugins.scalar import summary_v2 as scalar_summary
  root = storage.join(os.fspath(job_dir), HPARAMS_DIR)
  storage.ensure_dir(root)
  _remove_leftovers(root)
  written = set() if written is None else written

  statuses = RESULT_STATUSES if early_stopping else (COMPLETED,)
  metrics = HPARAM_METRICS + (EARLY_STOPPING_COLUMNS if early_stopping else ())
  if not _has_event_file(root):
    domains = _hparam_domains(decision_keys, rows)
    hparams = [hp.HParam(key, hp.Discrete(values) if values else None)
               for key, values in domains.items()]
    if early_stopping:
      hparams.append(hp.HParam('status', hp.Discrete(list(statuses))))
    config = hp.hparams_config_pb(hparams=hparams, metrics=[hp.Metric(name) for name in metrics])
    now = time.time()
    _atomic_write(storage.join(root, _event_file_name(now)), _event_file_bytes([config], now),
                  'application/octet-stream')

  for row in rows:
    trial_id = str(row['trial_id'])
    if row['status'] not in statuses or row.get('reward') is None or trial_id in written:
      continue
    name = run_name(trial_id)
    if not storage.exists(storage.join(root, name)):
      values = {str(k): hparam_value(v) for k, v in (row.get('nas_params') or {}).items()}
      if early_stopping:
        values['status'] = row['status']
      summaries = [hp.hparams_pb(values, trial_id=trial_id)]
      summaries += [scalar_summary.scalar_pb(metric, row[metric])
                    for metric in metrics if row.get(metric) is not None]
      _write_run(root, name, summaries)
    written.add(trial_id)
  return written


def update_all(job_dir: str | os.PathLike[str], state: JobState,
               decision_keys: Sequence[str] | Mapping[str, Sequence[str]],
               written: set[str] | None = None,
               report_cache: dict[str, Any] | None = None) -> list[dict[str, Any]]:
  """Rewrites every derived output of the job from `state`, its report.html last; returns the
  rows. `report_cache`, kept by the caller across calls, holds the curves of finished trials
  (their files no longer change: one read each, not one per refresh)."""
  from nascli import report  # pylint: disable=g-import-not-at-top
  rows = trial_rows(job_dir, state)
  write_tables(job_dir, rows)
  write_progress_plot(job_dir, rows)
  write_pareto(job_dir, state, rows)
  write_hparams(job_dir, rows, decision_keys, written, early_stopping=has_early_stopping(state))
  report.write_search(_job_dir(job_dir), state, rows, report_cache)
  return rows
