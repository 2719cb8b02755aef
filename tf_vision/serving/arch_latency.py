"""An architecture's latency on a target runtime, at the size it will serve, before any training.

A latency model (`nascli build_latency_model`) and a search's real measurements need the
latency of an architecture as the deployed model has it: built from its `nas_params` at the
serving input size (not the training or proxy size), with fresh weights (the latency does not
depend on their values), converted the way it will be deployed and timed there.

Runtimes (`RUNTIMES`, a registry; `register_runtime` adds one):
  cpu-tflite  Model Garden's TFLite conversion (float, batch 1, the ExportModule's `tflite`
              signature), run by the LiteRT interpreter (`ai_edge_litert`, the package
              TensorFlow's own deprecation warning points to; `tf.lite` only where it is not
              installed) with XNNPACK at a fixed thread count.
  cpu         the serving function a SavedModel export holds, in TensorFlow on this CPU.
  gpu         the same on a GPU (refused where TensorFlow sees none).

Noise control (`Timing`): the process may be pinned to chosen CPUs; warm-up runs in blocks
until the block median settles (within `settle` of the previous block); then `runs` timed calls
give the median, the spread (p90 - p10) / median of single calls, and the drift: how far the
medians of the round's first and second halves are apart. Single calls of a sub-millisecond model
always spread widely, so it is the drift that says whether the median can be trusted: above
`max_drift` the round is measured again (up to `retries` times) and the steadiest round is kept,
marked `noisy` if even that one drifts. Every report says what it timed: runtime, its version, input size, threads, pinning.

Serving sizes (`SERVING_SIZES`, a registry by search space; `register_serving_size` adds one):
the side a space's models serve at when a command is not told (`--latency_input_size`), and the
multiple the space's models need. TensorFlow- and numpy-free at import, like the runtimes'
versions, so every nascli command can list the runtimes in its help at no cost.
"""

import dataclasses
import importlib.metadata
import logging
import os
import statistics
import time
from typing import Any, Callable

from nascli.errors import NascliError
from nascli.latency_source import cpu_model
from tf_vision.serving.tflite_runtime import interpreter


@dataclasses.dataclass(frozen=True)
class Timing:
  """How a model is timed (all recorded with the result)."""
  num_threads: int = 1
  runs: int = 50
  # At least this many seconds of timed calls per round: a 0.3 ms model gets ~1,700 runs, so
  # its median is not at the mercy of a few preempted calls.
  min_time_s: float = 0.5
  warmup_block: int = 10  # warm-up calls per block
  max_warmup_blocks: int = 10
  settle: float = 0.03  # warm-up ends when a block's median is within 3% of the previous one
  max_drift: float = 0.05  # the round's halves' medians further apart: measured again
  retries: int = 2
  cpus: tuple[int, ...] | None = None  # pin the measuring process (os.sched_setaffinity)


def summarize(times_ms: list[float]) -> dict[str, float]:
  """Median, spread and percentiles of one round of timed calls."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  arr = np.asarray(times_ms, dtype=np.float64)
  median = float(np.median(arr))
  p10, p90 = (float(np.percentile(arr, q)) for q in (10, 90))
  return {'median_ms': round(median, 4), 'p10_ms': round(p10, 4), 'p90_ms': round(p90, 4),
          'min_ms': round(float(arr.min()), 4), 'runs': int(arr.size),
          'spread': round((p90 - p10) / median, 4) if median > 0 else 0.0,
          'drift': round(abs(float(np.median(arr[:arr.size // 2]))
                             - float(np.median(arr[arr.size // 2:]))) / median, 4)
                   if median > 0 and arr.size > 1 else 0.0}


def time_calls(call: Callable[[], Any], timing: Timing) -> dict[str, Any]:
  """Times `call` under `timing`'s noise control; returns the kept round's summary with
  `warmup_runs`, `rounds` and `noisy`."""
  warmed, previous = 0, None
  for _ in range(max(1, timing.max_warmup_blocks)):
    block = []
    for _ in range(max(1, timing.warmup_block)):
      begin = time.perf_counter()
      call()
      block.append((time.perf_counter() - begin) * 1000.0)
    warmed += len(block)
    median = statistics.median(block)
    if previous is not None and abs(median - previous) <= timing.settle * previous:
      break
    previous = median
  best = None
  rounds = 0
  runs = max(timing.runs, int(timing.min_time_s * 1000.0 / max(median, 1e-3)))
  for _ in range(1 + max(0, timing.retries)):
    rounds += 1
    times = []
    for _ in range(runs):
      begin = time.perf_counter()
      call()
      times.append((time.perf_counter() - begin) * 1000.0)
    summary = summarize(times)
    if best is None or summary['drift'] < best['drift']:
      best = summary
    if summary['drift'] <= timing.max_drift:
      break
  return {**best, 'warmup_runs': warmed, 'rounds': rounds,
          'noisy': best['drift'] > timing.max_drift}


@dataclasses.dataclass(frozen=True)
class Runtime:
  """A target runtime: `measure(params, model, timing)` returns a report with `latency_ms`;
  `version()` names the runtime's build (a latency model is valid for one build); `prepare`
  (optional) sets up a fresh process for it before any model is built, returning what it set."""
  name: str
  description: str
  gpu: bool
  measure: Callable[[Any, Any, Timing], dict[str, Any]]
  version: Callable[[], str]
  prepare: Callable[[Timing], dict[str, Any]] | None = None

  def device(self) -> str:
    """The device it measures on: this machine's CPU model, or the GPU's name (imports TF).

    Raises:
      NascliError: a GPU runtime where TensorFlow sees no GPU.
    """
    if self.gpu:
      from tf_vision.serving import device_latency  # pylint: disable=g-import-not-at-top
      name = device_latency.gpu_name()
      if name is None:
        raise NascliError(f'runtime {self.name}: TensorFlow sees no GPU on this machine')
      return name
    return cpu_model()


RUNTIMES: dict[str, Runtime] = {}


def register_runtime(name: str, description: str, version: Callable[[], str],
                     gpu: bool = False,
                     prepare: Callable[[Timing], dict[str, Any]] | None = None):
  """Registers the function that times a built model on runtime `name`."""
  def register(fn: Callable[[Any, Any, Timing], dict[str, Any]]):
    if name in RUNTIMES:
      raise KeyError(f'runtime {name!r} is already registered')
    RUNTIMES[name] = Runtime(name, description, gpu, fn, version, prepare)
    return fn
  return register


def runtime(name: str) -> Runtime:
  if name not in RUNTIMES:
    raise NascliError(f'unknown runtime {name!r}; known: {", ".join(RUNTIMES)}')
  return RUNTIMES[name]


def _litert_version() -> str:
  """The interpreter `interpreter` uses; read from package metadata (no import: TF-free)."""
  try:
    return f'ai-edge-litert {importlib.metadata.version("ai-edge-litert")}'
  except importlib.metadata.PackageNotFoundError:
    return f'tf.lite ({_tf_version()})'


def _tf_version() -> str:
  try:
    return f'tensorflow {importlib.metadata.version("tensorflow")}'
  except importlib.metadata.PackageNotFoundError:  # a tensorflow-cpu or tf-nightly build
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return f'tensorflow {tf.__version__}'


@register_runtime('cpu-tflite', 'the model converted to TFLite (float, batch 1), run by the'
                  ' LiteRT interpreter with XNNPACK on this CPU', _litert_version)
def _cpu_tflite(params: Any, model: Any, timing: Timing) -> dict[str, Any]:
  from tf_vision.serving import device_latency  # pylint: disable=g-import-not-at-top
  begin = time.perf_counter()
  absl = logging.getLogger('absl')
  level = absl.level
  absl.setLevel(logging.ERROR)  # the converter's deprecation warning, once per architecture
  try:
    flatbuffer = device_latency.convert_tflite(params, model)
  finally:
    absl.setLevel(level)
  convert_s = time.perf_counter() - begin
  import numpy as np  # pylint: disable=g-import-not-at-top
  interp = interpreter(flatbuffer, timing.num_threads)
  detail = interp.get_input_details()[0]
  image = np.random.default_rng(0).standard_normal(detail['shape']).astype(np.float32)
  interp.set_tensor(detail['index'], image)
  report = time_calls(interp.invoke, timing)
  return {**report, 'latency_ms': report['median_ms'], 'tflite_bytes': len(flatbuffer),
          'convert_s': round(convert_s, 3)}


def _serving(params: Any, model: Any, timing: Timing) -> dict[str, Any]:
  """The export's serving function (image_tensor, batch 1), as the in-trial timing calls it."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf_vision.serving import export_lib  # pylint: disable=g-import-not-at-top
  from tf_vision.serving import latency  # pylint: disable=g-import-not-at-top
  size = export_lib.image_size_of(params)
  module = export_lib.get_export_module_cls(params.task)(
      params=params, batch_size=1, input_image_size=size, input_type='image_tensor',
      num_channels=3, model=model)
  fn = module.get_inference_signatures({'image_tensor': 'serving_default'})['serving_default']
  images = latency.make_inputs('image_tensor', 1, size)

  def call():
    tf.nest.map_structure(lambda t: t.numpy(), fn(images))
  report = time_calls(call, timing)
  return {**report, 'latency_ms': report['median_ms']}


def _tf_threads(timing: Timing) -> dict[str, Any]:
  """The serving-function runtimes' `--num_threads`: TensorFlow's intra-op pool (inter-op 1).
  A process that already ran TensorFlow ops keeps its pools: then `tf_threads_set` is False."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    tf.config.threading.set_intra_op_parallelism_threads(timing.num_threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
  except RuntimeError:
    return {'tf_threads_set': False}
  return {'tf_threads_set': True}


@register_runtime('cpu', 'the serving function a SavedModel export holds, in TensorFlow on'
                  ' this CPU', _tf_version, prepare=_tf_threads)
def _cpu(params: Any, model: Any, timing: Timing) -> dict[str, Any]:
  return _serving(params, model, timing)


@register_runtime('gpu', 'the serving function a SavedModel export holds, on this GPU',
                  _tf_version, gpu=True, prepare=_tf_threads)
def _gpu(params: Any, model: Any, timing: Timing) -> dict[str, Any]:
  from tf_vision.serving import device_latency  # pylint: disable=g-import-not-at-top
  if device_latency.gpu_name() is None:
    raise NascliError('runtime gpu: TensorFlow sees no GPU on this machine')
  return _serving(params, model, timing)


@dataclasses.dataclass(frozen=True)
class ServingSize:
  """The side a space's models serve at, the multiple they need, and why that side."""
  default: int
  multiple_of: int = 1
  why: str = ''


SERVING_SIZES: dict[str, ServingSize] = {}


def register_serving_size(space: str, default: int, multiple_of: int = 1, why: str = '') -> None:
  """Registers the serving size of search space `space` (the name --prebuilt_search_space
  takes; a --search_space_module space follows its --prebuilt_search_space)."""
  SERVING_SIZES[space] = ServingSize(default, multiple_of, why)


# MnasNet's models are ImageNet classifiers deployed at 224x224 (the paper's Pixel timings,
# mnasnet_search_gpu.yaml's input size).
register_serving_size('mnasnet', 224, why='the MnasNet paper and mnasnet_search_gpu.yaml')
# SpineNet's searched detectors serve at 640x640: the size the stage-2 recipe
# (spinenet_search_finetune_gpu.yaml) and Model Garden's RetinaNet-SpineNet-49 train and are
# exported at; the search recipe trains at 512 only to be cheaper. Levels 3-7 need a multiple
# of 2**7.
register_serving_size('spinenet', 640, multiple_of=128,
                      why='spinenet_search_finetune_gpu.yaml, the model that is deployed')


def serving_size(space: str) -> ServingSize | None:
  return SERVING_SIZES.get(space)


def check_input_size(space: str, size: int, what: str = '--latency_input_size') -> None:
  """Refuses a side the space's models cannot take, in one line naming `what`."""
  if size < 1:
    raise NascliError(f'{what} must be a positive number of pixels, got {size}')
  known = serving_size(space)
  if known and size % known.multiple_of:
    near = max(1, round(size / known.multiple_of)) * known.multiple_of
    raise NascliError(f'{what} {size}: {space} models need a multiple of {known.multiple_of}'
                      f' (e.g. {near})')


def build_model(search_space: str, nas_params: dict[str, str], input_size: int,
                config_files: list[str] | None = None,
                search_space_module: str | None = None) -> tuple[Any, Any]:
  """(params, model) of an architecture at `input_size` x `input_size`, fresh weights: the
  space's experiment with `config_files`, the architecture's backbone, the input size last."""
  # pylint: disable=g-import-not-at-top
  from tf_vision import search_spaces
  from tf_vision.search_spaces import nas_params as nas_params_lib
  from tf_vision.serving import export_lib
  space = search_spaces.resolve_search_space(search_space, search_space_module)
  binding = space.require_binding()
  _, block_specs = nas_params_lib.decode(space.name, nas_params)
  params = experiment_params(search_space, config_files, search_space_module)
  params.override(binding.backbone_override(block_specs), is_strict=True)
  channels = list(params.task.model.input_size[2:]) or [3]
  params.task.model.input_size = [input_size, input_size] + channels
  module = export_lib.get_export_module_cls(params.task)(
      params=params, batch_size=1, input_image_size=[input_size, input_size],
      input_type='image_tensor', num_channels=3)
  return params, module.model


def experiment_params(search_space: str, config_files: list[str] | None = None,
                      search_space_module: str | None = None) -> Any:
  """The space's experiment config with `config_files` applied (what every model of the
  space is built from: norm, activation, head)."""
  # pylint: disable=g-import-not-at-top
  from official.core import exp_factory
  from official.modeling import hyperparams
  from tf_vision import search_spaces
  space = search_spaces.resolve_search_space(search_space, search_space_module)
  params = exp_factory.get_exp_config(space.require_binding().experiment)
  for path in config_files or []:
    params = hyperparams.override_params_dict(params, path, is_strict=True)
  return params


def pin(cpus: tuple[int, ...] | None) -> list[int]:
  """Pins this process to `cpus` (where the OS allows it); returns the CPUs it runs on."""
  if cpus and hasattr(os, 'sched_setaffinity'):
    try:
      os.sched_setaffinity(0, set(cpus))
    except OSError as e:
      raise NascliError(f'cannot pin to CPUs {list(cpus)}: {e}') from None
  if hasattr(os, 'sched_getaffinity'):
    return sorted(os.sched_getaffinity(0))
  return list(range(os.cpu_count() or 1))


def measure_architecture(search_space: str, nas_params: dict[str, str], input_size: int,
                         runtime_name: str, timing: Timing,
                         config_files: list[str] | None = None,
                         search_space_module: str | None = None) -> dict[str, Any]:
  """Builds the architecture at `input_size` and times it on `runtime_name`; the report names
  everything the number depends on."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  target = runtime(runtime_name)
  begin = time.perf_counter()
  try:
    params, model = build_model(search_space, nas_params, input_size, config_files,
                                search_space_module)
    build_s = time.perf_counter() - begin
    report = target.measure(params, model, timing)
  finally:
    # One model after another in a process: each leaves its graph's names and state in Keras's
    # global session, which grows and slows the next build.
    tf_keras.backend.clear_session()
  return {**report, 'runtime': runtime_name, 'runtime_version': target.version(),
          'input_size': input_size, 'num_threads': timing.num_threads,
          'build_s': round(build_s, 3)}
