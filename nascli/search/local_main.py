"""From `search_in_local`'s Vertex-style arguments to a LocalSearch, with the embedded defaults.

With no data flags a search runs on its space's embedded data set (digits for mnasnet, shapes for
spinenet: the `defaults` of its registration, tf_vision/search_spaces/registry.py), converted
once into a cache folder, and the space's testing YAML, so
`nascli search_in_local --prebuilt_search_space=mnasnet` works offline in minutes on a CPU.
"""

import os
from pathlib import Path
from typing import TYPE_CHECKING

from nascli.errors import NascliError
from tf_vision.search_spaces import registry

if TYPE_CHECKING:
  from nascli.search.search_loop import SearchArgs

# Vertex's --search_docker_flags keys and the field of the trials' RunSpec (nascli/run_spec.py)
# each sets ("model" only checks; config_file adds one).
DOCKER_FLAGS = {"params_override": "params_override",
                "training_data_path": "data.training_data_path",
                "validation_data_path": "data.validation_data_path",
                "config_file": "config_files", "model": "model", "experiment": "experiment",
                "dataset_dir": "data.dataset_dir"}


def default_job_dir(name: str, suffix: str | None = None) -> str:
  """nascli_output/search_<name>, `-<suffix>` appended for a search with other settings than
  its space's defaults (search_flags.default_job_dir picks both)."""
  return os.path.join("nascli_output", f"search_{name}" + (f"-{suffix}" if suffix else ""))


def cache_dir() -> Path:
  return Path(os.environ.get("NASCLI_CACHE_DIR", Path.home() / ".cache" / "nascli")) / "data"


def embedded_dataset(space: str) -> str:
  """The space's embedded data set, converted on first use (verified on later uses)."""
  # pylint: disable=g-import-not-at-top
  from nascli.data.convert import FORMAT_VERSION, ShardingOptions, convert
  from nascli.data.source import ConvertOptions
  default = registry.get_entry(space).defaults
  if default is None:
    raise NascliError(f"search space {space} has no embedded data set: give --dataset_dir or"
                      " --training_data_path and --validation_data_path")
  suffix = "-".join(f"{k}{v}" for k, v in sorted(default.convert_options.items()))
  # The format in the name: a cache an older nascli wrote (without a test split) is not refused
  # as "a different conversion", it is left alone and a new one written beside it.
  out = cache_dir() / f"{default.dataset}-{suffix}-format{FORMAT_VERSION}"
  convert(default.dataset, out, ConvertOptions(progress=False, **default.convert_options),
          ShardingOptions(num_shards=2))
  return str(out)


def parse_docker_flags(docker_flags: list[str]) -> list[tuple[str, str]]:
  """Vertex's KEY=VALUE trainer flags as (key, value) pairs; a malformed one or an unknown key
  is refused in one line."""
  pairs = []
  for item in docker_flags:
    key, sep, value = item.partition("=")
    if not sep or key not in DOCKER_FLAGS:
      raise NascliError(f"--search_docker_flags {item!r}: expected KEY=VALUE with KEY one of"
                        f" {', '.join(sorted(DOCKER_FLAGS))}")
    pairs.append((key, value))
  return pairs


def apply_docker_flags(args: "SearchArgs", docker_flags: list[str]) -> str | None:
  """Sets the trials' run fields Vertex's KEY=VALUE trainer flags name; returns model=..., if
  any."""
  model = None
  for key, value in parse_docker_flags(docker_flags):
    if key == "model":
      model = value
    elif key == "config_file":
      args.trial.run.config_files.append(value)
    else:
      *parents, field = DOCKER_FLAGS[key].split(".")
      target = args.trial.run
      for name in parents:
        target = getattr(target, name)
      setattr(target, field, value)
  return model


def run(args: "SearchArgs", docker_flags: list[str] | None = None,
        executor=None) -> list[dict]:
  """Fills in Vertex's trainer flags and the embedded defaults, runs the search (or reports a
  finished one), returns rows."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import results, search_loop
  model = apply_docker_flags(args, list(docker_flags or []))
  if args.search_space not in registry.known_search_spaces():
    raise NascliError(f"unknown --prebuilt_search_space {args.search_space!r}; known:"
                      f" {', '.join(registry.known_search_spaces())}")
  # A module's space is imported and checked here, before a trial is started.
  space = registry.resolve_search_space(args.search_space, args.search_space_module)
  expected = space.require_binding().model
  if model and model != expected:
    raise NascliError(f"model={model} does not fit search space {space.name} (it builds a"
                      f" {expected} model)")
  run = args.trial.run
  if not (run.data.training_data_path or run.data.validation_data_path or run.data.dataset_dir):
    run.data.dataset_dir = embedded_dataset(space.name)
  if not run.config_files and space.defaults is not None:
    run.config_files = [space.defaults.config_path()]
  search_loop.settle_auto(args)
  # A finished job is reported from its journal: no worker started, no TensorFlow loaded.
  done = search_loop.finished_job(args)
  if done is not None:
    if executor is not None:
      executor.close()
    search_loop.report_finished(args, done, space.name, space.require_binding().metric)
    return results.trial_rows(args.job_dir, done)
  state = search_loop.SearchLoop(args, executor).run()
  return results.trial_rows(args.job_dir, state)
