"""`nascli list_trials JOB_DIR`: the trials of a search job, best reward first (or JSON).

Read-only: it replays the journal and reads the trial folders, so it works on a running search
(and on a copy of a job dir) without touching what the search writes. JOB_DIR may be a gs:// URL:
the journal's objects are read through nascli.storage.
"""

import json
from typing import Annotated, Any, Optional, Sequence

import typer
from rich.table import Table

from nascli import checks, console, storage
from nascli.commands.options import flag
from nascli.errors import NascliError

STATUS_HELP = ("Only trials with this status: completed, stopped (early stopping), failed,"
               " failed_with_nan, infeasible, over_target (predicted over the latency target:"
               " not trained), interrupted, running, pending, paused (a rung reported, awaiting"
               " its decision) (repeatable or comma-separated).")
# The table's columns (row keys): `accuracy` is headed by the metric it is (accuracy, AP),
# `wall_s` is the trial's wall time (its last attempt, process start to end).
COLUMNS = ("trial_id", "status", "reward", "accuracy", "latency_ms", "params", "flops",
           "wall_s")
# A multi-objective search's rows (results.PARETO_COLUMNS) show whether a trial is on the front.
PARETO_COLUMN = "pareto"
# A search with early stopping (results.EARLY_STOPPING_COLUMNS): the step a trial's metrics are
# from (a stopped trial's last rung).
STEP_COLUMN = "step"


def list_trials(
    # str, not Path: pathlib would turn gs://bucket/job into gs:/bucket/job.
    job_dir: Annotated[str, typer.Argument(
        metavar="JOB_DIR", help="The search job dir (search_in_local's --local_output_dir), a"
        " folder or gs://BUCKET/PREFIX.",
        show_default=False)],
    max_trials: Annotated[Optional[int], typer.Option(
        *flag("max_trials"), min=1, help="Show only the N best trials.")] = None,
    status: Annotated[Optional[list[str]], typer.Option(*flag("status"), help=STATUS_HELP)]
    = None,
    as_json: Annotated[bool, typer.Option(*flag("json"), help="Print the trials as JSON.")]
    = False,
    pareto: Annotated[bool, typer.Option(
        *flag("pareto"), help="Only the Pareto front (a search with --objectives).")] = False,
) -> None:
  """List the trials of a search job, sorted by reward (best first)."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import journal as journal_lib
  from nascli.search import results
  from nascli.search import summary
  wanted = _statuses(status or [], journal_lib.FINAL_STATUSES + (
      journal_lib.INTERRUPTED, journal_lib.RUNNING, journal_lib.PENDING, journal_lib.PAUSED))
  from nascli.search import search_job
  search_job.check_exists(job_dir)
  if (not journal_lib.journal_for(job_dir).exists()
      and storage.exists(storage.join(job_dir, "search_controller_state.json"))):
    candidates = storage.join(job_dir, "candidates")  # proxy_search_main.CANDIDATES_DIR
    names = sorted({n.split("/")[0] for n in storage.list_names(candidates)})
    raise NascliError(f"{job_dir} is a search_proxy_task job: each candidate is a search"
                      f" job, e.g. `nascli list_trials {storage.join(candidates, names[0])}`"
                      f" (candidates: {', '.join(names)})" if names else
                      f"{job_dir} is a search_proxy_task job with no candidate trained yet")
  state = journal_lib.replay(search_job.check(job_dir).events())
  if pareto and not results.objectives_of(state):
    raise NascliError(f"{job_dir} has no Pareto front: it searched one reward (no --objectives)")
  all_rows = results.trial_rows(job_dir, state)
  rows = results.sort_by_reward(r for r in all_rows if (not wanted or r["status"] in wanted)
                                and (not pareto or r["pareto"]))
  if max_trials is not None:
    rows = rows[:max_trials]
  if as_json:
    print(json.dumps(rows, indent=2))
    return
  out = console.stdout()  # piped: whole rows, no cut paths or columns
  # The summary is a line of its own: as the table's title, Rich would wrap it to the table.
  out.print(_summary(job_dir, all_rows, len(rows)), soft_wrap=True, highlight=False,
            markup=False)
  out.print(trials_table(rows, state=state))
  # What the latencies are, a noisy one's footnote, and the target's outcome (of every trial,
  # whatever the filter showed).
  outcome = summary.target_outcome(state, rows=all_rows)
  notes = [summary.split_note(metric_name(rows))] + summary.latency_notes(rows, state)
  for line in notes + ([outcome] if outcome else []):
    out.print(line, soft_wrap=True, highlight=False, markup=False)
  _say_where_the_report_is(job_dir)


def _say_where_the_report_is(job_dir: str) -> None:
  """On stderr (not a result): the page with the plots, or how to get one."""
  from nascli import report  # pylint: disable=g-import-not-at-top
  path = report.path_of(job_dir)
  line = (f"report: {path} (open it in a browser)" if storage.exists(path) else
          f"no report.html yet: `nascli report {job_dir}` writes one")
  console.stderr().print(line, highlight=False, soft_wrap=True)


def _statuses(given: Sequence[str], known: Sequence[str]) -> set[str]:
  """The statuses asked for; an unknown one is refused as every choice is (checks.one_of)."""
  wanted = [s.strip() for item in given for s in item.split(",") if s.strip()]
  for value in wanted:
    checks.one_of(value, known, "--status")
  return set(wanted)


def _summary(job_dir: str, all_rows: Sequence[dict], shown: int) -> str:
  counts: dict[str, int] = {}
  for row in all_rows:
    counts[row["status"]] = counts.get(row["status"], 0) + 1
  summary = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no trials yet"
  title = f"{job_dir}: {summary}"
  if any(PARETO_COLUMN in row for row in all_rows):
    volumes = [r["hypervolume"] for r in all_rows if r.get("hypervolume") is not None]
    title += (f"; Pareto front: {sum(1 for r in all_rows if r[PARETO_COLUMN])} trials,"
              f" hypervolume {_fmt('hypervolume', max(volumes, default=None))}")
  if shown != len(all_rows):
    title += f" (showing {shown})"
  return title


def _fmt(column: str, value: Any) -> str:
  if value is None:
    return "-"
  if column in ("reward", "accuracy"):
    return f"{value:.4f}"
  if column in ("latency_ms", "measured_latency_ms"):
    return f"{value:.3f}"
  if column == "params":
    return f"{value:,.0f}"
  if column == "flops":
    return _si(value)
  if column == "wall_s":
    return f"{value:.1f}"
  if column == "hypervolume":
    return f"{value:.4g}"
  if column == PARETO_COLUMN:
    return "yes" if value else "-"
  return str(value)


def _si(value: float) -> str:
  """1234567 -> 1.23M: FLOPs span orders of magnitude, their leading digits matter."""
  for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
    if abs(value) >= scale:
      return f"{value / scale:.3g}{unit}"
  return f"{value:.3g}"


def trials_table(rows: Sequence[dict], title: Optional[str] = None, state: Any = None
                 ) -> Table:
  """The trial rows (`nascli.search.results.trial_rows`) as a Rich table, in the given order.
  The latency column's header names the latency's source when the rows share one, else a
  `latency_source` column does; a noisy measurement is marked (summary.NOISY_MARK)."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import results
  from nascli.search import summary
  table = Table(title=title, title_justify="left")
  columns = COLUMNS
  if any(PARETO_COLUMN in row for row in rows):
    columns = COLUMNS[:3] + (PARETO_COLUMN,) + COLUMNS[3:]
  if any(STEP_COLUMN in row for row in rows):
    at = columns.index("status") + 1
    columns = columns[:at] + (STEP_COLUMN,) + columns[at:]
  latency_header, per_row = summary.latency_header(rows, "latency_ms", state)
  if per_row:
    at = columns.index("latency_ms") + 1
    columns = columns[:at] + ("latency_source",) + columns[at:]
  if any(row.get(results.MEASURED_COLUMN) is not None for row in rows):
    at = columns.index("latency_ms") + 1  # the exports timed for real, beside the prediction
    columns = columns[:at] + (results.MEASURED_COLUMN,) + columns[at:]
  for column in columns:
    numeric = column not in ("trial_id", "status", PARETO_COLUMN, "latency_source")
    header = {"accuracy": metric_name(rows), "latency_ms": latency_header}.get(column, column)
    table.add_column(header, justify="right" if numeric else "left", no_wrap=True)
  for row in rows:
    cells = [_fmt(c, row.get(c)) for c in columns]
    if row.get("latency_source") is not None and "latency_source" in columns:
      cells[columns.index("latency_source")] = results.latency_tag(
          row.get(results.LATENCY_DEVICE_COLUMN), state)
    if results.is_noisy(row) and row.get("latency_ms") is not None:
      cells[columns.index("latency_ms")] += summary.NOISY_MARK
    table.add_row(*cells)
  return table


def metric_name(rows: Sequence[dict]) -> str:
  """What the rows' `accuracy` is (`AP` for a detection search), from what the trials recorded."""
  names = list(dict.fromkeys(r["accuracy_metric"] for r in rows if r.get("accuracy_metric")))
  return "/".join(names) or "accuracy"
