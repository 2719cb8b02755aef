"""Vertex mnasnet/spinenet spaces: decisions, key order, sizes, block specs, registry, search."""

import math
from pathlib import Path
import subprocess
import sys

import pyglove as pg
import pytest

from nascli.errors import NascliError
from tf_vision.search_spaces import get_dna_spec
from tf_vision.search_spaces import get_search_space
from tf_vision.search_spaces import known_search_spaces
from tf_vision.search_spaces import load_user_search_space
from tf_vision.search_spaces import mnasnet
from tf_vision.search_spaces import register_search_space
from tf_vision.search_spaces import spinenet
from tf_vision.search_spaces import to_nas_params
from tf_vision.search_spaces import unregister_search_space

MNASNET_FIELDS = ['num_repeats', 'block_fn', 'expand_ratio', 'kernel_size', 'se_ratio',
                  'output_filters']


def _keys(name):
  return [str(dp.id) for dp in get_dna_spec(name).decision_points]


def test_mnasnet_decisions_order_and_size():
  keys = _keys('mnasnet')
  assert len(keys) == 42
  assert keys == [f'blocks[{i}].{f}' for i in range(7) for f in MNASNET_FIELDS]
  assert keys[:6] == ['blocks[0].num_repeats', 'blocks[0].block_fn', 'blocks[0].expand_ratio',
                      'blocks[0].kernel_size', 'blocks[0].se_ratio', 'blocks[0].output_filters']
  assert keys[-1] == 'blocks[6].output_filters'
  size = get_dna_spec('mnasnet').space_size
  assert size == 144**2 * 216**5 == 9_749_755_840_167_936
  assert f'{size:.2e}' == '9.75e+15'


def test_mnasnet_candidates():
  blocks = get_search_space('mnasnet')['blocks']
  assert [b['num_repeats'].candidates for b in blocks] == [
      [1, 2], [2, 1, 3], [3, 2, 4], [4, 3, 5], [3, 2, 4], [3, 2, 4], [1, 2]]
  assert [b['output_filters'].candidates for b in blocks] == [
      [12, 16, 20], [18, 24, 30], [24, 32, 40], [48, 64, 80], [72, 96, 120], [120, 160, 200],
      [240, 320, 400]]
  for b in blocks:
    assert list(b.keys()) == MNASNET_FIELDS
    assert b['block_fn'].candidates == ['conv', 'mbconv']
    assert b['expand_ratio'].candidates == [1, 3, 6]
    assert b['kernel_size'].candidates == [3, 5]
    assert b['se_ratio'].candidates == [0.0, 0.25]


def test_mnasnet_block_specs_of_first_candidates():
  """Index 0 everywhere: MobileNetV2 repeats, conv, expand 1, k3, no SE, 0.75x filters."""
  dna = pg.DNA.from_numbers([0] * 42, get_dna_spec('mnasnet'))
  specs = mnasnet.block_specs(dna)
  assert specs == [
      {'num_repeats': r, 'block_fn': 'conv', 'expand_ratio': 1, 'kernel_size': 3,
       'se_ratio': 0.0, 'output_filters': f}
      for r, f in zip([1, 2, 3, 4, 3, 3, 1], [12, 18, 24, 48, 72, 120, 240])]
  assert mnasnet.block_specs(pg.materialize(get_search_space('mnasnet'), dna)) == specs


def _spinenet_expected_keys():
  keys = []
  for i in range(11):
    keys += [f'intermediate_blocks[{i}].level_offset', f'intermediate_blocks[{i}].block_fn',
             f'intermediate_blocks[{i}].input_offsets[0]',
             f'intermediate_blocks[{i}].input_offsets[1]']
  keys += [f'intermediate_block_levels[{i}]' for i in range(11)]
  for j in range(5):
    keys += [f'output_blocks[{j}].block_fn', f'output_blocks[{j}].input_offsets[0]',
             f'output_blocks[{j}].input_offsets[1]']
  return keys + [f'output_block_levels[{j}]' for j in range(5)]


def test_spinenet_decisions_order_and_size():
  keys = _keys('spinenet')
  assert len(keys) == 75
  assert keys == _spinenet_expected_keys()
  assert keys[:5] == ['intermediate_blocks[0].level_offset', 'intermediate_blocks[0].block_fn',
                      'intermediate_blocks[0].input_offsets[0]',
                      'intermediate_blocks[0].input_offsets[1]',
                      'intermediate_blocks[1].level_offset']
  assert keys[44:46] == ['intermediate_block_levels[0]', 'intermediate_block_levels[1]']
  assert keys[-7:] == ['output_blocks[4].input_offsets[0]', 'output_blocks[4].input_offsets[1]',
                       'output_block_levels[0]', 'output_block_levels[1]',
                       'output_block_levels[2]', 'output_block_levels[3]',
                       'output_block_levels[4]']
  size = get_dna_spec('spinenet').space_size
  expected = (4**11 * 2**11 * (1 * 3 * 6**9) * math.factorial(11)
              * 2**5 * math.prod(math.comb(n, 2) for n in range(13, 18)) * math.factorial(5))
  assert size == expected
  assert f'{size:.2e}' == '4.84e+38'


def test_spinenet_candidates():
  space = get_search_space('spinenet')
  for i, block in enumerate(space['intermediate_blocks']):
    assert list(block.keys()) == ['level_base', 'level_offset', 'block_fn', 'input_offsets']
    assert block['level_base'] is None
    assert block['level_offset'].candidates == [-1, 0, 1, 2]
    assert block['block_fn'].candidates == ['residual', 'bottleneck']
    assert block['input_offsets'].candidates == list(range(max(2 + i - 4, 0), 2 + i))
  assert [len(b['input_offsets'].candidates) for b in space['intermediate_blocks'][:4]] == [
      2, 3, 4, 4]
  assert space['intermediate_block_levels'].candidates == [2, 3, 3, 3, 4, 4, 4, 4, 4, 5, 5]
  for j, block in enumerate(space['output_blocks']):
    assert block['level_offset'] == 0
    assert block['input_offsets'].candidates == list(range(13 + j))
  assert space['output_block_levels'].candidates == [3, 4, 5, 6, 7]


def _check_spinenet_specs(specs):
  """What any point of the space must decode to (Vertex's order, stems not listed)."""
  assert len(specs) == 16
  assert [s['is_output'] for s in specs] == [False] * 11 + [True] * 5
  assert sorted(s['level_base'] for s in specs[:11]) == [2, 3, 3, 3, 4, 4, 4, 4, 4, 5, 5]
  assert sorted(s['level_base'] for s in specs[11:]) == [3, 4, 5, 6, 7]
  for k, s in enumerate(specs):
    assert list(s) == ['level_base', 'level_offset', 'block_fn', 'input_offsets', 'is_output']
    a, b = s['input_offsets']
    low = max(k + 2 - 4, 0) if k < 11 else 0
    assert low <= a < b < k + 2  # indices into [stem0, stem1, block0, ...]
    assert s['level_offset'] in ((-1, 0, 1, 2) if k < 11 else (0,))
    assert s['block_fn'] in ('residual', 'bottleneck')


def test_spinenet_block_specs_of_random_points():
  algo = pg.geno.Random(seed=5)
  algo.setup(get_dna_spec('spinenet'))
  for _ in range(3):
    dna = algo.propose()
    specs = spinenet.block_specs(dna)
    _check_spinenet_specs(specs)
    point = pg.materialize(get_search_space('spinenet'), dna)
    assert spinenet.block_specs(point) == specs
    assert [s['level_base'] for s in specs[:11]] == list(point['intermediate_block_levels'])


def _random_run(seed, name='mnasnet', n=6):
  algo = pg.geno.Random(seed=seed)
  algo.setup(get_dna_spec(name))
  return [algo.propose().to_numbers() for _ in range(n)]


def test_random_search_is_deterministic():
  first = _random_run(3)
  assert first == _random_run(3)
  assert first != _random_run(4)
  assert len({tuple(x) for x in first}) == 6


def _evolution_run(seed, n=8):
  """Regularized evolution on spinenet, rewards fed back from the decoded blocks."""
  algo = pg.evolution.regularized_evolution(
      mutator=pg.evolution.mutators.Uniform(seed=seed), population_size=4, tournament_size=2,
      seed=seed)
  algo.setup(get_dna_spec('spinenet'))
  proposals = []
  for _ in range(n):
    dna = algo.propose()
    specs = spinenet.block_specs(dna)
    _check_spinenet_specs(specs)  # Mutations stay inside the space (sorted, distinct pairs).
    proposals.append(tuple(dna.to_numbers()))
    reward = sum(s['level_base'] + s['level_offset'] for s in specs) / 100
    algo.feedback(dna, reward)
  return proposals


def test_regularized_evolution_is_deterministic():
  first = _evolution_run(7)
  assert first == _evolution_run(7)
  assert first[:5] != _evolution_run(8, n=5)
  # After the 4 random founders, each child differs from some earlier proposal in a few places.
  for k in range(4, len(first)):
    assert min(sum(x != y for x, y in zip(first[k], prev)) for prev in first[:k]) < 20


def test_registry(monkeypatch):
  # Another test in the same worker may have imported a user module that registers a space
  # (tests/user_spaces/layered_mnasnet.py); this test is about the prebuilt registry alone.
  from tf_vision.search_spaces import registry  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(registry, '_REGISTRY',
                      {k: v for k, v in registry._REGISTRY.items() if k in ('mnasnet', 'spinenet')})
  assert known_search_spaces() == ['mnasnet', 'spinenet']
  assert get_search_space('mnasnet') is not get_search_space('mnasnet')  # Fresh, mutable.
  with pytest.raises(NascliError) as e:
    get_search_space('nasfpn')
  assert str(e.value) == "unknown search space 'nasfpn'; known: mnasnet, spinenet"

  @register_search_space('tiny_for_test')
  def _tiny():
    return pg.Dict(x=pg.oneof([1, 2, 3]))

  try:
    assert known_search_spaces() == ['mnasnet', 'spinenet', 'tiny_for_test']
    assert to_nas_params('tiny_for_test', pg.DNA(2)) == {'x': '2/3 (3)'}
    with pytest.raises(ValueError, match="'tiny_for_test' is already registered"):
      register_search_space('tiny_for_test')(lambda: None)
  finally:
    unregister_search_space('tiny_for_test')
  assert known_search_spaces() == ['mnasnet', 'spinenet']


USER_MODULE = '''
import pyglove as pg

NOT_A_FUNCTION = 3


def tiny_space():
  return pg.Dict(width=pg.oneof([8, 16]), act=pg.oneof(['relu', 'swish']))


def broken_space():
  raise RuntimeError('boom')


def not_a_space():
  return 42
'''


def test_load_user_search_space(tmp_path, monkeypatch):
  (tmp_path / 'nascli_user_space_for_test.py').write_text(USER_MODULE)
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.delitem(sys.modules, 'nascli_user_space_for_test', raising=False)
  space = load_user_search_space('nascli_user_space_for_test.tiny_space')
  assert to_nas_params(space, pg.DNA([1, 0])) == {'width': '1/2 (16)', 'act': "0/2 ('relu')"}

  prefix = "search space module 'nascli_user_space_for_test."
  bad = {
      'nodots': "search space module 'nodots': expected a dotted path "
                "'package.module.function'",
      'no_such_module_xyz.fn': "search space module 'no_such_module_xyz.fn': cannot import "
                               "module 'no_such_module_xyz' (ModuleNotFoundError: No module "
                               "named 'no_such_module_xyz')",
      'nascli_user_space_for_test.missing': prefix + "missing': module "
                                            "'nascli_user_space_for_test' has no function "
                                            "'missing'",
      'nascli_user_space_for_test.NOT_A_FUNCTION': prefix + "NOT_A_FUNCTION': 'NOT_A_FUNCTION' "
                                                   "in module 'nascli_user_space_for_test' is "
                                                   'not a function',
      'nascli_user_space_for_test.broken_space': prefix + "broken_space': function "
                                                 "'broken_space' failed (RuntimeError: boom)",
      'nascli_user_space_for_test.not_a_space': prefix + "not_a_space': function 'not_a_space' "
                                                "returned int with no decision points "
                                                '(pg.oneof, pg.sublist_of, pg.floatv)',
  }
  for path, message in bad.items():
    with pytest.raises(NascliError) as e:
      load_user_search_space(path)
    assert str(e.value) == message


def test_no_tensorflow_import():
  """The search controller imports the spaces without paying for TensorFlow."""
  code = ('import sys; import tf_vision.search_spaces; '
          "print('tensorflow' in sys.modules, 'tf_keras' in sys.modules)")
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                       check=True, cwd=str(Path(__file__).parents[1]))
  assert out.stdout.split() == ['False', 'False']
