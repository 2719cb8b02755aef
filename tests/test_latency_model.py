"""Latency models: recovery of known ground truths, kind choice, exact minimum, file checks."""

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nascli import latency_model
from nascli.errors import NascliError
from nascli.latency_model import encoding
from nascli.latency_model import predictors

ROOT = Path(__file__).resolve().parent.parent


def loaded_in_a_fresh_process(path, nas_params, *values: str) -> list:
  """[each of `values` (Python over `model` and `p`), the heavy modules imported] as a new
  interpreter sees them after `model = nascli.latency_model.load(path)`, `p` = `nas_params`."""
  code = ('import json, sys; from nascli import latency_model as m; '
          f'model = m.load({str(path)!r}); '
          f'p = json.loads({json.dumps(json.dumps(nas_params))}); '
          f'print(json.dumps([{", ".join(values)}, '
          'sorted(k for k in ("tensorflow", "pyglove") if k in sys.modules)]))')
  out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
  assert out.returncode == 0, out.stderr
  return json.loads(out.stdout)

# mnasnet's shape: 7 blocks x 6 decisions of 2-3 candidates (its keys; made-up literals, so the
# space is named 'synthetic': no cost features).
FIELDS = (('num_repeats', 3), ('block_fn', 2), ('expand_ratio', 3), ('kernel_size', 2),
          ('se_ratio', 2), ('output_filters', 3))


def mnasnet_like(blocks: int = 7, fields=FIELDS) -> dict[str, list[str]]:
  return {f'blocks[{b}].{name}': [str(10 * b + c) for c in range(n)]
          for b in range(blocks) for name, n in fields}


def random_params(decisions, rng) -> dict[str, str]:
  out = {}
  for key, literals in decisions.items():
    i = int(rng.integers(len(literals)))
    out[key] = f'{i}/{len(literals)} ({literals[i]})'
  return out


def index(nas_params, key) -> int:
  return int(nas_params[key].split('/')[0])


def additive_truth(decisions, seed):
  rng = np.random.default_rng(seed)
  cost = {key: np.concatenate([[0.0], rng.uniform(0.0, 3.0, len(v) - 1)])
          for key, v in decisions.items()}
  return lambda p: 8.0 + sum(cost[k][index(p, k)] for k in decisions)


def interaction_truth(decisions, seed):
  """Each block's choices cost more the wider its input (the previous block's filters)."""
  rng = np.random.default_rng(seed)
  cost = {key: np.concatenate([[0.0], rng.uniform(0.5, 3.0, len(v) - 1)])
          for key, v in decisions.items()}
  blocks = sorted({int(k.split('[')[1].split(']')[0]) for k in decisions})

  def truth(p):
    total = 8.0
    for b in blocks:
      width = 1.0 if b == 0 else 1.0 + 1.2 * index(p, f'blocks[{b - 1}].output_filters')
      total += width * sum(cost[k][index(p, k)] for k in decisions
                           if k.startswith(f'blocks[{b}].'))
    return total
  return truth


def measured(decisions, truth, count, seed, noise=0.01):
  rng = np.random.default_rng(seed)
  rows = []
  for _ in range(count):
    p = random_params(decisions, rng)
    rows.append((p, truth(p) * (1.0 + noise * rng.standard_normal())))
  return rows


def build(rows_train, rows_heldout, decisions, **kw):
  args = dict(space='synthetic', decisions=decisions, runtime='cpu-tflite',
              runtime_version='ai-edge-litert 2.3.0', device='Test CPU', input_size=224,
              num_threads=1, seed=0)
  args.update(kw)
  return latency_model.build(rows_train, rows_heldout, **args)


@pytest.fixture(scope='module')
def additive():
  decisions = mnasnet_like()
  truth = additive_truth(decisions, 1)
  rows = measured(decisions, truth, 250, 2)
  return decisions, build(rows[:150], rows[150:], decisions), rows


def one_line_error(fn, *needles) -> str:
  with pytest.raises(NascliError) as info:
    fn()
  text = str(info.value)
  assert '\n' not in text, text
  for needle in needles:
    assert needle in text, text
  return text


# ----- fitting and choosing


def test_additive_truth_recovered_and_linear_kept(additive):
  _, model, _ = additive
  assert model.kind == 'linear', model.cv
  assert set(model.cv) == set(latency_model.PREDICTORS) - {'cost_features', 'layer_lookup'}
  assert model.heldout['n'] == 100
  assert model.heldout['kendall_tau'] > 0.9, model.heldout
  assert model.heldout['within_10pct'] >= 0.95, model.heldout
  assert model.heldout['mape'] < 3.0, model.heldout
  assert model.measurements == 150


def test_interactions_win_cv_where_latency_depends_on_input_width():
  decisions = mnasnet_like()
  rows = measured(decisions, interaction_truth(decisions, 3), 300, 4)
  model = build(rows[:200], rows[200:], decisions)
  assert model.kind == 'interactions', model.cv
  assert model.cv['interactions'] < 0.9 * model.cv['linear'], model.cv
  linear = latency_model.fit_best(rows[:200], 0, decisions=decisions, kinds=['linear'])
  assert linear.kind == 'linear' and set(linear.cv) == {'linear'}
  lay = encoding.layout(decisions)
  linear_heldout = latency_model.evaluate(
      lambda p: predictors.PREDICTORS['linear'].predict_one(
          lay, linear.params, encoding.parse(p, decisions)), rows[200:])
  assert model.heldout['mape'] < 0.7 * linear_heldout['mape'], (model.heldout, linear_heldout)
  assert model.heldout['kendall_tau'] > max(0.9, linear_heldout['kendall_tau'])


def test_richer_kind_needs_the_margin():
  decisions = mnasnet_like()
  rows = measured(decisions, interaction_truth(decisions, 3), 200, 4)
  kinds = ['linear', 'interactions']
  best = latency_model.fit_best(rows, 0, decisions=decisions, kinds=kinds)
  assert best.kind == 'interactions'
  # The same CV errors, with a margin no kind can clear: linear is kept.
  kept = latency_model.fit_best(rows, 0, decisions=decisions, kinds=kinds, margin=0.99)
  assert kept.kind == 'linear' and kept.cv == best.cv


def test_heldout_rows_take_no_part_in_fitting_or_choosing():
  decisions = mnasnet_like()
  rows = measured(decisions, interaction_truth(decisions, 5), 160, 6)
  kinds = ['linear', 'interactions']
  a = build(rows[:100], rows[100:130], decisions, kinds=kinds)
  b = build(rows[:100], rows[130:], decisions, kinds=kinds)
  assert a.predictor == b.predictor and a.cv == b.cv
  assert a.heldout != b.heldout


def test_lookup_uses_its_table_for_seen_tuples_and_backs_off_for_others():
  decisions = mnasnet_like(blocks=3, fields=(('kernel_size', 2), ('expand_ratio', 3),
                                             ('output_filters', 3)))
  rows = measured(decisions, interaction_truth(decisions, 7), 12, 8)
  lay = encoding.layout(decisions)
  kind = predictors.PREDICTORS['lookup']
  x, y = predictors.rows_to_arrays(rows, decisions)
  params = kind.fitted(lay, x, y, 0)
  tables, terms = params['tables'], params['terms']

  def expected(arch):
    parts = [params['intercept']]
    for group in lay.groups:
      key = ','.join(str(arch[j]) for j in group.members)
      parts.append(tables[group.name][key] if key in tables[group.name]
                   else sum(terms[lay.keys[j]][arch[j]] for j in group.members))
    return sum(parts)

  for group in lay.groups:
    assert len(tables[group.name]) == len({tuple(r) for r in x[:, group.members].tolist()})
  seen = x[0].tolist()
  unseen = [i for i in itertools.product(*[range(n) for n in lay.counts])
            if ','.join(map(str, i[3:6])) not in tables['blocks[1]']][0]
  corrected = [abs(v - sum(terms[lay.keys[j]][int(c)] for j, c in zip(lay.groups[1].members,
                                                                      k.split(','))))
               for k, v in tables['blocks[1]'].items()]
  assert max(corrected) > 1e-3  # the table is more than the back-off
  for arch in (seen, unseen):
    assert kind.raw(lay, params, arch) == pytest.approx(expected(arch), rel=1e-12)


@pytest.mark.parametrize('kind', sorted(set(latency_model.PREDICTORS) - {'cost_features',
                                                                      'layer_lookup'}))
def test_fastest_is_the_brute_force_minimum(kind):
  decisions = mnasnet_like(blocks=3, fields=(('kernel_size', 2), ('expand_ratio', 3),
                                             ('output_filters', 3)))
  rows = measured(decisions, interaction_truth(decisions, 9), 40, 10, noise=0.05)
  lay = encoding.layout(decisions)
  predictor = predictors.PREDICTORS[kind]
  x, y = predictors.rows_to_arrays(rows, decisions)
  params = predictor.fitted(lay, x, y, 0)
  params['floor'] = 1e-6  # so that the raw minimum is what is compared
  model = build(rows, [], decisions, kinds=['linear'])
  model.predictor = {'kind': kind, **params}
  everything = list(itertools.product(*[range(n) for n in lay.counts]))
  assert len(everything) == 18 ** 3
  values = [model.predict(model.nas_params(arch)) for arch in everything]
  ms, arch = model.fastest()
  assert ms == pytest.approx(min(values), rel=1e-12, abs=1e-12)
  assert model.predict(arch) == ms


def test_fastest_of_mnasnet_shaped_space_beats_every_measured_architecture(additive):
  decisions, model, rows = additive
  ms, arch = model.fastest()
  assert set(arch) == set(decisions)
  assert ms == model.predict(arch)
  assert ms <= min(model.predict(p) for p, _ in rows)


def test_predictions_are_deterministic_and_floored():
  decisions = mnasnet_like()
  rows = measured(decisions, additive_truth(decisions, 11), 40, 12)
  model = build(rows, [], decisions, kinds=['linear'])
  p = rows[0][0]
  assert len({model.predict(p) for _ in range(5)}) == 1
  assert model.predict(json.dumps(p)) == model.predict(p)
  assert model.fastest()[0] >= predictors.FLOOR_SHARE * min(ms for _, ms in rows)


def test_evaluate_reports_rank_and_relative_error():
  rows = [({'a': '0/1'}, 10.0), ({'a': '0/1'}, 20.0), ({'a': '0/1'}, 40.0)]
  preds = iter([10.5, 25.0, 39.0])
  out = latency_model.evaluate(lambda _: next(preds), rows)
  assert out['n'] == 3 and out['kendall_tau'] == pytest.approx(1.0)
  assert out['within_10pct'] == pytest.approx(2 / 3)
  assert out['mape'] == pytest.approx((5 + 25 + 2.5) / 3)
  assert out['max_abs_pct'] == pytest.approx(25.0)
  assert latency_model.evaluate(lambda _: 1.0, [])['kendall_tau'] is None


def test_too_few_or_bad_measurements_are_one_line_errors():
  decisions = mnasnet_like()
  rows = measured(decisions, additive_truth(decisions, 1), 12, 2)
  one_line_error(lambda: latency_model.fit_best(rows[:5], 0, decisions=decisions),
                 '5 measurements')
  bad = list(rows)
  bad[3] = (bad[3][0], -1.0)
  one_line_error(lambda: latency_model.fit_best(bad, 0, decisions=decisions),
                 'measurement #3', '-1.0')
  bad[3] = ({'blocks[9].kernel_size': '0/2 (3)'}, 1.0)
  one_line_error(lambda: latency_model.fit_best(bad, 0, decisions=decisions),
                 'measurement #3', "'blocks[9].kernel_size'")


# ----- the real mnasnet space


def test_real_mnasnet_space_keys_round_trip():
  from nascli.search.controller import random_architectures  # pylint: disable=g-import-not-at-top
  from tf_vision import search_spaces  # pylint: disable=g-import-not-at-top
  decisions = latency_model.decisions_of_space('mnasnet')
  assert len(decisions) == 42 and decisions['blocks[0].block_fn'] == ["'conv'", "'mbconv'"]
  rows = measured(decisions, additive_truth(decisions, 4), 200, 5)
  for p, _ in rows[:3]:
    search_spaces.from_nas_params('mnasnet', p)  # the test's sampler writes real points
  model = build(rows[:150], rows[150:], decisions, space='mnasnet', kinds=['linear'])
  assert model.heldout['kendall_tau'] > 0.9, model.heldout
  # What the search proposes (about a second each: three).
  archs = random_architectures(search_spaces.get_search_space('mnasnet'), 3, 3)
  for p in archs:
    assert model.predict(p) == model.predict(json.loads(json.dumps(p))) > 0
  assert latency_model.decisions_from_rows(archs).keys() == decisions.keys()
  ms, arch = model.fastest()
  search_spaces.from_nas_params('mnasnet', arch)  # a real point, with Vertex's literals
  assert ms == model.predict(arch)
  latency_model.check_matches(model, space='mnasnet', decisions=decisions, runtime='cpu-tflite',
                              input_size=(224, 224), path='m.json')


def test_a_space_without_filters_decisions_reduces_interactions_to_linear():
  decisions = latency_model.decisions_of_space('spinenet')
  lay = encoding.layout(decisions)
  assert predictors.PREDICTORS['interactions'].pairs(lay) == []
  rows = measured(decisions, additive_truth(decisions, 15), 40, 16)
  best = latency_model.fit_best(rows, 0, decisions=decisions, kinds=['linear', 'interactions'])
  assert best.kind == 'linear' and best.cv['interactions'] == best.cv['linear']
  inferred = latency_model.fit_best(rows, 0, kinds=['linear'])  # decisions read off the rows
  assert inferred.params == best.params
  model = build(rows, [], decisions, space='spinenet', kinds=['linear'])
  x, y = predictors.rows_to_arrays(rows, decisions)
  for kind, predictor in latency_model.PREDICTORS.items():
    if predictor.unavailable(model._parts()[0]):  # pylint: disable=protected-access
      continue  # spinenet registers no cost features
    model.predictor = {'kind': kind, **predictor.fitted(lay, x, y, 0)}
    ms, arch = model.fastest()
    assert set(arch) == set(decisions) and ms == model.predict(arch) > 0
    assert ms <= min(model.predict(p) for p, _ in rows)


def mnasnet_cost_truth(seed):
  """Latency linear in the space's own cost features, as a device's would be."""
  from tf_vision.search_spaces import cost_features  # pylint: disable=g-import-not-at-top
  features = cost_features.cost_features('mnasnet')
  names = sorted(features(next(iter([random_params(latency_model.decisions_of_space('mnasnet'),
                                                   np.random.default_rng(0))])), 224))
  rng = np.random.default_rng(seed)
  unit = {n: rng.uniform(0.5, 2.0) for n in names}
  scale = {n: max(1.0, features({k: f'0/{len(v)} ({v[0]})' for k, v in
                                 latency_model.decisions_of_space('mnasnet').items()}, 224)[n])
           for n in names}
  return lambda p: 2.0 + sum(unit[n] * v / scale[n] for n, v in features(p, 224).items())


def test_cost_features_fit_the_space_arithmetic_and_predict_without_pyglove(tmp_path):
  decisions = latency_model.decisions_of_space('mnasnet')
  rows = measured(decisions, mnasnet_cost_truth(17), 140, 18, noise=0.02)
  model = build(rows[:100], rows[100:], decisions, space='mnasnet')
  assert model.kind == 'cost_features', model.cv
  assert model.cv['cost_features'] < 0.5 * model.cv['linear'], model.cv
  assert model.heldout['kendall_tau'] > 0.9 and model.heldout['within_10pct'] >= 0.95
  assert all(w >= 0 for w in model.predictor['weights'].values())
  ms, arch = model.fastest()
  assert ms == model.predict(arch) <= min(model.predict(p) for p, _ in rows)
  lay = model._parts()[0]  # pylint: disable=protected-access
  indices = encoding.parse(arch, decisions)
  for d, n in enumerate(lay.counts):  # a local minimum: no single change is faster
    for c in range(n):
      other = list(indices)
      other[d] = c
      assert model.predict(lay.nas_params(other)) >= ms
  # Not for a space without cost features, nor where literals are unknown.
  assert predictors.PREDICTORS['cost_features'].unavailable(encoding.layout(decisions))
  path = tmp_path / 'cf.json'
  model.save(path)
  assert loaded_in_a_fresh_process(path, rows[0][0], 'model.predict(p)',
                                   'model.fastest()[0]') == [model.predict(rows[0][0]), ms, []]


# ----- the file


def test_save_load_round_trip_gives_identical_predictions(additive, tmp_path):
  decisions, model, rows = additive
  path = tmp_path / 'sub' / 'cpu_tflite_224.json'
  model.reference = {'nas_params': rows[0][0], 'ms': rows[0][1]}
  model.save(path)
  loaded = latency_model.load(path)
  assert loaded == model
  assert loaded.fingerprint() == model.fingerprint()
  assert [loaded.predict(p) for p, _ in rows] == [model.predict(p) for p, _ in rows]
  assert loaded.fastest() == model.fastest()
  assert [p.name for p in path.parent.iterdir()] == ['cpu_tflite_224.json']
  line = loaded.describe()
  assert line.startswith('cpu-tflite (ai-edge-litert 2.3.0, 1 thread) at 224x224 on Test CPU: '
                         'linear model of 150 measurements, held-out Kendall tau 0.9')
  assert '% within ±10%' in line and '\n' not in line
  other = latency_model.LatencyModel.from_dict({**model.to_dict(), 'device': 'Other CPU'})
  assert other.fingerprint() != model.fingerprint()


def test_every_kind_round_trips(tmp_path):
  decisions = mnasnet_like(blocks=3)
  rows = measured(decisions, interaction_truth(decisions, 13), 60, 14)
  lay = encoding.layout(decisions)
  x, y = predictors.rows_to_arrays(rows, decisions)
  model = build(rows, [], decisions, kinds=['linear'])
  for kind, predictor in latency_model.PREDICTORS.items():
    if predictor.unavailable(lay):
      continue  # cost_features: a made-up space has no arithmetic
    model.predictor = {'kind': kind, **predictor.fitted(lay, x, y, 0)}
    model.save(tmp_path / f'{kind}.json')
    loaded = latency_model.load(tmp_path / f'{kind}.json')
    assert [loaded.predict(p) for p, _ in rows] == [model.predict(p) for p, _ in rows], kind


@pytest.fixture
def saved(additive, tmp_path):
  _, model, _ = additive
  path = tmp_path / 'model.json'
  model.save(path)
  return path, json.loads(path.read_text())


def write(tmp_path, data, name='bad.json'):
  path = tmp_path / name
  path.write_text(data if isinstance(data, str) else json.dumps(data))
  return path


def test_bad_files_are_one_line_errors_naming_file_and_culprit(saved, tmp_path):
  path, data = saved
  text = path.read_text()
  load = latency_model.load
  one_line_error(lambda: load(tmp_path / 'missing.json'), 'missing.json')
  one_line_error(lambda: load(write(tmp_path, text[:len(text) // 2])), 'bad.json', 'truncated')
  one_line_error(lambda: load(write(tmp_path, 'not json at all')), 'bad.json', 'JSON')
  one_line_error(lambda: load(write(tmp_path, '')), 'bad.json', 'empty')
  one_line_error(lambda: load(write(tmp_path, [1, 2])), 'bad.json', 'an array')
  for field in ('predictor', 'decisions', 'input_size', 'runtime'):
    broken = {k: v for k, v in data.items() if k != field}
    one_line_error(lambda b=broken: load(write(tmp_path, b)), 'bad.json', f"'{field}'")
  one_line_error(lambda: load(write(tmp_path, {**data, 'format_version': 2})),
                 'bad.json', 'format_version 2')
  one_line_error(lambda: load(write(tmp_path, {k: v for k, v in data.items()
                                               if k != 'format_version'})),
                 'bad.json', 'format_version')
  one_line_error(lambda: load(write(tmp_path, {**data, 'input_size': '224'})),
                 'bad.json', "'input_size'", "'224'")
  one_line_error(lambda: load(write(tmp_path, {**data, 'surprise': 1})), "'surprise'")
  one_line_error(lambda: load(write(tmp_path, {**data, 'predictor': {**data['predictor'],
                                                                     'kind': 'mlp'}})),
                 'bad.json', "unknown predictor kind 'mlp'", 'linear')
  terms = dict(data['predictor']['terms'])
  terms['blocks[0].kernel_size'] = [0.0]
  one_line_error(lambda: load(write(tmp_path, {**data, 'predictor': {**data['predictor'],
                                                                     'terms': terms}})),
                 'bad.json', "'blocks[0].kernel_size'")
  one_line_error(lambda: load(write(tmp_path, {**data, 'heldout': {'n': 3}})),
                 'bad.json', "'heldout'")
  one_line_error(lambda: load(write(tmp_path, {**data, 'reference': {
      'nas_params': {'blocks[0].x': '0/2'}, 'ms': 3.0}})), 'bad.json', "'blocks[0].x'")


def test_save_refuses_a_model_load_would_refuse(additive, tmp_path):
  _, model, _ = additive
  broken = latency_model.LatencyModel(**{**model.__dict__, 'predictor': {'kind': 'nope'}})
  one_line_error(lambda: broken.save(tmp_path / 'x.json'), 'x.json', "'nope'")
  assert not (tmp_path / 'x.json').exists()


def test_check_matches_refuses_another_space_runtime_or_size(additive):
  decisions, model, _ = additive
  check = latency_model.check_matches
  check(model, space='synthetic', decisions=decisions, runtime='cpu-tflite', input_size=224,
        path='m.json')
  one_line_error(lambda: check(model, space='spinenet', decisions=None, path='m.json'),
                 'm.json', "'synthetic'", "'spinenet'")
  more = {**decisions, 'blocks[7].kernel_size': ['3', '5']}
  one_line_error(lambda: check(model, space='synthetic', decisions=more, path='m.json'),
                 'm.json', "'blocks[7].kernel_size'")
  wider = {**decisions, 'blocks[0].kernel_size': ['3', '5', '7']}
  one_line_error(lambda: check(model, space='synthetic', decisions=wider, path='m.json'),
                 "'blocks[0].kernel_size'", '2 candidates', '3 in')
  renamed = {**decisions, 'blocks[0].kernel_size': ['3', '7']}
  one_line_error(lambda: check(model, space='synthetic', decisions=renamed, path='m.json'),
                 "'blocks[0].kernel_size'")
  one_line_error(lambda: check(model, space='synthetic', decisions=decisions, runtime='cpu',
                               path='m.json'), 'm.json', "'cpu-tflite'", "'cpu'")
  one_line_error(lambda: check(model, space='synthetic', decisions=decisions, input_size=32,
                               path='m.json'), 'm.json', '224x224', '32x32')


def test_predict_refuses_architectures_of_another_space(additive):
  _, model, rows = additive
  p = dict(rows[0][0])
  one_line_error(lambda: model.predict({**p, 'blocks[7].kernel_size': '0/2 (3)'}),
                 "unknown key 'blocks[7].kernel_size'", "'synthetic'")
  one_line_error(lambda: model.predict({**p, 'blocks[0].kernel_size': '5/3 (x)'}),
                 "'blocks[0].kernel_size'", 'out of range')
  one_line_error(lambda: model.predict({**p, 'blocks[0].kernel_size': '1/5'}),
                 "'blocks[0].kernel_size'", '5 candidates')
  one_line_error(lambda: model.predict({**p, 'blocks[0].kernel_size': '1/2 (7)'}),
                 "'blocks[0].kernel_size'", 'literal')
  one_line_error(lambda: model.predict({**p, 'blocks[0].kernel_size': 'big'}),
                 "'blocks[0].kernel_size'")
  del p['blocks[6].se_ratio']
  one_line_error(lambda: model.predict(p), "missing key 'blocks[6].se_ratio'")


def test_encode_is_one_hot_without_the_baseline():
  decisions = {'blocks[0].kernel_size': ['3', '5'], 'blocks[0].output_filters': ['8', '16', '24'],
               'blocks[1].output_filters': ['8', '16']}
  features = latency_model.encode({'blocks[0].kernel_size': '1/2 (5)',
                                   'blocks[0].output_filters': '0/3 (8)',
                                   'blocks[1].output_filters': '1/2 (16)'}, decisions)
  assert features.tolist() == [1.0, 0.0, 0.0, 1.0]
  lay = encoding.layout(decisions)
  assert [g.name for g in lay.groups] == ['blocks[0]', 'blocks[1]']
  assert lay.groups[1].prev == 0 and lay.groups[0].filters == 1
  assert predictors.PREDICTORS['interactions'].pairs(lay) == [(2, 1)]


def test_import_loads_neither_tensorflow_nor_pyglove():
  code = ('import sys, nascli.latency_model as m; '
          'print(sorted(k for k in ("tensorflow", "pyglove", "scipy") if k in sys.modules))')
  out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, capture_output=True, text=True,
                       check=True, timeout=120)
  assert out.stdout.strip() == '[]', out.stdout + out.stderr
