"""The syntax of Vertex AI NAS's `nas_params_str`, readable without pyglove or TensorFlow.

`tf_vision.search_spaces.nas_params` checks a string against its search space, which needs
pyglove (0.5-0.9 s to import) and the space registry. What needs neither is here, outside that
package (whose `__init__` imports pyglove), so `nascli train` can refuse a malformed
`--nas_params_str` in a second, before TensorFlow is imported: the JSON must be an object whose
values are `"<index>/<num_candidates> (<literal>)"` (numbers for `pg.floatv` decisions).
"""

import json
import os
import re
from typing import Any, Mapping

from nascli import storage
from nascli.errors import NascliError

# pyglove's own parser accepts exactly this (its literal part may span lines).
VALUE_RE = re.compile(r'(\d+)/(\d+)(?: \((.*)\))?', re.S)
VALUE_FORMAT = "'<index>/<num_candidates> (<literal>)'"

NasParams = Mapping[str, Any] | str | os.PathLike


def load_nas_params(params: NasParams) -> tuple[dict[str, Any], str]:
  """Reads a nas_params object given as a dict, JSON text, or a path ending in `.json`.

  A string ending in `.json` is a file path (Vertex's rule); any other string is JSON text.

  Returns:
    (the object, a label naming where it came from, used in error messages).
  """
  if isinstance(params, Mapping):
    return dict(params), 'nas_params'
  if isinstance(params, os.PathLike) or (isinstance(params, str)
                                         and params.strip().endswith('.json')):
    source = os.fspath(params).strip()
    if storage.is_gcs(source):
      text = storage.read_text(source)  # errors name the gs:// path
    else:
      try:
        with open(source, encoding='utf-8') as f:
          text = f.read()
      except OSError as e:
        raise NascliError(f'{source}: cannot read nas_params file ({e.strerror})') from e
  elif isinstance(params, str):
    source, text = 'nas_params_str', params
  else:
    raise NascliError(f'nas_params: expected a JSON object, JSON text or a .json path, got '
                      f'{type(params).__name__}')
  try:
    value = json.loads(text)
  except json.JSONDecodeError as e:
    raise NascliError(f'{source}: malformed JSON: {e.msg} at line {e.lineno} column {e.colno}'
                      ) from e
  if not isinstance(value, dict):
    raise NascliError(f'{source}: expected a JSON object mapping decision keys to values, got '
                      f'{json_type(value)}')
  return value, source


def check(params: str | os.PathLike, what: str = '--nas_params_str') -> dict[str, Any]:
  """Refuses a local nas_params (JSON text or .json file) whose syntax no space accepts.

  Which keys a space has, and how many candidates each, are checked later against the space;
  a gs:// file is read later too.

  Returns:
    The object read ({} for a gs:// path, which is not read here).

  Raises:
    NascliError: one line naming the flag (for JSON text) or the file, and the key.
  """
  if storage.is_gcs(os.fspath(params).strip()):
    return {}
  try:
    values, source = load_nas_params(params)
  except NascliError as e:
    text = str(e)
    if text.startswith('nas_params_str: '):
      text = f'{what}: ' + text[len('nas_params_str: '):]
    raise NascliError(text) from None
  source = what if source == 'nas_params_str' else source
  if not values:
    raise NascliError(f'{source}: no decisions (expected e.g. {{"blocks[0].kernel_size": '
                      '"0/2 (3)"})')
  for key, value in values.items():
    if isinstance(value, (int, float)) and not isinstance(value, bool):
      continue  # a pg.floatv decision
    split_value(source, key, value)
  return values


def split_value(source: str, key: str, value: Any,
                shown: str | None = None) -> tuple[int, int, str | None]:
  """(index, count, literal) of one `"<index>/<n> (<literal>)"` value, else one line naming
  `source` and `key`; `shown` is how that line quotes a bad value (default: its repr)."""
  match = VALUE_RE.fullmatch(value) if isinstance(value, str) else None
  if match is None:
    shown = repr(value) if shown is None else shown
    raise NascliError(f'{source}: key {key!r}: value {shown} is not {VALUE_FORMAT}')
  index, count = int(match.group(1)), int(match.group(2))
  if index >= count:
    raise NascliError(f'{source}: key {key!r}: index {index} is out of range for {count} '
                      'candidates')
  return index, count, match.group(3)


def json_type(value: Any) -> str:
  """How a one-line error names a JSON value's type (`an array`, `a string`, ...)."""
  if isinstance(value, list):
    return 'an array'
  if isinstance(value, str):
    return 'a string'
  if isinstance(value, bool):
    return 'a boolean'
  if isinstance(value, (int, float)):
    return 'a number'
  return 'null' if value is None else type(value).__name__
