"""Serving latency of an exported SavedModel, as a NAS trial measures it.

The `serving_default` signature is called exactly as a client would: uint8
images for `image_tensor`, encoded images for `image_bytes`, serialized
tf.train.Example protos (`image/encoded` and friends, the features Model
Garden's vision export modules parse) for `tf_example`. Each timed call
includes copying the outputs to numpy, so the work is really done. Medians
and percentiles, not means: a busy machine produces slow outliers.
"""

import copy
import os
from pathlib import Path
import time
from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf
import tf_keras
import yaml

from nascli.errors import NascliError
from official.core import config_definitions as cfg
from official.modeling.hyperparams import params_dict
from tf_vision.serving import export_lib

SIGNATURE_KEY = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
IMAGE_FORMATS = ('jpeg', 'png')
# The input dtype each input type's signature takes (Model Garden
# vision/serving/export_base.py).
_INPUT_DTYPES = {
    'image_tensor': tf.uint8,
    'image_bytes': tf.string,
    'tf_example': tf.string,
}


def device_name() -> str:
  """The GPU's name when TF sees one (the model runs there), else `CPU`."""
  gpus = tf.config.list_physical_devices('GPU')
  if not gpus:
    return 'CPU'
  details = tf.config.experimental.get_device_details(gpus[0])
  return details.get('device_name', gpus[0].name)


def _find_saved_model(saved_model_dir: str | os.PathLike[str]) -> Path:
  """The SavedModel folder: the path itself or its `saved_model/` child."""
  path = Path(saved_model_dir)
  for candidate in (path, path / export_lib.SAVED_MODEL_SUBDIR):
    if candidate.is_dir() and tf.saved_model.contains_saved_model(
        str(candidate)):
      return candidate
  raise NascliError(f'not a SavedModel folder: {saved_model_dir}')


def _image_size_from_params(saved_model: Path) -> list[int]:
  """The model input size recorded in params.yaml beside the SavedModel."""
  params_file = saved_model.parent / export_lib.PARAMS_FILE
  try:
    # MG's reader: its YAML holds python tuples, which safe_load refuses.
    params = params_dict.read_yaml_to_params_dict(str(params_file)).as_dict()
    size = list(params['task']['model']['input_size'][:2])
  except (OSError, tf.errors.OpError, yaml.YAMLError, KeyError,
          TypeError) as err:
    raise NascliError(f'pass image_size: cannot read task.model.input_size '
                      f'from {params_file} ({type(err).__name__})') from None
  return _check_image_size(size, f'task.model.input_size in {params_file}')


def _check_image_size(size: Sequence[Any], where: str) -> list[int]:
  size = list(size)
  if len(size) != 2 or not all(isinstance(v, int) and v > 0 for v in size):
    raise NascliError(f'{where} must be a positive [height, width], '
                      f'got {size}')
  return size


def _check_counts(batch_sizes: Sequence[int], warmup: int,
                  runs: int) -> list[int]:
  batches = list(dict.fromkeys(batch_sizes))  # Unique, in the given order.
  if not batches or not all(isinstance(b, int) and b > 0 for b in batches):
    raise NascliError(f'batch_sizes must be positive integers, '
                      f'got {list(batch_sizes)}')
  if not isinstance(warmup, int) or warmup < 0:
    raise NascliError(f'warmup must be an integer >= 0, got {warmup!r}')
  if not isinstance(runs, int) or runs < 1:
    raise NascliError(f'runs must be an integer >= 1, got {runs!r}')
  return batches


def _encode(image: np.ndarray, image_format: str) -> bytes:
  encoder = tf.io.encode_jpeg if image_format == 'jpeg' else tf.io.encode_png
  return encoder(image).numpy()


def _example(encoded: bytes, image_format: str, height: int,
             width: int) -> bytes:
  """A serialized Example carrying the image as Model Garden's decoders expect."""
  def _bytes(value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

  def _int(value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

  features = {
      'image/encoded': _bytes(encoded),
      'image/format': _bytes(image_format.encode()),
      'image/height': _int(height),
      'image/width': _int(width),
  }
  return tf.train.Example(features=tf.train.Features(
      feature=features)).SerializeToString()


def make_inputs(input_type: str, batch_size: int, image_size: Sequence[int],
                image_format: str = 'jpeg', seed: int = 0) -> tf.Tensor:
  """A batch of random images in the form the input type's signature takes."""
  height, width = image_size
  rng = np.random.default_rng(seed)
  images = rng.integers(0, 256, (batch_size, height, width, 3), np.uint8)
  if input_type == 'image_tensor':
    return tf.constant(images)
  encoded = [_encode(image, image_format) for image in images]
  if input_type == 'image_bytes':
    return tf.constant(encoded, tf.string)
  return tf.constant(
      [_example(e, image_format, height, width) for e in encoded], tf.string)


def _input_spec(signature, saved_model: Path) -> tuple[str, tf.TensorSpec]:
  _, kwargs = signature.structured_input_signature
  if len(kwargs) != 1:
    raise NascliError(f'{saved_model} serving_default takes '
                      f'{len(kwargs)} inputs; expected one image input')
  return next(iter(kwargs.items()))


def _check_spec(spec: tf.TensorSpec, input_type: str, batch_sizes: list[int],
                saved_model: Path) -> None:
  if spec.dtype != _INPUT_DTYPES[input_type]:
    raise NascliError(f'input_type {input_type} does not match {saved_model}: '
                      f'its serving_default takes {spec.dtype.name} inputs')
  fixed = spec.shape[0] if spec.shape.rank else None
  if fixed is not None and any(b != fixed for b in batch_sizes):
    raise NascliError(f'{saved_model} was exported for batch size {fixed} '
                      f'only; batch_sizes {batch_sizes} need a dynamic batch')


def _percentiles(times_ms: list[float]) -> dict[str, Any]:
  return {
      'median_ms': round(float(np.median(times_ms)), 4),
      'p90_ms': round(float(np.percentile(times_ms, 90)), 4),
      'min_ms': round(float(np.min(times_ms)), 4),
      'runs': len(times_ms),
  }


def measure_latency(saved_model_dir: str | os.PathLike[str],
                    input_type: str = 'image_tensor',
                    batch_sizes: Sequence[int] = (1, 8),
                    warmup: int = 5,
                    runs: int = 30,
                    image_size: Sequence[int] | None = None,
                    image_format: str = 'jpeg') -> dict[str, Any]:
  """Times `serving_default` of a SavedModel at each batch size.

  Args:
    saved_model_dir: the SavedModel folder, or the export folder holding it
      in `saved_model/` (as `export_lib.export` writes).
    input_type: how the model was exported: `image_tensor`, `image_bytes` or
      `tf_example`.
    batch_sizes: the batch sizes to time.
    warmup: untimed calls per batch size before timing.
    runs: timed calls per batch size.
    image_size: [height, width] of the generated images; defaults to
      task.model.input_size in params.yaml beside the SavedModel.
    image_format: `jpeg` or `png`, how images are encoded for `image_bytes`
      and `tf_example`.

  Returns:
    {"device", "input_type", "image_size", "batch": {"<batch size>":
    {"median_ms", "p90_ms", "min_ms", "runs"}}, "per_image_ms_at_largest_batch"}
    where per-image latency is the median at the largest batch over its size.

  Raises:
    NascliError: bad arguments, no SavedModel, or a SavedModel that does not
      take this input type or batch size.
  """
  export_lib.check_input_type(input_type)
  if image_format not in IMAGE_FORMATS:
    raise NascliError(f'image_format {image_format!r} is not one of '
                      f'{", ".join(IMAGE_FORMATS)}')
  batches = _check_counts(batch_sizes, warmup, runs)
  saved_model = _find_saved_model(saved_model_dir)
  size = (_image_size_from_params(saved_model) if image_size is None else
          _check_image_size(image_size, 'image_size'))

  loaded = tf.saved_model.load(str(saved_model))
  if SIGNATURE_KEY not in loaded.signatures:
    raise NascliError(f'{saved_model} has no {SIGNATURE_KEY} signature')
  signature = loaded.signatures[SIGNATURE_KEY]
  input_name, spec = _input_spec(signature, saved_model)
  _check_spec(spec, input_type, batches, saved_model)
  return _report(lambda inputs: signature(**{input_name: inputs}), input_type,
                 batches, size, image_format, warmup, runs, str(saved_model))


def measure_model_latency(params: cfg.ExperimentConfig,
                          model: tf_keras.Model,
                          input_type: str = 'image_tensor',
                          batch_sizes: Sequence[int] = (1,),
                          warmup: int = 5,
                          runs: int = 30,
                          image_format: str = 'jpeg') -> dict[str, Any]:
  """Times a trained model's serving function in memory, without a SavedModel.

  The function is the concrete `serving_default` that `export_lib.export`
  would save (Model Garden's ExportModule around this very model, same
  preprocessing, same graph and kernels), so a NAS trial gets its latency
  without paying for an export; the report has the form of `measure_latency`.
  """
  export_lib.check_input_type(input_type)
  if image_format not in IMAGE_FORMATS:
    raise NascliError(f'image_format {image_format!r} is not one of '
                      f'{", ".join(IMAGE_FORMATS)}')
  batches = _check_counts(batch_sizes, warmup, runs)
  return _report(serving_function(params, model, input_type), input_type,
                 batches, export_lib.image_size_of(params), image_format,
                 warmup, runs, 'the trained model')


def serving_function(params: cfg.ExperimentConfig, model: tf_keras.Model,
                     input_type: str = 'image_tensor'):
  """The concrete `serving_default` function a SavedModel export of `model`
  would hold (dynamic batch), built around the model in memory."""
  module = export_lib.get_export_module_cls(params.task)(
      params=copy.deepcopy(params), batch_size=None,
      input_image_size=export_lib.image_size_of(params), input_type=input_type,
      num_channels=3, model=model)
  return module.get_inference_signatures(
      {input_type: SIGNATURE_KEY})[SIGNATURE_KEY]


def _report(function: Callable[[tf.Tensor], dict[str, tf.Tensor]],
            input_type: str, batches: list[int], size: list[int],
            image_format: str, warmup: int, runs: int,
            what: str) -> dict[str, Any]:
  """Times `function` at each batch size: the median after `warmup` calls."""

  def call(inputs: tf.Tensor) -> dict[str, np.ndarray]:
    return {key: value.numpy() for key, value in function(inputs).items()}

  results, medians = {}, {}
  for batch in batches:
    inputs = make_inputs(input_type, batch, size, image_format)
    try:
      for _ in range(warmup):
        call(inputs)
      times_ms = []
      for _ in range(runs):
        start = time.perf_counter()
        call(inputs)
        times_ms.append((time.perf_counter() - start) * 1000.0)
    except tf.errors.InvalidArgumentError as err:
      first = str(err.message).strip().splitlines()[0] if err.message else ''
      raise NascliError(f'{what} rejected {input_type} inputs of batch '
                        f'{batch}: {first}') from None
    results[str(batch)] = _percentiles(times_ms)
    medians[batch] = float(np.median(times_ms))

  largest = max(batches)
  return {
      'device': device_name(),
      'input_type': input_type,
      'image_size': size,
      'batch': results,
      'per_image_ms_at_largest_batch':
          round(medians[largest] / largest, 4),
  }
