"""The Ray executor that the Ray flags of `search`, `search_resume` and the proxy-task commands
describe (the flags themselves are declared with the search's, in search_flags.py), and their
check."""

import json
import os
from typing import Any

from nascli.errors import NascliError

def runtime_env(text: str | None, image: str | None) -> dict | None:
  """--runtime_env as JSON text or a JSON file; --container_image adds Ray's image_uri."""
  env = None
  if text:
    source = "--runtime_env"
    if os.path.isfile(text):
      source = text
      with open(text, encoding="utf-8") as fh:
        text = fh.read()
    try:
      env = json.loads(text)
    except ValueError as e:
      raise NascliError(f"{source}: not valid JSON ({e})") from e
    if not isinstance(env, dict):
      raise NascliError(f"{source}: expected a JSON object, got {type(env).__name__}")
  if image:
    env = dict(env or {}, image_uri=image)
  return env


def check(values: dict[str, Any]) -> dict | None:
  """Refuses bad Ray flags (a command's `locals()`) before Ray is imported; returns the
  runtime_env they give."""
  if values["max_trial_retries"] < 0:
    raise NascliError(f"--max_trial_retries must not be negative, got"
                      f" {values['max_trial_retries']}")
  for name in ("num_cpus_per_trial", "num_gpus_per_trial"):
    if not values[name] >= 0:
      raise NascliError(f"--{name} must not be negative, got {values[name]}")
  return runtime_env(values["runtime_env"], values["container_image"])


def executor(values: dict[str, Any], env: dict | None):
  """The Ray executor the flags describe (imports Ray)."""
  from nascli.search import ray_executor  # pylint: disable=g-import-not-at-top
  return ray_executor.ray_executor(
      values["trial_isolation"], values["ray_address"],
      num_cpus_per_trial=values["num_cpus_per_trial"],
      num_gpus_per_trial=values["num_gpus_per_trial"], runtime_env=env,
      local_num_cpus=values["ray_num_cpus"], local_temp_dir=values["ray_temp_dir"],
      max_trials_per_worker=values["max_trials_per_worker"],
      trial_timeout=values["trial_timeout"])
