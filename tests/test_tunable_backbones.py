"""Tunable MnasNet / SpineNet: decoded architectures, MG factories, NAS experiments and YAMLs."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from nascli.errors import NascliError
from official.core import registry
from official.core import task_factory
from official.vision.configs import retinanet as mg_rn
from official.vision.modeling import factory as mg_factory
from official.vision.modeling.backbones import factory as backbone_factory
from official.vision.modeling.backbones import mobilenet
from official.vision.modeling.backbones import spinenet
from official.vision.modeling.layers import nn_blocks
from official.vision.tasks import retinanet as mg_rn_task
from tf_vision import params as params_lib
from tf_vision.configs import backbones as backbones_cfg
from tf_vision.configs import experiment_configs
from tf_vision.modeling.backbones import mnasnet
from tf_vision.modeling.backbones import tunable_mnasnet
from tf_vision.modeling.backbones import tunable_spinenet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_FILES = os.path.join(ROOT, 'tf_vision', 'test_files')
FAST_CLS_YAML = os.path.join(TEST_FILES, 'fast_nas_classification_search_for_testing.yaml')
FAST_DET_YAML = os.path.join(TEST_FILES, 'fast_nas_detection_spinenet_search_for_testing.yaml')
RECIPES = os.path.join(ROOT, 'tf_vision', 'configs', 'experiments')
BACKBONE_BUILDERS = backbone_factory._REGISTERED_BACKBONE_CLS  # pylint: disable=protected-access


def _mb(repeats, fn, expand, kernel, se, filters, **extra):
  return dict(num_repeats=repeats, block_fn=fn, expand_ratio=expand, kernel_size=kernel,
              se_ratio=se, output_filters=filters, **extra)


# A point of the mobilenet_v2-centred space: conv and mbconv groups, SE on some; pyglove's
# '_type' key as a serialized tunable object carries it.
MNAS_BLOCKS = [
    _mb(1, 'conv', 1, 3, 0.0, 16, _type='nas_architecture.TunableBlockSpec'),
    _mb(3, 'mbconv', 6, 3, 0.25, 24),
    _mb(2, 'mbconv', 3, 5, 0.0, 40),
    _mb(4, 'conv', 6, 5, 0.25, 48),   # conv: expand and SE ignored
    _mb(2, 'mbconv', 6, 3, 0.25, 96),
    _mb(3, 'mbconv', 1, 5, 0.0, 120),
    _mb(1, 'conv', 3, 3, 0.0, 240),
]
MNAS_JSON = json.dumps(MNAS_BLOCKS)


def _spinenet49_vertex_form() -> list[dict]:
  """MG's SpineNet-49 block specs in the search space's form (levels split into base + offset)."""
  blocks = []
  for i, (level, fn, inputs, is_output) in enumerate(spinenet.SPINENET_BLOCK_SPECS):
    offset = 0 if is_output else (i % 4) - 1  # intermediate offsets from [-1, 0, 1, 2]
    blocks.append({'_type': 'nas_architecture.TunableBlockSpec', 'level_base': level - offset,
                   'level_offset': offset, 'block_fn': fn, 'input_offsets': list(inputs),
                   'is_output': is_output})
  return blocks


SPINE_BLOCKS = _spinenet49_vertex_form()
SPINE_JSON = json.dumps(SPINE_BLOCKS)


def _spec(size: int | None) -> tf_keras.layers.InputSpec:
  return tf_keras.layers.InputSpec(shape=[None, size, size, 3])


def _load(experiment: str, *yaml_paths: str, override: dict | None = None):
  params = params_lib.load_experiment(experiment)
  for path in yaml_paths:
    params_lib.apply_override(params, params_lib.load_yaml_source(path, '--config_file'),
                              f'--config_file {path}')
  if override:
    params_lib.apply_override(params, override, '--params_override')
  params.validate()
  return params


def _shapes(specs) -> dict:
  return {k: v.as_list() for k, v in specs.items()}


# ---- tunable_mnasnet -------------------------------------------------------------------------

def test_mnasnet_decoded_architecture_endpoints_and_blocks():
  backbone = tunable_mnasnet.TunableMnasNet(input_specs=_spec(32), block_specs_json=MNAS_JSON,
                                            endpoints_num_filters=256)
  # Fixed strides [1,2,2,2,1,2,1] after the stride-2 stem; outputs after groups 1, 2, 4, 6.
  assert _shapes(backbone.output_specs) == {
      '2': [None, 8, 8, 24], '3': [None, 4, 4, 40], '4': [None, 2, 2, 96],
      '5': [None, 1, 1, 240]}
  outputs = backbone(tf.zeros([2, 32, 32, 3]), training=False)
  assert {k: v.shape.as_list() for k, v in outputs.items()} == {
      '2': [2, 8, 8, 24], '3': [2, 4, 4, 40], '4': [2, 2, 2, 96], '5': [2, 1, 1, 240],
      '6': [2, 1, 1, 256]}

  mbconvs = [l for l in backbone.layers if isinstance(l, nn_blocks.InvertedBottleneckBlock)]
  convs = [l for l in backbone.layers if isinstance(l, mobilenet.Conv2DBNBlock)]
  assert len(mbconvs) == 3 + 2 + 2 + 3
  assert len(convs) == 1 + (1 + 4 + 1) + 1  # stem, conv groups, head
  configs = [b.get_config() for b in mbconvs]
  assert [(c['expand_ratio'], c['kernel_size'], c['se_ratio'] or 0.0, c['strides'])
          for c in configs] == (
              [(6, 3, 0.25, 2)] + [(6, 3, 0.25, 1)] * 2 + [(3, 5, 0.0, 2), (3, 5, 0.0, 1)]
              + [(6, 3, 0.25, 1)] * 2 + [(1, 5, 0.0, 2)] + [(1, 5, 0.0, 1)] * 2)
  group3 = [c.get_config() for c in convs[2:6]]
  assert [(c['filters'], c['kernel_size'], c['strides']) for c in group3] == (
      [(48, 5, 2)] + [(48, 5, 1)] * 3)

  rebuilt = tunable_mnasnet.TunableMnasNet.from_config(backbone.get_config())
  assert rebuilt.count_params() == backbone.count_params()


def test_mnasnet_reference_is_the_fixed_mnasnet_a1():
  reference = tunable_mnasnet.TunableMnasNet(input_specs=_spec(32))
  fixed = mnasnet.MnasNet(input_specs=_spec(32))
  assert reference.count_params() == fixed.count_params()
  assert _shapes(reference.output_specs) == _shapes(fixed.output_specs)
  assert reference.outputs[-1].shape.as_list() == [None, 1, 1, 1280]

  features = tunable_mnasnet.TunableMnasNet(input_specs=_spec(32), features_only=True)
  assert sorted(features.output) == ['2', '3', '4', '5']
  # Only the 1280 x 320 head conv and its BN (4 x 1280) are gone.
  assert fixed.count_params() - features.count_params() == 320 * 1280 + 4 * 1280


def test_classification_model_through_model_garden_factory():
  assert registry.lookup(BACKBONE_BUILDERS,
                         'tunable_mnasnet') is tunable_mnasnet.build_tunable_mnasnet
  params = _load('nas_classification_tunable_mnasnet', FAST_CLS_YAML, override={
      'task': {'model': {'backbone': {'tunable_mnasnet': {
          'block_specs_json': MNAS_JSON, 'filter_size_scale': 0.5}}}}})
  model_config = params.task.model
  model = mg_factory.build_classification_model(
      _spec(32), model_config=model_config, l2_regularizer=tf_keras.regularizers.L2(1e-4))
  assert isinstance(model.backbone, tunable_mnasnet.TunableMnasNet)
  # round_filters(c * 0.5, 8): 24 -> 16, 40 -> 24, 96 -> 48, 240 -> 120; head stays 256.
  assert {k: v[-1] for k, v in _shapes(model.backbone.output_specs).items()} == {
      '2': 16, '3': 24, '4': 48, '5': 120}
  assert model.backbone.output['6'].shape[-1] == 256
  logits = model(tf.random.uniform([2, 32, 32, 3]), training=False)
  assert logits.shape.as_list() == [2, 10]
  assert np.all(np.isfinite(logits.numpy()))
  assert len(model.losses) > 0  # the L2 regularizer reached the backbone


@pytest.mark.parametrize('blocks_or_text, message', [
    ('[{"num_repeats": 1,', r'block_specs_json is not valid JSON: Expecting'),
    ('{"num_repeats": 1}', r'block_specs_json must be a non-empty JSON list of block objects'),
    (MNAS_BLOCKS[:6], r'block_specs_json must list 7 blocks, got 6'),
    ([MNAS_BLOCKS[0], 'conv'] + MNAS_BLOCKS[2:], r'block_specs_json\[1\] must be a JSON object'),
    (MNAS_BLOCKS[:3] + [{k: v for k, v in MNAS_BLOCKS[3].items() if k != 'kernel_size'}]
     + MNAS_BLOCKS[4:], r"block_specs_json\[3\] is missing 'kernel_size'"),
    (MNAS_BLOCKS[:2] + [dict(MNAS_BLOCKS[2], block_fn='fused')] + MNAS_BLOCKS[3:],
     r"block_specs_json\[2\]\.block_fn: expected one of conv, mbconv, got 'fused'"),
    (MNAS_BLOCKS[:5] + [dict(MNAS_BLOCKS[5], num_repeats=0)] + MNAS_BLOCKS[6:],
     r'block_specs_json\[5\]\.num_repeats: expected an integer >= 1, got 0'),
    (MNAS_BLOCKS[:6] + [dict(MNAS_BLOCKS[6], se_ratio='0.25')],
     r"block_specs_json\[6\]\.se_ratio: expected a number in \[0.0, 1.0\), got '0.25'"),
    ([dict(MNAS_BLOCKS[0], kernel=3)] + MNAS_BLOCKS[1:],
     r"block_specs_json\[0\] has unknown key 'kernel'"),
])
def test_mnasnet_bad_block_specs_are_one_line_errors(blocks_or_text, message):
  text = blocks_or_text if isinstance(blocks_or_text, str) else json.dumps(blocks_or_text)
  config = backbones_cfg.Backbone(
      type='tunable_mnasnet',
      tunable_mnasnet=backbones_cfg.TunableMnasNet(block_specs_json=text))
  with pytest.raises(NascliError, match=r'^backbone\.tunable_mnasnet\.' + message) as e:
    backbone_factory.build_backbone(_spec(32), config, mg_rn.RetinaNet().norm_activation)
  assert '\n' not in str(e.value)


# ---- tunable_spinenet ------------------------------------------------------------------------

def test_spinenet_decoded_specs_map_to_model_garden_block_specs():
  specs = tunable_spinenet.decode_block_specs(SPINE_JSON, 3, 7)
  assert [(s.level, s.block_fn, s.input_offsets, s.is_output) for s in specs] == [
      tuple(s) for s in spinenet.SPINENET_BLOCK_SPECS]
  assert all(isinstance(s.input_offsets, tuple) for s in specs)


def test_retinanet_with_searched_spinenet_through_model_garden_factory():
  assert registry.lookup(BACKBONE_BUILDERS,
                         'tunable_spinenet') is tunable_spinenet.build_tunable_spinenet
  params = _load('nas_retinanet_tunable_spinenet', FAST_DET_YAML, override={
      'task': {'model': {'backbone': {'tunable_spinenet': {'block_specs_json': SPINE_JSON}}}}})
  model_config = params.task.model
  assert isinstance(model_config, experiment_configs.RetinaNet)
  model = mg_factory.build_retinanet(_spec(128), model_config=model_config)
  backbone = model.backbone
  assert isinstance(backbone, tunable_spinenet.TunableSpineNet)
  assert _shapes(backbone.output_specs) == {
      str(l): [None, 128 // 2**l, 128 // 2**l, 32] for l in range(3, 8)}

  outputs = model(tf.random.uniform([1, 128, 128, 3]), training=True)
  anchors = 3 * 3  # num_scales x aspect ratios
  for level in range(3, 8):
    side = 128 // 2**level
    assert outputs['cls_outputs'][str(level)].shape.as_list() == [1, side, side, anchors * 4]
    assert outputs['box_outputs'][str(level)].shape.as_list() == [1, side, side, anchors * 4]
    assert np.all(np.isfinite(outputs['cls_outputs'][str(level)].numpy()))

  # The re-expressed SpineNet-49 is the reference (block_specs_json null), weight for weight.
  reference = tunable_spinenet.TunableSpineNet(
      input_specs=_spec(128), filter_size_scale=0.25, resample_alpha=0.25,
      endpoints_num_filters=32)
  assert reference.count_params() == backbone.count_params()
  rebuilt = tunable_spinenet.TunableSpineNet.from_config(backbone.get_config())
  assert rebuilt.get_config()['block_specs_json'] == SPINE_JSON
  assert rebuilt.count_params() == backbone.count_params()


def _replace(i, **changes):
  return SPINE_BLOCKS[:i] + [dict(SPINE_BLOCKS[i], **changes)] + SPINE_BLOCKS[i + 1:]


@pytest.mark.parametrize('blocks_or_text, cfg, message', [
    ('not json', {}, r'\.block_specs_json is not valid JSON'),
    (_replace(4, level_offset=3), {},
     r'\.block_specs_json\[4\]: level_base \+ level_offset = 10 is not a SpineNet level '
     r'\(1\.\.7\)'),
    (_replace(2, input_offsets=[1, 4]), {},
     r'\.block_specs_json\[2\]\.input_offsets: 4 is not an earlier block \(0\.\.3;'),
    (_replace(0, input_offsets=[0]), {},
     r'\.block_specs_json\[0\]\.input_offsets: expected a list of 2 block indices'),
    (_replace(3, block_fn='mbconv'), {},
     r"\.block_specs_json\[3\]\.block_fn: expected one of residual, bottleneck, got 'mbconv'"),
    (_replace(12, level_base=4), {},
     r'\.block_specs_json\[12\]\.is_output: a second output at level 4 \(block 10 is one\)'),
    (_replace(13, is_output=False), {},
     r'\.block_specs_json: no output block at level 7; min_level\.\.max_level 3\.\.7'),
    (_replace(1, is_output='yes'), {},
     r"\.block_specs_json\[1\]\.is_output: expected true or false, got 'yes'"),
    (SPINE_BLOCKS, {'model_id': '50'}, r"\.model_id '50' is not one of 49S, 49, 96"),
    (SPINE_BLOCKS, {'resample_alpha': 0.0}, r'\.resample_alpha must be > 0, got 0.0'),
    (None, {'min_level': 2}, r': the default SpineNet-49 architecture .* needs min_level 3'),
])
def test_spinenet_bad_specs_are_one_line_errors(blocks_or_text, cfg, message):
  if blocks_or_text is None or isinstance(blocks_or_text, str):
    text = blocks_or_text
  else:
    text = json.dumps(blocks_or_text)
  config = backbones_cfg.Backbone(
      type='tunable_spinenet',
      tunable_spinenet=backbones_cfg.TunableSpineNet(block_specs_json=text, **cfg))
  with pytest.raises(NascliError, match=r'^backbone\.tunable_spinenet' + message) as e:
    backbone_factory.build_backbone(_spec(128), config, mg_rn.RetinaNet().norm_activation)
  assert '\n' not in str(e.value)


# ---- experiments and YAMLs -------------------------------------------------------------------

def test_fast_test_yamls_load_into_their_experiments():
  cls = _load('nas_classification_tunable_mnasnet', FAST_CLS_YAML)
  assert isinstance(cls.task, experiment_configs.ImageClassificationTask)
  model = cls.task.model
  assert (model.backbone.type, model.num_classes, model.input_size) == (
      'tunable_mnasnet', 10, [32, 32, 3])
  assert model.backbone.tunable_mnasnet.as_dict() == {
      'block_specs_json': None, 'endpoints_num_filters': 256, 'features_only': False,
      'filter_size_scale': 1.0, 'stochastic_depth_drop_rate': 0.0}
  assert (cls.trainer.train_steps, cls.task.train_data.global_batch_size) == (100, 32)
  assert not model.norm_activation.use_sync_bn
  assert cls.runtime.mixed_precision_dtype == 'float32'

  det = _load('nas_retinanet_tunable_spinenet', FAST_DET_YAML)
  assert isinstance(det.task, experiment_configs.RetinaNetTask)
  model = det.task.model
  assert (model.backbone.type, model.decoder.type, model.input_size, model.min_level,
          model.max_level) == ('tunable_spinenet', 'identity', [128, 128, 3], 3, 7)
  assert model.backbone.tunable_spinenet.model_id == '49S'
  assert det.trainer.train_steps == 300
  assert det.trainer.optimizer_config.learning_rate.type == 'cosine'
  # The registered task config class runs MG's RetinaNet Task.
  registered = task_factory._REGISTERED_TASK_CLS  # pylint: disable=protected-access
  assert registered[type(det.task)] is mg_rn_task.RetinaNetTask


def test_real_recipes_load_with_their_settings():
  search = _load('nas_classification_tunable_mnasnet',
                 os.path.join(RECIPES, 'mnasnet_search_gpu.yaml'))
  assert (search.trainer.train_steps, search.trainer.validation_steps,
          search.trainer.steps_per_loop, search.task.train_data.global_batch_size,
          search.task.validation_data.global_batch_size) == (12510, 40, 2502, 512, 512)
  assert search.trainer.optimizer_config.learning_rate.stepwise.values == [0.032, 0.0032]
  assert search.task.model.backbone.tunable_mnasnet.endpoints_num_filters == 256

  finetune = _load('nas_classification_tunable_mnasnet',
                   os.path.join(RECIPES, 'mnasnet_search_finetune_gpu.yaml'))
  opt = finetune.trainer.optimizer_config
  assert (finetune.trainer.train_steps, opt.optimizer.type, opt.optimizer.rmsprop.epsilon,
          opt.learning_rate.cosine.initial_learning_rate, opt.warmup.linear.warmup_steps) == (
              437850, 'rmsprop', 0.002, 0.064, 6256)
  assert finetune.task.model.backbone.tunable_mnasnet.endpoints_num_filters == 1280
  assert finetune.task.losses.l2_weight_decay == 1e-5

  det = _load('nas_retinanet_tunable_spinenet', os.path.join(RECIPES, 'spinenet_search_gpu.yaml'))
  assert (det.trainer.train_steps, det.trainer.validation_steps,
          det.task.train_data.global_batch_size, det.task.validation_data.global_batch_size,
          det.trainer.optimizer_config.warmup.linear.warmup_learning_rate) == (
              16634, 312, 80, 16, 0.0067)
  spine = det.task.model.backbone.tunable_spinenet
  assert (spine.filter_size_scale, spine.resample_alpha, spine.endpoints_num_filters) == (
      0.5, 0.25, 64)

  det2 = _load('nas_retinanet_tunable_spinenet',
               os.path.join(RECIPES, 'spinenet_search_finetune_gpu.yaml'))
  opt = det2.trainer.optimizer_config
  assert (det2.trainer.train_steps, opt.optimizer.sgd.global_clipnorm,
          opt.learning_rate.stepwise.boundaries, det2.task.model.input_size,
          det2.task.model.backbone.tunable_spinenet.init_stochastic_depth_rate) == (
              370400, 10.0, [333360, 351880, 361140], [640, 640, 3], 0.2)


def test_model_garden_retinanet_experiments_are_upgraded():
  params = params_lib.load_experiment('retinanet_mobile_coco')
  assert type(params.task) is experiment_configs.RetinaNetTask  # noqa: E721
  original = mg_rn.RetinaNetTask()
  assert params.task.model.backbone.type == 'spinenet_mobile'  # values kept
  assert original.model.backbone.type == 'resnet'
  params_lib.apply_override(params, {'task': {'model': {'backbone': {
      'type': 'tunable_spinenet', 'tunable_spinenet': {'filter_size_scale': 0.5}}}}}, 'test')
  assert params.task.model.backbone.get().filter_size_scale == 0.5
  with pytest.raises(NascliError, match=r"unknown config key "
                     r"'task\.model\.backbone\.tunable_spinenet\.block_spec'"):
    params_lib.apply_override(params, {'task': {'model': {'backbone': {
        'tunable_spinenet': {'block_spec': '[]'}}}}}, 'test')
