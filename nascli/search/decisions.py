"""Reading and sampling a DNA decision by decision: the journal's DNA key and `Decisions`.

TPE, REINFORCE and GP-BO sample a DNA one decision at a time through `Decisions`; `dna_key` is
the form the journal and the controller keep a DNA in.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

import pyglove as pg

from nascli.errors import NascliError

Dna = tuple[int | float, ...]


def dna_key(dna: pg.DNA | Iterable[int | float]) -> Dna:
  """The journal's form of a DNA: a tuple of `DNA.to_numbers()`, hashable and JSON-able."""
  if isinstance(dna, pg.DNA):
    return tuple(dna.to_numbers())
  return tuple(dna)


@dataclasses.dataclass(frozen=True)
class Decision:
  """A decision point of a DNASpec, as a generator that samples decision by decision sees it."""
  name: str  # its id in the spec, e.g. 'blocks[0].kernel_size', 'output_block_levels[2]'
  num_candidates: int  # 0 for a float decision (pg.floatv)
  float_range: tuple[float, float, bool] | None  # (min, max, log scale) of a float decision
  parent: int | None  # the conditional decision it lives under (an index into Decisions.items)
  parent_candidate: int | None  # ... and the candidate of that decision it belongs to
  subchoice: int | None  # its position in a multi-choice (pg.sublist_of), else None
  group: int | None  # the multi-choice's first choice (an index into Decisions.items)
  num_subchoices: int  # how many choices that multi-choice makes (1 for a plain oneof)
  distinct: bool  # a multi-choice's choices must differ
  sorted: bool  # ... and be in candidate order


Chooser = Callable[[int, Decision, 'list[int] | None'], 'int | float']


class Decisions:
  """The decision points of a DNASpec in DNA order, to sample or read a DNA one at a time.

  `walk(choose)` visits the decisions that are active given the values chosen so far (a
  decision under a candidate of a `pg.oneof` exists only if that candidate is chosen) and asks
  `choose(index, decision, allowed)` for each; `allowed` is None for "any candidate" (and for
  floats), or the candidate indices a multi-choice still allows (distinct, sorted). The values
  in walk order are the DNA's `to_numbers()`, so the same walk reads a DNA back.
  """

  def __init__(self, dna_spec: pg.DNASpec, algorithm: str, allow_floats: bool = True):
    self.dna_spec = dna_spec
    items: list[Decision] = []
    index_of: dict[int, int] = {}  # id(decision point or multi-choice) -> its (first) index
    for dp in dna_spec.decision_points:
      if isinstance(dp, pg.geno.Float):
        if not allow_floats:
          raise NascliError(f'search algorithm {algorithm!r} cannot search float decision '
                            f'{dp.id} (pg.floatv): it samples candidates only')
        num_candidates, float_range = 0, (float(dp.min_value), float(dp.max_value),
                                          dp.scale == 'log')
      elif isinstance(dp, pg.geno.Choices):
        num_candidates, float_range = len(dp.candidates), None
      else:
        raise NascliError(f'search algorithm {algorithm!r} cannot search decision {dp.id} '
                          f'({type(dp).__name__}); use random or regularized_evolution')
      parent = parent_candidate = None
      if dp.parent_choice is not None:
        node = dp
        while node.parent_spec is not dp.parent_choice:
          node = node.parent_spec
        parent, parent_candidate = index_of[id(dp.parent_choice)], node.index
      multi = dp.parent_spec if dp.is_subchoice else None
      index_of[id(dp)] = len(items)
      if multi is not None:
        index_of.setdefault(id(multi), len(items))
      items.append(Decision(
          name=str(dp.id), num_candidates=num_candidates, float_range=float_range,
          parent=parent, parent_candidate=parent_candidate,
          subchoice=dp.subchoice_index if multi is not None else None,
          group=index_of[id(multi)] if multi is not None else None,
          num_subchoices=multi.num_choices if multi is not None else 1,
          distinct=bool(multi is not None and multi.distinct),
          sorted=bool(multi is not None and multi.sorted)))
    self.items = items
    # Top-level oneofs only (the NAS-Bench-201 cell, mnasnet): DNA(numbers) is that DNA, and
    # half the price of DNA.from_numbers, which matters at thousands of proposals.
    self._flat = len(items) > 1 and all(
        d.parent is None and d.subchoice is None and d.num_candidates for d in items)
    if self._flat:
      probe = [0] * len(items)
      self._flat = pg.DNA(probe).use_spec(dna_spec) == pg.DNA.from_numbers(probe, dna_spec)

  def walk(self, choose: Chooser) -> list[int | float]:
    """The DNA's numbers, each active decision's value from `choose`."""
    values: list[int | float | None] = [None] * len(self.items)
    chosen: dict[int, list[int]] = {}  # multi-choice -> its choices so far
    numbers: list[int | float] = []
    for i, d in enumerate(self.items):
      if d.parent is not None and values[d.parent] != d.parent_candidate:
        continue
      allowed = None
      if d.subchoice is not None and (d.distinct or d.sorted):
        previous = chosen.setdefault(d.group, [])
        high = d.num_candidates - (d.num_subchoices - d.subchoice - 1 if d.distinct and d.sorted
                                   else 0)
        low = (previous[-1] + (1 if d.distinct else 0)) if d.sorted and previous else 0
        allowed = [c for c in range(low, high) if not (d.distinct and c in previous)]
      values[i] = choose(i, d, allowed)
      if d.subchoice is not None:
        chosen.setdefault(d.group, []).append(values[i])
      numbers.append(values[i])
    return numbers

  def to_dna(self, numbers: list[int | float]) -> pg.DNA:
    if self._flat:
      return pg.DNA(list(numbers)).use_spec(self.dna_spec)
    return pg.DNA.from_numbers(list(numbers), self.dna_spec)

  def read(self, dna: pg.DNA) -> list[tuple[int, int | float, list[int] | None]]:
    """(index, value, allowed) of each active decision of `dna`, in walk order."""
    numbers = iter(dna.to_numbers())
    out = []

    def take(i, decision, allowed):
      del decision
      value = next(numbers)
      out.append((i, value, allowed))
      return value

    self.walk(take)
    return out
