"""What the proxy-task commands read of a finished trial, without TensorFlow: its validation
curve (tf_vision.train_lib.CURVE_FILE, one line per evaluation) and its training speed."""

from __future__ import annotations

import json
import math
from typing import Any

from nascli import storage
from nascli.proxy import correlation

CURVE_FILE = "validation_curve.jsonl"  # tf_vision.train_lib.CURVE_FILE (a test asserts it)
ANALYSIS_FILE = "model_analysis.json"  # nascli.search.trial.ANALYSIS


def _lines(path: str) -> list[dict[str, Any]]:
  if not storage.exists(path):
    return []
  out = []
  for line in storage.read_text(path).splitlines():
    try:
      item = json.loads(line)
    except ValueError:
      continue  # a line cut by a kill: the evaluation is made again on resume
    if isinstance(item, dict) and isinstance(item.get("step"), int):
      out.append(item)
  return out


def read_curve(trial_dir: str, metric: str) -> correlation.Curve | None:
  """(steps, values) of `metric` at each evaluation, a step evaluated twice keeping its last
  value; None when the trial wrote no curve."""
  last: dict[int, float] = {}
  for item in _lines(storage.join(trial_dir, CURVE_FILE)):
    value = item.get(metric)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
      last[item["step"]] = float(value)
  if not last:
    return None
  steps = sorted(last)
  return [float(s) for s in steps], [last[s] for s in steps]


def seconds_per_step(trial_dir: str) -> float | None:
  """The trial's steady training seconds per step (model_analysis timing: no start-up, tracing
  or evaluation), None without a measurement."""
  path = storage.join(trial_dir, ANALYSIS_FILE)
  if not storage.exists(path):
    return None
  try:
    analysis = json.loads(storage.read_text(path))
  except ValueError:
    return None
  seconds = (analysis.get("timing") or {}).get("train_steps_s")
  trained = (analysis.get("step") or 0) - (analysis.get("resumed_from") or 0)
  if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or trained <= 0:
    return None
  return float(seconds) / trained
