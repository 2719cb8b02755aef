"""Reading back the THOR-style `log` that `nascli train` writes in its model dir, and starting
a training that a test stops once that log has reached a step."""

import os
import subprocess
import sys
import time
from pathlib import Path


def log_steps(model_dir, steps_per_epoch: int) -> list[int]:
  """The global step of each line of `model_dir/log` (`epoch: E step: S, ...`, S within E)."""
  steps = []
  with open(os.path.join(model_dir, "log"), encoding="utf-8") as f:
    for line in f:
      epoch, rest = line.split(" step: ")
      steps.append((int(epoch.split()[1]) - 1) * steps_per_epoch + int(rest.split(",")[0]))
  return steps


def train_until_logged(args, model_dir, lines: int, seconds: float,
                       stderr=subprocess.DEVNULL) -> subprocess.Popen:
  """Starts `nascli ARGS` and returns it once `model_dir/log` has `lines` lines (or once it
  ended, or `seconds` passed): the moment a test interrupts or kills it."""
  proc = subprocess.Popen([sys.executable, "-m", "nascli", *args], stdout=subprocess.DEVNULL,
                          stderr=stderr, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  log = Path(model_dir) / "log"
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline and proc.poll() is None:
    if log.exists() and len(log.read_text().splitlines()) >= lines:
      break
    time.sleep(0.05)
  return proc
