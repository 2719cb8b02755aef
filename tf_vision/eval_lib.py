"""Evaluates a checkpoint with Model Garden's task metrics (top-1/top-5, or COCO AP)."""

import json
import os

import tensorflow as tf
import tf_keras

from nascli.errors import NascliError
from official.core import base_trainer, config_definitions as cfg, task_factory
from tf_vision import registry_imports  # noqa: F401  pylint: disable=unused-import

METRICS_FILE = "eval_metrics.json"


def resolve_checkpoint(model_dir: str | None, checkpoint: str | None) -> str:
  """A checkpoint prefix: the given one (file prefix or folder), or the latest in model_dir."""
  target = checkpoint or model_dir
  if not target:
    raise NascliError("give --model_dir or --checkpoint_path")
  if tf.io.gfile.isdir(target):
    latest = tf.train.latest_checkpoint(target)
    if latest is None:
      raise NascliError(f"no checkpoint in {target}")
    return latest
  if not tf.io.gfile.exists(target + ".index"):
    raise NascliError(f"checkpoint {target} does not exist (no {target}.index)")
  return target


def _evaluation_strategy(strategy: tf.distribute.Strategy) -> tf.distribute.Strategy:
  """One device instead of several logical CPU devices of one host.

  They share the same cores, so splitting the evaluation gains nothing, and the last partial
  batch leaves some replicas an empty batch, on which oneDNN's CPU kernels fail (TF 2.20:
  `input depth must be evenly divisible by filter depth: 3 vs 64`), as `--num_gpus 8` on a
  CPU-only machine (`sh scripts/run_distribute_train_gpu.sh DATA 8`) did.
  """
  if not isinstance(strategy, tf.distribute.MirroredStrategy) or (
      strategy.num_replicas_in_sync < 2):
    return strategy
  devices = strategy.extended.worker_devices
  if all(tf.DeviceSpec.from_string(d).device_type == "CPU" for d in devices):
    return tf.distribute.OneDeviceStrategy(devices[0])
  return strategy


def _value(v):
  v = v.numpy() if hasattr(v, "numpy") else v
  try:
    return float(v)
  except (TypeError, ValueError):
    return None


def can_reuse_model(strategy: tf.distribute.Strategy) -> bool:
  """A model trained under `strategy` can be evaluated as it is, without a rebuild: one replica
  on one worker (elsewhere its variables are distributed and the evaluation strategy differs)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  return (strategy.num_replicas_in_sync == 1 and _evaluation_strategy(strategy) is strategy
          and (resolver is None or not resolver.cluster_spec().as_dict()))


class Evaluator:
  """Model Garden's evaluating trainer for `params`, around `model` (or a model it builds).
  Kept with a model that goes on training (a paused search trial, train_lib.PausedRuns), it
  evaluates it again without another build or trace of the evaluation step."""

  def __init__(self, params: cfg.ExperimentConfig, strategy: tf.distribute.Strategy,
               model: tf_keras.Model | None = None):
    self.strategy = _evaluation_strategy(strategy)
    with self.strategy.scope():
      task = task_factory.get_task(params.task)
      model = model if model is not None else task.build_model()
      optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
      self.trainer = base_trainer.Trainer(params, task, model=model, optimizer=optimizer,
                                          train=False, evaluate=True)


def evaluate(params: cfg.ExperimentConfig, checkpoint: str, strategy: tf.distribute.Strategy,
             steps: int = -1, summary_dir: str | None = None,
             trained: tuple[tf_keras.Model, int] | None = None,
             evaluator: Evaluator | None = None) -> dict:
  """Metrics of `checkpoint` on params.task.validation_data (all of it when steps is -1).

  With `summary_dir`, the metrics also go to TensorBoard there at the checkpoint's step.
  `trained`: (the model that was just trained and saved as `checkpoint`, its step), evaluated as
  it is (see can_reuse_model): the same weights and graph as the checkpoint's, without building
  the model again and reading the checkpoint back; `evaluator`: an Evaluator of that model
  built earlier, used again.
  """
  trainer = (evaluator or Evaluator(params, strategy, trained[0] if trained else None)).trainer
  if trained:
    trainer.global_step.assign(trained[1])
  else:
    status = trainer.checkpoint.read(checkpoint)
    status.expect_partial()
    try:
      status.assert_existing_objects_matched()
    except AssertionError as e:
      raise NascliError(f"checkpoint {checkpoint} does not match the model in params.yaml:"
                        f" {' '.join(str(e).split())[:160]}") from None
  logs = trainer.evaluate(tf.convert_to_tensor(steps, dtype=tf.int32))
  metrics = {k: _value(v) for k, v in logs.items() if _value(v) is not None}
  step = int(trainer.global_step.numpy())
  if summary_dir:
    with tf.summary.create_file_writer(summary_dir).as_default():
      for name, value in metrics.items():
        tf.summary.scalar(name, value, step=step)
  return {"checkpoint": checkpoint, "step": step, "metrics": metrics}


def write_metrics(path: str, result: dict) -> None:
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=2)
  os.replace(tmp, path)
