"""Training on Model Garden's own runner, with the run-level behaviour nascli promises.

Model Garden's `train_lib.run_experiment` does the training, checkpointing, resume and summaries;
this module adds what it lacks as Orbit train actions: the THOR-style log line
(`epoch: E step: S, loss is L`) in `<model_dir>/log` and on stderr, a progress report, a hard
stop with `job_status.json` on a NaN or infinite loss, a log whose step sequence stays clean
across a kill and resume, and a Ctrl-C or SIGTERM that stops training at the next step (inside a
training loop, whatever `trainer.steps_per_loop`), saves a checkpoint there and leaves
`interrupted` in job_status.json.

A run may also stop at a step short of `trainer.train_steps` (`stop_at_step`: a search
scheduler's rung): it trains to that step with everything else,
learning-rate schedule included, that of the full `train_steps`, saves a checkpoint there,
evaluates, and leaves `paused` in job_status.json; run again without a stop (or with a later
one) it resumes from that checkpoint, so no step is trained twice. A process that trains rung after
rung (a search's warm worker) may keep a paused run in memory (`keep_paused`, `PausedRuns`): its
next rung then continues with the same model, optimizer, input iterator and traced functions,
without building, tracing or restoring anything, and trains exactly what resuming from the
checkpoint would.
"""

import collections
import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import signal
import sys
import time
from typing import Any, Callable

import orbit
import tensorflow as tf
import tf_keras

from nascli import interrupts
from nascli.errors import NascliError
from official.core import base_task, base_trainer, task_factory, train_lib, train_utils
from official.core import config_definitions as cfg
from tf_vision import eval_lib, job_status
from tf_vision import registry_imports  # noqa: F401  pylint: disable=unused-import
from tf_vision.optimization import thor
from tf_vision.optimization import wrappers

LOG_FILE = "log"
METRICS_FILE = "train_metrics.jsonl"
# {"step": S, metric: value, ...} per evaluation during training (`curve_interval`), then the
# final evaluation's: the validation curve the proxy-task commands read without TensorFlow.
CURVE_FILE = "validation_curve.jsonl"
_LOG_LINE = re.compile(r"^epoch: (\d+) step: (\d+), loss is \S+$")


class NonFiniteLossError(NascliError):
  """Training produced a NaN or infinite loss; the run stops instead of saving garbage."""


@dataclasses.dataclass
class LoopReport:
  """What the progress display gets after each training loop."""
  step: int
  total_steps: int
  epoch: int
  step_in_epoch: int
  loss: float
  learning_rate: float | None
  steps_per_second: float
  images_per_second: float
  line: str


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.cluster_spec().as_dict():
    return True
  task_type, task_id = resolver.task_type, resolver.task_id
  has_chief = "chief" in resolver.cluster_spec().as_dict()
  return task_type == "chief" or (not has_chief and task_type == "worker" and task_id == 0)


def _num_workers(strategy: tf.distribute.Strategy) -> int:
  resolver = getattr(strategy, "cluster_resolver", None)
  spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
  return max(1, sum(len(spec.get(role, [])) for role in ("chief", "worker")))


def _scalar(value: Any) -> float | None:
  try:
    return float(value.numpy() if hasattr(value, "numpy") else value)
  except (TypeError, ValueError):
    return None


class StepLog:
  """The THOR-style log file, kept consistent with the checkpoint the run resumed from."""

  def __init__(self, model_dir: str, steps_per_epoch: int, write: bool):
    self.path = os.path.join(model_dir, LOG_FILE)
    self.steps_per_epoch = max(1, steps_per_epoch)
    self.write_enabled = write

  def global_step(self, line: str) -> int | None:
    m = _LOG_LINE.match(line.strip())
    if not m:
      return None
    return (int(m.group(1)) - 1) * self.steps_per_epoch + int(m.group(2))

  def truncate_after(self, step: int) -> int:
    """Drops lines of steps after `step` (rolled back by a resume); returns how many."""
    if not self.write_enabled or not os.path.exists(self.path):
      return 0
    with open(self.path, encoding="utf-8") as f:
      lines = f.readlines()
    keep = [l for l in lines if (self.global_step(l) or 0) <= step]
    if len(keep) != len(lines):
      tmp = self.path + ".tmp"
      with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(keep)
      os.replace(tmp, self.path)
    return len(lines) - len(keep)

  def line(self, step: int) -> tuple[int, int]:
    """(epoch, step in epoch) as MindSpore's LossMonitor counts them."""
    return (step - 1) // self.steps_per_epoch + 1, (step - 1) % self.steps_per_epoch + 1

  def append(self, text: str) -> None:
    if self.write_enabled:
      with open(self.path, "a", encoding="utf-8") as f:
        f.write(text + "\n")


class LoopAction:
  """Orbit train action: checks the loss, writes the log line and reports progress."""

  def __init__(self, global_step: tf.Variable, step_log: StepLog, total_steps: int,
               global_batch_size: int, model_dir: str, on_loop: Callable[[LoopReport], None],
               write_files: bool, loss_upper_bound: float | None = None):
    self.global_step = global_step
    self.step_log = step_log
    self.total_steps = total_steps
    self.global_batch_size = global_batch_size
    self.metrics_path = os.path.join(model_dir, METRICS_FILE)
    self.on_loop = on_loop
    self.write_files = write_files
    self.loss_upper_bound = loss_upper_bound
    self._last = (int(global_step.numpy()), time.monotonic())
    # The last step whose line, metrics and progress report are all written.
    self.recorded_step = self._last[0]
    # (steps, seconds) of each loop; the first one also pays for tracing and the input pipeline.
    self.loops: list[tuple[int, float]] = []

  def restart(self, on_loop: Callable[[LoopReport], None]) -> None:
    """A kept run's next call: its own progress report, and loop times from now."""
    self.on_loop = on_loop
    self._last = (int(self.global_step.numpy()), time.monotonic())
    self.loops = []

  def __call__(self, output: dict) -> None:
    step = int(self.global_step.numpy())
    if step == self._last[0]:
      return  # a loop that a stop ended before its first step: its line is the last one
    loss = _scalar(output.get("training_loss", output.get("loss")))
    if loss is None or not math.isfinite(loss):
      raise NonFiniteLossError(f"training loss is {loss} at step {step}: stopping (lower the"
                               " learning rate, or check the data)")
    if self.loss_upper_bound and loss > self.loss_upper_bound:
      # Model Garden's own recovery action would raise a bare RuntimeError here.
      raise NonFiniteLossError(f"training loss is {loss:.4g} at step {step}, above"
                               f" trainer.loss_upper_bound {self.loss_upper_bound:g}: diverged,"
                               " stopping (lower the learning rate)")
    last_step, last_time = self._last
    now = time.monotonic()
    rate = (step - last_step) / max(now - last_time, 1e-9)
    self._last = (step, now)
    self.loops.append((step - last_step, now - last_time))
    epoch, in_epoch = self.step_log.line(step)
    text = f"epoch: {epoch} step: {in_epoch}, loss is {loss:.7g}"
    self.step_log.append(text)
    lr = _scalar(output.get("learning_rate"))
    if self.write_files:
      with open(self.metrics_path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": step, "loss": loss, "learning_rate": lr,
                            "steps_per_second": rate}) + "\n")
    self.on_loop(LoopReport(step=step, total_steps=self.total_steps, epoch=epoch,
                            step_in_epoch=in_epoch, loss=loss, learning_rate=lr,
                            steps_per_second=rate,
                            images_per_second=rate * self.global_batch_size, line=text))
    self.recorded_step = step


class _StopFlag:
  """A request to end the train loop at its next step, which the compiled loop reads before each
  step: a signal's handler cannot run while the main thread waits in the loop's graph call."""

  def __init__(self):
    with tf.init_scope(), tf.device("/cpu:0"):  # the loop condition is evaluated on the host
      self.variable = tf.Variable(False, trainable=False, name="nascli_stop_training")

  def request(self) -> None:
    self.variable.assign(True)

  def requested(self) -> bool:
    return bool(self.variable.numpy())

  def trainer_cls(self) -> type:
    """Model Garden's trainer whose train loop also ends once `request` was called."""
    stop = self

    class _Trainer(base_trainer.Trainer):
      """Orbit's loop (`loop_fns.create_tf_while_loop_fn` / `create_loop_fn`) plus the check."""

      def create_train_loop_fn(self):
        options = self._train_options
        if getattr(self, "_is_async", False) or options.use_tpu_summary_optimization:
          return super().create_train_loop_fn()
        if not options.use_tf_while_loop:  # a Python loop of step calls: check between them
          step_fn = tf.function(self.train_step) if options.use_tf_function else self.train_step
          def unless_stopped(iterator):
            if not stop.requested():
              step_fn(iterator)
          return orbit.utils.create_loop_fn(unless_stopped)
        step_fn = self.train_step

        def loop_fn(iterator, num_steps):
          step = tf.constant(0)
          while tf.logical_and(step < num_steps, tf.logical_not(stop.variable.read_value())):
            with tf.name_scope(""):  # as Orbit's: no "while/" prefix on the step's ops
              step_fn(iterator)
            step += 1

        return tf.function(loop_fn)

    return _Trainer


@contextlib.contextmanager
def _short_loops_unwarned(stop: _StopFlag | None):
  """Without Orbit's warning that a train loop ran fewer steps than asked once a stop was asked
  for: that is the stop working."""
  def keep(record: logging.LogRecord) -> bool:
    return not (stop and stop.requested() and "did not update `global_step`" in str(record.msg))
  logger = logging.getLogger("absl")  # Orbit's
  logger.addFilter(keep)
  try:
    yield
  finally:
    logger.removeFilter(keep)


def _latest_step(model_dir: str) -> int:
  latest = tf.train.latest_checkpoint(model_dir)
  return int(train_utils.read_global_step_from_checkpoint(latest)) if latest else 0


def run(params: cfg.ExperimentConfig, model_dir: str, strategy: tf.distribute.Strategy,
        mode: str = "train_and_eval", steps_per_epoch: int = 0,
        on_loop: Callable[[LoopReport], None] = lambda report: None,
        on_resume: Callable[[int, bool], None] = lambda step, in_memory: None,
        keep_model: bool = False, stop_at_step: int | None = None,
        curve_interval: int | None = None, checkpoint_input: bool = False,
        keep_paused: int = 0) -> dict:
  """Trains (and evaluates) `params` in `model_dir`; resumes from its latest checkpoint.

  `stop_at_step` ends training at that step
  instead of train_steps, which still sets the schedule; the run then ends `paused`.
  `curve_interval` (with mode train_and_post_eval) also evaluates every that many steps as it
  trains; every evaluation, the final one included, is a line of CURVE_FILE.
  `checkpoint_input` also checkpoints the training input's position (one replica), so that a
  resumed run reads the batches the uninterrupted one would have (`_checkpoint_the_run_state`).
  `keep_paused` > 0: a run that ends paused stays in this process (PAUSED_RUNS, at most that
  many), and a later call for the same model dir and config whose latest checkpoint is still the
  paused step continues it in memory (`on_resume(step, True)`) instead of from the checkpoint.

  Returns {"status" (completed, or paused), "step", "resumed_from", "train_steps",
  "eval_metrics", "seconds", "num_replicas", "loops" ([steps, seconds] per train loop),
  "eval_seconds" (the final evaluation)}, plus "model" (the trained Keras model) with
  `keep_model`, for a caller that times or measures it; raises
  NonFiniteLossError (after writing job_status.json) when the loss stops being finite, and
  nascli's `interrupts.Interrupted` on SIGINT/SIGTERM: the train loop ends at its next step (it
  reads a stop flag the signal sets at once, see `interrupts.acted_on_at_once`), its log line
  and metrics are written, a checkpoint of that step is saved, and job_status.json says
  `interrupted` (see `_stop_interrupted`), so that a rerun resumes exactly there, with the same
  schedule. With several workers the signal still waits for the end of the loop (a worker that
  stopped alone would leave the others waiting in a collective).

  With several workers only the chief writes the log, job status and params; the others
  checkpoint into a temporary dir (Model Garden's rule) and resume from the chief's checkpoint
  in `model_dir`, which must then be shared.
  """
  chief = _is_chief(strategy)
  # Random layers draw from a tf.random.Generator, whose state a checkpoint keeps
  # (`_checkpoint_the_run_state`); TensorFlow's legacy random ops would restart on resume.
  tf_keras.backend.experimental.enable_tf_random_generator()
  total_steps = params.trainer.train_steps
  train_to = total_steps if stop_at_step is None else max(1, min(int(stop_at_step), total_steps))
  if chief:
    tf.io.gfile.makedirs(model_dir)
    train_utils.serialize_config(params, model_dir)
  resumed_from = _latest_step(model_dir)
  identity = json.dumps([params.as_dict(), mode, curve_interval, checkpoint_input],
                        sort_keys=True, default=str)
  kept = PAUSED_RUNS.take(model_dir, identity, resumed_from)
  step_log = StepLog(model_dir, steps_per_epoch or params.trainer.train_steps, write=chief)
  step_log.truncate_after(resumed_from)
  if resumed_from:
    on_resume(resumed_from, kept is not None)
    for name in (METRICS_FILE, CURVE_FILE):
      if chief and os.path.exists(os.path.join(model_dir, name)):
        _truncate_jsonl(os.path.join(model_dir, name), resumed_from)
  if chief:
    job_status.write(model_dir, job_status.RUNNING, step=resumed_from)
  start = time.monotonic()
  if kept is not None:  # its strategy holds its variables: it trains under that one
    state, strategy = kept, kept.strategy
    state.resumed_from, state.train_to = resumed_from, train_to
    state.action.restart(on_loop)
  else:
    state = _RunState(model_dir=model_dir, chief=chief, resumed_from=resumed_from,
                      single_worker=_num_workers(strategy) == 1, train_to=train_to,
                      strategy=strategy)
    state.stop = _StopFlag() if state.single_worker else None
  stop = state.stop

  class _Controller(orbit.Controller):
    """Orbit's controller; a signal stops it at the next step (the loop reads `stop`), and
    raises only after that loop's log line and summaries, and between checkpoint writes."""

    def _train_n_steps(self, num_steps: int):
      state.in_loop = True
      try:
        with interrupts.deferred("this training loop"):
          if stop is None or not stop.requested():  # else no step, no line or summary to add
            super()._train_n_steps(num_steps)
      finally:
        state.in_loop = False
      if stop is not None and stop.requested():  # the signal's own Interrupted did not come
        raise interrupts.Interrupted(state.stop_signal)

    def _maybe_save_checkpoint(self, check_interval: bool = True):
      state.writing_checkpoint = True
      try:
        with interrupts.deferred("writing this checkpoint"):
          return super()._maybe_save_checkpoint(check_interval)
      finally:
        state.writing_checkpoint = False

  class _Runner(train_lib.OrbitExperimentRunner):
    """Model Garden's runner with our loop action bound to its global step."""

    def _build_trainer(self, task, train, evaluate):
      if stop is None:
        trainer = super()._build_trainer(task, train, evaluate)
      else:
        with self.strategy.scope():  # as Model Garden's, with the trainer that reads `stop`
          trainer = train_utils.create_trainer(
              self.params, task, train=train, evaluate=evaluate,
              checkpoint_exporter=self._build_best_checkpoint_exporter(),
              trainer_cls=stop.trainer_cls())
      if train and state.single_worker:
        _checkpoint_the_run_state(trainer, self.strategy, checkpoint_input)
      return trainer

    def run(self):
      """Model Garden's run() without its parameter and FLOPs counts after training: they feed
      only INFO log lines nascli silences, the FLOPs count traces the model once more, and its
      Grappler pass prints C++ log lines (`devices.cc:67] Number of eligible GPUs`) that
      TF_CPP_MIN_LOG_LEVEL does not silence."""
      if self._mode not in ("train", "train_and_eval") or self._run_post_eval:
        return super().run()
      with self.strategy.scope():
        train_to = state.train_to  # this call's (a kept run is called again)
        if self._mode == "train":
          self.controller.train(steps=train_to)
        elif curve_interval:  # the curve's evaluations; the final one is eval_lib's, below
          last = (train_to - 1) // curve_interval * curve_interval
          if last > int(self.trainer.global_step.numpy()):
            self.controller.train_and_evaluate(
                train_steps=last, eval_steps=params.trainer.validation_steps,
                eval_interval=curve_interval)
          self.controller.train(steps=train_to)
        else:
          self.controller.train_and_evaluate(
              train_steps=train_to,
              eval_steps=params.trainer.validation_steps,
              eval_interval=params.trainer.validation_interval)
      return self.trainer.model, {}

    def _maybe_build_checkpoint_manager(self):
      manager = super()._maybe_build_checkpoint_manager()
      latest = tf.train.latest_checkpoint(model_dir)
      if manager is None or self.strategy.extended.should_checkpoint or latest is None:
        return manager
      # Model Garden gives a non-chief worker a fresh temporary checkpoint dir, where it finds
      # nothing to restore: it would start from scratch while the chief resumes, and their
      # collectives would mismatch. It restores the chief's latest checkpoint instead.
      return tf.train.CheckpointManager(
          manager.checkpoint, directory=manager.directory, max_to_keep=1,
          step_counter=self.trainer.global_step,
          checkpoint_interval=params.trainer.checkpoint_interval,
          init_fn=lambda: manager.checkpoint.restore(latest))

    def _build_controller(self, trainer, evaluator, save_summary=True, train_actions=None,
                          eval_actions=None, controller_cls=orbit.Controller,
                          enable_async_checkpointing=False):
      del controller_cls  # ours, which holds signals back to the end of a loop
      action = LoopAction(self.trainer.global_step, step_log, params.trainer.train_steps,
                          params.task.train_data.global_batch_size, model_dir, on_loop, chief,
                          params.trainer.loss_upper_bound)
      state.action = action
      if curve_interval and chief:
        eval_actions = [lambda logs: _append_curve(model_dir, self.trainer.global_step, logs)
                        ] + list(eval_actions or [])
      return super()._build_controller(
          trainer, evaluator, save_summary=save_summary,
          train_actions=[action] + list(train_actions or []), eval_actions=eval_actions,
          controller_cls=_Controller, enable_async_checkpointing=enable_async_checkpointing)

  def on_signal(signum: int) -> str:
    """The signal's first effect, at once (in a thread of interrupts): ends the loop."""
    if stop is None:
      return "stopping after this training loop" if state.in_loop else "stopping"
    state.stop_signal = signum
    stop.request()
    return "stopping at the next step" if state.in_loop else "stopping"

  eval_seconds = 0.0
  with interrupts.acted_on_at_once(on_signal), _short_loops_unwarned(stop):
    try:
      if kept is None:
        with strategy.scope():
          task: base_task.Task = task_factory.get_task(params.task, logging_dir=model_dir)
        # The final evaluation goes through eval_lib, the code `nascli eval` runs, so the number
        # a run reports is the number its checkpoint gives later (Model Garden's in-trainer
        # post-eval can differ in the last digit through graph-level numerics).
        runner_mode = mode
        if mode == "train_and_post_eval":  # its final evaluation is eval_lib's
          runner_mode = "train_and_eval" if curve_interval else "train"
        state.runner = _Runner(distribution_strategy=strategy, task=task, mode=runner_mode,
                               params=params, model_dir=model_dir)
        thor.maybe_attach_thor(state.runner.trainer.model,
                               state.runner.trainer.optimizer)  # THOR (issue 6)
        if "train" in mode:
          with strategy.scope():  # slots now, not while the first training loop is traced
            wrappers.create_slots(state.runner.trainer.optimizer,
                                  state.runner.trainer.model.trainable_variables)
      runner = state.runner
      _, eval_logs = runner.run()
      if mode == "train_and_post_eval":
        state.evaluating = True
        # The runner's own final checkpoint: a non-chief worker's is in its temporary dir.
        checkpoint = (runner.checkpoint_manager.latest_checkpoint
                      or tf.train.latest_checkpoint(model_dir))
        eval_start = time.monotonic()
        step = int(runner.trainer.global_step.numpy())
        # The model as trained is the checkpoint's (saved at the last step, see below): no
        # rebuild.
        trained = ((runner.trainer.model, step) if eval_lib.can_reuse_model(strategy)
                   and checkpoint and checkpoint.endswith(f"-{step}") else None)
        if trained and state.evaluator is None:  # built once, then kept with the run
          state.evaluator = eval_lib.Evaluator(params, strategy, trained[0])
        eval_logs = eval_lib.evaluate(
            params, checkpoint, strategy,
            summary_dir=os.path.join(model_dir, params.trainer.validation_summary_subdir)
            if chief else None, trained=trained,
            evaluator=state.evaluator if trained else None)["metrics"]
        state.evaluating = False
        eval_seconds = time.monotonic() - eval_start
        if curve_interval and chief:
          _append_curve(model_dir, step, eval_logs)
    except KeyboardInterrupt as e:  # interrupts.Interrupted too: SIGINT and SIGTERM
      raise _stop_interrupted(e, state, strategy) from None
    except NonFiniteLossError as e:
      if chief:
        job_status.write(model_dir, job_status.FAILED_WITH_NAN, reason=str(e))
      raise
    except Exception as e:
      if interrupts.caused(e):  # a signal that came back as TensorFlow's error
        raise _stop_interrupted(e, state, strategy) from None
      if chief:
        job_status.write(model_dir, job_status.FAILED, reason=f"{type(e).__name__}: {e}"[:500])
      raise
  actions = [state.action] if state.action else []
  step = int(runner.trainer.global_step.numpy())
  metrics = {k: _scalar(v) for k, v in (eval_logs or {}).items() if _scalar(v) is not None}
  paused = train_to < total_steps and step < total_steps
  status = job_status.PAUSED if paused else job_status.COMPLETED
  result = {"status": status, "step": step, "resumed_from": resumed_from,
            "in_memory": kept is not None, "train_steps": total_steps, "eval_metrics": metrics,
            "seconds": round(time.monotonic() - start, 3),
            "num_replicas": strategy.num_replicas_in_sync,
            "loops": [[n, round(t, 4)] for n, t in (actions[0].loops if actions else [])],
            "eval_seconds": round(eval_seconds, 3)}
  if keep_model:
    result["model"] = runner.trainer.model
  if chief:
    job_status.write(model_dir, status, step=step, eval_metrics=metrics,
                     num_replicas=strategy.num_replicas_in_sync,
                     **({"checkpoint_step": step, "train_steps": total_steps}
                        if status == job_status.PAUSED else {}))
  if paused and keep_paused > 0 and _latest_step(model_dir) == step:
    PAUSED_RUNS.keep(model_dir, identity, state, keep_paused)
  return result


class PausedRuns:
  """Runs paused at a rung that this process keeps, most recent last: model, optimizer, input
  iterator, traced train and eval functions, checkpoint manager and summary writers, as they
  were at the paused step.

  A kept run is taken (and so dropped) by the next call for its model dir: it continues only if
  that call's config is the same and the model dir's latest checkpoint is still its step (no
  other process trained the trial on since); otherwise it is let go and the call resumes from
  the checkpoint, which holds the same state. Continuing in memory thus trains exactly what
  resuming would, without the model build, the tracing and the restore.
  """

  def __init__(self):
    self._runs: collections.OrderedDict[str, tuple[str, _RunState]] = collections.OrderedDict()

  def take(self, model_dir: str, identity: str, step: int) -> "_RunState | None":
    kept = self._runs.pop(os.path.abspath(model_dir), None)
    if kept is None or kept[0] != identity:
      return None
    state = kept[1]
    return state if int(state.runner.trainer.global_step.numpy()) == step else None

  def keep(self, model_dir: str, identity: str, state: "_RunState", limit: int) -> None:
    """Keeps the run; the least recent beyond `limit` are let go."""
    state.in_loop = state.evaluating = state.writing_checkpoint = False
    self._runs[os.path.abspath(model_dir)] = (identity, state)
    while len(self._runs) > limit:
      self._runs.popitem(last=False)

  def __len__(self) -> int:
    return len(self._runs)

  def clear(self) -> None:
    self._runs.clear()


PAUSED_RUNS = PausedRuns()  # this process's


@dataclasses.dataclass
class _RunState:
  """What an interrupt handler needs to know about where the run was."""
  model_dir: str
  chief: bool
  resumed_from: int
  single_worker: bool
  runner: Any = None
  action: LoopAction | None = None
  writing_checkpoint: bool = False
  evaluating: bool = False
  in_loop: bool = False
  stop_signal: int = signal.SIGINT
  # What a paused run kept in memory continues with (PausedRuns).
  train_to: int = 0  # the step this call trains to
  strategy: Any = None
  stop: "_StopFlag | None" = None
  evaluator: Any = None  # eval_lib.Evaluator of the trained model


def _stop_interrupted(error: KeyboardInterrupt, state: _RunState,
                      strategy: tf.distribute.Strategy) -> interrupts.Interrupted:
  """Saves a checkpoint at the step reached where that is safe, writes `interrupted` to
  job_status.json, and returns the Interrupted that says where a rerun resumes.

  Safe: the trainer exists, the interrupt did not land inside a checkpoint write (its files may
  be partial), the log and metrics hold the step (see `interrupts.deferred`), and there is one
  worker (a save is collective in a cluster: a worker saving alone would wait forever).
  """
  manager = state.runner.checkpoint_manager if state.runner is not None else None
  step = (int(state.runner.trainer.global_step.numpy()) if state.runner is not None
          else state.resumed_from)
  saved = _latest_step(state.model_dir)
  if (manager is not None and step > saved and state.single_worker
      and not state.writing_checkpoint and state.action is not None
      and state.action.recorded_step == step):
    try:
      with strategy.scope():
        manager.save(checkpoint_number=step, check_interval=False)
      saved = step
    except Exception:  # pylint: disable=broad-except
      pass  # the previous checkpoint stands; the message says which
  signum = interrupts.signal_of(error)
  if state.chief:
    job_status.write(state.model_dir, job_status.INTERRUPTED, step=step, checkpoint_step=saved,
                     signal=signal.Signals(signum).name)
  doing = "evaluating" if state.evaluating else "training"
  if saved == step and saved:
    what, resume_step = f"{doing} {state.model_dir} at step {step} (checkpoint saved)", step
  elif saved:
    what = f"{doing} {state.model_dir} at step {step} (last checkpoint: step {saved})"
    resume_step = saved
  else:
    what, resume_step = f"{doing} {state.model_dir} at step {step} (no checkpoint yet)", 0
  resume = (f"run the same command again to resume from step {resume_step}" if resume_step
            else "run the same command again to start it over")
  return interrupts.Interrupted.of(error, what=what, resume=resume)


# What a checkpoint holds besides Model Garden's items (model, optimizer, global_step), so that
# a resumed run continues the uninterrupted one (`_checkpoint_the_run_state`).
INPUT_ITERATOR = "train_input_iterator"
RANDOM_GENERATORS = "random_generators"


def _checkpoint_the_run_state(trainer: Any, strategy: tf.distribute.Strategy,
                              with_input: bool) -> None:
  """Makes the training input's position and the random layers' generators part of the
  trainer's checkpoint, so that a run resumed from a checkpoint (a later early-stopping rung, a
  rerun after a kill) reads the batches and draws the dropout masks the uninterrupted run would
  have, instead of starting both over: a trial trained in rungs is the trial trained in one go.

  TensorFlow checkpoints a tf.data iterator (its shuffle buffer and cache included) but not a
  tf.distribute one, so with one replica (every search trial on this machine) Orbit is given a
  plain iterator over the task's input, which the one replica reads as it would the distributed
  one; with several replicas the input starts over on resume, as before. The input's state is
  as big as its shuffle buffer and in-memory cache, so only `with_input` (search trials, whose
  rungs resume) keeps it. The generators are the
  tf.random.Generator of each random layer (tf_keras draws from them once
  `enable_tf_random_generator` is on, see `run`), created now, before the restore. A checkpoint
  written without these restores the model and starts them afresh."""
  generators = []
  for layer in trainer.model.submodules:
    rng = getattr(layer, "_random_generator", None)
    if rng is not None and hasattr(rng, "_maybe_init"):
      rng._maybe_init()  # pylint: disable=protected-access
      if getattr(rng, "_generator", None) is not None:
        generators.append(rng._generator)  # pylint: disable=protected-access
  if generators:
    setattr(trainer.checkpoint, RANDOM_GENERATORS, generators)
  if not with_input or strategy.num_replicas_in_sync != 1:
    return
  with strategy.scope():
    dataset = trainer.task.build_inputs(trainer.config.task.train_data)
  if _has_external_state(dataset):
    # Model Garden's detection parser draws its augmentations with stateful random ops, whose
    # state a checkpoint cannot hold (TensorFlow refuses to save the iterator: "RandomUniform is
    # stateful"): the iterator is saved without it, so a resumed run continues the input's
    # order and position and draws fresh augmentations.
    options = tf.data.Options()
    options.experimental_external_state_policy = (
        tf.data.experimental.ExternalStatePolicy.IGNORE)
    dataset = dataset.with_options(options)
    print("note: the training input draws random augmentations with stateful ops: a resumed"
          " run continues its order and position, not its random draws", file=sys.stderr,
          flush=True)
  iterator = iter(dataset)
  trainer._train_iter = iterator  # pylint: disable=protected-access  (Orbit reads it)
  setattr(trainer.checkpoint, INPUT_ITERATOR, iterator)


def _has_external_state(dataset: tf.data.Dataset) -> bool:
  """The dataset's graph holds state a checkpoint cannot save (stateful random ops)."""
  try:
    tf.raw_ops.DatasetToGraphV2(
        input_dataset=dataset._variant_tensor,  # pylint: disable=protected-access
        external_state_policy=tf.data.experimental.ExternalStatePolicy.FAIL.value)
  except tf.errors.FailedPreconditionError:
    return True
  return False


def _append_curve(model_dir: str, step: Any, logs: dict) -> None:
  """One evaluation as a line of CURVE_FILE: the step and the numeric metrics."""
  line = {"step": int(step.numpy() if hasattr(step, "numpy") else step)}
  line.update({k: v for k, v in ((k, _scalar(v)) for k, v in (logs or {}).items())
               if v is not None})
  with open(os.path.join(model_dir, CURVE_FILE), "a", encoding="utf-8") as f:
    f.write(json.dumps(line) + "\n")


def _truncate_jsonl(path: str, step: int) -> None:
  with open(path, encoding="utf-8") as f:
    lines = f.readlines()
  keep = []
  for line in lines:
    try:
      if json.loads(line)["step"] <= step:
        keep.append(line)
    except (ValueError, KeyError):
      continue
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    f.writelines(keep)
  os.replace(tmp, path)
