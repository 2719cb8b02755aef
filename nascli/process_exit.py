"""Ends a process that trained without the interpreter's teardown.

tf.data's autotuning thread (TensorFlow's `Model::OptimizeLoop`) sleeps between rounds for a
period that doubles from 10 ms to 60 s, and destroying an iterator waits for it. A training
iterator lives as long as the run, so at interpreter shutdown its destruction held `nascli
train` (and every search trial process) 15-60 s after its results were written
(BENCHMARKS.md, THOR section: 8 of 40 runs). By the time a command returns, everything it
writes is on disk: checkpoints are written synchronously, Orbit flushes its summary writers
after every loop and evaluation, the final evaluation's writer is flushed when its context
exits, and job_status.json and the log are closed files. What is left is flushed here.
"""

import logging
import os
import sys

_requested = False


def request() -> None:
  """Called by code that starts a training run in this process."""
  global _requested  # pylint: disable=global-statement
  _requested = True


def finish(code: int) -> None:
  """Exits with `code`: at once (streams flushed) if a run trained here, else normally."""
  if not _requested:
    sys.exit(code)
  logging.shutdown()
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):  # closed or a broken pipe: nothing more can reach it
      pass
  os._exit(code)  # pylint: disable=protected-access
