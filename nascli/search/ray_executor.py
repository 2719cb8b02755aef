"""Trial attempts on a Ray cluster: a warm worker per slot in a Ray actor, or a Ray task each.

`--trial_isolation worker` (the default): each slot of the search (`--max_parallel_nas_trial`)
is one Ray actor holding the CPUs/GPUs a trial asks for (Ray sets CUDA_VISIBLE_DEVICES). The
actor starts the same warm worker `search_in_local` uses (nascli/search/worker.py, through
warm_workers.Worker) on its node and hands it attempt after attempt, so TensorFlow is imported
once per worker, not once per trial. What a worker's death means is the rule of
`search_in_local`, in the same code (warm_workers.Attempt): a worker that dies under an attempt
it accepted, or ends after a failed trial, fails that attempt (its exit code and a reason) and
the actor starts a fresh one for the next; one that dies before it accepted the attempt (between
trials) hands it to a fresh worker at no cost to the trial. A worker is recycled after
`--max_trials_per_worker`. An actor that dies (its process or node lost) loses its attempt: the
search loop journals it and retries, and the slot gets a new actor. Workers die with their
actor (PR_SET_PDEATHSIG), and actors with the driver's Ray job.

`--trial_isolation process`: each attempt is one Ray task that starts `python -m
nascli.search.trial SPEC.json` on the node Ray picks and returns its exit code.

`--trial_timeout` is kept where the attempt runs, from the moment it begins there (a task's
trial process starts, an actor's worker accepts the attempt; time queued in Ray does not count):
past it the trial process, or the warm worker, is killed with its process group, and the attempt
fails with the reason `timeout`; the actor's next attempt gets a fresh worker.

Either way a local job dir must be on storage every node reaches: the trial writes its own
directory there, the driver reads it. With a gs:// job dir nothing needs sharing but the
bucket: the attempt carries the trial spec and the config files' text, runs the trial in a
temporary folder of its node (in the trainer image, with --container_image) and uploads the
trial folder to the bucket, its marker last, before it returns. Ray's own retries are off: when
a worker or node dies, the attempt comes back `lost`, and the search loop journals it and decides
on the retry, so every retry is on record and a resumed driver knows about it.

An interrupted search passes the signal on: each busy actor signals its worker, whose trial
records `interrupted`; a task is cancelled (Ray raises KeyboardInterrupt in it) and passes
SIGINT on to its trial process. Either way the driver waits until the trials have recorded it.
"""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent import futures
from typing import Any

from nascli.errors import NascliError
from nascli.search import executors
from nascli.search import ray_connect
from nascli.search import warm_workers

INSTALL_HINT = "Ray is not installed: pip install 'nascli[ray]' (or: pip install 'ray[default]')"
_POLL_S = 0.1  # how often an actor looks for its worker's answer
_CLOSE_S = 20.0  # how long the driver waits for its actors to end their workers
_HANDOVER_S = 2.0  # how long an actor idles before an attempt that Ray cannot place takes its place


def _import_ray():
  try:
    import ray  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise NascliError(INSTALL_HINT) from e
  return ray


def run_trial_attempt(spec_path: str, trial_dir: str, cwd: str,
                      shipped: dict[str, Any] | None = None,
                      timeout_s: float | None = None) -> executors.Outcome:
  """The Ray task: runs the trial process to its end on this node; returns how it ended."""
  if shipped is not None:
    return _placed(_run_shipped(shipped, cwd, timeout_s))
  process = executors.start_trial_process(spec_path, trial_dir,
                                          cwd=cwd if os.path.isdir(cwd) else None)
  return _placed(_wait(process, trial_dir, timeout_s))


def _wait(process: subprocess.Popen, trial_dir: str,
          timeout_s: float | None) -> executors.Outcome:
  """How the trial process ended (killed past `timeout_s`: executors.timed_out); a cancelled
  task (KeyboardInterrupt, which Ray raises between bytecodes, hence the polling) passes SIGINT
  on to the trial and waits for it."""
  started = time.monotonic()
  try:
    while process.poll() is None:
      if executors.past(started, timeout_s):
        return executors.timed_out(process, trial_dir, timeout_s)
      time.sleep(0.2)
  except KeyboardInterrupt:
    executors.stop_processes([process], signal.SIGINT)
    raise
  return executors.Outcome(returncode=process.returncode)


def _unship(shipped: dict[str, Any], job: str) -> tuple[str, str]:
  """Writes a shipped attempt's config files and spec into `job`, a temporary job dir of this
  node; returns (spec path, trial dir)."""
  from nascli import storage  # pylint: disable=g-import-not-at-top
  spec = json.loads(json.dumps(shipped["spec"]))  # a deep copy: the argument stays as it is
  configs = []
  for index, (name, text) in enumerate(shipped["configs"]):
    configs.append(os.path.join(job, "configs", f"{index}_{name}"))
    storage.write_text(configs[-1], text)
  spec["job_dir"] = job
  spec["trial"]["run"]["config_files"] = configs  # TrialSpec.trial.run (nascli/run_spec.py)
  trial_dir = os.path.join(job, spec["trial_id"])
  os.makedirs(trial_dir)
  spec_path = os.path.join(trial_dir, "trial_spec.json")
  storage.write_text(spec_path, json.dumps(spec, indent=2))
  return spec_path, trial_dir


def _run_shipped(shipped: dict[str, Any], cwd: str,
                 timeout_s: float | None) -> executors.Outcome:
  """A trial whose spec and config files came with the task: run in a temporary job dir on
  this node, then its folder uploaded to `publish_to` (the same upload as the driver's)."""
  from nascli.search import workspace  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory(prefix="nascli-trial-") as job:
    spec_path, trial_dir = _unship(shipped, job)
    outcome = _wait(executors.start_trial_process(spec_path, trial_dir,
                                                  cwd=cwd if os.path.isdir(cwd) else None),
                    trial_dir, timeout_s)
    workspace.upload_trial(trial_dir, shipped["publish_to"])
  return outcome


def ship(spec_path: str, publish_to: str) -> dict[str, Any]:
  """What a shipped attempt needs from the driver's disk: the spec and its config files' text."""
  from nascli import storage  # pylint: disable=g-import-not-at-top
  spec = json.loads(storage.read_text(spec_path))
  configs = [(os.path.basename(path), storage.read_text(path))
             for path in spec["trial"]["run"]["config_files"]]
  return {"spec": spec, "configs": configs, "publish_to": publish_to}


def _stopped(trial_dir: str) -> bool:
  """The trial has ended: interrupted, failed, or completed with its analysis."""
  from nascli.search import trial  # pylint: disable=g-import-not-at-top
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  status = (job_status.read(trial_dir) or {}).get("status")
  return trial.completed(trial_dir) or status not in (None, job_status.RUNNING,
                                                      job_status.COMPLETED)


def _own_log() -> str:
  """Where this process's stderr goes (a Ray worker's: its `.err` file in the node's Ray logs),
  for a warm worker's output outside its requests when the job dir is not on this node."""
  try:
    path = os.readlink("/proc/self/fd/2")
  except OSError:
    return os.devnull
  return path if os.path.isfile(path) else os.devnull


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
      return _placed(self._attempt(spec_path, trial_dir, cwd, os.path.join(
          os.path.dirname(trial_dir), warm_workers.WORKER_LOGS)))
    from nascli.search import workspace  # pylint: disable=g-import-not-at-top
    with tempfile.TemporaryDirectory(prefix="nascli-trial-") as job:
      spec_path, trial_dir = _unship(shipped, job)
      result = self._attempt(spec_path, trial_dir, cwd, None)
      workspace.upload_trial(trial_dir, shipped["publish_to"])
    return _placed(result)

  def where(self) -> dict[str, str] | None:
    """Its node, asked as an attempt starts: an attempt lost with its node returns nothing."""
    return where()

  def _ready_worker(self, cwd: str, log_dir: str | None) -> warm_workers.Worker:
    worker = self._worker
    if worker is not None and worker.usable():
      return worker
    if worker is not None:
      worker.close()
    self._started += 1
    log = (os.path.join(log_dir, f"ray-{self._name}-{self._started}.log") if log_dir
           else _own_log())
    self._worker = self._spawner.submit(
        warm_workers.Worker, None, cwd if os.path.isdir(cwd) else None, log, self._max).result()
    return self._worker

  def _attempt(self, spec_path: str, trial_dir: str, cwd: str,
               log_dir: str | None) -> executors.Outcome:
    attempt = warm_workers.Attempt(lambda: self._ready_worker(cwd, log_dir), spec_path,
                                   trial_dir, where=f", on {_node()}", timeout_s=self._timeout)
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


def _node() -> str:
  try:
    import ray  # pylint: disable=g-import-not-at-top
    return f"node {ray.util.get_node_ip_address()}"
  except Exception:  # pylint: disable=broad-except
    return "its node"


def where() -> dict[str, str] | None:
  """The Ray node this process runs on, for the journal: several nodes may share a host (and
  an IP), so the node id is what tells them apart."""
  try:
    import ray  # pylint: disable=g-import-not-at-top
    if not ray.is_initialized():  # not in a Ray worker (asking would start a Ray instance)
      return None
    return {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(),
            "ip": ray.util.get_node_ip_address()}
  except Exception:  # pylint: disable=broad-except
    return None


def _placed(outcome: executors.Outcome) -> executors.Outcome:
  return dataclasses.replace(outcome, node=where())


def _lost(error: Exception) -> str:
  return " ".join(f"{type(error).__name__}: {error}".split())[:500]


def _failed(error: Exception) -> str:
  """An attempt that raised where it ran (e.g. the job dir is not reachable from that node)."""
  cause = error.cause if getattr(error, "cause", None) is not None else error
  return " ".join(f"{type(cause).__name__}: {cause}".split())[:500]


@dataclasses.dataclass(frozen=True)
class _Attempt:
  ref: Any  # the ObjectRef of the Ray task, or of the actor's `run`
  published: bool  # the attempt uploads the trial folder itself
  trial_dir: str | None = None  # where the driver sees the trial's files (None: shipped)
  slot: Any = None  # the actor's slot (--trial_isolation worker)
  actor: Any = None
  where: Any = None  # the ObjectRef of the actor's `where` (its node, for a lost attempt)


_RAY_EXECUTORS: dict[str, type["RayExecutor"]] = {}


def register_ray_executor(isolation: str):
  """Registers the Ray executor class of a --trial_isolation value."""
  def register(cls):
    _RAY_EXECUTORS[isolation] = cls
    return cls
  return register


def ray_executor(isolation: str, address: str, **kwargs) -> "RayExecutor":
  """The executor of `nascli search` for a --trial_isolation value."""
  cls = _RAY_EXECUTORS.get(isolation)
  if cls is None:
    raise NascliError(f"unknown --trial_isolation {isolation!r}; known:"
                      f" {', '.join(sorted(_RAY_EXECUTORS))}")
  return cls(address, **kwargs)


class RayExecutor(executors.Executor):
  """Connects to (or, with address "local", starts) a Ray instance for one search; a subclass
  says how attempts run on it."""

  def __init__(self, address: str, num_cpus_per_trial: float = 1.0,
               num_gpus_per_trial: float = 0.0, runtime_env: dict[str, Any] | None = None,
               local_num_cpus: int | None = None, local_temp_dir: str | None = None,
               trial_timeout: float | None = None):
    if address != "local":
      ray_connect.use_token_if_any()
    ray = _import_ray()
    self._ray = ray
    self.trial_timeout = trial_timeout  # --trial_timeout, kept where each attempt runs
    if num_cpus_per_trial < 0 or num_gpus_per_trial < 0:
      raise NascliError("--num_cpus_per_trial and --num_gpus_per_trial must not be negative")
    init: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False,
                            "configure_logging": False}
    if runtime_env:
      init["runtime_env"] = runtime_env
    if address == "local":
      init.update(num_cpus=local_num_cpus or os.cpu_count(), num_gpus=None)
      if local_temp_dir:
        init["_temp_dir"] = os.path.abspath(local_temp_dir)
    else:
      ray_connect.check_answers(address)
      ray_connect.probe(address)
      init["address"] = address
    # ray.init makes SIGTERM a plain sys.exit: nascli's handler (an Interrupted that stops the
    # trials and says how to resume, nascli.interrupts) is put back.
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
      ray.init(**init)
    except (ConnectionError, RuntimeError, ValueError) as e:
      hint = (" (start one with `ray start --head`, or use --ray_address local for a private"
              " instance)" if address == "auto" else "")
      raise NascliError(f"--ray_address {address}: cannot connect to Ray: "
                        f"{' '.join(str(e).split())[:300]}{hint}") from e
    finally:
      if sigterm is not None and signal.getsignal(signal.SIGTERM) is not sigterm:
        signal.signal(signal.SIGTERM, sigterm)
    # A trial runs on one node: a cluster whose nodes are each too small would queue it forever.
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if not any(r.get("CPU", 0) >= num_cpus_per_trial and r.get("GPU", 0) >= num_gpus_per_trial
               for r in nodes):
      ray.shutdown()
      largest = max(nodes, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), default={})
      raise NascliError(
          f"no node of the Ray cluster at {address} has what a trial asks for"
          f" ({num_cpus_per_trial:g} CPUs and {num_gpus_per_trial:g} GPUs, --num_cpus_per_trial"
          f" and --num_gpus_per_trial): its {len(nodes)} node(s) have at most"
          f" {largest.get('CPU', 0):g} CPUs and {largest.get('GPU', 0):g} GPUs each")
    self._resources = {"num_cpus": num_cpus_per_trial, "num_gpus": num_gpus_per_trial}

  def close(self) -> None:
    if self._ray.is_initialized():
      self._ray.shutdown()


@register_ray_executor("process")
class RayTaskExecutor(RayExecutor):
  """A Ray task per attempt, each running a trial process of its own."""

  def __init__(self, address: str, max_trials_per_worker: int | None = None, **kwargs):
    del max_trials_per_worker  # an option of warm workers
    super().__init__(address, **kwargs)
    self._task = self._ray.remote(run_trial_attempt).options(max_retries=0, **self._resources)

  def slots(self, max_parallel: int) -> list[Any]:
    # Ray places each task where its resources are free; attempts beyond what the cluster
    # holds at once wait in Ray's queue.
    return [None] * max_parallel

  def start(self, spec_path: str, trial_dir: str, slot: Any,
            publish_to: str | None = None) -> _Attempt:
    del slot
    shipped = ship(spec_path, publish_to) if publish_to else None
    ref = self._task.remote(os.path.abspath(spec_path), os.path.abspath(trial_dir), os.getcwd(),
                            shipped, self.trial_timeout)
    return _Attempt(ref, shipped is not None, None if shipped else os.path.abspath(trial_dir))

  def poll(self, handle: _Attempt) -> executors.Outcome | None:
    ray = self._ray
    ready, _ = ray.wait([handle.ref], timeout=0)
    if not ready:
      return None
    try:
      return dataclasses.replace(ray.get(handle.ref), published=handle.published)
    except ray.exceptions.RayTaskError as e:
      return executors.Outcome(error=_failed(e))
    except ray.exceptions.RayError as e:  # worker crashed, node died, object lost
      return executors.Outcome(lost=_lost(e))

  def interrupt(self, handles: list[_Attempt], signum: int) -> None:
    """Cancels the tasks (each passes SIGINT on to its trial, see `_wait`) and waits until
    each trial has recorded how it stopped: a cancelled task's result is ready at once, and
    the driver's exit would take the trials down with their workers."""
    del signum  # a task gets KeyboardInterrupt, and passes SIGINT on
    for handle in handles:
      self._ray.cancel(handle.ref, force=False)
    deadline = time.monotonic() + executors.INTERRUPT_GRACE_S
    waiting = [h.trial_dir for h in handles if h.trial_dir]
    while waiting and time.monotonic() < deadline:
      waiting = [d for d in waiting if not _stopped(d)]
      time.sleep(0.5)
    refs = [h.ref for h in handles]
    if refs:
      self._ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))


@register_ray_executor("worker")
class RayActorExecutor(RayExecutor):
  """A Ray actor per slot, each with a warm worker on its node (TrialActor)."""

  def __init__(self, address: str,
               max_trials_per_worker: int = warm_workers.DEFAULT_MAX_TRIALS, **kwargs):
    super().__init__(address, **kwargs)
    self._max_trials = max_trials_per_worker
    self._actor_class = self._ray.remote(TrialActor).options(
        max_concurrency=2, max_restarts=0, max_task_retries=0, **self._resources)
    self._actors: dict[int, Any] = {}  # slot -> its actor
    self._up: dict[int, Any] = {}  # slot -> a ref that is ready once its actor runs
    self._created = 0
    self._idle_since: dict[int, float] = {}  # slot -> when its actor's last attempt ended

  def slots(self, max_parallel: int) -> list[Any]:
    # An actor per slot; those the cluster cannot hold at once wait in Ray's queue.
    return list(range(max_parallel))

  def _actor(self, slot: int) -> Any:
    actor = self._actors.get(slot)
    if actor is None:
      self._created += 1
      actor = self._actors[slot] = self._actor_class.remote(f"{slot}.{self._created}",
                                                            self._max_trials, self.trial_timeout)
      self._up[slot] = actor.__ray_ready__.remote()
    return actor

  def _running(self, slot: int) -> bool:
    up = self._up.get(slot)
    return up is not None and bool(self._ray.wait([up], timeout=0)[0])

  def _retire(self, handle: _Attempt) -> None:
    """The slot's next attempt gets a new actor; this one is killed first, in case it is only
    unreachable, not dead, so that it cannot run the attempt alongside its retry."""
    if self._actors.get(handle.slot) is handle.actor:
      del self._actors[handle.slot]
      self._up.pop(handle.slot, None)
    try:
      self._ray.kill(handle.actor, no_restart=True)
    except Exception:  # pylint: disable=broad-except
      pass  # gone already

  def start(self, spec_path: str, trial_dir: str, slot: Any,
            publish_to: str | None = None) -> _Attempt:
    shipped = ship(spec_path, publish_to) if publish_to else None
    actor = self._actor(slot)
    ref = actor.run.remote(os.path.abspath(spec_path), os.path.abspath(trial_dir), os.getcwd(),
                           shipped)
    self._idle_since.pop(slot, None)
    return _Attempt(ref, shipped is not None, None if shipped else os.path.abspath(trial_dir),
                    slot, actor, actor.where.remote())

  def _node_of(self, handle: _Attempt) -> dict[str, str] | None:
    """Where a lost attempt ran, if its actor said so before it died."""
    try:
      if handle.where is not None and self._ray.wait([handle.where], timeout=0)[0]:
        return self._ray.get(handle.where)
    except self._ray.exceptions.RayError:
      pass
    return None

  def _hand_over(self) -> None:
    """An attempt whose actor Ray cannot place (a node was lost, so the cluster now holds fewer
    slots than the search runs) gets the resources of an actor idle for _HANDOVER_S: that actor
    ends (its warm worker with it) and its slot makes a new one when it has work again. Without
    this the idle actor would hold them for the rest of the search, and the attempt would wait
    for ever."""
    now = time.monotonic()
    for slot, since in list(self._idle_since.items()):
      if now - since >= _HANDOVER_S and slot in self._actors:
        actor = self._actors.pop(slot)
        self._up.pop(slot, None)
        del self._idle_since[slot]
        try:
          self._ray.kill(actor, no_restart=True)
        except Exception:  # pylint: disable=broad-except
          pass
        return

  def poll(self, handle: _Attempt) -> executors.Outcome | None:
    outcome = self._poll(handle)
    if outcome is not None:
      self._idle_since[handle.slot] = time.monotonic()
    elif self._idle_since and not self._running(handle.slot):
      self._hand_over()
    return outcome

  def _poll(self, handle: _Attempt) -> executors.Outcome | None:
    ray = self._ray
    ready, _ = ray.wait([handle.ref], timeout=0)
    if not ready:
      return None
    try:
      result = ray.get(handle.ref)
    except ray.exceptions.RayActorError as e:  # its process or node died: the attempt is lost
      self._retire(handle)
      return executors.Outcome(lost=_lost(e), node=self._node_of(handle))
    except ray.exceptions.RayTaskError as e:
      return executors.Outcome(error=_failed(e), node=self._node_of(handle))
    except ray.exceptions.RayError as e:  # object lost
      self._retire(handle)
      return executors.Outcome(lost=_lost(e), node=self._node_of(handle))
    return dataclasses.replace(result, published=handle.published)

  def interrupt(self, handles: list[_Attempt], signum: int) -> None:
    """Each busy actor passes `signum` on to its worker and waits for the trial to record
    `interrupted`; an actor that Ray has not started yet ran nothing, and is killed."""
    grace = executors.INTERRUPT_GRACE_S
    waits = []
    for handle in handles:
      if self._running(handle.slot) and self._actors.get(handle.slot) is handle.actor:
        waits += [handle.actor.interrupt.remote(signum, grace), handle.ref]
      else:
        self._retire(handle)
    if waits:
      self._ray.wait(waits, num_returns=len(waits), timeout=grace + 5.0)

  def close(self) -> None:
    if self._ray.is_initialized():
      running = [a for s, a in self._actors.items() if self._running(s)]
      refs = [actor.close.remote() for actor in running]
      if refs:
        self._ray.wait(refs, num_returns=len(refs), timeout=_CLOSE_S)
    self._actors.clear()
    super().close()
