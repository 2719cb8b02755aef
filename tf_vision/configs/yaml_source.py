"""Config sources as nested dicts: a YAML file (local or gs://), a YAML/JSON string, or `a.b=c`.

Free of TensorFlow and Model Garden (imported only to expand an `a.b=c` list, which they define),
so that a command can refuse a malformed --config_file or --params_override before it pays for
importing them: `check` reads a source as `load_yaml_source` will.
"""

import os
import re

import yaml

from nascli import storage
from nascli.errors import NascliError, StorageNotFoundError

# One `name=value` item of Model Garden's `a.b=c,d=[1,2]` override lists (params_dict._PARAM_RE).
_KEY_VALUE = re.compile(r"""
  [a-zA-Z][\w\.]*\[?[0-9]*\]?\s*=\s*
  ('.*?'|".*?"|[^,\[]*|\[[^\]]*\])
  ($|,\s*)""", re.VERBOSE)


def is_key_value_list(text: str) -> bool:
  """Whether `text` is wholly an `a.b=c,d=e` list, as Model Garden's parser would take it."""
  pos = 0
  while pos < len(text):
    m = _KEY_VALUE.match(text, pos)
    if not m or m.end() == pos:
      return False
    pos = m.end()
  return bool(text)


class _Loader(yaml.SafeLoader):
  """Safe YAML with Model Garden's reading of `1e-4` as a float (plain YAML reads a string)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X), list("-+0123456789."))
# Model Garden writes tuples (e.g. crop_area_range) with this tag; a tuple of scalars is safe.
_Loader.add_constructor("tag:yaml.org,2002:python/tuple",
                        lambda loader, node: tuple(loader.construct_sequence(node)))


def load_yaml_source(source: str, what: str) -> dict:
  """A YAML file (local or gs://), a YAML/JSON string, or `a.b=c,d=e`, as a nested dict."""
  if storage.is_gcs(source):
    try:
      data = yaml.load(storage.read_text(source), Loader=_Loader)  # noqa: S506
    except StorageNotFoundError:
      raise NascliError(f"{what} file {source} does not exist") from None
    except yaml.YAMLError as e:
      raise NascliError(f"cannot read {what} {source}: {first_line(e)}") from None
  elif os.path.isfile(source):
    try:
      with open(source, encoding="utf-8") as f:
        data = yaml.load(f, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except (OSError, yaml.YAMLError) as e:
      raise NascliError(f"cannot read {what} {source}: {first_line(e)}") from None
  else:
    text = source
    if is_key_value_list(source):
      from official.modeling.hyperparams import params_dict  # pylint: disable=g-import-not-at-top
      text = params_dict.nested_csv_str_to_json_str(source)
    try:
      data = yaml.load(text, Loader=_Loader)  # noqa: S506
    except yaml.YAMLError as e:
      raise NascliError(f"{what} is neither a file nor valid YAML/JSON/a.b=c: {first_line(e)}"
                        ) from None
    if isinstance(data, str) and ("/" in source or source.endswith((".yaml", ".yml"))):
      raise NascliError(f"{what} file {source} does not exist")
  if data is None:
    return {}
  if not isinstance(data, dict):
    raise NascliError(f"{what} must be a mapping of config keys, got {type(data).__name__}:"
                      f" {str(source)[:80]}")
  return data


def first_line(e: Exception) -> str:
  return " ".join(str(e).split())[:200]




def check(source: str | None, what: str) -> None:
  """Refuses a local source that `load_yaml_source` would refuse (gs:// ones are read later)."""
  if source and not storage.is_gcs(source) and not is_key_value_list(source):
    load_yaml_source(source, what)
