"""The search controller: a seeded pyglove algorithm that proposes architectures and learns rewards.

The controller keeps no state of its own on disk. After a crash, `Controller.rebuild` makes a
fresh algorithm with the same seed and replays the journal's `proposed` and `completed` events
in journal order, calling `propose` and `feedback` exactly as the first run did, so that the
algorithm's random streams, population and counters end where they were and the next
proposal is the one the uninterrupted search would have made. (pyglove's own
`DNAGenerator.recover` rebuilds populations but not random-number state, so it cannot promise
that.) Every replayed proposal is checked against the journaled DNA.

For the replay to be exact the caller must talk to the controller in journal order: journal
`proposed` right after `propose_new` returns, and call `feedback` right when it journals
`completed`, with no other proposal in between.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Iterable, Mapping

import pyglove as pg

from nascli.errors import NascliError

Dna = tuple[int | float, ...]
# (space, dna) -> Vertex's nas_params object, e.g. {"blocks[0].kernel_size": "0/2 (3)"}.
ToNasParams = Callable[[Any, pg.DNA], dict[str, Any]]

DEFAULT_POPULATION_SIZE = 20
DEFAULT_TOURNAMENT_SIZE = 5
# A replayed proposal may be preceded by duplicates that the first run skipped; this only
# bounds a replay that can never match (the code changed), so it is far above `max_attempts`.
_REPLAY_MAX_ATTEMPTS = 10_000

_ALGORITHMS: dict[str, Callable[..., pg.DNAGenerator]] = {}


class ReplayMismatchError(NascliError):
  """The rebuilt controller proposes other DNAs than the journal recorded."""


def register_algorithm(name: str) -> Callable[[Callable[..., pg.DNAGenerator]],
                                              Callable[..., pg.DNAGenerator]]:
  """Registers `factory(seed, **options) -> pg.DNAGenerator` as search algorithm `name`.

  The factory must return a generator whose proposals depend only on the seed and the
  feedback it got, or resume cannot rebuild it.
  """
  def decorator(factory):
    if name in _ALGORITHMS:
      raise KeyError(f'search algorithm {name!r} is registered twice')
    _ALGORITHMS[name] = factory
    return factory
  return decorator


def known_algorithms() -> list[str]:
  return sorted(_ALGORITHMS)


def make_algorithm(name: str, seed: int, **options: Any) -> pg.DNAGenerator:
  """A new, not yet set up, generator of the registered algorithm `name`."""
  if name not in _ALGORITHMS:
    raise NascliError(f'unknown search algorithm {name!r} (choose from: '
                      f'{", ".join(known_algorithms())})')
  return _ALGORITHMS[name](seed, **options)


def _reject_options(name: str, options: Mapping[str, Any], allowed: Iterable[str] = ()) -> None:
  unknown = sorted(set(options) - set(allowed))
  if unknown:
    hint = f' (it takes: {", ".join(allowed)})' if allowed else ' (it takes none)'
    raise NascliError(f'search algorithm {name!r} has no option {unknown[0]!r}{hint}')


def _int_option(name: str, key: str, value: Any) -> int:
  if isinstance(value, bool) or not isinstance(value, int):
    raise NascliError(f'search algorithm {name!r}: {key} must be an integer, got {value!r}')
  return value


@register_algorithm('random')
def _random(seed: int, **options: Any) -> pg.DNAGenerator:
  _reject_options('random', options)
  return pg.geno.Random(seed=seed)


@register_algorithm('regularized_evolution')
def _regularized_evolution(seed: int, **options: Any) -> pg.DNAGenerator:
  """Real et al. 2019; small defaults because a local search runs tens of trials, not 20k."""
  name = 'regularized_evolution'
  _reject_options(name, options, ('population_size', 'tournament_size'))
  population = _int_option(name, 'population_size',
                           options.get('population_size', DEFAULT_POPULATION_SIZE))
  tournament = _int_option(name, 'tournament_size',
                           options.get('tournament_size', DEFAULT_TOURNAMENT_SIZE))
  if tournament < 2:
    raise NascliError(f'search algorithm {name!r}: tournament_size must be at least 2, '
                      f'got {tournament}')
  if population < tournament:
    raise NascliError(f'search algorithm {name!r}: population_size ({population}) must be at '
                      f'least tournament_size ({tournament})')
  # The mutator has its own random stream: unseeded, mutations (and so resume) would differ.
  return pg.evolution.regularized_evolution(
      mutator=pg.evolution.mutators.Uniform(seed=seed),
      population_size=population, tournament_size=tournament, seed=seed)


def dna_key(dna: pg.DNA | Iterable[int | float]) -> Dna:
  """The journal's form of a DNA: a tuple of `DNA.to_numbers()`, hashable and JSON-able."""
  if isinstance(dna, pg.DNA):
    return tuple(dna.to_numbers())
  return tuple(dna)


def _default_to_nas_params(space: Any, dna: pg.DNA) -> dict[str, Any]:
  # Imported late: the search spaces package is optional for callers that pass their own.
  from tf_vision.search_spaces import nas_params  # pylint: disable=g-import-not-at-top
  return nas_params.to_nas_params(space, dna)


class Controller:
  """Proposes architectures of `space` with a seeded algorithm and learns their rewards.

  Failed trials (failed, failed_with_nan, infeasible) get no feedback, as in pyglove's own
  `Feedback.skip()`: a made-up reward would enter the evolution population as if measured,
  and a failure may be transient (the trial can be retried and then report a real reward).
  Neither `pg.geno.Random` nor regularized evolution needs every proposal fed back: evolution
  leaves its random initial population only after `population_size` rewards arrived.
  """

  def __init__(self, space: Any, algorithm: str, seed: int, *,
               to_nas_params: ToNasParams | None = None, **algo_options: Any):
    """A fresh controller.

    Args:
      space: A pyglove hyper-value (e.g. `get_search_space("mnasnet")`).
      algorithm: A registered algorithm name ("random", "regularized_evolution").
      seed: Seeds every random stream of the algorithm.
      to_nas_params: (space, dna) -> Vertex's nas_params dict; by default
        `tf_vision.search_spaces.nas_params.to_nas_params`.
      **algo_options: The algorithm's options (population_size, tournament_size).
    """
    self.space = space
    self.algorithm_name = algorithm
    self.seed = seed
    self.dna_spec = pg.dna_spec(space)
    self._algorithm = make_algorithm(algorithm, seed, **algo_options)
    self._algorithm.setup(self.dna_spec)
    self._to_nas_params = to_nas_params or _default_to_nas_params
    # Proposed DNAs still waiting for feedback, kept as pyglove objects because evolution
    # reads its bookkeeping from the DNA's metadata.
    self._outstanding: dict[Dna, collections.deque[pg.DNA]] = collections.defaultdict(
        collections.deque)
    self._proposed: set[Dna] = set()
    self._rewards: dict[Dna, float] = {}
    self.num_duplicates = 0  # Proposals skipped by propose_new because they were known.
    self.exhausted = False  # propose_new gave up; it proposes nothing more.

  @property
  def num_feedbacks(self) -> int:
    """Rewards the algorithm received: completed trials plus duplicates of them."""
    return self._algorithm.num_feedbacks

  def _raw_propose(self) -> tuple[Dna, pg.DNA]:
    dna = self._algorithm.propose()
    return dna_key(dna), dna

  def _accept(self, key: Dna, dna: pg.DNA) -> None:
    self._outstanding[key].append(dna)
    self._proposed.add(key)

  def _skip_duplicate(self, key: Dna, dna: pg.DNA) -> None:
    """A known architecture: no new trial, but its known reward teaches the algorithm again.

    A duplicate of a trial with no reward yet (pending, running or failed) gets no feedback,
    for the same reasons failed trials get none.
    """
    self.num_duplicates += 1
    if key in self._rewards:
      self._algorithm.feedback(dna, self._rewards[key])

  def nas_params(self, dna: pg.DNA | Iterable[int | float]) -> dict[str, Any]:
    """Vertex's nas_params object of `dna` (what the trial's nas_params_str.json holds)."""
    if not isinstance(dna, pg.DNA):
      dna = pg.DNA.from_numbers(list(dna), self.dna_spec)
    return self._to_nas_params(self.space, dna)

  def materialize(self, dna: pg.DNA | Iterable[int | float]) -> Any:
    """The concrete architecture object of `dna`."""
    if not isinstance(dna, pg.DNA):
      dna = pg.DNA.from_numbers(list(dna), self.dna_spec)
    return pg.materialize(self.space, dna)

  def propose(self) -> tuple[Dna, dict[str, Any]]:
    """The algorithm's next proposal, duplicate or not, as (dna, nas_params).

    Raises:
      StopIteration: the algorithm has nothing more to propose.
    """
    key, dna = self._raw_propose()
    self._accept(key, dna)
    return key, self._to_nas_params(self.space, dna)

  def propose_new(self, trained: Iterable[Dna] | None = None,
                  max_attempts: int = 50) -> tuple[Dna, dict[str, Any]] | None:
    """A proposal that is neither in `trained` nor proposed before by this controller.

    Duplicates are not trials: each gets its known reward fed back (so evolution still
    learns from the repetition) and the algorithm is asked again.

    Args:
      trained: DNAs to avoid besides this controller's own proposals. Keep it a subset of the
        job's proposed DNAs (`JobState.dnas()`), or a rebuilt controller cannot replay it.
      max_attempts: Proposals to try before giving up.

    Returns:
      (dna, nas_params), or None when `max_attempts` proposals in a row were known
      architectures or the algorithm stopped: the space is exhausted or the search is stuck,
      and the caller ends the search. After None the controller proposes nothing more, so that
      the skipped duplicates, which the journal does not record, cannot shape a later proposal.
    """
    if self.exhausted:
      return None
    avoid = {tuple(d) for d in trained or ()}
    for _ in range(max_attempts):
      try:
        key, dna = self._raw_propose()
      except StopIteration:
        break
      if key in self._proposed or key in avoid:
        self._skip_duplicate(key, dna)
        continue
      self._accept(key, dna)
      return key, self._to_nas_params(self.space, dna)
    self.exhausted = True
    return None

  def feedback(self, dna: pg.DNA | Iterable[int | float], reward: float) -> None:
    """Tells the algorithm the reward of a completed trial (one of its proposals)."""
    key = dna_key(dna)
    pending = self._outstanding.get(key)
    if not pending:
      raise ValueError(f'feedback for DNA {list(key)}, which is not an outstanding proposal')
    self._algorithm.feedback(pending.popleft(), float(reward))
    if not pending:
      del self._outstanding[key]
    self._rewards[key] = float(reward)

  @classmethod
  def rebuild(cls, space: Any, algorithm: str, seed: int,
              events: Iterable[Mapping[str, Any]], *,
              to_nas_params: ToNasParams | None = None, **algo_options: Any) -> 'Controller':
    """A controller in the state the journal's run left its own in.

    Replays, in journal order, each `proposed` event as a proposal (skipping, with feedback,
    the duplicates the first run's `propose_new` skipped) and each `completed` event as
    feedback. `failed` events get no feedback, as in the first run.

    Raises:
      ReplayMismatchError: a replayed proposal differs from the journaled one: the search
        space, algorithm options, seed or pyglove version changed since the search started.
    """
    ctl = cls(space, algorithm, seed, to_nas_params=to_nas_params, **algo_options)
    trial_dna: dict[str, Dna] = {}
    for event in events:
      kind = event.get('event')
      if kind == 'proposed':
        trial_dna[event['trial_id']] = ctl._replay_proposal(  # pylint: disable=protected-access
            event['trial_id'], dna_key(event['dna']))
      elif kind == 'completed':
        ctl.feedback(trial_dna[event['trial_id']], event['reward'])
    return ctl

  def _replay_proposal(self, trial_id: str, expected: Dna) -> Dna:
    for _ in range(_REPLAY_MAX_ATTEMPTS):
      try:
        key, dna = self._raw_propose()
      except StopIteration:
        key = None
        break
      if key == expected:
        # Accepted even if known: the first run then used propose(), which keeps duplicates.
        self._accept(key, dna)
        return key
      if key not in self._proposed:
        break
      self._skip_duplicate(key, dna)
    got = 'nothing' if key is None else list(key)
    raise ReplayMismatchError(
        f'cannot resume: the journal says trial {trial_id} was proposed as {list(expected)}, '
        f'but {self.algorithm_name} with seed {self.seed} now proposes {got}; the search '
        f'space, algorithm options or pyglove version changed since the search started; pass '
        f'--overwrite or use another --local_output_dir')


def random_architectures(space: Any, count: int, seed: int) -> list[dict[str, Any]]:
  """The first `count` architectures (Vertex nas_params) random search proposes with `seed`:
  distinct, repeatable sets for benchmarks and tests."""
  ctl = Controller.rebuild(space, "random", seed, [])
  dnas, out = [], []
  for _ in range(count):
    dna, nas_params = ctl.propose_new(dnas)
    dnas.append(dna)
    out.append(nas_params)
  return out
