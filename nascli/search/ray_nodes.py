"""Whether the Ray cluster has a node able to run a trial: at the start, and while trials wait.

A trial runs on one node. A cluster whose nodes are each too small would queue it forever, so
the search refuses to start on one; and a cluster that loses every node able to run a trial
(machines gone, `ray stop` on them, a scaled-down KubeRay group) would leave the search waiting
forever, so `NodeWatch` ends it in one line once no such node has been alive for
NO_NODE_S (20 s; NASCLI_RAY_NO_NODE_S sets another positive number of seconds). The journal
then holds what a killed driver leaves: the same command, run once nodes are back, resumes.
"""

import time
from typing import Any

from nascli import checks
from nascli.errors import NascliError

NO_NODE_S = 20.0
NO_NODE_ENV = "NASCLI_RAY_NO_NODE_S"
_CHECK_EVERY_S = 1.0  # how often a waiting search asks Ray for its nodes


def _alive(ray: Any) -> list[dict[str, float]]:
  """The resources of each node alive; none when Ray cannot say (its head is gone too)."""
  try:
    nodes = ray.nodes()
  except Exception:  # pylint: disable=broad-except
    return []
  return [n.get("Resources", {}) for n in nodes if n.get("Alive")]


def _fits(nodes: list[dict[str, float]], resources: dict[str, float]) -> bool:
  return any(r.get("CPU", 0) >= resources["num_cpus"] and r.get("GPU", 0) >= resources["num_gpus"]
             for r in nodes)


def _needs(resources: dict[str, float]) -> str:
  return f"{resources['num_cpus']:g} CPUs and {resources['num_gpus']:g} GPUs"


def check_fits(ray: Any, address: str, resources: dict[str, float]) -> None:
  """Refuses a cluster none of whose nodes has what a trial asks for.

  Raises:
    NascliError: naming what the largest node has.
  """
  nodes = _alive(ray)
  if _fits(nodes, resources):
    return
  largest = max(nodes, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), default={})
  raise NascliError(
      f"no node of the Ray cluster at {address} has what a trial asks for ({_needs(resources)},"
      f" --num_cpus_per_trial and --num_gpus_per_trial): its {len(nodes)} node(s) have at most"
      f" {largest.get('CPU', 0):g} CPUs and {largest.get('GPU', 0):g} GPUs each")


def no_node_s() -> float:
  """NO_NODE_S, or the positive number of seconds NASCLI_RAY_NO_NODE_S gives."""
  return checks.env_seconds(NO_NODE_ENV, NO_NODE_S)


class NodeWatch:
  """Asked while an attempt waits for Ray to place it: raises once no node able to run a trial
  has been alive for `no_node_s()` seconds in a row."""

  def __init__(self, ray: Any, address: str, resources: dict[str, float]):
    self._ray, self._address, self._resources = ray, address, resources
    self._bound_s = no_node_s()
    self._asked = float("-inf")
    self._none_since: float | None = None

  def waiting(self) -> None:
    """An attempt is waiting.

    Raises:
      NascliError: every node able to run it has been gone for the bound.
    """
    now = time.monotonic()
    if now - self._asked < _CHECK_EVERY_S:
      return
    self._asked = now
    if _fits(_alive(self._ray), self._resources):
      self._none_since = None
      return
    if self._none_since is None:
      self._none_since = now
    elif now - self._none_since >= self._bound_s:
      raise NascliError(
          f"no node of the Ray cluster at {self._address} can run a trial (needs"
          f" {_needs(self._resources)}); the search waited {now - self._none_since:.0f} s;"
          " start nodes and run the same command again to resume")
