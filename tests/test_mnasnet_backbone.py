"""MnasNet-A1 backbone: shapes per level, paper size, config round trip, MG factory, learning."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from nascli.errors import NascliError
from official.core import registry
from official.vision.configs import image_classification as mg_ic
from official.vision.modeling import factory as mg_factory
from official.vision.modeling.backbones import factory as backbone_factory
from official.vision.tasks import image_classification as mg_ic_task
from tf_vision.configs import backbones as backbones_cfg
from tf_vision.modeling.backbones import mnasnet

# Fig. 7 of the paper: feature channels at strides 4, 8, 16, 32, then the 1x1 head conv.
A1_CHANNELS = {'2': 24, '3': 40, '4': 112, '5': 320}
PAPER_PARAMS = 3.9e6


def _spec(size: int | None) -> tf_keras.layers.InputSpec:
  return tf_keras.layers.InputSpec(shape=[None, size, size, 3])


def _classifier_config(num_classes: int, size: int, **mnasnet_kwargs):
  return backbones_cfg.ImageClassificationModel(
      num_classes=num_classes, input_size=[size, size, 3],
      backbone=backbones_cfg.Backbone(type='mnasnet',
                                      mnasnet=backbones_cfg.MnasNet(**mnasnet_kwargs)))


@pytest.mark.parametrize('size', [224, 32])
def test_endpoints_per_level(size):
  backbone = mnasnet.MnasNet(input_specs=_spec(size))
  expected = {level: [None, size // 2**int(level), size // 2**int(level), ch]
              for level, ch in A1_CHANNELS.items()}
  assert {k: v.as_list() for k, v in backbone.output_specs.items()} == expected
  if size == 224:
    assert [expected[l][1] for l in '2345'] == [56, 28, 14, 7]

  outputs = backbone(tf.zeros([1, size, size, 3]), training=False)
  assert sorted(outputs) == ['2', '3', '4', '5', '6']
  for level, shape in expected.items():
    assert outputs[level].shape.as_list() == [1] + shape[1:]
  # The head conv sits on the last level, as MG's MobileNet puts it; only it is endpoint '6'.
  assert outputs['6'].shape.as_list() == [1, size // 32, size // 32, 1280]


def test_full_classifier_matches_paper_size():
  model = mg_factory.build_classification_model(
      _spec(224), model_config=_classifier_config(1000, 224), l2_regularizer=None)
  trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
  print(f'MnasNet-A1 + ClassificationHead(1000): {trainable:,} trainable params, '
        f'{model.count_params():,} with BN statistics (paper: 3.9M)')
  assert abs(trainable - PAPER_PARAMS) <= 0.05 * PAPER_PARAMS
  assert abs(model.count_params() - PAPER_PARAMS) <= 0.05 * PAPER_PARAMS


def test_filter_size_scale_halves_widths_and_params():
  full = mnasnet.MnasNet(input_specs=_spec(32))
  half = mnasnet.MnasNet(filter_size_scale=0.5, input_specs=_spec(32))
  # round_filters(c * 0.5, divisor=8): 12 -> 16, 20 -> 24, 56, 160; head kept at 1280.
  assert {k: v[-1] for k, v in half.output_specs.items()} == {'2': 16, '3': 24, '4': 56,
                                                              '5': 160}
  assert half.outputs[-1].shape[-1] == 1280
  assert half.count_params() < 0.5 * full.count_params()

  no_finegrain = mnasnet.MnasNet(filter_size_scale=0.5, finegrain_classification_mode=False,
                                 input_specs=_spec(32))
  assert no_finegrain.outputs[-1].shape[-1] == 640


def test_get_config_from_config_round_trip():
  backbone = mnasnet.MnasNet(
      filter_size_scale=0.75, stochastic_depth_drop_rate=0.2, norm_momentum=0.9,
      kernel_regularizer=tf_keras.regularizers.L2(1e-4), input_specs=_spec(None))
  config = backbone.get_config()
  rebuilt = mnasnet.MnasNet.from_config(config)
  assert rebuilt.get_config() == config
  assert [w.shape.as_list() for w in rebuilt.weights] == [w.shape.as_list()
                                                          for w in backbone.weights]
  assert {k: v.as_list() for k, v in rebuilt.output_specs.items()} == {
      k: v.as_list() for k, v in backbone.output_specs.items()}
  assert len(rebuilt.losses) == len(backbone.losses) > 0  # the L2 regularizer came back
  images = tf.random.uniform([1, 64, 64, 3])
  a, b = backbone(images, training=False), rebuilt(images, training=False)
  assert {k: v.shape.as_list() for k, v in a.items()} == {k: v.shape.as_list()
                                                           for k, v in b.items()}
  # JSON-serializable (regularizers included), so Keras can rebuild it from `to_json()`.
  from_json = tf_keras.models.model_from_json(backbone.to_json(),
                                              custom_objects={'MnasNet': mnasnet.MnasNet})
  assert isinstance(from_json, mnasnet.MnasNet) and from_json.count_params() == (
      backbone.count_params())


def test_stochastic_depth_grows_linearly_over_blocks():
  backbone = mnasnet.MnasNet(filter_size_scale=0.25, stochastic_depth_drop_rate=0.18,
                             input_specs=_spec(32))
  blocks = [layer for layer in backbone.layers
            if isinstance(layer, mnasnet.nn_blocks.InvertedBottleneckBlock)]
  assert len(blocks) == 1 + 2 + 3 + 4 + 2 + 3 + 1
  rates = [b.get_config()['stochastic_depth_drop_rate'] for b in blocks]
  np.testing.assert_allclose(rates, [0.18 * i / 16 for i in range(1, 17)])


def test_custom_block_specs_with_plain_conv_groups():
  # The hook a searched (tunable) MnasNet uses: its own groups, 'conv' or 'mbconv'.
  specs = [('conv', 1, 3, 2, 1, 0.0, 16, True),
           ('mbconv', 2, 5, 2, 3, 0.25, 24, False),
           ('conv', 2, 3, 1, 1, 0.0, 40, True)]
  backbone = mnasnet.MnasNet(block_specs=specs, input_specs=_spec(32))
  assert {k: v.as_list() for k, v in backbone.output_specs.items()} == {
      '2': [None, 8, 8, 16], '3': [None, 4, 4, 40]}
  assert backbone.outputs[-1].shape.as_list() == [None, 4, 4, 1280]
  convs = [layer for layer in backbone.layers
           if isinstance(layer, mnasnet.mobilenet.Conv2DBNBlock)]
  assert len(convs) == 1 + 1 + 2 + 1  # stem, groups 0 and 2, head
  assert mnasnet.MnasNet.from_config(backbone.get_config()).count_params() == (
      backbone.count_params())

  with pytest.raises(NascliError, match=r'block_specs\[2\] is a second output at level 3'):
    mnasnet.MnasNet(block_specs=[specs[0], specs[1][:-1] + (True,), specs[2]],
                    input_specs=_spec(32))
  with pytest.raises(NascliError, match=r"block_specs\[0\]\.block_fn 'fused' is not one of"):
    mnasnet.MnasNet(block_specs=[('fused',) + specs[0][1:]], input_specs=_spec(32))


def test_registered_and_built_through_model_garden_factory():
  assert registry.lookup(backbone_factory._REGISTERED_BACKBONE_CLS,  # pylint: disable=protected-access
                         'mnasnet') is mnasnet.build_mnasnet
  config = backbones_cfg.ImageClassificationModel(num_classes=7, input_size=[64, 64, 3])
  # Selected the way a YAML or --params_override does.
  config.override({'backbone': {'type': 'mnasnet', 'mnasnet': {'filter_size_scale': 0.5}}})
  model = mg_factory.build_classification_model(_spec(64), model_config=config,
                                                l2_regularizer=None)
  assert isinstance(model.backbone, mnasnet.MnasNet)
  assert model.backbone.get_config()['filter_size_scale'] == 0.5
  logits = model(tf.random.uniform([2, 64, 64, 3]), training=False)
  assert logits.shape.as_list() == [2, 7]
  assert np.all(np.isfinite(logits.numpy()))


def test_image_classification_task_carries_mnasnet_backbone():
  task_config = mg_ic.ImageClassificationTask(
      model=backbones_cfg.ImageClassificationModel(num_classes=5, input_size=[32, 32, 3]))
  task_config.override({'model': {'backbone': {'mnasnet': {'filter_size_scale': 0.25}}}})
  assert task_config.as_dict()['model']['backbone'] == {
      'type': 'mnasnet',
      'mnasnet': {'model_id': 'MnasNetA1', 'filter_size_scale': 0.25,
                  'stochastic_depth_drop_rate': 0.0, 'finegrain_classification_mode': True}}
  model = mg_ic_task.ImageClassificationTask(task_config).build_model()
  assert isinstance(model.backbone, mnasnet.MnasNet)
  assert model.output_shape == (None, 5)


def test_unknown_model_id_is_a_one_line_user_error():
  config = backbones_cfg.Backbone(type='mnasnet', mnasnet=backbones_cfg.MnasNet(model_id='A9'))
  with pytest.raises(NascliError, match=r"backbone\.mnasnet\.model_id 'A9' is not one of") as e:
    backbone_factory.build_backbone(_spec(32), config, mg_ic.ImageClassificationModel()
                                    .norm_activation)
  assert '\n' not in str(e.value)


def test_sgd_steps_reduce_loss_of_small_classifier():
  tf_keras.utils.set_random_seed(0)
  model = mg_factory.build_classification_model(
      _spec(32), model_config=_classifier_config(10, 32, filter_size_scale=0.25),
      l2_regularizer=None)
  images = tf.random.uniform([16, 32, 32, 3], seed=1)
  labels = tf.constant(np.arange(16) % 10)
  loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  optimizer = tf_keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      loss = loss_fn(labels, model(images, training=True))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                  model.trainable_variables))
    return loss

  losses = [float(step()) for _ in range(20)]
  print('losses', [round(l, 3) for l in losses])
  assert np.isfinite(losses).all()
  assert np.mean(losses[-3:]) < 0.5 * losses[0]
