"""Distribution strategies by name, including the CPU paths that make them testable here.

On a machine without GPUs, `mirrored` splits the CPU into `num_gpus` logical devices (default 2)
so the mirrored code path (replicas, all-reduce) really runs; `multi_worker_mirrored` reads
TF_CONFIG as on a cluster.
"""

from typing import Callable

import tensorflow as tf

from nascli.errors import NascliError

_BUILDERS: dict[str, Callable[[int], tf.distribute.Strategy]] = {}


def register_strategy(name: str):
  def decorator(fn):
    _BUILDERS[name] = fn
    return fn
  return decorator


def known_strategies() -> list[str]:
  return sorted(_BUILDERS)


def _gpus() -> list:
  return tf.config.list_physical_devices("GPU")


def logical_cpus(count: int) -> list[str]:
  """Splits the CPU into `count` logical devices (must run before TensorFlow initializes)."""
  cpu = tf.config.list_physical_devices("CPU")[0]
  existing = tf.config.get_logical_device_configuration(cpu)
  if existing is None or len(existing) < count:
    try:
      tf.config.set_logical_device_configuration(
          cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError as e:
      raise NascliError(f"cannot split the CPU into {count} devices after TensorFlow has"
                        f" started ({e})") from None
  return [d.name for d in tf.config.list_logical_devices("CPU")][:count]


@register_strategy("one_device")
def _one_device(num_gpus: int) -> tf.distribute.Strategy:
  del num_gpus
  return tf.distribute.OneDeviceStrategy("/gpu:0" if _gpus() else "/cpu:0")


@register_strategy("mirrored")
def _mirrored(num_gpus: int) -> tf.distribute.Strategy:
  gpus = _gpus()
  if gpus:
    count = num_gpus or len(gpus)
    if count > len(gpus):
      raise NascliError(f"--num_gpus {count} but this machine has {len(gpus)} GPU(s)")
    return tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(count)])
  # No GPUs: --num_gpus N mirrors over N logical CPU devices (the same code path as N GPUs);
  # without it, over the one CPU device, as Model Garden's `mirrored` default does.
  count = num_gpus or 1
  return tf.distribute.MirroredStrategy(["/cpu:0"] if count == 1 else logical_cpus(count))


@register_strategy("multi_worker_mirrored")
def _multi_worker(num_gpus: int) -> tf.distribute.Strategy:
  del num_gpus  # Each worker uses the devices it sees (CUDA_VISIBLE_DEVICES picks them).
  return tf.distribute.MultiWorkerMirroredStrategy()


def build_strategy(name: str, num_gpus: int = 0) -> tf.distribute.Strategy:
  if name not in _BUILDERS:
    raise NascliError(f"unknown --strategy {name!r}; known: {', '.join(known_strategies())}")
  return _BUILDERS[name](num_gpus)
