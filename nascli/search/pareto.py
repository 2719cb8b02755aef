"""Multi-objective search (`--objectives accuracy:max,latency_ms:min`): the Pareto front.

With objectives a trial has no scalar reward: the driver journals its sign-adjusted objective
values (larger is better in every component: `[accuracy, -latency_ms]`), the controller gets
them as a tuple, and a trial is on the front when no other completed trial is at least as
good in every objective and better in one.

The hypervolume (the volume the front dominates, up to a reference point) says how good a
whole front is in one number, so it is recorded after each completed trial. Its reference
point: 0 for a `max` objective (every metric a trial measures is >= 0), 1.1 x the worst value
of the completed trials for a `min` objective (1 where that is 0), so that every trial of the
front adds to it, the slowest too. The whole history is computed against the reference of
the trials so far: within one pareto.json it never decreases and its values compare, while a
later trial that is worse than all before it moves the reference and so every value. Pass an
explicit `reference` to compare searches with each other.

Pure Python (matplotlib only for the plot, imported on use): the search's driver and
`nascli list_trials` use it without TensorFlow, and flag checks parse `--objectives` with it
before any framework loads.
"""

from __future__ import annotations

import dataclasses
import io
import math
from typing import Any, Iterable, Mapping, Sequence

from nascli import checks
from nascli.errors import NascliError
from nascli.search.job_state import MEASURED  # light: the CLI checks --objectives with it

# What an objective may name: the measurements each trial's `completed` event journals (and
# its model_analysis.json holds).
METRICS = MEASURED
# direction -> the sign that makes larger better.
DIRECTIONS = {'max': 1.0, 'min': -1.0}
MIN_OBJECTIVES = 2
FLAG = '--objectives'

Point = tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Objective:
  """One metric to maximize or minimize."""
  metric: str
  direction: str

  @property
  def sign(self) -> float:
    return DIRECTIONS[self.direction]

  def __str__(self) -> str:
    return f'{self.metric}:{self.direction}'


def parse_objectives(spec: str | Sequence[str]) -> tuple[Objective, ...]:
  """`accuracy:max,latency_ms:min` (or its items as a list, as a journal's settings hold them).

  Raises:
    NascliError: one line naming the culprit: an unknown metric, a direction other than
      max/min, a metric named twice, fewer than two objectives.
  """
  items = spec.split(',') if isinstance(spec, str) else list(spec)
  objectives: list[Objective] = []
  for item in items:
    text = str(item).strip()
    metric, sep, direction = (part.strip() for part in text.partition(':'))
    if not sep or not metric:
      raise NascliError(f'{FLAG} {text!r}: expected METRIC:max or METRIC:min, e.g.'
                        ' accuracy:max,latency_ms:min')
    if metric not in METRICS:
      raise NascliError(f'{FLAG} {text!r}: unknown metric {metric!r}'
                        f'{checks.closest(metric, METRICS)}; known: {", ".join(METRICS)}')
    if direction not in DIRECTIONS:
      raise NascliError(f'{FLAG} {text!r}: direction {direction!r} is neither max nor min'
                        f'{checks.closest(direction, DIRECTIONS)}')
    if any(o.metric == metric for o in objectives):
      raise NascliError(f'{FLAG} names {metric} twice')
    objectives.append(Objective(metric, direction))
  if len(objectives) < MIN_OBJECTIVES:
    raise NascliError(f'{FLAG} needs at least {MIN_OBJECTIVES} objectives, got'
                      f' {len(objectives)} ({",".join(map(str, objectives)) or "none"}); a'
                      ' single-objective search uses the MnasNet reward (no --objectives)')
  return tuple(objectives)


def canonical(spec: str | Sequence[str]) -> list[str]:
  """The objectives as a search's settings record them: `["accuracy:max", "latency_ms:min"]`."""
  return [str(o) for o in parse_objectives(spec)]


def _finite(value: Any) -> float | None:
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return None
  value = float(value)
  return value if math.isfinite(value) else None


def missing_metrics(objectives: Sequence[Objective], metrics: Mapping[str, Any]) -> list[str]:
  """The objectives' metrics that `metrics` lacks (or holds as no finite number)."""
  return [o.metric for o in objectives if _finite(metrics.get(o.metric)) is None]


def signed_values(objectives: Sequence[Objective], metrics: Mapping[str, Any]) -> Point | None:
  """The objective values with larger better in each (`(accuracy, -latency_ms)`); None when a
  metric is missing."""
  if missing_metrics(objectives, metrics):
    return None
  return tuple(o.sign * _finite(metrics[o.metric]) for o in objectives)


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
  """`a` is at least as good as `b` in every component and better in one (larger is better)."""
  return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))


def non_dominated(points: Sequence[Sequence[float]]) -> list[bool]:
  """For each point, whether no other point dominates it (equal points are both on the
  front).

  In descending lexicographic order a point can be dominated only by one before it, and then
  by one of the front found so far: O(points x front), not O(points**2).
  """
  on_front = [False] * len(points)
  front: list[Sequence[float]] = []
  for i in sorted(range(len(points)), key=lambda i: tuple(points[i]), reverse=True):
    if not any(dominates(q, points[i]) for q in front):
      front.append(points[i])
      on_front[i] = True
  return on_front


def nondominated_sort(points: Sequence[Sequence[float]]) -> list[int]:
  """Each point's front rank (Deb et al.'s non-dominated sorting, as NSGA-II ranks): 0 for the
  Pareto front, 1 for the front of what remains without it, and so on."""
  ranks = [-1] * len(points)
  left = list(range(len(points)))
  rank = 0
  while left:
    front = [i for i in left if not any(dominates(points[j], points[i]) for j in left)]
    for i in front:
      ranks[i] = rank
    left = [i for i in left if ranks[i] < 0]
    rank += 1
  return ranks


def hypervolume(points: Iterable[Sequence[float]], reference: Sequence[float]) -> float:
  """The volume dominated by `points` and dominating `reference` (larger is better in every
  component), exact: a sweep in 2-D, slices of the last objective above that. Points not
  better than the reference in every component add nothing."""
  reference = tuple(float(r) for r in reference)
  inside = [tuple(float(x) for x in p) for p in points]
  inside = [p for p in inside if len(p) == len(reference)
            and all(x > r for x, r in zip(p, reference))]
  return _volume(inside, reference)


def _volume(points: list[Point], reference: Point) -> float:
  if not points:
    return 0.0
  if len(reference) == 1:
    return max(p[0] for p in points) - reference[0]
  points = [p for p, keep in zip(points, non_dominated(points)) if keep]
  if len(reference) == 2:
    total, height = 0.0, reference[1]
    for x, y in sorted(points, key=lambda p: (-p[0], p[1])):
      if y > height:
        total += (x - reference[0]) * (y - height)
        height = y
    return total
  # Slices between consecutive values of the last objective, best first: each slice holds the
  # (d-1)-dimensional volume of the points that reach at least its top.
  points.sort(key=lambda p: -p[-1])
  total = 0.0
  for i, point in enumerate(points):
    below = points[i + 1][-1] if i + 1 < len(points) else reference[-1]
    if point[-1] > below:
      total += _volume([p[:-1] for p in points[:i + 1]], reference[:-1]) * (point[-1] - below)
  return total


REFERENCE_MARGIN = 1.1  # a min objective's reference: this times the worst value
REFERENCE_RULE = ('0 for a max objective; for a min objective 1.1 x the worst value of the'
                  ' completed trials (1 if that is 0)')


def reference_point(objectives: Sequence[Objective],
                    trials: Iterable[Mapping[str, Any]]) -> dict[str, float]:
  """The hypervolume's reference, in each metric's own units, from the metrics of the completed
  trials: REFERENCE_RULE."""
  trials = list(trials)
  out = {}
  for o in objectives:
    if o.direction == 'max':
      out[o.metric] = 0.0
    else:
      worst = max((v for v in (_finite(t.get(o.metric)) for t in trials) if v is not None),
                  default=0.0)
      out[o.metric] = REFERENCE_MARGIN * worst if worst else 1.0
  return out


@dataclasses.dataclass
class Front:
  """What the rows of a multi-objective search say about its front."""
  objectives: tuple[Objective, ...]
  on_front: dict[str, bool]  # trial id -> on the Pareto front (completed trials with values)
  hypervolume_after: dict[str, float]  # trial id -> hypervolume once it had completed
  history: list[dict[str, Any]]  # [{trial_id, completed, hypervolume}] in completion order
  reference: dict[str, float] | None  # None until a trial completed

  @property
  def front(self) -> list[str]:
    return [t for t, on in self.on_front.items() if on]

  @property
  def hypervolume(self) -> float | None:
    return self.history[-1]['hypervolume'] if self.history else None

  def summary(self) -> dict[str, Any]:
    """pareto.json: the objectives, the reference point, the front, the hypervolume history."""
    return {
        'objectives': [str(o) for o in self.objectives],
        'reference_point': self.reference,
        'reference_rule': REFERENCE_RULE,
        'front': self.front,
        'hypervolume': self.hypervolume,
        'history': self.history,
    }


def front_of(rows: Sequence[Mapping[str, Any]], objectives: Sequence[Objective],
             completion_order: Sequence[str],
             reference: Mapping[str, float] | None = None) -> Front:
  """The front of the completed rows (`results.trial_rows`), in row order, and the hypervolume
  after each completed trial in `completion_order` (the journal's), against `reference` (by
  default `reference_point` of these rows). A completed row missing an objective's metric is
  left out of all three."""
  objectives = tuple(objectives)
  values = {}
  for row in rows:
    if row.get('status') == 'completed':
      point = signed_values(objectives, row)
      if point is not None:
        values[str(row['trial_id'])] = point
  ids = list(values)
  on_front = dict(zip(ids, non_dominated([values[t] for t in ids])))
  order = [t for t in completion_order if t in values]
  by_id = {str(r['trial_id']): r for r in rows}
  if reference is None and order:
    reference = reference_point(objectives, (by_id[t] for t in order))
  history, after, current, volume = [], {}, [], 0.0
  if reference is not None:
    signed_reference = tuple(o.sign * reference[o.metric] for o in objectives)
    for n, trial_id in enumerate(order, 1):
      point = values[trial_id]
      if not any(dominates(q, point) for q in current):  # else the volume stays
        current = [q for q in current if not dominates(point, q)] + [point]
        volume = hypervolume(current, signed_reference)
      after[trial_id] = volume
      history.append({'trial_id': trial_id, 'completed': n, 'hypervolume': volume})
  return Front(objectives, on_front, after, history,
               dict(reference) if reference is not None else None)


# --------------------------------------------------------------------------- plot

PLOT_SIZE = (8, 6)  # inches at 100 dpi: 800 x 600 pixels
_LABELS = {'accuracy': 'accuracy', 'latency_ms': 'latency (ms)', 'flops': 'FLOPs',
           'params': 'parameters', 'seconds': 'training seconds'}


def plot_png(rows: Sequence[Mapping[str, Any]], front: Front, title: str,
             target_latency_ms: float | None = None) -> bytes:
  """`pareto_front.png`: every completed trial by its first two objectives (the first up, the
  second across), the front highlighted and labelled with trial ids (with two objectives, its
  staircase), the target latency as a dashed line where latency is an axis."""
  # pylint: disable=g-import-not-at-top
  # Figure + the Agg canvas, not pyplot (as result_files.write_progress_plot): no global state.
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  y_obj, x_obj = front.objectives[0], front.objectives[1]
  fig = Figure(figsize=PLOT_SIZE, dpi=100)
  FigureCanvasAgg(fig)
  ax = fig.add_subplot()
  points = [(str(r['trial_id']), r[x_obj.metric], r[y_obj.metric]) for r in rows
            if str(r['trial_id']) in front.on_front]
  others = [(x, y) for t, x, y in points if not front.on_front[t]]
  best = sorted(((x, y, t) for t, x, y in points if front.on_front[t]))
  if others:
    ax.scatter(*zip(*others), s=22, color='tab:blue', zorder=3,
               label=f'dominated ({len(others)})')
  if best:
    xs, ys, ids = zip(*best)
    ax.scatter(xs, ys, s=60, color='tab:orange', edgecolors='black', linewidths=0.6, zorder=4,
               label=f'Pareto front ({len(best)})')
    if len(front.objectives) == 2 and len(best) > 1:
      ax.step(xs, ys, where='post' if x_obj.direction == 'min' else 'pre', color='tab:orange',
              alpha=0.8, zorder=2)
    for x, y, trial_id in best:
      ax.annotate(trial_id, (x, y), textcoords='offset points', xytext=(5, 5), fontsize=8)
  if not points:
    ax.text(0.5, 0.5, 'no completed trial yet', transform=ax.transAxes, ha='center',
            va='center', color='gray')
  if target_latency_ms is not None:
    line = dict(color='tab:red', linestyle='--', linewidth=1,
                label=f'target latency {target_latency_ms:g} ms')
    if x_obj.metric == 'latency_ms':
      ax.axvline(target_latency_ms, **line)
    elif y_obj.metric == 'latency_ms':
      ax.axhline(target_latency_ms, **line)
  extra = (f' (front over all {len(front.objectives)} objectives:'
           f' {", ".join(map(str, front.objectives))})' if len(front.objectives) > 2 else '')
  volume = front.hypervolume
  ax.set_title(f'{title}: {len(best)} of {len(points)} completed trials on the front'
               + (f', hypervolume {volume:.4g}' if volume is not None else '') + extra,
               fontsize=9)
  ax.set_xlabel(f'{_LABELS[x_obj.metric]} ({x_obj.direction})')
  ax.set_ylabel(f'{_LABELS[y_obj.metric]} ({y_obj.direction})')
  ax.grid(alpha=0.3)
  if points or target_latency_ms is not None:
    ax.legend(loc='best', fontsize=8)
  fig.tight_layout()
  buffer = io.BytesIO()
  fig.savefig(buffer, format='png')
  return buffer.getvalue()
