"""The search controller: a seeded pyglove algorithm that proposes architectures and learns rewards.

The controller keeps no state of its own on disk. After a crash, `Controller.rebuild` makes a
fresh algorithm with the same seed and replays the journal's `proposed` and `completed` events
(and `over_target`: a proposal predicted over the hard latency target, fed back its penalty) in
journal order, calling `propose` and `feedback` exactly as the first run did, so that the
algorithm's random streams, population and counters end where they were and the next
proposal is the one the uninterrupted search would have made. (pyglove's own
`DNAGenerator.recover` rebuilds populations but not random-number state, so it cannot promise
that.) Every replayed proposal is checked against the journaled DNA, except where the algorithm
takes the journal's word for it: an algorithm that defines `replay_next(numbers)` (gp_bo, whose
choice is the argmax of floating-point results that another CPU or BLAS may round
differently) is told each journaled DNA before it is asked, draws its random streams as the
first run did, and proposes that DNA wherever its choice is numerical; its state (the rewards
it learned) is rebuilt from the journal all the same.

For the replay to be exact the caller must talk to the controller in journal order: journal
`proposed` right after `propose_new` returns, and call `feedback` right when it journals
`completed`, with no other proposal in between.

A reward is a float, or, for a multi-objective search (`num_objectives` > 1), a tuple of
floats, each already signed so that larger is better; the journal keeps it as a list. Each
algorithm says how many objectives it can optimize (`algorithm_supports_objectives`), which a
flag check can ask before anything heavy is imported.

Algorithms: random and regularized evolution (pyglove's), NSGA-II (pyglove's, multi-objective),
TPE (Optuna's sampler, nascli/search/tpe.py) and REINFORCE (nascli/search/reinforce.py). The
last two sample a DNA decision by decision through `Decisions`.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from typing import Any, Callable, Iterable, Mapping, NamedTuple

import pyglove as pg

from nascli.errors import NascliError

Dna = tuple[int | float, ...]
Reward = float | tuple[float, ...]


class Proposed(NamedTuple):
  """A trial the controller proposes: its DNA, its nas_params, and its run seed (None: the
  search's --seed)."""
  dna: Dna
  nas_params: dict[str, Any]
  seed: int | None = None


# (space, dna) -> Vertex's nas_params object, e.g. {"blocks[0].kernel_size": "0/2 (3)"}.
ToNasParams = Callable[[Any, pg.DNA], dict[str, Any]]

DEFAULT_POPULATION_SIZE = 20
DEFAULT_TOURNAMENT_SIZE = 5
# NSGA-II's first 2 x population_size proposals are random: small, for searches of ~100 trials
# (8 against 5, 10, 20: BENCHMARKS.md, NAS-Bench-201 hypervolume, tuning seeds).
DEFAULT_NSGA2_POPULATION_SIZE = 8
# A replayed proposal may be preceded by duplicates that the first run skipped; this only
# bounds a replay that can never match (the code changed), so it is far above `max_attempts`.
_REPLAY_MAX_ATTEMPTS = 10_000
# The journal event of a warm start (nascli/search/warm_start.py, which reads no pyglove).
WARM_START = 'warm_start'
# The journal event of a proposal predicted over the hard latency target, not trained
# (nascli/search/latency_gate.py): fed back its penalty.
OVER_TARGET = 'over_target'

_ALGORITHMS: dict[str, Callable[..., pg.DNAGenerator]] = {}
# name -> (fewest, most) objectives it optimizes; most None: any number.
_OBJECTIVES: dict[str, tuple[int, int | None]] = {}
# Algorithms whose repeated proposals are trials of their own (`propose_trial`).
_REPEATS: set[str] = set()
# Algorithms the commands build for themselves, never a --search_algorithm.
_INTERNAL: set[str] = set()


class ReplayMismatchError(NascliError):
  """The rebuilt controller proposes other DNAs than the journal recorded."""


def register_algorithm(name: str, objectives: tuple[int, int | None] = (1, 1), *,
                       repeats: bool = False, internal: bool = False
                       ) -> Callable[[Callable[..., pg.DNAGenerator]],
                                     Callable[..., pg.DNAGenerator]]:
  """Registers `factory(seed, **options) -> pg.DNAGenerator` as search algorithm `name`.

  The factory must return a generator whose proposals depend only on the seed and the
  feedback it got, or resume cannot rebuild it.

  Args:
    name: The algorithm's name (`--search_algorithm`).
    objectives: (fewest, most) objectives it optimizes, most None for any number. An
      algorithm that can take more than one is also passed `num_objectives=` (its rewards
      are then tuples of that length).
    repeats: a proposal of an architecture proposed before is a trial too (the same model
      trained again, e.g. with another seed), not a duplicate to skip.
    internal: built by a command for itself (the proxy-task commands), not listed among the
      --search_algorithm choices.
  """
  def decorator(factory):
    if name in _ALGORITHMS:
      raise KeyError(f'search algorithm {name!r} is registered twice')
    _ALGORITHMS[name] = factory
    _OBJECTIVES[name] = objectives
    if repeats:
      _REPEATS.add(name)
    if internal:
      _INTERNAL.add(name)
    return factory
  return decorator


def known_algorithms() -> list[str]:
  """The --search_algorithm choices."""
  return sorted(set(_ALGORITHMS) - _INTERNAL)


def _check_name(name: str) -> None:
  if name not in _ALGORITHMS:
    raise NascliError(f'unknown search algorithm {name!r} (choose from: '
                      f'{", ".join(known_algorithms())})')


def algorithm_supports_objectives(name: str, num_objectives: int) -> bool:
  """Whether algorithm `name` can optimize `num_objectives` objectives (1: a scalar reward)."""
  _check_name(name)
  fewest, most = _OBJECTIVES.get(name, (1, 1))
  return fewest <= num_objectives and (most is None or num_objectives <= most)


def check_objectives(name: str, num_objectives: int) -> None:
  """Refuses, in one line, an algorithm that cannot optimize `num_objectives` objectives.

  Raises:
    NascliError: unknown algorithm, or a count it cannot optimize.
  """
  if algorithm_supports_objectives(name, num_objectives):
    return
  fewest, _ = _OBJECTIVES.get(name, (1, 1))
  able = [a for a in known_algorithms() if algorithm_supports_objectives(a, num_objectives)]
  if num_objectives < fewest:
    raise NascliError(f'search algorithm {name!r} optimizes at least {fewest} objectives '
                      f'(--objectives), got {num_objectives}; for one reward use: '
                      f'{", ".join(able)}')
  raise NascliError(f'search algorithm {name!r} optimizes one scalar reward, not '
                    f'{num_objectives} objectives (--objectives); use: {", ".join(able)}')


def make_algorithm(name: str, seed: int, num_objectives: int = 1,
                   **options: Any) -> pg.DNAGenerator:
  """A new, not yet set up, generator of the registered algorithm `name`."""
  check_objectives(name, num_objectives)
  if _OBJECTIVES.get(name, (1, 1)) == (1, 1):
    return _ALGORITHMS[name](seed, **options)
  return _ALGORITHMS[name](seed, num_objectives=num_objectives, **options)


def _reject_options(name: str, options: Mapping[str, Any], allowed: Iterable[str] = ()) -> None:
  unknown = sorted(set(options) - set(allowed))
  if unknown:
    hint = f' (it takes: {", ".join(allowed)})' if allowed else ' (it takes none)'
    raise NascliError(f'search algorithm {name!r} has no option {unknown[0]!r}{hint}')


def _int_option(name: str, key: str, value: Any, minimum: int | None = None) -> int:
  if isinstance(value, bool) or not isinstance(value, int):
    raise NascliError(f'search algorithm {name!r}: {key} must be an integer, got {value!r}')
  if minimum is not None and value < minimum:
    raise NascliError(f'search algorithm {name!r}: {key} must be at least {minimum}, '
                      f'got {value}')
  return value


def _float_option(name: str, key: str, value: Any, low: float, high: float, *,
                  low_open: bool = False, high_open: bool = False) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise NascliError(f'search algorithm {name!r}: {key} must be a number, got {value!r}')
  value = float(value)
  if not ((value > low if low_open else value >= low)
          and (value < high if high_open else value <= high)):  # NaN fails both
    interval = f'{"(" if low_open else "["}{low:g}, {high:g}{")" if high_open else "]"}'
    raise NascliError(f'search algorithm {name!r}: {key} must be in {interval}, got {value:g}')
  return value


def _bool_option(name: str, key: str, value: Any) -> bool:
  if not isinstance(value, bool):
    raise NascliError(f'search algorithm {name!r}: {key} must be true or false, got {value!r}')
  return value


@register_algorithm('random', objectives=(1, None))
def _random(seed: int, num_objectives: int = 1, **options: Any) -> pg.DNAGenerator:
  """Ignores rewards, so any number of objectives."""
  del num_objectives
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


@register_algorithm('nsga2', objectives=(2, None))
def _nsga2(seed: int, num_objectives: int, **options: Any) -> pg.DNAGenerator:
  """Deb et al. 2002, pyglove's: 2 x population_size random proposals, then mutated elites of
  the non-dominated sort (crowding distance within a front)."""
  del num_objectives  # pyglove reads it from the reward tuples
  name = 'nsga2'
  _reject_options(name, options, ('population_size',))
  population = _int_option(name, 'population_size',
                           options.get('population_size', DEFAULT_NSGA2_POPULATION_SIZE), 2)
  return pg.evolution.nsga2(mutator=pg.evolution.mutators.Uniform(seed=seed),
                            population_size=population, seed=seed)


FIXED = 'fixed'


@register_algorithm(FIXED, objectives=(1, None), repeats=True, internal=True)
def _fixed(seed: int, num_objectives: int = 1, **options: Any) -> pg.DNAGenerator:
  """The architectures `dnas` (DNA numbers) in order, each trained with its run seed from
  `seeds` (default: the search's seed); with `repeat`, the list again and again, each pass's
  seeds one more than the last. Proposal i is dnas[i % n] with seed seeds[i % n] + i // n: the
  reference models of a proxy-task study under a candidate proxy, or one model trained with
  seeds s, s + 1, ... Rewards teach it nothing."""
  del num_objectives
  _reject_options(FIXED, options, ('dnas', 'seeds', 'repeat'))
  dnas = options.get('dnas')
  if not isinstance(dnas, (list, tuple)) or not dnas or not all(
      isinstance(d, (list, tuple)) for d in dnas):
    raise NascliError(f'search algorithm {FIXED!r}: dnas must be a non-empty list of DNAs'
                      f' (lists of numbers), got {dnas!r}')
  seeds = options.get('seeds', [seed] * len(dnas))
  if (not isinstance(seeds, (list, tuple)) or len(seeds) != len(dnas)
      or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds)):
    raise NascliError(f'search algorithm {FIXED!r}: seeds must be {len(dnas)} integers, one'
                      f' per DNA, got {seeds!r}')
  repeat = _bool_option(FIXED, 'repeat', options.get('repeat', False))

  @pg.geno.dna_generator
  def listed(dna_spec: pg.DNASpec):
    passes = itertools.count() if repeat else range(1)
    for n in passes:
      for numbers, run_seed in zip(dnas, seeds):
        dna = pg.DNA.from_numbers(list(numbers), dna_spec)
        dna.set_metadata('seed', int(run_seed) + n)
        yield dna

  return listed()


def dna_key(dna: pg.DNA | Iterable[int | float]) -> Dna:
  """The journal's form of a DNA: a tuple of `DNA.to_numbers()`, hashable and JSON-able."""
  if isinstance(dna, pg.DNA):
    return tuple(dna.to_numbers())
  return tuple(dna)


@dataclasses.dataclass(frozen=True)
class Decision:
  """A decision point of a DNASpec, as a generator that samples decision by decision sees it."""
  name: str  # its id in the spec, e.g. 'blocks[0].kernel_size', 'output_block_levels[2]'
  num_candidates: int  # 0 for a float decision (pg.floatv)
  float_range: tuple[float, float, bool] | None  # (min, max, log scale) of a float decision
  parent: int | None  # the conditional decision it lives under (an index into Decisions.items)
  parent_candidate: int | None  # ... and the candidate of that decision it belongs to
  subchoice: int | None  # its position in a multi-choice (pg.sublist_of), else None
  group: int | None  # the multi-choice's first choice (an index into Decisions.items)
  num_subchoices: int  # how many choices that multi-choice makes (1 for a plain oneof)
  distinct: bool  # a multi-choice's choices must differ
  sorted: bool  # ... and be in candidate order


Chooser = Callable[[int, Decision, 'list[int] | None'], 'int | float']


class Decisions:
  """The decision points of a DNASpec in DNA order, to sample or read a DNA one at a time.

  `walk(choose)` visits the decisions that are active given the values chosen so far (a
  decision under a candidate of a `pg.oneof` exists only if that candidate is chosen) and asks
  `choose(index, decision, allowed)` for each; `allowed` is None for "any candidate" (and for
  floats), or the candidate indices a multi-choice still allows (distinct, sorted). The values
  in walk order are the DNA's `to_numbers()`, so the same walk reads a DNA back.
  """

  def __init__(self, dna_spec: pg.DNASpec, algorithm: str, allow_floats: bool = True):
    self.dna_spec = dna_spec
    items: list[Decision] = []
    index_of: dict[int, int] = {}  # id(decision point or multi-choice) -> its (first) index
    for dp in dna_spec.decision_points:
      if isinstance(dp, pg.geno.Float):
        if not allow_floats:
          raise NascliError(f'search algorithm {algorithm!r} cannot search float decision '
                            f'{dp.id} (pg.floatv): it samples candidates only')
        num_candidates, float_range = 0, (float(dp.min_value), float(dp.max_value),
                                          dp.scale == 'log')
      elif isinstance(dp, pg.geno.Choices):
        num_candidates, float_range = len(dp.candidates), None
      else:
        raise NascliError(f'search algorithm {algorithm!r} cannot search decision {dp.id} '
                          f'({type(dp).__name__}); use random or regularized_evolution')
      parent = parent_candidate = None
      if dp.parent_choice is not None:
        node = dp
        while node.parent_spec is not dp.parent_choice:
          node = node.parent_spec
        parent, parent_candidate = index_of[id(dp.parent_choice)], node.index
      multi = dp.parent_spec if dp.is_subchoice else None
      index_of[id(dp)] = len(items)
      if multi is not None:
        index_of.setdefault(id(multi), len(items))
      items.append(Decision(
          name=str(dp.id), num_candidates=num_candidates, float_range=float_range,
          parent=parent, parent_candidate=parent_candidate,
          subchoice=dp.subchoice_index if multi is not None else None,
          group=index_of[id(multi)] if multi is not None else None,
          num_subchoices=multi.num_choices if multi is not None else 1,
          distinct=bool(multi is not None and multi.distinct),
          sorted=bool(multi is not None and multi.sorted)))
    self.items = items
    # Top-level oneofs only (the NAS-Bench-201 cell, mnasnet): DNA(numbers) is that DNA, and
    # half the price of DNA.from_numbers, which matters at thousands of proposals.
    self._flat = len(items) > 1 and all(
        d.parent is None and d.subchoice is None and d.num_candidates for d in items)
    if self._flat:
      probe = [0] * len(items)
      self._flat = pg.DNA(probe).use_spec(dna_spec) == pg.DNA.from_numbers(probe, dna_spec)

  def walk(self, choose: Chooser) -> list[int | float]:
    """The DNA's numbers, each active decision's value from `choose`."""
    values: list[int | float | None] = [None] * len(self.items)
    chosen: dict[int, list[int]] = {}  # multi-choice -> its choices so far
    numbers: list[int | float] = []
    for i, d in enumerate(self.items):
      if d.parent is not None and values[d.parent] != d.parent_candidate:
        continue
      allowed = None
      if d.subchoice is not None and (d.distinct or d.sorted):
        previous = chosen.setdefault(d.group, [])
        high = d.num_candidates - (d.num_subchoices - d.subchoice - 1 if d.distinct and d.sorted
                                   else 0)
        low = (previous[-1] + (1 if d.distinct else 0)) if d.sorted and previous else 0
        allowed = [c for c in range(low, high) if not (d.distinct and c in previous)]
      values[i] = choose(i, d, allowed)
      if d.subchoice is not None:
        chosen.setdefault(d.group, []).append(values[i])
      numbers.append(values[i])
    return numbers

  def to_dna(self, numbers: list[int | float]) -> pg.DNA:
    if self._flat:
      return pg.DNA(list(numbers)).use_spec(self.dna_spec)
    return pg.DNA.from_numbers(list(numbers), self.dna_spec)

  def read(self, dna: pg.DNA) -> list[tuple[int, int | float, list[int] | None]]:
    """(index, value, allowed) of each active decision of `dna`, in walk order."""
    numbers = iter(dna.to_numbers())
    out = []

    def take(i, decision, allowed):
      del decision
      value = next(numbers)
      out.append((i, value, allowed))
      return value

    self.walk(take)
    return out


def _default_to_nas_params(space: Any, dna: pg.DNA) -> dict[str, Any]:
  # Imported late: the search spaces package is optional for callers that pass their own.
  from tf_vision.search_spaces import nas_params  # pylint: disable=g-import-not-at-top
  return nas_params.to_nas_params(space, dna)


class Controller:
  """Proposes architectures of `space` with a seeded algorithm and learns their rewards.

  Failed trials (failed, failed_with_nan, infeasible) get no feedback, as in pyglove's own
  `Feedback.skip()`: a made-up reward would enter the evolution population as if measured,
  and a failure may be transient (the trial can be retried and then report a real reward).
  No algorithm here needs every proposal fed back: evolution leaves its random initial
  population only after `population_size` rewards arrived, TPE and REINFORCE learn from the
  rewards they got.
  """

  def __init__(self, space: Any, algorithm: str, seed: int, *, num_objectives: int = 1,
               to_nas_params: ToNasParams | None = None, **algo_options: Any):
    """A fresh controller.

    Args:
      space: A pyglove hyper-value (e.g. `get_search_space("mnasnet")`).
      algorithm: A registered algorithm name (`known_algorithms()`).
      seed: Seeds every random stream of the algorithm.
      num_objectives: 1 for a scalar reward; more for tuple rewards (`--objectives`), each
        value signed so that larger is better.
      to_nas_params: (space, dna) -> Vertex's nas_params dict; by default
        `tf_vision.search_spaces.nas_params.to_nas_params`.
      **algo_options: The algorithm's options (population_size, tournament_size, ...).
    """
    self.space = space
    self.algorithm_name = algorithm
    self.seed = seed
    self.num_objectives = num_objectives
    self.dna_spec = pg.dna_spec(space)
    self._algorithm = make_algorithm(algorithm, seed, num_objectives, **algo_options)
    self._algorithm.setup(self.dna_spec)
    # The default reads the DNA against the spec built here: from the space itself it would
    # build the spec again per proposal (a quarter second for mnasnet), which a search that
    # skips many proposals over its latency target pays many times.
    self._to_nas_params = to_nas_params or (
        lambda space, dna: _default_to_nas_params(self.dna_spec, dna))
    # Proposed DNAs still waiting for feedback, kept as pyglove objects because evolution
    # reads its bookkeeping from the DNA's metadata.
    self._outstanding: dict[Dna, collections.deque[pg.DNA]] = collections.defaultdict(
        collections.deque)
    self._proposed: set[Dna] = set()
    self._rewards: dict[Dna, Reward] = {}
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

  def propose(self) -> tuple[Dna, dict[str, Any]]:
    """The algorithm's next proposal, duplicate or not, as (dna, nas_params).

    Raises:
      StopIteration: the algorithm has nothing more to propose.
    """
    key, dna = self._raw_propose()
    self._accept(key, dna)
    return key, self._to_nas_params(self.space, dna)

  def propose_trial(self, trained: Iterable[Dna] | None = None, max_attempts: int = 50
                    ) -> Proposed | None:
    """The next trial: `propose_new`'s proposal, or, for an algorithm whose repeats are trials
    (`register_algorithm(repeats=True)`), its next proposal as it is; with the run seed the
    algorithm gave it (None: the search's). None: nothing more to propose."""
    if self.algorithm_name not in _REPEATS:
      proposal = self.propose_new(trained, max_attempts)
      return None if proposal is None else Proposed(*proposal, seed=None)
    if self.exhausted:
      return None
    try:
      key, dna = self._raw_propose()
    except StopIteration:
      self.exhausted = True
      return None
    self._accept(key, dna)
    seed = dna.metadata.get('seed') if dna.metadata else None
    return Proposed(key, self._to_nas_params(self.space, dna), seed)

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

  def feedback(self, dna: pg.DNA | Iterable[int | float],
               reward: float | Iterable[float]) -> None:
    """Tells the algorithm the reward of a completed trial (one of its proposals): a number, or
    `num_objectives` numbers (a list, as the journal keeps it, or a tuple)."""
    key = dna_key(dna)
    pending = self._outstanding.get(key)
    if not pending:
      raise ValueError(f'feedback for DNA {list(key)}, which is not an outstanding proposal')
    value = self._reward(key, reward)
    self._algorithm.feedback(pending.popleft(), value)
    if not pending:
      del self._outstanding[key]
    self._rewards[key] = value

  def warm_start(self, history: Iterable[tuple[Iterable[int | float], Any]]) -> None:
    """Seeds the algorithm with (dna, reward) pairs of another job (`--warm_start_from`),
    before its first proposal: each is fed back as pyglove's `DNAGenerator.feedback` takes a
    completed trial, in order (TPE: a completed trial of its study; REINFORCE: a policy step;
    evolution and NSGA-II: a member of the population; random: nothing). The pairs are known
    architectures: `propose_new` skips them as it skips its own duplicates. Not `recover`:
    pyglove's recover replays the pairs as the algorithm's own proposals (random search would
    advance its random stream by them).

    Raises:
      ValueError: called after a proposal.
      NascliError: a DNA that does not fit the space, or a reward of the wrong shape.
    """
    if self._algorithm.num_proposals or self._proposed:
      raise ValueError('warm_start comes before the first proposal')
    for i, (numbers, reward) in enumerate(history):
      key = dna_key(numbers)
      try:
        dna = pg.DNA.from_numbers(list(key), self.dna_spec)
      except (ValueError, TypeError, IndexError) as e:
        raise NascliError(f'warm start: architecture {list(key)} does not fit the search '
                          f'space ({" ".join(str(e).split())[:200]}); was the old job a search '
                          f'of another space?') from None
      value = self._reward(key, reward)
      # Evolution's bookkeeping (pyglove.ext.evolution.base), which its feedback reads: a
      # member of the first generation's population, proposed before this search's own.
      dna.set_metadata('proposal_id', -(i + 1))
      dna.set_metadata('generation_id', 1)
      dna.set_metadata('initial_population', True)
      self._algorithm.feedback(dna, value)
      self._proposed.add(key)
      self._rewards[key] = value

  def _reward(self, key: Dna, reward: Any) -> Reward:
    """The reward as the algorithm takes it: a float, or a tuple of `num_objectives` floats."""
    values = list(reward) if isinstance(reward, (list, tuple)) else [reward]
    if len(values) != self.num_objectives or any(
        isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
      want = ('one number' if self.num_objectives == 1
              else f'{self.num_objectives} numbers (one per objective)')
      raise NascliError(f'the reward of DNA {list(key)} is {reward!r}, but the search takes '
                        f'{want}; was the journal written with other --objectives?')
    if self.num_objectives == 1:
      return float(values[0])
    return tuple(float(v) for v in values)

  @classmethod
  def rebuild(cls, space: Any, algorithm: str, seed: int,
              events: Iterable[Mapping[str, Any]], *, num_objectives: int = 1,
              to_nas_params: ToNasParams | None = None, **algo_options: Any) -> 'Controller':
    """A controller in the state the journal's run left its own in.

    Replays, in journal order, each `proposed` event as a proposal (skipping, with feedback,
    the duplicates the first run's `propose_new` skipped) and each `completed` event, and
    each `stopped` one (early stopping: its last rung's reward), as feedback (its `reward`: a
    number, or a list of `num_objectives` numbers), except for a trial that got its feedback
    from a `rung` event marked `feedback` (with early stopping every trial's rung-0 reward is
    fed as it reports, so the rewards the algorithm compares were measured at the same budget;
    scheduler.py; journals written before that fed asha_promotions trials so, and stop-rule
    trials at `stopped` / `completed`). An `over_target` event (--latency_model: the proposal
    was predicted over the hard latency target and not trained) is fed back its penalty, as the
    first run told it right after the proposal. `failed` events get no feedback, as in the first run. A
    `warm_start` event (`--warm_start_from`, journaled before the first proposal) seeds it
    first (`warm_start`).

    Raises:
      ReplayMismatchError: a replayed proposal differs from the journaled one: the search
        space, algorithm options, seed or pyglove version changed since the search started.
        (An algorithm with `replay_next` takes the journal's DNA where its choice is
        numerical, so only its random proposals are checked there.)
    """
    ctl = cls(space, algorithm, seed, num_objectives=num_objectives,
              to_nas_params=to_nas_params, **algo_options)
    trial_dna: dict[str, Dna] = {}
    fed: set[str] = set()  # trials whose feedback was a rung report's
    for event in events:
      kind = event.get('event')
      if kind == 'proposed':
        trial_dna[event['trial_id']] = ctl._replay_proposal(  # pylint: disable=protected-access
            event['trial_id'], dna_key(event['dna']))
      elif kind == 'rung' and event.get('feedback'):  # early stopping: the rung-0 reward
        ctl.feedback(trial_dna[event['trial_id']], event['reward'])
        fed.add(event['trial_id'])
      elif kind in ('completed', 'stopped') and event['trial_id'] not in fed:
        ctl.feedback(trial_dna[event['trial_id']], event['reward'])  # stopped: its last rung's
      elif kind == OVER_TARGET:  # --latency_model: predicted over the hard target, its penalty
        ctl.feedback(trial_dna[event['trial_id']], event['reward'])
      elif kind == WARM_START:  # --warm_start_from: before any proposal
        ctl.warm_start((p['dna'], p['reward']) for p in event.get('history') or [])
    return ctl

  def _replay_proposal(self, trial_id: str, expected: Dna) -> Dna:
    replay_next = getattr(self._algorithm, 'replay_next', None)
    if replay_next is not None:  # it may take the journal's DNA as it is: it must fit
      try:
        pg.DNA.from_numbers(list(expected), self.dna_spec)
      except (ValueError, TypeError, IndexError) as e:
        raise ReplayMismatchError(
            f'cannot resume: the journal says trial {trial_id} was proposed as '
            f'{list(expected)}, which does not fit the search space '
            f'({" ".join(str(e).split())[:200]}); the search space changed since the search '
            f'started; pass --overwrite or use another --local_output_dir') from None
    for _ in range(_REPLAY_MAX_ATTEMPTS):
      if replay_next is not None:  # see the module doc
        replay_next(expected)
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


# TPE and REINFORCE register themselves here from modules of their own, which import this
# module's helpers: so they come last. (Optuna is imported only when TPE is set up.)
# pylint: disable=g-import-not-at-top,wrong-import-position,unused-import
from nascli.search import reinforce  # noqa: E402,F401
from nascli.search import tpe  # noqa: E402,F401
from nascli.search import gp_bo  # noqa: E402,F401
