"""`search_in_local`: the search loop on this machine, trials as child processes.

The driver is the journal's only writer. It proposes, starts up to `max_parallel` trial
processes (one GPU each via CUDA_VISIBLE_DEVICES when there are GPUs), waits for any to end,
records the outcome and feeds the reward back. Resume = replay the journal: completed trials
stay, interrupted ones run again with their architecture, the controller is rebuilt.
"""

import dataclasses
import json
import os
import subprocess
import sys
import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from nascli.errors import NascliError
from nascli.search import controller as controller_lib
from nascli.search import journal as journal_lib
from nascli.search import reward as reward_lib
from nascli.search.trial import TrialSpec

stderr = Console(stderr=True)
# Settings that may change when a search is resumed (they do not change what a trial is).
MUTABLE = ("max_nas_trial", "max_parallel_nas_trial", "max_failed_nas_trial")


@dataclasses.dataclass
class SearchArgs:
  job_dir: str
  search_space: str = "mnasnet"
  search_space_module: str | None = None
  search_algorithm: str = "random"
  seed: int = 0
  max_nas_trial: int = 4
  max_parallel_nas_trial: int = 1
  max_failed_nas_trial: int | None = None
  target_device_latency_ms: float | None = None
  latency_constraint: str = "soft"
  latency_weight: float = 0.07
  experiment: str | None = None
  config_files: list[str] = dataclasses.field(default_factory=list)
  params_override: str | None = None
  training_data_path: str | None = None
  validation_data_path: str | None = None
  dataset_dir: str | None = None
  overwrite: bool = False
  algorithm_options: dict[str, Any] = dataclasses.field(default_factory=dict)

  def settings(self) -> dict[str, Any]:
    """What defines the search (and so must match on resume)."""
    data = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("job_dir", "overwrite")}
    data["config_files"] = [os.path.abspath(p) for p in self.config_files]
    return data


def _die_with_parent() -> None:
  """Runs in the trial process before exec: a killed driver takes its trials with it (Linux),
  so a resumed search never races an orphaned attempt of the same trial."""
  try:
    import ctypes  # pylint: disable=g-import-not-at-top
    import signal  # pylint: disable=g-import-not-at-top
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    pass


def _devices() -> list[str | None]:
  """One slot per GPU (its CUDA_VISIBLE_DEVICES value), or None slots sharing the CPU."""
  visible = os.environ.get("CUDA_VISIBLE_DEVICES")
  if visible is not None:
    ids = [d for d in visible.split(",") if d.strip()]
  else:
    try:
      out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=10, check=False)
      ids = out.stdout.split() if out.returncode == 0 else []
    except (OSError, subprocess.SubprocessError):
      ids = []
  return ids or [None]


@dataclasses.dataclass
class _Running:
  trial_id: str
  process: subprocess.Popen
  device: str | None
  started: float


class LocalSearch:
  """One search_in_local invocation over a job dir."""

  def __init__(self, args: SearchArgs):
    self.args = args
    reward_lib.check(args.latency_constraint, args.target_device_latency_ms, args.latency_weight)
    if args.max_nas_trial < 1 or args.max_parallel_nas_trial < 1:
      raise NascliError("--max_nas_trial and --max_parallel_nas_trial must be at least 1")
    self.max_failed = (args.max_failed_nas_trial if args.max_failed_nas_trial is not None
                       else args.max_nas_trial)
    # pylint: disable=g-import-not-at-top
    from tf_vision import search_spaces
    self.space_name = args.search_space
    if args.search_space_module:
      self.space = search_spaces.load_user_search_space(args.search_space_module)
    else:
      self.space = search_spaces.get_search_space(args.search_space)
    # Settings errors surface before anything is written: a job dir recorded with a bad setting
    # would refuse the corrected command as "other settings".
    controller_lib.make_algorithm(args.search_algorithm, args.seed, **args.algorithm_options)
    self.journal = journal_lib.Journal.in_dir(args.job_dir)
    from nascli.search import results  # pylint: disable=g-import-not-at-top
    # Every candidate of every decision, so TensorBoard's HParams view hides no trial.
    self.decision_domains = results.decision_domains(self.space)

  def _spec(self, proposal: journal_lib.Proposal) -> TrialSpec:
    a = self.args
    return TrialSpec(
        job_dir=os.path.abspath(a.job_dir), trial_id=proposal.trial_id,
        search_space=self.space_name, nas_params=proposal.nas_params, experiment=a.experiment,
        config_files=[os.path.abspath(p) for p in a.config_files],
        params_override=a.params_override, training_data_path=a.training_data_path,
        validation_data_path=a.validation_data_path, dataset_dir=a.dataset_dir,
        target_latency_ms=a.target_device_latency_ms, latency_constraint=a.latency_constraint,
        latency_weight=a.latency_weight, spawned_at=time.time())

  def _start(self, state: journal_lib.JobState, trial_id: str, device: str | None) -> _Running:
    proposal = state.proposals[trial_id]
    trial_dir = os.path.join(self.args.job_dir, trial_id)
    os.makedirs(trial_dir, exist_ok=True)
    spec_path = os.path.join(trial_dir, "trial_spec.json")
    with open(spec_path, "w", encoding="utf-8") as f:
      json.dump(dataclasses.asdict(self._spec(proposal)), f, indent=2)
    stale = os.path.join(trial_dir, "job_status.json")
    if os.path.exists(stale):
      os.remove(stale)  # From an interrupted attempt: this attempt writes its own.
    env = dict(os.environ)
    if device is not None:
      env["CUDA_VISIBLE_DEVICES"] = device
    with open(os.path.join(trial_dir, "trial.log"), "ab") as log:
      process = subprocess.Popen(  # pylint: disable=consider-using-with
          [sys.executable, "-m", "nascli.search.trial", spec_path], stdout=log, stderr=log,
          env=env, cwd=os.getcwd(), preexec_fn=_die_with_parent)
    self.journal.append({"event": "started", "trial_id": trial_id,
                         "attempt": state.attempts.get(trial_id, 0) + 1})
    return _Running(trial_id, process, device, time.monotonic())

  def _finish(self, run: _Running, ctl: controller_lib.Controller,
              state: journal_lib.JobState) -> None:
    trial_dir = os.path.join(self.args.job_dir, run.trial_id)
    from tf_vision import job_status  # pylint: disable=g-import-not-at-top
    status = job_status.read(trial_dir) or {}
    analysis_path = os.path.join(trial_dir, "model_analysis.json")
    if run.process.returncode == 0 and status.get("status") == "completed" and os.path.exists(
        analysis_path):
      with open(analysis_path, encoding="utf-8") as f:
        analysis = json.load(f)
      metrics = {k: analysis.get(k) for k in ("accuracy", "latency_ms", "flops", "params",
                                               "seconds")}
      self.journal.append({"event": "completed", "trial_id": run.trial_id,
                           "reward": analysis["reward"], "metrics": metrics})
      ctl.feedback(state.proposals[run.trial_id].dna, analysis["reward"])
    else:
      kind = status.get("status") if status.get("status") in journal_lib.FAILED_STATUSES else (
          journal_lib.FAILED)
      reason = status.get("reason") or f"trial process exited with code {run.process.returncode}"
      self.journal.append({"event": "failed", "trial_id": run.trial_id, "status": kind,
                           "reason": reason[:500]})

  def _table(self, state: journal_lib.JobState, running: dict[str, _Running]) -> Table:
    best = state.best()
    table = Table(title=f"search {self.args.job_dir}: {self.space_name},"
                  f" {self.args.search_algorithm}, best trial {best or '-'}")
    for col in ("trial", "state", "accuracy", "latency ms", "reward", "best so far"):
      table.add_column(col)
    best_so_far = None
    for tid in state.trial_ids():
      metrics = state.metrics.get(tid, {})
      r = state.rewards.get(tid)
      if r is not None:
        best_so_far = r if best_so_far is None else max(best_so_far, r)
      shown = "running" if tid in running else state.status[tid]
      table.add_row(tid, shown, _fmt(metrics.get("accuracy")), _fmt(metrics.get("latency_ms")),
                    _fmt(r), _fmt(best_so_far))
    return table

  def run(self) -> journal_lib.JobState:
    a = self.args
    os.makedirs(a.job_dir, exist_ok=True)
    # pylint: disable=g-import-not-at-top
    from nascli.search import results
    with self.journal.open_for_writing():
      journal_lib.check_settings(a.job_dir, a.settings(), a.overwrite, journal=self.journal,
                                 mutable_keys=MUTABLE)
      events = self.journal.events()
      ctl = controller_lib.Controller.rebuild(self.space, a.search_algorithm, a.seed, events,
                                              **a.algorithm_options)
      state = journal_lib.replay(events)
      queue = state.unfinished()  # Interrupted trials run again first, same architecture.
      if queue:
        stderr.print(f"resuming {a.job_dir}: {len(state.trial_ids(journal_lib.COMPLETED))}"
                     f" trial(s) done, re-running interrupted trial(s) {', '.join(queue)}")
      free = _devices()[:a.max_parallel_nas_trial]
      if len(free) < a.max_parallel_nas_trial and free[0] is not None:
        stderr.print(f"note: {len(free)} GPU(s): running {len(free)} trial(s) at a time")
      elif free[0] is None:
        free = [None] * a.max_parallel_nas_trial
      running: dict[str, _Running] = {}
      stop_reason = None
      # A live table on a terminal; elsewhere (logs, CI) one line per trial and a final table.
      live_display = (Live(self._table(state, running), console=stderr, refresh_per_second=2,
                           transient=False, redirect_stdout=False)
                      if stderr.is_terminal else _PlainDisplay())
      with live_display as live:
        while True:
          failed = len(state.trial_ids(*journal_lib.FAILED_STATUSES))
          if failed > self.max_failed and stop_reason is None:
            stop_reason = (f"search stopped: {failed} failed trials exceed"
                           f" --max_failed_nas_trial {self.max_failed}")
          while free and stop_reason is None:
            if queue:
              trial_id = queue.pop(0)
            elif len(state.proposals) < a.max_nas_trial:
              proposal = ctl.propose_new(state.dnas())
              if proposal is None:
                stop_reason = "the controller proposes no new architecture (space exhausted)"
                break
              trial_id = state.next_trial_id()
              dna, nas_params = proposal
              self.journal.append({"event": "proposed", "trial_id": trial_id, "dna": list(dna),
                                   "nas_params": nas_params})
              state = journal_lib.replay(self.journal.events())
            else:
              break
            device = free.pop(0)
            running[trial_id] = self._start(state, trial_id, device)
            state = journal_lib.replay(self.journal.events())
          live.update(self._table(state, running))
          if not running:
            break
          time.sleep(0.5)
          for trial_id, run in list(running.items()):
            if run.process.poll() is None:
              continue
            del running[trial_id]
            free.append(run.device)
            self._finish(run, ctl, state)
            state = journal_lib.replay(self.journal.events())
            results.update_all(a.job_dir, state, self.decision_domains)
            if not stderr.is_terminal:
              stderr.print(_trial_line(state, trial_id))
          live.update(self._table(state, running))
    if not stderr.is_terminal:
      stderr.print(self._table(state, {}))
    if stop_reason and "exceed" in stop_reason:
      raise NascliError(stop_reason)
    if stop_reason:
      stderr.print(stop_reason)
    return state


class _PlainDisplay:
  """Live's interface for a non-terminal: updates are not redrawn."""

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False

  def update(self, renderable) -> None:
    del renderable


def _fmt(value) -> str:
  return "-" if value is None else f"{value:.4g}"


def _trial_line(state: journal_lib.JobState, trial_id: str) -> str:
  m = state.metrics.get(trial_id, {})
  status = state.status[trial_id]
  if status != journal_lib.COMPLETED:
    return f"trial {trial_id}: {status}: {state.reasons.get(trial_id, '')}"
  return (f"trial {trial_id}: reward {_fmt(state.rewards[trial_id])}, accuracy"
          f" {_fmt(m.get('accuracy'))}, latency {_fmt(m.get('latency_ms'))} ms")
