"""What a model dir holds besides checkpoints, and how a later command reads a run back.

`params.yaml` is Model Garden's final config; `nascli_run.json` records which registered
experiment it was built from, because params.yaml alone cannot be re-read into the right config
classes.
"""

import json
import os

import tensorflow as tf

from nascli.errors import NascliError
from official.core import config_definitions as cfg

def load_params(model_dir: str, experiment: str | None = None) -> cfg.ExperimentConfig:
  """The config a run saved (params.yaml), re-read through its registered experiment."""
  from tf_vision import params as params_lib  # pylint: disable=g-import-not-at-top
  path = os.path.join(model_dir, "params.yaml")
  if not os.path.exists(path):
    raise NascliError(f"{model_dir} has no params.yaml (not a nascli/Model Garden model dir)")
  run_info = read_run_info(model_dir)
  name = experiment or run_info.get("experiment")
  if not name:
    raise NascliError(f"{model_dir} does not say which experiment it ran; pass --experiment")
  params = params_lib.load_experiment(name)
  params_lib.apply_override(params, params_lib.load_yaml_source(path, "params.yaml"),
                            f"{path}")
  return params


RUN_INFO_FILE = "nascli_run.json"


def read_run_info(model_dir: str) -> dict:
  try:
    with open(os.path.join(model_dir, RUN_INFO_FILE), encoding="utf-8") as f:
      return json.load(f)
  except (OSError, ValueError):
    return {}


def write_run_info(model_dir: str, info: dict) -> None:
  tf.io.gfile.makedirs(model_dir)
  path = os.path.join(model_dir, RUN_INFO_FILE)
  tmp = f"{path}.{os.getpid()}.tmp"  # Workers sharing a model dir each write it whole.
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(info, f, indent=2)
  os.replace(tmp, path)


