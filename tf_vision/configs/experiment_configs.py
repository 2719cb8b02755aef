"""nascli's registered experiments, and the upgrade that lets any Model Garden experiment use
nascli's optimizers, schedules and backbones.

Our config classes are strict supersets of Model Garden's (more one-of fields), so an upgraded
config keeps every value it had; the upgrade is registered per task-config class, not branched
on names.
"""

import dataclasses
from typing import Callable

from official.core import config_definitions as cfg
from official.core import exp_factory, task_factory
from official.modeling import hyperparams
from official.vision.configs import backbones as mg_backbones
from official.vision.configs import common
from official.vision.configs import decoders
from official.vision.configs import image_classification as ic
from official.vision.configs import retinanet as rn
from official.vision.tasks import image_classification as ic_task
from tf_vision.configs import backbones as nascli_backbones
from tf_vision.configs import optimization

_UPGRADES: dict[type, Callable[[cfg.TaskConfig], cfg.TaskConfig]] = {}


def register_task_upgrade(config_cls: type):
  def decorator(fn):
    _UPGRADES[config_cls] = fn
    return fn
  return decorator


@dataclasses.dataclass
class ImageClassificationTask(ic.ImageClassificationTask):
  """Model Garden's classification task config whose backbone one-of knows nascli's backbones."""
  model: nascli_backbones.ImageClassificationModel = dataclasses.field(
      default_factory=nascli_backbones.ImageClassificationModel)


# Same Task implementation as Model Garden's: only the config class is wider.
task_factory.register_task_cls(ImageClassificationTask)(ic_task.ImageClassificationTask)


def _widen(config: hyperparams.Config, wider_cls: type) -> hyperparams.Config:
  wider = wider_cls()
  wider.override(config.as_dict(), is_strict=True)
  return wider


@register_task_upgrade(ic.ImageClassificationTask)
def _upgrade_classification(task: cfg.TaskConfig) -> cfg.TaskConfig:
  return _widen(task, ImageClassificationTask)


def upgrade(params: cfg.ExperimentConfig) -> cfg.ExperimentConfig:
  """Gives a Model Garden experiment config nascli's optimizer/schedule/backbone choices."""
  optimization.upgrade_optimization_config(params)
  upgrade_task = _UPGRADES.get(type(params.task))
  if upgrade_task is not None:
    params.task = upgrade_task(params.task)
  return params


def get_experiment(name: str) -> cfg.ExperimentConfig:
  """The registered experiment `name`, upgraded (KeyError when unknown)."""
  return upgrade(exp_factory.get_exp_config(name))


def _trainer(train_steps: int, steps_per_loop: int, learning_rate: float) -> cfg.TrainerConfig:
  return cfg.TrainerConfig(
      train_steps=train_steps,
      steps_per_loop=steps_per_loop,
      summary_interval=steps_per_loop,
      checkpoint_interval=steps_per_loop,
      validation_interval=train_steps,
      validation_steps=-1,
      max_to_keep=3,
      optimizer_config=optimization.OptimizationConfig({
          "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
          "learning_rate": {"type": "cosine", "cosine": {
              "initial_learning_rate": learning_rate, "decay_steps": train_steps}},
          "warmup": {"type": "linear", "linear": {
              "warmup_steps": max(1, train_steps // 20), "warmup_learning_rate": 0.0}},
      }))


@exp_factory.register_config_factory("nascli_classification")
def nascli_classification() -> cfg.ExperimentConfig:
  """A small CPU-friendly classifier: ResNet-10 on 32x32 images (e.g. `convert-data digits`)."""
  return cfg.ExperimentConfig(
      runtime=cfg.RuntimeConfig(mixed_precision_dtype="float32"),
      task=ImageClassificationTask(
          model=nascli_backbones.ImageClassificationModel(
              num_classes=10,
              input_size=[32, 32, 3],
              backbone=nascli_backbones.Backbone(
                  type="resnet", resnet=mg_backbones.ResNet(model_id=10)),
              norm_activation=common.NormActivation(
                  norm_momentum=0.9, norm_epsilon=1e-5, use_sync_bn=False)),
          losses=ic.Losses(l2_weight_decay=1e-4),
          train_data=ic.DataConfig(is_training=True, global_batch_size=32,
                                   decode_jpeg_only=False, aug_crop=False,
                                   shuffle_buffer_size=2048),
          validation_data=ic.DataConfig(is_training=False, global_batch_size=64,
                                        decode_jpeg_only=False, aug_crop=False,
                                        drop_remainder=False)),
      trainer=_trainer(train_steps=300, steps_per_loop=50, learning_rate=0.1),
      restrictions=["task.train_data.is_training != None",
                    "task.validation_data.is_training != None"])


@exp_factory.register_config_factory("nascli_retinanet")
def nascli_retinanet() -> cfg.ExperimentConfig:
  """A small CPU-friendly detector: RetinaNet + SpineNet-Mobile-49XS at 128x128 (`shapes`)."""
  return cfg.ExperimentConfig(
      runtime=cfg.RuntimeConfig(mixed_precision_dtype="float32"),
      task=rn.RetinaNetTask(
          model=rn.RetinaNet(
              num_classes=4,
              input_size=[128, 128, 3],
              min_level=3,
              max_level=7,
              backbone=mg_backbones.Backbone(
                  type="spinenet_mobile",
                  spinenet_mobile=mg_backbones.SpineNetMobile(
                      model_id="49XS", min_level=3, max_level=7,
                      stochastic_depth_drop_rate=0.0, use_keras_upsampling_2d=False)),
              decoder=decoders.Decoder(type="identity", identity=decoders.Identity()),
              head=rn.RetinaNetHead(num_convs=2, num_filters=32, use_separable_conv=True),
              anchor=rn.Anchor(anchor_size=3),
              norm_activation=common.NormActivation(use_sync_bn=False, activation="swish")),
          losses=rn.Losses(l2_weight_decay=3e-5),
          train_data=rn.DataConfig(is_training=True, global_batch_size=8, dtype="float32",
                                   parser=rn.Parser(aug_rand_hflip=True)),
          validation_data=rn.DataConfig(is_training=False, global_batch_size=8,
                                        dtype="float32", drop_remainder=False)),
      trainer=_trainer(train_steps=100, steps_per_loop=10, learning_rate=0.02),
      restrictions=["task.train_data.is_training != None",
                    "task.validation_data.is_training != None"])
