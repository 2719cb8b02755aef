"""TensorBoard HParams of a search, in the shape of Optuna's TensorBoardCallback.

The event files are written with TensorBoard's own protos and record writer instead of
`tf.summary`: the search process that hands GPUs to its trials must not load TensorFlow (10 s)
or start a TensorFlow runtime, which would claim the memory of every visible GPU.
"""

from __future__ import annotations

import ast
import io
import os
import re
import shutil
import socket
import tempfile
import time
from typing import Any, Mapping, Sequence

from nascli import storage
from nascli.errors import StorageExistsError
from nascli.search import results
from nascli.search import writers
from nascli.search.journal import COMPLETED
from nascli.search.results import EARLY_STOPPING_COLUMNS, HPARAM_METRICS, HPARAMS_DIR
from nascli.search.results import RESULT_STATUSES

# A nas_params value: "<index>/<num_candidates> (<literal>)", the literal part optional.
_VALUE_RE = re.compile(r'(\d+)/(\d+)(?: \((.*)\))?', re.S)


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

  Pass this to `write_hparams` / `writers.Outputs` so that TensorBoard's HParams domains list every
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
  tmp = tempfile.mkdtemp(dir=root, prefix=f'.{name}.', suffix=writers.TMP_SUFFIX)
  try:
    writers.atomic_write(os.path.join(tmp, _event_file_name(now)), _event_file_bytes(summaries, now),
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
  writers.remove_leftovers(root)
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
    writers.atomic_write(storage.join(root, _event_file_name(now)), _event_file_bytes([config], now),
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




@writers.register('hparams')
class HParamsWriter(writers.Writer):
  """hparams/: the experiment config once, then one run per trial with a result, once each."""

  slow = True  # TensorBoard's protos: seconds to import the first time

  def __init__(self):
    self.written: set[str] = set()  # trial ids whose runs exist (read from the folder once)

  def write(self, snapshot: writers.Snapshot) -> None:
    write_hparams(snapshot.job_dir, snapshot.rows, snapshot.decision_domains, self.written,
                  early_stopping=results.has_early_stopping(snapshot.state))
