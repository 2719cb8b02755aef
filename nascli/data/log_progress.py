"""Progress for logs: without a terminal, a plain line at a steady pace instead of a Rich bar.

A Rich progress bar draws nothing when stderr is a file or a pipe, so a long conversion or
download in CI or under `nohup` would be silent for minutes; these lines say how far it got.
"""

import time

from nascli import console

def clock(seconds: float) -> str:
  """H:MM:SS."""
  seconds = int(round(seconds))
  return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Pacer:
  """Says when the next line is due, and how fast things went since the start."""

  def __init__(self):
    self.every = console.progress_seconds()
    self.start = self.last = time.monotonic()

  def due(self) -> bool:
    now = time.monotonic()
    if now - self.last < self.every:
      return False
    self.last = now
    return True

  def elapsed(self) -> float:
    return time.monotonic() - self.start

  def eta(self, done: float, total: float) -> str:
    rate = done / max(self.elapsed(), 1e-9)
    return clock((total - done) / rate) if rate > 0 else "unknown"
