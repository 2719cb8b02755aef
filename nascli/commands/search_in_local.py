"""`nascli search_in_local`: a real multi-trial architecture search on this machine."""

import json
from typing import Annotated, Optional

import typer

from nascli.commands.options import flag


def search_in_local(
    prebuilt_search_space: Annotated[str, typer.Option(
        *flag("prebuilt_search_space"), help="mnasnet (classification) or spinenet"
        " (detection).")] = "mnasnet",
    search_space_module: Annotated[Optional[str], typer.Option(
        *flag("search_space_module"), help="pkg.module.fn returning your own pyglove space.")]
    = None,
    search_algorithm: Annotated[str, typer.Option(
        *flag("search_algorithm"), help="random or regularized_evolution.")] = "random",
    seed: Annotated[int, typer.Option(*flag("seed"), help="Controller seed.")] = 0,
    max_nas_trial: Annotated[int, typer.Option(
        *flag("max_nas_trial"), help="Trials in total (resumes count what is done).")] = 4,
    max_parallel_nas_trial: Annotated[int, typer.Option(
        *flag("max_parallel_nas_trial"), help="Trials at once (one GPU each when there are"
        " GPUs).")] = 1,
    max_failed_nas_trial: Annotated[Optional[int], typer.Option(
        *flag("max_failed_nas_trial"), help="Stop once more trials than this fail (default:"
        " --max_nas_trial).")] = None,
    target_device_latency_ms: Annotated[Optional[float], typer.Option(
        *flag("target_device_latency_ms"), help="Latency target of the MnasNet reward (unset:"
        " reward = accuracy).")] = None,
    latency_constraint: Annotated[str, typer.Option(
        *flag("latency_constraint"), help="soft or hard.")] = "soft",
    latency_weight: Annotated[float, typer.Option(
        *flag("latency_weight"), help="w of accuracy * (target/latency)**w.")] = 0.07,
    local_output_dir: Annotated[Optional[str], typer.Option(
        *flag("local_output_dir"), help="The search job dir (default:"
        " nascli_output/search_<space>).")] = None,
    search_docker_flags: Annotated[Optional[list[str]], typer.Option(
        *flag("search_docker_flags"), help="Vertex's trainer flags: params_override=...,"
        " training_data_path=..., validation_data_path=..., model=retinanet, config_file=...")]
    = None,
    use_prebuilt_trainer: Annotated[bool, typer.Option(
        *flag("use_prebuilt_trainer"), help="Accepted for Vertex compatibility: nascli always"
        " runs its own TF-vision trainer.")] = True,
    experiment: Annotated[Optional[str], typer.Option(
        *flag("experiment"), help="Registered experiment of the trials.")] = None,
    config_file: Annotated[Optional[list[str]], typer.Option(
        *flag("config_file"), help="Trial YAML(s) (default: the testing YAML of the space).")]
    = None,
    params_override: Annotated[Optional[str], typer.Option(
        *flag("params_override"), help="Override applied to every trial.")] = None,
    training_data_path: Annotated[Optional[str], typer.Option(
        *flag("training_data_path"), help="TFRecord glob(s).")] = None,
    validation_data_path: Annotated[Optional[str], typer.Option(
        *flag("validation_data_path"), help="TFRecord glob(s).")] = None,
    dataset_dir: Annotated[Optional[str], typer.Option(
        *flag("dataset_dir"), help="A convert-data folder (default: the embedded data set).")]
    = None,
    population_size: Annotated[Optional[int], typer.Option(
        *flag("population_size"), help="regularized_evolution population.")] = None,
    tournament_size: Annotated[Optional[int], typer.Option(
        *flag("tournament_size"), help="regularized_evolution tournament.")] = None,
    overwrite: Annotated[bool, typer.Option(
        *flag("overwrite"), help="Start over in a job dir made with other settings.")] = False,
    as_json: Annotated[bool, typer.Option(*flag("json"), help="Print the trials as JSON.")]
    = False,
) -> None:
  """Search architectures on this machine: trials in parallel, journaled, resumable."""
  del use_prebuilt_trainer
  # pylint: disable=g-import-not-at-top
  from nascli.search import local_main
  from nascli.search.local_search import SearchArgs
  options = {k: v for k, v in (("population_size", population_size),
                               ("tournament_size", tournament_size)) if v is not None}
  rows = local_main.run(SearchArgs(
      job_dir=local_output_dir or local_main.default_job_dir(prebuilt_search_space),
      search_space=prebuilt_search_space, search_space_module=search_space_module,
      search_algorithm=search_algorithm, seed=seed, max_nas_trial=max_nas_trial,
      max_parallel_nas_trial=max_parallel_nas_trial, max_failed_nas_trial=max_failed_nas_trial,
      target_device_latency_ms=target_device_latency_ms, latency_constraint=latency_constraint,
      latency_weight=latency_weight, experiment=experiment, config_files=list(config_file or []),
      params_override=params_override, training_data_path=training_data_path,
      validation_data_path=validation_data_path, dataset_dir=dataset_dir, overwrite=overwrite,
      algorithm_options=options), search_docker_flags)
  if as_json:
    print(json.dumps(rows, indent=2, default=str))
    return
  for row in rows:
    reward = "-" if row.get("reward") is None else f"{row['reward']:.4f}"
    print(f"trial {row['trial_id']}: {row['status']}, reward {reward}")
