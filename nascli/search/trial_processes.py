"""Trial processes on this machine: the Executor interface, Outcome, and a process a trial.

executors.py names the executors of --trial_isolation; warm_workers.py and ray_executor.py build on
this module.

The search loop only starts attempts and polls them; an executor says how an attempt ended:
the trial process's exit code (the trial dir holds the details), an error that kept it from
running, or `lost` when the machine under it went away (the loop retries those). With
`--trial_timeout`, an attempt that runs past it is killed where it runs (its process group, or
its warm worker's) and fails with the reason `timeout` (`timed_out`).

Trial processes run in a process group of their own, so a Ctrl-C at the terminal reaches the
driver only and the driver passes one signal on to each trial (`interrupt`): the same path for
SIGINT at a terminal and for SIGTERM sent to the driver alone, and no trial sees a second signal
(which would stop it before it records that it was interrupted).
"""

import abc
import dataclasses
import functools
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable

from nascli import parent_death

TRIAL_LOG = "trial.log"
# How long an interrupted trial gets to record it (job_status.json, a checkpoint) and exit.
INTERRUPT_GRACE_S = 60.0


@dataclasses.dataclass(frozen=True)
class Outcome:
  returncode: int | None = None
  error: str | None = None  # the attempt could not run (the trial is failed with this reason)
  lost: str | None = None  # the worker or node died under it (the trial is retried)
  published: bool = False  # the attempt uploaded its own trial folder to the job dir
  node: dict[str, str] | None = None  # where it ran on a Ray cluster: node_id, host, ip


def _warn(line: str) -> None:
  print(f"warning: {line}", file=sys.stderr, flush=True)


def die_with_parent() -> None:
  """Runs in the trial process before exec: a killed parent (the search driver, or the Ray
  worker) takes its trial with it (Linux), so no orphaned attempt races a retry of the trial.
  It also unblocks SIGINT and SIGTERM, which a Ray worker blocks and a child would inherit
  blocked: the trial must see the signal that tells it to stop and record it. Pass it as
  `child_setup()`, which probes prctl in the parent first."""
  signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM))
  set_death_signal = parent_death.setter()
  if set_death_signal is not None:
    set_death_signal(signal.SIGKILL)


def child_setup() -> Callable[[], None]:
  """The preexec_fn of a trial process or worker: die_with_parent, with prctl probed here, in
  the parent, so that a failure is said once on the parent's stderr (not in each child's log)."""
  parent_death.setter()
  return die_with_parent


def trial_command(spec_path: str) -> list[str]:
  return [sys.executable, "-m", "nascli.search.trial", spec_path]


def start_trial_process(spec_path: str, trial_dir: str, env: dict[str, str] | None = None,
                        cwd: str | None = None) -> subprocess.Popen:
  with open(os.path.join(trial_dir, TRIAL_LOG), "ab") as log:
    return subprocess.Popen(  # pylint: disable=consider-using-with
        trial_command(spec_path), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
        cwd=cwd, preexec_fn=child_setup(), process_group=0)


def stop_processes(processes: list[subprocess.Popen], signum: int,
                   grace_s: float = INTERRUPT_GRACE_S) -> None:
  """Sends `signum` to each running process, waits up to `grace_s` for all, kills the rest."""
  for process in processes:
    if process.poll() is None:
      process.send_signal(signum)
  deadline = time.monotonic() + grace_s
  for process in processes:
    try:
      process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()


def kill_group(process: subprocess.Popen) -> int:
  """Kills the process and what it started (it leads a process group of its own); its exit
  code."""
  if process.poll() is None:
    try:
      os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
      process.kill()
  return process.wait()


def timeout_reason(timeout_s: float) -> str:
  return f"timeout: attempt ran past --trial_timeout {timeout_s:g} s"


def past(since: float | None, timeout_s: float | None) -> bool:
  """An attempt running since `since` (time.monotonic(); None: not begun) is past the limit."""
  return None not in (since, timeout_s) and time.monotonic() - since > timeout_s


def timed_out(process: subprocess.Popen, trial_dir: str, timeout_s: float) -> Outcome:
  """Ends an attempt that ran past --trial_timeout: kills `process` (the trial process, or the
  warm worker running the trial) with its group and records the trial `failed`, reason
  `timeout`, in its job_status.json and log."""
  from tf_vision import job_status  # pylint: disable=g-import-not-at-top
  code = kill_group(process)
  if code != -signal.SIGKILL:  # it ended by itself in the meantime: that is its outcome
    return Outcome(returncode=code)
  reason = timeout_reason(timeout_s)
  job_status.write(trial_dir, job_status.FAILED, reason=reason)
  with open(os.path.join(trial_dir, TRIAL_LOG), "a", encoding="utf-8") as log:
    log.write(f"nascli: {reason}: killed\n")
  return Outcome(returncode=code, error=reason)


_NVIDIA_SMI_S = 10.0


@functools.lru_cache(maxsize=1)
def _nvidia_smi_gpus() -> tuple[str, ...]:
  """The GPU indices nvidia-smi lists (asked once per process). No nvidia-smi: none, silently
  (a machine without NVIDIA's driver); one that hangs or fails: none, said once on stderr."""
  command = ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"]
  consequence = ("trials run without GPU pinning, sharing the CPU (set CUDA_VISIBLE_DEVICES to"
                 " name the GPUs)")
  try:
    out = subprocess.run(command, capture_output=True, text=True, timeout=_NVIDIA_SMI_S,
                         check=False)
  except FileNotFoundError:
    return ()
  except subprocess.TimeoutExpired:
    _warn(f"nvidia-smi did not answer within {_NVIDIA_SMI_S:g} s: {consequence}")
    return ()
  except (OSError, subprocess.SubprocessError) as e:
    _warn(f"nvidia-smi could not run ({' '.join(str(e).split())[:200]}): {consequence}")
    return ()
  if out.returncode != 0:
    said = " ".join((out.stderr or out.stdout).split())[:200]
    _warn(f"nvidia-smi exited with code {out.returncode} ({said}): {consequence}")
    return ()
  return tuple(out.stdout.split())


def local_gpus() -> list[str]:
  """This machine's GPUs as CUDA_VISIBLE_DEVICES values (the visible ones, if that is set)."""
  visible = os.environ.get("CUDA_VISIBLE_DEVICES")
  if visible is not None:
    return [d for d in visible.split(",") if d.strip()]
  return list(_nvidia_smi_gpus())


class Executor(abc.ABC):
  """Runs trial attempts; `slots` bounds how many run at once."""

  @abc.abstractmethod
  def slots(self, max_parallel: int) -> list[Any]:
    """One token per attempt that may run at once (a GPU id, or None)."""

  @abc.abstractmethod
  def start(self, spec_path: str, trial_dir: str, slot: Any,
            publish_to: str | None = None) -> Any:
    """Starts an attempt; returns its handle. `publish_to`: the trial's folder in a gs:// job
    dir, for an executor whose trials run where the driver's staging folder is not."""

  @abc.abstractmethod
  def poll(self, handle: Any) -> Outcome | None:
    """None while the attempt runs, else how it ended."""

  def prestart(self, count: int, log_dir: str) -> None:
    """May start what `count` attempts will run on before the driver's own imports (warm
    workers); `log_dir` takes their logs."""
    del count, log_dir

  def interrupt(self, handles: list[Any], signum: int) -> None:
    """The search was interrupted: passes `signum` on to the running attempts and returns once
    they have ended (each records `interrupted` in its trial dir as it stops)."""
    del handles, signum

  def close(self) -> None:
    pass


_LOCAL_EXECUTORS: dict[str, type[Executor]] = {}


def register_local_executor(isolation: str):
  """Registers the executor class of a --trial_isolation value."""
  def register(cls):
    _LOCAL_EXECUTORS[isolation] = cls
    return cls
  return register


@dataclasses.dataclass(frozen=True)
class _Process:
  """A trial process started by LocalExecutor: the executor's handle of it."""
  process: subprocess.Popen
  trial_dir: str
  started: float  # time.monotonic()


@register_local_executor("process")
class LocalExecutor(Executor):
  """Trial processes on this machine, one GPU each when there are GPUs, else sharing the CPU.
  `trial_timeout`: --trial_timeout, seconds an attempt may run (None: no limit)."""

  def __init__(self, stderr_print=None, trial_timeout: float | None = None, **unused):
    del unused  # options of other isolations
    self._print = stderr_print or functools.partial(print, file=sys.stderr)
    self.trial_timeout = trial_timeout

  def slots(self, max_parallel: int) -> list[Any]:
    gpus = local_gpus()
    if not gpus:
      return [None] * max_parallel
    if len(gpus) < max_parallel:
      self._print(f"note: {len(gpus)} GPU(s): running {len(gpus)} trial(s) at a time")
    return gpus[:max_parallel]

  def start(self, spec_path: str, trial_dir: str, slot: Any,
            publish_to: str | None = None) -> _Process:
    del publish_to  # on this machine: the driver's workspace publishes the trial folder
    env = dict(os.environ)
    if slot is not None:
      env["CUDA_VISIBLE_DEVICES"] = slot
    return _Process(start_trial_process(spec_path, trial_dir, env=env, cwd=os.getcwd()),
                    trial_dir, time.monotonic())

  def poll(self, handle: _Process) -> Outcome | None:
    code = handle.process.poll()
    if code is None and past(handle.started, self.trial_timeout):
      return timed_out(handle.process, handle.trial_dir, self.trial_timeout)
    return None if code is None else Outcome(returncode=code)

  def interrupt(self, handles: list[_Process], signum: int) -> None:
    stop_processes([h.process for h in handles], signum)
