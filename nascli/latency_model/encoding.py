"""An architecture (Vertex `nas_params`) as the features a latency predictor reads.

A space is described by its decisions, `{path: [literal of each candidate]}` in the space's
decision order (the literal is what nas_params writes in parentheses, `'conv'`, `3`; None where
unknown). That is all a latency model keeps of the space: enough to refuse an architecture or a
search of another space and to enumerate the space, without pyglove.

Features are one-hot per (decision, candidate index) with candidate 0 as the dropped baseline,
so a linear model's intercept is the latency of the all-baseline architecture and each weight is
what a choice adds to it. Decisions are grouped by block (`blocks[3].kernel_size` belongs to
block `blocks[3]`), which the lookup and interaction predictors use.
"""

import dataclasses
import functools
import re
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from nascli.errors import InputError
from nascli.errors import NascliError
# pyglove-free: the value syntax `"<index>/<num_candidates> (<literal>)"` and the JSON reader.
from tf_vision import nas_params_syntax
from tf_vision.nas_params_syntax import load_nas_params

# path -> the literal of each candidate, in candidate order (None where not known).
Decisions = dict[str, list[str | None]]

# `blocks[3].kernel_size` -> list `blocks`, index 3, field `kernel_size`; the shortest prefix wins
# (`intermediate_blocks[4].input_offsets[1]` is in block `intermediate_blocks[4]`).
_BLOCK_RE = re.compile(r'(.*?)\[(\d+)\]\.(.+)', re.S)


@dataclasses.dataclass(frozen=True)
class Group:
  """One block of the space (or one decision outside any block)."""
  name: str  # `blocks[3]`, or the decision's path when it is in no block
  members: tuple[int, ...]  # positions of its decisions, in decision order
  filters: int | None  # its decision whose field name contains `filters` (the last such one)
  prev: int | None  # the group of the previous block of the same list (`blocks[2]`)


@dataclasses.dataclass(frozen=True)
class Layout:
  """What a predictor knows of the problem: where each decision's one-hot columns are, the
  block structure, and (for kinds that compute from the architecture itself) the candidates'
  literals, the space's name and the input size measured at."""
  keys: tuple[str, ...]
  counts: tuple[int, ...]
  offsets: tuple[int, ...]  # column of candidate 1 of each decision
  width: int
  groups: tuple[Group, ...]
  literals: tuple[tuple[str | None, ...], ...]
  space: str | None = None
  input_size: int | None = None
  # {layer key: ms} of layers timed alone (`build_latency_model --measure_layers`), for the
  # `layer_lookup` kind's fitting; a fitted model carries its own copy in its params.
  layer_table: Mapping[str, float] | None = dataclasses.field(default=None, compare=False)

  def nas_params(self, indices: Sequence[int]) -> dict[str, str]:
    """The Vertex nas_params of an architecture given by its candidate indices."""
    out = {}
    for key, literals, i in zip(self.keys, self.literals, indices):
      literal = literals[int(i)]
      out[key] = f'{int(i)}/{len(literals)}' + ('' if literal is None else f' ({literal})')
    return out

  def one_hot(self, x: np.ndarray) -> np.ndarray:
    """(n, decisions) candidate indices -> (n, width) one-hot without the baseline columns."""
    x = np.asarray(x, dtype=np.int64).reshape(-1, len(self.keys))
    out = np.zeros((x.shape[0], self.width))
    for j, (offset, count) in enumerate(zip(self.offsets, self.counts)):
      for c in range(1, count):
        out[:, offset + c - 1] = x[:, j] == c
    return out


def layout(decisions: Mapping[str, Sequence[Any]], space: str | None = None,
           input_size: int | None = None) -> Layout:
  """The layout of a space's decisions (cached: the search asks once per proposal)."""
  return _layout(tuple((str(k), tuple(v)) for k, v in decisions.items()), space, input_size)


@functools.lru_cache(maxsize=32)
def _layout(items: tuple[tuple[str, tuple[str | None, ...]], ...], space: str | None,
            input_size: int | None) -> Layout:
  keys = tuple(k for k, _ in items)
  counts = tuple(len(v) for _, v in items)
  offsets, width = [], 0
  for n in counts:
    offsets.append(width)
    width += n - 1
  names: dict[str, list[int]] = {}
  fields: dict[str, list[str]] = {}
  for j, key in enumerate(keys):
    match = _BLOCK_RE.fullmatch(key)
    name = f'{match.group(1)}[{match.group(2)}]' if match else key
    names.setdefault(name, []).append(j)
    fields.setdefault(name, []).append(match.group(3) if match else key.rsplit('.', 1)[-1])
  order = list(names)
  groups = []
  for name in order:
    members = tuple(names[name])
    filters = None
    for j, field in zip(members, fields[name]):
      if 'filters' in field:
        filters = j
    prev = None
    match = re.fullmatch(r'(.*)\[(\d+)\]', name, re.S)
    if match and name not in keys:
      prev_name = f'{match.group(1)}[{int(match.group(2)) - 1}]'
      if prev_name in names:
        prev = order.index(prev_name)
    groups.append(Group(name, members, filters, prev))
  return Layout(keys, counts, tuple(offsets), width, tuple(groups), tuple(v for _, v in items),
                space, input_size)


def normalize_decisions(decisions: Mapping[str, Any], source: str = 'decisions') -> Decisions:
  """`{path: [literals]}` from `{path: [literals]}` or `{path: number of candidates}`.

  Raises:
    InputError: one line naming `source` and the offending path.
  """
  if not isinstance(decisions, Mapping) or not decisions:
    raise InputError(f'{source}: decisions must be a non-empty object {{path: [literals]}}')
  out = {}
  for key, value in decisions.items():
    if not isinstance(key, str) or not key:
      raise InputError(f'{source}: decision path {key!r} is not a non-empty string')
    if isinstance(value, int) and not isinstance(value, bool):
      value = [None] * value
    if (not isinstance(value, (list, tuple)) or not value
        or not all(v is None or isinstance(v, str) for v in value)):
      raise InputError(f'{source}: decision {key!r}: expected a non-empty list of candidate '
                       f'literals (strings or null) or a count, got {_short(value)}')
    out[key] = list(value)
  return out


def decisions_of_space(space: Any) -> Decisions:
  """The decisions of a registered space name, a pyglove hyper-value or a `pg.DNASpec`.

  Imports pyglove (the builder has it; the search's checks read the model file instead).

  Raises:
    NascliError: the space has a decision that is not a choice (`pg.floatv`).
  """
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  if isinstance(space, str):
    from tf_vision.search_spaces import registry  # pylint: disable=g-import-not-at-top
    spec = registry.get_dna_spec(space)
  elif isinstance(space, pg.DNASpec):
    spec = space
  else:
    spec = pg.dna_spec(space)
  out = {}
  for dp in spec.decision_points:
    if not isinstance(dp, pg.geno.Choices):
      raise NascliError(f'search space decision {str(dp.id)!r} is not a choice ('
                        f'{type(dp).__name__}): a latency model takes categorical decisions only')
    literals = dp.literal_values
    out[str(dp.id)] = [str(v) if literals else None for v in (literals or dp.candidates)]
  return out


def decisions_from_rows(architectures: Iterable[Mapping[str, Any]]) -> Decisions:
  """The decisions the architectures show: counts from `i/n`, literals where seen.

  For a space only known through samples (a user's module the caller cannot import); prefer
  `decisions_of_space`, which knows every literal.
  """
  out: Decisions = {}
  for number, params in enumerate(architectures):
    values, source = load_nas_params(params)
    for key, value in values.items():
      index, count, literal = _split(f'{source} #{number}', key, value)
      known = out.setdefault(key, [None] * count)
      if len(known) != count:
        raise InputError(f'{source} #{number}: key {key!r}: value {value!r} says {count} '
                         f'candidates, earlier architectures {len(known)}')
      if literal is not None:
        known[index] = known[index] if known[index] is not None else literal
  if not out:
    raise InputError('no architectures to read decisions from')
  return out


def parse(nas_params: Any, decisions: Mapping[str, Sequence[str | None]],
          source: str = 'nas_params', space: str | None = None) -> tuple[int, ...]:
  """The candidate index of every decision, checked strictly against the space.

  Args:
    nas_params: The Vertex nas_params object (dict), its JSON text, or a `.json` path.
    decisions: The space's decisions.
    source: Names the architecture in errors.
    space: The space's name, for errors.

  Returns:
    One index per decision, in decision order.

  Raises:
    NascliError: one line naming the key and value: unknown or missing key, bad syntax, a
      candidate count or literal of another space, an index out of range.
  """
  values, read_from = load_nas_params(nas_params)
  source = source if read_from == 'nas_params' else read_from
  where = f'the latency model\'s space {space!r}' if space else 'the latency model\'s space'
  for key in values:
    if key not in decisions:
      raise NascliError(f'{source}: unknown key {key!r} (not a decision of {where})')
  out = []
  for key, literals in decisions.items():
    if key not in values:
      raise NascliError(f'{source}: missing key {key!r} (a decision of {where})')
    value = values[key]
    index, count, literal = _split(source, key, value)
    if count != len(literals):
      raise NascliError(f'{source}: key {key!r}: value {value!r} says {count} candidates, '
                        f'{where} has {len(literals)}')
    expected = literals[index]
    if literal is not None and expected is not None and literal != expected:
      raise NascliError(f'{source}: key {key!r}: literal ({literal}) does not match candidate '
                        f'{index} of {where}, which is ({expected})')
    out.append(index)
  return tuple(out)


def encode(nas_params: Any, decisions: Mapping[str, Sequence[str | None]]) -> np.ndarray:
  """The one-hot features (baseline candidate dropped) of one architecture, a float vector."""
  return layout(decisions).one_hot(np.array([parse(nas_params, decisions)]))[0]


def _split(source: str, key: str, value: Any) -> tuple[int, int, str | None]:
  """(index, count, literal) of one `"<index>/<n> (<literal>)"` value."""
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    raise NascliError(f'{source}: key {key!r}: value {value!r} is a number (a pg.floatv '
                      'decision): a latency model takes categorical decisions only')
  return nas_params_syntax.split_value(source, key, value, _short(value))


def _short(value: Any) -> str:
  text = ' '.join(repr(value).split())
  return text if len(text) <= 80 else text[:77] + '...'
