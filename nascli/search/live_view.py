"""What a running search shows on stderr: the live table on a terminal; elsewhere (a log, CI) a
progress line at a steady pace and one line per trial."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from rich.console import RenderableType

from nascli import console
from nascli.search import attempts
from nascli.search import journal as journal_lib
from nascli.search import summary

from nascli.search.search_args import SearchArgs

stderr = console.stderr()


def title(args: SearchArgs, space_name: str, state: journal_lib.JobState) -> str:
  return summary.title(args.job_dir, space_name, args.search_algorithm, state)


def table(args: SearchArgs, space_name: str, metric: str, state: journal_lib.JobState,
           running: dict[str, attempts.Running], titled: bool = True) -> RenderableType:
  """The table and the latency notes under it (nascli/search/summary.py)."""
  return summary.table(args.job_dir, space_name, args.search_algorithm, metric, state, running,
                       titled)



class Progress:
  """The progress line a search prints on stderr off a terminal, where no live table shows:
  trials done/total, the running trials with their step and loss (from their
  train_metrics.jsonl), the best reward so far, elapsed time and ETA."""

  def __init__(self, loop: Any):  # the SearchLoop: its args, work_dir and running attempts
    self.loop = loop
    self.interval = console.progress_seconds()
    self.begin = time.monotonic()
    self.last = self.begin
    self.durations: list[float] = []  # wall times of attempts that ended in this run

  def report(self, state: journal_lib.JobState, force: bool = False) -> None:
    if stderr.is_terminal:
      return
    now = time.monotonic()
    if not force and now - self.last < self.interval:
      return
    self.last = now
    console.whole(stderr).print(self.line(state, now), highlight=False, markup=False)

  def line(self, state: journal_lib.JobState, now: float) -> str:
    loop, a = self.loop, self.loop.args
    done = state.trial_ids(*journal_lib.TRAINED_FINAL_STATUSES)
    failed = len(state.trial_ids(*journal_lib.FAILED_STATUSES))
    skipped = len(state.trial_ids(journal_lib.OVER_TARGET))
    text = f"progress: {len(done)}/{a.max_nas_trial} trials done"
    text += f" ({failed} failed)" if failed else ""
    text += f"; {skipped} proposal(s) over the latency target, not trained" if skipped else ""
    running = list(loop._running.values())  # pylint: disable=protected-access
    if running:
      text += "; running " + ", ".join(
          f"{r.trial_id} ({train_progress(os.path.join(loop.work_dir, r.trial_id))})"
          for r in running)
    best = state.best()
    if best is not None:
      text += f"; best reward {state.rewards[best]:.4f} (trial {best})"
    text += f"; elapsed {duration(now - self.begin)}"
    eta = self.eta(state, running, now)
    return text + (f", ETA {duration(eta)}" if eta is not None else "")

  def eta(self, state: journal_lib.JobState, running: list[attempts.Running],
          now: float) -> float | None:
    """The trials still to run times the mean wall time of a trial, over the trials at once."""
    durations = self.durations or [
        m["wall_s"] for m in state.metrics.values() if isinstance(m.get("wall_s"), (int, float))]
    if not durations:
      return None
    mean = sum(durations) / len(durations)
    todo = max(0, self.loop.args.max_nas_trial
               - len(state.trial_ids(*journal_lib.TRAINED_FINAL_STATUSES)))
    work = todo * mean - sum(min(now - r.started, mean) for r in running)
    return max(0.0, work / max(1, self.loop.args.max_parallel_nas_trial))

  def ended(self, run: attempts.Running) -> None:
    self.durations.append(time.monotonic() - run.started)


def train_progress(trial_dir: str) -> str:
  """`step 40, loss 0.513` from the last line of the trial's train_metrics.jsonl, else
  `starting` (its process loads TensorFlow and builds the model before the first step)."""
  try:
    with open(os.path.join(trial_dir, "train_metrics.jsonl"), "rb") as f:
      f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
      lines = f.read().decode("utf-8", "replace").strip().splitlines()
    last = json.loads(lines[-1]) if lines else {}
  except (OSError, ValueError):
    last = {}
  if not isinstance(last, dict) or "step" not in last:
    return "starting"
  loss = last.get("loss")
  return f"step {last['step']}" + (f", loss {loss:.4g}" if isinstance(loss, float) else "")


def duration(seconds: float) -> str:
  seconds = int(round(seconds))
  if seconds < 60:
    return f"{seconds}s"
  if seconds < 3600:
    return f"{seconds // 60}m{seconds % 60:02d}s"
  return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class PlainDisplay:
  """Live's interface for a non-terminal: updates are not redrawn."""

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False

  def update(self, renderable) -> None:
    del renderable


def trial_line(state: journal_lib.JobState, trial_id: str, metric: str = "accuracy") -> str:
  return summary.trial_line(state, trial_id, metric)  # its latency with its source
