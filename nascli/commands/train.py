"""`nascli train`: train a Model Garden model (classification or RetinaNet) on TFRecords."""

import dataclasses
import json
import os
from typing import Annotated, Any, Optional

import typer

from nascli import console
from nascli import checks
from nascli.commands.fastnn_options import with_fastnn_options
from nascli.commands.options import flag
from nascli.errors import NascliError

stderr = console.stderr()
# TensorFlow-free copies of the names tf_vision.distribute and tf_vision.params register (a test
# keeps them equal), so that a bad value is refused before TensorFlow is imported.
STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored")
MODELS = ("classification", "retinanet")


def _trial_ids(text: str | None) -> list[str]:
  return [t.strip() for t in (text or "").split(",") if t.strip()]


def _refuse_bad_flags(args, search_space: str, search_space_module: str | None,
                      keep_checkpoint_max: int | None, search_job_dir: str | None,
                      train_nas_trial_numbers: str | None) -> None:
  """Everything about the flags that needs no TensorFlow (issue 18: refused in a second, not
  after 15-40 s of imports); nascli.training.plan checks them again with the config."""
  # pylint: disable=g-import-not-at-top
  from nascli import training
  from tf_vision import nas_params_syntax
  from tf_vision.search_spaces import registry
  from tf_vision.configs import fastnn_keys, yaml_source
  run, data = args.run, args.run.data
  checks.one_of(args.mode, training.MODES, "--mode")
  if not run.experiment:
    checks.one_of(run.model, MODELS, "--model")
  if run.strategy is not None:
    checks.one_of(run.strategy, STRATEGIES, "--strategy")
  # The spaces train can build a model for.
  checks.one_of(search_space, [s for s in registry.known_search_spaces()
                               if registry.get_entry(s).binding], "--search_space")
  if search_space_module is not None:
    registry.check_module_path(search_space_module, "--search_space_module")
  checks.int_range(run.seed, "--seed", 0, 2**32 - 1, allowed="0 to 2**32 - 1")
  checks.int_range(run.num_gpus, "--num_gpus", 1,
                   allowed="1 or more (leave it out for every GPU of the machine)")
  checks.int_range(keep_checkpoint_max, "--keep_checkpoint_max", 1)
  if data.dataset_dir and (data.training_data_path or data.validation_data_path):
    raise NascliError("give --dataset_dir or --training_data_path/--validation_data_path,"
                      " not both")
  checks.dataset_dir(data.dataset_dir)
  checks.matches_files(data.training_data_path, "--training_data_path")
  checks.matches_files(data.validation_data_path, "--validation_data_path")
  checks.not_a_file(args.model_dir, "--model_dir")
  for path in run.config_files:
    checks.existing_path(path, "--config_file", "file")
    yaml_source.check(path, "--config_file")
  yaml_source.check(run.params_override, "--params_override")
  if run.hparams_file:
    checks.existing_path(run.hparams_file, "--hparams_file", "file")
    fastnn_keys.parse_hparams_file(run.hparams_file)  # local only, as plan() reads it
  if run.architecture:
    nas_params_syntax.check(run.architecture.nas_params)
  if search_job_dir or train_nas_trial_numbers:
    if not (search_job_dir and train_nas_trial_numbers):
      raise typer.BadParameter("give --search_job_dir and --train_nas_trial_numbers together")
    if not _trial_ids(train_nas_trial_numbers):
      raise NascliError("--train_nas_trial_numbers needs trial ids, e.g. 3,7")
    checks.existing_path(search_job_dir, "--search_job_dir", "dir")
    for trial_id in _trial_ids(train_nas_trial_numbers) if os.path.isdir(search_job_dir) else ():
      path = os.path.join(search_job_dir, trial_id, "nas_params_str.json")
      if not os.path.isfile(path):
        raise NascliError(f"search job {search_job_dir} has no trial {trial_id} ({path}"
                          " missing)")
      nas_params_syntax.check(path)


def _train(
    model: Annotated[str, typer.Option(
        *flag("model"), help="Task when --experiment is not given: classification or"
        " retinanet.")] = "classification",
    experiment: Annotated[Optional[str], typer.Option(
        *flag("experiment"), help="Any registered Model Garden experiment (default:"
        " nascli_classification / nascli_retinanet).")] = None,
    config_file: Annotated[Optional[list[str]], typer.Option(
        *flag("config_file"), help="YAML overriding the experiment; repeatable, applied in"
        " order.")] = None,
    params_override: Annotated[Optional[str], typer.Option(
        *flag("params_override"), help="YAML file, YAML/JSON string, or a.b=c,d=e; applied"
        " after --config_file.")] = None,
    hparams_file: Annotated[Optional[str], typer.Option(
        *flag("hparams_file"), help="FastNN key=value file; applied last (options win over"
        " it).")] = None,
    training_data_path: Annotated[Optional[str], typer.Option(
        *flag("training_data_path"), help="TFRecord glob(s), comma separated.")] = None,
    validation_data_path: Annotated[Optional[str], typer.Option(
        *flag("validation_data_path"), help="TFRecord glob(s), comma separated.")] = None,
    dataset_name: Annotated[Optional[str], typer.Option(
        *flag("dataset_name"), help="FastNN: the data set convert-data wrote in"
        " --dataset_dir.")] = None,
    dataset_dir: Annotated[Optional[str], typer.Option(
        *flag("dataset_dir"), help="A folder written by `nascli convert-data`.")] = None,
    train_files: Annotated[Optional[str], typer.Option(
        *flag("train_files"), help="FastNN: comma list of training files in"
        " --dataset_dir.")] = None,
    model_dir: Annotated[Optional[str], typer.Option(
        *flag("model_dir"), help="Checkpoints, summaries, params.yaml, log (default:"
        " nascli_output/train).")] = None,
    strategy: Annotated[Optional[str], typer.Option(
        *flag("strategy"), help="one_device, mirrored or multi_worker_mirrored (TF_CONFIG).")]
    = None,
    num_gpus: Annotated[Optional[int], typer.Option(
        *flag("num_gpus"), help="Replicas for mirrored (on a CPU-only machine: logical CPU"
        " devices).")] = None,
    mode: Annotated[str, typer.Option(
        *flag("mode"), help="train, train_and_eval or train_and_post_eval.")]
    = "train_and_post_eval",
    keep_checkpoint_max: Annotated[Optional[int], typer.Option(
        *flag("keep_checkpoint_max"), help="Checkpoints kept.")] = None,
    verbose: Annotated[bool, typer.Option(
        *flag("verbose"), help="Also show Model Garden's own progress output on stderr.")]
    = False,
    nas_params_str: Annotated[Optional[str], typer.Option(
        *flag("nas_params_str"), help="Stage 2: a searched architecture in Vertex's format (JSON"
        " text or a .json file, e.g. JOB_DIR/3/nas_params_str.json).")] = None,
    search_space: Annotated[str, typer.Option(
        *flag("search_space"), help="The space --nas_params_str comes from: mnasnet or"
        " spinenet.")] = "mnasnet",
    search_space_module: Annotated[Optional[str], typer.Option(
        *flag("search_space_module"), help="Or the search's --search_space_module pkg.module.fn"
        " (its own space).")] = None,
    search_job_dir: Annotated[Optional[str], typer.Option(
        *flag("search_job_dir"), help="Stage 2: a search job dir whose trials to retrain.")]
    = None,
    train_nas_trial_numbers: Annotated[Optional[str], typer.Option(
        *flag("train_nas_trial_numbers"), help="Trial ids of --search_job_dir, e.g. 3,7; each"
        " trains into MODEL_DIR/<id>.")] = None,
    retrain_use_search_job_checkpoint: Annotated[bool, typer.Option(
        *flag("retrain_use_search_job_checkpoint"), help="Warm-start each backbone from its"
        " search trial's checkpoint.")] = False,
    seed: Annotated[Optional[int], typer.Option(
        *flag("seed"), help="Seeds the model's initialization (TensorFlow, NumPy, Python) and,"
        " unless the config sets task.train_data.seed, the data order.")] = None,
    list_experiments: Annotated[bool, typer.Option(
        *flag("list_experiments"), help="List registered experiments and exit.")] = False,
    as_json: Annotated[bool, typer.Option(*flag("json"), help="Print the result as JSON.")]
    = False,
    fastnn: dict[str, Any] | None = None,
) -> None:
  """Train a model; resumes from the latest checkpoint in --model_dir."""
  # pylint: disable=g-import-not-at-top
  from nascli import training
  from nascli.run_spec import Architecture, DataSpec, RunSpec
  run = RunSpec(
      model=model, experiment=experiment, config_files=list(config_file or []),
      params_override=params_override, hparams_file=hparams_file, hparams=dict(fastnn or {}),
      options=({"trainer": {"max_to_keep": keep_checkpoint_max}}
               if keep_checkpoint_max is not None else {}),
      data=DataSpec(training_data_path=training_data_path,
                    validation_data_path=validation_data_path, dataset_name=dataset_name,
                    dataset_dir=dataset_dir, train_files=train_files),
      strategy=strategy, num_gpus=num_gpus, seed=seed,
      architecture=(Architecture(search_space, nas_params_str, search_space_module)
                    if nas_params_str else None))
  train_args = training.TrainArgs(run=run, model_dir=model_dir, mode=mode, verbose=verbose)
  if not list_experiments:
    _refuse_bad_flags(train_args, search_space, search_space_module, keep_checkpoint_max,
                      search_job_dir, train_nas_trial_numbers)
  from nascli import frameworks
  frameworks.load()
  if list_experiments:
    for name in training.experiment_names():
      print(name)
    return
  if search_job_dir or train_nas_trial_numbers:
    results = training.train_search_trials(train_args, search_job_dir, train_nas_trial_numbers,
                                           retrain_use_search_job_checkpoint, search_space,
                                           search_space_module)
    if as_json:
      print(json.dumps(results, indent=2))
    for result in results if not as_json else []:
      _print_result(result)
    return
  if nas_params_str:  # no config flags: the search's recipe, or one sized to the data
    from tf_vision.configs import stage2
    staged, notes = stage2.nas_params_run(run)
    for note in notes:
      stderr.print(f"note: {note}")
    train_args = dataclasses.replace(train_args, run=staged)
  result = training.train(train_args)
  if as_json:
    print(json.dumps(result, indent=2))
    return
  _print_result(result)


def _print_result(result: dict) -> None:
  metrics = ", ".join(f"{k}={v:.4f}" for k, v in sorted(result["eval_metrics"].items()))
  # The training evaluates on the validation data; only `nascli eval` touches the test split.
  print(f"trained {result['experiment']} to step {result['step']} in {result['model_dir']}"
        + (f": {metrics} on the validation data" if metrics else ""))


train = with_fastnn_options(_train)
