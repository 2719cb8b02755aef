"""The trial state machine: what the journal's events say about a search, and the statuses.

The journal (journal.py) stores events; this module reduces them to the job's state, one event
at a time (`JobState.apply`), and refuses an event that breaks a trial's legal transitions.
`replay(events)` is the state of a whole journal; the search loop keeps one JobState and
applies each event it appends, so a turn of the loop costs what its own events cost, not a
replay of the job (Optuna's JournalStorage replays only the logs it has not read yet).

A trial's statuses are those of its job_status.json (tf_vision/job_status.py, which defines
them), re-exported here with the journal's own `pending` and the groups the search uses.
No framework is imported: readers (list_trials, report) need none.

Events (each also carries "seq", 1, 2, 3, ..., and "time", ISO 8601 UTC):
  search_started {settings, fingerprint}
  proposed       {trial_id, dna, nas_params}
  started        {trial_id, attempt}
  completed      {trial_id, reward, metrics}: reward is a number, or with --objectives the list
                 of objective values, each signed so that larger is better
  failed         {trial_id, status: failed | failed_with_nan | infeasible, reason}; with
                 `lost` {attempt, reason}: the attempt was lost with its machine and the trial
                 has no retry left (one event, so a kill cannot fall between the loss and the
                 failure)
  lost           {trial_id, attempt, reason}: the machine running an attempt went away (a Ray
                 worker or node died); the trial is pending again, to be retried
  interrupted    {trial_id, attempt, signal}: the search was stopped (Ctrl-C, SIGTERM) while
                 the attempt ran; the trial runs again, from its checkpoint, on resume. Readers
                 older than this event see the trial as running, which they re-run too.
With --latency_model (nascli/search/latency_gate.py), under --latency_constraint hard:
  over_target    {trial_id, latency_ms, target_ms, margin, reward, latency_device}: the trial,
                 just proposed, is predicted over target_ms * (1 + margin) and is not trained: a
                 final state of its own (not a failure, not counted toward --max_nas_trial or
                 --max_failed_nas_trial, never run); `reward` is the penalty the controller was
                 told (nascli/search/reward.py: over_target_penalty; with --objectives a list),
                 `latency_device` the prediction's source (nascli/latency_source.py)
With early stopping (nascli/search/scheduler.py), a trial trains in rungs, one attempt each:
  started        {trial_id, attempt, rung}: the rung the attempt trains to (0: the first)
  rung           {trial_id, rung, step, reward, metrics}: the attempt trained to `step` and
                 reported; metrics as `completed`'s plus step, resumed_from (the checkpoint
                 step it started from), wall_s (the attempt's). The trial is `paused` until:
  promoted       {trial_id, rung}: the scheduler lets it go on; it is pending again, for its
                 next rung, from its checkpoint at `step`
  stopped        {trial_id, rung, step, reward, metrics, reason}: the scheduler stopped it, a
                 final state (not a failure), with its last rung's reward and metrics
  The last rung ends as `completed` (its metrics with rung, step, resumed_from).
  early_stopping {name, why}: what `--early_stopping auto` (recorded as `auto` in the
                 settings) decided for this job, journaled once, before its first trial
On a Ray cluster (`nascli search`) the events that end an attempt (completed, failed, lost,
rung; a `failed` event's `lost`) carry `node` {node_id, host, ip}: where it ran, when known.
Informational here (the controller reads the first, nascli/search/warm_start.py and resume.py
write them):
  warm_start     {job_dir, history: [{trial_id, dna, reward}], fingerprint}: --warm_start_from's
                 pairs, journaled once before the first proposal; not trials of this job
  measured       {trial_id, latency_ms, predicted_ms, latency_device, spread, noisy}: with
                 --latency_model, an exported best trial timed for real on the model's runtime
  resumed_from   {previous_job_dir, previous_events, previous_trials}: `search_resume` copied
                 the previous job's events (and trial folders) before this one
Events of other kinds are kept in the log and ignored by `replay`, so newer writers can add
informational events without breaking older readers.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping

from nascli.errors import InputError

# A trial's statuses are those of its job_status.json, defined there once; the journal adds
# `pending` (proposed, or due to run again). Early stopping: `paused` awaits the scheduler's
# decision on a rung report, `stopped` is the scheduler's final stop.
# pylint: disable=unused-import
from tf_vision.job_status import COMPLETED
from tf_vision.job_status import FAILED
from tf_vision.job_status import FAILED_WITH_NAN
from tf_vision.job_status import INFEASIBLE
from tf_vision.job_status import INTERRUPTED
from tf_vision.job_status import PAUSED
from tf_vision.job_status import RUNNING
from tf_vision.job_status import STOPPED
# pylint: enable=unused-import

PENDING = 'pending'
# Predicted over the hard latency target before it trained (`over_target` event): never run.
OVER_TARGET = 'over_target'
FAILED_STATUSES = (FAILED, FAILED_WITH_NAN, INFEASIBLE)
# The final states of trials that were trained: what --max_nas_trial counts.
TRAINED_FINAL_STATUSES = (COMPLETED, STOPPED) + FAILED_STATUSES
FINAL_STATUSES = TRAINED_FINAL_STATUSES + (OVER_TARGET,)
UNFINISHED_STATUSES = (PENDING, RUNNING, INTERRUPTED)

# What a trial measures: the metrics of its `completed` (and `rung`) event, beside the reward.
MEASURED = ('accuracy', 'latency_ms', 'flops', 'params', 'seconds')

# Event kinds that change a trial's state; any other kind (but search_started) is informational.
_TRIAL_EVENTS = ('proposed', 'started', 'completed', 'failed', 'lost', 'interrupted', 'rung',
                 'promoted', 'stopped', 'over_target')


@dataclasses.dataclass(frozen=True)
class Proposal:
  """One architecture the controller proposed: the trial's identity."""
  trial_id: str
  dna: tuple[int | float, ...]
  nas_params: dict[str, Any]
  seed: int | None = None  # its run's seed, where the controller gave one (else --seed)


@dataclasses.dataclass
class JobState:
  """What the journal says about the search; every dict is keyed by trial_id."""

  settings: dict[str, Any] | None = None
  fingerprint: str | None = None
  started: str | None = None  # when the search began (its search_started event's time)
  proposals: dict[str, Proposal] = dataclasses.field(default_factory=dict)  # Proposal order.
  status: dict[str, str] = dataclasses.field(default_factory=dict)
  rewards: dict[str, float] = dataclasses.field(default_factory=dict)
  # A multi-objective search journals a list reward: its sign-adjusted objective values (larger
  # is better in each); `rewards` then holds the first of them.
  reward_vectors: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
  metrics: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
  attempts: dict[str, int] = dataclasses.field(default_factory=dict)  # Last attempt started.
  reasons: dict[str, str] = dataclasses.field(default_factory=dict)  # Why a trial failed.
  started_time: dict[str, str] = dataclasses.field(default_factory=dict)  # Of the last attempt.
  finished_time: dict[str, str] = dataclasses.field(default_factory=dict)
  # Trials in the order they reached a final state (completed or failed*); a retried trial
  # appears at the place of its latest outcome.
  completion_order: list[str] = dataclasses.field(default_factory=list)
  losses: dict[str, int] = dataclasses.field(default_factory=dict)  # Attempts lost to infra.
  # Early stopping: each trial's rung reports in order, {rung, step, reward, metrics, seq}; the
  # next attempt of a trial trains to rung len(rungs[trial]).
  rungs: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
  # The scheduler `--early_stopping auto` chose (its `early_stopping` event); None: not auto,
  # or not decided yet.
  early_stopping: str | None = None
  # Where each attempt of a trial ran on a Ray cluster, in order: {attempt, node_id, host, ip,
  # ended (the event that ended it)}; attempts with no `node` (local, or unknown) are absent.
  nodes: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
  # `measured` events: exported trials of a search with a latency model, timed on its runtime
  # (nascli/search/measured.py): {latency_ms, predicted_ms, latency_device, spread, noisy}.
  measured: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
  last_seq: int = 0

  def trial_ids(self, *statuses: str) -> list[str]:
    """Trials in proposal order, only those in `statuses` when given."""
    return [t for t in self.proposals if not statuses or self.status[t] in statuses]

  def unfinished(self) -> list[str]:
    """Pending, running and interrupted trials: what a resumed search runs (again) first,
    same DNA."""
    return self.trial_ids(*UNFINISHED_STATUSES)

  def dnas(self) -> set[tuple[int | float, ...]]:
    """Every proposed architecture: a resumed search must not propose these again."""
    return {p.dna for p in self.proposals.values()}

  def next_trial_id(self) -> str:
    return str(max((int(t) for t in self.proposals if t.isdigit()), default=0) + 1)

  def trained_count(self) -> int:
    """The proposals that were (or are to be) trained: what --max_nas_trial counts. A proposal
    predicted over the hard latency target (`over_target`) is never trained and not counted."""
    return sum(1 for s in self.status.values() if s != OVER_TARGET)

  def over_target_run(self) -> list[str]:
    """The latest proposals, in proposal order, that were all over the target: the run of
    `over_target` trials at the end (empty when the last proposal is to be trained)."""
    run = []
    for trial_id in reversed(self.proposals):
      if self.status[trial_id] != OVER_TARGET:
        break
      run.append(trial_id)
    return run[::-1]

  def best(self) -> str | None:
    """The completed trial with the highest reward (the earliest on a tie); of a
    multi-objective search, the lexicographic best of the reward vectors: the trial of the
    front that is best in the first objective."""
    done = self.trial_ids(COMPLETED)
    return max(done, key=lambda t: self.reward_vectors.get(t, (self.rewards[t],))) if done else None

  def apply(self, event: Mapping[str, Any]) -> None:
    """Applies one journal event, enforcing legal trial transitions (see `replay`).

    Raises:
      InputError: the event breaks the rules (names its seq).
    """
    kind, seq = event.get('event'), event.get('seq', '?')
    self.last_seq = event.get('seq', self.last_seq)

    def bad(problem: str) -> InputError:
      return InputError(f'journal event seq {seq} ({kind}) {problem}; pass --overwrite to '
                        f'start over')

    if kind == 'search_started':
      if self.settings is not None:
        raise bad('repeats search_started')
      self.settings = dict(event.get('settings') or {})
      self.fingerprint = event.get('fingerprint')
      self.started = event.get('time') if isinstance(event.get('time'), str) else None
      return
    if kind == 'early_stopping' and isinstance(event.get('name'), str):
      self.early_stopping = event['name']
      return
    if kind == 'measured' and isinstance(event.get('trial_id'), str) and _numeric(
        event.get('latency_ms')):  # informational: an exported trial timed for real
      self.measured[event['trial_id']] = {k: event.get(k) for k in (
          'latency_ms', 'predicted_ms', 'latency_device', 'spread', 'noisy')}
      return
    if kind not in _TRIAL_EVENTS:
      return  # Informational events from newer writers.
    if self.settings is None:
      raise bad('comes before search_started')
    trial = event.get('trial_id')
    if not isinstance(trial, str):
      raise bad(f'has no string trial_id (got {trial!r})')
    if kind == 'proposed':
      if trial in self.proposals:
        raise bad(f'proposes trial {trial} a second time')
      dna = event.get('dna')
      if not isinstance(dna, list):
        raise bad(f'has no dna list for trial {trial}')
      seed = event.get('seed')
      if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise bad(f'has seed {seed!r} for trial {trial}, not an integer')
      self.proposals[trial] = Proposal(trial, tuple(dna), dict(event.get('nas_params') or {}),
                                       seed)
      self.status[trial] = PENDING
      self.attempts[trial] = 0
      return
    if trial not in self.proposals:
      raise bad(f'names trial {trial}, which was never proposed')
    self._note_node(event, trial)
    current = self.status[trial]
    if current == OVER_TARGET:
      raise bad(f'changes trial {trial}, which was over the latency target and never runs')
    if kind == 'over_target':
      self._apply_over_target(event, trial, bad)
      return
    if current == COMPLETED:
      raise bad(f'changes trial {trial}, which already completed')
    if current == STOPPED:
      raise bad(f'changes trial {trial}, which the scheduler stopped')
    if kind in ('rung', 'promoted', 'stopped') or current == PAUSED:
      self._apply_rung(event, trial, bad)
      if kind != 'stopped':
        return
    elif kind == 'started':
      next_rung = len(self.rungs.get(trial, []))
      if event.get('rung', next_rung) != next_rung:
        raise bad(f'starts rung {event["rung"]!r} of trial {trial}, whose next rung is'
                  f' {next_rung}')
    if kind == 'lost':
      if current != RUNNING:
        raise bad(f'loses trial {trial}, which is not running')
      self.status[trial] = PENDING
      self.losses[trial] = self.losses.get(trial, 0) + 1
      self.reasons[trial] = str(event.get('reason', ''))
      return
    if kind == 'interrupted':
      if current != RUNNING:
        raise bad(f'interrupts trial {trial}, which is not running')
      self.status[trial] = INTERRUPTED
      self.finished_time[trial] = event.get('time')  # the attempt's end, not the trial's
      return
    if kind == 'started':
      self.status[trial] = RUNNING
      self.attempts[trial] = int(event.get('attempt', self.attempts[trial] + 1))
      self.started_time[trial] = event.get('time')
      return
    if kind == 'stopped':
      pass  # _apply_rung set its state; it is final, as below
    elif kind == 'completed':
      reward = event.get('reward')
      vector = None
      if isinstance(reward, list) and reward and all(_numeric(r) for r in reward):
        vector = tuple(float(r) for r in reward)
        reward = reward[0]
      if not _numeric(reward):
        raise bad(f'has no numeric reward for trial {trial} (got {reward!r})')
      if vector is not None:
        self.reward_vectors[trial] = vector
      self.status[trial] = COMPLETED
      self.rewards[trial] = float(reward)
      self.metrics[trial] = dict(event.get('metrics') or {})
      self.reasons.pop(trial, None)
    else:  # failed
      status = event.get('status', FAILED)
      if status not in FAILED_STATUSES:
        raise bad(f'has status {status!r} (expected one of {", ".join(FAILED_STATUSES)})')
      if event.get('lost') is not None:  # its last attempt was lost, with no retry left
        if current != RUNNING:
          raise bad(f'loses trial {trial}, which is not running')
        self.losses[trial] = self.losses.get(trial, 0) + 1
      self.status[trial] = status
      self.reasons[trial] = str(event.get('reason', ''))
    self.finished_time[trial] = event.get('time')
    if trial in self.completion_order:
      self.completion_order.remove(trial)
    self.completion_order.append(trial)

  def _apply_over_target(self, event: Mapping[str, Any], trial: str,
                         bad: Callable[[str], InputError]) -> None:
    """pending (just proposed, never started) -> over_target, final: the predicted latency and
    its source as the trial's metrics, the penalty the controller was told as its reward."""
    if self.status[trial] != PENDING or self.attempts.get(trial):
      raise bad(f'puts trial {trial} over the latency target after it was started')
    reward, latency = event.get('reward'), event.get('latency_ms')
    vector = None
    if isinstance(reward, list) and reward and all(_numeric(r) for r in reward):
      vector = tuple(float(r) for r in reward)
      reward = reward[0]
    if not _numeric(reward) or not _numeric(latency):
      raise bad(f'has no numeric reward and latency_ms for trial {trial}')
    if vector is not None:
      self.reward_vectors[trial] = vector
    self.status[trial] = OVER_TARGET
    self.rewards[trial] = float(reward)
    self.metrics[trial] = {'latency_ms': float(latency)}
    if isinstance(event.get('latency_device'), Mapping):
      self.metrics[trial]['latency_device'] = dict(event['latency_device'])
    target, margin = event.get('target_ms'), event.get('margin') or 0
    self.reasons[trial] = (f'predicted {latency:.4g} ms, over the target {target:g} ms'
                           + (f' + {margin:.0%}' if margin else '') + ': not trained'
                           if _numeric(target) and _numeric(margin) else 'over the target')
    self.finished_time[trial] = event.get('time')
    self.completion_order.append(trial)

  def _note_node(self, event: Mapping[str, Any], trial: str) -> None:
    node = event.get('node')
    if not isinstance(node, Mapping) and isinstance(event.get('lost'), Mapping):
      node = event['lost'].get('node')  # the last loss, folded into `failed`
    if isinstance(node, Mapping):
      self.nodes.setdefault(trial, []).append(
          {'attempt': self.attempts.get(trial, 0), 'ended': event.get('event'),
           **{k: str(node[k]) for k in ('node_id', 'host', 'ip') if k in node}})

  def _apply_rung(self, event: Mapping[str, Any], trial: str,
                  bad: Callable[[str], InputError]) -> None:
    """A rung report or the scheduler's decision on it (nascli/search/scheduler.py): running ->
    paused (rung) -> pending (promoted, for the next rung) | stopped (final)."""
    kind, current = event.get('event'), self.status[trial]
    reported = self.rungs.get(trial, [])
    if kind == 'rung':
      if current != RUNNING:
        raise bad(f'reports a rung of trial {trial}, which is not running')
      if event.get('rung') != len(reported):
        raise bad(f'reports rung {event.get("rung")!r} of trial {trial}, whose next rung is'
                  f' {len(reported)}')
      if not _numeric(event.get('reward')) or not isinstance(event.get('step'), int):
        raise bad(f'has no numeric reward and step for trial {trial}')
      self.rungs.setdefault(trial, []).append(
          {'rung': event['rung'], 'step': event['step'], 'reward': float(event['reward']),
           'metrics': dict(event.get('metrics') or {}), 'seq': event.get('seq')})
      self.status[trial] = PAUSED
      self.finished_time[trial] = event.get('time')  # the attempt's end, not the trial's
      return
    if current != PAUSED:
      raise bad(f'decides on trial {trial}, which has no rung report awaiting a decision')
    if kind not in ('promoted', 'stopped'):
      raise bad(f'comes while trial {trial} awaits the scheduler\'s decision on rung'
                f' {reported[-1]["rung"]}')
    last = reported[-1]
    if event.get('rung') != last['rung']:
      raise bad(f'decides on rung {event.get("rung")!r} of trial {trial}, which reported rung'
                f' {last["rung"]}')
    if kind == 'promoted':
      self.status[trial] = PENDING
      return
    reward = event.get('reward', last['reward'])
    if not _numeric(reward):
      raise bad(f'has no numeric reward for trial {trial} (got {reward!r})')
    self.status[trial] = STOPPED
    self.rewards[trial] = float(reward)
    self.metrics[trial] = dict(event.get('metrics') or last['metrics'])
    self.reasons[trial] = str(event.get('reason', ''))


def replay(events: Iterable[Mapping[str, Any]]) -> JobState:
  """Reduces journal events to the job's state, enforcing legal trial transitions.

  pending -> running (started) -> completed | failed* | pending (lost) | interrupted; a
  failed, interrupted or still running (the driver was killed) trial may start again (a
  retry); a completed trial is final. With early stopping, running -> paused (rung) -> pending
  (promoted) | stopped, which is final too. With a latency model, pending (never started) ->
  over_target, final.

  Raises:
    InputError: an event breaks the rules (names its seq).
  """
  state = JobState()
  for event in events:
    state.apply(event)
  return state


def _numeric(value: Any) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)
