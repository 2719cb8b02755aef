"""nascli's early-stopping decisions against Ray Tune's own schedulers, the oracle.

`--early_stopping asha` must decide as Ray Tune's `AsyncHyperBandScheduler` (one bracket) and
`median` as its `MedianStoppingRule`, bit for bit: on ties (rewards are often exact fractions
k/N of a validation set, where the last bit of a quantile decides), on NaN rewards, in any order
of reports. Ray's scheduler classes are driven through their public `on_trial_add`,
`on_trial_result` and `on_trial_complete`, with the search's settings mapped as
`ray_scheduler` maps them; no Ray runtime is started (the classes need none).
"""

import json
import math
import random

import pytest

from nascli.search import scheduler as scheduler_lib

ray_schedulers = pytest.importorskip('ray.tune.schedulers')


class _Trial:
  """What Ray's schedulers read of a trial: its id (ASHA's rung records are keyed by it) and its
  identity (the median rule's results are keyed by the trial object)."""

  def __init__(self, trial_id):
    self.trial_id = trial_id


class _TuneController:
  """The median rule asks, with too few samples, for trials waiting to run (to pause this one
  in their favour): none here, so it goes on, as nascli's rule, which never pauses."""

  def get_live_trials(self):
    return []


def ray_scheduler(name, min_steps, reduction_factor, train_steps):
  """Ray's scheduler for a search's --early_stopping settings: time is the training step; the
  grace period the first rung; ASHA's rungs min_steps * eta**k up to max_t = train_steps (a
  result there ends the trial, as nascli's last rung ends it `completed`)."""
  first = scheduler_lib.rung_steps(min_steps, reduction_factor, train_steps)[0]
  if name == 'asha':
    return ray_schedulers.AsyncHyperBandScheduler(
        time_attr='step', metric='reward', mode='max', max_t=train_steps, grace_period=first,
        reduction_factor=reduction_factor, brackets=1, stop_last_trials=True)
  assert name == 'median', name
  return ray_schedulers.MedianStoppingRule(
      time_attr='step', metric='reward', mode='max', grace_period=first,
      min_samples_required=scheduler_lib.MEDIAN_MIN_SAMPLES, min_time_slice=0, hard_stop=True)


def ray_decisions(events, name, min_steps, reduction_factor, train_steps):
  """{(trial_id, rung): promoted?} as Ray's scheduler decides a journal's rung reports, fed in
  journal order (a trial's first `started` adds it, `completed` completes it)."""
  ray = ray_scheduler(name, min_steps, reduction_factor, train_steps)
  controller, trials, decisions = _TuneController(), {}, {}
  for e in events:
    trial_id = str(e.get('trial_id'))
    if e['event'] in ('started', 'rung') and trial_id not in trials:
      trials[trial_id] = _Trial(trial_id)
      ray.on_trial_add(controller, trials[trial_id])
    if e['event'] == 'rung':
      action = ray.on_trial_result(controller, trials[trial_id],
                                   {'step': e['step'], 'reward': e['reward']})
      assert action in (ray_schedulers.TrialScheduler.CONTINUE,
                        ray_schedulers.TrialScheduler.STOP), action
      decisions[(trial_id, e['rung'])] = action == ray_schedulers.TrialScheduler.CONTINUE
    elif e['event'] == 'completed' and trial_id in trials:
      ray.on_trial_complete(controller, trials[trial_id],
                            {'step': train_steps, 'reward': e['reward']})
  return decisions


def _reward_source(rng):
  """A stream's rewards: mostly exact fractions k/N of a small N (many ties, and the values
  where numpy's interpolation and a naive one differ in the last bit), some NaN, a few
  infinities, some arbitrary floats."""
  n = rng.choice([2, 3, 4, 5, 8, 10, 20, 30, 100])
  nan, inf = rng.choice([0.0, 0.05, 0.15, 0.4]), rng.choice([0.0, 0.0, 0.02])

  def reward():
    u = rng.random()
    if u < nan:
      return math.nan
    if u < nan + inf:
      return rng.choice([math.inf, -math.inf])
    return rng.random() if rng.random() < 0.1 else rng.randint(0, n) / n
  return reward


def _stream(rng):
  """A random search: its settings, and its journal's rung and completed events as the driver
  writes them, each rung report followed by the decision both schedulers must agree on."""
  name = rng.choice(['asha', 'median'])
  eta = rng.choice([2, 3, 4])
  min_steps = rng.choice([None, 1, 2, 5, 10])
  rungs = rng.randint(1, 4)  # rungs below the whole budget
  if min_steps is None:  # the first rung at ceil(train_steps / eta**2): two rungs below
    train_steps = rng.randint(eta**2 + 1, 2000)
  else:
    train_steps = rng.randint(min_steps * eta**(rungs - 1) + 1, min_steps * eta**rungs)
  steps = scheduler_lib.rung_steps(min_steps, eta, train_steps)
  assert len(steps) >= 2, (min_steps, eta, train_steps)
  num_trials = rng.randint(3, 25)
  reward = _reward_source(rng)
  return name, eta, min_steps, train_steps, steps, num_trials, reward


# Ray's cutoffs of all-NaN rungs and of infinities warn (numpy); nascli's are silent.
@pytest.mark.filterwarnings('ignore::RuntimeWarning')
def test_decisions_equal_ray_tunes_schedulers_on_random_streams_with_ties_and_nan():
  rng = random.Random(20250105)
  totals = {'reports': 0, 'stopped': 0, 'nan': 0, 'ties': 0, 'asha': 0, 'median': 0}
  while totals['reports'] < 12_000:
    name, eta, min_steps, train_steps, steps, num_trials, reward = _stream(rng)
    settings = scheduler_lib.SchedulerSettings(name, min_steps, eta)
    ours = scheduler_lib.make(settings)
    ray = ray_scheduler(name, min_steps, eta, train_steps)
    controller, trials = _TuneController(), {}
    events, waiting, running = [], [str(i) for i in range(1, num_trials + 1)], {}
    while waiting or running:
      # The next thing that happens: a trial starts, or a running one reports its next rung
      # (trials run in parallel and report in any order).
      if waiting and (not running or rng.random() < 0.3):
        trial_id = waiting.pop(0)
        trials[trial_id] = _Trial(trial_id)
        ray.on_trial_add(controller, trials[trial_id])
        running[trial_id] = 0
        continue
      trial_id = rng.choice(sorted(running))
      rung, value = running[trial_id], reward()
      if rung == len(steps) - 1:  # the whole budget: completed, no decision
        ray.on_trial_complete(controller, trials[trial_id], {'step': train_steps,
                                                             'reward': value})
        events.append({'event': 'completed', 'trial_id': trial_id, 'reward': value})
        del running[trial_id]
        continue
      event = {'event': 'rung', 'trial_id': trial_id, 'rung': rung, 'step': steps[rung],
               'reward': value, 'seq': len(events) + 1}
      events.append(json.loads(json.dumps(event)))  # as the journal's JSON keeps it (NaN too)
      every = scheduler_lib.reports(events)
      go_on = scheduler_lib.decide(ours, every, every[-1])
      action = ray.on_trial_result(controller, trials[trial_id],
                                   {'step': steps[rung], 'reward': value})
      others = [r.reward for r in every[:-1] if r.rung == rung]
      assert go_on == (action == ray_schedulers.TrialScheduler.CONTINUE), (
          f'{name} eta {eta} min_steps {min_steps} train_steps {train_steps}: trial'
          f' {trial_id} rung {rung} reward {value!r}, others at the rung {others!r}:'
          f' nascli {"continues" if go_on else "stops"}, Ray {action}')
      events.append({'event': 'promoted' if go_on else 'stopped', 'trial_id': trial_id,
                     'rung': rung, 'seq': len(events) + 1})
      totals['reports'] += 1
      totals[name] += 1
      totals['stopped'] += not go_on
      totals['nan'] += math.isnan(value)
      totals['ties'] += value in others
      if go_on:
        running[trial_id] += 1
      else:
        del running[trial_id]
    # Decided late (a resumed driver's owed decisions), each is the one made on time.
    journaled = scheduler_lib.journaled_decisions(events)
    assert scheduler_lib.replayed_decisions(ours, events) == journaled
    assert ray_decisions(events, name, min_steps, eta, train_steps) == journaled
  # The streams exercised what they are for.
  assert totals['asha'] > 3000 and totals['median'] > 3000, totals
  assert 0.2 < totals['stopped'] / totals['reports'] < 0.8, totals
  assert totals['nan'] > 500 and totals['ties'] > 2000, totals


@pytest.mark.parametrize('eta, others, reward, goes_on', [
    # The case: a naive interpolation's cutoff is 0.30000000000000004 (stop), numpy's 0.3.
    (2, [0.15, 0.45], 0.3, True),
    (3, [0.15, 0.9], 0.65, False),  # numpy's cutoff is 0.6500000000000001, a naive one 0.65
    (4, [0.1, 0.9], 0.7, True),  # numpy's 0.7, a naive one 0.7000000000000001
])
def test_asha_on_exact_fractions_decides_as_ray_in_the_last_bit(eta, others, reward, goes_on):
  events = [{'event': 'rung', 'trial_id': str(i), 'rung': 0, 'step': 1, 'reward': r, 'seq': i}
            for i, r in enumerate(others + [reward], 1)]
  assert ray_decisions(events, 'asha', 1, eta, 100)[(str(len(events)), 0)] is goes_on
  every = scheduler_lib.reports(events)
  asha = scheduler_lib.make(scheduler_lib.SchedulerSettings('asha', 1, eta))
  assert scheduler_lib.decide(asha, every, every[-1]) is goes_on
