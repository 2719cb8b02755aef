"""The driver's side of warm trial workers (nascli/search/worker.py): start, talk, replace.

A `Worker` is one `python -m nascli.search.worker` process: requests go to its stdin, answers
come back on a pipe of their own (its stdout and stderr belong to the request's log). It runs in
a process group of its own (a Ctrl-C at the terminal reaches the driver alone, which passes one
signal on) and dies with the driver (PR_SET_PDEATHSIG). `WarmExecutor` keeps one worker per
slot (a GPU, or a share of the CPU), gives it trial after trial, and replaces a worker that
died, that ended after a failed trial, or that has served its `--max_trials_per_worker`.

What a worker's death means for a trial is decided in one place, `Attempt`, which both this
executor and Ray's (ray_executor.TrialActor) follow their attempts with: a worker that died
before it accepted the trial (between trials, say, while it freed the last one, or as it
started) ran none of it, and a fresh worker takes the trial at no cost to it; one that died
after it accepted the trial fails that trial, as a trial process that dies does.
"""

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable

from nascli.search import trial_processes

DEFAULT_MAX_TRIALS = 10  # per worker: then a fresh one, so memory cannot creep
WORKER_LOGS = "workers"  # in the job's work dir: each worker's output outside its requests
WORKER_MODULE = "nascli.search.worker"  # what a worker process runs, as `python -m`
# Fresh workers in a row that may take over an attempt whose worker died before accepting it;
# past that the workers themselves are suspect, and the attempt is `lost` (the search loop
# retries it, up to --max_trial_retries).
MAX_HANDOVERS = 2
_STOP_S = 10.0  # how long a worker whose channel closed gets to exit before it is killed


class Worker:
  """One worker process and its two channels."""

  def __init__(self, env: dict[str, str] | None, cwd: str | None, log_path: str,
               max_requests: int = DEFAULT_MAX_TRIALS, check_argv: list[str] | None = None):
    """`check_argv`: the worker first checks the search's config (preflight.ConfigCheck)."""
    read_end, write_end = os.pipe()
    module = ["nascli.search.preflight", *check_argv] if check_argv else [WORKER_MODULE]
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    try:
      with open(log_path, "ab") as log:
        self.process = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-m", *module, "--reply_fd", str(write_end),
             "--max_requests", str(max_requests)],
            stdin=subprocess.PIPE, stdout=log, stderr=log, env=env, cwd=cwd,
            pass_fds=(write_end,), preexec_fn=trial_processes.child_setup(), process_group=0)
    finally:
      os.close(write_end)
    os.set_blocking(read_end, False)
    self.log_path = log_path
    self._replies = read_end
    self._buffer = b""
    self._next_id = 0
    self.accepted: dict[int, float] = {}  # request id -> time.monotonic() it was seen taken
    self.done: dict[int, int] = {}  # request id -> exit code
    self.requests = 0  # sent so far
    self.max_requests = max_requests
    self.ready = False
    self.broken = False  # a request could not be sent: it closed its channel

  @property
  def pid(self) -> int:
    return self.process.pid

  def submit(self, kind: str, log: str, **payload: Any) -> int:
    """Sends a request; returns its id. OSError (BrokenPipeError): the worker has closed its
    channel (it ended, or is ending) and took nothing."""
    self._next_id += 1
    line = json.dumps({"id": self._next_id, "kind": kind, "log": log, **payload}) + "\n"
    try:
      self.process.stdin.write(line.encode("utf-8"))
      self.process.stdin.flush()
    except OSError:
      self.broken = True
      raise
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
        elif event["event"] == "accepted":
          self.accepted.setdefault(event["id"], time.monotonic())
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
    return (self.exit_code() is None and not self.broken
            and self.requests < self.max_requests
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


def take_idle_worker(executor: trial_processes.Executor) -> Worker | None:
  """A warm worker the executor no longer needs (the search's trials are done), or None."""
  if isinstance(executor, WarmExecutor):
    for slot, worker in list(executor._workers.items()):  # pylint: disable=protected-access
      if worker.usable():
        del executor._workers[slot]  # pylint: disable=protected-access
        return worker
  return None


def start_config_check(executor: trial_processes.Executor, check: Any, log_dir: str) -> Worker:
  """The worker that checks the search's config (preflight.ConfigCheck) before any trial: the
  first warm worker of a WarmExecutor (it goes on to run trials, its log in `log_dir`), else
  one of its own, logging in the check's folder (ended by its close())."""
  if isinstance(executor, WarmExecutor):
    return executor.start_checking(check, log_dir)
  return Worker(None, os.getcwd(), os.path.join(check.folder, "config-check.log"),
                max_requests=1, check_argv=check.argv())


class Attempt:
  """A trial attempt on a slot's warm worker, followed to its end: what a worker's exit means
  for the trial, for this machine's executor and Ray's alike (see the module docstring).

  `fresh` returns the slot's worker, a new one where the last is not usable. A worker that
  ended before it accepted the attempt (worker.py's `accepted`; a request it could not even be
  sent is the same) hands it to a fresh worker, noted in the trial's log, up to
  MAX_HANDOVERS times; then the attempt is `lost`. One that ended after it accepted the attempt
  fails it with its exit code. Past `timeout_s` after it was accepted (--trial_timeout), the
  attempt is killed with its worker and fails with the reason `timeout`. An interrupted attempt
  (`stop`) is never handed over: the search is stopping.
  """

  def __init__(self, fresh: Callable[[], Worker], spec_path: str, trial_dir: str,
               where: str = "", timeout_s: float | None = None):
    self._fresh = fresh
    self.spec_path = spec_path
    self.trial_dir = trial_dir
    self.log = os.path.join(trial_dir, trial_processes.TRIAL_LOG)
    self._where = where  # e.g. ", on node 10.0.0.2", after the worker's pid in a reason
    self.timeout_s = timeout_s
    self.handovers = 0
    self.stopping: int | None = None  # the signal of an interrupt
    self.worker: Worker
    self._request: int | None = None
    open(self.log, "ab").close()  # there from the start, as a trial process's log is
    self._send()

  def _send(self) -> None:
    self.worker = self._fresh()
    try:
      self._request = self.worker.submit("trial", self.log, spec=self.spec_path)
    except OSError:  # it ended since it was found usable: poll() hands the attempt over
      self._request = None
    if self.stopping is not None:  # an interrupt came while the attempt was being handed over
      self.worker.signal(self.stopping)

  def _dead(self, how: str) -> str:
    return f"the trial's worker (pid {self.worker.pid}{self._where}) {how}"

  def poll(self) -> trial_processes.Outcome | None:
    """None while the attempt runs (or waits for its worker), else how it ended."""
    while True:
      worker, request = self.worker, self._request
      if request is not None:
        code = worker.result(request)
        exited = worker.exit_code()
        if code is None and exited is not None:
          code = worker.result(request)  # it may have answered just before it ended
        if code is not None:
          return trial_processes.Outcome(returncode=code)
        if exited is None:
          return self._past_timeout()
        if request in worker.accepted:
          return trial_processes.Outcome(returncode=exited, error=self._dead(died(exited)))
      ended = self._hand_over()
      if ended is not None:
        return ended

  def _hand_over(self) -> trial_processes.Outcome | None:
    """The worker ended before it accepted the attempt: a fresh one takes it (None), unless the
    search is stopping or MAX_HANDOVERS fresh workers already died so (its outcome)."""
    self.worker.close()  # reaped (its channel is closed: it is gone or going)
    code = self.worker.exit_code()
    how = self._dead(f"{died(code)} before it accepted the trial")
    if self.stopping is not None:
      return trial_processes.Outcome(returncode=code, error=how)
    if self.handovers >= MAX_HANDOVERS:
      return trial_processes.Outcome(lost=f"{how}, as {self.handovers + 1} workers in a row did; see"
                                    f" {self.worker.log_path}")
    self.handovers += 1
    with open(self.log, "a", encoding="utf-8") as log:
      log.write(f"nascli: {how}; a fresh worker takes it\n")
    self._send()
    return None

  def _past_timeout(self) -> trial_processes.Outcome | None:
    if not trial_processes.past(self.worker.accepted.get(self._request), self.timeout_s):
      return None
    outcome = trial_processes.timed_out(self.worker.process, self.trial_dir, self.timeout_s)
    return outcome if outcome.error else None  # None: it ended by itself, poll() reads how

  def stop(self, signum: int) -> None:
    """Passes an interrupt on to the worker running the attempt."""
    self.stopping = signum
    self.worker.signal(signum)


@trial_processes.register_local_executor("worker")
class WarmExecutor(trial_processes.LocalExecutor):
  """Trial attempts on this machine in warm workers, one per slot."""

  def __init__(self, stderr_print=None, max_trials_per_worker: int = DEFAULT_MAX_TRIALS,
               trial_timeout: float | None = None):
    super().__init__(stderr_print, trial_timeout)
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
            publish_to: str | None = None) -> Attempt:
    del publish_to  # on this machine: the driver's workspace publishes the trial folder
    log_dir = os.path.join(os.path.dirname(os.path.abspath(trial_dir)), WORKER_LOGS)
    return Attempt(lambda: self._worker(slot, log_dir), os.path.abspath(spec_path), trial_dir,
                   timeout_s=self.trial_timeout)

  def poll(self, handle: Attempt) -> trial_processes.Outcome | None:
    return handle.poll()

  def interrupt(self, handles: list[Attempt], signum: int) -> None:
    """Passes `signum` on to the busy workers; each trial records `interrupted`, answers and
    its worker exits. Waits up to INTERRUPT_GRACE_S, then kills what is left."""
    for handle in handles:
      handle.stop(signum)
    busy = {h.worker.pid: h.worker for h in handles}
    deadline = time.monotonic() + trial_processes.INTERRUPT_GRACE_S
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
