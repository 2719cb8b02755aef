"""nas_params_str: literal Vertex fixtures decode to known blocks, round trips, one-line errors."""

import json
import re

import pyglove as pg
import pytest

from nascli.errors import NascliError
from tf_vision.search_spaces import decode
from tf_vision.search_spaces import from_nas_params
from tf_vision.search_spaces import get_dna_spec
from tf_vision.search_spaces import get_search_space
from tf_vision.search_spaces import mnasnet
from tf_vision.search_spaces import spinenet
from tf_vision.search_spaces import to_nas_params
from tf_vision.search_spaces import to_nas_params_str

# Written by hand in Vertex's format; block 0 is the example of the spec notes (section 2.3).
MNASNET_NAS_PARAMS_STR = """{
  "blocks[0].num_repeats": "0/2 (1)", "blocks[0].block_fn": "0/2 ('conv')",
  "blocks[0].expand_ratio": "1/3 (3)", "blocks[0].kernel_size": "0/2 (3)",
  "blocks[0].se_ratio": "1/2 (0.25)", "blocks[0].output_filters": "1/3 (16)",
  "blocks[1].num_repeats": "2/3 (3)", "blocks[1].block_fn": "1/2 ('mbconv')",
  "blocks[1].expand_ratio": "2/3 (6)", "blocks[1].kernel_size": "1/2 (5)",
  "blocks[1].se_ratio": "0/2 (0.0)", "blocks[1].output_filters": "0/3 (18)",
  "blocks[2].num_repeats": "1/3 (2)", "blocks[2].block_fn": "1/2 ('mbconv')",
  "blocks[2].expand_ratio": "0/3 (1)", "blocks[2].kernel_size": "0/2 (3)",
  "blocks[2].se_ratio": "1/2 (0.25)", "blocks[2].output_filters": "2/3 (40)",
  "blocks[3].num_repeats": "0/3 (4)", "blocks[3].block_fn": "1/2 ('mbconv')",
  "blocks[3].expand_ratio": "1/3 (3)", "blocks[3].kernel_size": "1/2 (5)",
  "blocks[3].se_ratio": "0/2 (0.0)", "blocks[3].output_filters": "1/3 (64)",
  "blocks[4].num_repeats": "2/3 (4)", "blocks[4].block_fn": "0/2 ('conv')",
  "blocks[4].expand_ratio": "2/3 (6)", "blocks[4].kernel_size": "0/2 (3)",
  "blocks[4].se_ratio": "0/2 (0.0)", "blocks[4].output_filters": "2/3 (120)",
  "blocks[5].num_repeats": "0/3 (3)", "blocks[5].block_fn": "1/2 ('mbconv')",
  "blocks[5].expand_ratio": "2/3 (6)", "blocks[5].kernel_size": "1/2 (5)",
  "blocks[5].se_ratio": "1/2 (0.25)", "blocks[5].output_filters": "0/3 (120)",
  "blocks[6].num_repeats": "1/2 (2)", "blocks[6].block_fn": "1/2 ('mbconv')",
  "blocks[6].expand_ratio": "2/3 (6)", "blocks[6].kernel_size": "0/2 (3)",
  "blocks[6].se_ratio": "0/2 (0.0)", "blocks[6].output_filters": "2/3 (400)"
}"""

# (num_repeats, block_fn, expand_ratio, kernel_size, se_ratio, output_filters)
MNASNET_EXPECTED = [
    (1, 'conv', 3, 3, 0.25, 16),
    (3, 'mbconv', 6, 5, 0.0, 18),
    (2, 'mbconv', 1, 3, 0.25, 40),
    (4, 'mbconv', 3, 5, 0.0, 64),
    (4, 'conv', 6, 3, 0.0, 120),
    (3, 'mbconv', 6, 5, 0.25, 120),
    (2, 'mbconv', 6, 3, 0.0, 400),
]
MNASNET_DNA = [0, 0, 1, 0, 1, 1, 2, 1, 2, 1, 0, 0, 1, 1, 0, 0, 1, 2, 0, 1, 1, 1, 0, 1,
               2, 0, 2, 0, 0, 2, 0, 1, 2, 1, 1, 0, 1, 1, 2, 0, 0, 2]

SPINENET_NAS_PARAMS_STR = """{
  "intermediate_blocks[0].level_offset": "1/4 (0)",
  "intermediate_blocks[0].block_fn": "1/2 ('bottleneck')",
  "intermediate_blocks[0].input_offsets[0]": "0/2 (0)",
  "intermediate_blocks[0].input_offsets[1]": "1/2 (1)",
  "intermediate_blocks[1].level_offset": "2/4 (1)",
  "intermediate_blocks[1].block_fn": "0/2 ('residual')",
  "intermediate_blocks[1].input_offsets[0]": "1/3 (1)",
  "intermediate_blocks[1].input_offsets[1]": "2/3 (2)",
  "intermediate_blocks[2].level_offset": "0/4 (-1)",
  "intermediate_blocks[2].block_fn": "1/2 ('bottleneck')",
  "intermediate_blocks[2].input_offsets[0]": "0/4 (0)",
  "intermediate_blocks[2].input_offsets[1]": "3/4 (3)",
  "intermediate_blocks[3].level_offset": "3/4 (2)",
  "intermediate_blocks[3].block_fn": "1/2 ('bottleneck')",
  "intermediate_blocks[3].input_offsets[0]": "1/4 (2)",
  "intermediate_blocks[3].input_offsets[1]": "3/4 (4)",
  "intermediate_blocks[4].level_offset": "1/4 (0)",
  "intermediate_blocks[4].block_fn": "0/2 ('residual')",
  "intermediate_blocks[4].input_offsets[0]": "2/4 (4)",
  "intermediate_blocks[4].input_offsets[1]": "3/4 (5)",
  "intermediate_blocks[5].level_offset": "2/4 (1)",
  "intermediate_blocks[5].block_fn": "1/2 ('bottleneck')",
  "intermediate_blocks[5].input_offsets[0]": "0/4 (3)",
  "intermediate_blocks[5].input_offsets[1]": "3/4 (6)",
  "intermediate_blocks[6].level_offset": "1/4 (0)",
  "intermediate_blocks[6].block_fn": "1/2 ('bottleneck')",
  "intermediate_blocks[6].input_offsets[0]": "1/4 (5)",
  "intermediate_blocks[6].input_offsets[1]": "3/4 (7)",
  "intermediate_blocks[7].level_offset": "0/4 (-1)",
  "intermediate_blocks[7].block_fn": "0/2 ('residual')",
  "intermediate_blocks[7].input_offsets[0]": "1/4 (6)",
  "intermediate_blocks[7].input_offsets[1]": "3/4 (8)",
  "intermediate_blocks[8].level_offset": "3/4 (2)",
  "intermediate_blocks[8].block_fn": "1/2 ('bottleneck')",
  "intermediate_blocks[8].input_offsets[0]": "1/4 (7)",
  "intermediate_blocks[8].input_offsets[1]": "3/4 (9)",
  "intermediate_blocks[9].level_offset": "1/4 (0)",
  "intermediate_blocks[9].block_fn": "1/2 ('bottleneck')",
  "intermediate_blocks[9].input_offsets[0]": "1/4 (8)",
  "intermediate_blocks[9].input_offsets[1]": "3/4 (10)",
  "intermediate_blocks[10].level_offset": "2/4 (1)",
  "intermediate_blocks[10].block_fn": "0/2 ('residual')",
  "intermediate_blocks[10].input_offsets[0]": "1/4 (9)",
  "intermediate_blocks[10].input_offsets[1]": "3/4 (11)",
  "intermediate_block_levels[0]": "1/11 (3)",
  "intermediate_block_levels[1]": "0/11 (2)",
  "intermediate_block_levels[2]": "4/11 (4)",
  "intermediate_block_levels[3]": "9/11 (5)",
  "intermediate_block_levels[4]": "2/11 (3)",
  "intermediate_block_levels[5]": "5/11 (4)",
  "intermediate_block_levels[6]": "6/11 (4)",
  "intermediate_block_levels[7]": "10/11 (5)",
  "intermediate_block_levels[8]": "3/11 (3)",
  "intermediate_block_levels[9]": "7/11 (4)",
  "intermediate_block_levels[10]": "8/11 (4)",
  "output_blocks[0].block_fn": "1/2 ('bottleneck')",
  "output_blocks[0].input_offsets[0]": "10/13 (10)",
  "output_blocks[0].input_offsets[1]": "12/13 (12)",
  "output_blocks[1].block_fn": "1/2 ('bottleneck')",
  "output_blocks[1].input_offsets[0]": "3/14 (3)",
  "output_blocks[1].input_offsets[1]": "13/14 (13)",
  "output_blocks[2].block_fn": "0/2 ('residual')",
  "output_blocks[2].input_offsets[0]": "11/15 (11)",
  "output_blocks[2].input_offsets[1]": "14/15 (14)",
  "output_blocks[3].block_fn": "1/2 ('bottleneck')",
  "output_blocks[3].input_offsets[0]": "12/16 (12)",
  "output_blocks[3].input_offsets[1]": "15/16 (15)",
  "output_blocks[4].block_fn": "1/2 ('bottleneck')",
  "output_blocks[4].input_offsets[0]": "14/17 (14)",
  "output_blocks[4].input_offsets[1]": "16/17 (16)",
  "output_block_levels[0]": "1/5 (4)",
  "output_block_levels[1]": "0/5 (3)",
  "output_block_levels[2]": "2/5 (5)",
  "output_block_levels[3]": "4/5 (7)",
  "output_block_levels[4]": "3/5 (6)"
}"""

# (level_base, level_offset, block_fn, input_offsets, is_output); stems are not listed.
SPINENET_EXPECTED = [
    (3, 0, 'bottleneck', [0, 1], False),
    (2, 1, 'residual', [1, 2], False),
    (4, -1, 'bottleneck', [0, 3], False),
    (5, 2, 'bottleneck', [2, 4], False),
    (3, 0, 'residual', [4, 5], False),
    (4, 1, 'bottleneck', [3, 6], False),
    (4, 0, 'bottleneck', [5, 7], False),
    (5, -1, 'residual', [6, 8], False),
    (3, 2, 'bottleneck', [7, 9], False),
    (4, 0, 'bottleneck', [8, 10], False),
    (4, 1, 'residual', [9, 11], False),
    (4, 0, 'bottleneck', [10, 12], True),
    (3, 0, 'bottleneck', [3, 13], True),
    (5, 0, 'residual', [11, 14], True),
    (7, 0, 'bottleneck', [12, 15], True),
    (6, 0, 'bottleneck', [14, 16], True),
]

_VERTEX_VALUE = re.compile(r'^\d+/\d+( \(.*\))?$')


def _as_tuples(specs, fields):
  return [tuple(spec[f] for f in fields) for spec in specs]


def test_mnasnet_fixture_decodes_to_blocks():
  dna, specs = decode('mnasnet', MNASNET_NAS_PARAMS_STR)
  assert dna.to_numbers() == MNASNET_DNA
  assert _as_tuples(specs, mnasnet.BLOCK_FIELDS) == MNASNET_EXPECTED
  assert all(list(s) == list(mnasnet.BLOCK_FIELDS) for s in specs)
  # block_specs_json: plain JSON, identical after a JSON round trip (floats stay floats).
  assert json.loads(json.dumps(specs)) == specs
  assert isinstance(specs[1]['se_ratio'], float)
  # Vertex decodes with pg.materialize(space, dict) directly: same architecture.
  vertex_way = pg.materialize(get_search_space('mnasnet'), json.loads(MNASNET_NAS_PARAMS_STR))
  assert mnasnet.block_specs(vertex_way) == specs
  # Writing the DNA back gives the fixture exactly, keys in the same order.
  assert to_nas_params('mnasnet', dna) == json.loads(MNASNET_NAS_PARAMS_STR)
  assert list(to_nas_params('mnasnet', dna)) == list(json.loads(MNASNET_NAS_PARAMS_STR))


def test_spinenet_fixture_decodes_to_blocks():
  dna, specs = decode('spinenet', SPINENET_NAS_PARAMS_STR)
  assert _as_tuples(specs, spinenet.BLOCK_SPEC_FIELDS) == SPINENET_EXPECTED
  assert all(list(s) == list(spinenet.BLOCK_SPEC_FIELDS) for s in specs)
  assert json.loads(json.dumps(specs)) == specs
  # Final levels (base + offset) of the intermediate blocks, and the output level permutation.
  assert [s['level_base'] + s['level_offset'] for s in specs[:11]] == [3, 3, 3, 7, 3, 5, 4, 4,
                                                                       5, 4, 5]
  assert sorted(s['level_base'] for s in specs[:11]) == [2, 3, 3, 3, 4, 4, 4, 4, 4, 5, 5]
  assert [s['level_base'] for s in specs[11:]] == [4, 3, 5, 7, 6]
  vertex_way = pg.materialize(get_search_space('spinenet'), json.loads(SPINENET_NAS_PARAMS_STR))
  assert spinenet.block_specs(vertex_way) == specs
  assert list(to_nas_params('spinenet', dna).items()) == list(
      json.loads(SPINENET_NAS_PARAMS_STR).items())


def test_optional_literal_and_file_input(tmp_path):
  """"0/2" without the literal is accepted (as pyglove does); a .json path is read."""
  bare = {k: v.split(' ')[0] for k, v in json.loads(MNASNET_NAS_PARAMS_STR).items()}
  assert from_nas_params('mnasnet', bare).to_numbers() == MNASNET_DNA
  path = tmp_path / 'nas_params_str.json'
  path.write_text(MNASNET_NAS_PARAMS_STR)
  assert from_nas_params('mnasnet', str(path)).to_numbers() == MNASNET_DNA
  assert from_nas_params('mnasnet', path).to_numbers() == MNASNET_DNA
  assert json.loads(to_nas_params_str('mnasnet', from_nas_params('mnasnet', path))) == (
      json.loads(MNASNET_NAS_PARAMS_STR))


# 25 per space, 50 in all: pyglove builds a DNA in ~50 ms here, and the machine is shared.
@pytest.mark.parametrize('name', ['mnasnet', 'spinenet'])
def test_round_trip_random_dnas(name):
  spec = get_dna_spec(name)
  keys = [str(dp.id) for dp in spec.decision_points]
  algo = pg.geno.Random(seed=11)
  algo.setup(spec)
  seen = set()
  for _ in range(25):
    dna = algo.propose()
    params = to_nas_params(name, dna)
    assert list(params) == keys
    assert all(_VERTEX_VALUE.match(v) for v in params.values())
    text = json.dumps(params)
    # from_nas_params ends in pyglove's own parser (DNA.from_parameters, what Vertex calls).
    back = from_nas_params(name, text)
    assert back == dna
    assert back.to_numbers() == dna.to_numbers()
    seen.add(text)
  assert len(seen) == 25


def _mnasnet_edit(key, value):
  params = json.loads(MNASNET_NAS_PARAMS_STR)
  if value is None:
    del params[key]
  else:
    params[key] = value
  return params


def _spinenet_edit(**edits):
  params = json.loads(SPINENET_NAS_PARAMS_STR)
  params.update(edits)
  return params


@pytest.mark.parametrize('params, message', [
    ('{"blocks[0].num_repeats": "0/2 (1)",}',
     'nas_params_str: malformed JSON: Expecting property name enclosed in double quotes at '
     'line 1 column 37'),
    ('[1, 2]',
     'nas_params_str: expected a JSON object mapping decision keys to values, got an array'),
    ('"0/2 (1)"',
     'nas_params_str: expected a JSON object mapping decision keys to values, got a string'),
    (_mnasnet_edit('blocks[6].output_filters', None),
     "nas_params: missing key 'blocks[6].output_filters'"),
    ({**json.loads(MNASNET_NAS_PARAMS_STR), 'blocks[7].kernel_size': '0/2 (3)'},
     "nas_params: unknown key 'blocks[7].kernel_size' (not a decision of search space "
     "'mnasnet')"),
    (_mnasnet_edit('blocks[0].kernel_size', 3),
     "nas_params: key 'blocks[0].kernel_size': value 3 is not "
     "'<index>/<num_candidates> (<literal>)'"),
    (_mnasnet_edit('blocks[0].kernel_size', '0/2(3)'),
     "nas_params: key 'blocks[0].kernel_size': value '0/2(3)' is not "
     "'<index>/<num_candidates> (<literal>)'"),
    (_mnasnet_edit('blocks[0].kernel_size', '0/3 (3)'),
     "nas_params: key 'blocks[0].kernel_size': value '0/3 (3)' says 3 candidates, the search "
     'space has 2'),
    (_mnasnet_edit('blocks[0].kernel_size', '2/2 (7)'),
     "nas_params: key 'blocks[0].kernel_size': index 2 is out of range for 2 candidates"),
    (_mnasnet_edit('blocks[2].expand_ratio', '1/3 (5)'),
     "nas_params: key 'blocks[2].expand_ratio': literal (5) does not match candidate 1, which "
     'is (3)'),
    (_mnasnet_edit('blocks[0].block_fn', '0/2 (conv)'),
     "nas_params: key 'blocks[0].block_fn': literal (conv) does not match candidate 0, which is "
     "('conv')"),
])
def test_malformed_mnasnet_params(params, message):
  with pytest.raises(NascliError) as e:
    from_nas_params('mnasnet', params)
  assert str(e.value) == message
  assert '\n' not in str(e.value)


@pytest.mark.parametrize('edits, message', [
    ({'intermediate_blocks[3].input_offsets[1]': '1/4 (2)'},
     "nas_params: key 'intermediate_blocks[3].input_offsets[1]': index 1 repeats "
     "'intermediate_blocks[3].input_offsets[0]' (the choices of "
     "'intermediate_blocks[3].input_offsets' must be distinct)"),
    ({'output_blocks[0].input_offsets[0]': '12/13 (12)',
      'output_blocks[0].input_offsets[1]': '10/13 (10)'},
     "nas_params: key 'output_blocks[0].input_offsets[1]': index 10 is below "
     "'output_blocks[0].input_offsets[0]' (the choices of 'output_blocks[0].input_offsets' must "
     'be in increasing order)'),
    ({'intermediate_block_levels[10]': '6/11 (4)'},
     "nas_params: key 'intermediate_block_levels[10]': index 6 repeats "
     "'intermediate_block_levels[6]' (the choices of 'intermediate_block_levels' must be "
     'distinct)'),
    ({'intermediate_block_levels[0]': '1/11 (4)'},
     "nas_params: key 'intermediate_block_levels[0]': literal (4) does not match candidate 1, "
     'which is (3)'),
])
def test_malformed_spinenet_params(edits, message):
  with pytest.raises(NascliError) as e:
    from_nas_params('spinenet', _spinenet_edit(**edits))
  assert str(e.value) == message


def test_file_errors_name_the_file(tmp_path):
  bad = tmp_path / 'bad.json'
  bad.write_text('{"blocks[0].num_repeats": ')
  with pytest.raises(NascliError) as e:
    from_nas_params('mnasnet', str(bad))
  assert str(e.value) == f'{bad}: malformed JSON: Expecting value at line 1 column 27'
  missing = tmp_path / 'missing.json'
  with pytest.raises(NascliError) as e:
    from_nas_params('mnasnet', str(missing))
  assert str(e.value) == f'{missing}: cannot read nas_params file (No such file or directory)'
  with pytest.raises(NascliError) as e:
    decode('no_such_space', MNASNET_NAS_PARAMS_STR)
  assert str(e.value) == "unknown search space 'no_such_space'; known: mnasnet, spinenet"


def test_wrong_space_dna_is_rejected():
  mnasnet_dna = from_nas_params('mnasnet', MNASNET_NAS_PARAMS_STR)
  with pytest.raises(NascliError, match='is not a point of this search space'):
    to_nas_params('spinenet', mnasnet_dna)
