"""A trial dir as the driver reads and marks it: checkpoint, outcome written, interrupted, stopped."""

import json
import os
import re
import signal
from typing import Any

from nascli.errors import NascliError

ANALYSIS = "model_analysis.json"
# job_status.json of an attempt that nascli's own code around the trial broke (a bug, or the
# disk): not the trial's failure. The driver stops the search (`check_attempt`); the trial runs
# again when it resumes.
NASCLI_ERROR = "nascli_error"
_CHECKPOINT_PATH = re.compile(r'^model_checkpoint_path:\s*"[^"]*?(\d+)"\s*$', re.M)


def checkpoint_step(trial_dir: str) -> int | None:
  """The step of the trial's latest checkpoint, from TensorFlow's `checkpoint` index file (read
  as text: the driver marks interrupted trials without loading TensorFlow)."""
  try:
    with open(os.path.join(trial_dir, "checkpoint"), encoding="utf-8") as f:
      match = _CHECKPOINT_PATH.search(f.read())
  except OSError:
    return None
  return int(match.group(1)) if match else None


def _analysis_of(trial_dir: str, status: dict[str, Any]) -> bool:
  """model_analysis.json is there and reports the attempt `status` describes (the same step
  and rung): the analysis an earlier rung left is not this attempt's outcome."""
  try:
    with open(os.path.join(trial_dir, ANALYSIS), encoding="utf-8") as f:
      analysis = json.load(f)
  except (OSError, ValueError):
    return False
  return (isinstance(analysis, dict) and analysis.get("step") == status.get("step")
          and analysis.get("rung") == status.get("rung"))


def completed(trial_dir: str) -> bool:
  """The trial in `trial_dir` ran to its end: job_status.json says so and its analysis is
  written, for that step (training alone writes `completed` before the export and the latency,
  when an earlier rung's analysis may still be there)."""
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  status = job_status.read(trial_dir) or {}
  return status.get("status") == job_status.COMPLETED and _analysis_of(trial_dir, status)


def reported(trial_dir: str) -> bool:
  """The attempt in `trial_dir` ended with its outcome written: completed, or (early stopping)
  its rung's report (training alone writes `paused` before the latency and the analysis)."""
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  status = job_status.read(trial_dir) or {}
  return completed(trial_dir) or (status.get("status") == job_status.PAUSED and "rung" in status
                                  and _analysis_of(trial_dir, status))


def mark_interrupted(trial_dir: str, signum: int) -> bool:
  """Records in job_status.json that the attempt was interrupted (its resume step: the latest
  checkpoint's), unless training already did so; True if it wrote. An attempt stopped after
  training wrote `completed` is interrupted too: the trial is done only with its analysis."""
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  if (job_status.read(trial_dir) or {}).get("status") == job_status.INTERRUPTED:
    return False
  step = checkpoint_step(trial_dir)
  job_status.write(trial_dir, job_status.INTERRUPTED, step=step, checkpoint_step=step,
                   signal=signal.Signals(signum).name)
  return True


def mark_stopped(trial_dir: str, reason: str) -> None:
  """Records in job_status.json that the scheduler stopped the trial after the rung its
  `paused` status reports (its step, reward and metrics stay)."""
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  status = {k: v for k, v in (job_status.read(trial_dir) or {}).items()
            if k not in ("status", "time", "final", "reason")}
  job_status.write(trial_dir, job_status.STOPPED, **status, reason=reason)


class NascliBug(RuntimeError):
  """nascli's own code around a trial raised in the trial's process: a bug in nascli, not the
  architecture's failure. The search stops with one line; the trial's traceback is a note,
  printed with NASCLI_DEBUG=1."""


def check_attempt(trial_id: str, status: dict[str, Any]) -> None:
  """Raises when the attempt's job_status.json says nascli's own code around the trial broke
  (NASCLI_ERROR): the driver stops the search instead of charging the trial a failure.

  Raises:
    NascliBug: a bug in nascli (the trial's traceback attached as a note).
    NascliError: the environment (a file that could not be written, a full disk).
  """
  if status.get("status") != NASCLI_ERROR:
    return
  reason, again = status.get("reason") or "unknown error", (
      f"trial {trial_id} runs again when the search resumes")
  if not status.get("bug"):
    raise NascliError(f"trial {trial_id}: {reason} (not the trial's failure: the search stops;"
                      f" {again})")
  error = NascliBug(f"trial {trial_id}: {reason}, in nascli's own code around the trial: a bug"
                    f" in nascli, not the architecture's failure (the search stops; {again})")
  if status.get("traceback"):
    error.add_note(f"trial {trial_id}'s traceback:\n{status['traceback'].rstrip()}")
  raise error
