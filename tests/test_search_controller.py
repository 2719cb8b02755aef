"""The search controller: seeded algorithms, exact rebuild from the journal, deduplication."""

import re

import pyglove as pg
import pytest

from nascli.errors import NascliError
from nascli.search import controller as controller_lib
from nascli.search import journal as journal_lib
from nascli.search.controller import Controller
from nascli.search.controller import ReplayMismatchError

# 4 * 3 * 3**2 = 108 architectures: small enough for duplicates, big enough to search.
SPACE = pg.Dict(
    width=pg.oneof([8, 16, 32, 64]),
    act=pg.oneof(['relu', 'swish', 'gelu']),
    kernels=pg.List([pg.oneof([3, 5, 7]) for _ in range(2)]),
)


def cheap_nas_params(space, dna):
  """Stands in for Vertex's encoding where the test is about proposals (the real one is slow)."""
  del space
  return {'dna': str(dna.to_numbers())}


EVOLUTION = {'population_size': 6, 'tournament_size': 3, 'to_nas_params': cheap_nas_params}
ALGORITHMS = [('random', {'to_nas_params': cheap_nas_params}),
              ('regularized_evolution', EVOLUTION)]


def reward_of(dna):
  """A fixed landscape; width index 0 'fails' so that failures are part of every run."""
  if dna[0] == 0:
    return None
  return round(dna[0] * 0.1 + dna[1] * 0.03 - sum(dna[2:]) * 0.02, 6)


def step(ctl, events, max_trials, parallel=2):
  """One scheduling decision of a toy search, a pure function of the journal and controller.

  Keeps `parallel` trials in flight: proposes while fewer are unfinished, otherwise ends the
  oldest unfinished one (completed with feedback, or failed without). Returns the new event.
  """
  state = journal_lib.replay(events)
  unfinished = state.unfinished()
  if len(unfinished) < parallel and len(state.proposals) < max_trials and not ctl.exhausted:
    got = ctl.propose_new(state.dnas())
    if got is not None:
      dna, nas_params = got
      return {'event': 'proposed', 'trial_id': state.next_trial_id(), 'dna': list(dna),
              'nas_params': nas_params}
  if not unfinished:
    return None
  trial = unfinished[0]
  dna = state.proposals[trial].dna
  reward = reward_of(dna)
  if reward is None:
    return {'event': 'failed', 'trial_id': trial, 'status': 'failed', 'reason': 'bad width'}
  ctl.feedback(dna, reward)
  return {'event': 'completed', 'trial_id': trial, 'reward': reward, 'metrics': {}}


def run(ctl, events, max_trials=20):
  events = list(events)
  while (event := step(ctl, events, max_trials)) is not None:
    events.append({'seq': len(events) + 1, **event})
  return events


def start_events(algorithm):
  return [{'seq': 1, 'event': 'search_started', 'settings': {'algorithm': algorithm},
           'fingerprint': 'x'}]


def proposals(events):
  return [tuple(e['dna']) for e in events if e['event'] == 'proposed']


@pytest.mark.parametrize('algorithm, options', ALGORITHMS)
def test_algorithms_are_deterministic_per_seed(algorithm, options):
  runs = [proposals(run(Controller(SPACE, algorithm, seed, **options), start_events(algorithm)))
          for seed in (7, 7, 8)]
  assert len(runs[0]) == 20 and len(set(runs[0])) == 20  # Distinct, thanks to propose_new.
  assert runs[0] == runs[1]
  assert runs[0] != runs[2]


def test_plain_propose_is_deterministic_per_seed_for_evolution():
  def first(seed, n=20):
    ctl = Controller(SPACE, 'regularized_evolution', seed, **EVOLUTION)
    out = []
    for _ in range(n):
      dna, _ = ctl.propose()
      out.append(dna)
      ctl.feedback(dna, reward_of(dna) or 0.0)
    return out
  assert first(1) == first(1) != first(2)


@pytest.mark.parametrize('algorithm, options', ALGORITHMS)
def test_rebuild_after_an_interruption_continues_like_the_uninterrupted_run(
    algorithm, options):
  first = Controller(SPACE, algorithm, 3, **options)
  full = run(first, start_events(algorithm))
  kinds = [e['event'] for e in full]
  assert kinds.count('completed') > 5 and kinds.count('failed') > 0
  # The run must exercise the duplicate path, which the journal does not record.
  assert first.num_duplicates > 0
  rebuilt = Controller.rebuild(SPACE, algorithm, 3, full, **options)
  assert rebuilt.num_duplicates == first.num_duplicates
  assert rebuilt.num_feedbacks == first.num_feedbacks
  # Cut after every kind of event, early (evolution still initializing) and late.
  cuts = sorted({2, kinds.index('failed') + 1, len(full) // 2, len(full) // 2 + 1,
                 len(full) - 2})
  for k in cuts:
    resumed = Controller.rebuild(SPACE, algorithm, 3, full[:k], **options)
    assert run(resumed, full[:k]) == full, f'interrupted after {k} events'


def test_resume_from_a_journal_file(tmp_path):
  """A search killed mid-way resumes from journal.jsonl (with seq and time) as if never killed."""
  algorithm, options = ALGORITHMS[1]
  full = run(Controller(SPACE, algorithm, 11, **options), start_events(algorithm))
  cut = len(full) // 2 + 1
  journal = journal_lib.Journal.in_dir(tmp_path)
  with journal.open_for_writing():
    for event in full[:cut]:
      journal.append({k: v for k, v in event.items() if k != 'seq'})
  events = journal.events()
  assert [e['seq'] for e in events] == list(range(1, cut + 1))
  resumed = Controller.rebuild(SPACE, algorithm, 11, events, **options)
  rest = run(resumed, [{k: v for k, v in e.items() if k != 'time'} for e in events])
  assert rest == full


def test_rebuild_replays_propose_without_deduplication():
  """A journal whose proposals came from plain propose(), duplicates included."""
  ctl = Controller(SPACE, 'random', 0, to_nas_params=cheap_nas_params)
  events = start_events('random')
  for trial in range(1, 30):
    dna, nas_params = ctl.propose()
    events.append({'seq': len(events) + 1, 'event': 'proposed', 'trial_id': str(trial),
                   'dna': list(dna), 'nas_params': nas_params})
  dnas = proposals(events)
  assert len(set(dnas)) < len(dnas)  # Random repeated itself.
  rebuilt = Controller.rebuild(SPACE, 'random', 0, events, to_nas_params=cheap_nas_params)
  assert rebuilt.propose() == ctl.propose()


@pytest.mark.parametrize('algorithm, options', ALGORITHMS)
def test_rebuild_refuses_a_journal_from_other_settings(algorithm, options):
  full = run(Controller(SPACE, algorithm, 3, **options), start_events(algorithm), max_trials=8)
  with pytest.raises(ReplayMismatchError, match=r'trial \d+ was proposed as \[.*\], but '
                     f'{algorithm} with seed 4 now proposes'):
    Controller.rebuild(SPACE, algorithm, 4, full, **options)
  tampered = [dict(e) for e in full]
  (second,) = [e for e in tampered if e.get('trial_id') == '2' and e['event'] == 'proposed']
  second['dna'] = [9, 9, 9, 9]
  with pytest.raises(ReplayMismatchError, match=r'trial 2 was proposed as \[9, 9, 9, 9\]'):
    Controller.rebuild(SPACE, algorithm, 3, tampered, **options)


@pytest.mark.parametrize('algorithm, options', ALGORITHMS)
def test_propose_new_never_returns_a_trained_or_known_dna(algorithm, options):
  everything = [(w, a, k0, k1) for w in range(4) for a in range(3) for k0 in range(3)
                for k1 in range(3)]
  trained = set(everything[::4])
  ctl = Controller(SPACE, algorithm, 5, **options)
  seen = []
  while len(seen) < 25 and (got := ctl.propose_new(trained)) is not None:
    assert got[0] not in trained and got[0] not in seen
    seen.append(got[0])
    ctl.feedback(got[0], reward_of(got[0]) or 0.0)
  assert len(seen) >= 20 and ctl.num_duplicates > 0


def test_propose_new_gives_up_when_the_space_is_exhausted():
  tiny = pg.Dict(a=pg.oneof([1, 2]), b=pg.oneof(['x', 'y']))
  ctl = Controller(tiny, 'random', 0)
  got = [ctl.propose_new(max_attempts=50) for _ in range(4)]
  assert sorted(g[0] for g in got) == [(0, 0), (0, 1), (1, 0), (1, 1)]
  skipped = ctl.num_duplicates
  assert ctl.propose_new(max_attempts=50) is None
  assert ctl.exhausted and ctl.num_duplicates == skipped + 50
  assert ctl.propose_new() is None  # Stays ended.
  assert ctl.num_duplicates == skipped + 50


class Scripted(pg.DNAGenerator):
  """Proposes a fixed list of DNAs and records its feedback."""

  def _setup(self):
    self._script = iter([(0, 0), (0, 1), (0, 0), (0, 1), (1, 1)])
    self.fed = []

  def _propose(self):
    return pg.DNA.from_numbers(list(next(self._script)), self.dna_spec)

  def _feedback(self, dna, reward):
    self.fed.append((tuple(dna.to_numbers()), reward))


def test_duplicates_of_completed_trials_feed_their_known_reward_back(monkeypatch):
  monkeypatch.setitem(controller_lib._ALGORITHMS, 'scripted', lambda seed: Scripted())
  tiny = pg.Dict(a=pg.oneof([1, 2]), b=pg.oneof(['x', 'y']))
  ctl = Controller(tiny, 'scripted', 0)
  assert ctl.propose_new()[0] == (0, 0)
  assert ctl.propose_new()[0] == (0, 1)  # Left without a reward, like a running trial.
  ctl.feedback((0, 0), 0.5)
  assert ctl.propose_new()[0] == (1, 1)
  assert ctl.num_duplicates == 2
  # The repeat of (0, 0) taught the algorithm 0.5 again; that of (0, 1) taught nothing.
  assert ctl._algorithm.fed == [((0, 0), 0.5), ((0, 0), 0.5)]
  assert ctl.propose_new() is None  # The algorithm ran out (StopIteration).


def test_nas_params_use_vertex_format():
  ctl = Controller(SPACE, 'random', 1)  # The real encoder of tf_vision/search_spaces.
  dna, nas_params = ctl.propose_new()
  assert list(nas_params) == ['width', 'act', 'kernels[0]', 'kernels[1]']
  for key, value in nas_params.items():
    assert re.fullmatch(r'\d+/\d+ \(.+\)', value), (key, value)
  width = [8, 16, 32, 64][dna[0]]
  assert nas_params['width'] == f'{dna[0]}/4 ({width})'
  assert nas_params['act'] == f"{dna[1]}/3 ('{['relu', 'swish', 'gelu'][dna[1]]}')"
  assert ctl.nas_params(dna) == nas_params
  assert ctl.materialize(dna)['width'] == width


def test_a_callers_to_nas_params_is_used():
  calls = []

  def simple(space, dna):
    calls.append(space)
    return {'dna': str(dna.to_numbers())}

  ctl = Controller(SPACE, 'regularized_evolution', 1, to_nas_params=simple)
  dna, nas_params = ctl.propose()
  assert nas_params == {'dna': str(list(dna))} and calls == [SPACE]


@pytest.mark.parametrize('algorithm, options, message', [
    ('evolution', {}, r"unknown search algorithm 'evolution' \(choose from: random, "
                      r"regularized_evolution\)"),
    ('random', {'population_size': 5}, "'random' has no option 'population_size'"),
    ('regularized_evolution', {'tournament_size': 1}, 'tournament_size must be at least 2'),
    ('regularized_evolution', {'population_size': 3, 'tournament_size': 4},
     r'population_size \(3\) must be at least tournament_size \(4\)'),
    ('regularized_evolution', {'population_size': 'big'}, 'population_size must be an integer'),
    ('regularized_evolution', {'mutation_rate': 0.1}, "no option 'mutation_rate'"),
])
def test_bad_algorithm_settings_are_user_errors(algorithm, options, message):
  with pytest.raises(NascliError, match=message):
    Controller(SPACE, algorithm, 0, **options)


def test_feedback_for_an_unknown_dna_is_a_bug():
  ctl = Controller(SPACE, 'random', 0, to_nas_params=cheap_nas_params)
  with pytest.raises(ValueError, match='not an outstanding proposal'):
    ctl.feedback((1, 1, 1, 1), 0.3)


def test_register_algorithm_adds_a_name():
  assert controller_lib.known_algorithms() == ['random', 'regularized_evolution']
  with pytest.raises(KeyError, match='registered twice'):
    controller_lib.register_algorithm('random')(lambda seed: None)
