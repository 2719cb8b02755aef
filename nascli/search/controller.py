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
last two sample a DNA decision by decision through `Decisions` (decisions.py). Each registers
itself with algorithm_registry.py; algorithms.py imports them all.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Iterable, Mapping, NamedTuple

import pyglove as pg

from nascli.errors import NascliError
# Every algorithm, registered (imported for that).
from nascli.search import algorithms  # noqa: F401  pylint: disable=unused-import
# The registry's and the decisions' public names, re-exported: callers know them from here.
# pylint: disable=unused-import
from nascli.search.algorithm_registry import _ALGORITHMS
from nascli.search.algorithm_registry import _REPEATS
from nascli.search.algorithm_registry import algorithm_supports_objectives
from nascli.search.algorithm_registry import check_objectives
from nascli.search.algorithm_registry import known_algorithms
from nascli.search.algorithm_registry import make_algorithm
from nascli.search.algorithm_registry import register_algorithm
from nascli.search.decisions import Chooser
from nascli.search.decisions import Decision
from nascli.search.decisions import Decisions
from nascli.search.decisions import Dna
from nascli.search.decisions import dna_key
from nascli.search.pyglove_algorithms import DEFAULT_NSGA2_POPULATION_SIZE
from nascli.search.pyglove_algorithms import DEFAULT_POPULATION_SIZE
from nascli.search.pyglove_algorithms import DEFAULT_TOURNAMENT_SIZE
from nascli.search.pyglove_algorithms import FIXED
# pylint: enable=unused-import

Reward = float | tuple[float, ...]


class Proposed(NamedTuple):
  """A trial the controller proposes: its DNA, its nas_params, and its run seed (None: the
  search's --seed)."""
  dna: Dna
  nas_params: dict[str, Any]
  seed: int | None = None


# (space, dna) -> Vertex's nas_params object, e.g. {"blocks[0].kernel_size": "0/2 (3)"}.
ToNasParams = Callable[[Any, pg.DNA], dict[str, Any]]

# A replayed proposal may be preceded by duplicates that the first run skipped; this only
# bounds a replay that can never match (the code changed), so it is far above `max_attempts`.
_REPLAY_MAX_ATTEMPTS = 10_000
# The journal event of a warm start (nascli/search/warm_start.py, which reads no pyglove).
WARM_START = 'warm_start'
# The journal event of a proposal predicted over the hard latency target, not trained
# (nascli/search/latency_gate.py): fed back its penalty.
OVER_TARGET = 'over_target'


class ReplayMismatchError(NascliError):
  """The rebuilt controller proposes other DNAs than the journal recorded."""


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
