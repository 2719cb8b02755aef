"""`nascli search` on a three-node Ray cluster started with `ray start`, as users start one.

A head (no CPUs) and two worker nodes of one CPU each, token authentication on (Ray 2.60's
default for `ray start`), nascli given only the token (RAY_AUTH_TOKEN, as Ray documents). One
search: trials spread over both worker nodes, then one node is SIGKILLed under a trial (the
attempt is lost and retried on the node that is left), then the driver is SIGKILLed and run
again (it reattaches and finishes). And the refusals: no token, a wrong token, an address that
is not Ray's, a trial bigger than any node.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import journal_events
from conftest import nascli_subprocess

pytest.importorskip("ray")

from ray_cluster import LocalCluster  # pylint: disable=g-import-not-at-top,wrong-import-position

SHORT = "trainer.train_steps=20,trainer.steps_per_loop=10,trainer.checkpoint_interval=10"


@pytest.fixture(scope="module")
def cluster():
  c = LocalCluster()
  try:
    c.start(workers=2, cpus_per_worker=1)
    yield c
  finally:
    c.stop()
  assert not c.processes(), "teardown left processes of the cluster behind"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("nascli_cache"))


def _search_args(cluster, job):
  return ["search", "--ray_address", cluster.address, "--prebuilt_search_space", "mnasnet",
          "--local_output_dir", str(job), "--seed", "4", "--max_nas_trial", "4",
          "--max_parallel_nas_trial", "2", "--target_device_latency_ms", "2",
          "--params_override", SHORT, "--export_top_k", "0", "--json"]


def _env(cache, **extra):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NASCLI_CACHE_DIR=cache, **extra)
  for key in ("RAY_AUTH_MODE", "RAY_ADDRESS"):
    env.pop(key, None)
  return env


def _wait_for(job, predicate, timeout, driver):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    events = journal_events(job) if (job / "journal.jsonl").exists() else []
    found = predicate(events)
    if found:
      return found
    if driver.poll() is not None:
      raise AssertionError(f"the search ended early: {driver.stderr.read()[-2000:]}")
    time.sleep(0.5)
  raise AssertionError(f"timed out; journal: {events[-5:]}")


def test_a_search_spreads_over_nodes_survives_a_lost_node_and_a_killed_driver(
    cluster, cache, tmp_path):
  job = tmp_path / "job"
  env = _env(cache, RAY_AUTH_TOKEN=cluster.token)
  cmd = [sys.executable, "-m", "nascli", *_search_args(cluster, job)]
  started = time.monotonic()
  driver = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
  try:
    # Trials 1 and 2 complete (one on each node, two at a time); then the node running one
    # of the next two is killed under it.
    completed = _wait_for(
        job, lambda ev: [e for e in ev if e["event"] == "completed"][1:] and ev, 300, driver)
    done = {e["trial_id"] for e in completed if e["event"] == "completed"}
    victim, trial_id = _busy_node(cluster, job, done, driver)
    node_id = victim.node_id()
    time.sleep(3)  # the attempt is under way
    assert cluster.kill_node(victim)
    _wait_for(job, lambda ev: [e for e in ev if e["event"] == "lost"], 120, driver)
    driver.send_signal(signal.SIGKILL)  # the driver dies too; its actors with its Ray job
    driver.wait(timeout=30)
    first_run_s = time.monotonic() - started
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                           check=False)
  finally:
    if driver.poll() is None:
      driver.kill()
  assert again.returncode == 0, again.stderr[-3000:]
  total_s = time.monotonic() - started
  rows = json.loads(again.stdout)
  assert sorted(r["trial_id"] for r in rows) == ["1", "2", "3", "4"]
  assert all(r["status"] == "completed" for r in rows)
  events = journal_events(job)
  proposals = [e for e in events if e["event"] == "proposed"]
  assert len(proposals) == 4 and len({tuple(e["dna"]) for e in proposals}) == 4
  completed = [e for e in events if e["event"] == "completed"]
  assert len(completed) == 4  # none repeated
  lost = [e for e in events if e["event"] == "lost"]
  assert lost and lost[0]["node"]["node_id"] == node_id and lost[0]["trial_id"] == trial_id
  # Both worker nodes ran trials; the head (no CPUs) none; what ran after the loss ran on the
  # node that is left.
  ran_on = {e["node"]["node_id"] for e in completed}
  workers = {n.node_id() or "" for n in cluster.nodes[1:]}
  assert node_id in ran_on and len(ran_on) == 2, ran_on
  after = [e for e in completed if e["seq"] > lost[0]["seq"]]
  assert after and all(e["node"]["node_id"] != node_id for e in after)
  assert ran_on - {node_id} <= workers
  # list_trials --json: each attempt's node, the lost one with it.
  listed = nascli_subprocess("list_trials", job, "--json")
  assert listed.returncode == 0, listed.stderr
  by_id = {r["trial_id"]: r for r in json.loads(listed.stdout)}
  lost_trial = by_id[lost[0]["trial_id"]]["nodes"]
  assert [a["ended"] for a in lost_trial][0] == "lost"
  assert lost_trial[0]["node_id"] == node_id and lost_trial[-1]["node_id"] != node_id
  assert all(a["host"] for r in by_id.values() for a in r["nodes"])
  print(f"cluster search: first run {first_run_s:.0f} s, all {total_s:.0f} s")


def _busy_node(cluster, job, done, driver, timeout_s=120):
  """(a worker node, the trial it runs now): a warm worker under the node's raylet writes to
  the trial's log, a trial not in `done`."""
  from ray_cluster import _descendants  # pylint: disable=g-import-not-at-top
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline and driver.poll() is None:
    for node in cluster.nodes[1:]:
      for pid in _descendants(node.raylet_pids()):
        try:
          out = os.readlink(f"/proc/{pid}/fd/1")
        except OSError:
          continue
        trial_id = os.path.basename(os.path.dirname(out))
        if out.startswith(f"{job}/") and out.endswith("/trial.log") and trial_id not in done:
          return node, trial_id
    time.sleep(0.2)
  raise AssertionError("no worker node ran a new trial")


def _refusal(args, env, timeout=60):
  started = time.monotonic()
  done = subprocess.run([sys.executable, "-m", "nascli", *args], env=env, capture_output=True,
                        text=True, timeout=timeout, check=False)
  return done, time.monotonic() - started


def test_no_token_a_wrong_token_and_a_wrong_address_are_one_line_each(cluster, cache,
                                                                       tmp_path):
  home = tmp_path / "home"  # no ~/.ray/auth_token there
  home.mkdir()
  job = tmp_path / "job"
  no_token, seconds = _refusal(_search_args(cluster, job), _env(cache, HOME=str(home)))
  assert no_token.returncode == 1
  lines = no_token.stderr.strip().splitlines()
  assert len(lines) == 1, no_token.stderr
  assert "requires token authentication" in lines[0] and "has no token" in lines[0]
  assert "ray get-auth-token" in lines[0] and "RAY_AUTH_TOKEN" in lines[0]
  assert seconds < 20, seconds  # not Ray's 20 s of retries and more
  wrong, _ = _refusal(_search_args(cluster, job),
                      _env(cache, HOME=str(home), RAY_AUTH_TOKEN="0" * 32))
  assert wrong.returncode == 1
  assert wrong.stderr.strip().splitlines() == [
      line for line in wrong.stderr.strip().splitlines() if "refused the token from"
      " RAY_AUTH_TOKEN" in line], wrong.stderr
  assert not job.exists()  # nothing written for a search that never ran
  # A port where something listens that is not a Ray GCS: the head's own client server port
  # would answer; take a plain TCP listener instead. The probe waits 5 s for a GCS there, not
  # its default 15 (NASCLI_RAY_PROBE_TIMEOUT_S): enough for its child to import Ray and knock.
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket() as listener:
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    args = _search_args(cluster, job)
    args[args.index(cluster.address)] = address
    other, seconds = _refusal(args, _env(cache, RAY_AUTH_TOKEN=cluster.token,
                                         NASCLI_RAY_PROBE_TIMEOUT_S="5"))
    listener.settimeout(0)
    knocks = 0
    while True:  # the connections made, still in the listener's queue (nothing accepted them)
      try:
        listener.accept()[0].close()
      except BlockingIOError:
        break
      except ConnectionAbortedError:  # reset by a client already gone: a knock too
        pass
      knocks += 1
  assert other.returncode == 1
  assert len(other.stderr.strip().splitlines()) == 1, other.stderr
  assert "no Ray cluster answered within 5 s" in other.stderr
  # Refused for the right reason: nascli's socket check connected, then the probe's GCS client
  # did (once or more) and heard no GCS; not a probe cut short before it asked.
  assert knocks >= 2, knocks


def test_a_trial_bigger_than_every_node_is_one_line(cluster, cache, tmp_path):
  args = _search_args(cluster, tmp_path / "job") + ["--num_gpus_per_trial", "1"]
  done, _ = _refusal(args, _env(cache, RAY_AUTH_TOKEN=cluster.token))
  assert done.returncode == 1
  lines = done.stderr.strip().splitlines()
  assert len(lines) == 1, done.stderr
  assert "no node of the Ray cluster" in lines[0] and "1 GPUs" in lines[0]
  # The head (0 CPUs) and the worker nodes still alive (a test above may have killed one).
  assert re.search(r"its [23] node\(s\) have at most 1 CPUs and 0 GPUs each$", lines[0])


@pytest.mark.parametrize("value, seconds", [(None, 15.0), ("5", 5.0), ("0.5", 0.5), ("0", 15.0),
                                            ("-3", 15.0), ("inf", 15.0), ("soon", 15.0)])
def test_the_probe_waits_15_s_unless_told_another_positive_time(monkeypatch, value, seconds):
  from nascli.search import ray_connect  # pylint: disable=g-import-not-at-top
  if value is None:
    monkeypatch.delenv("NASCLI_RAY_PROBE_TIMEOUT_S", raising=False)
  else:
    monkeypatch.setenv("NASCLI_RAY_PROBE_TIMEOUT_S", value)
  assert ray_connect.probe_timeout_s() == seconds


def _two_workers(cluster):
  """Worker nodes started again where a test above killed one: two alive, Ray seeing both."""
  while len(cluster.workers()) < 2:
    cluster.add_node(1)
  return cluster.workers()


# Slow tier (about 2 minutes each here): the default tier has Ray tasks on a local instance
# (tests/test_search_ray.py::test_sigterm_stops_the_ray_trials_which_record_it[process-SIGINT])
# and the lost-node watch on a fake cluster (tests/test_ray_nodes.py).
@pytest.mark.slow
def test_trials_as_ray_tasks_run_on_both_nodes(cluster, cache, tmp_path):
  """--trial_isolation process: each attempt a Ray task; two at once on two nodes of one CPU
  each, so one on each, as the journal's `node` of each completed trial says."""
  workers = {n.node_id() for n in _two_workers(cluster)}
  job = tmp_path / "job"
  args = _search_args(cluster, job)
  args[args.index("--max_nas_trial") + 1] = "2"
  done = subprocess.run([sys.executable, "-m", "nascli", *args, "--trial_isolation", "process"],
                        env=_env(cache, RAY_AUTH_TOKEN=cluster.token), capture_output=True,
                        text=True, timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  rows = json.loads(done.stdout)
  assert [(r["trial_id"], r["status"]) for r in rows] == [("1", "completed"), ("2", "completed")]
  events = journal_events(job)
  assert json.loads((job / "1" / "trial_spec.json").read_text())  # a trial process's own spec
  ran_on = [e["node"]["node_id"] for e in events if e["event"] == "completed"]
  assert sorted(ran_on) == sorted(workers), (ran_on, workers)
  assert not [e for e in events if e["event"] in ("lost", "failed")]
  assert not (job / "workers").exists()  # no warm worker: a trial process per attempt


@pytest.mark.slow
def test_losing_every_node_that_can_run_a_trial_is_one_line_then_a_rerun_resumes(
    cluster, cache, tmp_path):
  """Both worker nodes SIGKILLed under a search (the head has no CPU): the search says so in
  one line once no node able to run a trial has been alive for NASCLI_RAY_NO_NODE_S (5 s here,
  20 by default) and exits 1; with a node started again, the same command resumes and ends."""
  _two_workers(cluster)
  job = tmp_path / "job"
  args = _search_args(cluster, job)
  args[args.index("--max_nas_trial") + 1] = "2"
  args[args.index("--max_parallel_nas_trial") + 1] = "1"
  cmd = [sys.executable, "-m", "nascli", *args]
  env = _env(cache, RAY_AUTH_TOKEN=cluster.token, NASCLI_RAY_NO_NODE_S="5")
  driver = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
  try:
    _wait_for(job, lambda ev: [e for e in ev if e["event"] == "started"], 300, driver)
    time.sleep(2)  # the attempt is under way on its node
    for node in cluster.workers():
      assert cluster.kill_node(node)
    killed = time.monotonic()
    _, err = driver.communicate(timeout=120)
    waited = time.monotonic() - killed
  finally:
    if driver.poll() is None:
      driver.kill()
  assert driver.returncode == 1, err[-3000:]
  assert waited < 60, waited
  line = err.strip().splitlines()[-1]
  assert re.fullmatch(
      rf"Error: no node of the Ray cluster at {re.escape(cluster.address)} can run a trial"
      r" \(needs 1 CPUs and 0 GPUs\); the search waited [5-9] s; start nodes and run the same"
      r" command again to resume", line), err[-3000:]
  assert sum("no node of the Ray cluster" in x for x in err.splitlines()) == 1
  assert [e["event"] for e in journal_events(job)][-1] in ("started", "lost")
  node = cluster.add_node(1)
  again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                         check=False)
  assert again.returncode == 0, again.stderr[-3000:]
  rows = json.loads(again.stdout)
  assert [(r["trial_id"], r["status"]) for r in rows] == [("1", "completed"), ("2", "completed")]
  completed = [e for e in journal_events(job) if e["event"] == "completed"]
  assert {e["node"]["node_id"] for e in completed} == {node.node_id()}
