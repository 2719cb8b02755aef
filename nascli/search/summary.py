"""What a search says about its trials on screen: the live and final table, one line per trial,
and whether the latency target was met.

A latency is only a claim when it says where it came from, so every latency shown here names
its source (nascli.latency_source: predicted by which latency model, or measured by whom, on
which runtime, at which input size), marks a noisy measurement, and a search with a target
ends with one line that says how many trials meet it, or that none does and what the space
reached. `list_trials` and the report say the same from the same functions. No framework is
imported: a finished job is reported without TensorFlow.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from nascli.search import journal as journal_lib
from nascli.search import results

OVER_TARGET = results.OVER_TARGET
# How far apart the medians of a measurement's two halves may be before it is re-measured and,
# if still apart, marked `noisy` (tf_vision.serving.arch_latency.Timing.max_drift).
NOISY_DRIFT = 0.05
NOISY_MARK = "*"


def target_of(state: journal_lib.JobState) -> float | None:
  """The job's --target_device_latency_ms, None without one."""
  value = ((state.settings or {}).get("trial") or {}).get("target_device_latency_ms")
  if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
    return None
  return float(value)


def noisy_note() -> str:
  return (f"{NOISY_MARK} noisy: the medians of the two halves of its timed runs stayed more than"
          f" {NOISY_DRIFT:.0%} apart after re-measuring (a busy machine); measure again on a quiet"
          " one before trusting it")


def latency_text(value: Any, device: Mapping[str, Any] | None, digits: str = ".4g") -> str:
  """The number, with NOISY_MARK where the measurement was noisy."""
  if value is None:
    return "-"
  noisy = isinstance(device, Mapping) and bool(device.get("noisy"))
  return f"{value:{digits}}" + (NOISY_MARK if noisy else "")


def latency_header(rows: Sequence[Mapping[str, Any]], name: str,
                   state: journal_lib.JobState | None = None) -> tuple[str, bool]:
  """(the latency column's header, whether the table needs a source column): the header names
  the source when every latency shown shares one (`latency_ms (predicted, cpu-tflite 32x32)`),
  else each row names its own."""
  tags = {results.latency_tag(r.get(results.LATENCY_DEVICE_COLUMN), state) for r in rows
          if r.get("latency_ms") is not None}
  if len(tags) == 1:
    return f"{name} ({tags.pop()})", False
  return name, len(tags) > 1


def split_note(metric: str = "accuracy") -> str:
  """What a search's numbers are measured on: it selects on them, so they are no test score."""
  return (f"{metric} and reward: on the validation data, which this search selects on; `nascli"
          " eval` of a retrained trial reports the held-out test split")


def latency_notes(rows: Sequence[Mapping[str, Any]],
                  state: journal_lib.JobState | None = None) -> list[str]:
  """The lines under a table: what its latencies are in full (device included), and the
  footnote of a noisy one."""
  labels = list(dict.fromkeys(results.latency_label(r.get(results.LATENCY_DEVICE_COLUMN), state)
                              for r in rows if r.get("latency_ms") is not None))
  notes = [f"latency: {label}" for label in labels]
  if any(results.is_noisy(r) for r in rows):
    notes.append(noisy_note())
  return notes


def _rows_of(state: journal_lib.JobState) -> list[dict[str, Any]]:
  """The journal's view of each trial's latency (no trial folder read): what the search has
  in hand at every refresh."""
  rows = []
  for trial_id in state.trial_ids():
    status = state.status[trial_id]
    metrics = (state.metrics.get(trial_id) or {}) if status in (
        results.RESULT_STATUSES + (OVER_TARGET,)) else {}
    device = metrics.get(results.LATENCY_DEVICE_COLUMN)
    rows.append({"trial_id": trial_id, "status": status,
                 "latency_ms": _number(metrics.get("latency_ms")),
                 results.LATENCY_DEVICE_COLUMN: device if isinstance(device, Mapping) else None})
  return rows


def _number(value: Any) -> float | None:
  if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
    return None
  return value


def _ms(value: float) -> str:
  return f"{value:.3g}"


def _range(values: Iterable[float]) -> str:
  values = sorted(values)
  low, high = _ms(values[0]), _ms(values[-1])
  return f"{low} ms" if low == high else f"{low}-{high} ms"


def _flat(label: str) -> str:
  """A label to go inside parentheses: `predicted by M (cpu-tflite, 32x32)` -> `predicted by
  M, cpu-tflite, 32x32`."""
  return label[:-1].replace(" (", ", ", 1) if label.endswith(")") else label


def _source(rows: Sequence[Mapping[str, Any]], state: journal_lib.JobState | None) -> str:
  labels = list(dict.fromkeys(
      _flat(results.latency_label(r.get(results.LATENCY_DEVICE_COLUMN), state)) for r in rows))
  return labels[0] if len(labels) == 1 else f"{len(labels)} sources: " + "; ".join(labels)


def target_outcome(state: journal_lib.JobState, target_ms: float | None = None,
                   rows: Sequence[Mapping[str, Any]] | None = None) -> str | None:
  """One line: how many trained trials meet the latency target (and by what latency), how many
  proposals were skipped as predicted over it; or, when none meets it, the range the trials
  reached and that the target is below it. None for a job without a target, or with no latency yet.

  `rows` (results.trial_rows) where the caller has them; else the journal's metrics.
  """
  target = target_ms if target_ms is not None else target_of(state)
  if target is None:
    return None
  rows = _rows_of(state) if rows is None else rows
  trained = [r for r in rows if r.get("status") in results.RESULT_STATUSES
             and r.get("latency_ms") is not None]
  skipped = [r for r in rows if r.get("status") == OVER_TARGET]
  head = f"target {target:g} ms: "
  tail = ""
  if skipped:
    predicted = [r["latency_ms"] for r in skipped if r.get("latency_ms") is not None]
    tail = (f"; {len(skipped)} proposal{'s' if len(skipped) != 1 else ''} skipped as over"
            " target" + (f" (predicted {_range(predicted)})" if predicted else ""))
  if not trained:
    if not skipped:
      return None  # nothing to say yet (or every trial failed: the search says why)
    return (head + "no trial trained" + tail + f" ({_source(skipped, state)}): the target is"
            " below what this space reaches here")
  meet = [r for r in trained if r["latency_ms"] <= target]
  source = _source(trained, state)
  if meet:
    verb = "meets" if len(meet) == 1 and len(trained) > 1 else "meet"
    plural = "s" if len(trained) != 1 else ""
    return (head + f"{len(meet)} of {len(trained)} trained trial{plural} {verb} it ({source})"
            + tail)
  predicted = all((r.get(results.LATENCY_DEVICE_COLUMN) or {}).get("source") == "latency_model"
                  for r in trained)
  reached = "were predicted at" if predicted else "measured"
  return (head + f"no trial meets it; the trials {reached}"
          f" {_range(r['latency_ms'] for r in trained)} ({source}): the target is below what"
          " this space reaches here" + tail)


def say_target_outcome(console: Any, state: journal_lib.JobState) -> None:
  """The target_outcome line on `console` (the search's stderr), if there is one."""
  line = target_outcome(state)
  if line:
    console.print(line, highlight=False, markup=False, soft_wrap=True)


# --------------------------------------------------------------------------- the search's screen


def title(job_dir: str, space_name: str, algorithm: str, state: journal_lib.JobState) -> str:
  return f"search {job_dir}: {space_name}, {algorithm}, best trial {state.best() or '-'}"


def _fmt(value: Any) -> str:
  return "-" if value is None else f"{value:.4g}"


def table(job_dir: str, space_name: str, algorithm: str, metric: str,
          state: journal_lib.JobState, running: Iterable[str], titled: bool = True) -> Any:
  """The search's table (live on a terminal, and at the end): each trial's state, metric,
  latency (its source in the header, or a column when trials differ) and reward; under it what
  the latencies are and the footnote of a noisy one."""
  running = set(running)
  table = Table(title=title(job_dir, space_name, algorithm, state) if titled else None)
  rows = _rows_of(state)
  header, per_row = latency_header(rows, "latency ms", state)
  columns = ["trial", "state", metric, header] + (["latency source"] if per_row else [])
  for col in columns + ["reward", "best so far"]:
    table.add_column(col)
  best_so_far = None
  for row in rows:
    tid = row["trial_id"]
    metrics = state.metrics.get(tid, {}) if row["status"] != OVER_TARGET else {}
    r = state.rewards.get(tid)
    if r is not None and state.status[tid] in (journal_lib.COMPLETED,):  # not a partial budget's
      best_so_far = r if best_so_far is None else max(best_so_far, r)  # nor a penalty
    shown = "running" if tid in running else state.status[tid]
    device = row[results.LATENCY_DEVICE_COLUMN]
    cells = [tid, shown, _fmt(metrics.get("accuracy")), latency_text(row["latency_ms"], device)]
    if per_row:
      cells.append(results.latency_tag(device, state) if row["latency_ms"] is not None else "-")
    table.add_row(*cells, _fmt(r), _fmt(best_so_far))
  notes = [split_note(metric)] + latency_notes(rows, state)
  return Group(table, Text("\n".join(notes)))


def trial_line(state: journal_lib.JobState, trial_id: str, metric: str = "accuracy") -> str:
  """The line a trial's end prints off a terminal: its reward, metric and latency with the
  latency's source; a proposal skipped as over the target says so."""
  m = state.metrics.get(trial_id, {})
  status = state.status[trial_id]
  if status in (journal_lib.PENDING, journal_lib.PAUSED) and state.rungs.get(trial_id):
    last = state.rungs[trial_id][-1]  # promoted, or paused until a free worker promotes it
    return (f"trial {trial_id}: rung {last['rung']} (step {last['step']}): reward"
            f" {_fmt(last['reward'])}, "
            + ("promoted" if status == journal_lib.PENDING else "paused"))
  device = m.get(results.LATENCY_DEVICE_COLUMN)
  device = device if isinstance(device, Mapping) else None
  source = results.latency_label(device, state, short=True)
  if status == OVER_TARGET:
    target = m.get("target_ms", target_of(state))
    over = f", over the {target:g} ms target" if isinstance(target, (int, float)) else ""
    return (f"trial {trial_id}: not trained: latency {_fmt(m.get('latency_ms'))} ms, {source}"
            f"{over}; penalty reward {_fmt(state.rewards.get(trial_id))}")
  if status != journal_lib.COMPLETED:
    return f"trial {trial_id}: {status}: {state.reasons.get(trial_id, '')}"
  noisy = ""
  if device and device.get("noisy"):
    spread = device.get("spread")
    noisy = (f"; noisy (spread {spread:.0%})" if isinstance(spread, (int, float))
             else "; noisy")
  latency = (f"{_fmt(m['latency_ms'])} ms, {source}{noisy}" if m.get("latency_ms") is not None
             else "-")
  return (f"trial {trial_id}: reward {_fmt(state.rewards[trial_id])},"
          f" {m.get('accuracy_metric', metric)} {_fmt(m.get('accuracy'))}, latency {latency}")
