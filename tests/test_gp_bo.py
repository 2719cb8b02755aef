"""gp_bo (nascli/search/gp_bo.py): exact replay, no repeats, it searches better than random, the
exact posterior on a conditional space, and a resume that takes the journal's proposals."""

import itertools
import math

import numpy as np
import pyglove as pg
import pytest

from nascli.errors import NascliError
from nascli.search import gp_bo
from nascli.search.controller import Controller
from nascli.search.controller import ReplayMismatchError

OPS = ('none', 'skip_connect', 'nor_conv_1x1', 'nor_conv_3x3', 'avg_pool_3x3')
# NAS-Bench-201's cell: edges 1<-0, 2<-0, 2<-1, 3<-0, 3<-1, 3<-2 (the bench's order).
CELL = pg.Dict({f'Op{i}': pg.oneof(list(OPS)) for i in range(6)})
PATHS = ((3,), (0, 4), (1, 5), (0, 2, 5))
OP_VALUE = np.array([0.0, 0.2, 0.5, 1.0, 0.1])  # none, skip, conv1x1, conv3x3, pool


def cheap_nas_params(space, dna):
  del space
  return {'dna': str(dna.to_numbers())}


def cell_accuracy(dna):
  """An NAS-Bench-201-like landscape: 0.1 (chance) unless some input-output path has no `none`;
  otherwise the operations' values along the live paths, a bonus for a skip from input to
  output next to a convolutional path, and a small penalty for pooling on the direct edge."""
  live = [p for p in PATHS if all(dna[e] for e in p)]
  if not live:
    return 0.1
  score = sum(OP_VALUE[dna[e]] for p in live for e in p) / 6
  if dna[3] == 1 and any(len(p) > 1 and all(dna[e] in (2, 3) for e in p) for p in live):
    score += 0.25
  score -= 0.1 * (dna[3] == 4)
  return round(0.5 + 0.3 * score + 0.01 * dna[2], 6)


OPTIMUM = max(cell_accuracy(d) for d in itertools.product(range(5), repeat=6))


def search(algorithm, seed, trials, **options):
  """A search as the bench's charged protocol drives it: every proposal is a trial."""
  ctl = Controller(CELL, algorithm, seed, to_nas_params=cheap_nas_params, **options)
  events, best = [], 0.0
  for i in range(trials):
    dna, _ = ctl.propose()
    reward = cell_accuracy(dna)
    events.append({'event': 'proposed', 'trial_id': str(i), 'dna': list(dna)})
    events.append({'event': 'completed', 'trial_id': str(i), 'reward': reward})
    ctl.feedback(dna, reward)
    best = max(best, reward)
  return ctl, events, best


def test_rebuild_replays_a_search_exactly_and_continues_like_it():
  ctl, events, _ = search('gp_bo', 5, 24)
  for cut in (0, 10, 30, len(events)):  # inside the random start, after it, at the end
    rebuilt = Controller.rebuild(CELL, 'gp_bo', 5, events[:cut], to_nas_params=cheap_nas_params)
    for event in events[cut:]:  # the rest of the search, proposal by proposal
      if event['event'] == 'proposed':
        dna = rebuilt.propose()[0]
        assert dna == tuple(event['dna'])
      else:
        rebuilt.feedback(dna, event['reward'])
  nxt = ctl.propose()[0]
  rebuilt = Controller.rebuild(CELL, 'gp_bo', 5, events, to_nas_params=cheap_nas_params)
  assert rebuilt.propose()[0] == nxt


def test_same_seed_same_search_other_seed_other_search():
  first = [e['dna'] for e in search('gp_bo', 1, 15)[1] if e['event'] == 'proposed']
  again = [e['dna'] for e in search('gp_bo', 1, 15)[1] if e['event'] == 'proposed']
  other = [e['dna'] for e in search('gp_bo', 2, 15)[1] if e['event'] == 'proposed']
  assert first == again != other


def test_never_proposes_an_architecture_twice_and_pending_ones_are_avoided():
  ctl, events, _ = search('gp_bo', 0, 40)
  dnas = [tuple(e['dna']) for e in events if e['event'] == 'proposed']
  assert len(set(dnas)) == 40
  assert ctl.num_duplicates == 0
  # Two proposals in flight (a parallel search): the second is not the first again.
  a, _ = ctl.propose()
  b, _ = ctl.propose()
  assert a != b and a not in dnas and b not in dnas


def test_finds_better_architectures_than_random_in_30_trials():
  gp = [search('gp_bo', seed, 30)[2] for seed in range(6)]
  rnd = [search('random', seed, 30)[2] for seed in range(6)]
  # Measured: gp_bo finds the optimum (0.965) in 2 of these 6 searches and 0.905-0.93 in the
  # others; random's best is 0.78-0.88. (Over seeds 0-39 it finds it in 28 searches; with the
  # noise grid of before issue 47, (0.01, 0.1), in 29, and in 4 of these 6.)
  assert OPTIMUM == 0.965
  assert sum(g == OPTIMUM for g in gp) >= 2
  assert not any(r == OPTIMUM for r in rnd)
  assert min(gp) > max(rnd)
  assert np.mean(gp) > np.mean(rnd) + 0.08


def test_options_are_checked():
  with pytest.raises(NascliError, match='no option'):
    Controller(CELL, 'gp_bo', 0, to_nas_params=cheap_nas_params, population_size=3)
  with pytest.raises(NascliError, match='num_init must be at least 1'):
    Controller(CELL, 'gp_bo', 0, to_nas_params=cheap_nas_params, num_init=0)
  ctl = Controller(CELL, 'gp_bo', 0, to_nas_params=cheap_nas_params, num_init=3, top=2,
                   num_random=0, xi=0.1)
  for _ in range(6):
    dna, _ = ctl.propose()
    ctl.feedback(dna, cell_accuracy(dna))


def test_refuses_float_decisions():
  space = pg.Dict(x=pg.floatv(0.0, 1.0), y=pg.oneof([1, 2]))
  with pytest.raises(NascliError, match='float'):
    Controller(space, 'gp_bo', 0, to_nas_params=cheap_nas_params)


# A user space with a nested pg.oneof: `kernel` and `width` exist only under 'conv', `size`
# only under 'pool'; 'identity' leaves all three inactive. Decisions: block, kernel, width,
# size, act (5).
NESTED = pg.Dict(
    block=pg.oneof([
        pg.Dict(op='conv', kernel=pg.oneof([3, 5, 7]), width=pg.oneof([16, 32])),
        pg.Dict(op='pool', size=pg.oneof([2, 3])),
        'identity']),
    act=pg.oneof(['relu', 'swish', 'gelu']))
NESTED_DNAS = [tuple(pg.DNA.from_numbers(list(n), pg.dna_spec(NESTED)).to_numbers())
               for n in [(0, k, w, a) for k in range(3) for w in range(2) for a in range(3)]
               + [(1, s, a) for s in range(2) for a in range(3)] + [(2, a) for a in range(3)]]


def nested_reward(dna):
  """conv is best, with a larger kernel and width; pool in the middle; act matters a little."""
  if dna[0] == 0:
    base = 0.6 + 0.05 * dna[1] + 0.04 * dna[2]
  else:
    base = 0.5 + 0.03 * dna[1] if dna[0] == 1 else 0.45
  return round(base + 0.02 * dna[-1], 6)


def decision_values(ctl, dna):
  """Each of the space's decisions' value in `dna`, None where its branch is not chosen."""
  values = [None] * len(ctl._algorithm._decisions.items)
  for i, value, _ in ctl._algorithm._decisions.read(pg.DNA.from_numbers(list(dna),
                                                                        ctl.dna_spec)):
    values[i] = value
  return values


def test_variance_at_a_candidate_with_an_inactive_branch_is_the_exact_posterior_variance():
  ctl = Controller(NESTED, 'gp_bo', 3, to_nas_params=cheap_nas_params, num_init=6)
  for _ in range(12):  # 6 random, then 6 model-based proposals
    dna, _ = ctl.propose()
    ctl.feedback(dna, nested_reward(dna))
  algo = ctl._algorithm
  trained = list(algo._rewards)
  y = np.array([algo._rewards[d] for d in trained])
  gp = gp_bo.fit_gp(algo._encode(trained), y, 5)

  # The exact GP, from the decisions themselves: an exponential Hamming kernel in which
  # "inactive" is a value (two architectures whose `size` is inactive agree on it), k(a, a) = 1.
  theta, noise = gp['theta'], gp['noise']
  values = {d: decision_values(ctl, d) for d in NESTED_DNAS}

  def k(a, b):
    return np.exp(-theta * sum(u != v for u, v in zip(values[a], values[b])) / 5)

  clipped = np.maximum(y, np.median(y))
  z = (clipped - clipped.mean()) / clipped.std()
  inv = np.linalg.inv(np.array([[k(a, b) for b in trained] for a in trained])
                      + noise * np.eye(len(trained)))
  candidates = [d for d in NESTED_DNAS if d not in algo._rewards]
  assert any(d[0] == 2 for d in candidates) and any(d[0] == 1 for d in candidates)
  ks = np.array([[k(c, b) for b in trained] for c in candidates])
  mean = ks @ inv @ z
  var = np.array([k(c, c) for c in candidates]) - np.einsum('ij,jk,ik->i', ks, inv, ks)
  assert np.all(var > 1e-3)
  sigma = np.sqrt(var)
  gap = mean - z.max()
  cdf = np.array([0.5 * (1 + math.erf(u / math.sqrt(2))) for u in gap / sigma])
  exact_ei = gap * cdf + sigma * np.exp(-0.5 * (gap / sigma) ** 2) / math.sqrt(2 * math.pi)

  encoded = algo._encode(candidates)
  np.testing.assert_allclose(gp_bo.expected_improvement(gp, encoded, 0.0), exact_ei,
                             rtol=1e-9, atol=1e-12)
  got_mean, got_var = gp_bo.posterior(gp, encoded)
  np.testing.assert_allclose(got_mean, mean, rtol=1e-9, atol=1e-12)
  np.testing.assert_allclose(got_var, var, rtol=1e-9, atol=1e-12)
  # Two identical architectures with inactive decisions correlate exactly 1 (prior variance 1).
  for dna in [(2, 1), (1, 0, 2)]:
    row = algo._encode([dna, dna])
    np.testing.assert_array_equal(gp_bo.kernel(row, row, theta, 5), np.ones((2, 2)))


def edited_gp_bo_journal():
  """A 24-trial gp_bo search's events, and the same with trial 15's (model-based) proposal
  replaced by an architecture the GP did not propose there (one the search never proposed)."""
  _, events, _ = search('gp_bo', 5, 24)
  proposed = [tuple(e['dna']) for e in events if e['event'] == 'proposed']
  other = next(d for d in itertools.product(range(5), repeat=6) if d not in proposed)
  edited = [dict(e) for e in events]
  at = next(i for i, e in enumerate(edited) if e.get('trial_id') == '15')
  assert edited[at]['event'] == 'proposed' and tuple(edited[at]['dna']) != other
  edited[at]['dna'] = list(other)
  edited[at + 1]['reward'] = cell_accuracy(other)
  return events, edited, other


def test_resume_takes_the_journals_gp_proposal_and_continues():
  events, edited, other = edited_gp_bo_journal()
  original = Controller.rebuild(CELL, 'gp_bo', 5, events, to_nas_params=cheap_nas_params)
  rebuilt = Controller.rebuild(CELL, 'gp_bo', 5, edited, to_nas_params=cheap_nas_params)
  # Its observations are the journal's, the edited proposal included ...
  assert rebuilt._algorithm._rewards == {
      tuple(p['dna']): c['reward'] for p, c in zip(edited[::2], edited[1::2])}
  assert other in rebuilt._algorithm._rewards
  # ... and its random stream was drawn exactly as the first run drew it.
  assert (rebuilt._algorithm._rng.bit_generator.state
          == original._algorithm._rng.bit_generator.state)
  # It goes on searching: new architectures, fed back as they complete.
  seen = set(rebuilt._algorithm._rewards)
  for _ in range(6):
    dna, _ = rebuilt.propose()
    assert dna not in seen
    seen.add(dna)
    rebuilt.feedback(dna, cell_accuracy(dna))
  assert rebuilt.num_duplicates == 0


def test_resume_fits_no_gp_so_another_blas_cannot_change_it(monkeypatch):
  ctl, events, _ = search('gp_bo', 5, 24)
  nxt = ctl.propose()[0]

  def other_blas(*args, **kwargs):
    raise AssertionError('a replayed proposal fitted a GP')

  monkeypatch.setattr(gp_bo, 'fit_gp', other_blas)
  rebuilt = Controller.rebuild(CELL, 'gp_bo', 5, events, to_nas_params=cheap_nas_params)
  monkeypatch.undo()
  assert rebuilt.propose()[0] == nxt  # the uninterrupted search's next proposal


def test_resume_refuses_in_one_line_a_journaled_dna_that_does_not_fit():
  _, events, _ = search('gp_bo', 5, 14)
  events[-2]['dna'] = [0, 1, 2, 3, 4, 5]  # Op5 has 5 candidates
  with pytest.raises(ReplayMismatchError,
                     match=r'^cannot resume: the journal says trial 13 was proposed as '
                     r'\[0, 1, 2, 3, 4, 5\], which does not fit the search space \(') as e:
    Controller.rebuild(CELL, 'gp_bo', 5, events, to_nas_params=cheap_nas_params)
  assert '\n' not in str(e.value)
  # The random start-up proposals are still drawn and checked.
  _, events, _ = search('gp_bo', 5, 14)
  events[4]['dna'] = [4, 4, 4, 4, 4, 4]
  with pytest.raises(ReplayMismatchError, match='trial 2 was proposed as'):
    Controller.rebuild(CELL, 'gp_bo', 5, events, to_nas_params=cheap_nas_params)
