"""Warm start (`--warm_start_from JOB_DIR`): a new search seeded with an old job's history.

The old job's completed trials, as (architecture, reward) pairs, become the new search's
controller history before its first proposal (`Controller.warm_start`); they are not trials of
the new job, which trains `--max_nas_trial` new architectures. What the history means to each
algorithm is the algorithm's own `feedback`: TPE adds each pair as a completed trial of its
Optuna study, REINFORCE takes a policy-gradient step per pair, regularized evolution and NSGA-II
put the pairs in their population (so they select parents among them at once when the history
fills it), random ignores them. No algorithm proposes an architecture of the history again.

The pairs are journaled in the new job as one `warm_start` event, right after `search_started`
and before any proposal, so the new search's decisions stay a pure function of its own journal:
a resumed or killed-and-resumed search replays that event (`Controller.rebuild`), whatever
became of the old job since.

Reads journals only: no TensorFlow, and pyglove only to check the pairs against the space
(the flag is checked before either is imported).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from nascli import console
from nascli import storage
from nascli.errors import InputError
from nascli.errors import NascliError

EVENT = 'warm_start'


def _where(job_dir: str) -> str:
  return job_dir if storage.is_gcs(job_dir) else os.path.abspath(job_dir)


def read_job(job_dir: str, what: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
  """(settings, events) of the search job in `job_dir`, refused in one line when it is missing,
  not a search job, or its journal is damaged; `what` names the flag in the message."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import journal as journal_lib
  from nascli.search import search_job
  journal = search_job.check(job_dir, what)  # the words of every command
  try:
    events = journal.events()
    journal_lib.replay(events)
  except InputError as e:
    raise InputError(f'{what} {job_dir}: damaged journal: {e}'.split('; pass --overwrite')[0]
                     .split('; the search cannot be resumed')[0]) from None
  first = events[0] if events else {}
  if first.get('event') != 'search_started' or not isinstance(first.get('settings'), dict):
    raise InputError(f'{what} {job_dir}: damaged journal: its first event is not'
                     ' search_started with settings')
  return first['settings'], events


def history(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """The completed trials of a journal as warm-start pairs, in completion order:
  {trial_id, dna, reward} (reward a number, or the objective values' list). A job that was
  itself warm-started passes its own history on first."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import journal as journal_lib
  state = journal_lib.replay(events)
  inherited = next((list(e.get('history') or []) for e in events if e.get('event') == EVENT),
                   [])
  own = [{'trial_id': t, 'dna': list(state.proposals[t].dna),
          'reward': list(state.reward_vectors[t]) if t in state.reward_vectors
          else state.rewards[t]}
         for t in state.completion_order if state.status[t] == journal_lib.COMPLETED]
  return inherited + own


def check(job_dir: str, search_space: str, search_space_module: str | None,
          objectives: list[str] | None, new_job_dir: str | None = None
          ) -> list[dict[str, Any]]:
  """The history `--warm_start_from job_dir` seeds a search with; refused in one line when the
  old job searched another space or other objectives, or completed no trial."""
  what = '--warm_start_from'
  if new_job_dir is not None and _where(new_job_dir) == _where(job_dir):
    raise NascliError(f'{what} {job_dir} is the job dir itself: to continue a search, run its'
                      ' command again (or `nascli search_resume`)')
  settings, events = read_job(job_dir, what)
  old_space = (settings.get('search_space'), settings.get('search_space_module'))
  if old_space != (search_space, search_space_module):
    show = lambda s: f'--search_space_module {s[1]}' if s[1] else f'{s[0]}'  # noqa: E731
    raise NascliError(f'{what} {job_dir} searched another search space ({show(old_space)}, not'
                      f' {show((search_space, search_space_module))}): its architectures mean'
                      ' nothing in this one')
  old_objectives = settings.get('objectives')
  if (old_objectives or None) != (list(objectives) if objectives else None):
    show = lambda o: ','.join(o) if o else 'the scalar reward'  # noqa: E731
    raise NascliError(f'{what} {job_dir} optimized {show(old_objectives)}, this search'
                      f' {show(objectives)}: its rewards do not fit')
  pairs = history(events)
  if not pairs:
    raise NascliError(f'{what} {job_dir} has no completed trial to learn from')
  return pairs


def fingerprint(pairs: list[dict[str, Any]]) -> str:
  """sha256 of the pairs' canonical JSON: what the event holds, checkable against the old job."""
  text = json.dumps(pairs, sort_keys=True, separators=(',', ':'))
  return hashlib.sha256(text.encode('utf-8')).hexdigest()


def event(job_dir: str, pairs: list[dict[str, Any]]) -> dict[str, Any]:
  """The journal event that seeds the controller: the old job, its pairs and their fingerprint."""
  return {'event': EVENT, 'job_dir': _where(job_dir), 'history': pairs,
          'fingerprint': fingerprint(pairs)}


def pairs_of(record: dict[str, Any]) -> list[tuple[list[int | float], Any]]:
  """(dna, reward) of a journaled `warm_start` event, in order."""
  return [(list(p['dna']), p['reward']) for p in record.get('history') or []]


def journal_once(loop: Any, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """With --warm_start_from: journals the old job's (architecture, reward) pairs as a
  `warm_start` event before the first proposal, once (a resume replays the one journaled,
  whatever became of the old job since); returns the journal's events. `loop`: the
  SearchLoop (its args, space and journal)."""
  a = loop.args
  if not a.warm_start_from or any(e.get('event') == EVENT for e in events):
    return events
  if any(e.get('event') == 'proposed' for e in events):  # cannot happen: journaled first
    raise NascliError(f'{a.job_dir}: --warm_start_from came after the first proposal')
  pairs = check(a.warm_start_from, a.search_space, a.search_space_module, a.objectives,
                a.job_dir)
  # Each pair must fit this space (a module's space may have changed): checked before the
  # event is journaled, so a refused warm start leaves the job as it was. (pyglove comes with
  # the controller: imported only for a warm start.)
  from nascli.search import controller as controller_lib  # pylint: disable=g-import-not-at-top
  controller_lib.Controller(loop.space, 'random', 0, num_objectives=loop.num_objectives,
                            to_nas_params=lambda space, dna: {}).warm_start(
                                (p['dna'], p['reward']) for p in pairs)
  loop.journal.check_writer()
  loop.journal.append(event(a.warm_start_from, pairs))
  console.stderr().print(f'warm start: {len(pairs)} (architecture, reward) pair(s) of'
                         f' {a.warm_start_from} seed the {a.search_algorithm} controller',
                         highlight=False, markup=False)
  return loop.journal.events()
