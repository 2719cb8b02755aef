"""A multi-node Ray cluster on this machine, started with Ray's own CLI as users start one.

`ray start --head` and `ray start --address` per node, each with its own ports and CPUs, token
authentication as Ray 2.60 sets it up (the same token in every node's environment), and a temp
dir of its own. Teardown and `kill_node` signal only processes whose command line names this
cluster's temp dir or a node's own port, never `ray stop` (which stops every Ray on the machine,
the other tests' included).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from conftest import free_ports

RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def _cmdline(pid: int) -> list[str]:
  try:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
  except OSError:
    return []


def _children() -> dict[int, list[int]]:
  tree: dict[int, list[int]] = {}
  for name in os.listdir("/proc"):
    if not name.isdigit():
      continue
    try:
      with open(f"/proc/{name}/stat", encoding="utf-8") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
      continue
    tree.setdefault(ppid, []).append(int(name))
  return tree


def _descendants(pids: list[int]) -> list[int]:
  tree, out, todo = _children(), [], list(pids)
  while todo:
    pid = todo.pop()
    out.append(pid)
    todo += tree.get(pid, [])
  return out


def _kill(pids: list[int], signum: int = signal.SIGKILL) -> None:
  for pid in pids:
    try:
      os.kill(pid, signum)
    except OSError:
      pass


class Node:
  def __init__(self, manager_port: int, cpus: int):
    self.manager_port = manager_port
    self.cpus = cpus

  def node_id(self) -> str | None:
    for pid in self.raylet_pids():
      for arg in _cmdline(pid):
        if arg.startswith("--node_id="):
          return arg.split("=", 1)[1]
    return None

  def raylet_pids(self) -> list[int]:
    flag = f"--node_manager_port={self.manager_port}"
    return [int(p) for p in os.listdir("/proc") if p.isdigit()
            and any(a == flag for a in _cmdline(int(p)))]


class LocalCluster:
  """A head without CPUs (trials never land there, as on many real clusters) and worker nodes."""

  def __init__(self, token: str | None = None, env: dict[str, str] | None = None):
    self.token = token or secrets.token_hex(16)
    self.temp_dir = tempfile.mkdtemp(prefix="rayc", dir="/tmp")  # short: unix socket paths
    self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token,
                # A lost node is noticed within seconds, not Ray's default of about 30.
                "RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
                "RAY_health_check_failure_threshold": "3", **(env or {})}
    self.env.pop("RAY_ADDRESS", None)
    self.port = None
    self.nodes: list[Node] = []

  @property
  def address(self) -> str:
    return f"127.0.0.1:{self.port}"

  def _start(self, args: list[str], cpus: int) -> Node:
    ports = free_ports(7)
    node = Node(ports[0], cpus)
    cmd = [RAY, "start", *args, "--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus),
           "--num-gpus", "0", "--temp-dir", self.temp_dir, "--disable-usage-stats",
           "--object-store-memory", str(80 * 1024 * 1024),
           "--node-manager-port", str(ports[0]), "--object-manager-port", str(ports[1]),
           "--dashboard-agent-grpc-port", str(ports[2]),
           "--dashboard-agent-listen-port", str(ports[3]),
           "--metrics-export-port", str(ports[4]), "--runtime-env-agent-port", str(ports[5]),
           "--min-worker-port", "0", "--max-worker-port", "0"]
    done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=120,
                          check=False)
    if done.returncode != 0:
      raise RuntimeError(f"ray start failed ({done.returncode}): {done.stderr[-2000:]}")
    self.nodes.append(node)
    return node

  def start(self, workers: int = 2, cpus_per_worker: int = 1) -> "LocalCluster":
    self.port, client_port = free_ports(2)
    self._start(["--head", "--port", str(self.port), "--ray-client-server-port",
                 str(client_port), "--include-dashboard", "false"], 0)
    for _ in range(workers):  # one at a time: nodes starting at once time out here
      self._start(["--address", self.address], cpus_per_worker)
    return self

  def add_node(self, cpus: int = 1) -> Node:
    """Starts one more worker node (as `ray start --address` on a machine that joins)."""
    return self._start(["--address", self.address], cpus)

  def workers(self) -> list[Node]:
    """The worker nodes whose raylet runs (the head and killed nodes left out)."""
    return [n for n in self.nodes[1:] if n.raylet_pids()]

  def kill_node(self, node: Node) -> list[int]:
    """SIGKILLs a node's raylet and everything under it (its workers, their trials)."""
    pids = _descendants(node.raylet_pids())
    _kill(pids)
    return pids

  def processes(self) -> list[int]:
    """Every process of this cluster still alive."""
    mine = []
    for name in os.listdir("/proc"):
      if name.isdigit() and any(self.temp_dir in a or a.endswith((f"={self.port}",
                                                                    f":{self.port}"))
                                for a in _cmdline(int(name))):
        mine.append(int(name))
    raylets = [p for n in self.nodes for p in n.raylet_pids()]
    return sorted(set(_descendants(mine + raylets)) - {os.getpid()})

  def stop(self) -> None:
    for _ in range(3):  # SIGKILL, as a lost machine ends them; again for any child they forked
      _kill(self.processes())
      time.sleep(0.3)
    shutil.rmtree(self.temp_dir, ignore_errors=True)
