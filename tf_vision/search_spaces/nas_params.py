"""Vertex AI NAS's `nas_params_str`: a chosen architecture as a flat JSON object.

Keys are the decision paths inside the space (`blocks[3].kernel_size`,
`intermediate_blocks[4].input_offsets[1]`), in the space's decision order; values are
`"<index>/<num_candidates> (<literal repr>)"`, e.g. `"0/2 ('conv')"`, exactly what pyglove's
`DNA.parameters(use_literal_values=True)` writes and `DNA.from_parameters` reads, which is what
Vertex uses on both sides. Reading checks every key and value first so a bad string gives one
line naming the key, instead of pyglove's multi-line ValueError.
"""

import json
from typing import Any, Mapping

import pyglove as pg

from nascli.errors import NascliError
# Reading the JSON and the value syntax need no pyglove (nascli train checks them before loading
# TensorFlow): they live in tf_vision.nas_params_syntax.
from tf_vision.nas_params_syntax import load_nas_params
from tf_vision.nas_params_syntax import NasParams
from tf_vision.nas_params_syntax import VALUE_FORMAT as _VALUE_FORMAT
from tf_vision.nas_params_syntax import VALUE_RE as _VALUE_RE
from tf_vision.search_spaces import registry


def to_nas_params(space: Any, dna: pg.DNA) -> dict[str, str]:
  """The `nas_params_str` object for `dna`, keys in the space's decision order.

  Args:
    space: A registered space name, a pyglove hyper-value, or its `pg.DNASpec`.
    dna: A point of that space.

  Returns:
    `{decision key: "<index>/<num_candidates> (<literal>)"}` (numbers for `pg.floatv`).
  """
  spec, _ = _resolve(space)
  if dna.spec is not spec:
    bound = dna.clone(deep=True)
    try:
      bound.use_spec(spec)
    except ValueError as e:
      raise NascliError(f'DNA {dna} is not a point of this search space '
                        f'({_one_line(e)})') from e
    dna = bound
  return {str(key): value for key, value in dna.parameters(use_literal_values=True).items()}


def to_nas_params_str(space: Any, dna: pg.DNA) -> str:
  """`to_nas_params` as JSON text, as written to a trial's `nas_params_str.json`."""
  return json.dumps(to_nas_params(space, dna), indent=2)


def from_nas_params(space: Any, params: NasParams) -> pg.DNA:
  """The DNA a `nas_params_str` names, checked key by key against the space.

  Args:
    space: A registered space name, a pyglove hyper-value, or its `pg.DNASpec`.
    params: The object (dict), its JSON text, or a path to a `.json` file holding it.

  Returns:
    The DNA, bound to the space's DNASpec.

  Raises:
    NascliError: one line naming the source and the offending key.
  """
  spec, space_name = _resolve(space)
  values, source = load_nas_params(params)
  points = {str(dp.id): dp for dp in spec.decision_points}
  for key in values:
    if key not in points:
      where = f'search space {space_name!r}' if space_name else 'this search space'
      raise NascliError(f'{source}: unknown key {key!r} (not a decision of {where})')

  indices = {}
  for key, dp in points.items():
    if key not in values:
      if _is_conditional(dp):
        continue  # Inactive branches of a conditional space may be absent; pyglove decides.
      raise NascliError(f'{source}: missing key {key!r}')
    if isinstance(dp, pg.geno.Choices):
      indices[key] = _check_choice(source, key, dp, values[key])
  _check_multi_choices(source, points, indices)

  try:
    return pg.DNA.from_parameters(values, spec, use_literal_values=True)
  except (ValueError, TypeError, KeyError) as e:
    raise NascliError(f'{source}: {_one_line(e)}') from e


def decode(space_name: str, params: NasParams) -> tuple[pg.DNA, list[dict[str, Any]]]:
  """(DNA, plain block specs) for a registered space, as the tunable backbones consume them."""
  entry = registry.get_entry(space_name)
  if entry.block_specs is None:
    raise NascliError(f'search space {space_name!r} has no block-spec decoder')
  dna = from_nas_params(space_name, params)
  return dna, entry.block_specs(pg.materialize(entry.build(), dna))


def _resolve(space: Any) -> tuple[pg.DNASpec, str | None]:
  """(DNASpec, registered name or None); registered specs are cached."""
  if isinstance(space, str):
    return registry.get_dna_spec(space), space
  if isinstance(space, pg.DNASpec):
    return space, None
  return pg.dna_spec(space), None


def _is_conditional(dp: Any) -> bool:
  """Whether a decision sits under a candidate of another decision (so it may be inactive)."""
  return dp.parent_choice is not None


def _check_choice(source: str, key: str, dp: Any, value: Any) -> int:
  """Validates one `"<index>/<n> (<literal>)"` value; returns the index."""
  match = _VALUE_RE.fullmatch(value) if isinstance(value, str) else None
  if match is None:
    raise NascliError(f'{source}: key {key!r}: value {value!r} is not {_VALUE_FORMAT}')
  index, count, literal = int(match.group(1)), int(match.group(2)), match.group(3)
  num_candidates = len(dp.candidates)
  if count != num_candidates:
    raise NascliError(f'{source}: key {key!r}: value {value!r} says {count} candidates, the '
                      f'search space has {num_candidates}')
  if index >= num_candidates:
    raise NascliError(f'{source}: key {key!r}: index {index} is out of range for '
                      f'{num_candidates} candidates')
  if literal is not None:
    expected = dp.literal_values[index] if dp.literal_values else None
    if expected is None or literal != str(expected):
      raise NascliError(f'{source}: key {key!r}: literal ({literal}) does not match candidate '
                        f'{index}, which is ({expected})')
  return index


def _check_multi_choices(source: str, points: Mapping[str, Any],
                         indices: Mapping[str, int]) -> None:
  """Distinct / sorted constraints of `pg.sublist_of` (pyglove only reports them multi-line)."""
  groups: dict[int, list[str]] = {}
  parents = {}
  for key, dp in points.items():
    if getattr(dp, 'is_subchoice', False) and key in indices:
      groups.setdefault(id(dp.parent_spec), []).append(key)
      parents[id(dp.parent_spec)] = dp.parent_spec
  for group_id, keys in groups.items():
    parent = parents[group_id]
    for pos, key in enumerate(keys):
      for prev in keys[:pos]:
        if parent.distinct and indices[prev] == indices[key]:
          raise NascliError(f'{source}: key {key!r}: index {indices[key]} repeats {prev!r} '
                            f'(the choices of {str(parent.id)!r} must be distinct)')
      if parent.sorted and pos and indices[key] < indices[keys[pos - 1]]:
        raise NascliError(f'{source}: key {key!r}: index {indices[key]} is below '
                          f'{keys[pos - 1]!r} (the choices of {str(parent.id)!r} must be in '
                          'increasing order)')


def _one_line(e: BaseException) -> str:
  text = ' '.join(str(e).split())
  return text if len(text) <= 300 else text[:297] + '...'
