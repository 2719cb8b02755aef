"""The backbones build the same networks as before their blocks were shared (issue 48).

`mnasnet`, `tunable_mnasnet` and `tunable_spinenet` were refactored to share their block code
(`tf_vision/modeling/backbones/blocks.py`). A checkpoint or a Vertex trial's params.yaml must
rebuild the same model afterwards, so for a fixed seed each backbone, built through Model
Garden's factory the way a trial builds it, must keep:
  - its layers (name and class) and variables (name, shape, in order): checkpoints restore by
    these, and Keras names layers from a global counter, so one extra or missing layer renames
    every later one;
  - its checkpoint keys (the object-graph paths a `tf.train.Checkpoint` saves, with shapes);
  - its `get_config()` (what `to_json` and `from_config` carry);
  - its endpoints on a fixed input (shape, mean and standard deviation).
tests/data/backbone_fingerprints.json holds them as this module's `__main__` wrote them at commit
9d1929b, before the refactor (`python tests/test_backbone_fingerprints.py` prints the current
ones in that form).
"""

import hashlib
import json
import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from official.vision.configs import retinanet as mg_rn
from official.vision.modeling.backbones import factory as backbone_factory
from official.vision.modeling.backbones import spinenet
from tf_vision.configs import backbones as backbones_cfg
import tf_vision.modeling.backbones  # noqa: F401  (registers the builders)

EXPECTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data',
                        'backbone_fingerprints.json')
SEED = 0
SIZE = 64

# A searched MnasNet with conv and mbconv groups and SE (tests/test_tunable_backbones.py's).
MNAS_JSON = json.dumps([
    dict(num_repeats=r, block_fn=fn, expand_ratio=e, kernel_size=k, se_ratio=se,
         output_filters=f)
    for r, fn, e, k, se, f in [(1, 'conv', 1, 3, 0.0, 16), (3, 'mbconv', 6, 3, 0.25, 24),
                               (2, 'mbconv', 3, 5, 0.0, 40), (4, 'conv', 6, 5, 0.25, 48),
                               (2, 'mbconv', 6, 3, 0.25, 96), (3, 'mbconv', 1, 5, 0.0, 120),
                               (1, 'conv', 3, 3, 0.0, 240)]])


# SpineNet-49 in the search space's form (the test of tunable_spinenet splits levels too).
SPINE_JSON = json.dumps([{'level_base': level, 'level_offset': 0, 'block_fn': fn,
                          'input_offsets': list(inputs), 'is_output': is_output}
                         for level, fn, inputs, is_output in spinenet.SPINENET_BLOCK_SPECS])


# name -> (backbone type, its config fields); all built through `backbone_factory.build_backbone`
# with an L2 regularizer and norm/activation settings other than the classes' defaults, so a
# builder that drops one changes the fingerprint.
CASES = {
    'mnasnet_a1': ('mnasnet', {}),
    'mnasnet_half_sd': ('mnasnet', {'filter_size_scale': 0.5,
                                    'stochastic_depth_drop_rate': 0.2}),
    'tunable_mnasnet_searched': ('tunable_mnasnet', {'block_specs_json': MNAS_JSON,
                                                     'endpoints_num_filters': 256,
                                                     'filter_size_scale': 0.5}),
    'tunable_mnasnet_features_only': ('tunable_mnasnet', {'features_only': True}),
    'tunable_spinenet_searched': ('tunable_spinenet', {
        'block_specs_json': SPINE_JSON, 'model_id': '49S', 'filter_size_scale': 0.25,
        'resample_alpha': 0.25, 'endpoints_num_filters': 32,
        'init_stochastic_depth_rate': 0.1}),
}


def _config(kind: str, fields: dict) -> backbones_cfg.Backbone:
  config = backbones_cfg.Backbone()
  config.override({'type': kind, kind: fields})  # as a YAML or --params_override selects it
  return config


def _norm_activation():
  config = mg_rn.RetinaNet().norm_activation
  config.override({'activation': 'swish', 'norm_momentum': 0.9, 'norm_epsilon': 1e-4})
  return config


def _digest(lines) -> str:
  return hashlib.sha256('\n'.join(lines).encode()).hexdigest()[:16]


def _serialize(value) -> list:
  # MG's SpineNet keeps its regularizer object in get_config; its repr has an address.
  return [type(value).__name__, value.get_config()]


def _significant(value: float) -> float:
  return float(f'{value:.7g}')


def _checkpoint_keys(model: tf_keras.Model) -> list:
  with tempfile.TemporaryDirectory() as tmp:
    path = tf.train.Checkpoint(model=model).write(os.path.join(tmp, 'ckpt'))
    return tf.train.list_variables(path)


def fingerprint(case: str) -> dict:
  """Builds `case` in a fresh Keras session with a fixed seed and summarizes it."""
  kind, fields = CASES[case]
  tf_keras.backend.clear_session()
  tf_keras.utils.set_random_seed(SEED)
  model = backbone_factory.build_backbone(
      tf_keras.layers.InputSpec(shape=[None, SIZE, SIZE, 3]), _config(kind, fields),
      _norm_activation(), l2_regularizer=tf_keras.regularizers.L2(1e-4))
  images = np.random.RandomState(SEED).uniform(size=(2, SIZE, SIZE, 3)).astype(np.float32)
  outputs = model(tf.constant(images), training=False)
  return {
      'class': type(model).__name__,
      'layers': _digest(f'{l.name} {type(l).__name__}' for l in model.layers),
      'variables': _digest(f'{w.name} {w.shape.as_list()}' for w in model.weights),
      'num_variables': len(model.weights),
      'checkpoint': _digest(f'{name} {shape}' for name, shape in _checkpoint_keys(model)),
      'config': _digest([json.dumps(model.get_config(), default=_serialize)]),
      # Relative statistics: MnasNet's untrained deep endpoints are small (1e-9 and below).
      'outputs': {level: [v.shape.as_list(), _significant(np.mean(np.abs(v.numpy()))),
                          _significant(np.std(v.numpy()))]
                  for level, v in sorted(outputs.items())},
  }


@pytest.mark.parametrize('case', sorted(CASES))
def test_backbone_builds_the_same_network_as_before(case):
  got = fingerprint(case)
  with open(EXPECTED, encoding='utf-8') as f:
    want = json.load(f)[case]
  assert {k: v for k, v in got.items() if k != 'outputs'} == {
      k: v for k, v in want.items() if k != 'outputs'}
  assert sorted(got['outputs']) == sorted(want['outputs'])
  for level, (shape, mean, std) in want['outputs'].items():
    assert got['outputs'][level][0] == shape, level
    np.testing.assert_allclose(got['outputs'][level][1:], [mean, std], rtol=1e-4, atol=0,
                               err_msg=f'endpoint {level}')


if __name__ == '__main__':
  print('{\n' + ',\n'.join(f' {json.dumps(case)}: {json.dumps(fingerprint(case))}'
                           for case in sorted(CASES)) + '\n}')
