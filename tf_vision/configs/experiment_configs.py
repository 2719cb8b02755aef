"""nascli's registered experiments, and the upgrade that lets any Model Garden experiment use
nascli's optimizers, schedules and backbones.

Our config classes are strict supersets of Model Garden's (more one-of fields), so an upgraded
config keeps every value it had; the upgrade is registered per task-config class, not branched
on names.
"""

import dataclasses
from typing import Callable, Optional

from official.core import config_definitions as cfg
from official.core import exp_factory, task_factory
from official.modeling import hyperparams
from official.vision.configs import backbones as mg_backbones
from official.vision.configs import common
from official.vision.configs import decoders
from official.vision.configs import image_classification as ic
from official.vision.configs import retinanet as rn
from official.vision.tasks import image_classification as ic_task
from official.vision.tasks import retinanet as rn_task
from tf_vision.configs import backbones as nascli_backbones
from tf_vision.configs import optimization

_UPGRADES: dict[type, Callable[[cfg.TaskConfig], cfg.TaskConfig]] = {}


def register_task_upgrade(config_cls: type):
  def decorator(fn):
    _UPGRADES[config_cls] = fn
    return fn
  return decorator


@dataclasses.dataclass
class ServingSize(hyperparams.Config):
  """The side of the square input the model will serve at, where latency is timed; None: the
  training input size. A proxy task that trains smaller keeps the recipe's size here, so its
  trials are still timed at the size the model serves (tf_vision/params.py)."""
  latency_input_size: Optional[int] = None


@dataclasses.dataclass
class ImageClassificationTask(ic.ImageClassificationTask, ServingSize):
  """Model Garden's classification task config whose backbone one-of knows nascli's backbones."""
  model: nascli_backbones.ImageClassificationModel = dataclasses.field(
      default_factory=nascli_backbones.ImageClassificationModel)


# Same Task implementation as Model Garden's: only the config class is wider.
task_factory.register_task_cls(ImageClassificationTask)(ic_task.ImageClassificationTask)


@dataclasses.dataclass
class RetinaNet(rn.RetinaNet):
  """Model Garden's RetinaNet model config whose backbone one-of knows nascli's backbones."""
  backbone: nascli_backbones.Backbone = dataclasses.field(
      default_factory=lambda: nascli_backbones.Backbone(type="resnet",
                                                        resnet=mg_backbones.ResNet()))


@dataclasses.dataclass
class RetinaNetTask(rn.RetinaNetTask, ServingSize):
  """Model Garden's RetinaNet task config with nascli's wider RetinaNet model config."""
  model: RetinaNet = dataclasses.field(default_factory=RetinaNet)


task_factory.register_task_cls(RetinaNetTask)(rn_task.RetinaNetTask)


def _widen(config: hyperparams.Config, wider_cls: type) -> hyperparams.Config:
  wider = wider_cls()
  wider.override(config.as_dict(), is_strict=True)
  return wider


@register_task_upgrade(ic.ImageClassificationTask)
def _upgrade_classification(task: cfg.TaskConfig) -> cfg.TaskConfig:
  return _widen(task, ImageClassificationTask)


@register_task_upgrade(rn.RetinaNetTask)
def _upgrade_retinanet(task: cfg.TaskConfig) -> cfg.TaskConfig:
  return _widen(task, RetinaNetTask)


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


def _sgd_trainer(train_steps: int, interval: int, learning_rate: dict, warmup: dict,
                 **trainer) -> cfg.TrainerConfig:
  """Momentum-0.9 SGD with `learning_rate` (a one-of: {type: {...}}) after a linear `warmup`,
  a loop, summary and checkpoint every `interval` steps; `trainer` sets the rest."""
  return cfg.TrainerConfig(
      train_steps=train_steps,
      steps_per_loop=interval,
      summary_interval=interval,
      checkpoint_interval=interval,
      optimizer_config=optimization.OptimizationConfig({
          "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
          "learning_rate": learning_rate,
          "warmup": {"type": "linear", "linear": warmup},
      }),
      **trainer)


def _trainer(train_steps: int, steps_per_loop: int, learning_rate: float) -> cfg.TrainerConfig:
  """The small CPU experiments: cosine decay after 5% warmup, validated once at the end."""
  return _sgd_trainer(
      train_steps, steps_per_loop,
      {"type": "cosine", "cosine": {"initial_learning_rate": learning_rate,
                                    "decay_steps": train_steps}},
      {"warmup_steps": max(1, train_steps // 20), "warmup_learning_rate": 0.0},
      validation_interval=train_steps, validation_steps=-1, max_to_keep=3)


_RESTRICTIONS = ["task.train_data.is_training != None",
                 "task.validation_data.is_training != None"]


def _experiment(task: cfg.TaskConfig, trainer: cfg.TrainerConfig) -> cfg.ExperimentConfig:
  """An experiment of nascli's on one device in float32 (a run or a flag widens it)."""
  return cfg.ExperimentConfig(
      runtime=cfg.RuntimeConfig(distribution_strategy="one_device",
                                mixed_precision_dtype="float32"),
      task=task, trainer=trainer, restrictions=list(_RESTRICTIONS))


@exp_factory.register_config_factory("nascli_classification")
def nascli_classification() -> cfg.ExperimentConfig:
  """A small CPU-friendly classifier: ResNet-10 on 32x32 images (e.g. `convert-data digits`)."""
  return _experiment(
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
      trainer=_trainer(train_steps=300, steps_per_loop=50, learning_rate=0.1))


@exp_factory.register_config_factory("nascli_retinanet")
def nascli_retinanet() -> cfg.ExperimentConfig:
  """A small CPU-friendly detector: RetinaNet + SpineNet-Mobile-49XS at 128x128 (`shapes`)."""
  return _experiment(
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
      trainer=_trainer(train_steps=100, steps_per_loop=10, learning_rate=0.02))


# NAS experiments (Vertex NAS `image_classification_nas` / `retinanet_nas`): the full-size
# stage-1 bases that tf_vision/configs/experiments/*_search_*.yaml and the fast test YAMLs
# override. The searched architecture arrives as backbone.<type>.block_specs_json; None builds
# the fixed reference (MnasNet-A1 / SpineNet-49). No default data paths: give them per run.
def _stepwise_trainer(train_steps: int, interval: int, validation_steps: int,
                      boundaries: list[int], values: list[float],
                      warmup_steps: int) -> cfg.TrainerConfig:
  """Vertex's stage-1 recipes: stepwise decay, validated every `interval` steps."""
  return _sgd_trainer(
      train_steps, interval, {"type": "stepwise", "stepwise": {"boundaries": boundaries,
                                                               "values": values}},
      {"warmup_steps": warmup_steps}, validation_interval=interval,
      validation_steps=validation_steps)


@exp_factory.register_config_factory("nas_classification_tunable_mnasnet")
def nas_classification_tunable_mnasnet() -> cfg.ExperimentConfig:
  """Stage-1 MnasNet search trial on ImageNet: 10 epochs at batch 1024 (Vertex's base)."""
  return _experiment(
      task=ImageClassificationTask(
          model=nascli_backbones.ImageClassificationModel(
              num_classes=1001,
              input_size=[224, 224, 3],
              backbone=nascli_backbones.Backbone(
                  type="tunable_mnasnet",
                  tunable_mnasnet=nascli_backbones.TunableMnasNet(endpoints_num_filters=256)),
              dropout_rate=0.2,
              norm_activation=common.NormActivation(
                  norm_momentum=0.99, norm_epsilon=0.001, use_sync_bn=True)),
          losses=ic.Losses(one_hot=True, label_smoothing=0.1),
          train_data=ic.DataConfig(is_training=True, global_batch_size=1024),
          validation_data=ic.DataConfig(is_training=False, global_batch_size=1024)),
      trainer=_stepwise_trainer(
          train_steps=12218, interval=1222, validation_steps=30,
          boundaries=[3666, 6721, 9776], values=[0.064, 0.06208, 0.0602, 0.0584],
          warmup_steps=611))


@exp_factory.register_config_factory("nas_retinanet_tunable_spinenet")
def nas_retinanet_tunable_spinenet() -> cfg.ExperimentConfig:
  """Stage-1 SpineNet search trial on COCO: RetinaNet, 512x512, 10 epochs at batch 64."""
  return _experiment(
      task=RetinaNetTask(
          model=RetinaNet(
              num_classes=91,
              input_size=[512, 512, 3],
              min_level=3,
              max_level=7,
              backbone=nascli_backbones.Backbone(
                  type="tunable_spinenet",
                  tunable_spinenet=nascli_backbones.TunableSpineNet(
                      init_stochastic_depth_rate=0.2, filter_size_scale=0.5,
                      resample_alpha=0.25, endpoints_num_filters=64, min_level=3,
                      max_level=7)),
              decoder=decoders.Decoder(type="identity", identity=decoders.Identity()),
              head=rn.RetinaNetHead(num_filters=64),
              anchor=rn.Anchor(anchor_size=3),
              norm_activation=common.NormActivation(
                  norm_momentum=0.997, norm_epsilon=1e-4, use_sync_bn=True,
                  activation="relu")),
          losses=rn.Losses(l2_weight_decay=4e-5),
          train_data=rn.DataConfig(
              is_training=True, global_batch_size=64, dtype="float32",
              parser=rn.Parser(aug_rand_hflip=True, aug_scale_min=0.5, aug_scale_max=2.0)),
          validation_data=rn.DataConfig(is_training=False, global_batch_size=64,
                                        dtype="float32", drop_remainder=False)),
      trainer=_stepwise_trainer(
          train_steps=17330, interval=1733, validation_steps=116,
          boundaries=[13864], values=[0.08, 0.008], warmup_steps=500))
