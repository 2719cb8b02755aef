"""A warm worker per search slot on a Ray node: the actor of `--trial_isolation worker`.

Each slot of the search (`--max_parallel_nas_trial`) is one Ray actor holding the CPUs/GPUs a
trial asks for (Ray sets CUDA_VISIBLE_DEVICES). The actor starts the same warm worker
`search_in_local` uses (nascli/search/worker.py, through warm_workers.Worker) on its node and
hands it attempt after attempt, so TensorFlow is imported once per worker, not once per trial.
What a worker's death means is the rule of `search_in_local`, in the same code
(warm_workers.Attempt): a worker that dies under an attempt it accepted, or ends after a failed
trial, fails that attempt (its exit code and a reason) and the actor starts a fresh one for the
next; one that dies before it accepted the attempt (between trials) hands it to a fresh worker
at no cost to the trial. A worker is recycled after `--max_trials_per_worker`, and killed past
`--trial_timeout` (counted from when it accepted the attempt). Workers die with their actor
(PR_SET_PDEATHSIG), and actors with the driver's Ray job.
"""

import os
import subprocess
import tempfile
import threading
import time
from concurrent import futures
from typing import Any

from nascli.search import executors
from nascli.search import ray_remote
from nascli.search import warm_workers

_POLL_S = 0.1  # how often an actor looks for its worker's answer


class TrialActor:
  """One slot of a search, on the node Ray placed it: a warm worker there, given attempt after
  attempt (`run`), replaced when it died, failed or served its `max_trials_per_worker`.
  Threaded (two calls at once) so that `interrupt` reaches a worker while `run` waits on it."""

  def __init__(self, name: str, max_trials_per_worker: int, trial_timeout: float | None = None):
    self._name = name
    self._max = max_trials_per_worker
    self._timeout = trial_timeout
    self._worker: warm_workers.Worker | None = None
    self._started = 0
    self._lock = threading.Lock()
    self._busy: warm_workers.Attempt | None = None  # the attempt under way
    self._stop: int | None = None  # the signal of an interrupt (the search is stopping)
    # Workers start from this one thread, which lives as long as the actor: PR_SET_PDEATHSIG
    # fires when the *thread* that started a process ends, and Ray's method threads are Ray's.
    self._spawner = futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="nascli-spawn")

  def run(self, spec_path: str, trial_dir: str, cwd: str,
          shipped: dict[str, Any] | None = None) -> executors.Outcome:
    """One attempt to its end (warm_workers.Attempt says how it ended)."""
    if shipped is None:
      return ray_remote.placed(self._attempt(spec_path, trial_dir, cwd, os.path.join(
          os.path.dirname(trial_dir), warm_workers.WORKER_LOGS)))
    from nascli.search import workspace  # pylint: disable=g-import-not-at-top
    with tempfile.TemporaryDirectory(prefix="nascli-trial-") as job:
      spec_path, trial_dir = ray_remote.unship(shipped, job)
      result = self._attempt(spec_path, trial_dir, cwd, None)
      workspace.upload_trial(trial_dir, shipped["publish_to"])
    return ray_remote.placed(result)

  def where(self) -> dict[str, str] | None:
    """Its node, asked as an attempt starts: an attempt lost with its node returns nothing."""
    return ray_remote.where()

  def _ready_worker(self, cwd: str, log_dir: str | None) -> warm_workers.Worker:
    worker = self._worker
    if worker is not None and worker.usable():
      return worker
    if worker is not None:
      worker.close()
    self._started += 1
    log = (os.path.join(log_dir, f"ray-{self._name}-{self._started}.log") if log_dir
           else ray_remote.own_log())
    self._worker = self._spawner.submit(
        warm_workers.Worker, None, cwd if os.path.isdir(cwd) else None, log, self._max).result()
    return self._worker

  def _attempt(self, spec_path: str, trial_dir: str, cwd: str,
               log_dir: str | None) -> executors.Outcome:
    attempt = warm_workers.Attempt(lambda: self._ready_worker(cwd, log_dir), spec_path,
                                   trial_dir, where=f", on {ray_remote.node_label()}",
                                   timeout_s=self._timeout)
    with self._lock:
      self._busy, stop = attempt, self._stop
    if stop is not None:  # the interrupt came while the attempt was being handed over
      attempt.stop(stop)
    try:
      while (outcome := attempt.poll()) is None:
        time.sleep(_POLL_S)
    finally:
      with self._lock:
        self._busy = None
    return outcome

  def interrupt(self, signum: int, grace_s: float) -> None:
    """Passes `signum` on to the busy worker (its trial records `interrupted`, answers and the
    worker exits); waits up to `grace_s` for it, then kills it."""
    with self._lock:
      self._stop, attempt = signum, self._busy
    if attempt is None:
      return
    attempt.stop(signum)
    worker = attempt.worker
    try:
      worker.process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
      worker.process.kill()
      worker.process.wait()

  def close(self) -> None:
    """Ends the idle worker the way it ends locally (its channel closed: it cleans up and
    exits), rather than by the SIGKILL it would get as its actor goes."""
    if self._worker is not None:
      self._worker.close()
      self._worker = None

