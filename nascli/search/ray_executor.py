"""Trial attempts as Ray tasks: the same trial process, scheduled on a Ray cluster.

Each attempt is one Ray task that starts `python -m nascli.search.trial SPEC.json` on the node
Ray picks (with the CPUs/GPUs asked for; Ray sets CUDA_VISIBLE_DEVICES) and returns its exit
code. A local job dir must be on storage every node reaches: the trial writes its own
directory there, the driver reads it. With a gs:// job dir nothing needs sharing but the
bucket: the task carries the trial spec and the config files' text, runs the trial in a
temporary folder of its node (in the trainer image, with --container_image) and uploads the
trial folder to the bucket, its marker last, before it returns. Ray's own task retries are
off: when a worker or node dies, the attempt comes back `lost`, and the search loop journals
it and decides on the retry, so every retry is on record and a resumed driver knows about it.

An interrupted search cancels its tasks (Ray raises KeyboardInterrupt in each), and each task
passes the signal on to its trial process and waits for it to record `interrupted`.
"""

import dataclasses
import json
import os
import signal
import subprocess
import tempfile
import time
from typing import Any

from nascli.errors import NascliError
from nascli.search import executors

INSTALL_HINT = "Ray is not installed: pip install 'nascli[ray]' (or: pip install 'ray[default]')"


def _import_ray():
  try:
    import ray  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise NascliError(INSTALL_HINT) from e
  return ray


def run_trial_attempt(spec_path: str, trial_dir: str, cwd: str,
                      shipped: dict[str, Any] | None = None) -> int:
  """The Ray task: runs the trial process to its end on this node; returns its exit code."""
  if shipped is not None:
    return _run_shipped(shipped, cwd)
  process = executors.start_trial_process(spec_path, trial_dir,
                                          cwd=cwd if os.path.isdir(cwd) else None)
  return _wait(process)


def _wait(process: subprocess.Popen) -> int:
  """The trial process's exit code; a cancelled task (KeyboardInterrupt, which Ray raises
  between bytecodes, hence the polling) passes SIGINT on to the trial and waits for it."""
  try:
    while process.poll() is None:
      time.sleep(0.2)
  except KeyboardInterrupt:
    executors.stop_processes([process], signal.SIGINT)
    raise
  return process.returncode


def _run_shipped(shipped: dict[str, Any], cwd: str) -> int:
  """A trial whose spec and config files came with the task: run in a temporary job dir on
  this node, then its folder uploaded to `publish_to` (the same upload as the driver's)."""
  from nascli import storage  # pylint: disable=g-import-not-at-top
  from nascli.search import workspace  # pylint: disable=g-import-not-at-top
  spec = dict(shipped["spec"])
  with tempfile.TemporaryDirectory(prefix="nascli-trial-") as job:
    configs = []
    for index, (name, text) in enumerate(shipped["configs"]):
      configs.append(os.path.join(job, "configs", f"{index}_{name}"))
      storage.write_text(configs[-1], text)
    spec.update(job_dir=job, config_files=configs)
    trial_dir = os.path.join(job, spec["trial_id"])
    os.makedirs(trial_dir)
    spec_path = os.path.join(trial_dir, "trial_spec.json")
    storage.write_text(spec_path, json.dumps(spec, indent=2))
    code = _wait(executors.start_trial_process(spec_path, trial_dir,
                                               cwd=cwd if os.path.isdir(cwd) else None))
    workspace.upload_trial(trial_dir, shipped["publish_to"])
  return code


def ship(spec_path: str, publish_to: str) -> dict[str, Any]:
  """What a shipped attempt needs from the driver's disk: the spec and its config files' text."""
  from nascli import storage  # pylint: disable=g-import-not-at-top
  spec = json.loads(storage.read_text(spec_path))
  configs = [(os.path.basename(path), storage.read_text(path))
             for path in spec.get("config_files") or []]
  return {"spec": spec, "configs": configs, "publish_to": publish_to}


def _stopped(trial_dir: str) -> bool:
  """The trial has ended: interrupted, failed, or completed with its analysis."""
  from nascli.search import trial  # pylint: disable=g-import-not-at-top
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  status = (job_status.read(trial_dir) or {}).get("status")
  return trial.completed(trial_dir) or status not in (None, job_status.RUNNING,
                                                      job_status.COMPLETED)


@dataclasses.dataclass(frozen=True)
class _Attempt:
  ref: Any  # the Ray task's ObjectRef
  published: bool  # the task uploads the trial folder itself
  trial_dir: str | None = None  # where the driver sees the trial's files (None: shipped)


class RayExecutor(executors.Executor):
  """Connects to (or, with address "local", starts) a Ray instance for one search."""

  def __init__(self, address: str, num_cpus_per_trial: float = 1.0,
               num_gpus_per_trial: float = 0.0, runtime_env: dict[str, Any] | None = None,
               local_num_cpus: int | None = None, local_temp_dir: str | None = None):
    ray = _import_ray()
    self._ray = ray
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
    resources = ray.cluster_resources()
    if resources.get("CPU", 0) < num_cpus_per_trial or (
        resources.get("GPU", 0) < num_gpus_per_trial):
      ray.shutdown()
      raise NascliError(f"the Ray cluster at {address} has {resources.get('CPU', 0):g} CPUs and"
                        f" {resources.get('GPU', 0):g} GPUs: a trial asks for"
                        f" {num_cpus_per_trial:g} CPUs and {num_gpus_per_trial:g} GPUs")
    self._task = ray.remote(run_trial_attempt).options(
        num_cpus=num_cpus_per_trial, num_gpus=num_gpus_per_trial, max_retries=0)

  def slots(self, max_parallel: int) -> list[Any]:
    # Ray places each task where its resources are free; attempts beyond what the cluster
    # holds at once wait in Ray's queue.
    return [None] * max_parallel

  def start(self, spec_path: str, trial_dir: str, slot: Any,
            publish_to: str | None = None) -> _Attempt:
    del slot
    shipped = ship(spec_path, publish_to) if publish_to else None
    ref = self._task.remote(os.path.abspath(spec_path), os.path.abspath(trial_dir), os.getcwd(),
                            shipped)
    return _Attempt(ref, shipped is not None, None if shipped else os.path.abspath(trial_dir))

  def poll(self, handle: _Attempt) -> executors.Outcome | None:
    ray = self._ray
    ready, _ = ray.wait([handle.ref], timeout=0)
    if not ready:
      return None
    try:
      return executors.Outcome(returncode=ray.get(handle.ref), published=handle.published)
    except ray.exceptions.RayTaskError as e:
      # The task itself raised (e.g. the job dir is not reachable from that node).
      cause = e.cause if getattr(e, "cause", None) is not None else e
      return executors.Outcome(error=" ".join(f"{type(cause).__name__}: {cause}".split())[:500])
    except ray.exceptions.RayError as e:  # worker crashed, node died, object lost
      return executors.Outcome(lost=" ".join(f"{type(e).__name__}: {e}".split())[:500])

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

  def close(self) -> None:
    if self._ray.is_initialized():
      self._ray.shutdown()
