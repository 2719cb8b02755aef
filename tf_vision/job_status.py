"""`job_status.json`: how a run ended, in the trial-directory vocabulary of DESIGN.md section 5."""

import datetime
import json
import os

COMPLETED = "completed"
FAILED = "failed"
FAILED_WITH_NAN = "failed_with_nan"
INFEASIBLE = "infeasible"
# A signal (Ctrl-C, SIGTERM) stopped the run; `checkpoint_step` is where a rerun resumes.
INTERRUPTED = "interrupted"
RUNNING = "running"
# Early stopping: a run that stopped at its `stop_at_step`, short of train_steps (resumable; a
# search trial's rung report), and a trial the search's scheduler then stopped (final).
PAUSED = "paused"
STOPPED = "stopped"


def write(model_dir: str, status: str, **fields) -> dict:
  """Atomically writes the status file; returns what was written."""
  entry = {"status": status,
           "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           **fields}
  os.makedirs(model_dir, exist_ok=True)
  path = os.path.join(model_dir, "job_status.json")
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(entry, f, indent=2)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)
  return entry


def read(model_dir: str) -> dict | None:
  try:
    with open(os.path.join(model_dir, "job_status.json"), encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError):
    return None
