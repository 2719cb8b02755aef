"""What a Ray node runs for one trial attempt, and what the driver ships to it.

`--trial_isolation process`: each attempt is one Ray task (`run_trial_attempt`) that starts
`python -m nascli.search.trial SPEC.json` on the node Ray picks and returns its exit code.
`--trial_timeout` is kept here, from the moment the trial process starts (time queued in Ray
does not count): past it the process is killed with its group and the attempt fails with the
reason `timeout`. A cancelled task (Ray raises KeyboardInterrupt in it) passes SIGINT on to its
trial process.

A local job dir must be on storage every node reaches: the trial writes its own directory
there, the driver reads it. With a gs:// job dir nothing needs sharing but the bucket: the
attempt carries the trial spec and the config files' text (`ship`), runs the trial in a
temporary folder of its node and uploads the trial folder to the bucket, its marker last,
before it returns. Warm workers on Ray (ray_actor.TrialActor) use the same shipping.
"""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from typing import Any

from nascli.search import executors

def run_trial_attempt(spec_path: str, trial_dir: str, cwd: str,
                      shipped: dict[str, Any] | None = None,
                      timeout_s: float | None = None) -> executors.Outcome:
  """The Ray task: runs the trial process to its end on this node; returns how it ended."""
  if shipped is not None:
    return placed(_run_shipped(shipped, cwd, timeout_s))
  process = executors.start_trial_process(spec_path, trial_dir,
                                          cwd=cwd if os.path.isdir(cwd) else None)
  return placed(_wait(process, trial_dir, timeout_s))


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


def unship(shipped: dict[str, Any], job: str) -> tuple[str, str]:
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
    spec_path, trial_dir = unship(shipped, job)
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


def stopped(trial_dir: str) -> bool:
  """The trial has ended: interrupted, failed, or completed with its analysis."""
  from nascli.search import trial  # pylint: disable=g-import-not-at-top
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  status = (job_status.read(trial_dir) or {}).get("status")
  return trial.completed(trial_dir) or status not in (None, job_status.RUNNING,
                                                      job_status.COMPLETED)


def own_log() -> str:
  """Where this process's stderr goes (a Ray worker's: its `.err` file in the node's Ray logs),
  for a warm worker's output outside its requests when the job dir is not on this node."""
  try:
    path = os.readlink("/proc/self/fd/2")
  except OSError:
    return os.devnull
  return path if os.path.isfile(path) else os.devnull


def node_label() -> str:
  """This node, as a worker's death names it."""
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


def placed(outcome: executors.Outcome) -> executors.Outcome:
  """`outcome` with the node it ran on."""
  return dataclasses.replace(outcome, node=where())

