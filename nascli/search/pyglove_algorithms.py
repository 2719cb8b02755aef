"""pyglove's search algorithms, registered: random, regularized evolution, NSGA-II, and `fixed`."""

from __future__ import annotations

import itertools
from typing import Any

import pyglove as pg

from nascli.errors import NascliError
from nascli.search.algorithm_registry import _bool_option
from nascli.search.algorithm_registry import _int_option
from nascli.search.algorithm_registry import _reject_options
from nascli.search.algorithm_registry import register_algorithm

DEFAULT_POPULATION_SIZE = 20
DEFAULT_TOURNAMENT_SIZE = 5
# NSGA-II's first 2 x population_size proposals are random: small, for searches of ~100 trials
# (8 against 5, 10, 20: BENCHMARKS.md, NAS-Bench-201 hypervolume, tuning seeds).
DEFAULT_NSGA2_POPULATION_SIZE = 8
# A replayed proposal may be preceded by duplicates that the first run skipped; this only


@register_algorithm('random', objectives=(1, None))
def _random(seed: int, num_objectives: int = 1, **options: Any) -> pg.DNAGenerator:
  """Ignores rewards, so any number of objectives."""
  del num_objectives
  _reject_options('random', options)
  return pg.geno.Random(seed=seed)


@register_algorithm('regularized_evolution')
def _regularized_evolution(seed: int, **options: Any) -> pg.DNAGenerator:
  """Real et al. 2019; small defaults because a local search runs tens of trials, not 20k."""
  name = 'regularized_evolution'
  _reject_options(name, options, ('population_size', 'tournament_size'))
  population = _int_option(name, 'population_size',
                           options.get('population_size', DEFAULT_POPULATION_SIZE))
  tournament = _int_option(name, 'tournament_size',
                           options.get('tournament_size', DEFAULT_TOURNAMENT_SIZE))
  if tournament < 2:
    raise NascliError(f'search algorithm {name!r}: tournament_size must be at least 2, '
                      f'got {tournament}')
  if population < tournament:
    raise NascliError(f'search algorithm {name!r}: population_size ({population}) must be at '
                      f'least tournament_size ({tournament})')
  # The mutator has its own random stream: unseeded, mutations (and so resume) would differ.
  return pg.evolution.regularized_evolution(
      mutator=pg.evolution.mutators.Uniform(seed=seed),
      population_size=population, tournament_size=tournament, seed=seed)


@register_algorithm('nsga2', objectives=(2, None))
def _nsga2(seed: int, num_objectives: int, **options: Any) -> pg.DNAGenerator:
  """Deb et al. 2002, pyglove's: 2 x population_size random proposals, then mutated elites of
  the non-dominated sort (crowding distance within a front)."""
  del num_objectives  # pyglove reads it from the reward tuples
  name = 'nsga2'
  _reject_options(name, options, ('population_size',))
  population = _int_option(name, 'population_size',
                           options.get('population_size', DEFAULT_NSGA2_POPULATION_SIZE), 2)
  return pg.evolution.nsga2(mutator=pg.evolution.mutators.Uniform(seed=seed),
                            population_size=population, seed=seed)


FIXED = 'fixed'


@register_algorithm(FIXED, objectives=(1, None), repeats=True, internal=True)
def _fixed(seed: int, num_objectives: int = 1, **options: Any) -> pg.DNAGenerator:
  """The architectures `dnas` (DNA numbers) in order, each trained with its run seed from
  `seeds` (default: the search's seed); with `repeat`, the list again and again, each pass's
  seeds one more than the last. Proposal i is dnas[i % n] with seed seeds[i % n] + i // n: the
  reference models of a proxy-task study under a candidate proxy, or one model trained with
  seeds s, s + 1, ... Rewards teach it nothing."""
  del num_objectives
  _reject_options(FIXED, options, ('dnas', 'seeds', 'repeat'))
  dnas = options.get('dnas')
  if not isinstance(dnas, (list, tuple)) or not dnas or not all(
      isinstance(d, (list, tuple)) for d in dnas):
    raise NascliError(f'search algorithm {FIXED!r}: dnas must be a non-empty list of DNAs'
                      f' (lists of numbers), got {dnas!r}')
  seeds = options.get('seeds', [seed] * len(dnas))
  if (not isinstance(seeds, (list, tuple)) or len(seeds) != len(dnas)
      or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds)):
    raise NascliError(f'search algorithm {FIXED!r}: seeds must be {len(dnas)} integers, one'
                      f' per DNA, got {seeds!r}')
  repeat = _bool_option(FIXED, 'repeat', options.get('repeat', False))

  @pg.geno.dna_generator
  def listed(dna_spec: pg.DNASpec):
    passes = itertools.count() if repeat else range(1)
    for n in passes:
      for numbers, run_seed in zip(dnas, seeds):
        dna = pg.DNA.from_numbers(list(numbers), dna_spec)
        dna.set_metadata('seed', int(run_seed) + n)
        yield dna

  return listed()
