"""`nascli search`: the same search as `search_in_local`, trials scheduled on a Ray cluster."""

import contextlib
import sys

from nascli.commands import ray_flags as r
from nascli.commands import search_flags as f
from nascli.errors import NascliError


def search(
    ray_address: r.RayAddress = "auto",
    num_cpus_per_trial: r.CpusPerTrial = 1.0,
    num_gpus_per_trial: r.GpusPerTrial = 0.0,
    max_trial_retries: r.MaxTrialRetries = 2,
    runtime_env: r.RuntimeEnv = None,
    container_image: r.ContainerImage = None,
    ray_num_cpus: r.RayNumCpus = None,
    ray_temp_dir: r.RayTempDir = None,
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
    latency_calculator: f.LatencyCalculator = "in_trial",
    latency_timeout_s: f.LatencyTimeout = 600.0,
    latency_model: f.LatencyModelFile = None,
    latency_margin: f.LatencyMargin = 0.0,
    latency_input_size: f.LatencyInputSize = None,
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
    early_stopping: f.EarlyStopping = "auto",
    min_steps: f.MinSteps = None,
    reduction_factor: f.ReductionFactor = None,
    paused_trials_per_worker: f.PausedTrialsPerWorker = 1,
    warm_start_from: f.WarmStartFrom = None,
    as_json: f.AsJson = False,
) -> None:
  """Search architectures with trials on a Ray cluster (a warm worker per slot in a Ray actor,
  or a Ray task per trial): same journal, trials and outputs as search_in_local; a local job
  dir must be on storage every node reaches."""
  del use_prebuilt_trainer
  values = locals()
  f.check(values)  # before Ray, pyglove and TensorFlow are imported
  if early_stopping == "auto" and (local_output_dir or "").startswith("gs://"):
    values["early_stopping"] = "none"  # rungs need a checkpoint every node reaches (below)
  elif early_stopping != "none" and (local_output_dir or "").startswith("gs://"):
    # Each attempt then runs in a fresh folder of the node Ray picks: no checkpoint to go on from.
    raise NascliError(f"--early_stopping {early_stopping} with a gs:// --local_output_dir on Ray:"
                      " a promoted trial could not continue from its checkpoint; use a job dir"
                      " on storage every node reaches")
  env = r.check(values)
  with f.interrupt_described(values):
    # pylint: disable=g-import-not-at-top
    from nascli.search import local_main
    args = f.from_flags(values, max_trial_retries=max_trial_retries)
    executor = r.executor(values, env)
    # Ray's driver prints worker and raylet messages with print(): they are logs, not results.
    with contextlib.redirect_stdout(sys.stderr):
      rows = local_main.run(args, search_docker_flags, executor)
  f.print_rows(rows, as_json)
