"""The engine behind `nascli eval`: a checkpoint's metrics on the held-out test split (or the
split or files asked for), and what they were measured on."""

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
  split: str | None = None  # None: test where the data has it, else the run's validation data


# The splits of a converted data set `eval` can report (nascli.data.splits says what each is for).
SPLITS = ("test", "validation")


@dataclasses.dataclass
class EvalData:
  """What an evaluation reads, and what its numbers are therefore a claim about."""
  path: str | None  # None: the validation data the run trained with (its params.yaml)
  split: str  # "test", "validation", or "files" (--validation_data_path)
  num_records: int | None = None
  where: str = ""
  note: str | None = None

  def describe(self) -> str:
    count = f"{self.num_records} images, " if self.num_records else ""
    if self.split == "files":
      return f"evaluated on: the files {self.where} (not a split of a converted data set)"
    held = ("held out: no search, proxy tool or training read it" if self.split == "test" else
            "the split the search scored and training evaluated on, not a held-out estimate")
    return f"evaluated on: the {self.split} split of {self.where} ({count}{held})"


def check_split(split: str | None, validation_data_path: str | None) -> None:
  if split is None:
    return
  if split not in SPLITS:
    raise NascliError(f"--split {split!r}: choose {' or '.join(SPLITS)}")
  if validation_data_path:
    raise NascliError("--split names a split of a converted data set; --validation_data_path"
                      " gives the files themselves: give one of them")


def _folder_of(pattern: str) -> str:
  first = pattern.split(",")[0].strip()
  if storage.is_gcs(first):
    return first.rpartition("/")[0] if any(c in first for c in "*?[") else first.rstrip("/")
  return first if os.path.isdir(first) else os.path.dirname(first)


def _split_data(folder: str, found: dict, split: str, note: str | None = None) -> EvalData:
  """EvalData of `split` of the converted data set in `folder` (`found`: its info's splits)."""
  join = storage.join if storage.is_gcs(folder) else os.path.join
  return EvalData(join(folder, found[split]["file_pattern"]), split,
                  int(found[split]["num_records"]), where=folder, note=note)


def eval_data(args: EvalArgs, run_validation: str) -> EvalData:
  """The data `eval` reads: --validation_data_path as given, else the asked split (default
  test) of --dataset_dir or of the data set the run trained on."""
  from tf_vision import params as params_lib  # pylint: disable=g-import-not-at-top
  if args.validation_data_path:
    return EvalData(args.validation_data_path, "files", where=args.validation_data_path)
  folder = args.dataset_dir.rstrip("/") if args.dataset_dir else _folder_of(run_validation)
  info = params_lib.dataset_info_near(folder)
  found = (info or {}).get("splits", {})
  split = args.split or "test"
  if split in found:
    return _split_data(folder, found, split)
  what = (f"--dataset_dir {folder}" if args.dataset_dir else f"the run's data {folder}")
  # A split asked for by name, or a --dataset_dir with neither test nor validation, is refused;
  # only the default (test) falls back to the validation data, with a note.
  if args.split is not None or (args.dataset_dir and "validation" not in found):
    known = ", ".join(found) if found else "no dataset_info.json"
    raise NascliError(f"{what} has no {split} split ({known})")
  note = (f"{what} has no test split ({'converted by an older nascli' if info else 'not written'}"
          " by `nascli convert-data`): evaluating on the validation data the run trained with,"
          " which is not a held-out estimate; convert the data again for a test split")
  if args.dataset_dir:
    return _split_data(folder, found, "validation", note)
  records = int(found["validation"]["num_records"]) if "validation" in found else None
  return EvalData(None, "validation", records, where=folder, note=note)


def result_line(result: dict) -> str:
  """`result: {'top_5_accuracy': ..., 'top_1_accuracy': ...} ckpt=...` as THOR's eval prints."""
  shown = {RESULT_KEYS[k]: result["metrics"][k] for k in RESULT_KEYS if k in result["metrics"]}
  return f"result: {shown} ckpt={result['checkpoint']}"


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
  data = eval_data(args, params.task.validation_data.input_path)
  if data.note:
    stderr.print(f"note: {data.note}", markup=False, highlight=False)
  val = data.path
  if val:
    params_lib.check_pattern(val, "--validation_data_path")
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
  result["data"] = {"split": data.split, "files": params.task.validation_data.input_path,
                    "num_records": data.num_records, "steps": args.steps,
                    "evaluated_on": data.describe()}
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
