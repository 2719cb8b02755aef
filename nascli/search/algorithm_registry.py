"""The search-algorithm registry: algorithms register their factory by decorator.

An algorithm module (pyglove_algorithms.py, tpe.py, reinforce.py, gp_bo.py) imports this module
and decorates its factory with `register_algorithm`; nascli/search/algorithms.py imports every
such module, so the names below are complete once it is imported (controller.py does). The
`_*_option` helpers check an algorithm's options, each refusal one line.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import pyglove as pg

from nascli.errors import NascliError

_ALGORITHMS: dict[str, Callable[..., pg.DNAGenerator]] = {}
# name -> (fewest, most) objectives it optimizes; most None: any number.
_OBJECTIVES: dict[str, tuple[int, int | None]] = {}
# Algorithms whose repeated proposals are trials of their own (`propose_trial`).
_REPEATS: set[str] = set()
# Algorithms the commands build for themselves, never a --search_algorithm.
_INTERNAL: set[str] = set()


def register_algorithm(name: str, objectives: tuple[int, int | None] = (1, 1), *,
                       repeats: bool = False, internal: bool = False
                       ) -> Callable[[Callable[..., pg.DNAGenerator]],
                                     Callable[..., pg.DNAGenerator]]:
  """Registers `factory(seed, **options) -> pg.DNAGenerator` as search algorithm `name`.

  The factory must return a generator whose proposals depend only on the seed and the
  feedback it got, or resume cannot rebuild it.

  Args:
    name: The algorithm's name (`--search_algorithm`).
    objectives: (fewest, most) objectives it optimizes, most None for any number. An
      algorithm that can take more than one is also passed `num_objectives=` (its rewards
      are then tuples of that length).
    repeats: a proposal of an architecture proposed before is a trial too (the same model
      trained again, e.g. with another seed), not a duplicate to skip.
    internal: built by a command for itself (the proxy-task commands), not listed among the
      --search_algorithm choices.
  """
  def decorator(factory):
    if name in _ALGORITHMS:
      raise KeyError(f'search algorithm {name!r} is registered twice')
    _ALGORITHMS[name] = factory
    _OBJECTIVES[name] = objectives
    if repeats:
      _REPEATS.add(name)
    if internal:
      _INTERNAL.add(name)
    return factory
  return decorator


def known_algorithms() -> list[str]:
  """The --search_algorithm choices."""
  return sorted(set(_ALGORITHMS) - _INTERNAL)


def _check_name(name: str) -> None:
  if name not in _ALGORITHMS:
    raise NascliError(f'unknown search algorithm {name!r} (choose from: '
                      f'{", ".join(known_algorithms())})')


def algorithm_supports_objectives(name: str, num_objectives: int) -> bool:
  """Whether algorithm `name` can optimize `num_objectives` objectives (1: a scalar reward)."""
  _check_name(name)
  fewest, most = _OBJECTIVES.get(name, (1, 1))
  return fewest <= num_objectives and (most is None or num_objectives <= most)


def check_objectives(name: str, num_objectives: int) -> None:
  """Refuses, in one line, an algorithm that cannot optimize `num_objectives` objectives.

  Raises:
    NascliError: unknown algorithm, or a count it cannot optimize.
  """
  if algorithm_supports_objectives(name, num_objectives):
    return
  fewest, _ = _OBJECTIVES.get(name, (1, 1))
  able = [a for a in known_algorithms() if algorithm_supports_objectives(a, num_objectives)]
  if num_objectives < fewest:
    raise NascliError(f'search algorithm {name!r} optimizes at least {fewest} objectives '
                      f'(--objectives), got {num_objectives}; for one reward use: '
                      f'{", ".join(able)}')
  raise NascliError(f'search algorithm {name!r} optimizes one scalar reward, not '
                    f'{num_objectives} objectives (--objectives); use: {", ".join(able)}')


def make_algorithm(name: str, seed: int, num_objectives: int = 1,
                   **options: Any) -> pg.DNAGenerator:
  """A new, not yet set up, generator of the registered algorithm `name`."""
  check_objectives(name, num_objectives)
  if _OBJECTIVES.get(name, (1, 1)) == (1, 1):
    return _ALGORITHMS[name](seed, **options)
  return _ALGORITHMS[name](seed, num_objectives=num_objectives, **options)


def _reject_options(name: str, options: Mapping[str, Any], allowed: Iterable[str] = ()) -> None:
  unknown = sorted(set(options) - set(allowed))
  if unknown:
    hint = f' (it takes: {", ".join(allowed)})' if allowed else ' (it takes none)'
    raise NascliError(f'search algorithm {name!r} has no option {unknown[0]!r}{hint}')


def _int_option(name: str, key: str, value: Any, minimum: int | None = None) -> int:
  if isinstance(value, bool) or not isinstance(value, int):
    raise NascliError(f'search algorithm {name!r}: {key} must be an integer, got {value!r}')
  if minimum is not None and value < minimum:
    raise NascliError(f'search algorithm {name!r}: {key} must be at least {minimum}, '
                      f'got {value}')
  return value


def _float_option(name: str, key: str, value: Any, low: float, high: float, *,
                  low_open: bool = False, high_open: bool = False) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise NascliError(f'search algorithm {name!r}: {key} must be a number, got {value!r}')
  value = float(value)
  if not ((value > low if low_open else value >= low)
          and (value < high if high_open else value <= high)):  # NaN fails both
    interval = f'{"(" if low_open else "["}{low:g}, {high:g}{")" if high_open else "]"}'
    raise NascliError(f'search algorithm {name!r}: {key} must be in {interval}, got {value:g}')
  return value


def _bool_option(name: str, key: str, value: Any) -> bool:
  if not isinstance(value, bool):
    raise NascliError(f'search algorithm {name!r}: {key} must be true or false, got {value!r}')
  return value
