"""A trained trial's latency on this device, as `nascli run_latency_calculator_local` times it.

The calculator loads what every trial folder already holds, its `params.yaml` (the architecture
is in it) and its checkpoint, rebuilds the model through Model Garden's ExportModule (the module
`nascli export` saves) and times:

  cpu / gpu   the `serving_default` function a SavedModel export would hold, built around the
              model in memory (`latency.measure_model_latency`: the same graph and kernels as
              the exported model, without writing one): the trial's own in-trial timing, on
              the calculator's device;
  cpu-tflite  the model converted to TFLite by Model Garden
              (`export_tflite_lib.convert_tflite_model`, float, from the ExportModule's `tflite`
              signature: batch 1, preprocessed float32 input) and run by the TFLite
              interpreter with a fixed number of threads: warm-up runs, then the median of N
              timed `invoke()` calls. MnasNet's mobile targets are measured so.

The weights do not change the latency (same shapes, same kernels); they are restored when the
checkpoint is in the trial folder so that the timed model is the trained one.
"""

import time
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras

from nascli.errors import NascliError
from official.core import config_definitions as cfg
from official.vision.serving import export_tflite_lib
from tf_vision import model_dir as model_dir_lib
from tf_vision.serving import tflite_runtime
from tf_vision.serving import export_lib
from tf_vision.serving import latency

TFLITE_SIGNATURE = 'serving_default'


def load_trial_model(trial_dir: str) -> tuple[cfg.ExperimentConfig, tf_keras.Model, bool]:
  """(params, model, restored) of a trial folder: the model its params.yaml builds at the
  size it will serve (export_lib.serving_size_of: a proxy's trials trained smaller), with the
  weights of its latest checkpoint when the folder has one (`restored`)."""
  params = export_lib.at_serving_size(model_dir_lib.load_params(trial_dir))
  model = export_lib.serving_model(params)
  checkpoint = tf.train.latest_checkpoint(trial_dir)
  if checkpoint:
    tf.train.Checkpoint(model=model).read(checkpoint).expect_partial()
  return params, model, bool(checkpoint)


def serving_latency(params: cfg.ExperimentConfig, model: tf_keras.Model, warmup: int,
                    runs: int) -> dict[str, Any]:
  """The median latency (batch 1) of the model's serving function on this device."""
  report = latency.measure_model_latency(params, model, batch_sizes=(1,), warmup=warmup,
                                         runs=runs)
  report['latency_ms'] = report['batch']['1']['median_ms']
  return report


def tflite_function(params: cfg.ExperimentConfig, model: tf_keras.Model):
  """The ExportModule's `tflite` signature around the model: batch 1, float32 input of the
  model's size, preprocessing left to the caller (Model Garden's TFLite convention)."""
  module = export_lib.get_export_module_cls(params.task)(
      params=params, batch_size=1, input_image_size=export_lib.image_size_of(params),
      input_type='tflite', num_channels=3, model=model)
  return module.get_inference_signatures({'tflite': TFLITE_SIGNATURE})[TFLITE_SIGNATURE]


def convert_tflite(params: cfg.ExperimentConfig, model: tf_keras.Model) -> bytes:
  """The model as a float TFLite flatbuffer, converted by Model Garden's converter."""
  try:
    function = tflite_function(params, model)
    with tflite_runtime.native_stderr_quiet():
      return export_tflite_lib.convert_tflite_model(
          concrete_function=function, quant_type=None, params=params)
  except Exception as e:  # pylint: disable=broad-except
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise NascliError(f'TFLite conversion failed: {first[:300]}') from e


def tflite_interpreter(flatbuffer: bytes, num_threads: int) -> Any:
  """The interpreter every nascli TFLite timing uses (LiteRT, else tf.lite)."""
  return tflite_runtime.interpreter(flatbuffer, num_threads)


def output_names(params: cfg.ExperimentConfig, model: tf_keras.Model) -> list[str]:
  """The names of the `tflite` signature's outputs in the order the converted model has them
  (tf.nest's: a dict's sorted keys): `logits`, `probs` for a classifier."""
  return [str(k) for k in sorted(tflite_function(params, model).structured_outputs)]


def _output_index(detail: dict[str, Any]) -> int:
  """`Identity` -> 0, `Identity_3` -> 3: the converter names a function's outputs in order."""
  _, _, suffix = detail['name'].rpartition('_')
  return int(suffix) if suffix.isdigit() else 0


def run_tflite(interpreter: Any, image: np.ndarray,
               names: list[str]) -> dict[str, np.ndarray]:
  """One inference: the outputs by `names` (output_names)."""
  detail = interpreter.get_input_details()[0]
  interpreter.set_tensor(detail['index'], image)
  interpreter.invoke()
  outputs = sorted(interpreter.get_output_details(), key=_output_index)
  if len(outputs) != len(names):
    raise NascliError(f'the TFLite model has {len(outputs)} outputs, expected {names}')
  return {name: interpreter.get_tensor(d['index']) for name, d in zip(names, outputs)}


def tflite_latency(params: cfg.ExperimentConfig, model: tf_keras.Model, num_threads: int,
                   warmup: int, runs: int, seed: int = 0) -> dict[str, Any]:
  """Converts the model to TFLite and times the interpreter's `invoke()` (batch 1)."""
  start = time.perf_counter()
  flatbuffer = convert_tflite(params, model)
  convert_s = time.perf_counter() - start
  interpreter = tflite_interpreter(flatbuffer, num_threads)
  detail = interpreter.get_input_details()[0]
  image = np.random.default_rng(seed).standard_normal(detail['shape']).astype(np.float32)
  interpreter.set_tensor(detail['index'], image)
  for _ in range(warmup):
    interpreter.invoke()
  times_ms = []
  for _ in range(runs):
    begin = time.perf_counter()
    interpreter.invoke()
    times_ms.append((time.perf_counter() - begin) * 1000.0)
  median = float(np.median(times_ms))
  return {
      'device': 'CPU (TFLite interpreter)',
      'input_type': 'tflite',
      'image_size': export_lib.image_size_of(params),
      'num_threads': num_threads,
      'tflite_bytes': len(flatbuffer),
      'convert_s': round(convert_s, 3),
      'batch': {'1': {'median_ms': round(median, 4),
                      'p90_ms': round(float(np.percentile(times_ms, 90)), 4),
                      'min_ms': round(float(np.min(times_ms)), 4), 'runs': runs}},
      'latency_ms': round(median, 4),
  }


def gpu_name() -> str | None:
  """The name of the GPU TensorFlow runs on, None without one."""
  name = latency.device_name()
  return None if name == 'CPU' else name
