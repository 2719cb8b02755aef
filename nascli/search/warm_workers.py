"""The driver's side of warm trial workers (nascli/search/worker.py): start, talk, replace.

A `Worker` is one `python -m nascli.search.worker` process: requests go to its stdin, answers
come back on a pipe of their own (its stdout and stderr belong to the request's log). It runs in
a process group of its own (a Ctrl-C at the terminal reaches the driver alone, which passes one
signal on) and dies with the driver (PR_SET_PDEATHSIG). `WarmExecutor` keeps one worker per
slot (a GPU, or a share of the CPU), gives it trial after trial, and replaces a worker that
died, that ended after a failed trial, or that has served its `--max_trials_per_worker`.
"""

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from nascli.search import executors

DEFAULT_MAX_TRIALS = 10  # per worker: then a fresh one, so memory cannot creep
WORKER_LOGS = "workers"  # in the job's work dir: each worker's output outside its requests
_STOP_S = 10.0  # how long a worker whose channel closed gets to exit before it is killed


class Worker:
  """One worker process and its two channels."""

  def __init__(self, env: dict[str, str] | None, cwd: str | None, log_path: str,
               max_requests: int = DEFAULT_MAX_TRIALS, check_argv: list[str] | None = None):
    """`check_argv`: the worker first checks the search's config (preflight.ConfigCheck)."""
    read_end, write_end = os.pipe()
    module = ["nascli.search.preflight", *check_argv] if check_argv else ["nascli.search.worker"]
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    try:
      with open(log_path, "ab") as log:
        self.process = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-m", *module, "--reply_fd", str(write_end),
             "--max_requests", str(max_requests)],
            stdin=subprocess.PIPE, stdout=log, stderr=log, env=env, cwd=cwd,
            pass_fds=(write_end,), preexec_fn=executors.die_with_parent, process_group=0)
    finally:
      os.close(write_end)
    os.set_blocking(read_end, False)
    self.log_path = log_path
    self._replies = read_end
    self._buffer = b""
    self._next_id = 0
    self.done: dict[int, int] = {}  # request id -> exit code
    self.requests = 0  # sent so far
    self.max_requests = max_requests
    self.ready = False

  @property
  def pid(self) -> int:
    return self.process.pid

  def submit(self, kind: str, log: str, **payload: Any) -> int:
    """Sends a request; returns its id."""
    self._next_id += 1
    line = json.dumps({"id": self._next_id, "kind": kind, "log": log, **payload}) + "\n"
    self.process.stdin.write(line.encode("utf-8"))
    self.process.stdin.flush()
    self.requests += 1
    return self._next_id

  def _read(self) -> None:
    while self._replies is not None:
      try:
        chunk = os.read(self._replies, 65536)
      except BlockingIOError:
        return
      if not chunk:
        return
      self._buffer += chunk
      *lines, self._buffer = self._buffer.split(b"\n")
      for line in lines:
        event = json.loads(line)
        if event["event"] == "ready":
          self.ready = True
        elif event["event"] == "done":
          self.done[event["id"]] = event["returncode"]

  def result(self, request_id: int) -> int | None:
    """The request's exit code once it is answered, else None."""
    self._read()
    return self.done.get(request_id)

  def exit_code(self) -> int | None:
    return self.process.poll()

  def usable(self) -> bool:
    """Alive, not spent, and not left by a failed request."""
    return (self.exit_code() is None and self.requests < self.max_requests
            and all(code == 0 for code in self.done.values()))

  def signal(self, signum: int) -> None:
    if self.exit_code() is None:
      self.process.send_signal(signum)

  def close(self, wait_s: float = _STOP_S) -> None:
    """Closes the request channel (the worker exits when it sees that), then reaps it; one
    still loading TensorFlow (nothing of it to keep) is killed at once."""
    try:
      self.process.stdin.close()
    except OSError:
      pass
    self._read()
    if not self.ready and self.exit_code() is None:
      self.process.kill()
    try:
      self.process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
      self.process.kill()
      self.process.wait()
    if self._replies is not None:
      self._read()  # the last answers stay readable through result()
      os.close(self._replies)
      self._replies = None


def died(code: int) -> str:
  """How a worker's exit code reads in a trial's failure reason."""
  if code < 0:
    try:
      return f"was killed by {signal.Signals(-code).name}"
    except ValueError:
      return f"was killed by signal {-code}"
  return f"exited with code {code}"


def take_idle_worker(executor: executors.Executor) -> Worker | None:
  """A warm worker the executor no longer needs (the search's trials are done), or None."""
  if isinstance(executor, WarmExecutor):
    for slot, worker in list(executor._workers.items()):  # pylint: disable=protected-access
      if worker.usable():
        del executor._workers[slot]  # pylint: disable=protected-access
        return worker
  return None


def start_config_check(executor: executors.Executor, check: Any, log_dir: str) -> Worker:
  """The worker that checks the search's config (preflight.ConfigCheck) before any trial: the
  first warm worker of a WarmExecutor (it goes on to run trials, its log in `log_dir`), else
  one of its own, logging in the check's folder (ended by its close())."""
  if isinstance(executor, WarmExecutor):
    return executor.start_checking(check, log_dir)
  return Worker(None, os.getcwd(), os.path.join(check.folder, "config-check.log"),
                max_requests=1, check_argv=check.argv())


class _Assignment:
  """A trial attempt given to a worker: the executor's handle of it."""

  def __init__(self, worker: Worker, request_id: int):
    self.worker = worker
    self.request_id = request_id


@executors.register_local_executor("worker")
class WarmExecutor(executors.LocalExecutor):
  """Trial attempts on this machine in warm workers, one per slot."""

  def __init__(self, stderr_print=None, max_trials_per_worker: int = DEFAULT_MAX_TRIALS):
    super().__init__(stderr_print)
    self.max_trials_per_worker = max_trials_per_worker
    self._workers: dict[int, Worker] = {}  # slot index -> its current worker
    self._slot_values: list[Any] = []
    self._started = 0

  def slots(self, max_parallel: int) -> list[Any]:
    self._slot_values = super().slots(max_parallel)
    return list(range(len(self._slot_values)))  # a worker per slot index

  def prestart(self, count: int, log_dir: str) -> None:
    """Starts the workers of the first `count` slots now, so that their imports overlap the
    driver's own start (the search loop calls this while the first worker checks the config)."""
    for slot in self.slots(count):
      self._worker(slot, log_dir)

  def start_checking(self, check: Any, log_dir: str) -> Worker:
    """Starts slot 0's worker, which checks the search's config (preflight.py) first."""
    slot = self.slots(1)[0]
    return self._worker(slot, log_dir, check_argv=check.argv())

  def _worker(self, slot: int, log_dir: str, check_argv: list[str] | None = None) -> Worker:
    worker = self._workers.get(slot)
    if worker is not None and worker.usable():
      return worker
    if worker is not None:
      worker.close()
    env = dict(os.environ)
    gpu = self._slot_values[slot] if slot < len(self._slot_values) else None
    if gpu is not None:
      env["CUDA_VISIBLE_DEVICES"] = gpu
    self._started += 1
    log = os.path.join(log_dir, f"worker-{self._started}.log")
    worker = self._workers[slot] = Worker(env, os.getcwd(), log, self.max_trials_per_worker,
                                          check_argv=check_argv)
    return worker

  def start(self, spec_path: str, trial_dir: str, slot: Any,
            publish_to: str | None = None) -> _Assignment:
    del publish_to  # on this machine: the driver's workspace publishes the trial folder
    worker = self._worker(slot, os.path.join(os.path.dirname(os.path.abspath(trial_dir)),
                                             WORKER_LOGS))
    log = os.path.join(trial_dir, executors.TRIAL_LOG)
    open(log, "ab").close()  # there from the start, as a trial process's log is
    request = worker.submit("trial", log, spec=os.path.abspath(spec_path))
    return _Assignment(worker, request)

  def poll(self, handle: _Assignment) -> executors.Outcome | None:
    worker = handle.worker
    code = worker.result(handle.request_id)
    if code is None:
      exited = worker.exit_code()
      if exited is None:
        return None
      code = worker.result(handle.request_id)  # it may have answered just before it ended
      if code is None:
        return executors.Outcome(returncode=exited,
                                 error=f"the trial's worker (pid {worker.pid}) {died(exited)}")
    return executors.Outcome(returncode=code)

  def interrupt(self, handles: list[_Assignment], signum: int) -> None:
    """Passes `signum` on to the busy workers; each trial records `interrupted`, answers and
    its worker exits. Waits up to INTERRUPT_GRACE_S, then kills what is left."""
    busy = {h.worker.pid: h.worker for h in handles}
    for worker in busy.values():
      worker.signal(signum)
    deadline = time.monotonic() + executors.INTERRUPT_GRACE_S
    for worker in busy.values():
      try:
        worker.process.wait(timeout=max(0.0, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        worker.process.kill()
        worker.process.wait()
      worker.result(-1)  # reads the last answers, for poll()

  def close(self) -> None:
    for worker in self._workers.values():
      worker.close()
    self._workers.clear()
