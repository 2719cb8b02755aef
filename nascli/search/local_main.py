"""From `search_in_local`'s Vertex-style arguments to a LocalSearch, with the embedded defaults.

With no data flags a search runs on an embedded data set (digits for mnasnet, shapes for
spinenet), converted once into a cache folder, and the space's testing YAML, so
`nascli search_in_local --prebuilt_search_space=mnasnet` works offline in minutes on a CPU.
"""

import dataclasses
import os
from pathlib import Path
from typing import Any

from nascli.errors import NascliError

TEST_FILES = Path(__file__).resolve().parents[2] / "tf_vision" / "test_files"


@dataclasses.dataclass(frozen=True)
class EmbeddedDefault:
  dataset: str
  convert_options: dict[str, Any]
  config_file: str


DEFAULTS = {
    "mnasnet": EmbeddedDefault("digits", {"image_size": 32},
                               "fast_nas_classification_search_for_testing.yaml"),
    "spinenet": EmbeddedDefault("shapes", {"image_size": 128, "num_samples": 256},
                                "fast_nas_detection_spinenet_search_for_testing.yaml"),
}
# Vertex's --search_docker_flags keys and the search argument each sets.
DOCKER_FLAGS = {"params_override": "params_override", "training_data_path": "training_data_path",
                "validation_data_path": "validation_data_path", "config_file": "config_file",
                "model": "model", "experiment": "experiment", "dataset_dir": "dataset_dir"}


@dataclasses.dataclass
class CommandArgs:
  prebuilt_search_space: str = "mnasnet"
  search_space_module: str | None = None
  search_algorithm: str = "random"
  seed: int = 0
  max_nas_trial: int = 4
  max_parallel_nas_trial: int = 1
  max_failed_nas_trial: int | None = None
  target_device_latency_ms: float | None = None
  latency_constraint: str = "soft"
  latency_weight: float = 0.07
  local_output_dir: str | None = None
  search_docker_flags: list[str] = dataclasses.field(default_factory=list)
  experiment: str | None = None
  config_file: list[str] = dataclasses.field(default_factory=list)
  params_override: str | None = None
  training_data_path: str | None = None
  validation_data_path: str | None = None
  dataset_dir: str | None = None
  population_size: int | None = None
  tournament_size: int | None = None
  overwrite: bool = False
  model: str | None = None


def cache_dir() -> Path:
  return Path(os.environ.get("NASCLI_CACHE_DIR", Path.home() / ".cache" / "nascli")) / "data"


def embedded_dataset(space: str) -> str:
  """The space's embedded data set, converted on first use (verified on later uses)."""
  # pylint: disable=g-import-not-at-top
  from nascli.data.convert import ShardingOptions, convert
  from nascli.data.source import ConvertOptions
  default = DEFAULTS[space]
  suffix = "-".join(f"{k}{v}" for k, v in sorted(default.convert_options.items()))
  out = cache_dir() / f"{default.dataset}-{suffix}"
  convert(default.dataset, out, ConvertOptions(progress=False, **default.convert_options),
          ShardingOptions(num_shards=2))
  return str(out)


def _apply_docker_flags(args: CommandArgs) -> None:
  for item in args.search_docker_flags:
    key, sep, value = item.partition("=")
    if not sep or key not in DOCKER_FLAGS:
      raise NascliError(f"--search_docker_flags {item!r}: expected KEY=VALUE with KEY one of"
                        f" {', '.join(sorted(DOCKER_FLAGS))}")
    target = DOCKER_FLAGS[key]
    if target == "config_file":
      args.config_file.append(value)
    else:
      setattr(args, target, value)


def run(args: CommandArgs) -> list[dict]:
  # pylint: disable=g-import-not-at-top
  from nascli.search import local_search, results
  _apply_docker_flags(args)
  space = args.prebuilt_search_space
  if args.model and not args.search_space_module:
    from nascli.search.trial import binding_for
    expected = binding_for(space).model
    if args.model != expected:
      raise NascliError(f"model={args.model} does not fit search space {space} (it builds a"
                        f" {expected} model)")
  if not args.search_space_module and space not in DEFAULTS:
    from tf_vision import search_spaces
    raise NascliError(f"unknown --prebuilt_search_space {space!r}; known:"
                      f" {', '.join(search_spaces.known_search_spaces())}")
  no_data = not (args.training_data_path or args.validation_data_path or args.dataset_dir)
  dataset_dir = args.dataset_dir
  if no_data:
    dataset_dir = embedded_dataset(space)
  config_files = list(args.config_file)
  if not config_files and space in DEFAULTS:
    config_files = [str(TEST_FILES / DEFAULTS[space].config_file)]
  options = {k: v for k, v in (("population_size", args.population_size),
                               ("tournament_size", args.tournament_size)) if v is not None}
  job_dir = args.local_output_dir or os.path.join("nascli_output", f"search_{space}")
  search = local_search.LocalSearch(local_search.SearchArgs(
      job_dir=job_dir, search_space=space, search_space_module=args.search_space_module,
      search_algorithm=args.search_algorithm, seed=args.seed, max_nas_trial=args.max_nas_trial,
      max_parallel_nas_trial=args.max_parallel_nas_trial,
      max_failed_nas_trial=args.max_failed_nas_trial,
      target_device_latency_ms=args.target_device_latency_ms,
      latency_constraint=args.latency_constraint, latency_weight=args.latency_weight,
      experiment=args.experiment, config_files=config_files,
      params_override=args.params_override, training_data_path=args.training_data_path,
      validation_data_path=args.validation_data_path, dataset_dir=dataset_dir,
      overwrite=args.overwrite, algorithm_options=options))
  state = search.run()
  return results.trial_rows(job_dir, state)
