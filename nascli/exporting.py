"""The engine behind `nascli export`: a checkpoint to a SavedModel, optionally timed."""

import dataclasses
import json
import os
import shutil
import tempfile

from nascli import interrupts
from nascli import storage
from nascli.errors import NascliError, OutputError


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


def image_size(text: str | None) -> list[int] | None:
  """--input_image_size HEIGHT,WIDTH (or HxW) as [height, width]; None passes."""
  if text is None:
    return None
  try:
    size = [int(v) for v in text.replace("x", ",").split(",")]
  except ValueError:
    size = []
  if len(size) != 2 or min(size) < 1:
    raise NascliError(f"--input_image_size must be HEIGHT,WIDTH, got {text!r}")
  return size


def export_dir_of(args: ExportArgs) -> str:
  return args.export_dir or storage.join(args.model_dir, "export", args.input_type)


def check_export_dir(export_dir: str, overwrite: bool) -> None:
  """A local export dir must be a folder, and empty unless --overwrite (gs://: checked later)."""
  if storage.is_gcs(export_dir):
    return
  if os.path.islink(export_dir) or (os.path.exists(export_dir) and
                                    not os.path.isdir(export_dir)):
    raise OutputError(f"--export_dir {export_dir} is not a folder")
  if not overwrite and os.path.isdir(export_dir) and os.listdir(export_dir):
    raise OutputError(f"export dir {export_dir} already has files"
                      f" ({sorted(os.listdir(export_dir))[0]}); pass --overwrite")


def export(args: ExportArgs) -> dict:
  """Exports as the arguments say; an interrupt says what a rerun needs."""
  export_dir = export_dir_of(args)
  try:
    return _export_checkpoint(args, export_dir)
  except BaseException as e:  # pylint: disable=broad-except
    if not interrupts.caused(e):
      raise
    # The SavedModel is built aside and moved in whole; only a latency run can follow it.
    written = (not storage.is_gcs(export_dir) and os.path.isdir(export_dir)
               and os.listdir(export_dir))
    resume = ("run the same command again with --overwrite" if written and not args.overwrite
              else "run the same command again")
    raise interrupts.Interrupted.of(
        e, what=f"exporting {args.checkpoint_path or args.model_dir} to {export_dir}",
        resume=resume) from None


def _export_checkpoint(args: ExportArgs, export_dir: str) -> dict:
  # pylint: disable=g-import-not-at-top
  from tf_vision import eval_lib, model_dir as model_dir_lib
  # A gs:// model dir is read from its staged local copy (see nascli.evaluation).
  model_dir, checkpoint_path = storage.stage_with_member(
      args.model_dir, args.checkpoint_path, "--model_dir", "--checkpoint_path")
  params = model_dir_lib.load_params(model_dir, args.experiment)
  checkpoint = eval_lib.resolve_checkpoint(model_dir, checkpoint_path)
  if storage.is_gcs(export_dir):
    return _export_to_gcs(args, params, checkpoint, export_dir.rstrip("/"))
  return _export(args, params, checkpoint, export_dir)


def _export_to_gcs(args: ExportArgs, params, checkpoint: str, url: str) -> dict:
  """Exports into a local temporary, then uploads it with saved_model.pb last: a reader that
  finds saved_model.pb finds the variables it needs."""
  existing = storage.list_names(url)
  if existing and not args.overwrite:
    raise OutputError(f"export dir {url} already has files ({existing[0]}); pass --overwrite")
  local = tempfile.mkdtemp(prefix="nascli-export-")
  try:
    result = _export(args, params, checkpoint, os.path.join(local, "export"))
    marker = "saved_model/saved_model.pb"
    if existing:  # the old graph goes first, so no reader pairs it with the new variables
      storage.delete(storage.join(url, marker), missing_ok=True)
    names = storage.upload_dir(os.path.join(local, "export"), url, marker=marker)
    for stale in set(existing) - set(names):
      storage.delete(storage.join(url, stale), missing_ok=True)
  finally:
    shutil.rmtree(local, ignore_errors=True)
  result.update(saved_model=storage.join(url, "saved_model"), export_dir=url)
  return result


def _export(args: ExportArgs, params, checkpoint: str, export_dir: str) -> dict:
  # pylint: disable=g-import-not-at-top
  from tf_vision.serving import export_lib, latency
  saved_model = export_lib.export(params, checkpoint, export_dir, input_type=args.input_type,
                                  batch_size=args.batch_size,
                                  input_image_size=image_size(args.input_image_size),
                                  overwrite=args.overwrite)
  # Named as the user named the export dir (relative stays relative), as the checkpoint is.
  saved_model = os.path.join(export_dir, os.path.basename(saved_model))
  result = {"saved_model": saved_model, "export_dir": export_dir, "checkpoint": checkpoint,
            "input_type": args.input_type}
  if args.measure_latency:
    sizes = sorted({1, args.latency_batch_size}) if args.batch_size is None else [args.batch_size]
    report = latency.measure_latency(saved_model, input_type=args.input_type, batch_sizes=sizes,
                                     runs=args.latency_runs)
    with open(os.path.join(export_dir, "latency.json"), "w", encoding="utf-8") as f:
      json.dump(report, f, indent=2)
    result["latency"] = report
  return result
