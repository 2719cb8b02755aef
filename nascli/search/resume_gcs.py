"""`search_resume` into a gs:// job dir: the copy of the previous job made whole or not at all.

Locally the copy is made under a hidden name and renamed into place; object storage has no
rename, so here a claim object stands for the hidden name. `gs://NEW/.resume-copy.json` is created
only if absent (ifGenerationMatch=0) before anything else is written; while it is there the job
dir is an unfinished copy, never a job. The copy is made as locally, into the new job's staging
folder (journal_gcs.staging_dir: where its trials run, so an interrupted trial of the previous
job goes on from its checkpoint); then its trial folders are uploaded (workspace.upload_trial),
then its journal entries created, `resumed_from` last; then the claim is deleted, on condition
that it is still the generation this copy created. A copy killed on the way leaves the claim:
the same command makes the copy again (entries already there are its own), and a second
search_resume on this machine while the first runs is refused by the claim's pid.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from typing import Any, Callable

from nascli import storage
from nascli.errors import OutputError
from nascli.errors import StorageExistsError
from nascli.search import journal_gcs
from nascli.search import workspace

CLAIM_NAME = ".resume-copy.json"


class Target:
  """The gs:// job dir `new` that continues `previous`."""

  def __init__(self, new: str, previous: str):
    self.new, self.previous = new.rstrip("/"), previous
    self.claim = storage.join(self.new, CLAIM_NAME)
    self.journal = journal_gcs.GcsJournal(self.new)

  def _claim(self) -> tuple[dict[str, Any], int] | None:
    """(its content, its generation), or None when no copy is under way."""
    blob = storage.client().bucket(storage.parse_gcs(self.claim).bucket).get_blob(
        storage.parse_gcs(self.claim).name)
    if blob is None:
      return None
    try:
      return json.loads(blob.download_as_bytes()), blob.generation
    except ValueError:
      return {}, blob.generation

  def made(self) -> bool:
    """A whole job is there (its journal, and no copy under way)."""
    return self.journal.exists() and self._claim() is None

  def holds_other(self) -> bool:
    """Something other than an unfinished copy of `previous` is there."""
    claim = self._claim()
    if claim is not None:
      return claim[0].get("previous") != self.previous
    return bool(storage.list_names(self.new))

  def make(self, copy: Callable[[str], None]) -> None:
    """Claims the job dir, `copy(folder)` makes the local copy (resume._copy), then the copy goes
    up, journal last, and the claim is released.

    Raises:
      OutputError: another search_resume on this machine is making it.
    """
    generation = self._take()
    staged = journal_gcs.staging_dir(self.new)
    shutil.rmtree(staged, ignore_errors=True)  # a killed copy's, or an older job's at this URL
    copy(staged)
    records = _records(os.path.join(staged, "journal.jsonl"))
    for name in sorted(os.listdir(staged)):
      if name.isdigit() and os.path.isdir(os.path.join(staged, name)):
        workspace.upload_trial(os.path.join(staged, name), storage.join(self.new, name))
    for record in records:
      try:
        storage.create_bytes(self.journal.entry(record["seq"]),
                             json.dumps(record, separators=(",", ":")).encode("utf-8") + b"\n")
      except StorageExistsError:
        pass  # the killed copy's own entry: the claim kept every other writer out
    workspace.GcsWorkspace(self.new).adopt(records)  # its trials' checkpoints go on there
    _release(self.claim, generation)

  def _take(self) -> int:
    """Creates the claim, or takes over that of a copy whose process is gone; its generation."""
    mine = json.dumps({"previous": self.previous, "host": socket.gethostname(),
                       "pid": os.getpid()}).encode("utf-8")
    g = storage.parse_gcs(self.claim)
    blob = storage.client().bucket(g.bucket).blob(g.name)
    claim = self._claim()
    if claim is None:
      condition = 0
    else:
      (held, condition) = claim
      if held.get("host") == socket.gethostname() and process_alive(held.get("pid")):
        raise OutputError(f"another search_resume (pid {held['pid']}) is making {self.new};"
                          " wait for it")
    from google.api_core import exceptions  # pylint: disable=g-import-not-at-top
    try:
      blob.upload_from_string(mine, if_generation_match=condition)
    except exceptions.PreconditionFailed:
      raise OutputError(f"another search_resume is making {self.new} (it claimed it as this one"
                        " did); wait for it") from None
    return blob.generation


def _release(claim: str, generation: int) -> None:
  g = storage.parse_gcs(claim)
  storage.client().bucket(g.bucket).blob(g.name).delete(if_generation_match=generation)


def _records(path: str) -> list[dict[str, Any]]:
  """The local copy's journal records (the staging folder keeps none: the bucket's is the job's)."""
  with open(path, encoding="utf-8") as f:
    records = [json.loads(line) for line in f if line.strip()]
  os.remove(path)
  return records


def process_alive(pid: Any) -> bool:
  """A process `pid` other than this one runs on this machine (a claim's holder: local copies
  ask the same of theirs)."""
  if not isinstance(pid, int) or pid == os.getpid():
    return False
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True
