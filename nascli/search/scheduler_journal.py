"""The schedulers' decisions read from the journal: rung reports, decisions owed, compute spent.

Every decision is a pure function of the journal (`decide` judges a report against the reports
journaled before it only), so a resumed search decides as the first run did.
"""

from typing import Any, Iterable, Mapping, Protocol, Sequence

from nascli.search.rungs import DECISIONS
from nascli.search.rungs import PROMOTED
from nascli.search.rungs import RUNG
from nascli.search.rungs import Report


class Scheduler(Protocol):
  """What this module asks of a scheduler (scheduler.Scheduler)."""
  decides_at_report: bool

  def should_continue(self, report: Report, history: Sequence[Report]) -> bool:
    ...


def reports(events: Iterable[Mapping[str, Any]]) -> list[Report]:
  """The journal's rung reports, in journal order."""
  return [Report(str(e['trial_id']), int(e['rung']), int(e['step']), float(e['reward']),
                 int(e.get('seq', 0)))
          for e in events if e.get('event') == RUNG]


def journaled_decisions(events: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], bool]:
  """{(trial_id, rung): promoted?} of the decisions in the journal."""
  return {(str(e['trial_id']), int(e['rung'])): e['event'] == PROMOTED
          for e in events if e.get('event') in DECISIONS}


def decide(scheduler: Scheduler, all_reports: Sequence[Report], report: Report) -> bool:
  """The decision on `report`: from the reports journaled before it only, whatever came after
  (so a decision made late, on resume, is the one made on time)."""
  history = [r for r in all_reports if r.seq < report.seq]
  return scheduler.should_continue(report, history)


def owed(scheduler: Scheduler, events: Sequence[Mapping[str, Any]]) -> list[tuple[Report, bool]]:
  """Reports with no decision journaled (the driver died in between), in journal order, each
  with the decision it gets."""
  if not scheduler.decides_at_report:
    return []  # paused trials wait for a free worker (AshaPromotions.next_job)
  done = journaled_decisions(events)
  every = reports(events)
  return [(r, decide(scheduler, every, r)) for r in every if (r.trial_id, r.rung) not in done]


def replayed_decisions(scheduler: Scheduler, events: Sequence[Mapping[str, Any]]
                       ) -> dict[tuple[str, int], bool]:
  """{(trial_id, rung): promoted?} as the scheduler decides every report of the journal now:
  equal to `journaled_decisions` for a search that was never interrupted or was resumed."""
  every = reports(events)
  return {(r.trial_id, r.rung): decide(scheduler, every, r) for r in every}


def compute_spent(events: Iterable[Mapping[str, Any]], train_steps: int | None = None
                  ) -> dict[str, dict[str, float | None]]:
  """{trial_id: {"steps", "wall_s"}}: the training steps and attempt wall seconds each trial
  spent, over all its attempts. A recorded attempt (a rung report, or `completed`; a `stopped`
  trial's last attempt is its last rung report) trained from the checkpoint step it resumed
  from to its step. An interrupted or lost attempt trained up to the checkpoint it left: the
  step its `interrupted` / `lost` event names, or, where the event names none, the step the
  next attempt resumed from past the last one recorded; those steps count too (what it trained
  past its last checkpoint is not known, and is trained again). A search without early stopping
  journals no steps: a completed trial counts `train_steps` from where its checkpoint was (None
  if `train_steps` is not given). Wall seconds are the recorded attempts' only."""
  out: dict[str, dict[str, float | None]] = {}
  at: dict[str, int | None] = {}  # trial -> the step its checkpoint is at, as journaled

  def add(trial_id: str, steps: int | None) -> dict[str, float | None]:
    spent = out.setdefault(trial_id, {'steps': 0, 'wall_s': 0.0})
    spent['steps'] = None if spent['steps'] is None or steps is None else spent['steps'] + steps
    return spent

  for e in events:
    kind, trial_id = e.get('event'), str(e.get('trial_id'))
    done = at.get(trial_id, 0)
    lost = e.get('lost') if kind == 'failed' else None  # a last loss, journaled with the failure
    if kind in ('interrupted', 'lost') or isinstance(lost, Mapping):
      # No outcome; `step`: the checkpoint the attempt left.
      step = (lost if isinstance(lost, Mapping) else e).get('step')
      if isinstance(step, int) and isinstance(done, int) and step > done:
        add(trial_id, step - done)
        at[trial_id] = step
      continue
    if kind not in (RUNG, 'completed'):
      continue
    metrics = e.get('metrics') or {}
    step, start = metrics.get('step'), metrics.get('resumed_from')
    if not (isinstance(step, int) and isinstance(start, int)):
      step, start = train_steps, done
    if step is None or start is None:
      spent = add(trial_id, None)
    else:
      unrecorded = max(0, start - done) if isinstance(done, int) else 0
      spent = add(trial_id, unrecorded + step - start)
    at[trial_id] = step
    if isinstance(metrics.get('wall_s'), (int, float)):
      spent['wall_s'] += metrics['wall_s']
  return out
