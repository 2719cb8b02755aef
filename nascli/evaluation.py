"""The engine behind `nascli eval`: a checkpoint's metrics on validation data."""

import contextlib
import dataclasses
import os

from nascli import console
from nascli import interrupts
from nascli import storage
from nascli.errors import NascliError

stderr = console.stderr()
# How the THOR result line names each metric of Model Garden's tasks.
RESULT_KEYS = {"top_5_accuracy": "top_5_accuracy", "accuracy": "top_1_accuracy",
               "AP": "AP", "AP50": "AP50", "AP75": "AP75"}


@dataclasses.dataclass
class EvalArgs:
  model_dir: str | None = None
  checkpoint_path: str | None = None
  experiment: str | None = None
  validation_data_path: str | None = None
  dataset_dir: str | None = None
  params_override: str | None = None
  steps: int = -1
  output: str | None = None
  verbose: bool = False


def result_line(result: dict) -> str:
  """`result: {'top_5_accuracy': ..., 'top_1_accuracy': ...} ckpt=...` as THOR's eval prints."""
  shown = {RESULT_KEYS[k]: result["metrics"][k] for k in RESULT_KEYS if k in result["metrics"]}
  return f"result: {shown} ckpt={result['checkpoint']}"


def _validation_path(args: EvalArgs) -> str | None:
  if args.validation_data_path:
    return args.validation_data_path
  if args.dataset_dir:
    from tf_vision import params as params_lib  # pylint: disable=g-import-not-at-top
    _, val, _ = params_lib._resolve_data(  # pylint: disable=protected-access
        params_lib.DataSpec(dataset_dir=args.dataset_dir))
    if not val:
      raise NascliError(f"--dataset_dir {args.dataset_dir} has no validation split")
    return val
  return None


def model_dir_of(model_dir: str | None, checkpoint_path: str | None) -> str:
  """--model_dir, or the folder holding --checkpoint_path."""
  model_dir = model_dir or (checkpoint_path.rstrip("/").rpartition("/")[0]
                            if storage.is_gcs(checkpoint_path or "") else
                            os.path.dirname(checkpoint_path) if checkpoint_path else None)
  if not model_dir:
    raise NascliError("give --model_dir (or --checkpoint_path inside a model dir)")
  return model_dir


def evaluate(args: EvalArgs) -> dict:
  """Evaluates as the arguments say. Metrics are written only at the end, whole, so an
  interrupted evaluation leaves nothing behind and a rerun does it all again."""
  try:
    return _evaluate(args)
  except BaseException as e:  # pylint: disable=broad-except
    if not interrupts.caused(e):
      raise
    raise interrupts.Interrupted.of(
        e, what=f"evaluating {args.checkpoint_path or args.model_dir}",
        resume="run the same command again") from None


def _evaluate(args: EvalArgs) -> dict:
  # pylint: disable=g-import-not-at-top
  from tf_vision import distribute, eval_lib, model_dir as model_dir_lib, params as params_lib
  from tf_vision.evaluation import coco_groundtruth
  model_dir = model_dir_of(args.model_dir, args.checkpoint_path)
  remote_dir = model_dir.rstrip("/") if storage.is_gcs(model_dir) else None
  # A gs:// model dir is read from its staged local copy (nascli reads params.yaml and the run
  # info with local file calls; re-staging fetches only changed objects).
  model_dir, checkpoint_path = storage.stage_with_member(
      model_dir, args.checkpoint_path, "--model_dir", "--checkpoint_path")
  params = model_dir_lib.load_params(model_dir, args.experiment)
  checkpoint = eval_lib.resolve_checkpoint(model_dir, checkpoint_path)
  override: dict = {"runtime": {"distribution_strategy": "one_device"}}
  val = _validation_path(args)
  if val:
    params_lib._check_pattern(val, "--validation_data_path")  # pylint: disable=protected-access
    val = storage.for_tensorflow(val)
    override["task"] = {"validation_data": {"input_path": val}}
  params_lib.apply_override(params, override, "the eval options")
  if args.params_override:
    params_lib.apply_override(
        params, params_lib.load_yaml_source(args.params_override, "--params_override"),
        "--params_override")
  if hasattr(params.task, "annotation_file") and (val or not params.task.annotation_file or
                                                  not os.path.exists(params.task.annotation_file)):
    gt = coco_groundtruth.write(params.task.validation_data.input_path,
                                os.path.join(model_dir, "eval_annotations.json"))
    params.task.annotation_file = gt
  strategy = distribute.build_strategy("one_device")
  sink = contextlib.nullcontext() if args.verbose else contextlib.redirect_stdout(
      open(os.devnull, "w", encoding="utf-8"))  # pylint: disable=consider-using-with
  with sink:
    result = eval_lib.evaluate(params, checkpoint, strategy, steps=args.steps)
  output = args.output or (storage.join(remote_dir, eval_lib.METRICS_FILE) if remote_dir else
                           os.path.join(model_dir, eval_lib.METRICS_FILE))
  if storage.is_gcs(output):
    local = os.path.join(model_dir, eval_lib.METRICS_FILE)
    eval_lib.write_metrics(local, result)
    storage.upload_file(local, output)
  else:
    eval_lib.write_metrics(output, result)
  result["metrics_file"] = output
  if remote_dir:
    result["checkpoint"] = storage.join(remote_dir, os.path.relpath(result["checkpoint"],
                                                                    model_dir))
  return result
