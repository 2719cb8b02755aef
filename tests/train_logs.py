"""Reading back the THOR-style `log` that `nascli train` writes in its model dir."""

import os


def log_steps(model_dir, steps_per_epoch: int) -> list[int]:
  """The global step of each line of `model_dir/log` (`epoch: E step: S, ...`, S within E)."""
  steps = []
  with open(os.path.join(model_dir, "log"), encoding="utf-8") as f:
    for line in f:
      epoch, rest = line.split(" step: ")
      steps.append((int(epoch.split()[1]) - 1) * steps_per_epoch + int(rest.split(",")[0]))
  return steps
