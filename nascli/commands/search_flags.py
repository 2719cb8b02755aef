"""The flags `search_in_local` and `search` share (Vertex's spellings), and what they build.

Both commands run the same search (nascli/search/search_loop.py); only where trials run differs.
"""

import inspect
import json
from typing import Annotated, Optional

import typer

from nascli.commands.options import flag

Space = Annotated[str, typer.Option(
    *flag("prebuilt_search_space"), help="mnasnet (classification) or spinenet (detection).")]
SpaceModule = Annotated[Optional[str], typer.Option(
    *flag("search_space_module"), help="pkg.module.fn returning your own pyglove space.")]
Algorithm = Annotated[str, typer.Option(
    *flag("search_algorithm"), help="random or regularized_evolution.")]
Seed = Annotated[int, typer.Option(*flag("seed"), help="Controller seed.")]
MaxTrials = Annotated[int, typer.Option(
    *flag("max_nas_trial"), help="Trials in total (resumes count what is done).")]
MaxParallel = Annotated[int, typer.Option(
    *flag("max_parallel_nas_trial"), help="Trials at once.")]
MaxFailed = Annotated[Optional[int], typer.Option(
    *flag("max_failed_nas_trial"), help="Stop once more trials than this fail (default:"
    " --max_nas_trial).")]
TargetLatency = Annotated[Optional[float], typer.Option(
    *flag("target_device_latency_ms"), help="Latency target of the MnasNet reward (unset:"
    " reward = accuracy).")]
Constraint = Annotated[str, typer.Option(*flag("latency_constraint"), help="soft or hard.")]
LatencyWeight = Annotated[float, typer.Option(
    *flag("latency_weight"), help="w of accuracy * (target/latency)**w.")]
OutputDir = Annotated[Optional[str], typer.Option(
    *flag("local_output_dir"), help="The search job dir, a folder or gs://BUCKET/PREFIX"
    " (default: nascli_output/search_<space>).")]
DockerFlags = Annotated[Optional[list[str]], typer.Option(
    *flag("search_docker_flags"), help="Vertex's trainer flags: params_override=...,"
    " training_data_path=..., validation_data_path=..., model=retinanet, config_file=...")]
PrebuiltTrainer = Annotated[bool, typer.Option(
    *flag("use_prebuilt_trainer"), help="Accepted for Vertex compatibility: nascli always runs"
    " its own TF-vision trainer.")]
Experiment = Annotated[Optional[str], typer.Option(
    *flag("experiment"), help="Registered experiment of the trials.")]
ConfigFiles = Annotated[Optional[list[str]], typer.Option(
    *flag("config_file"), help="Trial YAML(s) (default: the testing YAML of the space).")]
Override = Annotated[Optional[str], typer.Option(
    *flag("params_override"), help="Override applied to every trial.")]
TrainPath = Annotated[Optional[str], typer.Option(
    *flag("training_data_path"), help="TFRecord glob(s).")]
ValidationPath = Annotated[Optional[str], typer.Option(
    *flag("validation_data_path"), help="TFRecord glob(s).")]
DatasetDir = Annotated[Optional[str], typer.Option(
    *flag("dataset_dir"), help="A convert-data folder (default: the embedded data set).")]
Population = Annotated[Optional[int], typer.Option(
    *flag("population_size"), help="regularized_evolution population.")]
Tournament = Annotated[Optional[int], typer.Option(
    *flag("tournament_size"), help="regularized_evolution tournament.")]
Overwrite = Annotated[bool, typer.Option(
    *flag("overwrite"), help="Start over in a job dir made with other settings.")]
AsJson = Annotated[bool, typer.Option(*flag("json"), help="Print the trials as JSON.")]


def search_args(prebuilt_search_space, search_space_module, search_algorithm, seed,
                max_nas_trial, max_parallel_nas_trial, max_failed_nas_trial,
                target_device_latency_ms, latency_constraint, latency_weight, local_output_dir,
                experiment, config_file, params_override, training_data_path,
                validation_data_path, dataset_dir, population_size, tournament_size, overwrite,
                **extra):
  """The SearchArgs the shared flags describe (`extra`: fields only one command has)."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import local_main
  from nascli.search.search_loop import SearchArgs
  options = {k: v for k, v in (("population_size", population_size),
                               ("tournament_size", tournament_size)) if v is not None}
  return SearchArgs(
      job_dir=local_output_dir or local_main.default_job_dir(prebuilt_search_space),
      search_space=prebuilt_search_space, search_space_module=search_space_module,
      search_algorithm=search_algorithm, seed=seed, max_nas_trial=max_nas_trial,
      max_parallel_nas_trial=max_parallel_nas_trial, max_failed_nas_trial=max_failed_nas_trial,
      target_device_latency_ms=target_device_latency_ms, latency_constraint=latency_constraint,
      latency_weight=latency_weight, experiment=experiment, config_files=list(config_file or []),
      params_override=params_override, training_data_path=training_data_path,
      validation_data_path=validation_data_path, dataset_dir=dataset_dir, overwrite=overwrite,
      algorithm_options=options, **extra)


def from_flags(values: dict, **extra):
  """search_args from a command's parameters (its `locals()`): the shared flags are picked out."""
  shared = [name for name in inspect.signature(search_args).parameters if name != "extra"]
  return search_args(**{name: values[name] for name in shared}, **extra)


def print_rows(rows: list[dict], as_json: bool) -> None:
  if as_json:
    print(json.dumps(rows, indent=2, default=str))
    return
  for row in rows:
    reward = "-" if row.get("reward") is None else f"{row['reward']:.4f}"
    print(f"trial {row['trial_id']}: {row['status']}, reward {reward}")
