"""The engine behind `nascli export`: a checkpoint to a SavedModel, optionally timed."""

import dataclasses
import json
import os

from nascli.errors import NascliError


@dataclasses.dataclass
class ExportArgs:
  model_dir: str
  checkpoint_path: str | None = None
  export_dir: str | None = None
  experiment: str | None = None
  input_type: str = "image_tensor"
  batch_size: int | None = None
  input_image_size: str | None = None
  overwrite: bool = False
  measure_latency: bool = False
  latency_batch_size: int = 8
  latency_runs: int = 30


def _image_size(text: str | None) -> list[int] | None:
  if text is None:
    return None
  try:
    size = [int(v) for v in text.replace("x", ",").split(",")]
  except ValueError:
    size = []
  if len(size) != 2 or min(size) < 1:
    raise NascliError(f"--input_image_size must be HEIGHT,WIDTH, got {text!r}")
  return size


def export(args: ExportArgs) -> dict:
  # pylint: disable=g-import-not-at-top
  from tf_vision import eval_lib, model_dir as model_dir_lib
  from tf_vision.serving import export_lib, latency
  params = model_dir_lib.load_params(args.model_dir, args.experiment)
  checkpoint = eval_lib.resolve_checkpoint(args.model_dir, args.checkpoint_path)
  export_dir = args.export_dir or os.path.join(args.model_dir, "export", args.input_type)
  saved_model = export_lib.export(params, checkpoint, export_dir, input_type=args.input_type,
                                  batch_size=args.batch_size,
                                  input_image_size=_image_size(args.input_image_size),
                                  overwrite=args.overwrite)
  result = {"saved_model": str(saved_model), "export_dir": export_dir, "checkpoint": checkpoint,
            "input_type": args.input_type}
  if args.measure_latency:
    sizes = sorted({1, args.latency_batch_size}) if args.batch_size is None else [args.batch_size]
    report = latency.measure_latency(saved_model, input_type=args.input_type, batch_sizes=sizes,
                                     runs=args.latency_runs)
    with open(os.path.join(export_dir, "latency.json"), "w", encoding="utf-8") as f:
      json.dump(report, f, indent=2)
    result["latency"] = report
  return result
