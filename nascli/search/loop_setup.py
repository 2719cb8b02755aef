"""A search before its first event: the checks that need no worker, the trials' config built
and checked in the first warm worker (preflight.py) while the others start, the scheduler's
settings resolved against it, the latency model matched with the space, and the space and
controller settings checked; a bad setting costs one worker's start, and nothing is written."""

from __future__ import annotations

import os
from typing import Any

from nascli import console
from nascli.errors import NascliError
from nascli.search import attempts
from nascli.search import executors
from nascli.search import hparams
from nascli.search import journal as journal_lib
from nascli.search import latency_gate
from nascli.search import live_view
from nascli.search import outputs  # noqa: F401  pylint: disable=unused-import (the writers)
from nascli.search import pareto as pareto_lib
from nascli.search import preflight
from nascli.search import reward as reward_lib
from nascli.search import scheduler as scheduler_lib
from nascli.search import search_args
from nascli.search import warm_workers
from nascli.search import workspace as workspace_lib
from nascli.search import writers
from nascli.search.search_args import SearchArgs

stderr = console.stderr()


class LoopSetup:
  """SearchLoop's part that prepares a search before anything is journaled."""

  _auto_name: str | None = None  # what --early_stopping auto chose (None: not auto)
  _auto_note: str | None = None  # and why, said once the job's settings are accepted
  _few_trials: str | None = None  # a named scheduler's warning: too few trials for its ladder
  _serving_size: int | None = None  # the latency input size the config gives (preflight)
  gate: latency_gate.Gate | None = None  # --latency_model

  def _setup(self, args: SearchArgs, executor: executors.Executor | None) -> None:
    """Everything checked before the first event is journaled; the executor is closed if a
    check fails."""
    self.args = args
    self.executor = executor or executors.local_executor(
        args.trial_isolation, stderr_print=stderr.print,
        max_trials_per_worker=args.max_trials_per_worker, trial_timeout=args.trial_timeout)
    reward_lib.check(args.trial.latency_constraint, args.trial.target_device_latency_ms,
                     args.trial.latency_weight)
    self.objectives = pareto_lib.parse_objectives(args.objectives) if args.objectives else None
    self.num_objectives = len(self.objectives) if self.objectives else 1
    # pylint: disable-next=g-import-not-at-top,redefined-outer-name
    from nascli.search import controller as controller_lib
    controller_lib.check_objectives(args.search_algorithm, self.num_objectives)
    if args.max_nas_trial < 1 or args.max_parallel_nas_trial < 1:
      raise NascliError("--max_nas_trial and --max_parallel_nas_trial must be at least 1")
    search_args.check_scheduler(args)
    if args.scheduler.name != scheduler_lib.AUTO:
      self.scheduler = scheduler_lib.make(args.scheduler)
    self.max_failed = search_args.max_failed(args)
    # --latency_model: loaded (and its file checked) before a worker starts; matched with the
    # space and the latency input size once the config is checked, before anything is journaled.
    self.gate = (latency_gate.Gate(args.trial, self.objectives) if args.trial.latency_model
                 else None)
    self.journal = journal_lib.journal_for(args.job_dir)
    self.workspace = workspace_lib.for_job_dir(args.job_dir)
    self.work_dir = self.workspace.work_dir  # where trial folders are written
    # The trials' config is built and checked once, in the first worker (it loads TensorFlow
    # anyway), before this process loads TensorFlow or journals anything (preflight.py); the
    # other warm workers load TensorFlow meanwhile.
    log_dir = os.path.join(self.work_dir, warm_workers.WORKER_LOGS)
    check = preflight.prepare(args)
    try:
      checker = warm_workers.start_config_check(self.executor, check, log_dir)
      try:
        self.executor.prestart(min(args.max_parallel_nas_trial, args.max_nas_trial), log_dir)
        if self.gate is not None:  # a model of another space is refused before TensorFlow is up
          self._load_space()
          self.gate.check_space(self.space_name, self.space, args.trial.latency_input_size)
        checked = preflight.wait(check, checker, checker.log_path)
      finally:
        if not isinstance(self.executor, warm_workers.WarmExecutor):
          checker.close()
        check.remove()
      settings, why = scheduler_lib.resolve(args.scheduler, checked["train_steps"],
                                            checked.get("steps_per_epoch"),
                                            multi_objective=bool(args.objectives),
                                            max_trials=args.max_nas_trial)
      settings, why = search_args.as_journaled(args, settings, why)
      # Said once the job's settings are accepted (_search): a refused command prints one line.
      self._auto_note = why
      self._auto_name = settings.name
      # A scheduler the user named, with fewer trials than its ladder needs: one warning line.
      self._few_trials = scheduler_lib.few_trials(settings, checked["train_steps"],
                                                  args.max_nas_trial)
      self.scheduler = scheduler_lib.make(settings)
      search_args.check_budget(settings, checked["train_steps"])
      self.train_steps = checked["train_steps"]
      self._serving_size = checked.get("latency_input_size")  # where trials time themselves
      if self.gate is None:
        self._load_space()
      else:  # the input size the trials' latency is for: the config's, known now
        if args.trial.latency_input_size is None:
          self.gate.check_space(self.space_name, self.space, checked.get("latency_input_size"))
        self.gate.check_target(self.space_name)
    except BaseException:
      self.executor.close()
      raise

  def _load_space(self) -> None:
    args = self.args
    # pylint: disable=g-import-not-at-top,redefined-outer-name
    # No TensorFlow here: the spaces, the controller (pyglove), the journal and the derived
    # outputs (results.py) need none; the trials' workers load it.
    from nascli.search import controller as controller_lib
    from tf_vision import search_spaces
    # The trials resolve the same pair (their TrialSpec carries it) and decode against it.
    entry = search_spaces.resolve_search_space(args.search_space, args.search_space_module)
    self.space_name = entry.name
    self.space = entry.build()
    # Settings errors surface before anything is written: a job dir recorded with a bad setting
    # would refuse the corrected command as "other settings".
    controller_lib.make_algorithm(args.search_algorithm, args.seed, self.num_objectives,
                                  **args.algorithm_options)
    self.metric = entry.require_binding().metric  # what `accuracy` is
    self._running: dict[str, attempts.Running] = {}  # attempts started, until their outcome is recorded
    self._slots: dict[str, Any] = {}  # trial id -> the slot of its last attempt
    self._ctl: controller_lib.Controller | None = None
    self._progress = live_view.Progress(self)
    # Every candidate of every decision, so TensorBoard's HParams view hides no trial.
    self.decision_domains = hparams.decision_domains(self.space)
    self.outputs = writers.Outputs(args.job_dir, self.decision_domains)
