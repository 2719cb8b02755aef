"""`search_resume`: a new search job that continues a previous one with more trials.

Vertex's `search_resume` starts a new NAS job from the old one's spec and trials. Here the new
job dir is a copy of the previous job's: its journal's events (so the controller is rebuilt by
replaying them, and proposes what the uninterrupted search would have), its trial folders
(checkpoints, metrics, exports: `list_trials`, stage-2 `train` and `export` read the new job as
a whole), then one `resumed_from` event naming the previous job. The new job then runs as any
resumed search does, with the previous job's settings; only the settings a resume may change
(search_loop.MUTABLE: trial counts, parallelism, isolation, exports) come from the command.

The previous job dir is only read (its lock is tested, never taken), never written. The copy is
made under a hidden temporary name beside the new job dir and renamed into place when whole, so
a kill during the copy leaves no job dir that looks complete: the same command starts the copy
again, and once the new job exists, continues it as a rerun of any search does.

No TensorFlow and no pyglove here: every refusal comes before either is imported.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
from typing import Any

from nascli import storage
from nascli.errors import NascliError
from nascli.errors import OutputError
from nascli.search import journal as journal_lib
from nascli.search import journal_file
from nascli.search import journal_gcs
from nascli.search import resume_gcs
from nascli.search import warm_start

EVENT = 'resumed_from'
DEFAULT_SUFFIX = '-resumed'
# What is not copied: the previous job's writer lock, its journal (written anew, with the
# `resumed_from` event), the gs:// journal's objects, and its warm workers' logs.
_NOT_COPIED = (journal_file.LOCK_NAME, journal_file.JOURNAL_NAME, journal_gcs.ENTRIES_DIR,
               'workers')
_COPYING = '.copying-'


def default_job_dir(previous_job_dir: str) -> str:
  """The new job's dir when --local_output_dir is not given: beside the previous one."""
  name = previous_job_dir.rstrip('/')
  if storage.is_gcs(name):
    name = storage.parse_gcs(name).name.rstrip('/').rsplit('/', 1)[-1] or 'search'
    return os.path.join('nascli_output', name + DEFAULT_SUFFIX)
  return name + DEFAULT_SUFFIX


def _absolute(path: str) -> str:
  return path.rstrip('/') if storage.is_gcs(path) else os.path.abspath(path)


def _check_not_running(job_dir: str) -> None:
  """Refuses a previous job a search is writing now (its lock held), without taking the lock:
  a shared flock on a read-only descriptor, released at once, writes nothing."""
  if storage.is_gcs(job_dir):
    return  # a gs:// job's writer lock is on its writer's machine
  lock = os.path.join(job_dir, journal_file.LOCK_NAME)
  try:
    fd = os.open(lock, os.O_RDONLY)
  except OSError:
    return
  try:
    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    fcntl.flock(fd, fcntl.LOCK_UN)
  except OSError as e:
    if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
      raise
    pid = os.pread(fd, 64, 0).decode('ascii', 'replace').strip() or 'unknown'
    raise OutputError(f'--previous_job_dir {job_dir} is being written by a running search (pid'
                      f' {pid}); wait for it to finish or stop it') from None
  finally:
    os.close(fd)


def _resumed_from(job_dir: str) -> str | None:
  """The previous job a job dir continues (its `resumed_from` event), or None."""
  events = journal_lib.journal_for(job_dir).events()
  return next((e.get('previous_job_dir') for e in events if e.get('event') == EVENT), None)


def prepare(previous_job_dir: str, job_dir: str, max_nas_trial: int) -> dict[str, Any]:
  """Makes `job_dir` the continuation of the search in `previous_job_dir` (copying it, once);
  returns the previous job's settings, which are the new job's.

  Refused in one line: a previous job dir that is missing, not a search job, has a damaged
  journal or is being written; a new job dir that is the previous one, or holds something
  else; a --max_nas_trial that adds no trial to a new copy. A gs:// new job dir is made as
  resume_gcs says.

  Raises:
    NascliError (InputError, OutputError): as above.
  """
  what = '--previous_job_dir'
  previous = _absolute(previous_job_dir)
  settings, events = warm_start.read_job(previous_job_dir, what)
  new = _absolute(job_dir)
  if new == previous:
    raise NascliError(f'--local_output_dir {job_dir} is the previous job dir itself: to go on'
                      ' there, run its search command again with a larger --max_nas_trial')
  gcs = resume_gcs.Target(new, previous) if storage.is_gcs(new) else None
  if gcs.made() if gcs else os.path.exists(os.path.join(new, journal_file.JOURNAL_NAME)):
    continues = _resumed_from(new)
    if continues != previous:
      source = f'a continuation of {continues}' if continues else 'another search job'
      raise OutputError(f'--local_output_dir {job_dir} holds {source}, not a continuation of'
                        f' {previous}; choose another --local_output_dir')
    return settings  # made before: the search resumes it
  if (gcs.holds_other() if gcs else
      os.path.exists(new) and (not os.path.isdir(new) or os.listdir(new))):
    raise OutputError(f'--local_output_dir {job_dir} exists and is not an empty folder;'
                      ' choose another')
  # Proposals predicted over the latency target (--latency_model) were not trained: not counted.
  proposed = (sum(1 for e in events if e.get('event') == 'proposed')
              - sum(1 for e in events if e.get('event') == 'over_target'))
  if max_nas_trial <= proposed:
    raise NascliError(f'--max_nas_trial {max_nas_trial} adds no trial: {previous_job_dir} has'
                      f' {proposed} already; give the new total, more than {proposed}')
  _check_not_running(previous_job_dir)
  if gcs:
    gcs.make(lambda staged: _copy(previous, staged, events))
  else:
    _copy(previous, new, events)
  return settings


def _remove_stale_copies(new: str) -> None:
  """Hidden copies of `new` left by a killed search_resume (their process is gone)."""
  parent, name = os.path.split(new)
  prefix = f'.{name}{_COPYING}'
  for entry in os.listdir(parent):
    if not entry.startswith(prefix):
      continue
    pid = entry[len(prefix):]
    if pid.isdigit() and resume_gcs.process_alive(int(pid)):
      raise OutputError(f'another search_resume (pid {pid}) is making {new}; wait for it')
    shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)


def _copy(previous: str, new: str, events: list[dict[str, Any]]) -> None:
  """The previous job's trial folders and journal, plus `resumed_from`, copied to a hidden
  folder beside `new` and renamed to `new` when whole (and durable)."""
  parent = os.path.dirname(new)
  os.makedirs(parent, exist_ok=True)
  _remove_stale_copies(new)
  tmp = os.path.join(parent, f'.{os.path.basename(new)}{_COPYING}{os.getpid()}')
  if storage.is_gcs(previous):
    storage.download_dir(previous, tmp)
    for name in _NOT_COPIED:
      path = os.path.join(tmp, name)
      if os.path.isdir(path):
        shutil.rmtree(path)
      elif os.path.exists(path):
        os.remove(path)
  else:
    shutil.copytree(previous, tmp, symlinks=True,
                    ignore=lambda d, names: [n for n in names if n in _NOT_COPIED]
                    if os.path.abspath(d) == previous else [])
  _retarget_trial_specs(tmp, new)
  lines = [dict(e) for e in events]
  lines.append(journal_file.make_record(
      {'event': EVENT, 'previous_job_dir': previous, 'previous_events': len(events),
       'previous_trials': sum(1 for e in events if e.get('event') == 'proposed')},
      len(events) + 1))
  journal = os.path.join(tmp, journal_file.JOURNAL_NAME)
  with open(journal, 'wb') as f:
    for record in lines:
      f.write((json.dumps(record, separators=(',', ':')) + '\n').encode('utf-8'))
    f.flush()
    os.fsync(f.fileno())
  with contextlib.suppress(FileNotFoundError, OSError):
    os.rmdir(new)  # an empty folder the user made: the copy takes its place
  os.rename(tmp, new)
  fd = os.open(parent, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def _retarget_trial_specs(tmp: str, new: str) -> None:
  """Each copied trial's trial_spec.json names the new job dir as its job (what it was given
  otherwise stays as it was)."""
  for name in os.listdir(tmp):
    path = os.path.join(tmp, name, 'trial_spec.json')
    if not (name.isdigit() and os.path.isfile(path)):
      continue
    with open(path, encoding='utf-8') as f:
      spec = json.load(f)
    if isinstance(spec, dict) and 'job_dir' in spec:
      spec['job_dir'] = new
      with open(path + '.tmp', 'w', encoding='utf-8') as f:
        json.dump(spec, f, indent=2, sort_keys=True)
      os.replace(path + '.tmp', path)


def latency_model_for(previous_job_dir: str, path: str | None) -> Any:
  """search_resume's --latency_model: the previous job's own model (same fingerprint) where it
  is now (run_spec.LatencyModelRef); None: not given, the previous job's path is kept. Checked
  before anything is copied.

  Raises:
    NascliError: the file is missing or damaged, another model than the previous job's, or
      the previous job had none (a resume keeps the settings).
  """
  if not path:
    return None
  from nascli.search import latency_gate  # pylint: disable=g-import-not-at-top
  settings, _ = warm_start.read_job(previous_job_dir, '--previous_job_dir')
  began = (settings.get('trial') or {}).get('latency_model')
  if not isinstance(began, dict):
    raise NascliError(f'--latency_model {path}: {previous_job_dir} was searched without a latency'
                      ' model and search_resume keeps its settings; start a new search with'
                      f' --warm_start_from {previous_job_dir} --latency_model {path}')
  ref = latency_gate.reference(path)
  if ref.fingerprint != began.get('fingerprint'):
    raise NascliError(f'--latency_model {path} is not the latency model {previous_job_dir} was'
                      f' searched with ({began.get("path")}; fingerprints'
                      f' {ref.fingerprint[:12]} and {str(began.get("fingerprint"))[:12]} differ)')
  return ref


def search_args(settings: dict[str, Any], job_dir: str, latency_model: Any = None,
                **mutable: Any):
  """The new job's SearchArgs: the previous job's settings (search_loop.SearchArgs.settings()),
  with the settings a resume may change (`mutable`, None: as the previous job had them) and
  the previous job's latency model where it is now (`latency_model`: `latency_model_for`).

  Raises:
    NascliError: settings this nascli cannot read, or a data set, config file or latency model
      of the previous job that is gone.
  """
  # pylint: disable=g-import-not-at-top
  from nascli.run_spec import from_dict
  from nascli.search import search_loop
  args = from_dict(search_loop.SearchArgs, {**settings, 'job_dir': job_dir, 'overwrite': False},
                   'the previous job\'s settings')
  for key, value in mutable.items():
    if value is None:
      continue
    if key not in search_loop.MUTABLE:
      raise ValueError(f'{key} is not a setting a resume may change')
    setattr(args, key, value)
  if latency_model is not None:
    args.trial.latency_model = latency_model
  run = args.trial.run
  for what, path in ([('--dataset_dir', run.data.dataset_dir)]
                     + [('--config_file', p) for p in run.config_files]):
    if path and not storage.is_gcs(path) and not os.path.exists(path):
      raise NascliError(f'the previous job\'s {what} {path} is gone; restore it to continue'
                        ' that search')
  model = args.trial.latency_model
  if model and not storage.is_gcs(model.path) and not os.path.exists(model.path):
    raise NascliError(f'the previous job\'s --latency_model {model.path} is gone; restore it, or'
                      ' give where it is now with --latency_model')
  return args
