"""Layer tables: mnasnet's layers named, enumerated and built as the backbone builds them; the
`layer_lookup` predictor fitted, chosen, saved and refused; `--measure_layers` end to end."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from nascli import latency_model
from test_latency_model import loaded_in_a_fresh_process  # pylint: disable=g-bad-import-order
from nascli.latency_model import encoding
from nascli.latency_model import predictors
from tf_vision.search_spaces import cost_features
from tf_vision.search_spaces import mnasnet

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def _decisions():
  return latency_model.decisions_of_space('mnasnet')


def _random_params(decisions, rng):
  out = {}
  for key, literals in decisions.items():
    i = int(rng.integers(len(literals)))
    out[key] = f'{i}/{len(literals)} ({literals[i]})'
  return out


# ----- the space's layers


def test_every_architectures_layers_are_in_the_spaces_list_and_keys_round_trip():
  decisions = _decisions()
  every = mnasnet.mnasnet_all_layer_keys(decisions, 224)
  assert len(every) == len(set(every)) == 938
  known = set(every)
  rng = np.random.default_rng(0)
  for _ in range(300):
    p = _random_params(decisions, rng)
    keys = cost_features.layers('mnasnet')(p, 224)
    repeats = sum(int(cost_features.literal(v)) for k, v in p.items()
                  if k.endswith('num_repeats'))
    assert len(keys) == repeats
    assert set(keys) <= known
    for key in keys:
      assert mnasnet.parse_layer(key).key() == key
  with pytest.raises(ValueError, match="'conv k3 e6 in8' is not an mnasnet layer key"):
    mnasnet.parse_layer('conv k3 e6 in8')


def test_the_reference_architectures_layers_follow_the_backbones_strides_and_widths():
  decisions = _decisions()
  first = {k: f'0/{len(v)} ({v[0]})' for k, v in decisions.items()}
  layers = mnasnet.mnasnet_layers(first, 224)
  # Candidate 0: MobileNetV2's repeats (1, 2, 3, 4, 3, 3, 1), 0.75 of its widths rounded to 8,
  # the groups' fixed strides (1, 2, 2, 2, 1, 2, 1), conv blocks.
  assert len(layers) == 17
  assert [(l.in_filters, l.out_filters, l.strides, l.size) for l in layers[:4]] == [
      (32, 16, 1, 112), (16, 24, 2, 112), (24, 24, 1, 56), (24, 24, 2, 56)]
  assert [l.out_filters for l in layers][-1] == 240
  assert [l.size for l in layers if l.strides == 2] == [112, 56, 28, 14]
  assert all(l.block_fn == 'conv' and l.expand_ratio == 1 and l.se_ratio == 0.0 for l in layers)


def test_the_layer_model_is_the_backbones_block():
  """Each layer built alone has the weights of the same block inside the whole model."""
  # pylint: disable=g-import-not-at-top
  import tf_keras
  from official.vision.modeling.layers import nn_blocks
  from official.vision.modeling.backbones import mobilenet
  from tf_vision.serving import arch_latency
  from tf_vision.serving import layer_latency
  decisions = _decisions()
  p = _random_params(decisions, np.random.default_rng(5))
  p['blocks[2].block_fn'] = "1/2 ('mbconv')"
  p['blocks[2].se_ratio'] = '1/2 (0.25)'
  _, model = arch_latency.build_model('mnasnet', p, 64)
  blocks = [l for l in _walk(model)
            if isinstance(l, (nn_blocks.InvertedBottleneckBlock, mobilenet.Conv2DBNBlock))
            and l.name not in ('stem', 'head')]
  keys = cost_features.layers('mnasnet')(p, 64)
  assert len(blocks) == len(keys)
  params = arch_latency.experiment_params('mnasnet')
  pairs = list(zip(blocks, keys))
  seen_kinds = set()
  for block, key in pairs:  # the first of each group, and each kind once more
    layer = mnasnet.parse_layer(key)
    if layer.strides == 1 and (layer.block_fn, layer.se_ratio) in seen_kinds:
      continue
    seen_kinds.add((layer.block_fn, layer.se_ratio))
    alone = layer_latency.LAYER_MODELS['mnasnet'](params, key)
    assert alone.input_shape == (1, layer.size, layer.size, layer.in_filters)
    side = -(-layer.size // layer.strides)
    assert alone.output_shape == (1, side, side, layer.out_filters), key
    assert alone.count_params() == block.count_params(), key
    tf_keras.backend.clear_session()


def _walk(layer):
  for sub in getattr(layer, 'layers', []):
    yield sub
    yield from _walk(sub)


def test_a_layer_is_timed_on_tflite_and_a_bigger_one_takes_longer():
  # pylint: disable=g-import-not-at-top
  from tf_vision.serving import arch_latency
  from tf_vision.serving import layer_latency
  params = arch_latency.experiment_params('mnasnet')
  timing = arch_latency.Timing(runs=20, min_time_s=0.1)
  small = layer_latency.measure_layer(params, 'mnasnet', 'conv k3 in16 out16 s2 @16',
                                      'cpu-tflite', timing)
  big = layer_latency.measure_layer(params, 'mnasnet',
                                    'mbconv k5 e6 se0.25 in32 out32 s1 @56', 'cpu-tflite', timing)
  assert 0 < small['latency_ms'] < big['latency_ms']
  assert big['runs'] >= 20 and small['runs'] >= 20
  assert 'spread' in big and 'noisy' in big
  from nascli.errors import NascliError
  with pytest.raises(NascliError, match="'conv k3 in8' is not an mnasnet layer key"):
    layer_latency.measure_layer(params, 'mnasnet', 'conv k3 in8', 'cpu-tflite', timing)


# ----- the predictor


def _table_truth(size=224, seed=0):
  """A device whose layers take table ms each, whole models a constant plus scaled sums."""
  keys = mnasnet.mnasnet_all_layer_keys(_decisions(), size)
  rng = np.random.default_rng(seed)
  table = {k: float(rng.uniform(0.05, 2.0)) for k in keys}
  layers = cost_features.layers('mnasnet')

  def truth(p):
    conv = sum(table[k] for k in layers(p, size) if k.startswith('conv '))
    mb = sum(table[k] for k in layers(p, size) if k.startswith('mbconv '))
    return 1.5 + 1.1 * conv + 0.9 * mb
  return table, truth


def _rows(truth, count, seed, noise=0.01):
  rng = np.random.default_rng(seed)
  decisions = _decisions()
  out = []
  for _ in range(count):
    p = _random_params(decisions, rng)
    out.append((p, truth(p) * (1 + noise * rng.standard_normal())))
  return out


def _build(rows, heldout, **kw):
  return latency_model.build(
      rows, heldout, space='mnasnet', decisions=_decisions(), runtime='cpu-tflite',
      runtime_version='ai-edge-litert 2.3.0', device='Test CPU', input_size=224, num_threads=1,
      seed=0, **kw)


def test_layer_lookup_recovers_the_tables_truth_and_wins_the_cv():
  table, truth = _table_truth()
  rows = _rows(truth, 90, 1)
  model = _build(rows[:60], rows[60:], layer_table=table)
  assert model.kind == 'layer_lookup', model.cv
  assert model.cv['layer_lookup'] < 0.5 * model.cv['cost_features'], model.cv
  assert model.heldout['kendall_tau'] > 0.9 and model.heldout['within_10pct'] >= 0.95
  scales = model.predictor['scales']
  assert scales['conv'] == pytest.approx(1.1, rel=0.05)
  assert scales['mbconv'] == pytest.approx(0.9, rel=0.05)
  assert model.predictor['table'] == dict(sorted(table.items()))  # every layer, not the seen
  ms, arch = model.fastest()
  assert ms == model.predict(arch) <= min(model.predict(p) for p, _ in rows)
  # Without a table the kind is not offered: nothing was timed alone.
  plain = _build(rows[:60], [])
  assert 'layer_lookup' not in plain.cv
  lay = encoding.layout(_decisions(), 'mnasnet', 224)
  assert 'no layers were timed alone' in predictors.PREDICTORS['layer_lookup'].unavailable(lay)


def test_a_layer_lookup_file_predicts_the_same_in_a_process_without_tensorflow(tmp_path):
  table, truth = _table_truth(seed=3)
  rows = _rows(truth, 40, 4)
  model = _build(rows, [], layer_table=table, kinds=['layer_lookup'])
  path = tmp_path / 'lookup.json'
  model.save(path)
  assert loaded_in_a_fresh_process(path, rows[0][0], 'model.kind', 'model.predict(p)') == [
      'layer_lookup', model.predict(rows[0][0]), []]


def test_a_damaged_table_is_a_one_line_error(tmp_path):
  table, truth = _table_truth(seed=5)
  rows = _rows(truth, 30, 6)
  model = _build(rows, [], layer_table=table, kinds=['layer_lookup'])
  data = model.to_dict()
  key = sorted(data['predictor']['table'])[0]
  data['predictor']['table'][key] = -1.0
  path = tmp_path / 'bad.json'
  path.write_text(json.dumps(data))
  out = subprocess.run([sys.executable, '-m', 'nascli', 'search_in_local', '--latency_model',
                        str(path), '--target_device_latency_ms', '5', '--max_nas_trial', '1',
                        '--local_output_dir', str(tmp_path / 'job')],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode == 1
  assert out.stderr.strip().count('\n') == 0, out.stderr
  assert str(path) in out.stderr and 'table' in out.stderr, out.stderr
  # A layer the table lacks (a space that changed) is named when predicted.
  del data['predictor']['table'][key]
  loaded = latency_model.LatencyModel.from_dict({**data, 'predictor': {
      **data['predictor'], 'table': {**data['predictor']['table']}}})
  arch = next(p for p, _ in _rows(truth, 500, 7)
              if key in cost_features.layers('mnasnet')(p, 224))
  from nascli.errors import NascliError
  with pytest.raises(NascliError, match=f'layer {key!r} was not timed'):
    loaded.predict(arch)


# ----- build_latency_model --measure_layers, end to end (a 32-architecture user space)


SPACE = ('--search_space_module', 'user_spaces.layered_mnasnet.layered_mnasnet')


def _flags(job):
  return ['build_latency_model', *SPACE, '--latency_input_size', '32', '--num_architectures',
          '10', '--num_heldout', '2', '--runs', '5', '--measure_layers', '--local_output_dir',
          str(job)]


def _env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3',
              PYTHONPATH=os.pathsep.join([str(TESTS), str(ROOT)]))


def _journal(job):
  path = job / 'measurements.jsonl'
  if not path.exists():
    return []
  return [json.loads(l) for l in path.read_text().split('\n')[:-1] if l.strip()]


def test_measure_layers_times_every_layer_once_across_an_interrupt_and_fits_on_them(tmp_path):
  job = tmp_path / 'job'
  first = subprocess.Popen([sys.executable, '-m', 'nascli', *_flags(job)], cwd=ROOT,
                           env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  deadline = time.monotonic() + 600
  while sum(e['event'] == 'layer' for e in _journal(job)) < 3:
    assert first.poll() is None, first.communicate()[1][-2000:]
    assert time.monotonic() < deadline
    time.sleep(0.2)
  first.send_signal(signal.SIGINT)
  _, err = first.communicate(timeout=300)
  assert first.returncode == 130, err[-2000:]
  assert 'layers' in err.strip().splitlines()[-1] and 'run the same command again' in err
  before = [e['key'] for e in _journal(job) if e['event'] == 'layer']
  assert 3 <= len(before) < 16

  second = subprocess.run([sys.executable, '-m', 'nascli', *_flags(job), '--json'], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=900)
  assert second.returncode == 0, second.stderr[-3000:]
  events = _journal(job)
  timed = [e['key'] for e in events if e['event'] == 'layer']
  sys.path.insert(0, str(TESTS))
  try:
    from user_spaces import layered_mnasnet  # pylint: disable=g-import-not-at-top
    every = layered_mnasnet.all_layers(latency_model.decisions_of_space('layered_mnasnet'), 32)
  finally:
    sys.path.remove(str(TESTS))
    # Importing the module registered its space in this worker: later tests here list the
    # prebuilt spaces (test_search_flags, test_search_spaces).
    from tf_vision.search_spaces import registry  # pylint: disable=g-import-not-at-top
    if 'layered_mnasnet' in registry.known_search_spaces():
      registry.unregister_search_space('layered_mnasnet')
  assert sorted(timed) == sorted(every) and len(timed) == 16  # each once, none lost
  assert timed[:len(before)] == before
  assert all(e['latency_ms'] > 0 and e['report']['runs'] >= 5 for e in events
             if e['event'] == 'layer')
  # Layers and architectures are interleaved, not one phase after the other.
  kinds = [e['event'] for e in events if e['event'] in ('layer', 'measured')]
  assert kinds.index('layer') < max(i for i, k in enumerate(kinds) if k == 'measured')
  result = json.loads(second.stdout)
  assert result['layers'] == 16 and result['measured'] == 12
  model = result['latency_model']
  assert 'layer_lookup' in model['cv'] and model['cv']['layer_lookup'] is not None
  saved = latency_model.load(job / 'latency_model.json')
  if saved.kind == 'layer_lookup':
    assert set(saved.predictor['table']) == set(every)
  assert 'measure_layers' not in events[0]['settings']
  # Without the flag the same job refits without its layers (no TensorFlow, nothing measured).
  flags = [f for f in _flags(job) if f != '--measure_layers']
  size = (job / 'measurements.jsonl').stat().st_size
  plain = subprocess.run([sys.executable, '-m', 'nascli', *flags, '--json'], cwd=ROOT,
                         env=_env(), capture_output=True, text=True, timeout=300)
  assert plain.returncode == 0, plain.stderr[-2000:]
  assert 'layer_lookup' not in json.loads(plain.stdout)['latency_model']['cv']
  assert 'all 12 architectures are measured' in plain.stderr
  assert (job / 'measurements.jsonl').stat().st_size == size


def test_measure_layers_of_a_space_without_layers_is_refused_before_tensorflow(tmp_path):
  out = subprocess.run([sys.executable, '-m', 'nascli', 'build_latency_model',
                        '--prebuilt_search_space', 'spinenet', '--measure_layers',
                        '--local_output_dir', str(tmp_path / 'j')],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
  assert out.returncode == 1
  assert out.stderr.strip() == ("Error: --measure_layers: search space 'spinenet' registers no"
                                " layers to time alone")
  assert not (tmp_path / 'j').exists()
