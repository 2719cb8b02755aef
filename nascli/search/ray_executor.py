"""Trial attempts as Ray tasks: the same trial process, scheduled on a Ray cluster.

Each attempt is one Ray task that starts `python -m nascli.search.trial SPEC.json` on the node
Ray picks (with the CPUs/GPUs asked for; Ray sets CUDA_VISIBLE_DEVICES) and returns its exit
code. The job dir must be on storage every node reaches: the trial writes its own directory
there, the driver reads it. Ray's own task retries are off: when a worker or node dies, the
attempt comes back `lost`, and the search loop journals it and decides on the retry, so every
retry is on record and a resumed driver knows about it.
"""

import os
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


def run_trial_attempt(spec_path: str, trial_dir: str, cwd: str) -> int:
  """The Ray task: runs the trial process to its end on this node; returns its exit code."""
  process = executors.start_trial_process(spec_path, trial_dir,
                                          cwd=cwd if os.path.isdir(cwd) else None)
  return process.wait()


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
    try:
      ray.init(**init)
    except (ConnectionError, RuntimeError, ValueError) as e:
      hint = (" (start one with `ray start --head`, or use --ray_address local for a private"
              " instance)" if address == "auto" else "")
      raise NascliError(f"--ray_address {address}: cannot connect to Ray: "
                        f"{' '.join(str(e).split())[:300]}{hint}") from e
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

  def start(self, spec_path: str, trial_dir: str, slot: Any) -> Any:
    del slot
    return self._task.remote(os.path.abspath(spec_path), os.path.abspath(trial_dir),
                             os.getcwd())

  def poll(self, handle: Any) -> executors.Outcome | None:
    ray = self._ray
    ready, _ = ray.wait([handle], timeout=0)
    if not ready:
      return None
    try:
      return executors.Outcome(returncode=ray.get(handle))
    except ray.exceptions.RayTaskError as e:
      # The task itself raised (e.g. the job dir is not reachable from that node).
      cause = e.cause if getattr(e, "cause", None) is not None else e
      return executors.Outcome(error=" ".join(f"{type(cause).__name__}: {cause}".split())[:500])
    except ray.exceptions.RayError as e:  # worker crashed, node died, object lost
      return executors.Outcome(lost=" ".join(f"{type(e).__name__}: {e}".split())[:500])

  def close(self) -> None:
    if self._ray.is_initialized():
      self._ray.shutdown()
