"""Exports a trained experiment as a SavedModel through Model Garden's exporter.

The export folder holds what is needed to serve the model and to rebuild it:

  export_dir/
    saved_model/   SavedModel with a `serving_default` signature
    checkpoint/    the weights that went into it (Model Garden's checkpoint copy)
    params.yaml    the experiment config (`train_utils.serialize_config`)

Everything is written into a hidden sibling folder that is renamed into place
only when complete, so a folder at `export_dir` is always a finished export.

The SavedModel is saved without per-layer Keras traces (`save_traces=False`,
what `model.save(save_traces=False)` does): the export is a `tf.Module` served
through its signatures, never reloaded as a Keras model, and tracing every
layer's call for Keras' reload metadata was 60 % of an export's time (10 s of
an mnasnet trial's 16 s on CPU; bench/bench_export.py).
"""

import copy
import os
import secrets
import shutil
from pathlib import Path
from typing import Callable, Sequence

import tensorflow as tf
import tf_keras
# No public switch for this in tf_keras 2.20; it is what Model.save passes down.
from tf_keras.src.saving.legacy.saved_model import utils as keras_saved_model_utils

from nascli.errors import NascliError, OutputError
from official.core import config_definitions as cfg
from official.core import registry
from official.vision.configs import image_classification as classification_cfg
from official.vision.configs import retinanet as retinanet_cfg
from official.vision.serving import detection
from official.vision.serving import export_base
from official.vision.serving import export_saved_model_lib
from official.vision.serving import image_classification
# nascli's backbones and task configs must be registered to rebuild the model.
from tf_vision import registry_imports  # noqa: F401  pylint: disable=unused-import

# Input types whose signatures Model Garden's vision ExportModule builds and
# `measure_latency` can feed (`tflite` takes preprocessed floats: not served).
INPUT_TYPES = ('image_tensor', 'image_bytes', 'tf_example')
SAVED_MODEL_SUBDIR = 'saved_model'
CHECKPOINT_SUBDIR = 'checkpoint'
PARAMS_FILE = 'params.yaml'

ExportModuleCls = Callable[..., export_base.ExportModule]

# Task config class -> Model Garden ExportModule class, as task_factory maps
# task config classes to Task classes.
_REGISTERED_EXPORT_MODULES: dict[type, ExportModuleCls] = {}


def register_export_module(task_config_cls: type):
  """Decorator registering an ExportModule class for a task config class."""
  return registry.register(_REGISTERED_EXPORT_MODULES, task_config_cls)


register_export_module(classification_cfg.ImageClassificationTask)(
    image_classification.ClassificationModule)
register_export_module(retinanet_cfg.RetinaNetTask)(detection.DetectionModule)


def get_export_module_cls(task_config: cfg.TaskConfig) -> ExportModuleCls:
  """The ExportModule class for a task config (subclasses use their base's)."""
  for cls in type(task_config).__mro__:
    if cls in _REGISTERED_EXPORT_MODULES:
      return registry.lookup(_REGISTERED_EXPORT_MODULES, cls)
  known = ', '.join(sorted(c.__name__ for c in _REGISTERED_EXPORT_MODULES))
  raise NascliError(f'no SavedModel export for task config '
                    f'{type(task_config).__name__}; exportable: {known}')


def check_input_type(input_type: str) -> str:
  """Returns input_type, or raises NascliError listing the valid ones."""
  if input_type not in INPUT_TYPES:
    raise NascliError(f'input_type {input_type!r} is not one of '
                      f'{", ".join(INPUT_TYPES)}')
  return input_type


def _one_line(err: BaseException) -> str:
  text = str(err).strip()
  return text.splitlines()[0] if text else type(err).__name__


def _resolve_checkpoint(checkpoint_path: str) -> str:
  """A checkpoint prefix from a prefix, its `.index` file or a folder."""
  path = os.fspath(checkpoint_path)
  if tf.io.gfile.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if not latest:
      raise NascliError(f'no checkpoint in folder {path} (it has no '
                        f'`checkpoint` state file)')
    return latest
  path = path.removesuffix('.index')
  if not tf.io.gfile.exists(path + '.index'):
    raise NascliError(f'checkpoint not found: {checkpoint_path}')
  return path


def _image_size(params: cfg.ExperimentConfig,
                input_image_size: Sequence[int] | None) -> list[int]:
  if input_image_size is None:
    input_image_size = list(params.task.model.input_size or [])[:2]
    where = 'params.task.model.input_size'
  else:
    where = 'input_image_size'
  size = list(input_image_size)
  if len(size) != 2 or not all(isinstance(v, int) and v > 0 for v in size):
    raise NascliError(f'{where} must give a positive height and width, '
                      f'got {size}')
  return size


def image_size_of(params: cfg.ExperimentConfig) -> list[int]:
  """[height, width] the model of `params` is served at."""
  return _image_size(params, None)


def serving_size_of(params: cfg.ExperimentConfig, override: int | None = None) -> int:
  """The side of the input latency is timed at: `override` (a search's --latency_input_size),
  else the config's task.latency_input_size, else its training input size."""
  size = override or getattr(params.task, 'latency_input_size', None)
  return int(size) if size else int(image_size_of(params)[0])


def at_serving_size(params: cfg.ExperimentConfig,
                    override: int | None = None) -> cfg.ExperimentConfig:
  """A copy of `params` whose model input is the serving size (the same params when it is)."""
  size = serving_size_of(params, override)
  if image_size_of(params) == [size, size]:
    return params
  served = copy.deepcopy(params)
  channels = list(served.task.model.input_size)[2:] or [3]
  served.task.model.input_size = [size, size] + channels
  return served


def serving_model(params: cfg.ExperimentConfig) -> tf_keras.Model:
  """A fresh model of `params` as its ExportModule builds it (batch 1, image_tensor)."""
  return get_export_module_cls(params.task)(
      params=params, batch_size=1, input_image_size=image_size_of(params),
      input_type='image_tensor', num_channels=3).model


def _check_export_dir(export_dir: Path, overwrite: bool) -> None:
  if export_dir.is_symlink() or (export_dir.exists() and
                                 not export_dir.is_dir()):
    raise OutputError(f'export_dir is not a folder: {export_dir}')
  if not overwrite and export_dir.is_dir() and any(export_dir.iterdir()):
    raise OutputError(f'export_dir already contains files: {export_dir} '
                      f'(pass overwrite to replace it)')


def _move_into_place(staging: Path, export_dir: Path, overwrite: bool) -> None:
  """Renames the finished staging folder to export_dir."""
  _check_export_dir(export_dir, overwrite)  # Again: time passed since.
  old = None
  if export_dir.is_dir():
    if any(export_dir.iterdir()):
      old = export_dir.with_name(f'.{export_dir.name}.old-'
                                 f'{secrets.token_hex(6)}')
      os.rename(export_dir, old)
    else:
      export_dir.rmdir()  # rename cannot replace a folder.
  try:
    os.rename(staging, export_dir)
  except OSError:
    if old is not None:
      os.rename(old, export_dir)
    raise
  if old is not None:
    shutil.rmtree(old, ignore_errors=True)


def export(params: cfg.ExperimentConfig,
           checkpoint_path: str | None,
           export_dir: str | os.PathLike[str],
           input_type: str = 'image_tensor',
           batch_size: int | None = None,
           input_image_size: Sequence[int] | None = None,
           overwrite: bool = False) -> str:
  """Exports the model of `params` with the weights of a checkpoint.

  Args:
    params: the experiment config that trained the checkpoint.
    checkpoint_path: a checkpoint prefix, its `.index` file, or a folder (its
      latest checkpoint). Read as `tf.train.Checkpoint(model=...)`, which
      matches Model Garden trainer checkpoints. None exports freshly
      initialized weights (enough to measure latency of an architecture).
    export_dir: the folder to create (a local path); see the module docstring.
    input_type: the `serving_default` input: `image_tensor` (uint8 [batch, H,
      W, 3]), `image_bytes` (encoded images) or `tf_example` (serialized
      tf.train.Example with `image/encoded`).
    batch_size: fixed batch size of the signature; None keeps it dynamic.
    input_image_size: [height, width] the model runs at; defaults to
      params.task.model.input_size[:2]. Served images are resized to it.
    overwrite: replace an export_dir that already has files.

  Returns:
    The SavedModel folder, export_dir/saved_model.

  Raises:
    NascliError: bad input_type, size or batch size, unknown task, missing or
      mismatched checkpoint, invalid config.
    OutputError: export_dir exists with files (without overwrite) or cannot
      be written.
  """
  check_input_type(input_type)
  if batch_size is not None and (not isinstance(batch_size, int) or
                                 batch_size < 1):
    raise NascliError(f'batch_size must be a positive integer or None, '
                      f'got {batch_size!r}')
  module_cls = get_export_module_cls(params.task)
  image_size = _image_size(params, input_image_size)
  ckpt = None if checkpoint_path is None else _resolve_checkpoint(
      checkpoint_path)
  export_dir = Path(export_dir).absolute()
  _check_export_dir(export_dir, overwrite)
  # DetectionModule may adjust params (NMS version for a dynamic batch); keep
  # the caller's object as it was.
  params = copy.deepcopy(params)
  try:
    params.validate()
  except (KeyError, ValueError) as err:
    raise NascliError(f'invalid experiment config: {_one_line(err)}') from None

  module = module_cls(params=params, batch_size=batch_size,
                      input_image_size=image_size, input_type=input_type,
                      num_channels=3)
  if ckpt is not None:
    # What export_base.export does with checkpoint_path, done here so that a
    # checkpoint of another architecture is reported by name.
    try:
      tf.train.Checkpoint(model=module.model).read(
          ckpt).assert_existing_objects_matched().expect_partial()
    except (AssertionError, ValueError, tf.errors.OpError) as err:
      raise NascliError(f'checkpoint {ckpt} does not fit the model in params: '
                        f'{_one_line(err)}') from None

  try:
    export_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = export_dir.with_name(f'.{export_dir.name}.partial-'
                                   f'{secrets.token_hex(6)}')
    staging.mkdir()
  except OSError as err:
    raise OutputError(f'cannot create {export_dir}: {err.strerror or err}'
                      ) from None
  try:
    with keras_saved_model_utils.keras_option_scope(save_traces=False):
      export_saved_model_lib.export_inference_graph(
          input_type=input_type,
          batch_size=batch_size,
          input_image_size=image_size,
          params=params,
          checkpoint_path=None,  # Restored above.
          export_dir=str(staging),
          num_channels=3,
          export_module=module,
          export_checkpoint_subdir=CHECKPOINT_SUBDIR,
          export_saved_model_subdir=SAVED_MODEL_SUBDIR)
    try:
      _move_into_place(staging, export_dir, overwrite)
    except OSError as err:
      raise OutputError(f'could not move the export to {export_dir}: '
                        f'{err.strerror or err}') from None
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return str(export_dir / SAVED_MODEL_SUBDIR)
