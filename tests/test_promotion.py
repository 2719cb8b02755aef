"""Promotion-based ASHA (nascli/search/promotion.py): the paper's `get_job`, decided by hand.

No oracle library: Ray Tune's `AsyncHyperBandScheduler` and Optuna's `SuccessiveHalvingPruner`
are stop rules (decided when a trial reports; Optuna says in its code that it cannot suspend
and resume trials), and Ray's `HyperBandScheduler` is synchronous HyperBand (a bracket halves
when all its trials reach the milestone). None of them implements Algorithm 2 of Li et al.
2020, so the cases below are worked out from the paper, and a random stream checks the
algorithm's invariants instead of an oracle.
"""

import math
import random

import pytest

from nascli.search import promotion
from nascli.search import scheduler as scheduler_lib
from nascli.search.promotion import Job
from nascli.search.scheduler import Report

NEW = Job(promotion.NEW)


def _reports(*rows):
  """Reports from (trial_id, rung, reward) rows, in journal order."""
  return [Report(str(t), rung, 10 * 3**rung, reward, seq)
          for seq, (t, rung, reward) in enumerate(rows, 1)]


def _job(reports, promoted=(), running=(), eta=3, num_rungs=3):
  return promotion.next_job(reports, set(promoted), set(running), eta, num_rungs)


def test_three_results_at_rung_0_promote_the_best_two_promote_none():
  two = _reports((1, 0, 0.5), (2, 0, 0.7))
  assert _job(two) == NEW  # floor(2 / 3) = 0 promotable
  three = _reports((1, 0, 0.5), (2, 0, 0.7), (3, 0, 0.6))
  assert _job(three) == Job(promotion.PROMOTE, '2', 1)


def test_the_first_trial_at_a_rung_waits_where_the_stop_rule_lets_it_go_on():
  # Ray's stop rule (scheduler.Asha) promotes the first report at a rung at once; the paper's
  # rule pauses it until eta results are in.
  first = _reports((1, 0, 0.9))
  asha = scheduler_lib.make(scheduler_lib.SchedulerSettings('asha', 10, 3))
  assert asha.should_continue(first[0], []) is True
  assert _job(first) == NEW


def test_a_promoted_trial_is_not_promoted_twice_and_the_next_best_waits_for_six():
  rows = [(1, 0, 0.5), (2, 0, 0.7), (3, 0, 0.6)]
  assert _job(_reports(*rows), promoted={('2', 0)}) == NEW
  rows += [(4, 0, 0.1), (5, 0, 0.2)]
  assert _job(_reports(*rows), promoted={('2', 0)}) == NEW  # floor(5 / 3) = 1: trial 2 only
  rows += [(6, 0, 0.3)]
  assert _job(_reports(*rows), promoted={('2', 0)}) == Job(promotion.PROMOTE, '3', 1)


def test_a_report_at_a_higher_rung_counts_as_promoted_from_below():
  reports = _reports((1, 0, 0.5), (2, 0, 0.7), (3, 0, 0.6), (2, 1, 0.75))
  assert _job(reports) == NEW  # trial 2 is past rung 0 even though `promoted` forgot it


def test_higher_rungs_are_served_first():
  rows = [(t, 0, r) for t, r in enumerate([0.5, 0.9, 0.8, 0.7, 0.1, 0.2, 0.3, 0.4, 0.6], 1)]
  promoted = {('2', 0), ('3', 0)}  # the top 3 are 2, 3, 4; two of them reached rung 1
  rows += [(2, 1, 0.91), (3, 1, 0.95)]
  assert _job(_reports(*rows), promoted) == Job(promotion.PROMOTE, '4', 1)  # rung 1: 2 < eta
  rows += [(4, 1, 0.85)]
  promoted.add(('4', 0))
  assert _job(_reports(*rows), promoted) == Job(promotion.PROMOTE, '3', 2)
  # Rung 0 has a promotable trial too (12 results: top 4, trial 12 unpromoted), rung 1 wins.
  rows += [(10, 0, 0.05), (11, 0, 0.15), (12, 0, 0.85)]
  assert _job(_reports(*rows), promoted) == Job(promotion.PROMOTE, '3', 2)
  assert _job(_reports(*rows), promoted | {('3', 1)}) == Job(promotion.PROMOTE, '12', 1)


def test_a_trial_at_the_last_rung_is_complete():
  rows = [(t, 0, r) for t, r in enumerate([0.5, 0.9, 0.8, 0.7, 0.1, 0.2], 1)]
  promoted = {('2', 0), ('3', 0)}
  rows += [(2, 1, 0.91), (3, 1, 0.95), (9, 1, 0.2)]  # three results at the last rung (1 of 2)
  assert _job(_reports(*rows), promoted, num_rungs=2) == NEW


def test_running_trials_are_not_promoted():
  reports = _reports((1, 0, 0.5), (2, 0, 0.7), (3, 0, 0.6))
  assert _job(reports, running={'2'}) == NEW


def test_nan_counts_as_a_result_ranks_last_and_is_never_promoted():
  assert _job(_reports((1, 0, math.nan), (2, 0, math.nan), (3, 0, 0.2))) == Job(
      promotion.PROMOTE, '3', 1)
  assert _job(_reports((1, 0, math.nan), (2, 0, math.nan), (3, 0, math.nan))) == NEW
  assert _job(_reports((1, 0, math.nan), (2, 0, 0.1), (3, 0, 0.05))) == Job(
      promotion.PROMOTE, '2', 1)


def test_ties_go_to_the_earlier_report_in_any_input_order():
  reports = _reports((1, 0, 0.3), (2, 0, 0.6), (3, 0, 0.6), (4, 0, 0.6), (5, 0, 0.1),
                     (6, 0, 0.2))
  rng = random.Random(3)
  for _ in range(20):
    shuffled = reports[:]
    rng.shuffle(shuffled)
    assert _job(shuffled) == Job(promotion.PROMOTE, '2', 1)
    assert _job(shuffled, promoted={('2', 0)}) == Job(promotion.PROMOTE, '3', 1)


def test_only_a_trials_first_report_at_a_rung_counts():
  # A retried attempt reports again at the rung: it is not a second result there.
  reports = _reports((1, 0, 0.5), (2, 0, 0.7), (2, 0, 0.7))
  assert _job(reports) == NEW
  # And its first reward there is the one ranked.
  reports = _reports((1, 0, 0.5), (2, 0, 0.7), (2, 0, 0.2), (3, 0, 0.6))
  assert _job(reports) == Job(promotion.PROMOTE, '2', 1)


def test_bad_settings_are_refused():
  with pytest.raises(ValueError, match='reduction_factor 1'):
    promotion.next_job([], set(), set(), 1, 3)
  with pytest.raises(ValueError, match='num_rungs 0'):
    promotion.next_job([], set(), set(), 3, 0)


def test_job_steps_follow_the_schedulers_ladder():
  assert scheduler_lib.rung_steps(90, 3, 800) == [90, 270, 800]
  assert promotion.job_steps(NEW, 90, 3, 800) == (0, 90)
  assert promotion.job_steps(Job(promotion.PROMOTE, '1', 1), 90, 3, 800) == (90, 270)
  assert promotion.job_steps(Job(promotion.PROMOTE, '1', 2), 90, 3, 800) == (270, 800)
  with pytest.raises(ValueError, match='rung 3'):
    promotion.job_steps(Job(promotion.PROMOTE, '1', 3), 90, 3, 800)


def _simulate(rng, eta, num_rungs, workers, num_jobs):
  """An asynchronous search driven by next_job: workers finish in random order, rewards with
  ties and NaN. Yields (reports, promoted, running, job) before each job starts."""
  reports, promoted, running, in_flight, trials = [], set(), set(), [], 0
  for _ in range(num_jobs):
    while len(in_flight) >= workers:  # a random worker finishes its job and reports
      trial_id, rung = in_flight.pop(rng.randrange(len(in_flight)))
      running.discard(trial_id)
      reward = math.nan if rng.random() < 0.1 else rng.randint(0, 10) / 10
      reports.append(Report(trial_id, rung, rung + 1, reward, len(reports) + 1))
    job = promotion.next_job(reports, promoted, running, eta, num_rungs)
    yield reports, promoted, running, job
    if job.action == promotion.NEW:
      trials += 1
      trial_id, rung = str(trials), 0
    else:
      trial_id, rung = job.trial_id, job.rung
      promoted.add((trial_id, rung - 1))
    running.add(trial_id)
    in_flight.append((trial_id, rung))


def test_random_asynchronous_searches_keep_the_papers_invariants_and_replay_the_same():
  # (Not an invariant: at most n/eta promoted from a rung in all. A trial promoted while in the
  # top 1/eta can drop out of it as better results arrive; the paper's "mispromotions".)
  rng = random.Random(20200301)
  promotions = news = 0
  for _ in range(60):
    eta, num_rungs = rng.choice([2, 3, 4]), rng.randint(2, 4)
    for reports, promoted, running, job in _simulate(rng, eta, num_rungs, rng.randint(1, 4),
                                                     rng.randint(20, 80)):
      by_rung = {k: promotion.rung_results(reports, k) for k in range(num_rungs)}
      waiting = {k: [r for r in by_rung[k][:len(by_rung[k]) // eta]
                     if not math.isnan(r.reward) and r.trial_id not in running
                     and (r.trial_id, k) not in promoted] for k in range(num_rungs - 1)}
      if job.action == promotion.PROMOTE:
        promotions += 1
        k = job.rung - 1
        # The highest rung with a promotable trial, and its best one.
        assert waiting[k] and waiting[k][0].trial_id == job.trial_id, (job, waiting)
        assert not any(waiting[j] for j in range(k + 1, num_rungs - 1)), (job, waiting)
      else:
        news += 1
        assert not any(waiting.values()), waiting
      # A resumed driver, reading the same journal in another order, decides the same.
      shuffled = reports[:]
      rng.shuffle(shuffled)
      assert promotion.next_job(shuffled, set(promoted), set(running), eta, num_rungs) == job
  assert promotions > 300 and news > 1000, (promotions, news)


def test_finishing_promotes_a_rungs_best_even_below_eta_results():
  """12 trials, eta 3, rungs 0-3: 4 reach rung 1, 1 reaches rung 2, where the top third of one
  result is empty; once no new trial may start the best there still climbs to the end, and
  nothing else (the other rungs' tops were promoted already)."""
  rows = [(t, 0, 0.1 * t) for t in range(1, 13)]
  rows += [(t, 1, 0.1 * t) for t in (9, 10, 11, 12)] + [(12, 2, 0.99)]
  promoted = {(t, 0) for t in ('9', '10', '11', '12')} | {('12', 1)}
  reports = _reports(*rows)
  assert _job(reports, promoted, num_rungs=4) == NEW
  assert promotion.next_job(reports, promoted, set(), 3, 4, finishing=True) == Job(
      promotion.PROMOTE, '12', 3)
  done = reports + _reports(*rows, (12, 3, 0.995))[-1:]
  assert promotion.next_job(done, promoted | {('12', 2)}, set(), 3, 4, finishing=True) == NEW
  # A lone first result is promoted when finishing, not before.
  one = _reports((1, 0, 0.5))
  assert _job(one) == NEW
  assert promotion.next_job(one, set(), set(), 3, 3, finishing=True) == Job(
      promotion.PROMOTE, '1', 1)
