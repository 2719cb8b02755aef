"""`nascli search_in_local`: a real multi-trial architecture search on this machine."""

from nascli.commands import search_flags as f


def search_in_local(
    prebuilt_search_space: f.Space = "mnasnet",
    search_space_module: f.SpaceModule = None,
    search_algorithm: f.Algorithm = f.DEFAULT_ALGORITHM,
    seed: f.Seed = 0,
    max_nas_trial: f.MaxTrials = 4,
    max_parallel_nas_trial: f.MaxParallel = 1,
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
  """Search architectures on this machine: trials in parallel (one GPU each when there are
  GPUs), journaled, resumable."""
  del use_prebuilt_trainer
  values = locals()
  f.check(values)  # before the 15-40 s of imports below
  with f.interrupt_described(values):
    args = f.from_flags(values)
    from nascli.search import local_main  # pylint: disable=g-import-not-at-top
    rows = local_main.run(args, search_docker_flags)
  f.print_rows(rows, as_json)
