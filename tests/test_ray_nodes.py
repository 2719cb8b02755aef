"""ray_nodes without a cluster: a fake `ray.nodes()` whose nodes come and go."""

import time

import pytest

from nascli.errors import NascliError
from nascli.search import ray_nodes

TRIAL = {"num_cpus": 2.0, "num_gpus": 0.0}


class FakeRay:
  def __init__(self, nodes):
    self.alive = nodes  # each node's Resources
    self.asked = 0

  def nodes(self):
    self.asked += 1
    if self.alive is None:
      raise ConnectionError("the GCS is gone")
    return [{"Alive": True, "Resources": r} for r in self.alive] + [
        {"Alive": False, "Resources": {"CPU": 64.0}}]  # a dead node counts for nothing


def test_the_watch_raises_once_no_node_fits_for_the_bound_and_forgives_a_node_that_returns(
    monkeypatch):
  monkeypatch.setenv(ray_nodes.NO_NODE_ENV, "0.3")
  monkeypatch.setattr(ray_nodes, "_CHECK_EVERY_S", 0.0)
  ray = FakeRay([{"CPU": 1.0}])  # too small: a head, or a node of 1 CPU
  watch = ray_nodes.NodeWatch(ray, "10.0.0.1:6379", TRIAL)
  watch.waiting()
  time.sleep(0.2)
  watch.waiting()  # not yet: 0.2 s of 0.3
  ray.alive = [{"CPU": 1.0}, {"CPU": 4.0}]  # a node that fits comes back: the count restarts
  watch.waiting()
  ray.alive = None  # the head lost too: Ray cannot say, which is no node either
  watch.waiting()
  time.sleep(0.2)
  watch.waiting()
  time.sleep(0.2)
  with pytest.raises(NascliError) as e:
    watch.waiting()
  assert str(e.value) == (
      "no node of the Ray cluster at 10.0.0.1:6379 can run a trial (needs 2 CPUs and 0 GPUs);"
      " the search waited 0 s; start nodes and run the same command again to resume")


def test_the_watch_asks_ray_at_most_once_a_second(monkeypatch):
  monkeypatch.delenv(ray_nodes.NO_NODE_ENV, raising=False)
  ray = FakeRay([{"CPU": 4.0}])
  watch = ray_nodes.NodeWatch(ray, "auto", TRIAL)
  for _ in range(50):
    watch.waiting()
  assert ray.asked == 1
  assert ray_nodes.no_node_s() == 20.0


def test_a_cluster_without_a_node_big_enough_is_refused_at_the_start():
  ray = FakeRay([{"CPU": 0.0}, {"CPU": 1.0, "GPU": 1.0}])
  ray_nodes.check_fits(ray, "auto", {"num_cpus": 1.0, "num_gpus": 1.0})
  with pytest.raises(NascliError) as e:
    ray_nodes.check_fits(ray, "auto", TRIAL)
  assert str(e.value) == (
      "no node of the Ray cluster at auto has what a trial asks for (2 CPUs and 0 GPUs,"
      " --num_cpus_per_trial and --num_gpus_per_trial): its 2 node(s) have at most 1 CPUs and"
      " 1 GPUs each")
