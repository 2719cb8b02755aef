"""A trial's attempt as the loop sees it: its record while it runs, the slot it takes, and what
it leaves for the next attempt."""

from __future__ import annotations

import dataclasses
from typing import Any

from nascli.search import trial as trial_lib

def checkpointed(trial_dir: str) -> dict[str, int]:
  """{"step": S} of the attempt's latest checkpoint where one is here: the work an interrupted or
  lost attempt leaves for the next one (scheduler.compute_spent counts it)."""
  step = trial_lib.checkpoint_step(trial_dir)
  return {} if step is None else {"step": step}


def take_slot(free: list[Any], last: Any = None) -> Any:
  """Takes a free slot for a trial's attempt: `last`, the slot of its previous attempt, when it
  is free (its warm worker may hold the trial in memory, paused at a rung), else the first."""
  if last is not None and last in free:
    free.remove(last)
    return last
  return free.pop(0)



@dataclasses.dataclass
class Running:
  trial_id: str
  handle: Any
  slot: Any
  started: float  # time.monotonic() when the attempt's process was started
  journaled: bool = False  # its `started` event is in the journal
  node: dict[str, str] | None = None  # the Ray node it ran on, once it ended (Outcome.node)


def retries_spent(lost: int, retries: int, why: str) -> str:
  """The reason of a trial failed for the attempts it lost."""
  return f"lost {lost} attempts (--max_trial_retries {retries}): {why}"[:500]
