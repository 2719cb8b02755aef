"""One layer of a space's models, built alone at its input shape and timed on a runtime.

A latency table of layers (nn-Meter's kernels, ProxylessNAS's and Once-for-All's lookup tables)
predicts an architecture as the sum of its layers' latencies: about a thousand layers cover the
~1e16 mnasnet architectures, where a model fitted on whole architectures sees a hundred. The
layer is built by the same Model Garden block the backbone uses, with the experiment's
norm/activation settings, batch 1, and timed the way its runtime times a whole model
(`arch_latency.time_calls`): on `cpu-tflite` converted by Model Garden's converter and run by
the LiteRT interpreter; on `cpu`/`gpu` as a TensorFlow function.

A space registers `@register_layer_model(space)`: `fn(params, key) -> (keras model, input
shape)`, the key being one of `cost_features.all_layers(space)`'s.
"""

import time
from typing import Any, Callable

from nascli.errors import NascliError
from tf_vision.serving import arch_latency
from tf_vision.serving import tflite_runtime

LayerModel = Callable[[Any, str], Any]
LAYER_MODELS: dict[str, LayerModel] = {}


def register_layer_model(space: str) -> Callable[[LayerModel], LayerModel]:
  """Decorator: `fn(params, key)` builds the layer `key` of `space` as a tf_keras model."""
  def register(fn: LayerModel) -> LayerModel:
    LAYER_MODELS[space] = fn
    return fn
  return register


@register_layer_model('mnasnet')
def _mnasnet_layer(params: Any, key: str) -> Any:
  # pylint: disable=g-import-not-at-top
  import tf_keras
  from tf_vision.modeling.backbones import mnasnet as backbone
  from tf_vision.search_spaces import mnasnet as space
  try:
    layer = space.parse_layer(key)
  except ValueError as e:
    raise NascliError(str(e)) from None
  norm = params.task.model.norm_activation
  common = dict(activation=norm.activation, use_sync_bn=False, norm_momentum=norm.norm_momentum,
                norm_epsilon=norm.norm_epsilon, kernel_initializer='VarianceScaling',
                kernel_regularizer=None, bias_regularizer=None)
  args = backbone._BlockArgs(  # pylint: disable=protected-access
      in_filters=layer.in_filters, out_filters=layer.out_filters,
      kernel_size=layer.kernel_size, strides=layer.strides,
      expand_ratio=layer.expand_ratio, se_ratio=layer.se_ratio,
      stochastic_depth_drop_rate=None)
  inputs = tf_keras.Input(shape=(layer.size, layer.size, layer.in_filters), batch_size=1)
  outputs = backbone.BLOCK_BUILDERS[layer.block_fn](args, common)(inputs, training=False)
  return tf_keras.Model(inputs, outputs)


def available(space: str, runtime_name: str) -> str | None:
  """Why layers of `space` cannot be timed on `runtime_name` (None: they can)."""
  # pylint: disable=g-import-not-at-top
  import tf_vision.search_spaces  # noqa: F401  (registers the prebuilt spaces' layers)
  from tf_vision.search_spaces import cost_features
  if space not in LAYER_MODELS or cost_features.all_layers(space) is None:
    return f'search space {space!r} registers no layers to time alone'
  if runtime_name not in _MEASURE:
    return f'runtime {runtime_name!r} cannot time a layer alone'
  return None


def _tflite(model: Any, timing: arch_latency.Timing) -> dict[str, Any]:
  # pylint: disable=g-import-not-at-top
  import logging
  import numpy as np
  import tensorflow as tf
  from official.vision.serving import export_tflite_lib
  spec = tf.TensorSpec(model.input_shape, tf.float32)
  function = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec)
  absl = logging.getLogger('absl')
  level = absl.level
  absl.setLevel(logging.ERROR)
  try:
    with tflite_runtime.native_stderr_quiet():
      flatbuffer = export_tflite_lib.convert_tflite_model(concrete_function=function,
                                                          quant_type=None)
  finally:
    absl.setLevel(level)
  interp = tflite_runtime.interpreter(flatbuffer, timing.num_threads)
  detail = interp.get_input_details()[0]
  image = np.random.default_rng(0).standard_normal(detail['shape']).astype(np.float32)
  interp.set_tensor(detail['index'], image)
  return arch_latency.time_calls(interp.invoke, timing)


def _tf_function(model: Any, timing: arch_latency.Timing) -> dict[str, Any]:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  x = tf.random.stateless_normal(model.input_shape, seed=(0, 0))
  function = tf.function(lambda x: model(x, training=False))

  def call():
    function(x).numpy()
  return arch_latency.time_calls(call, timing)


_MEASURE: dict[str, Callable[[Any, arch_latency.Timing], dict[str, Any]]] = {
    'cpu-tflite': _tflite, 'cpu': _tf_function, 'gpu': _tf_function}


def measure_layer(params: Any, space: str, key: str, runtime_name: str,
                  timing: arch_latency.Timing) -> dict[str, Any]:
  """Builds layer `key` of `space` alone and times it; the report has `latency_ms`."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  why = available(space, runtime_name)
  if why:
    raise NascliError(why)
  begin = time.perf_counter()
  try:
    report = _MEASURE[runtime_name](LAYER_MODELS[space](params, key), timing)
  finally:
    tf_keras.backend.clear_session()
  return {**report, 'latency_ms': report['median_ms'],
          'seconds': round(time.perf_counter() - begin, 3)}
