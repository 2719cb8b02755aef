"""search_resume's copy into a gs:// job dir (nascli/search/resume_gcs.py) on the GCS emulator,
without a search: made whole or not at all, a killed copy made again, a live one refused, the
claim released only by the copy that holds it. The search after it: tests/test_gcs_search.py
(slow tier)."""

import json
import os
import subprocess

import pytest

from nascli import storage
from nascli.errors import OutputError
from nascli.search import journal_gcs
from nascli.search import resume_gcs
from nascli.search import workspace
from nascli.search.journal_file import make_record

PREVIOUS = "/jobs/old"
EVENTS = [make_record({"event": "search_started", "settings": {}, "fingerprint": "f"}, 1),
          make_record({"event": "proposed", "trial_id": "1", "dna": [0]}, 2),
          make_record({"event": "resumed_from", "previous_job_dir": PREVIOUS}, 3)]


@pytest.fixture
def target(gcs_prefix, tmp_path, monkeypatch):
  monkeypatch.setenv("NASCLI_CACHE_DIR", str(tmp_path / "cache"))
  return resume_gcs.Target(storage.join(gcs_prefix, "new"), PREVIOUS)


def _copy(into):
  """What resume._copy leaves: the trial folders and the journal with `resumed_from` last."""
  os.makedirs(os.path.join(into, "1"))
  with open(os.path.join(into, "1", "job_status.json"), "w", encoding="utf-8") as f:
    f.write('{"status": "interrupted"}')
  with open(os.path.join(into, "1", "ckpt-10.index"), "wb") as f:
    f.write(b"checkpoint")
  with open(os.path.join(into, "journal.jsonl"), "w", encoding="utf-8") as f:
    f.writelines(json.dumps(e) + "\n" for e in EVENTS)


def test_a_copy_is_a_job_only_once_whole(target):
  assert not target.made() and not target.holds_other()
  seen = []

  def copy_then_look(into):
    _copy(into)
    seen.append((target.made(), target.holds_other(), storage.exists(target.claim)))

  target.make(copy_then_look)
  assert seen == [(False, False, True)]  # under way: claimed, not a job
  assert target.made() and not storage.exists(target.claim)
  assert journal_gcs.GcsJournal(target.new).events() == EVENTS
  assert sorted(storage.list_names(target.new)) == [
      "1/ckpt-10.index", "1/job_status.json", "journal/0000000001.json",
      "journal/0000000002.json", "journal/0000000003.json"]
  # The staging folder is the new job's: its trials go on from their checkpoints there.
  ws = workspace.GcsWorkspace(target.new)
  ws.prepare(EVENTS)
  assert sorted(os.listdir(os.path.join(ws.work_dir, "1"))) == ["ckpt-10.index",
                                                                "job_status.json"]
  assert not os.path.exists(os.path.join(ws.work_dir, "journal.jsonl"))


def test_a_killed_copy_is_made_again_and_a_live_one_refused(target):
  dead = subprocess.Popen(["true"])
  dead.wait()
  claim = {"previous": PREVIOUS, "host": os.uname().nodename, "pid": dead.pid}
  storage.create_bytes(target.claim, json.dumps(claim).encode())
  first = json.dumps(EVENTS[0], separators=(",", ":")).encode() + b"\n"
  storage.create_bytes(journal_gcs.GcsJournal(target.new).entry(1), first)
  storage.write_text(storage.join(target.new, "1", "stale.tmp"), "x")
  assert not target.made() and not target.holds_other()  # its own unfinished copy
  assert resume_gcs.Target(target.new, "/jobs/another").holds_other()
  live = subprocess.Popen(["sleep", "60"])
  try:
    storage.write_text(target.claim, json.dumps({**claim, "pid": live.pid}))
    with pytest.raises(OutputError, match=rf"another search_resume \(pid {live.pid}\) is making"):
      target.make(_copy)
  finally:
    live.kill()
    live.wait()
  target.make(_copy)  # its holder is gone: taken over, made whole
  assert target.made() and journal_gcs.GcsJournal(target.new).events() == EVENTS
  assert "1/stale.tmp" not in storage.list_names(target.new)


def test_a_claim_taken_by_another_copy_meanwhile_stops_this_one(target):
  """Two copies that both saw no claim: the second create fails on its precondition."""

  def rival_claims_first(into):
    del into
    raise AssertionError("never reached")

  storage.create_bytes(target.claim, json.dumps({"previous": PREVIOUS, "host": "elsewhere",
                                                  "pid": 1}).encode())
  generation = storage.client().bucket(storage.parse_gcs(target.claim).bucket).get_blob(
      storage.parse_gcs(target.claim).name).generation
  # The rival rewrites its claim between our look and our take-over.
  real = target._claim  # pylint: disable=protected-access

  def stale_look():
    found = real()
    storage.write_text(target.claim, json.dumps({"previous": PREVIOUS, "host": "elsewhere",
                                                 "pid": 2}))
    return found

  target._claim = stale_look  # pylint: disable=protected-access
  with pytest.raises(OutputError, match="another search_resume is making"):
    target.make(rival_claims_first)
  assert generation != real()[1]
