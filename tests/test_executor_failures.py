"""The executors' failure paths, with real worker processes killed at chosen points.

The workers are nascli's own (worker.py's main and protocol, the driver's warm_workers.Worker,
WarmExecutor and Ray's TrialActor) serving toy trials (tests/toy_worker.py) instead of Model
Garden ones, so each worker starts in well under a second. Faults are injected from the test
into the driver's side (Worker.submit), the toys or the environment; no product code knows.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nascli import parent_death
from nascli.search import executors
from nascli.search import trial_processes
from nascli.search import warm_workers

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
WAIT_S = 60.0  # a bound on waiting for a toy's outcome: a hang fails the test, never a timing


@pytest.fixture
def toy_workers(monkeypatch):
  """Warm workers of this process run tests/toy_worker.py."""
  monkeypatch.setattr(warm_workers, "WORKER_MODULE", "toy_worker")
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(ROOT)]))
  monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
  monkeypatch.setattr(trial_processes, "local_gpus", lambda: [])  # slots share the CPU


def _toy(job: Path, trial_id: str, action: str) -> tuple[str, str]:
  """(spec path, trial dir) of a toy trial."""
  trial_dir = job / trial_id
  trial_dir.mkdir(parents=True)
  spec = trial_dir / "trial_spec.json"
  spec.write_text(json.dumps({"toy": action}))
  return str(spec), str(trial_dir)


def _outcome(executor: executors.Executor, handle) -> executors.Outcome:
  """How the attempt ended, polled as the search loop polls it."""
  deadline = time.monotonic() + WAIT_S
  while (outcome := executor.poll(handle)) is None:
    assert time.monotonic() < deadline, "no outcome"
    time.sleep(0.05)
  return outcome


def _ran_in(trial_dir: str) -> int:
  return json.loads(Path(trial_dir, "ran.json").read_text())["pid"]


def _status(trial_dir: str) -> dict:
  return json.loads(Path(trial_dir, "job_status.json").read_text())


@pytest.fixture
def executor(toy_workers):
  ex = warm_workers.WarmExecutor(max_trials_per_worker=5)
  assert ex.slots(1) == [0]
  yield ex
  ex.close()


def _fault_at_next_submit(monkeypatch, before=None, after=None):
  """At the next Worker.submit (in the driver, after the executor found the worker usable),
  `before(worker)` runs before the request is written and `after(worker)` once it is."""
  real = warm_workers.Worker.submit
  pending = [True]

  def submit(worker, *args, **kwargs):
    if not pending:
      return real(worker, *args, **kwargs)
    pending.clear()
    if before:
      before(worker)
    request = real(worker, *args, **kwargs)
    if after:
      after(worker)
    return request

  monkeypatch.setattr(warm_workers.Worker, "submit", submit)


def _killed(worker: warm_workers.Worker) -> None:
  """SIGKILLs the worker and waits until it is dead: it ended between trials."""
  os.kill(worker.pid, signal.SIGKILL)
  worker.process.wait()


def _stopped(worker: warm_workers.Worker) -> None:
  """SIGSTOPs the worker: it cannot read a request sent now (killed next, it never will)."""
  os.kill(worker.pid, signal.SIGSTOP)


def test_a_worker_that_dies_between_trials_costs_the_next_trial_nothing(executor, tmp_path,
                                                                       monkeypatch):
  """The worker dies after trial 1 with trial 2's request written but unread: trial 2 runs in a
  fresh worker and completes; no failure, nothing lost, the handover noted in its log."""
  first = _toy(tmp_path, "1", "complete")
  assert _outcome(executor, executor.start(*first, slot=0)) == executors.Outcome(returncode=0)
  pid1 = _ran_in(first[1])
  _fault_at_next_submit(monkeypatch, before=_stopped, after=_killed)
  second = _toy(tmp_path, "2", "complete")
  attempt = executor.start(*second, slot=0)
  assert attempt.worker.pid == pid1
  outcome = _outcome(executor, attempt)
  assert outcome == executors.Outcome(returncode=0)
  pid2 = _ran_in(second[1])
  assert pid2 != pid1 and attempt.worker.pid == pid2 and attempt.handovers == 1
  assert _status(second[1])["status"] == "completed"
  log = Path(second[1], "trial.log").read_text()
  assert (f"nascli: the trial's worker (pid {pid1}) was killed by SIGKILL before it accepted"
          " the trial; a fresh worker takes it") in log


def test_a_worker_gone_when_the_trial_is_sent_is_replaced_not_fatal(executor, tmp_path,
                                                                    monkeypatch):
  """The worker exits just after usable() said yes: sending the request meets a broken pipe,
  and a fresh worker takes the trial (before: BrokenPipeError out of start, ending the
  search)."""
  first = _toy(tmp_path, "1", "complete")
  assert _outcome(executor, executor.start(*first, slot=0)).returncode == 0
  pid1 = _ran_in(first[1])
  _fault_at_next_submit(monkeypatch, before=_killed)
  second = _toy(tmp_path, "2", "complete")
  attempt = executor.start(*second, slot=0)
  assert _outcome(executor, attempt) == executors.Outcome(returncode=0)
  assert _ran_in(second[1]) not in (pid1, None) and attempt.handovers == 1


def test_a_worker_that_dies_under_an_accepted_trial_fails_it(executor, tmp_path):
  """A death after the worker accepted the trial is that trial's failure, with the signal;
  the next trial gets a fresh worker."""
  dying = _toy(tmp_path, "1", "die")
  outcome = _outcome(executor, executor.start(*dying, slot=0))
  pid1 = _ran_in(dying[1])
  assert outcome == executors.Outcome(
      returncode=-signal.SIGKILL, error=f"the trial's worker (pid {pid1}) was killed by SIGKILL")
  after = _toy(tmp_path, "2", "complete")
  assert _outcome(executor, executor.start(*after, slot=0)) == executors.Outcome(returncode=0)
  assert _ran_in(after[1]) != pid1


def test_workers_that_keep_dying_before_a_trial_make_its_attempt_lost(executor, tmp_path,
                                                                     monkeypatch):
  """Workers that die before they accept anything (here: as they start) are handed the attempt
  MAX_HANDOVERS more times, then it is `lost` (retried by the search loop), never `failed`."""
  monkeypatch.setenv("TOY_WORKER_DIES_AT_START", "1")
  spec, trial_dir = _toy(tmp_path, "1", "complete")
  attempt = executor.start(spec, trial_dir, slot=0)
  outcome = _outcome(executor, attempt)
  assert outcome.error is None and outcome.returncode is None
  assert outcome.lost.startswith(f"the trial's worker (pid {attempt.worker.pid}) was killed by"
                                 " SIGKILL before it accepted the trial, as 3 workers in a row"
                                 " did; see ")
  assert attempt.handovers == warm_workers.MAX_HANDOVERS == 2
  assert not Path(trial_dir, "ran.json").exists()
  assert sorted(os.listdir(tmp_path / "workers")) == [
      "worker-1.log", "worker-2.log", "worker-3.log"]


def test_an_interrupted_attempt_is_not_handed_over(executor, tmp_path, monkeypatch):
  """A worker that dies before accepting while the search stops: the attempt ends (the loop
  records it interrupted); no fresh worker is started for it."""
  first = _toy(tmp_path, "1", "complete")
  assert _outcome(executor, executor.start(*first, slot=0)).returncode == 0
  _fault_at_next_submit(monkeypatch, before=_killed)
  attempt = executor.start(*_toy(tmp_path, "2", "complete"), slot=0)
  executor.interrupt([attempt], signal.SIGINT)
  outcome = _outcome(executor, attempt)
  assert outcome.returncode == -signal.SIGKILL and "before it accepted" in outcome.error
  assert attempt.handovers == 0 and os.listdir(tmp_path / "workers") == ["worker-1.log"]


def test_trial_timeout_kills_the_attempt_and_its_worker(toy_workers, tmp_path):
  """--trial_timeout 1 on a trial that never ends: killed with its worker, `failed` with the
  reason timeout (its job_status.json says so, which the search loop journals), and the next
  trial runs in a fresh worker."""
  ex = warm_workers.WarmExecutor(max_trials_per_worker=5, trial_timeout=1)
  try:
    ex.slots(1)
    hung = _toy(tmp_path, "1", "hang")
    attempt = ex.start(*hung, slot=0)
    outcome = _outcome(ex, attempt)
    reason = "timeout: attempt ran past --trial_timeout 1 s"
    assert outcome == executors.Outcome(returncode=-signal.SIGKILL, error=reason)
    pid1 = _ran_in(hung[1])
    assert attempt.worker.pid == pid1 and attempt.worker.exit_code() == -signal.SIGKILL
    status = _status(hung[1])
    assert (status["status"], status["reason"]) == ("failed", reason)
    assert f"nascli: {reason}: killed" in Path(hung[1], "trial.log").read_text()
    after = _toy(tmp_path, "2", "complete")
    assert _outcome(ex, ex.start(*after, slot=0)) == executors.Outcome(returncode=0)
    assert _ran_in(after[1]) != pid1
  finally:
    ex.close()


def test_rays_actor_follows_the_same_rules(toy_workers, tmp_path, monkeypatch):
  """Ray's TrialActor (called in this process, no Ray cluster) shares Attempt: a worker killed
  between trials costs the next trial nothing, a timeout kills the worker and the next attempt
  gets a fresh one."""
  from nascli.search import ray_actor  # pylint: disable=g-import-not-at-top
  from nascli.search import ray_remote  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(ray_remote, "node_label", lambda: "node 10.0.0.9")
  actor = ray_actor.TrialActor("0.1", 5, trial_timeout=1)
  try:
    first = _toy(tmp_path, "1", "complete")
    assert actor.run(*first, str(ROOT)) == executors.Outcome(returncode=0)
    pid1 = _ran_in(first[1])
    _fault_at_next_submit(monkeypatch, before=_stopped, after=_killed)
    second = _toy(tmp_path, "2", "complete")
    assert actor.run(*second, str(ROOT)) == executors.Outcome(returncode=0)
    pid2 = _ran_in(second[1])
    assert pid2 != pid1
    hung = _toy(tmp_path, "3", "hang")
    assert actor.run(*hung, str(ROOT)) == executors.Outcome(
        returncode=-signal.SIGKILL, error="timeout: attempt ran past --trial_timeout 1 s")
    after = _toy(tmp_path, "4", "die")
    assert actor.run(*after, str(ROOT)) == executors.Outcome(
        returncode=-signal.SIGKILL, error=f"the trial's worker (pid {_ran_in(after[1])}, on node"
        " 10.0.0.9) was killed by SIGKILL")
    assert _ran_in(hung[1]) == pid2  # its worker went on with trial 3, and was killed
    assert _ran_in(after[1]) not in (pid1, pid2)
  finally:
    actor.close()


def test_trial_timeout_kills_a_trial_process_and_its_group(tmp_path):
  """--trial_isolation process (here, and as a Ray task): the trial process is killed with its
  process group past the limit and the attempt fails with the reason timeout."""
  from nascli.search import ray_remote  # pylint: disable=g-import-not-at-top
  trial_dir = tmp_path / "1"
  trial_dir.mkdir()
  # A process group as a trial process has one, with a child of its own that would outlive it.
  script = "import subprocess, sys, time; subprocess.Popen(['sleep', '600']); time.sleep(600)"
  process = subprocess.Popen([sys.executable, "-c", script], process_group=0)
  outcome = ray_remote._wait(process, str(trial_dir), 1)  # pylint: disable=protected-access
  reason = "timeout: attempt ran past --trial_timeout 1 s"
  assert outcome == executors.Outcome(returncode=-signal.SIGKILL, error=reason)
  assert _status(str(trial_dir))["reason"] == reason
  deadline = time.monotonic() + WAIT_S
  while _group_members(process.pid):  # the child went with the group (reaped by init)
    assert time.monotonic() < deadline, _group_members(process.pid)
    time.sleep(0.05)


def _group_members(pgid: int) -> list[int]:
  members = []
  for entry in os.listdir("/proc"):
    try:
      fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
      continue
    if int(fields[2]) == pgid and fields[0] != "Z":
      members.append(int(entry))
  return members


def test_local_executor_times_out_its_trial_process(tmp_path, monkeypatch):
  """The process executor's own poll keeps the limit from the process's start."""
  monkeypatch.setattr(trial_processes, "trial_command",
                      lambda spec: [sys.executable, "-c", "import time; time.sleep(600)"])
  ex = executors.LocalExecutor(trial_timeout=1)
  trial_dir = tmp_path / "1"
  trial_dir.mkdir()
  handle = ex.start(str(trial_dir / "trial_spec.json"), str(trial_dir), None)
  outcome = _outcome(ex, handle)
  assert outcome.error == "timeout: attempt ran past --trial_timeout 1 s"
  assert handle.process.returncode == -signal.SIGKILL


@pytest.mark.parametrize("command", ["search_in_local", "search"])
def test_a_bad_trial_timeout_is_refused_in_one_line_before_any_framework(command, tmp_path):
  from test_search_flags import _refusals  # pylint: disable=g-import-not-at-top
  values = ["0", "-5", "abc", "nan", "inf"]
  results, imported = _refusals([[command, "--local_output_dir", str(tmp_path / "job"),
                                  "--trial_timeout", v] for v in values])
  assert imported == []
  assert results == [[1, "", f"Error: --trial_timeout must be a positive number of seconds, got"
                             f" {v}\n"] for v in values]
  assert not (tmp_path / "job").exists()


def test_trial_timeout_may_change_when_a_search_resumes():
  """A job begun without --trial_timeout resumes with one (and the other way round), and says
  so: it changes how trials run, not what they compute."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import journal as journal_lib
  from nascli.search import search_loop
  began = search_loop.SearchArgs(job_dir="j").settings()
  now = search_loop.SearchArgs(job_dir="j", trial_timeout=600.0).settings()
  assert (journal_lib.fingerprint(began, search_loop.MUTABLE)
          == journal_lib.fingerprint(now, search_loop.MUTABLE))
  assert journal_lib.fingerprint(began) != journal_lib.fingerprint(now)
  assert search_loop.mutable_changes(began, now) == [
      "--trial_timeout 600.0 (the job began with unset)"]
  del began["trial_timeout"]  # a job begun before the flag existed
  assert search_loop.mutable_changes(began, search_loop.SearchArgs(job_dir="j").settings()) == []


def test_a_search_records_a_trial_past_trial_timeout_as_failed_timeout(tmp_path):
  """End to end, the flag as a user gives it: `search_in_local --trial_timeout 1`, whose one
  trial cannot finish in a second, journals it `failed` with the reason timeout (the only trial:
  the search exits 1 with that reason) and kills its worker."""
  # pylint: disable=g-import-not-at-top
  from conftest import journal_events, nascli_subprocess
  job = tmp_path / "job"
  proc = nascli_subprocess(
      "search_in_local", "--prebuilt_search_space", "mnasnet", "--local_output_dir", job,
      "--max_nas_trial", "1", "--export_top_k", "0", "--trial_timeout", "1",
      env={"NASCLI_CACHE_DIR": str(tmp_path / "cache")}, timeout=600)
  reason = "timeout: attempt ran past --trial_timeout 1 s"
  assert proc.returncode == 1, proc.stderr[-2000:]
  assert proc.stderr.splitlines()[-1] == (
      f"Error: every trial of {job} failed (1 trial(s); trial 1: {reason}); fix the cause, then"
      " run the command again with --overwrite (it deletes the failed trials and starts over)")
  events = journal_events(job)
  assert events[0]["settings"]["trial_timeout"] == 1
  trial = [(e["event"], e.get("status"), e.get("reason")) for e in events
           if e.get("trial_id") == "1"]
  assert trial == [("proposed", None, None), ("started", None, None),
                   ("failed", "failed", reason)]
  assert _status(str(job / "1"))["reason"] == reason
  assert f"nascli: {reason}: killed" in (job / "1" / "trial.log").read_text()


# --------------------------------------------------------------------------- item 5: warnings


def test_an_nvidia_smi_that_hangs_is_said_once(monkeypatch, capsys):
  monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
  calls = []

  def hangs(command, **kwargs):
    calls.append(command)
    raise subprocess.TimeoutExpired(command, kwargs["timeout"])

  monkeypatch.setattr(trial_processes.subprocess, "run", hangs)
  trial_processes._nvidia_smi_gpus.cache_clear()  # pylint: disable=protected-access
  try:
    ex = executors.LocalExecutor()
    assert ex.slots(2) == [None, None] and ex.slots(2) == [None, None]
  finally:
    trial_processes._nvidia_smi_gpus.cache_clear()  # pylint: disable=protected-access
  assert len(calls) == 1
  assert capsys.readouterr().err == (
      "warning: nvidia-smi did not answer within 10 s: trials run without GPU pinning, sharing"
      " the CPU (set CUDA_VISIBLE_DEVICES to name the GPUs)\n")


def test_no_nvidia_smi_is_a_cpu_machine_and_says_nothing(monkeypatch, capsys):
  monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

  def missing(command, **kwargs):
    raise FileNotFoundError(2, "No such file or directory", command[0])

  monkeypatch.setattr(trial_processes.subprocess, "run", missing)
  trial_processes._nvidia_smi_gpus.cache_clear()  # pylint: disable=protected-access
  try:
    assert executors.local_gpus() == []
  finally:
    trial_processes._nvidia_smi_gpus.cache_clear()  # pylint: disable=protected-access
  assert capsys.readouterr().err == ""


class _Libc:
  """libc with a prctl that fails as a sandbox's does (EPERM)."""

  def prctl(self, *args):
    del args
    import ctypes  # pylint: disable=g-import-not-at-top
    ctypes.set_errno(1)
    return -1


@pytest.mark.parametrize("cdll,cause", [
    (lambda *a, **k: _Libc(), "[Errno 1] prctl: Operation not permitted"),
    (lambda *a, **k: (_ for _ in ()).throw(OSError("libc.so.6: cannot open shared object file")),
     "libc.so.6: cannot open shared object file"),
], ids=["prctl_refused", "no_libc"])
def test_a_prctl_that_fails_is_said_once_and_children_still_start(monkeypatch, capsys, cdll,
                                                                 cause):
  import ctypes  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(ctypes, "CDLL", cdll)
  parent_death.setter.cache_clear()
  try:
    for _ in range(2):
      child = subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True,
                             text=True, preexec_fn=executors.child_setup(), check=True)
      assert child.stdout == "ran\n"
    # A conversion's pool workers (nascli/data/parallel.py) are said to be unprotected too.
    assert parent_death.setter("conversion workers") is None
    assert parent_death.setter("conversion workers") is None
  finally:
    parent_death.setter.cache_clear()
  assert capsys.readouterr().err == "".join(
      f"warning: cannot set PR_SET_PDEATHSIG ({cause}): {what} will not die with a killed"
      " parent; end any left over yourself\n" for what in ("trials and workers",
                                                           "conversion workers"))


def test_children_die_with_their_parent(tmp_path):
  """Where prctl works (this machine), a child started with child_setup() dies with its parent
  (here a middle process killed with SIGKILL)."""
  pid_file = tmp_path / "child.pid"
  middle = subprocess.Popen([sys.executable, "-c", (
      "import subprocess, sys, time\n"
      "from nascli.search import executors\n"
      "child = subprocess.Popen(['sleep', '600'], preexec_fn=executors.child_setup())\n"
      f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
      "time.sleep(600)\n")], cwd=ROOT, stderr=subprocess.PIPE, text=True)
  deadline = time.monotonic() + WAIT_S
  while not pid_file.exists() or not pid_file.read_text():
    assert middle.poll() is None and time.monotonic() < deadline, middle.stderr.read()
    time.sleep(0.05)
  child = int(pid_file.read_text())
  middle.kill()
  middle.wait()
  while _alive(child):
    assert time.monotonic() < deadline, "the child outlived its parent"
    time.sleep(0.05)
  assert middle.stderr.read() == ""  # no warning where prctl works


def _alive(pid: int) -> bool:
  try:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
  except OSError:
    return False


def test_the_end_of_search_export_goes_to_a_fresh_worker_when_the_idle_one_died(
    executor, tmp_path, monkeypatch, capsys):
  """The search's last step takes its idle warm worker for the exports; that worker exited after
  `usable()` (the request's write fails): a fresh worker does the exports, no traceback."""
  from types import SimpleNamespace  # pylint: disable=g-import-not-at-top
  from nascli.search import exports  # pylint: disable=g-import-not-at-top
  first = _toy(tmp_path, "1", "complete")
  assert _outcome(executor, executor.start(*first, slot=0)) == executors.Outcome(returncode=0)
  idle = _ran_in(first[1])
  _fault_at_next_submit(monkeypatch, before=_killed)
  monkeypatch.setattr(exports, "to_export", lambda args, state: ["1"])
  loop = SimpleNamespace(args=SimpleNamespace(job_dir=str(tmp_path)), executor=executor,
                         work_dir=str(tmp_path), gate=None)  # no latency model: nothing timed
  exports.Exports._export_best(loop, state=None)  # pylint: disable=protected-access
  exported = json.loads((tmp_path / "1" / "exported.json").read_text())
  assert exported["trial_dirs"] == [str(tmp_path / "1")]
  assert exported["pid"] != idle  # not the dead worker
  assert "warning" not in capsys.readouterr().err
