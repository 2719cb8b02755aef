"""Flag checks that need no TensorFlow: a command runs them before `nascli.frameworks.load()`.

Importing TensorFlow and Model Garden takes 15-40 s and ~900 MB; a value that is wrong whatever
the model (an unknown name, a number out of range, a missing local file) is refused here first,
in about a second, with the same one line the later check would print. gs:// paths are left to
the later checks, which read the bucket anyway.
"""

import difflib
import math
import os
import re
from typing import Iterable

from nascli import storage
from nascli.errors import NascliError, OutputError


def closest(value: str, known: Iterable[str]) -> str:
  """` (did you mean 'x'?)` for the known value nearest to `value`, or ''."""
  match = difflib.get_close_matches(str(value), [str(k) for k in known], n=1)
  return f" (did you mean '{match[0]}'?)" if match else ""


def one_of(value: str, allowed: Iterable[str], flag: str) -> str:
  """`value` if it is one of `allowed` (listed in their order in the error)."""
  allowed = list(allowed)
  if value not in allowed:
    raise NascliError(f"unknown {flag} {value!r}{closest(value, allowed)}; known:"
                      f" {', '.join(allowed)}")
  return value


def int_range(value: int | None, flag: str, low: int | None = None, high: int | None = None,
              allowed: str | None = None) -> int | None:
  """`value` (None passes) if low <= value <= high; `allowed` words the range in the error."""
  if value is None:
    return None
  if (low is not None and value < low) or (high is not None and value > high):
    if allowed is None:
      allowed = (f"{low} to {high}" if low is not None and high is not None else
                 f"{low} or more" if low is not None else f"{high} or less")
    raise NascliError(f"{flag} {value} is out of range; allowed: {allowed}")
  return value


def existing_path(value: str | None, flag: str, kind: str = "any") -> str | None:
  """`value` (None and gs:// pass) if it exists locally as `kind`: "any", "file" or "dir"."""
  if value is None or storage.is_gcs(value):
    return value
  if not os.path.exists(value):
    raise NascliError(f"{flag} {value} does not exist")
  if kind == "file" and not os.path.isfile(value):
    raise NascliError(f"{flag} {value} is not a file")
  if kind == "dir" and not os.path.isdir(value):
    raise NascliError(f"{flag} {value} is not a folder")
  return value


def not_a_file(value: str | None, flag: str) -> str | None:
  """`value` unless it is an existing local file where a folder is to be written."""
  if value and not storage.is_gcs(value) and os.path.exists(value) and not os.path.isdir(value):
    raise OutputError(f"{flag} {value} is a file")
  return value


def writable_file(value: str | None, flag: str) -> str | None:
  """`value` if a file can be written there: not a folder, in a folder that exists."""
  if not value or storage.is_gcs(value):
    return value
  if os.path.isdir(value):
    raise OutputError(f"{flag} {value} is a folder; give a file name")
  parent = os.path.dirname(os.path.abspath(value))
  if not os.path.isdir(parent):
    raise OutputError(f"{flag} {value}: folder {os.path.dirname(value) or parent} does not"
                      " exist")
  return value


def matches_files(pattern: str | None, flag: str) -> str | None:
  """`pattern` (comma-separated globs) if each local part matches a file."""
  for part in (p.strip() for p in (pattern or "").split(",")):
    if part and not storage.is_gcs(part) and not storage.glob(part):
      raise NascliError(f"{flag} {part} matches no files")
  return pattern


def dataset_dir(value: str | None, flag: str = "--dataset_dir") -> str | None:
  """A local folder `nascli convert-data` wrote (it holds dataset_info.json)."""
  if value is None or storage.is_gcs(value):
    return value
  existing_path(value, flag, "dir")
  if not os.path.exists(os.path.join(value, "dataset_info.json")):
    raise NascliError(f"{flag} {value} has no dataset_info.json (write it with"
                      " `nascli convert-data`)")
  return value


# `model_checkpoint_path: "ckpt-300"` in a CheckpointManager's `checkpoint` file (a text proto).
_LATEST = re.compile(r'^model_checkpoint_path:\s*"(.*)"\s*$', re.M)


def has_checkpoint(folder: str) -> bool:
  """Whether tf.train.latest_checkpoint(folder) finds one: the `checkpoint` file names a
  prefix whose index file exists. A name with text-proto escapes is left to TensorFlow."""
  try:
    with open(os.path.join(folder, "checkpoint"), encoding="utf-8") as f:
      match = _LATEST.search(f.read())
  except (OSError, UnicodeDecodeError):
    return False
  if not match:
    return False
  prefix = match.group(1)
  if "\\" in prefix:
    return True
  return os.path.exists(os.path.join(folder, prefix) + ".index")


def checkpoint(model_dir: str | None, checkpoint_path: str | None) -> None:
  """Refuses a local checkpoint (a prefix or a folder; default: the latest in `model_dir`)
  that tf_vision.eval_lib.resolve_checkpoint would not find, with its words."""
  target = checkpoint_path or model_dir
  if not target or storage.is_gcs(target):
    return
  if os.path.isdir(target):
    if not has_checkpoint(target):
      raise NascliError(f"no checkpoint in {target}")
  elif not os.path.exists(target + ".index"):
    raise NascliError(f"checkpoint {target} does not exist (no {target}.index)")


def model_dir(value: str | None, flag: str = "--model_dir") -> str | None:
  """A local model dir a later command reads: a folder holding the run's params.yaml."""
  if value is None or storage.is_gcs(value):
    return value
  existing_path(value, flag, "dir")
  if not os.path.exists(os.path.join(value, "params.yaml")):
    raise NascliError(f"{value} has no params.yaml (not a nascli/Model Garden model dir)")
  return value


def env_seconds(name: str, default: float) -> float:
  """The positive, finite number of seconds the environment variable `name` gives, else
  `default` (a tuning knob, not a flag: a bad value falls back instead of stopping)."""
  try:
    value = float(os.environ.get(name, default))
  except ValueError:
    return default
  return value if value > 0 and math.isfinite(value) else default
