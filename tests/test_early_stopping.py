"""Early stopping: the schedulers' decisions (each checked against Ray Tune's own scheduler,
tests/test_scheduler_oracle.py), their journal events, the compute spent, the outputs that show
stopped trials, the controller's feedback for them, and one real ASHA search killed between a
report and its decision, then resumed.
"""

import dataclasses
import glob
import json
import os
import signal
import struct
import subprocess
import sys

import pytest

from conftest import journal_events
from nascli.app import main
from nascli.errors import InputError
from nascli.errors import NascliError
from nascli.search import journal as journal_lib
from nascli.search import results
from nascli.search import scheduler as scheduler_lib
from nascli.search.journal import Journal
from nascli.search.scheduler import Report
from nascli.search.scheduler import SchedulerSettings


def _scheduler(name, eta=3):
  return scheduler_lib.make(SchedulerSettings(name=name, min_steps=10, reduction_factor=eta))


def _decisions(scheduler, sequence):
  """Decisions on (trial, rung, reward) reports, each judged on the reports before it; checked
  equal to Ray Tune's own scheduler's on the same reports."""
  from test_scheduler_oracle import ray_decisions  # pylint: disable=g-import-not-at-top
  eta = scheduler.settings.reduction_factor
  events = [{'event': 'rung', 'trial_id': t, 'rung': rung, 'step': 10 * eta**rung,
             'reward': reward, 'seq': seq} for seq, (t, rung, reward) in enumerate(sequence, 1)]
  reports = scheduler_lib.reports(events)
  ours = [scheduler_lib.decide(scheduler, reports, r) for r in reports]
  if scheduler.early_stopping:
    ray = ray_decisions(events, scheduler.settings.name, 10, eta, 10 * eta**3)
    assert ours == [ray[(r.trial_id, r.rung)] for r in reports]
  return ours


def test_rungs_are_min_steps_times_eta_powers_below_the_budget_then_the_budget():
  assert scheduler_lib.rung_steps(10, 3, 100) == [10, 30, 90, 100]
  assert scheduler_lib.rung_steps(10, 3, 90) == [10, 30, 90]
  assert scheduler_lib.rung_steps(10, 2, 20) == [10, 20]
  assert scheduler_lib.rung_steps(50, 3, 20) == [20]  # one rung: the whole budget
  assert scheduler_lib.rung_steps(None, 3, 100) == [12, 36, 100]  # ceil(100 / 9) = 12
  assert scheduler_lib.rung_steps(None, 3, 90) == [10, 30, 90]
  with pytest.raises(ValueError):
    scheduler_lib.rung_steps(10, 1, 100)


def test_asha_goes_on_from_the_quantile_of_the_rungs_earlier_rewards():
  """Ray Tune's cutoff: numpy's (1 - 1/eta) percentile of the others' rewards at the rung so
  far; below it, the trial stops."""
  asha = _scheduler('asha', eta=3)
  sequence = [('1', 0, 0.5),  # first at the rung: on
              ('2', 0, 0.4),  # cutoff 0.5: stop
              ('3', 0, 0.3),  # cutoff 0.4667 (2/3 of the way from 0.4 to 0.5): stop
              ('1', 1, 0.55),  # first at rung 1: on
              ('4', 0, 0.9),  # cutoff 0.4333 (1/3 of the way from 0.4 to 0.5): on
              ('5', 0, 0.6),  # cutoff 0.5 (the 2/3 point of 0.3, 0.4, 0.5, 0.9): on
              ('2', 1, 0.45), ('4', 1, 0.95),  # rung 1: cutoffs 0.55 (stop), 0.5167 (on)
              ('6', 0, 0.6),  # cutoff 0.5667: on
              ('7', 0, 0.6)]  # cutoff 0.6 (tied with 5 and 6): ties go on
  assert _decisions(asha, sequence) == [True, False, False, True, True, True, False, True,
                                        True, True]
  eta2 = _scheduler('asha', eta=2)  # the median of the earlier rewards
  assert _decisions(eta2, [('1', 0, 0.5), ('2', 0, 0.4), ('3', 0, 0.6), ('4', 0, 0.55)]) == [
      True, False, True, True]
  # Exact fractions: the median of 0.15 and 0.45 is 0.3 to the last bit (numpy's
  # interpolation; a naive one gives 0.30000000000000004 and stopped trial 3). A NaN reward is
  # left out of the cutoffs and goes on itself (NaN < cutoff is false), as in Ray.
  assert _decisions(eta2, [('1', 0, 0.15), ('2', 0, 0.45), ('3', 0, 0.3),
                           ('4', 0, float('nan')), ('5', 0, 0.25)]) == [True] * 4 + [False]


def test_a_decision_depends_only_on_the_reports_before_it():
  asha = _scheduler('asha')
  reports = [Report(str(i), 0, 10, r, i) for i, r in enumerate([0.5, 0.4, 0.3, 0.9, 0.2], 1)]
  for k, report in enumerate(reports):
    assert (scheduler_lib.decide(asha, reports, report)
            == scheduler_lib.decide(asha, reports[:k + 1], report))
  # Trial 3 (0.3) is below the cutoff of 0.5 and 0.4; trial 4's later 0.9 does not enter.
  assert scheduler_lib.decide(asha, reports, reports[2]) is False


def test_median_stops_below_the_median_of_the_others_running_averages_after_grace():
  median = _scheduler('median')
  # Fewer than 3 others at the rung: on, however bad.
  assert _decisions(median, [('1', 0, 0.5), ('2', 0, 0.4), ('3', 0, 0.1)]) == [True] * 3
  assert _decisions(median, [('1', 0, 0.5), ('2', 0, 0.4), ('3', 0, 0.3),
                             ('4', 0, 0.35),  # median of 0.5, 0.4, 0.3 is 0.4: stop
                             ('5', 0, 0.45)]) == [True, True, True, False, True]
  # Rung 1: others' running averages (mean of rungs 0 and 1) are 0.45, 0.35 and 0.2 (median
  # 0.35); trial 4 goes on on its best so far, its rung-0 0.36 (its rung-1 reward is 0.3).
  # Trial 5 then meets 0.45, 0.35, 0.2 and trial 4's 0.33: median 0.34.
  sequence = [('1', 0, 0.4), ('2', 0, 0.3), ('3', 0, 0.1), ('4', 0, 0.36),
              ('1', 1, 0.5), ('2', 1, 0.4), ('3', 1, 0.3), ('4', 1, 0.3), ('5', 1, 0.33)]
  assert _decisions(median, sequence)[-2:] == [True, False]
  # A NaN running average is left out (trial 4 meets two others, too few); a NaN best is
  # stopped (trial 6 meets 0.5, 0.4, 0.3, 0.35: median 0.375), as in Ray.
  nan = float('nan')
  assert _decisions(median, [('1', 0, nan), ('2', 0, 0.5), ('3', 0, 0.4), ('4', 0, 0.3),
                             ('5', 0, 0.35), ('6', 0, nan)]) == [True] * 4 + [False, False]


def test_none_never_stops_and_has_no_rungs():
  none = _scheduler('none')
  assert not none.early_stopping and not SchedulerSettings().early_stopping
  assert _decisions(none, [('1', 0, 0.9), ('2', 0, 0.0), ('3', 0, -1.0)]) == [True] * 3
  assert scheduler_lib.known_schedulers() == ['none', 'median', 'asha', 'asha_promotions']


@pytest.mark.parametrize('args, message', [
    (('ash', None, None), "unknown --early_stopping 'ash' (did you mean 'asha'?); known: auto,"
                          " none, median, asha, asha_promotions"),
    (('none', 5, None), '--min_steps is an option of --early_stopping auto, median, asha or'
                        ' asha_promotions, not none'),
    (('none', None, 2), '--reduction_factor is an option of --early_stopping auto, median, asha'),
    (('auto', 0, None), '--min_steps must be at least 1, got 0'),
    (('median', 0, None), '--min_steps must be at least 1, got 0'),
    (('asha', 5, 1), '--reduction_factor must be at least 2, got 1'),
])
def test_bad_early_stopping_settings_name_the_flag(args, message):
  with pytest.raises(NascliError, match='^' + message.replace('(', r'\(').replace(')', r'\)')
                     .replace('?', r'\?')):
    scheduler_lib.check(*args)
  with pytest.raises(NascliError, match='does not combine with --objectives'):
    scheduler_lib.check('asha', 5, 3, multi_objective=True)
  scheduler_lib.check('auto', 5, 3, multi_objective=True)  # auto is none with --objectives


def test_bad_early_stopping_flags_are_refused_before_any_framework_loads(tmp_path):
  from test_search_flags import _refusals  # pylint: disable=g-import-not-at-top
  job = str(tmp_path / 'job')
  cases = [(['--early_stopping', 'ash'], "unknown --early_stopping 'ash'"),
           (['--early_stopping', 'none', '--min_steps', '5'],
            '--min_steps is an option of --early_stopping'),
           (['--early_stopping', 'median', '--min_steps', '5', '--reduction_factor', '1'],
            '--reduction_factor must be at least 2, got 1')]
  argvs = [[command, '--local_output_dir', job, *flags] for command in ('search_in_local',
                                                                      'search')
           for flags, _ in cases]
  gcs = ['search', '--local_output_dir', 'gs://bucket/job', '--early_stopping', 'asha',
         '--min_steps', '5']
  got, imported = _refusals(argvs + [gcs])
  assert imported == []
  assert got.pop()[2].startswith('Error: --early_stopping asha with a gs:// --local_output_dir'
                                 ' on Ray: a promoted trial could not continue')
  for (flags, expected), (code, stdout, stderr) in zip(cases * 2, got):
    usage = expected.startswith('unknown --')  # a bad choice: a usage error
    assert (code, stdout, stderr.count('\n')) == (2 if usage else 1, '', 1), (flags, stderr)
    assert stderr.startswith(f'Error: {expected}'), (flags, stderr)
  assert not os.path.exists(job)


# --------------------------------------------------------------------------- the journal

ARCH = {'blocks[0].kernel_size': '0/2 (3)'}
METRICS = {'accuracy': 0.25, 'latency_ms': 2.0, 'flops': 1000, 'params': 100, 'seconds': 1.5,
           'wall_s': 3.0, 'accuracy_metric': 'accuracy'}
SETTINGS = {'search_space': 'mnasnet',
            'scheduler': {'name': 'asha', 'min_steps': 10, 'reduction_factor': 3}}


def _rung(trial, rung, step, reward, resumed_from=0):
  return {'event': 'rung', 'trial_id': trial, 'rung': rung, 'step': step, 'reward': reward,
          'metrics': dict(METRICS, accuracy=reward, rung=rung, step=step,
                          resumed_from=resumed_from)}


def _job_events():
  """Trial 1 promoted at rung 0 then completed; 2 stopped at rung 0; 3 reported, undecided."""
  events = [{'event': 'search_started', 'settings': SETTINGS, 'fingerprint': 'f'}]
  for t in '123':
    events.append({'event': 'proposed', 'trial_id': t, 'dna': [int(t)], 'nas_params': ARCH})
  events += [
      {'event': 'started', 'trial_id': '1', 'attempt': 1, 'rung': 0}, _rung('1', 0, 10, 0.3),
      {'event': 'promoted', 'trial_id': '1', 'rung': 0},
      {'event': 'started', 'trial_id': '1', 'attempt': 2, 'rung': 1},
      {'event': 'completed', 'trial_id': '1', 'reward': 0.6,
       'metrics': dict(METRICS, accuracy=0.6, rung=1, step=30, resumed_from=10)},
      {'event': 'started', 'trial_id': '2', 'attempt': 1, 'rung': 0}, _rung('2', 0, 10, 0.2),
      {'event': 'stopped', 'trial_id': '2', 'rung': 0, 'step': 10, 'reward': 0.2,
       'metrics': _rung('2', 0, 10, 0.2)['metrics'], 'reason': 'asha'},
      {'event': 'started', 'trial_id': '3', 'attempt': 1, 'rung': 0}, _rung('3', 0, 10, 0.1)]
  return [dict(e, seq=i) for i, e in enumerate(events, 1)]


def test_replay_follows_rungs_promotions_and_stops():
  state = journal_lib.replay(_job_events())
  assert state.status == {'1': 'completed', '2': 'stopped', '3': 'paused'}
  assert [r['step'] for r in state.rungs['1']] == [10]
  assert state.rewards['2'] == 0.2 and state.metrics['2']['step'] == 10
  assert state.reasons['2'] == 'asha'
  assert state.completion_order == ['1', '2']
  # Stopped is final, and no failure; a paused trial is neither final nor to be re-run.
  assert 'stopped' in journal_lib.FINAL_STATUSES
  assert 'stopped' not in journal_lib.FAILED_STATUSES
  assert state.unfinished() == [] and state.best() == '1'


@pytest.mark.parametrize('event, problem', [
    ({'event': 'started', 'trial_id': '2', 'attempt': 2}, 'which the scheduler stopped'),
    ({'event': 'started', 'trial_id': '3', 'attempt': 2}, "awaits the scheduler's decision"),
    ({'event': 'promoted', 'trial_id': '3', 'rung': 1}, 'decides on rung 1 of trial 3'),
    (_rung('3', 0, 10, 0.1), 'reports a rung of trial 3, which is not running'),
])
def test_replay_refuses_illegal_rung_transitions(event, problem):
  with pytest.raises(InputError, match=problem):
    journal_lib.replay(_job_events() + [dict(event, seq=99)])


def test_replay_refuses_a_started_event_for_the_wrong_rung():
  events = _job_events()[:5] + [{'seq': 6, 'event': 'started', 'trial_id': '1', 'attempt': 1,
                                 'rung': 1}]
  with pytest.raises(InputError, match='starts rung 1 of trial 1, whose next rung is 0'):
    journal_lib.replay(events)
  decided = _job_events()[:7] + [{'seq': 8, 'event': 'promoted', 'trial_id': '1', 'rung': 0}]
  with pytest.raises(InputError, match='which has no rung report awaiting a decision'):
    journal_lib.replay(decided)


def test_owed_decisions_are_made_from_the_reports_before_them():
  events = _job_events()
  asha = _scheduler('asha', eta=2)
  # Trial 3's 0.1 is the 3rd of the 3 rung-0 results (0.3, 0.2, 0.1): stopped, whatever the
  # reports after it (none here) say.
  assert scheduler_lib.owed(asha, events) == [(Report('3', 0, 10, 0.1, events[-1]['seq']), False)]
  journaled = scheduler_lib.journaled_decisions(events)
  assert journaled == {('1', 0): True, ('2', 0): False}
  assert scheduler_lib.replayed_decisions(asha, events) == {**journaled, ('3', 0): False}


def test_compute_spent_sums_the_recorded_attempts():
  spent = scheduler_lib.compute_spent(_job_events())
  assert spent == {'1': {'steps': 30, 'wall_s': 6.0}, '2': {'steps': 10, 'wall_s': 3.0},
                   '3': {'steps': 10, 'wall_s': 3.0}}
  plain = [{'event': 'completed', 'trial_id': '1', 'reward': 1.0, 'metrics': {'wall_s': 4.0}}]
  assert scheduler_lib.compute_spent(plain) == {'1': {'steps': None, 'wall_s': 4.0}}
  assert scheduler_lib.compute_spent(plain, train_steps=100) == {'1': {'steps': 100,
                                                                       'wall_s': 4.0}}


def test_compute_spent_counts_the_checkpointed_work_of_interrupted_and_lost_attempts():
  """An attempt that ends without an outcome (interrupted, lost) trained up to the checkpoint
  it left: those steps count, once, whether its event names the checkpoint or the next attempt
  shows it by resuming from there."""
  def promoted(trial):
    return {'event': 'promoted', 'trial_id': trial, 'rung': 0}

  def completed(trial, resumed_from):
    return {'event': 'completed', 'trial_id': trial, 'reward': 0.6,
            'metrics': dict(METRICS, rung=1, step=30, resumed_from=resumed_from)}

  events = [
      # Trial 1: rung 0 (0-10); its rung-1 attempt lost after a checkpoint at 15 (its event
      # names none); the next one resumed from 15 to 30: 10 + 5 + 15.
      _rung('1', 0, 10, 0.3), promoted('1'), {'event': 'lost', 'trial_id': '1', 'attempt': 2},
      completed('1', 15),
      # Trial 2: interrupted with a checkpoint at 20, not resumed (yet): 10 + 10.
      _rung('2', 0, 10, 0.3), promoted('2'),
      {'event': 'interrupted', 'trial_id': '2', 'attempt': 2, 'step': 20},
      # Trial 3: interrupted at 15, then resumed from there: 10 + 5 + 15, the 5 counted once.
      _rung('3', 0, 10, 0.3), promoted('3'),
      {'event': 'interrupted', 'trial_id': '3', 'attempt': 2, 'step': 15}, completed('3', 15),
      # Trial 4: its checkpoint gone, trained again from 0: 10 + 30.
      _rung('4', 0, 10, 0.3), promoted('4'), completed('4', 0),
      # Trial 5: its last retry lost after a checkpoint at 25, one `failed` event: 10 + 15.
      _rung('5', 0, 10, 0.3), promoted('5'),
      {'event': 'failed', 'trial_id': '5', 'status': 'failed', 'reason': 'lost',
       'lost': {'attempt': 2, 'reason': 'worker died', 'step': 25}}]
  spent = scheduler_lib.compute_spent(events)
  assert {t: s['steps'] for t, s in spent.items()} == {'1': 30, '2': 20, '3': 30, '4': 40,
                                                       '5': 25}
  assert spent['2']['wall_s'] == 3.0  # the rung's attempt only: an interrupted one has none
  # Without early stopping: the completed attempt trained from its trial's checkpoint.
  plain = [{'event': 'interrupted', 'trial_id': '1', 'attempt': 1, 'step': 10},
           {'event': 'completed', 'trial_id': '1', 'reward': 1.0, 'metrics': {'wall_s': 4.0}}]
  assert scheduler_lib.compute_spent(plain, train_steps=100) == {'1': {'steps': 100,
                                                                       'wall_s': 4.0}}
  assert scheduler_lib.compute_spent(plain) == {'1': {'steps': None, 'wall_s': 4.0}}


class _Controller:
  def __init__(self):
    self.feedbacks = []

  def feedback(self, dna, reward):
    self.feedbacks.append((tuple(dna), reward))


def test_a_resumed_driver_decides_what_a_killed_one_left_undecided(tmp_path):
  """The rung report of trial 3 has no decision: the resumed driver stops it, records the
  stop in its trial dir and feeds the last rung's reward to the controller, once."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import search_loop
  from nascli.search import workspace
  from tf_vision import job_status
  job = tmp_path / 'job'
  journal = Journal.in_dir(job)
  with journal.open_for_writing():
    for event in _job_events():
      journal.append({k: v for k, v in event.items() if k != 'seq'})
    job_status.write(str(job / '3'), 'paused', step=10, reward=0.1, rung=0, final=False)
    loop = search_loop.SearchLoop.__new__(search_loop.SearchLoop)  # no frameworks, no workers
    loop.args = search_loop.SearchArgs(job_dir=str(job), scheduler=SchedulerSettings(
        'asha', min_steps=10, reduction_factor=2))
    loop.scheduler = scheduler_lib.make(loop.args.scheduler)
    loop.journal, loop.work_dir = journal, str(job)
    loop.workspace = workspace.for_job_dir(str(job))
    ctl = _Controller()
    assert loop._decide_owed(ctl) == 1  # pylint: disable=protected-access
    assert loop._decide_owed(ctl) == 0  # pylint: disable=protected-access
  events = journal.events()
  assert events[-1]['event'] == 'stopped' and events[-1]['trial_id'] == '3'
  assert events[-1]['metrics'] == _rung('3', 0, 10, 0.1)['metrics']
  assert ctl.feedbacks == [((3,), 0.1)]
  status = job_status.read(str(job / '3'))
  assert (status['status'], status['step'], status['rung']) == ('stopped', 10, 0)
  assert 'final' not in status and 'asha' in status['reason']
  assert journal_lib.replay(events).status['3'] == 'stopped'


def test_controller_feedback_of_stopped_trials_replays_exactly():
  """A toy ASHA search with regularized evolution: stopped trials feed their last rung's
  reward back where the journal records `stopped`; a controller rebuilt from any prefix of
  the journal continues exactly as the uninterrupted one."""
  # pylint: disable=g-import-not-at-top
  from test_search_controller import EVOLUTION, SPACE, start_events
  from nascli.search.controller import Controller
  asha = _scheduler('asha', eta=2)

  def reward(dna, rung):
    return round(dna[0] * 0.1 + dna[1] * 0.03 - sum(dna[2:]) * 0.02 + 0.05 * rung, 6)

  def step(ctl, events):
    state = journal_lib.replay(events)
    paused = state.trial_ids('paused')
    if paused:
      every = scheduler_lib.reports(events)
      report = [r for r in every if r.trial_id == paused[0]][-1]
      if scheduler_lib.decide(asha, every, report):
        return {'event': 'promoted', 'trial_id': report.trial_id, 'rung': report.rung}
      ctl.feedback(state.proposals[report.trial_id].dna, report.reward)
      return {'event': 'stopped', 'trial_id': report.trial_id, 'rung': report.rung,
              'step': report.step, 'reward': report.reward, 'metrics': {}}
    pending = state.trial_ids('pending')
    if pending:
      trial, dna = pending[0], state.proposals[pending[0]].dna
      rung = len(state.rungs.get(trial, []))
      if rung == 1:  # the last rung
        ctl.feedback(dna, reward(dna, 1))
        return {'event': 'completed', 'trial_id': trial, 'reward': reward(dna, 1),
                'metrics': {}, 'start_rung': 1}
      return {'event': 'rung', 'trial_id': trial, 'rung': 0, 'step': 10,
              'reward': reward(dna, 0), 'metrics': {}, 'start_rung': 0}
    if len(state.proposals) >= 16:
      return None
    dna, nas_params = ctl.propose_new(state.dnas())
    return {'event': 'proposed', 'trial_id': state.next_trial_id(), 'dna': list(dna),
            'nas_params': nas_params}

  def run(ctl, events):
    events = list(events)
    while (event := step(ctl, events)) is not None:
      rung = event.pop('start_rung', None)
      if rung is not None:  # an attempt: started, then its report
        events.append({'seq': len(events) + 1, 'event': 'started',
                       'trial_id': event['trial_id'], 'attempt': rung + 1, 'rung': rung})
      events.append({'seq': len(events) + 1, **event})
    return events

  algorithm = 'regularized_evolution'
  full = run(Controller(SPACE, algorithm, 5, **EVOLUTION), start_events(algorithm))
  kinds = [e['event'] for e in full]
  assert kinds.count('stopped') >= 3 and kinds.count('completed') >= 3, kinds
  cuts = [i for i, k in enumerate(kinds, 1) if k in ('stopped', 'rung')][::3]
  for k in cuts:
    resumed = Controller.rebuild(SPACE, algorithm, 5, full[:k], **EVOLUTION)
    assert run(resumed, full[:k]) == full, f'interrupted after {k} events'


# --------------------------------------------------------------------------- outputs


def _write_job(job_dir):
  journal = Journal.in_dir(job_dir)
  with journal.open_for_writing():
    for event in _job_events():
      journal.append({k: v for k, v in event.items() if k != 'seq'})
  return journal_lib.replay(journal.events())


def test_stopped_trials_show_in_tables_plot_and_hparams_with_their_last_rung(tmp_path):
  # pylint: disable=g-import-not-at-top
  from tensorboard.compat.proto import event_pb2
  from tensorboard.plugins.hparams import metadata
  from nascli.search import outputs
  job_dir = tmp_path / 'job'
  state = _write_job(job_dir)
  rows = outputs.write_all(job_dir, state, {'blocks[0].kernel_size': [3, 5]})
  assert list(rows[0])[:3] == ['trial_id', 'status', 'step']
  by_id = {r['trial_id']: r for r in rows}
  assert (by_id['2']['status'], by_id['2']['step'], by_id['2']['reward']) == ('stopped', 10, 0.2)
  assert by_id['2']['accuracy'] == 0.2 and by_id['2']['latency_ms'] == 2.0
  assert (by_id['1']['status'], by_id['1']['step']) == ('completed', 30)
  assert by_id['3']['status'] == 'paused' and by_id['3']['reward'] is None
  # The better (0.2 > nothing) stopped trial ranks after every completed one.
  assert [r['trial_id'] for r in results.sort_by_reward(rows)] == ['1', '2', '3']
  with open(job_dir / 'trials.csv', encoding='utf-8') as f:
    header, _, second = f.read().splitlines()[:3]
  assert header.startswith('trial_id,status,step,reward,')
  assert second.startswith('2,stopped,10,0.2,')
  assert json.loads((job_dir / 'trials.json').read_text()) == rows
  assert (job_dir / 'search_progress.png').stat().st_size > 1000
  runs = sorted(os.listdir(job_dir / 'hparams'))
  assert [r for r in runs if r.startswith('trial-')] == ['trial-0001', 'trial-0002']

  def values(directory):
    """Summary values of the event files (TFRecords read here: TensorBoard's own loader
    imports TensorFlow, 20 s)."""
    out = {}
    for path in glob.glob(os.path.join(directory, '*tfevents*')):
      data, at = (open(path, 'rb').read(), 0)  # pylint: disable=consider-using-with
      while at < len(data):
        (length,) = struct.unpack('<Q', data[at:at + 8])
        event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
        out.update({v.tag: v for v in event.summary.value})
        at += 12 + length + 4
    return out

  config = metadata.parse_experiment_plugin_data(
      values(job_dir / 'hparams')['_hparams_/experiment'].metadata.plugin_data.content)
  status_info = [h for h in config.hparam_infos if h.name == 'status'][0]
  assert [v.string_value for v in status_info.domain_discrete.values] == ['completed', 'stopped']
  assert [m.name.tag for m in config.metric_infos] == ['reward', 'accuracy', 'latency_ms', 'step']
  stopped = values(job_dir / 'hparams' / 'trial-0002')
  start = metadata.parse_session_start_info_plugin_data(
      stopped['_hparams_/session_start_info'].metadata.plugin_data.content)
  assert start.hparams['status'].string_value == 'stopped'
  assert list(stopped['step'].tensor.float_val) == [10.0]
  assert list(stopped['reward'].tensor.float_val) == [pytest.approx(0.2)]


def test_list_trials_shows_and_filters_stopped_trials(tmp_path, capsys):
  job_dir = tmp_path / 'job'
  _write_job(job_dir)
  assert main(['list_trials', str(job_dir), '--status', 'stopped', '--json']) == 0
  [row] = json.loads(capsys.readouterr().out)
  assert (row['trial_id'], row['status'], row['step'], row['reward']) == ('2', 'stopped', 10, 0.2)
  assert main(['list_trials', str(job_dir)]) == 0
  out = capsys.readouterr().out
  assert f'{job_dir}: 1 completed, 1 stopped, 1 paused' in out
  header = next(l for l in out.splitlines() if 'trial_id' in l)
  assert [c.strip() for c in header.strip('┃ ').split('┃')][:4] == [
      'trial_id', 'status', 'step', 'reward']
  line = next(l for l in out.splitlines() if l.strip('│ ').startswith('2 '))
  assert [c.strip() for c in line.strip('│ ').split('│')][:4] == ['2', 'stopped', '10', '0.2000']


# --------------------------------------------------------------------------- a real search

SHORT = "trainer.train_steps=20,trainer.steps_per_loop=10,trainer.checkpoint_interval=10"


# The driver of the first run, with a fault injected from the test's side: it dies (SIGKILL)
# as the scheduler is about to decide trial 2's first rung report, so its journal ends with
# that `rung` event and no decision (the point where a kill has to be handled).
_KILLED_BEFORE_A_DECISION = """
import os, signal, sys
from nascli import app
from nascli.search import scheduler
should_continue = scheduler.Asha.should_continue
def dies_first(self, report, history):
  if report.trial_id == os.environ['KILL_AT_TRIAL']:
    os.kill(os.getpid(), signal.SIGKILL)
  return should_continue(self, report, history)
scheduler.Asha.should_continue = dies_first
sys.argv[0] = 'nascli'
app.run()
"""


def _steps(path):
  with open(path, encoding='utf-8') as f:
    return [json.loads(line)['step'] for line in f if line.strip()]


# Slow tier (a 3-trial asha search killed and resumed, 90-130 s): the default tier checks a
# resumed driver's owed decision on a real journal and trial dirs
# (test_a_resumed_driver_decides_what_a_killed_one_left_undecided) and the decisions against
# Ray's own classes (tests/test_scheduler_oracle.py).
@pytest.mark.slow
def test_asha_search_killed_between_a_report_and_its_decision_resumes_with_ray_s_decisions(
    tmp_path_factory):
  """ASHA (eta 2, rungs at 10 and 20 steps) over 3 trials on the embedded digits. The driver is
  SIGKILLed after journaling trial 2's rung-0 report, before its decision; the same command
  finishes the search: exactly 3 trials, each final; the owed decision made once, on resume;
  every decision the one Ray Tune's ASHAScheduler makes on the journal's reports; promoted
  trials continue from their checkpoint (no recorded step trained twice); stopped trials are
  recorded with their last rung's metrics.

  About 80 s on a 2-core CPU: two driver start-ups (TensorFlow in the driver and its warm
  worker, about 20 s each) and five or six rung attempts; one search covers what two would.
  """
  from test_scheduler_oracle import ray_decisions  # pylint: disable=g-import-not-at-top
  cache = str(tmp_path_factory.mktemp('nascli_cache'))
  job = tmp_path_factory.mktemp('asha') / 'job'
  flags = ['search_in_local', '--prebuilt_search_space', 'mnasnet', '--local_output_dir',
           str(job), '--seed', '7', '--max_nas_trial', '3', '--early_stopping', 'asha',
           '--min_steps', '10', '--reduction_factor', '2', '--export_top_k', '0',
           '--search_docker_flags', f'params_override={SHORT}']
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', NASCLI_CACHE_DIR=cache)
  log = job.parent / 'killed.log'
  with open(log, 'w', encoding='utf-8') as f:
    killed = subprocess.run([sys.executable, '-c', _KILLED_BEFORE_A_DECISION, *flags],
                            env=dict(env, KILL_AT_TRIAL='2'), stdout=subprocess.DEVNULL,
                            stderr=f, timeout=600, check=False)
  assert killed.returncode == -signal.SIGKILL, log.read_text()[-2000:]
  before = journal_events(job)
  assert (before[-1]['event'], before[-1]['trial_id'], before[-1]['rung']) == ('rung', '2', 0)
  assert ('2', 0) not in scheduler_lib.journaled_decisions(before)

  resumed = subprocess.run([sys.executable, '-m', 'nascli', *flags, '--json'], env=env,
                           capture_output=True, text=True, timeout=600, check=False)
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  events = journal_events(job)
  assert events[:len(before)] == before
  state = journal_lib.replay(events)
  assert list(state.proposals) == ['1', '2', '3']
  assert all(state.status[t] in ('completed', 'stopped') for t in state.proposals), state.status
  # The owed decision is made once, before any attempt of the resumed run starts.
  later = [(e['event'], e.get('trial_id')) for e in events[len(before):]
           if e['event'] in ('started', 'promoted', 'stopped')]
  assert later[0] in (('promoted', '2'), ('stopped', '2')), later
  assert later.count(later[0]) == 1
  decisions = scheduler_lib.journaled_decisions(events)
  reports = [(r.trial_id, r.rung, r.reward) for r in scheduler_lib.reports(events)]
  assert decisions == ray_decisions(events, 'asha', 10, 2, 20), reports
  assert decisions[('1', 0)] is True  # the first result of a rung always goes on
  stopped = state.trial_ids('stopped')
  assert stopped == sorted(t for (t, _), on in decisions.items() if not on), reports

  started = [(e['trial_id'], e['attempt'], e.get('rung')) for e in events
             if e['event'] == 'started']
  assert started[:3] == [('1', 1, 0), ('1', 2, 1), ('2', 1, 0)]
  spent = scheduler_lib.compute_spent(events)
  for trial in state.trial_ids('completed'):
    rung_steps = [r['step'] for r in state.rungs[trial]] + [state.metrics[trial]['step']]
    assert rung_steps == [10, 20]
    assert state.metrics[trial]['resumed_from'] == 10  # from its rung-0 checkpoint
    assert spent[trial]['steps'] == 20  # no recorded step trained twice
    logged = _steps(job / trial / 'train_metrics.jsonl')
    assert logged == sorted(set(logged)) and logged[-1] == 20
  rows = {r['trial_id']: r for r in json.loads(resumed.stdout)}
  for trial in stopped:
    last = state.rungs[trial][-1]
    assert (rows[trial]['status'], rows[trial]['step']) == ('stopped', last['step'])
    assert rows[trial]['reward'] == last['reward']
    assert rows[trial]['accuracy'] == last['metrics']['accuracy']
    assert rows[trial]['latency_ms'] == last['metrics']['latency_ms'] > 0
    assert spent[trial]['steps'] == last['step']
    status = json.loads((job / trial / 'job_status.json').read_text())
    assert status['status'] == 'stopped' and status['step'] == last['step']
    analysis = json.loads((job / trial / 'model_analysis.json').read_text())
    assert (analysis['rung'], analysis['step'], analysis['final']) == (last['rung'],
                                                                       last['step'], False)
  # Later rungs reuse the first rung's latency (the reward needs it; training does not change
  # it).
  for trial in state.trial_ids('completed'):
    assert state.metrics[trial]['latency_ms'] == state.rungs[trial][0]['metrics']['latency_ms']


def test_auto_resolves_to_promotions_only_where_rungs_can_rank():
  """`--early_stopping auto` (the default): asha_promotions when the first rung trains at least
  2 epochs or --min_steps is given; none for short rungs, no rung below the budget, unknown
  epochs, or --objectives; any other name as it is."""
  resolve = scheduler_lib.resolve
  auto = SchedulerSettings('auto')
  assert resolve(auto, 810, 45)[0] == SchedulerSettings('asha_promotions')  # rungs 90/270/810
  assert resolve(auto, 810, 46)[0].name == 'none'  # 90 steps: 1.96 epochs
  settings, why = resolve(auto, 810, None)
  assert settings.name == 'none' and 'train 90 steps; the training data does not say its size' in why
  given = SchedulerSettings('auto', min_steps=5, reduction_factor=2)
  assert resolve(given, 100, 44)[0] == SchedulerSettings('asha_promotions', 5, 2)
  assert resolve(SchedulerSettings('auto', min_steps=100), 100, 1)[0].name == 'none'
  settings, why = resolve(given, 100, 44, multi_objective=True)
  assert settings == SchedulerSettings() and '--objectives' in why
  asha = SchedulerSettings('asha', min_steps=10)
  assert resolve(asha, 100, 44) == (asha, None)


# --------------------------------------------------------------------------- few trials


def test_auto_needs_eta_to_the_rungs_trials_so_that_not_one_trial_alone_trains_fully():
  """`auto` with --min_steps (as search_proxy_task recommends) and the default 4 trials: rungs
  at 34 and 100 steps with eta 3 would train 4 // 3 = 1 trial fully and judge 3 at the first
  rung; auto needs 3**2 = 9 trials for that ladder, 3**3 = 27 for three rungs."""
  resolve = scheduler_lib.resolve
  given = SchedulerSettings('auto', min_steps=34)
  settings, why = resolve(given, 100, 10, max_trials=4)
  assert settings == SchedulerSettings()
  assert why == ('early stopping (auto): none (--max_nas_trial 4: rungs at 34, 100 steps with'
                 ' --reduction_factor 3 need at least 9 trials to train 3 to the full budget;'
                 ' with 4, successive halving would train 1 fully and judge the rest at rungs whose'
                 ' ranking is rough; --early_stopping asha_promotions forces rungs)')
  assert resolve(given, 100, 10, max_trials=8)[0].name == 'none'
  assert resolve(given, 100, 10, max_trials=9)[0] == SchedulerSettings('asha_promotions', 34)
  auto = SchedulerSettings('auto')  # rungs 90/270/810, 2 epochs first
  assert resolve(auto, 810, 45, max_trials=26)[0].name == 'none'
  assert resolve(auto, 810, 45, max_trials=27)[0] == SchedulerSettings('asha_promotions')
  # The epochs rule still speaks first; the trial count is not checked when not given.
  assert 'under 2 epochs' in resolve(auto, 810, 46, max_trials=100)[1]
  assert resolve(auto, 810, 45)[0].name == 'asha_promotions'
  assert [scheduler_lib.trials_needed(r, 3) for r in (2, 3)] == [9, 27]
  assert scheduler_lib.trials_needed(2, 2) == 4


def _promotions_run(max_trials, eta, num_rungs, reward, tell=True):
  """A serial asha_promotions search (one worker) on a ladder of `num_rungs` rungs, through
  AshaPromotions.next_job told --max_nas_trial (`tell`) or not: {trial: highest rung}."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import promotion
  scheduler = scheduler_lib.make(SchedulerSettings('asha_promotions', 10, eta))
  train_steps = 10 * eta**(num_rungs - 1)
  reports, promoted, highest, seq = [], set(), {}, 0
  while True:
    finishing = len(highest) >= max_trials
    job = scheduler.next_job(reports, promoted, set(), train_steps, finishing,
                             max_trials=max_trials if tell else None)
    if job.action == promotion.PROMOTE:
      promoted.add((job.trial_id, job.rung - 1))
      trial, rung = job.trial_id, job.rung
    elif not finishing:
      trial, rung = str(len(highest) + 1), 0
    else:
      return highest
    seq += 1
    reports.append(Report(trial, rung, 10 * eta**rung, reward(trial, rung), seq))
    highest[trial] = rung


def _full(highest, num_rungs):
  return sorted(t for t, rung in highest.items() if rung == num_rungs - 1)


def test_a_forced_ladder_with_too_few_trials_trains_eta_fully_and_warns():
  """--early_stopping asha_promotions --min_steps 34 (rungs at 34 and 100 steps) with the
  default 4 trials: before, promotions trained 1 trial fully (2 when a later one outranked it)
  and stopped the rest at the first rung; now, once every trial is proposed, the top eta of
  each rung go on, so 3 are trained fully, and one warning line says how many trials the ladder
  needs and what happens. With enough trials nothing changes."""
  best_first = lambda t, r: 1 - int(t) * 0.1 + r
  worst_first = lambda t, r: int(t) * 0.1 + r
  for reward in (best_first, worst_first):
    assert len(_full(_promotions_run(4, 3, 2, reward), 2)) == 3
    assert len(_full(_promotions_run(4, 3, 3, reward), 3)) == 3  # rungs 10, 30, 90
  assert _full(_promotions_run(4, 3, 2, best_first, tell=False), 2) == ['1']  # the old way
  assert _full(_promotions_run(2, 3, 2, best_first), 2) == ['1', '2']  # all, when fewer
  # Enough trials (9 for 2 rungs): the top third of each rung, as before.
  for reward in (best_first, worst_first):
    assert (_promotions_run(9, 3, 2, reward) == _promotions_run(9, 3, 2, reward, tell=False))
  assert _full(_promotions_run(9, 3, 2, best_first), 2) == ['1', '2', '3']
  forced = SchedulerSettings('asha_promotions', min_steps=34)
  assert scheduler_lib.few_trials(forced, 100, 4) == (
      'warning: --early_stopping asha_promotions with --max_nas_trial 4: its ladder of 2 rungs'
      ' (--reduction_factor 3) needs at least 9 trials to train 3 to the full budget; with 4,'
      ' asha_promotions trains at least 3 of them to the full budget once every trial is'
      ' proposed (the top 3 of each rung go on) and stops at most 1 at rungs of 34 steps'
      ' (--early_stopping none trains every trial fully)')
  assert scheduler_lib.few_trials(forced, 100, 9) is None
  asha = SchedulerSettings('asha', min_steps=10, reduction_factor=2)  # rungs 10, 20, 40
  assert scheduler_lib.few_trials(asha, 40, 3).endswith(
      'needs at least 8 trials to train 2 to the full budget; with 3, each rung judges a trial'
      ' against at most 2 other result(s) (--early_stopping none trains every trial fully)')
  assert scheduler_lib.few_trials(SchedulerSettings('auto', min_steps=34), 100, 4) is None
  assert scheduler_lib.few_trials(SchedulerSettings(), 100, 4) is None


def test_a_resumed_auto_search_keeps_the_choice_its_journal_recorded(tmp_path):
  """--max_nas_trial may change on resume; auto's choice, which depends on it, may not: the
  journal's `early_stopping` event stands, either way."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import search_loop
  from nascli.search import search_args
  job = tmp_path / 'job'
  args = search_loop.SearchArgs(job_dir=str(job), max_nas_trial=30,
                                scheduler=SchedulerSettings('auto', min_steps=34))
  chosen, why = scheduler_lib.resolve(args.scheduler, 100, 10, max_trials=30)
  assert chosen.name == 'asha_promotions'
  as_journaled = search_args.as_journaled
  assert as_journaled(args, chosen, why) == (chosen, why)  # no journal yet
  journal = Journal.in_dir(job)
  with journal.open_for_writing():
    journal.append({'event': 'search_started', 'settings': {}, 'fingerprint': 'f'})
    journal.append({'event': 'early_stopping', 'name': 'none', 'why': 'began with 4 trials'})
  assert as_journaled(args, chosen, why) == (SchedulerSettings(), 'began with 4 trials')
  assert as_journaled(dataclasses.replace(args, overwrite=True), chosen, why) == (chosen, why)
  other = tmp_path / 'other'
  journal = Journal.in_dir(other)
  with journal.open_for_writing():
    journal.append({'event': 'search_started', 'settings': {}, 'fingerprint': 'f'})
    journal.append({'event': 'early_stopping', 'name': 'asha_promotions', 'why': 'began'})
  args = dataclasses.replace(args, job_dir=str(other), max_nas_trial=4)
  none, why = scheduler_lib.resolve(args.scheduler, 100, 10, max_trials=4)
  assert none.name == 'none'
  assert as_journaled(args, none, why) == (
      SchedulerSettings('asha_promotions', min_steps=34), 'began')
  # A scheduler named by the user is no choice of auto's: nothing to keep.
  named = SchedulerSettings('asha', min_steps=34)
  assert as_journaled(dataclasses.replace(args, scheduler=named), named, None) == (named, None)


# --------------------------------------------------------------------------- feedback


def test_stop_rules_feed_every_trial_its_rung_0_reward_as_it_reports(tmp_path):
  """ASHA (eta 2, rungs at 10 and 20 steps): trial 1 reports 0.5 at rung 0 (first: goes on),
  trial 2 0.4 (below the cutoff: stopped). The controller gets 0.5 and 0.4 as they are
  reported, marked `feedback` on the rung events (what a rebuilt controller replays), and
  nothing more at trial 2's `stopped`: rewards at one budget. (Before, trial 1 fed nothing at
  its report and trial 2 its last rung's reward at `stopped`, beside completed trials' full
  rewards.)"""
  # pylint: disable=g-import-not-at-top
  from nascli.search import search_loop
  from nascli.search import attempts
  from nascli.search import workspace
  from tf_vision import job_status
  job = tmp_path / 'job'
  journal = Journal.in_dir(job)
  with journal.open_for_writing():
    journal.append({'event': 'search_started', 'settings': SETTINGS, 'fingerprint': 'f'})
    for t in '12':
      journal.append({'event': 'proposed', 'trial_id': t, 'dna': [int(t)], 'nas_params': ARCH})
      journal.append({'event': 'started', 'trial_id': t, 'attempt': 1, 'rung': 0})
    loop = search_loop.SearchLoop.__new__(search_loop.SearchLoop)  # no frameworks, no workers
    loop.args = search_loop.SearchArgs(job_dir=str(job), scheduler=SchedulerSettings(
        'asha', min_steps=10, reduction_factor=2))
    loop.scheduler = scheduler_lib.make(loop.args.scheduler)
    loop.journal, loop.work_dir, loop.metric = journal, str(job), 'accuracy'
    loop.workspace = workspace.for_job_dir(str(job))
    loop._resync()  # pylint: disable=protected-access
    ctl = _Controller()
    for trial, reward, promoted in (('1', 0.5, True), ('2', 0.4, False)):
      job_status.write(str(job / trial), 'paused', step=10, reward=reward, rung=0, final=False)
      run = attempts.Running(trial, None, None, 0.0)
      analysis = {'rung': 0, 'step': 10, 'reward': reward, 'resumed_from': 0}
      assert loop._rung_reported(run, analysis, ctl) is promoted  # pylint: disable=protected-access
  assert ctl.feedbacks == [((1,), 0.5), ((2,), 0.4)]
  events = journal.events()
  assert [(e['trial_id'], e['reward']) for e in events
          if e['event'] == 'rung' and e.get('feedback')] == [('1', 0.5), ('2', 0.4)]
  assert [e['event'] for e in events[-4:]] == ['rung', 'promoted', 'rung', 'stopped']


def test_auto_with_min_steps_and_too_few_trials_trains_every_trial_fully(tmp_path_factory):
  """The real search: `--min_steps 10 --reduction_factor 2` (rungs at 10 and 20 steps, as a
  search_proxy_task recommendation gives) with 3 trials, under the default `auto`. The ladder
  needs 2**2 = 4 trials, so auto chooses none: every trial trains its 20 steps and the
  controller gets each one's full reward (before, auto chose asha_promotions: one trial trained
  fully, two stopped at step 10). Resumed with --max_nas_trial 4, enough for the ladder, the
  job keeps the none its journal recorded: the 4th trial trains fully too. About 2 minutes on
  one core (two driver start-ups, four 20-step trials)."""
  cache = str(tmp_path_factory.mktemp('nascli_cache'))
  job = tmp_path_factory.mktemp('auto_few') / 'job'
  flags = ['search_in_local', '--prebuilt_search_space', 'mnasnet', '--local_output_dir',
           str(job), '--seed', '3', '--min_steps', '10', '--reduction_factor', '2',
           '--export_top_k', '0', '--search_docker_flags', f'params_override={SHORT}']
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', NASCLI_CACHE_DIR=cache)
  for trials in ('3', '4'):
    run = subprocess.run([sys.executable, '-m', 'nascli', *flags, '--max_nas_trial', trials],
                         env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    if trials == '3':
      assert ('early stopping (auto): none (--max_nas_trial 3: rungs at 10, 20 steps with'
              ' --reduction_factor 2 need at least 4 trials to train 2 to the full budget;'
              ' with 3, successive halving would train 1 fully') in run.stderr
  events = journal_events(job)
  assert [(e['name']) for e in events if e['event'] == 'early_stopping'] == ['none']
  assert not [e for e in events if e['event'] in ('rung', 'stopped', 'promoted')]
  state = journal_lib.replay(events)
  assert state.status == {t: 'completed' for t in '1234'}
  # Each trial's full reward is what the controller is fed (Controller.rebuild: a `completed`
  # event of a trial no rung report fed).
  assert [e['trial_id'] for e in events if e['event'] == 'completed'] == list('1234')
  assert all(isinstance(state.rewards[t], float) for t in '1234')
