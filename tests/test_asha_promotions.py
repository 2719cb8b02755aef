"""--early_stopping asha_promotions in the search driver: the journal it writes, the decisions
(each equal to promotion.next_job on the journal's reports before it), the controller's
first-rung feedback replayed exactly, and one real search SIGKILLed mid-way and resumed.
"""

import json
import os
import signal
import subprocess
import sys

from conftest import journal_events
from nascli.search import journal as journal_lib
from nascli.search import promotion
from nascli.search import scheduler as scheduler_lib
from nascli.search.scheduler import SchedulerSettings

SHORT = 'trainer.train_steps=20,trainer.steps_per_loop=10,trainer.checkpoint_interval=10'


def _promotions(eta=2):
  return scheduler_lib.make(SchedulerSettings('asha_promotions', min_steps=10,
                                              reduction_factor=eta))


def check_jobs_replay(events, scheduler, train_steps, max_trials):
  """Every job the journal shows a free worker taking (a `promoted` event, or a new trial's
  `proposed`) is the one promotion.next_job gives on the reports, promotions and running
  trials journaled before it (finishing once `max_trials` were proposed); returns the jobs in
  order."""
  reports, promoted, running, jobs, proposed = [], set(), set(), [], 0
  for e in events:
    kind, trial = e['event'], e.get('trial_id')
    if kind in ('promoted', 'proposed'):
      job = scheduler.next_job(reports, promoted, running, train_steps,
                               finishing=proposed >= max_trials)
      proposed += kind == 'proposed'
      if kind == 'promoted':
        assert job == promotion.Job(promotion.PROMOTE, trial, e['rung'] + 1), (e, job)
        promoted.add((trial, e['rung']))
      else:
        assert job.action == promotion.NEW, (e, job)
      jobs.append((kind, trial))
    elif kind == 'started':
      running.add(trial)
    elif kind == 'rung':
      reports.extend(scheduler_lib.reports([e]))
      running.discard(trial)
    elif kind in ('completed', 'failed', 'interrupted', 'lost'):
      running.discard(trial)
  return jobs


def test_asha_promotions_decides_nothing_at_a_report_and_owes_nothing_on_resume():
  scheduler = _promotions()
  assert scheduler.early_stopping and not scheduler.decides_at_report
  events = [{'event': 'rung', 'trial_id': '1', 'rung': 0, 'step': 10, 'reward': 0.5, 'seq': 1}]
  assert scheduler_lib.owed(scheduler, events) == []
  assert 'asha_promotions' in scheduler_lib.known_schedulers()
  # The ladder of the search's budget: rungs 10, 20, 40; two results at rung 0 promote one.
  reports = scheduler_lib.reports(events + [
      {'event': 'rung', 'trial_id': '2', 'rung': 0, 'step': 10, 'reward': 0.7, 'seq': 2}])
  assert scheduler.next_job(reports, set(), set(), 40) == promotion.Job(
      promotion.PROMOTE, '2', 1)
  assert scheduler.next_job(reports, {('2', 0)}, set(), 40) == promotion.Job(promotion.NEW)


def test_controller_first_rung_feedback_replays_exactly():
  """A toy promotions search with regularized evolution: every trial's rung-0 reward is fed
  back as it reports (the `rung` event says so), and neither its promotion nor its end feeds
  it again; a controller rebuilt from any prefix of the journal continues exactly."""
  # pylint: disable=g-import-not-at-top
  from test_search_controller import EVOLUTION, SPACE, start_events
  from nascli.search.controller import Controller
  scheduler = _promotions(eta=2)
  max_trials = 16

  def reward(dna, rung):
    return round(dna[0] * 0.1 + dna[1] * 0.03 - sum(dna[2:]) * 0.02 + 0.05 * rung, 6)

  def step(ctl, events):
    state = journal_lib.replay(events)
    pending = state.trial_ids('pending')
    if pending:  # the job just taken: its attempt
      trial, dna = pending[0], state.proposals[pending[0]].dna
      rung = len(state.rungs.get(trial, []))
      if rung == 1:  # the last rung (10, 20 steps)
        return {'event': 'completed', 'trial_id': trial, 'reward': reward(dna, 1),
                'metrics': {}, 'start_rung': 1}
      ctl.feedback(dna, reward(dna, 0))
      return {'event': 'rung', 'trial_id': trial, 'rung': 0, 'step': 10, 'feedback': True,
              'reward': reward(dna, 0), 'metrics': {}, 'start_rung': 0}
    promoted = {(e['trial_id'], e['rung']) for e in events if e['event'] == 'promoted'}
    job = scheduler.next_job(scheduler_lib.reports(events), promoted, set(), 20,
                             finishing=len(state.proposals) >= max_trials)
    if job.action == promotion.PROMOTE:
      return {'event': 'promoted', 'trial_id': job.trial_id, 'rung': job.rung - 1}
    if len(state.proposals) < max_trials:
      dna, nas_params = ctl.propose_new(state.dnas())
      return {'event': 'proposed', 'trial_id': state.next_trial_id(), 'dna': list(dna),
              'nas_params': nas_params}
    paused = state.trial_ids('paused')
    if paused:
      last = state.rungs[paused[0]][-1]
      return {'event': 'stopped', 'trial_id': paused[0], 'rung': 0, 'step': 10,
              'reward': last['reward'], 'metrics': {}}
    return None

  def run(ctl, events):
    events = list(events)
    while (event := step(ctl, events)) is not None:
      rung = event.pop('start_rung', None)
      if rung is not None:
        events.append({'seq': len(events) + 1, 'event': 'started',
                       'trial_id': event['trial_id'], 'attempt': rung + 1, 'rung': rung})
      events.append({'seq': len(events) + 1, **event})
    return events

  algorithm = 'regularized_evolution'
  live = Controller(SPACE, algorithm, 5, **EVOLUTION)
  full = run(live, start_events(algorithm))
  kinds = [e['event'] for e in full]
  assert kinds.count('proposed') == max_trials
  assert 2 <= kinds.count('completed') == kinds.count('promoted'), kinds
  assert kinds.count('stopped') + kinds.count('completed') == max_trials
  # One reward per trial, its rung-0 one (num_feedbacks also counts skipped duplicates).
  assert sum(1 for e in full if e['event'] == 'rung' and e.get('feedback')) == max_trials
  assert len(live._rewards) == max_trials  # pylint: disable=protected-access
  rebuilt = Controller.rebuild(SPACE, algorithm, 5, full, **EVOLUTION)
  assert rebuilt.num_feedbacks == live.num_feedbacks
  cuts = [i for i, k in enumerate(kinds, 1) if k in ('rung', 'promoted', 'completed')][::3]
  for k in cuts:
    resumed = Controller.rebuild(SPACE, algorithm, 5, full[:k], **EVOLUTION)
    assert run(resumed, full[:k]) == full, f'interrupted after {k} events'


# The driver of the first run, with a fault injected from the test's side: it dies (SIGKILL)
# when a free worker asks for its job after the third rung report, so its journal ends with
# that `rung` event and no job taken.
_KILLED_BEFORE_A_JOB = """
import os, signal, sys
from nascli import app
from nascli.search import scheduler
next_job = scheduler.AshaPromotions.next_job
def dies_at(self, reports, promoted, running, train_steps, finishing=False, **options):
  if len(reports) == int(os.environ['KILL_AT_REPORTS']):
    os.kill(os.getpid(), signal.SIGKILL)
  return next_job(self, reports, promoted, running, train_steps, finishing, **options)
scheduler.AshaPromotions.next_job = dies_at
sys.argv[0] = 'nascli'
app.run()
"""


def test_asha_promotions_search_killed_before_a_job_resumes_with_the_same_decisions(
    tmp_path_factory):
  """4 trials on the embedded digits, rungs at 10 and 20 steps (eta 2). The driver is SIGKILLed
  right after the third rung report; the same command finishes the search. Every job a worker
  took is promotion.next_job's on the journal before it, across the kill; the top half of the
  rung-0 results trained to 20 steps from their rung-0 checkpoint (no step twice), the rest are
  stopped at rung 0 with its metrics; the controller got one reward per trial, at rung 0."""
  cache = str(tmp_path_factory.mktemp('nascli_cache'))
  job = tmp_path_factory.mktemp('promotions') / 'job'
  flags = ['search_in_local', '--prebuilt_search_space', 'mnasnet', '--local_output_dir',
           str(job), '--seed', '3', '--max_nas_trial', '4', '--early_stopping',
           'asha_promotions', '--min_steps', '10', '--reduction_factor', '2',
           '--export_top_k', '0', '--search_docker_flags', f'params_override={SHORT}']
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', NASCLI_CACHE_DIR=cache)
  log = job.parent / 'killed.log'
  with open(log, 'w', encoding='utf-8') as f:
    killed = subprocess.run([sys.executable, '-c', _KILLED_BEFORE_A_JOB, *flags],
                            env=dict(env, KILL_AT_REPORTS='3'), stdout=subprocess.DEVNULL,
                            stderr=f, timeout=600, check=False)
  assert killed.returncode == -signal.SIGKILL, log.read_text()[-2000:]
  before = journal_events(job)
  assert before[-1]['event'] == 'rung', before[-1]
  assert len(scheduler_lib.reports(before)) == 3

  resumed = subprocess.run([sys.executable, '-m', 'nascli', *flags, '--json'], env=env,
                           capture_output=True, text=True, timeout=600, check=False)
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  events = journal_events(job)
  assert events[:len(before)] == before
  jobs = check_jobs_replay(events, _promotions(), 20, 4)
  assert [t for kind, t in jobs if kind == 'proposed'] == ['1', '2', '3', '4']
  state = journal_lib.replay(events)
  rung0 = promotion.rung_results(scheduler_lib.reports(events), 0)
  assert len(rung0) == 4
  # With one worker, a report is judged as it arrives: the top floor(n/2) of the n results at
  # rung 0 are promotable at each point, so the trials promoted are those that were, when
  # they were, among the best half; the completed ones are exactly the promoted ones.
  promoted = sorted(t for kind, t in jobs if kind == 'promoted')
  assert promoted == sorted(state.trial_ids('completed')) and 1 <= len(promoted) <= 2
  assert rung0[0].trial_id in promoted  # the best first-rung result always trains on
  stopped = state.trial_ids('stopped')
  assert sorted(stopped + promoted) == ['1', '2', '3', '4']
  spent = scheduler_lib.compute_spent(events)
  for trial in promoted:
    assert [r['step'] for r in state.rungs[trial]] == [10]
    assert state.metrics[trial]['step'] == 20 and state.metrics[trial]['resumed_from'] == 10
    assert spent[trial]['steps'] == 20
    # The one worker keeps its last paused trial in memory (--paused_trials_per_worker 1): a
    # promotion continues there when the trial paused in the same run as it was promoted (the
    # killed driver's workers died with it; which trial's rung-0 result leads, and so whether a
    # promotion comes before the kill, depends on the machine's arithmetic) and no other trial
    # paused since; else from the rung-0 checkpoint.
    seq = {e['seq']: e for e in events}
    paused_at = next(e['seq'] for e in events if e['event'] == 'rung' and e['trial_id'] == trial)
    promoted_at = next(e['seq'] for e in events if e['event'] == 'promoted'
                       and e['trial_id'] == trial)
    others_paused = any(seq[s]['event'] == 'rung' for s in range(paused_at + 1, promoted_at))
    same_run = (paused_at > len(before)) == (promoted_at > len(before))
    assert state.metrics[trial]['in_memory'] == (same_run and not others_paused)
  for trial in stopped:
    last = state.rungs[trial][-1]
    assert state.rewards[trial] == last['reward'] and spent[trial]['steps'] == 10
    assert 'not promoted from rung 0' in state.reasons[trial]
    status = json.loads((job / trial / 'job_status.json').read_text())
    assert (status['status'], status['step']) == ('stopped', 10)
  fed = [e['trial_id'] for e in events if e['event'] == 'rung' and e.get('feedback')]
  assert sorted(fed) == ['1', '2', '3', '4']
  rows = {r['trial_id']: r for r in json.loads(resumed.stdout)}
  assert {t: r['status'] for t, r in rows.items()} == state.status
  # A rerun of the finished job reports it and runs nothing.
  again = subprocess.run([sys.executable, '-m', 'nascli', *flags], env=env,
                         capture_output=True, text=True, timeout=300, check=False)
  assert again.returncode == 0 and 'is finished' in again.stderr, again.stderr[-1000:]
  assert journal_events(job) == events
