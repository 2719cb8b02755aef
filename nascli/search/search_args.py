"""What a search is: its arguments (`SearchArgs`), the settings a resume may change, and the
checks of them that need no worker (the ones that need the built config run in preflight.py)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from nascli import storage
from nascli.errors import NascliError
from nascli.run_spec import TrialSettings
from nascli.search import journal as journal_lib
from nascli.search import scheduler as scheduler_lib

# Settings that may change when a search is resumed (they do not change what a trial is).
MUTABLE = ("max_nas_trial", "max_parallel_nas_trial", "max_failed_nas_trial",
           "max_trial_retries", "trial_isolation", "max_trials_per_worker", "export_top_k",
           "trial.export_every_trial", "trial_timeout", "paused_trials_per_worker",
           "trial.latency_timeout_s", "trial.latency_model.path")
# A mutable setting's flag where its name is not the last part of its key.
_MUTABLE_FLAGS = {"trial.latency_model.path": "latency_model"}

@dataclasses.dataclass
class SearchArgs:
  """A search: how it proposes and schedules trials, and what every trial runs with (`trial`,
  which each trial_spec.json carries as it is)."""
  job_dir: str
  search_space: str = "mnasnet"
  search_space_module: str | None = None
  search_algorithm: str = "tpe"  # search_flags.DEFAULT_ALGORITHM (tests assert they agree)
  max_nas_trial: int = 4
  max_parallel_nas_trial: int = 1
  max_failed_nas_trial: int | None = None
  max_trial_retries: int = 2  # attempts lost with their worker/node, per trial
  trial_timeout: float | None = None  # seconds an attempt may run, then `failed` (timeout)
  overwrite: bool = False
  algorithm_options: dict[str, Any] = dataclasses.field(default_factory=dict)
  trial_isolation: str = "worker"  # executors.local_executor: warm workers, or a process each
  max_trials_per_worker: int = 10
  # With early stopping: paused trials a warm worker keeps in memory (trial.RungSpec).
  paused_trials_per_worker: int = 1
  export_top_k: int = 3  # SavedModels of the best trials, at the end
  # --objectives ["accuracy:max", "latency_ms:min"] (nascli/search/pareto.py): a Pareto front;
  # None: the scalar MnasNet reward.
  objectives: list[str] | None = None
  # --early_stopping, --min_steps, --reduction_factor (nascli/search/scheduler.py).
  scheduler: scheduler_lib.SchedulerSettings = dataclasses.field(
      default_factory=scheduler_lib.SchedulerSettings)
  trial: TrialSettings = dataclasses.field(default_factory=TrialSettings)
  # --warm_start_from: the job whose (architecture, reward) pairs seed the controller
  # (nascli/search/warm_start.py), journaled as a `warm_start` event before the first proposal.
  warm_start_from: str | None = None

  @property
  def seed(self) -> int:
    """--seed: the controller's, and every trial's (its run's)."""
    return self.trial.run.seed

  def settings(self) -> dict[str, Any]:
    """What defines the search (and so must match on resume): the trial settings nested, their
    local paths absolute, as the trials get them."""
    data = dataclasses.asdict(dataclasses.replace(self, trial=self.trial.with_absolute_paths()))
    for key in ("job_dir", "overwrite"):
      del data[key]
    # Left out at their defaults, so that searches begun before they existed still resume.
    if not self.scheduler.early_stopping:
      del data["scheduler"]
    if self.objectives is None:
      del data["objectives"]
    if self.warm_start_from is None:
      del data["warm_start_from"]
    elif not storage.is_gcs(self.warm_start_from):
      data["warm_start_from"] = os.path.abspath(self.warm_start_from)
    if not self.scheduler.early_stopping or self.paused_trials_per_worker == 1:
      del data["paused_trials_per_worker"]
    if self.trial.validation_curve_points is None:
      del data["trial"]["validation_curve_points"]
    if self.trial.latency_calculator == TrialSettings.latency_calculator:
      del data["trial"]["latency_calculator"]
      del data["trial"]["latency_timeout_s"]
    if self.trial.run.proxy is None:
      del data["trial"]["run"]["proxy"]
    if self.trial.latency_input_size is None:
      del data["trial"]["latency_input_size"]
    if self.trial.latency_model is None:  # --latency_model FILE: its path and fingerprint
      del data["trial"]["latency_model"]
      del data["trial"]["latency_margin"]
    return data


def _setting(settings: dict[str, Any], dotted: str) -> Any:
  for key in dotted.split("."):
    settings = settings.get(key) if isinstance(settings, dict) else None
  return settings


def mutable_changes(began: dict[str, Any], now: dict[str, Any]) -> list[str]:
  """`--flag NEW (the job began with OLD)` for each setting of MUTABLE (how trials run, not
  what they compute) that differs from the one the job was started with."""
  began, now = (json.loads(json.dumps(d, sort_keys=True)) for d in (began, now))
  out = []
  for key in MUTABLE:
    old, new = _setting(began, key), _setting(now, key)
    if key == "max_nas_trial" or old == new or not began:  # more trials: the search says so
      continue
    show = lambda v: "unset" if v is None else str(v)  # noqa: E731
    flag = _MUTABLE_FLAGS.get(key, key.rsplit(".", 1)[-1])
    out.append(f"--{flag} {show(new)} (the job began with {show(old)})")
  return out


def settle_auto(args: SearchArgs) -> None:
  """`--early_stopping auto` on a job that began without early stopping (one begun before
  `auto` was the default, or with `none`) stays without it: the job goes on as it began."""
  if args.scheduler.name != scheduler_lib.AUTO or args.overwrite:
    return
  journal = journal_lib.journal_for(args.job_dir)
  try:
    first = next(iter(journal.events()), {}) if journal.exists() else {}
  except NascliError:
    return  # damaged: the search itself says how
  settings = first.get("settings")
  if first.get("event") == "search_started" and isinstance(settings, dict) and (
      "scheduler" not in settings):
    args.scheduler = scheduler_lib.SchedulerSettings()


def as_journaled(args: SearchArgs, settings: scheduler_lib.SchedulerSettings,
                  why: str | None) -> tuple[scheduler_lib.SchedulerSettings, str | None]:
  """`--early_stopping auto` on resume: the scheduler the job's journal says auto chose when it
  began (its `early_stopping` event), whatever `resolve` says now: --max_nas_trial, which
  auto's choice depends on, may change between runs; the rungs may not."""
  if why is None or args.overwrite:
    return settings, why
  journal = journal_lib.journal_for(args.job_dir)
  try:
    events = journal.events() if journal.exists() else []
  except NascliError:
    return settings, why  # damaged: the search itself says how
  began = next((e for e in events if e.get("event") == "early_stopping"), None)
  if began is None or began.get("name") == settings.name:
    return settings, why
  if began.get("name") == "none":
    return scheduler_lib.SchedulerSettings(), began.get("why") or why
  return (dataclasses.replace(args.scheduler, name=str(began["name"])),
          began.get("why") or why)



def max_failed(args: SearchArgs) -> int:
  """--max_failed_nas_trial, by default --max_nas_trial."""
  return (args.max_failed_nas_trial if args.max_failed_nas_trial is not None
          else args.max_nas_trial)


def exceeded(failed: int, limit: int) -> str:
  return f"search stopped: {failed} failed trials exceed --max_failed_nas_trial {limit}"


def check_scheduler(args: SearchArgs) -> None:
  s = args.scheduler
  scheduler_lib.check(s.name, s.min_steps if s.early_stopping else None,
                      s.reduction_factor if s.early_stopping else None,
                      multi_objective=bool(args.objectives))


def check_budget(s: scheduler_lib.SchedulerSettings, train_steps: int) -> None:
  """Early stopping needs a rung below the trials' budget (known once the config is built)."""
  if s.early_stopping:
    scheduler_lib.check_budget(s.name, s.min_steps, s.reduction_factor, train_steps)
