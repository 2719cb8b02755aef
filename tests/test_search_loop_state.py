"""The search loop's bookkeeping, driven without TensorFlow or workers: a toy pyglove space,
random search, and an executor whose attempts end at their first poll with a given outcome.

Issue 25: item 3 (a trial never runs past --max_trial_retries, even when an older driver was
killed between `lost` and `failed`) and the loop's incremental state (no replay of the
journal per turn)."""

import json
import os

import pyglove as pg
import pytest

from nascli.search import executors
from nascli.search import journal as journal_lib
from nascli.search import scheduler as scheduler_lib
from nascli.search import attempts
from nascli.search import live_view
from nascli.search import search_loop
from nascli.search import writers
from nascli.search import workspace
from nascli.search.controller import Controller
from tf_vision import job_status

SPACE = pg.Dict(width=pg.oneof([8, 16, 32, 64]), kernel=pg.oneof([3, 5, 7]))


class _Executor(executors.Executor):
  """Attempts that end at their first poll: completed with a reward, or lost with their worker
  (`lost`: trial ids). `started` lists the trials of the attempts started, in order."""

  def __init__(self, lost=()):
    self.lost, self.started = set(lost), []

  def slots(self, max_parallel):
    return [None] * max_parallel

  def start(self, spec_path, trial_dir, slot, publish_to=None):
    self.started.append(os.path.basename(trial_dir))
    return trial_dir

  def poll(self, handle):
    trial_id = os.path.basename(handle)
    if trial_id in self.lost:
      return executors.Outcome(lost='worker died')
    reward = int(trial_id) / 10
    with open(os.path.join(handle, 'model_analysis.json'), 'w', encoding='utf-8') as f:
      json.dump({'reward': reward, 'accuracy': reward, 'latency_ms': 1.0}, f)
    job_status.write(handle, 'completed')
    return executors.Outcome(returncode=0)


def _loop(job_dir, executor, **args):
  """A SearchLoop as __init__ and _load_space leave it, for the toy space (no preflight, no
  workers, no TensorFlow)."""
  loop = search_loop.SearchLoop.__new__(search_loop.SearchLoop)
  loop.args = search_loop.SearchArgs(job_dir=str(job_dir), search_algorithm='random', **args)
  loop.executor, loop.objectives, loop.num_objectives = executor, None, 1
  loop.scheduler = scheduler_lib.make(loop.args.scheduler)
  loop.max_failed = search_loop.max_failed(loop.args)
  loop.journal = journal_lib.journal_for(str(job_dir))
  loop.workspace = workspace.for_job_dir(str(job_dir))
  loop.work_dir = str(job_dir)
  loop.space, loop.space_name, loop.metric, loop.decision_domains = SPACE, 'toy', 'accuracy', {}
  loop._running, loop._ctl, loop._slots = {}, None, {}  # pylint: disable=protected-access
  loop.outputs = writers.Outputs(str(job_dir), {})
  loop._progress = live_view.Progress(loop)  # pylint: disable=protected-access
  return loop


def _search(loop):
  with loop.journal.open_for_writing():
    return loop._search()  # pylint: disable=protected-access


def _kinds(job_dir, trial_id):
  return [e['event'] for e in journal_lib.Journal.in_dir(job_dir).events()
          if e.get('trial_id') == trial_id]


def test_the_loss_that_spends_the_retries_is_one_failed_event(tmp_path):
  """No kill can fall between the last loss and the failure: they are one event."""
  job = tmp_path / 'job'
  executor = _Executor(lost={'1'})
  state, _ = _search(_loop(job, executor, max_nas_trial=1, max_trial_retries=1))
  assert executor.started == ['1', '1']
  assert _kinds(job, '1') == ['proposed', 'started', 'lost', 'started', 'failed']
  failed = journal_lib.Journal.in_dir(job).events()[-1]
  assert failed['lost'] == {'attempt': 2, 'reason': 'worker died'}
  assert failed['reason'] == 'lost 2 attempts (--max_trial_retries 1): worker died'
  assert state.status['1'] == 'failed' and state.losses['1'] == 2
  assert journal_lib.replay(journal_lib.Journal.in_dir(job).events()) == state


def _killed_after_lost(job_dir, losses):
  """A journal an older driver left: trial 1 lost `losses` attempts, the last with no retry
  left, and the driver was killed before it journaled `failed`."""
  loop = _loop(job_dir, None)
  journal_lib.check_settings(job_dir, loop.args.settings(), overwrite=False,
                             mutable_keys=search_loop.MUTABLE)
  dna, nas_params = Controller(SPACE, 'random', loop.args.seed).propose_new(set())
  j = journal_lib.Journal.in_dir(job_dir)
  with j.open_for_writing():
    j.append({'event': 'proposed', 'trial_id': '1', 'dna': list(dna), 'nas_params': nas_params})
    for attempt in range(1, losses + 1):
      j.append({'event': 'started', 'trial_id': '1', 'attempt': attempt})
      j.append({'event': 'lost', 'trial_id': '1', 'attempt': attempt, 'reason': 'node died'})
  assert journal_lib.replay(j.events()).status['1'] == 'pending'


def test_a_resume_does_not_retry_a_trial_past_its_retries(tmp_path):
  job = tmp_path / 'job'
  _killed_after_lost(job, losses=3)
  executor = _Executor()
  state, _ = _search(_loop(job, executor, max_nas_trial=2, max_trial_retries=2))
  assert executor.started == ['2']  # not trial 1 a fourth time
  assert state.status == {'1': 'failed', '2': 'completed'}
  assert state.reasons['1'] == 'lost 3 attempts (--max_trial_retries 2): node died'
  assert state.losses['1'] == 3 and state.attempts['1'] == 3


def test_a_resume_with_more_retries_runs_the_trial_again(tmp_path):
  job = tmp_path / 'job'
  _killed_after_lost(job, losses=3)
  executor = _Executor()
  state, _ = _search(_loop(job, executor, max_nas_trial=1, max_trial_retries=3))
  assert executor.started == ['1']
  assert state.status['1'] == 'completed' and state.attempts['1'] == 4


@pytest.mark.parametrize('trials', [2, 6])
def test_the_loop_keeps_its_state_without_replaying_the_journal(trials, tmp_path, monkeypatch):
  """The journal is read, and replayed, a fixed number of times whatever the number of trials;
  the state the loop kept equals the replay of what it wrote."""
  calls = {'events': 0, 'replay': 0}
  real_events, real_replay = journal_lib.Journal.events, journal_lib.replay

  def events(self):
    calls['events'] += 1
    return real_events(self)

  def replay(all_events):
    calls['replay'] += 1
    return real_replay(all_events)

  monkeypatch.setattr(journal_lib.Journal, 'events', events)
  monkeypatch.setattr(journal_lib, 'replay', replay)
  job = tmp_path / 'job'
  state, stop_reason = _search(_loop(job, _Executor(), max_nas_trial=trials,
                                     max_parallel_nas_trial=2))
  assert stop_reason is None and state.trial_ids('completed') == [str(t) for t in
                                                                  range(1, trials + 1)]
  # check_settings reads it once, the loop once for its controller and once for its state.
  assert calls == {'events': 3, 'replay': 1}
  assert real_replay(real_events(journal_lib.Journal.in_dir(job))) == state


def test_an_attempt_takes_its_trials_last_slot_when_it_is_free():
  """A promoted trial goes back to the slot (warm worker) that ran its last rung, where it may
  be kept in memory, whenever that slot is free; else to the first free slot."""
  free = [0, 1, 2]
  assert attempts.take_slot(free, 2) == 2 and free == [0, 1]
  assert attempts.take_slot(free, 2) == 0 and free == [1]  # busy: the first free
  assert attempts.take_slot(free) == 1 and free == []
  free = [None, None]  # Ray tasks: slots without identity
  assert attempts.take_slot(free, None) is None and free == [None]


@pytest.mark.parametrize('began_with, overwrite, settled', [
    (None, False, 'none'),  # began without early stopping (before auto, or with none)
    ({'name': 'auto', 'min_steps': None, 'reduction_factor': 3}, False, 'auto'),
    (None, True, 'auto'),  # --overwrite starts a new job: auto decides afresh
])
def test_auto_on_a_job_that_began_without_early_stopping_stays_without(tmp_path, began_with,
                                                                        overwrite, settled):
  settings = {'search_space': 'toy'}
  if began_with:
    settings['scheduler'] = began_with
  journal = journal_lib.journal_for(str(tmp_path))
  with journal.open_for_writing():
    journal.append({'event': 'search_started', 'settings': settings})
  args = search_loop.SearchArgs(job_dir=str(tmp_path), overwrite=overwrite,
                                scheduler=scheduler_lib.SchedulerSettings('auto'))
  search_loop.settle_auto(args)
  assert args.scheduler.name == settled
  fresh = search_loop.SearchArgs(job_dir=str(tmp_path / 'new'),
                                 scheduler=scheduler_lib.SchedulerSettings('auto'))
  search_loop.settle_auto(fresh)  # no journal yet
  assert fresh.scheduler.name == 'auto'
