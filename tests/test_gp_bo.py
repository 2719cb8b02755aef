"""gp_bo (nascli/search/gp_bo.py): exact replay, no repeats, and it searches better than random."""

import itertools

import numpy as np
import pyglove as pg
import pytest

from nascli.errors import NascliError
from nascli.search.controller import Controller

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
  # Measured: gp_bo finds the optimum (0.965) in 4 of 6 searches and 0.915 in the others;
  # random's best is 0.78-0.88.
  assert OPTIMUM == 0.965
  assert sum(g == OPTIMUM for g in gp) >= 4
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
