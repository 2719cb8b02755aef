"""`nascli search`: the same search as `search_in_local`, trials scheduled on a Ray cluster."""

import contextlib
import json
import os
import sys
from typing import Annotated, Optional

import typer

from nascli.commands import search_flags as f
from nascli.commands.options import flag
from nascli.errors import NascliError


def _runtime_env(text: str | None, image: str | None) -> dict | None:
  """--runtime_env as JSON text or a JSON file; --container_image adds Ray's image_uri."""
  env = None
  if text:
    source = "--runtime_env"
    if os.path.isfile(text):
      source = text
      with open(text, encoding="utf-8") as fh:
        text = fh.read()
    try:
      env = json.loads(text)
    except ValueError as e:
      raise NascliError(f"{source}: not valid JSON ({e})") from e
    if not isinstance(env, dict):
      raise NascliError(f"{source}: expected a JSON object, got {type(env).__name__}")
  if image:
    env = dict(env or {}, image_uri=image)
  return env


def search(
    ray_address: Annotated[str, typer.Option(
        *flag("ray_address"), help="auto (the cluster this machine belongs to), HOST:PORT, or"
        " local (a private Ray instance on this machine).")] = "auto",
    num_cpus_per_trial: Annotated[float, typer.Option(
        *flag("num_cpus_per_trial"), help="CPUs Ray reserves for each trial.")] = 1.0,
    num_gpus_per_trial: Annotated[float, typer.Option(
        *flag("num_gpus_per_trial"), help="GPUs Ray reserves for each trial (it sets"
        " CUDA_VISIBLE_DEVICES).")] = 0.0,
    max_trial_retries: Annotated[int, typer.Option(
        *flag("max_trial_retries"), help="Retries of a trial whose worker or node died.")] = 2,
    runtime_env: Annotated[Optional[str], typer.Option(
        *flag("runtime_env"), help="Ray runtime_env for the trials: JSON, or a JSON file.")]
    = None,
    container_image: Annotated[Optional[str], typer.Option(
        *flag("container_image"), help="Run trials in this image (e.g. the one `nascli build`"
        " made); Ray's runtime_env image_uri.")] = None,
    ray_num_cpus: Annotated[Optional[int], typer.Option(
        *flag("ray_num_cpus"), help="With --ray_address local: CPUs of the private instance.")]
    = None,
    ray_temp_dir: Annotated[Optional[str], typer.Option(
        *flag("ray_temp_dir"), help="With --ray_address local: its session/temp folder.")]
    = None,
    prebuilt_search_space: f.Space = "mnasnet",
    search_space_module: f.SpaceModule = None,
    search_algorithm: f.Algorithm = f.DEFAULT_ALGORITHM,
    seed: f.Seed = 0,
    max_nas_trial: f.MaxTrials = 4,
    max_parallel_nas_trial: f.MaxParallel = 2,
    max_failed_nas_trial: f.MaxFailed = None,
    target_device_latency_ms: f.TargetLatency = None,
    latency_constraint: f.Constraint = "soft",
    latency_weight: f.LatencyWeight = 0.07,
    local_output_dir: f.OutputDir = None,
    search_docker_flags: f.DockerFlags = None,
    use_prebuilt_trainer: f.PrebuiltTrainer = True,
    experiment: f.Experiment = None,
    config_file: f.ConfigFiles = None,
    params_override: f.Override = None,
    training_data_path: f.TrainPath = None,
    validation_data_path: f.ValidationPath = None,
    dataset_dir: f.DatasetDir = None,
    population_size: f.Population = None,
    tournament_size: f.Tournament = None,
    overwrite: f.Overwrite = False,
    trial_isolation: f.TrialIsolation = "worker",
    max_trials_per_worker: f.MaxTrialsPerWorker = 10,
    trial_timeout: f.TrialTimeout = None,
    export_top_k: f.ExportTopK = 3,
    export_every_trial: f.ExportEveryTrial = False,
    objectives: f.Objectives = None,
    early_stopping: f.EarlyStopping = "none",
    min_steps: f.MinSteps = None,
    reduction_factor: f.ReductionFactor = None,
    as_json: f.AsJson = False,
) -> None:
  """Search architectures with trials on a Ray cluster (a warm worker per slot in a Ray actor,
  or a Ray task per trial): same journal, trials and outputs as search_in_local; a local job
  dir must be on storage every node reaches."""
  del use_prebuilt_trainer
  values = locals()
  f.check(values)  # before Ray, pyglove and TensorFlow are imported
  if max_trial_retries < 0:
    raise NascliError(f"--max_trial_retries must not be negative, got {max_trial_retries}")
  for name in ("num_cpus_per_trial", "num_gpus_per_trial"):
    if not values[name] >= 0:
      raise NascliError(f"--{name} must not be negative, got {values[name]}")
  if early_stopping != "none" and (local_output_dir or "").startswith("gs://"):
    # Each attempt then runs in a fresh folder of the node Ray picks: no checkpoint to go on from.
    raise NascliError(f"--early_stopping {early_stopping} with a gs:// --local_output_dir on Ray:"
                      " a promoted trial could not continue from its checkpoint; use a job dir"
                      " on storage every node reaches")
  env = _runtime_env(runtime_env, container_image)
  with f.interrupt_described(values):
    # pylint: disable=g-import-not-at-top
    from nascli.search import local_main
    from nascli.search import ray_executor
    args = f.from_flags(values, max_trial_retries=max_trial_retries)
    executor = ray_executor.ray_executor(
        trial_isolation, ray_address, num_cpus_per_trial=num_cpus_per_trial,
        num_gpus_per_trial=num_gpus_per_trial, runtime_env=env, local_num_cpus=ray_num_cpus,
        local_temp_dir=ray_temp_dir, max_trials_per_worker=max_trials_per_worker,
        trial_timeout=trial_timeout)
    # Ray's driver prints worker and raylet messages with print(): they are logs, not results.
    with contextlib.redirect_stdout(sys.stderr):
      rows = local_main.run(args, search_docker_flags, executor)
  f.print_rows(rows, as_json)
