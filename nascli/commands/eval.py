"""`nascli eval`: evaluate a checkpoint (top-1/top-5, or COCO AP) and print THOR's result line."""

import json
from typing import Annotated, Optional

import typer

from nascli import checks
from nascli.commands import model_flags as m
from nascli.commands.options import flag
from nascli.errors import NascliError


def refuse_bad_flags(model_dir: str | None, checkpoint_path: str | None,
                     validation_data_path: str | None, dataset_dir: str | None,
                     params_override: str | None, steps: int, output: str | None,
                     split: str | None = None) -> None:
  """What needs no TensorFlow, before it is imported (issue 18); gs:// paths are read later."""
  # pylint: disable=g-import-not-at-top
  from nascli import evaluation
  from tf_vision.configs import yaml_source
  if steps == 0 or steps < -1:
    raise NascliError(f"--steps {steps} is out of range; allowed: -1 (all batches) or 1 or"
                      " more")
  evaluation.check_split(split, validation_data_path)
  checks.existing_path(model_dir, "--model_dir", "dir")
  checks.checkpoint(model_dir, checkpoint_path)
  checks.model_dir(evaluation.model_dir_of(model_dir, checkpoint_path))
  checks.dataset_dir(dataset_dir)
  checks.matches_files(validation_data_path, "--validation_data_path")
  yaml_source.check(params_override, "--params_override")
  checks.writable_file(output, "--output")


def evaluate(
    model_dir: m.ModelDir = None,
    checkpoint_path: m.CheckpointPath = None,
    experiment: m.Experiment = None,
    validation_data_path: Annotated[Optional[str], typer.Option(
        *flag("validation_data_path"), help="TFRecord glob(s) to evaluate instead of a split"
        " (default: the --split of the run's data set).")] = None,
    dataset_dir: Annotated[Optional[str], typer.Option(
        *flag("dataset_dir"), help="A convert-data folder whose --split to use (default: the"
        " data set the run trained on).")] = None,
    split: Annotated[Optional[str], typer.Option(
        *flag("split"), help="test (the held-out split no search read) or validation (the one"
        " the search scored); default: test where the data has one.", show_default=False)]
    = None,
    params_override: Annotated[Optional[str], typer.Option(
        *flag("params_override"), help="YAML file, YAML/JSON string or a.b=c.")] = None,
    steps: Annotated[int, typer.Option(
        *flag("steps"), help="Evaluation batches (-1: all).")] = -1,
    output: Annotated[Optional[str], typer.Option(
        *flag("output"), help="Metrics JSON (default: MODEL_DIR/eval_metrics.json).")] = None,
    verbose: Annotated[bool, typer.Option(
        *flag("verbose"), help="Show Model Garden's own progress output on stderr.")] = False,
    as_json: Annotated[bool, typer.Option(*flag("json"), help="Print only the JSON.")]
    = False,
) -> None:
  """Evaluate the latest (or a given) checkpoint on the held-out test split."""
  refuse_bad_flags(model_dir, checkpoint_path, validation_data_path, dataset_dir,
                   params_override, steps, output, split)
  # pylint: disable=g-import-not-at-top
  from nascli import frameworks
  frameworks.load()
  from nascli import evaluation
  result = evaluation.evaluate(evaluation.EvalArgs(
      model_dir=model_dir, checkpoint_path=checkpoint_path, experiment=experiment,
      validation_data_path=validation_data_path, dataset_dir=dataset_dir,
      params_override=params_override, steps=steps, output=output, verbose=verbose,
      split=split))
  if as_json:
    print(json.dumps(result, indent=2))
  else:
    print(result["data"]["evaluated_on"])
    print(evaluation.result_line(result))
