"""MnasNet's latency-aware reward, with its soft and hard constraints.

reward = accuracy * (target / latency) ** w. Soft: w = latency_weight (0.07 in the MnasNet paper
and Vertex AI NAS) on both sides of the target. Hard: no penalty at or below the target and
w = 1 above it, so a slower model pays in proportion to its excess.
"""

from typing import Callable

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
