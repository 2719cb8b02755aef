"""PAI FastNN's hyperparameter keys and their `key=value` file, without importing TensorFlow.

The command line builds one option per key from `FASTNN_KEYS` at start-up, so this module must
stay light; the mapping onto a Model Garden config is in `fastnn.py`.
"""

import dataclasses
import math
import os
from typing import Any, Callable

from nascli import checks
from nascli.errors import NascliError

# FastNN's learning-rate decay types and schemes (semantics in tf_vision/optimization/schedules.py).
DECAY_TYPES = ("fixed", "exponential", "polynomial")
DECAY_SCHEMES = ("", "luong234", "luong5", "luong10")


@dataclasses.dataclass(frozen=True)
class HparamSpec:
  """Type, FastNN default and allowed values of one key."""
  type: type
  default: Any
  optional: bool = False  # `None` (written `None` or left empty) is a value.
  choices: tuple[str, ...] | None = None


_OPTIMIZER_NAMES = ("adadelta", "adagrad", "adam", "ftrl", "momentum", "sgd", "rmsprop",
                    "adamweightdecay")
_HOOKS_DEFAULT = "StopAtStepHook,ProfilerHook,LoggingTensorHook,CheckpointSaverHook"

FASTNN_KEYS: dict[str, HparamSpec] = {
    # Dataset.
    "dataset_name": HparamSpec(str, "mock"),
    "dataset_dir": HparamSpec(str, None, optional=True),
    "num_sample_per_epoch": HparamSpec(int, 1000000),
    "num_classes": HparamSpec(int, 100),
    "train_files": HparamSpec(str, None, optional=True),
    "eval_files": HparamSpec(str, None, optional=True),
    # Preprocessing and input pipeline.
    "preprocessing_name": HparamSpec(str, None, optional=True),
    "shuffle_buffer_size": HparamSpec(int, 1024),
    "num_parallel_batches": HparamSpec(int, 8),
    "prefetch_buffer_size": HparamSpec(int, 32),
    "num_preprocessing_threads": HparamSpec(int, 16),
    "datasets_use_caching": HparamSpec(bool, False),
    "labels_offset": HparamSpec(int, 0),
    # Model.
    "task_type": HparamSpec(str, "pretrain", choices=("pretrain", "finetune")),
    "model_name": HparamSpec(str, "inception_resnet_v2"),
    "num_epochs": HparamSpec(int, 100),
    "weight_decay": HparamSpec(float, 0.00004),
    "max_gradient_norm": HparamSpec(float, None, optional=True),
    "batch_size": HparamSpec(int, 32),
    "model_dir": HparamSpec(str, ""),
    "ckpt_file_name": HparamSpec(str, None, optional=True),
    # Learning rate.
    "warmup_steps": HparamSpec(int, 0),
    "warmup_scheme": HparamSpec(str, "t2t"),
    "decay_scheme": HparamSpec(str, "", choices=DECAY_SCHEMES),
    "learning_rate_decay_factor": HparamSpec(float, 0.94),
    "learning_rate_decay_type": HparamSpec(str, "exponential", choices=DECAY_TYPES),
    "learning_rate": HparamSpec(float, 0.01),
    "end_learning_rate": HparamSpec(float, 0.0001),
    # Optimizer.
    "optimizer": HparamSpec(str, "rmsprop", choices=_OPTIMIZER_NAMES),
    "adadelta_rho": HparamSpec(float, 0.95),
    "adagrad_initial_accumulator_value": HparamSpec(float, 0.1),
    "adam_beta1": HparamSpec(float, 0.9),
    "adam_beta2": HparamSpec(float, 0.999),
    "opt_epsilon": HparamSpec(float, 1.0),
    "ftrl_learning_rate_power": HparamSpec(float, -0.5),
    "ftrl_initial_accumulator_value": HparamSpec(float, 0.1),
    "ftrl_l1": HparamSpec(float, 0.0),
    "ftrl_l2": HparamSpec(float, 0.0),
    "momentum": HparamSpec(float, 0.9),
    "rmsprop_momentum": HparamSpec(float, 0.9),
    "rmsprop_decay": HparamSpec(float, 0.9),
    # Logging and checkpoints.
    "stop_at_step": HparamSpec(int, 100),
    "log_loss_every_n_iters": HparamSpec(int, 10),
    "profile_every_n_iters": HparamSpec(int, 0),
    "profile_at_task": HparamSpec(int, 0),
    "log_device_placement": HparamSpec(bool, False),
    "print_model_statistics": HparamSpec(bool, False),
    "log_trainable_vars_statistics": HparamSpec(bool, False),  # flags.py's name for the above.
    "hooks": HparamSpec(str, _HOOKS_DEFAULT),
    "save_checkpoints_steps": HparamSpec(int, 1000),
    # Performance.
    "use_fp16": HparamSpec(bool, True),
    "loss_scale": HparamSpec(float, 1.0),
    "enable_paisoar": HparamSpec(bool, True),
    "protocol": HparamSpec(str, "grpc"),
    # Cluster.
    "job_name": HparamSpec(str, "worker", optional=True, choices=("worker", "localhost")),
    "task_index": HparamSpec(int, 0),
    "worker_hosts": HparamSpec(str, None, optional=True),
}

# Keys that choose data, model and directories: the caller reads them from the dict.
CALLER_KEYS = frozenset({"dataset_name", "dataset_dir", "train_files", "eval_files",
                         "num_sample_per_epoch", "model_name", "model_dir", "ckpt_file_name",
                         "task_type"})

_BOOLS = {"True": True, "true": True, "1": True, "False": False, "false": False, "0": False}
_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string", bool: "True/False"}


def _choice_error(key: str, value: str, choices: tuple[str, ...]) -> str:
  shown = ", ".join(repr(c) for c in choices)
  return f"key '{key}' must be one of {shown}; got {value!r}{checks.closest(value, choices)}"


def coerce_value(key: str, raw: str) -> Any:
  """The typed value of `key` written as `raw` (ValueError with a message naming the key)."""
  spec = FASTNN_KEYS[key]
  if spec.optional and raw in ("", "None"):
    return None
  if spec.type is bool:
    if raw not in _BOOLS:
      raise ValueError(f"key '{key}' must be True/False/true/false/1/0, got {raw!r}")
    value = _BOOLS[raw]
  elif spec.type is int:
    try:
      value = int(raw)
    except ValueError:
      raise ValueError(f"key '{key}' must be an integer, got {raw!r}") from None
  elif spec.type is float:
    try:
      value = float(raw)
    except ValueError:
      raise ValueError(f"key '{key}' must be a number, got {raw!r}") from None
    if not math.isfinite(value):
      raise ValueError(f"key '{key}' must be a finite number, got {raw!r}")
  else:
    value = raw
  if spec.choices is not None and value not in spec.choices:
    raise ValueError(_choice_error(key, value, spec.choices))
  return value


_IS_TYPE: dict[type, Callable[[Any], bool]] = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
}


def _check_value(key: str, value: Any) -> Any:
  """A dict value (e.g. from a CLI option) checked like a file value; strings are parsed."""
  if key not in FASTNN_KEYS:
    raise NascliError(f"unknown FastNN key '{key}'{checks.closest(key, FASTNN_KEYS)}")
  spec = FASTNN_KEYS[key]
  try:
    if isinstance(value, str) and spec.type is not str:
      return coerce_value(key, value.strip())
    if value is None and spec.optional:
      return None
    if not _IS_TYPE[spec.type](value):
      raise ValueError(f"key '{key}' must be {_TYPE_WORDS[spec.type]}, got {value!r}")
    if spec.type is float:
      value = float(value)
      if not math.isfinite(value):
        raise ValueError(f"key '{key}' must be a finite number, got {value!r}")
    if spec.choices is not None and value not in spec.choices:
      raise ValueError(_choice_error(key, value, spec.choices))
  except ValueError as e:
    raise NascliError(f"FastNN {e}") from None
  return value


def _strip_comment(line: str) -> str:
  """Drops a `#` comment: a whole-line one, or one after whitespace (`a=1  # note`)."""
  if line.lstrip().startswith("#"):
    return ""
  for i, ch in enumerate(line):
    if ch == "#" and i > 0 and line[i - 1] in " \t":
      return line[:i]
  return line


def _unquote(value: str) -> str:
  if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
    return value[1:-1]
  return value


def parse_hparams_file(path: str | os.PathLike) -> dict[str, Any]:
  """Reads a FastNN hyperparameter file: one `key=value` per line.

  Blank lines and `#` comments are ignored; a leading `--` on a key (copied from a command
  line) is accepted; a string value may be quoted. Values are typed per `FASTNN_KEYS`.

  Args:
    path: the file.

  Returns:
    {key: typed value} for the keys the file sets, in file order.

  Raises:
    NascliError: one line naming the file, line number and key: a line without `=`, an
      unknown key (with the closest known key), a value of the wrong type or outside the
      allowed values, a duplicate key; or a file that cannot be read.
  """
  try:
    with open(path, encoding="utf-8-sig") as f:  # tolerate a BOM
      lines = f.read().splitlines()
  except FileNotFoundError:
    raise NascliError(f"hparams file {path} does not exist") from None
  except (OSError, UnicodeDecodeError) as e:
    raise NascliError(f"cannot read hparams file {path}: {' '.join(str(e).split())}") from None
  values: dict[str, Any] = {}
  first_line: dict[str, int] = {}
  for lineno, raw_line in enumerate(lines, start=1):
    line = _strip_comment(raw_line).strip()
    if not line:
      continue
    where = f"{path}:{lineno}"
    if "=" not in line:
      raise NascliError(f"{where}: expected key=value, got {line!r}")
    key, raw = (part.strip() for part in line.split("=", 1))
    if key.startswith("--"):
      key = key[2:]
    if not key:
      raise NascliError(f"{where}: missing key before '=' in {line!r}")
    if key not in FASTNN_KEYS:
      raise NascliError(f"{where}: unknown key '{key}'{checks.closest(key, FASTNN_KEYS)}")
    if key in first_line:
      raise NascliError(f"{where}: duplicate key '{key}' (first set on line {first_line[key]})")
    first_line[key] = lineno
    try:
      values[key] = coerce_value(key, _unquote(raw))
    except ValueError as e:
      raise NascliError(f"{where}: {e}") from None
  return values
