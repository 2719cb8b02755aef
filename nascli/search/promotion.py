"""Promotion-based ASHA: which job a free worker slot runs next (Li et al. 2020, Algorithm 2).

The paper ("A System for Massively Parallel Hyperparameter Tuning", MLSys 2020) defines
asynchronous successive halving by its `get_job`: a trial that finishes rung k *pauses* there
and frees its worker. Whenever a worker is free, the scheduler looks at the rungs from the
highest one below the last down to rung 0, and at each rung k takes the trials in the top
`floor(n_k / eta)` of the `n_k` results reported at rung k; the best of them that was not
promoted from rung k yet is promoted (it resumes from its rung-k checkpoint and trains to rung
k + 1). If no rung has such a trial, a new trial starts at rung 0. A trial that reports at the
last rung is complete. (A report adds at most one promotable trial and a free worker takes one,
so in steady running at most one waits; the order of the rungs decides when several workers
are free at once: at the start, or on resume.)

How it differs from `scheduler.Asha` (Ray Tune's `AsyncHyperBandScheduler`, a *stop* rule): Ray
decides at once, when a trial reports, from the results reported at that rung before it; the
first trial at a rung always goes on, and with few results the quantile cutoff lets many go on.
Here nothing is decided at report time: with eta = 3 no trial leaves rung 0 until 3 results are
there, and then only the best one; a trial left behind early may still be promoted later, once
enough weaker results arrive below it (the paper's answer to the stop rule's "first ones win").
Optuna's `SuccessiveHalvingPruner` is a stop rule too (its own comment: Optuna cannot suspend
and resume trials, so the first eta - 1 trials at a rung go on when they are the best so far).

Everything is a pure function of the rung reports and of which trials were promoted or are
running, all of which the journal holds, so a search resumed after SIGKILL makes the same
decisions as the one that was killed. Ties are broken by reward (higher first), then by journal
order (the earlier report first). A NaN reward counts as a result at its rung (a trial that was
trained there and diverged, ranked below every number) and is never promoted. Only a trial's
first report at a rung counts (as in `scheduler.Asha`). No framework import: the CLI's flag
checks and the benchmarks use this module without TensorFlow, pyglove or Ray.
"""

import math
from typing import AbstractSet, NamedTuple, Sequence

from nascli.search.rungs import Report
from nascli.search.rungs import rung_steps

PROMOTE = 'promote'
NEW = 'new'


class Job(NamedTuple):
  """What a free worker does: PROMOTE `trial_id` (train it from rung `rung - 1` to `rung`), or
  start a NEW trial (to rung 0)."""
  action: str
  trial_id: str | None = None
  rung: int = 0


def _rank_key(report: Report) -> tuple[int, float, int]:
  """Sort key: real rewards first, higher first; then the earlier report (journal order)."""
  if math.isnan(report.reward):
    return (1, 0.0, report.seq)
  return (0, -report.reward, report.seq)


def rung_results(reports: Sequence[Report], rung: int) -> list[Report]:
  """Each trial's first report at `rung`, best first (ties: journal order)."""
  first: dict[str, Report] = {}
  for r in sorted(reports, key=lambda r: r.seq):
    if r.rung == rung:
      first.setdefault(r.trial_id, r)
  return sorted(first.values(), key=_rank_key)


def next_job(reports: Sequence[Report], promoted: AbstractSet[tuple[str, int]],
             running: AbstractSet[str], reduction_factor: int, num_rungs: int,
             finishing: bool = False, finishing_top: int = 1) -> Job:
  """The job for a free worker: the paper's `get_job`.

  Args:
    reports: the rung reports so far (any order; `seq` is their journal order).
    promoted: (trial_id, rung) pairs already promoted *from* that rung. A trial that reported
      at a higher rung counts as promoted from the rungs below, whatever this set says.
    running: trials training now (never promoted: they are not paused at a rung).
    reduction_factor: eta; the top floor(n / eta) of n results at a rung are promotable.
    num_rungs: the rungs of the ladder (`len(rung_steps(...))`); the last one completes a trial.
    finishing: no new trial may start (a search of a fixed number of trials has proposed them
      all): a rung's promotable top is then at least its best result, so that the search does
      not end with no trial trained to the full budget (12 trials with eta 3 leave one result at
      the third rung, whose top third is empty); synchronous successive halving likewise always
      trains its last survivor to the end.
    finishing_top: with `finishing`, a rung's promotable top is at least this many of its
      results (all of them when fewer): scheduler.AshaPromotions passes eta when the search has
      fewer trials than its ladder needs (scheduler.trials_needed), so that eta trials, not
      one, reach the full budget.

  Returns:
    Job(PROMOTE, trial_id, k + 1) for the best unpromoted trial in the top 1/eta of the highest
    rung k that has one, else Job(NEW).

  Raises:
    ValueError: reduction_factor < 2 or num_rungs < 1.
  """
  if reduction_factor < 2 or num_rungs < 1:
    raise ValueError(f'reduction_factor {reduction_factor} must be >= 2 and num_rungs'
                     f' {num_rungs} >= 1')
  highest: dict[str, int] = {}
  for r in reports:
    highest[r.trial_id] = max(highest.get(r.trial_id, -1), r.rung)
  for rung in range(num_rungs - 2, -1, -1):
    results = rung_results(reports, rung)
    top = len(results) // reduction_factor
    if finishing and results:
      top = max(top, min(max(finishing_top, 1), len(results)))
    for r in results[:top]:
      if math.isnan(r.reward) or r.trial_id in running:
        continue
      if (r.trial_id, rung) in promoted or highest[r.trial_id] > rung:
        continue
      return Job(PROMOTE, r.trial_id, rung + 1)
  return Job(NEW)


def job_steps(job: Job, min_steps: int | None, reduction_factor: int, train_steps: int
              ) -> tuple[int, int]:
  """(from, to): the steps a job trains, on the ladder `scheduler.rung_steps` gives; a promoted
  trial resumes from its checkpoint at the rung below."""
  steps = rung_steps(min_steps, reduction_factor, train_steps)
  if job.action == NEW:
    return 0, steps[0]
  if not 1 <= job.rung < len(steps):
    raise ValueError(f'rung {job.rung} is not on a ladder of {len(steps)} rungs')
  return steps[job.rung - 1], steps[job.rung]
