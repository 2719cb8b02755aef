"""Where a search's trials run, and how their folders reach the job dir.

A local job dir is its own workspace: trials write their folders in place. A gs:// job dir is
not: TensorFlow's checkpoints and summaries, the trial log and the exported model are written by
libraries that append and rename files, which objects cannot do (and TensorFlow's own gs://
writer cannot reach an emulator). So its trials run in a local staging copy of the job dir
(`journal.staging_dir(url)`), and when a trial ends its folder is uploaded, each file in one
complete upload, the marker last, BEFORE the journal records the outcome: a journal entry
never names files that are not there. A trial that runs on another machine (on a Ray actor or task) runs
in that machine's temporary folder and uploads its own folder the same way (upload_trial); the
driver then fetches only its marker and metrics (fetch_outcome).
"""

import json
import os
import shutil
from typing import Any, Mapping, Sequence

from nascli import storage
from nascli.search import journal as journal_lib

STATUS_NAME = "job_status.json"  # the trial's completion marker (tf_vision.job_status)
ANALYSIS_NAME = "model_analysis.json"
CHECKPOINT_INDEX = "checkpoint"
# Uploaded last, in this order: the checkpoint index once the files it names are up, then the
# final metrics, then the marker that says the trial ended.
LAST = (CHECKPOINT_INDEX, ANALYSIS_NAME, STATUS_NAME)
STAGING_MARKER = ".nascli-job.json"


class LocalWorkspace:
  """A local job dir: trials run in it, nothing to copy."""

  def __init__(self, job_dir: str):
    self.job_dir = job_dir
    self.work_dir = job_dir

  def prepare(self, events: Sequence[Mapping[str, Any]]) -> None:
    del events

  def attempt_starting(self, trial_id: str) -> None:
    del trial_id

  def remote_trial_dir(self, trial_id: str) -> str | None:
    del trial_id
    return None

  def fetch_outcome(self, trial_id: str) -> None:
    del trial_id

  def publish(self, trial_id: str) -> None:
    del trial_id

  def recorded(self, trial_id: str) -> None:
    del trial_id


class GcsWorkspace:
  """A gs:// job dir: trials run in a local staging folder and are uploaded when they end."""

  def __init__(self, job_dir: str):
    self.job_dir = job_dir.rstrip("/")
    self.work_dir = journal_lib.staging_dir(self.job_dir)

  def _remote(self, trial_id: str, name: str = "") -> str:
    return storage.join(self.job_dir, trial_id, name)

  def prepare(self, events: Sequence[Mapping[str, Any]]) -> None:
    """Keeps the staging folder only if it belongs to this very search (the one whose
    search_started the journal holds): a search started over (--overwrite, or the prefix
    deleted and reused) must not resume trials from another search's checkpoints."""
    marker = os.path.join(self.work_dir, STAGING_MARKER)
    try:
      with open(marker, encoding="utf-8") as f:
        same = json.load(f) == self._identity(events)
    except (OSError, ValueError):
      same = False
    if not same:
      for name in os.listdir(self.work_dir) if os.path.isdir(self.work_dir) else []:
        path = os.path.join(self.work_dir, name)
        if name.isdigit() and os.path.isdir(path):
          shutil.rmtree(path)
      self.adopt(events)

  def _identity(self, events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    first = dict(events[0]) if events else {}
    return {"job_dir": self.job_dir, "started": first.get("time"),
            "fingerprint": first.get("fingerprint")}

  def adopt(self, events: Sequence[Mapping[str, Any]]) -> None:
    """Marks what the staging folder holds as this search's (search_resume staged its copy of
    the previous job's trials there)."""
    storage.write_text(os.path.join(self.work_dir, STAGING_MARKER),
                       json.dumps(self._identity(events)))

  def attempt_starting(self, trial_id: str) -> None:
    """As locally: an earlier attempt's marker goes, this attempt uploads its own."""
    storage.delete(self._remote(trial_id, STATUS_NAME), missing_ok=True)

  def remote_trial_dir(self, trial_id: str) -> str | None:
    """Where a trial running on another machine uploads its own folder (upload_trial)."""
    return self._remote(trial_id)

  def fetch_outcome(self, trial_id: str) -> None:
    """For a trial that uploaded its own folder: its marker and metrics, into the staging
    copy, where the search loop reads every trial's outcome (not its checkpoints)."""
    local = os.path.join(self.work_dir, trial_id)
    for name in (ANALYSIS_NAME, STATUS_NAME):
      remote = self._remote(trial_id, name)
      if storage.is_file(remote):
        storage.download_file(remote, os.path.join(local, name))

  def publish(self, trial_id: str) -> None:
    """Uploads the staging copy of the trial folder (upload_trial)."""
    upload_trial(os.path.join(self.work_dir, trial_id), self._remote(trial_id))

  def recorded(self, trial_id: str) -> None:
    """The journal has the outcome and the bucket the files: the local copy is not needed."""
    shutil.rmtree(os.path.join(self.work_dir, trial_id), ignore_errors=True)


def upload_trial(local: str, remote: str) -> None:
  """Uploads a trial folder: objects an earlier attempt left and this one did not write are
  removed, then every file goes up whole, `LAST` last, the marker at the very end. Runs in the
  driver for staged trials and on the Ray node for trials that ran on another node."""
  names = [n for n in storage.list_names(local) if not _temporary(n)]
  for stale in sorted(set(storage.list_names(remote)) - set(names)):
    storage.delete(storage.join(remote, stale), missing_ok=True)
  storage.upload_dir(local, remote, names=[n for n in names if n not in LAST])
  for name in LAST:
    if name in names:
      storage.upload_file(os.path.join(local, name), storage.join(remote, name))


def _temporary(name: str) -> bool:
  """A file a writer was killed in the middle of (storage's `.NAME.x.tmp`, job_status's)."""
  return name.rsplit("/", 1)[-1].endswith(".tmp")


# Workspaces by the job dir's scheme (journal.scheme).
_WORKSPACES = {"file": LocalWorkspace, "gs": GcsWorkspace}


def for_job_dir(job_dir: str) -> LocalWorkspace | GcsWorkspace:
  return _WORKSPACES[journal_lib.scheme(job_dir)](job_dir)
