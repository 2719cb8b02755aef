"""MnasNet's latency-aware reward, with its soft and hard constraints.

reward = accuracy * (target / latency) ** w. Soft: w = latency_weight (0.07 in the MnasNet paper
and Vertex AI NAS) on both sides of the target. Hard: no penalty at or below the target and
w = 1 above it, so a slower model pays in proportion to its excess.

With a latency model (--latency_model) a proposal predicted over the hard target (beyond
--latency_margin) is not trained, so it has no accuracy; the controller is told
`over_target_penalty`: the hard reward's own latency factor target / latency (what the reward
would be at accuracy 1, its upper bound) minus 1. It lies in (-1, 0): below the reward of every
trained trial (accuracy * factor >= 0), lower the further over the target, and bounded, so
that one architecture far over the target does not stretch the scale a Gaussian process or a
policy gradient sees (-(latency / target - 1) would reach -20 at 21 times the target). A pure
function of the journaled prediction and target: a rebuilt controller replays it exactly.
With --objectives the controller gets `over_target_values`.
"""

from typing import Any, Callable, Sequence

from nascli.errors import NascliError

_CONSTRAINTS: dict[str, Callable[[float, float, float, float], float]] = {}


def register_constraint(name: str):
  def decorator(fn):
    _CONSTRAINTS[name] = fn
    return fn
  return decorator


@register_constraint("soft")
def _soft(accuracy: float, latency_ms: float, target_ms: float, weight: float) -> float:
  return accuracy * (target_ms / latency_ms) ** weight


@register_constraint("hard")
def _hard(accuracy: float, latency_ms: float, target_ms: float, weight: float) -> float:
  del weight
  return accuracy if latency_ms <= target_ms else accuracy * (target_ms / latency_ms)


def known_constraints() -> list[str]:
  return sorted(_CONSTRAINTS)


def check(constraint: str, target_ms: float | None, weight: float) -> None:
  if constraint not in _CONSTRAINTS:
    raise NascliError(f"unknown --latency_constraint {constraint!r}; known:"
                      f" {', '.join(known_constraints())}")
  if target_ms is not None and target_ms <= 0:
    raise NascliError(f"--target_device_latency_ms must be positive, got {target_ms}")
  if weight < 0:
    raise NascliError(f"--latency_weight must be >= 0, got {weight}")


def compute(accuracy: float, latency_ms: float | None, target_ms: float | None,
            constraint: str = "soft", weight: float = 0.07) -> float:
  """The trial's reward; accuracy alone when no latency target is set."""
  if target_ms is None:
    return float(accuracy)
  if latency_ms is None or latency_ms <= 0:
    raise ValueError(f"a latency target needs a measured latency, got {latency_ms}")
  return float(_CONSTRAINTS[constraint](accuracy, latency_ms, target_ms, weight))


def over_target_penalty(latency_ms: float, target_ms: float) -> float:
  """The reward told for a proposal predicted at `latency_ms`, over the hard target and not
  trained: target / latency - 1, in (-1, 0) (see the module's docstring)."""
  return float(target_ms / latency_ms - 1.0)


def over_target_values(objectives: Sequence[Any], latency_ms: float) -> list[float]:
  """With --objectives (nascli/search/pareto.py), the signed objective values told for such a
  proposal: the predicted latency for `latency_ms` (signed as a trained trial's), and 0 for a
  `max` objective (every metric a trial measures is >= 0: as bad as a trained trial can be).

  Raises:
    NascliError: a `min` objective on another metric (flops, params, seconds): an untrained
      proposal has no value for it that could not beat a trained one.
  """
  values = []
  for objective in objectives:
    if objective.metric == "latency_ms":
      values.append(float(objective.sign * latency_ms))
    elif objective.direction == "max":
      values.append(0.0)
    else:
      raise NascliError(
          f"--objectives {objective}: a proposal skipped over the hard latency target has no"
          f" {objective.metric} to tell the controller; with --latency_model and"
          " --latency_constraint hard use latency_ms and max objectives, or"
          " --latency_constraint soft")
  return values
