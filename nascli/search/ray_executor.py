"""Trial attempts on a Ray cluster, from the driver: a Ray actor per slot, or a Ray task each.

`--trial_isolation worker` (the default): each slot is one Ray actor with a warm worker on its
node (ray_actor.TrialActor). An actor that dies (its process or node lost) loses its attempt:
the search loop journals it and retries, and the slot gets a new actor.
`--trial_isolation process`: each attempt is one Ray task running a trial process of its own
(ray_remote.run_trial_attempt). What runs on the node, and how a gs:// job's attempt is shipped
there, is in ray_remote.py; whether the cluster can run a trial at all, in ray_nodes.py.

Ray's own retries are off: when a worker or node dies, the attempt comes back `lost`, and the
search loop journals it and decides on the retry, so every retry is on record and a resumed
driver knows about it. A cluster that has lost every node able to run a trial ends the search
in one line (ray_nodes.NodeWatch) rather than leave it waiting forever.

An interrupted search passes the signal on: each busy actor signals its worker, whose trial
records `interrupted`; a task is cancelled (Ray raises KeyboardInterrupt in it) and passes
SIGINT on to its trial process. Either way the driver waits until the trials have recorded it.
"""

import dataclasses
import os
import signal
import time
from typing import Any

from nascli.errors import NascliError
from nascli.search import executors
from nascli.search import ray_actor
from nascli.search import ray_connect
from nascli.search import ray_nodes
from nascli.search import ray_remote
from nascli.search import warm_workers

INSTALL_HINT = "Ray is not installed: pip install 'nascli[ray]' (or: pip install 'ray[default]')"
_CLOSE_S = 20.0  # how long the driver waits for its actors to end their workers
_HANDOVER_S = 2.0  # how long an actor idles before an attempt that Ray cannot place takes its place


def _import_ray():
  try:
    import ray  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise NascliError(INSTALL_HINT) from e
  return ray


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
    self._resources = {"num_cpus": num_cpus_per_trial, "num_gpus": num_gpus_per_trial}
    try:
      ray_nodes.check_fits(ray, address, self._resources)
    except NascliError:
      ray.shutdown()
      raise
    self._nodes = ray_nodes.NodeWatch(ray, address, self._resources)

  def close(self) -> None:
    if self._ray.is_initialized():
      self._ray.shutdown()


@register_ray_executor("process")
class RayTaskExecutor(RayExecutor):
  """A Ray task per attempt, each running a trial process of its own."""

  def __init__(self, address: str, max_trials_per_worker: int | None = None, **kwargs):
    del max_trials_per_worker  # an option of warm workers
    super().__init__(address, **kwargs)
    self._task = self._ray.remote(ray_remote.run_trial_attempt).options(max_retries=0, **self._resources)

  def slots(self, max_parallel: int) -> list[Any]:
    # Ray places each task where its resources are free; attempts beyond what the cluster
    # holds at once wait in Ray's queue.
    return [None] * max_parallel

  def start(self, spec_path: str, trial_dir: str, slot: Any,
            publish_to: str | None = None) -> _Attempt:
    del slot
    shipped = ray_remote.ship(spec_path, publish_to) if publish_to else None
    ref = self._task.remote(os.path.abspath(spec_path), os.path.abspath(trial_dir), os.getcwd(),
                            shipped, self.trial_timeout)
    return _Attempt(ref, shipped is not None, None if shipped else os.path.abspath(trial_dir))

  def poll(self, handle: _Attempt) -> executors.Outcome | None:
    ray = self._ray
    ready, _ = ray.wait([handle.ref], timeout=0)
    if not ready:
      self._nodes.waiting()  # queued, or running: either way a node to run it must be alive
      return None
    try:
      return dataclasses.replace(ray.get(handle.ref), published=handle.published)
    except ray.exceptions.RayTaskError as e:
      return executors.Outcome(error=_failed(e))
    except ray.exceptions.RayError as e:  # worker crashed, node died, object lost
      return executors.Outcome(lost=_lost(e))

  def interrupt(self, handles: list[_Attempt], signum: int) -> None:
    """Cancels the tasks (each passes SIGINT on to its trial, see ray_remote._wait) and waits until
    each trial has recorded how it stopped: a cancelled task's result is ready at once, and
    the driver's exit would take the trials down with their workers."""
    del signum  # a task gets KeyboardInterrupt, and passes SIGINT on
    for handle in handles:
      self._ray.cancel(handle.ref, force=False)
    deadline = time.monotonic() + executors.INTERRUPT_GRACE_S
    waiting = [h.trial_dir for h in handles if h.trial_dir]
    while waiting and time.monotonic() < deadline:
      waiting = [d for d in waiting if not ray_remote.stopped(d)]
      time.sleep(0.5)
    refs = [h.ref for h in handles]
    if refs:
      self._ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))


@register_ray_executor("worker")
class RayActorExecutor(RayExecutor):
  """A Ray actor per slot, each with a warm worker on its node (ray_actor.TrialActor)."""

  def __init__(self, address: str,
               max_trials_per_worker: int = warm_workers.DEFAULT_MAX_TRIALS, **kwargs):
    super().__init__(address, **kwargs)
    self._max_trials = max_trials_per_worker
    self._actor_class = self._ray.remote(ray_actor.TrialActor).options(
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
    shipped = ray_remote.ship(spec_path, publish_to) if publish_to else None
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
    elif not self._running(handle.slot):  # its actor waits for Ray to place it
      self._nodes.waiting()
      if self._idle_since:
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
