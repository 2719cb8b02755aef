"""`nascli export`: a checkpoint to a SavedModel with a `serving_default` signature."""

import json
from typing import Annotated, Optional

import typer

from nascli import checks
from nascli.commands import model_flags as m
from nascli.commands.options import flag

# TensorFlow-free copy of tf_vision.serving.export_lib.INPUT_TYPES (a test keeps them equal).
INPUT_TYPES = ("image_tensor", "image_bytes", "tf_example")


def refuse_bad_flags(args) -> None:
  """What needs no TensorFlow, before it is imported (issue 18); gs:// paths are read later."""
  from nascli import exporting  # pylint: disable=g-import-not-at-top
  checks.one_of(args.input_type, INPUT_TYPES, "--input_type")
  checks.int_range(args.batch_size, "--batch_size", 1,
                   allowed="1 or more (leave it out for any batch size)")
  checks.int_range(args.latency_batch_size, "--latency_batch_size", 1)
  checks.int_range(args.latency_runs, "--latency_runs", 1)
  exporting.image_size(args.input_image_size)
  checks.existing_path(args.model_dir, "--model_dir", "dir")
  checks.checkpoint(args.model_dir, args.checkpoint_path)
  checks.model_dir(args.model_dir)
  exporting.check_export_dir(exporting.export_dir_of(args), args.overwrite)


def export(
    model_dir: m.ModelDir,
    checkpoint_path: m.CheckpointPath = None,
    export_dir: Annotated[Optional[str], typer.Option(
        *flag("export_dir"), help="Output folder (default: MODEL_DIR/export/INPUT_TYPE).")]
    = None,
    experiment: m.Experiment = None,
    input_type: Annotated[str, typer.Option(
        *flag("input_type"), help="image_tensor, image_bytes or tf_example.")] = "image_tensor",
    batch_size: Annotated[Optional[int], typer.Option(
        *flag("batch_size"), help="Fixed batch size (default: any).")] = None,
    input_image_size: Annotated[Optional[str], typer.Option(
        *flag("input_image_size"), help="HEIGHT,WIDTH (default: the model's input size).")]
    = None,
    overwrite: Annotated[bool, typer.Option(
        *flag("overwrite"), help="Replace an existing export.")] = False,
    measure_latency: Annotated[bool, typer.Option(
        *flag("measure_latency"), help="Time serving_default on this device after"
        " warm-up.")] = False,
    latency_batch_size: Annotated[int, typer.Option(
        *flag("latency_batch_size"), help="Second batch size timed besides 1.")] = 8,
    latency_runs: Annotated[int, typer.Option(
        *flag("latency_runs"), help="Timed calls per batch size.")] = 30,
    as_json: Annotated[bool, typer.Option(*flag("json"), help="Print the result as JSON.")]
    = False,
) -> None:
  """Export a checkpoint as a SavedModel (params.yaml beside it), optionally timing it."""
  # pylint: disable=g-import-not-at-top
  from nascli import exporting
  args = exporting.ExportArgs(
      model_dir=model_dir, checkpoint_path=checkpoint_path, export_dir=export_dir,
      experiment=experiment, input_type=input_type, batch_size=batch_size,
      input_image_size=input_image_size, overwrite=overwrite, measure_latency=measure_latency,
      latency_batch_size=latency_batch_size, latency_runs=latency_runs)
  refuse_bad_flags(args)
  from nascli import frameworks
  frameworks.load()
  result = exporting.export(args)
  if as_json:
    print(json.dumps(result, indent=2))
    return
  print(f"exported {result['checkpoint']} to {result['saved_model']} ({input_type})")
  for batch, stats in result.get("latency", {}).get("batch", {}).items():
    print(f"latency batch {batch}: median {stats['median_ms']:.2f} ms, p90"
          f" {stats['p90_ms']:.2f} ms ({result['latency']['device']})")
