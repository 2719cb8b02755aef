"""What a search produced, as rows derived from its journal; the files are written elsewhere
(result_files.py, hparams.py, the report), as writers (writers.py).

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

import datetime
import json
import logging
import math
import os
from typing import Any, Iterable, Mapping

from nascli import latency_source
from nascli import storage
from nascli.errors import InputError
from nascli.errors import NascliError
from nascli.errors import StorageError
from nascli.errors import StorageNotFoundError
from nascli.search import pareto as pareto_lib
from nascli.search.journal import COMPLETED
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
  job_dir = plain_job_dir(job_dir)
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
        'reward': number(state.rewards.get(trial_id)) if completed or skipped else None,
    }
    for key in MEASURED:
      value = number(journaled.get(key))
      if value is None and completed:
        if analysis is None:
          analysis = _read_analysis(trial_dir, trial_id)
        value = number(analysis.get(key))
      row[key] = value
    elapsed = _elapsed(state.started_time.get(trial_id), state.finished_time.get(trial_id))
    if row['seconds'] is None:
      row['seconds'] = elapsed
    row['wall_s'] = number(journaled.get('wall_s'))
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
    rows = [{**row, MEASURED_COLUMN: number((state.measured.get(row['trial_id']) or {}).get(
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
    if number(report.get('spread')) is not None:
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
  step = (number(state.metrics.get(trial_id, {}).get('step'))
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


def plain_job_dir(job_dir: str | os.PathLike[str]) -> str:
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


def number(value: Any) -> int | float | None:
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
