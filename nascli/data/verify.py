"""Reads a converted folder record by record: schema, pixels, labels, boxes and shard counts."""

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text

from nascli.data import reasons, sharding
from nascli.data.convert import INFO_FILE
from nascli.data.source import CLASSIFICATION
from nascli.errors import InputError


@dataclasses.dataclass
class ShardReport:
  split: str
  file: str
  expected: int | None
  found: int = 0
  problems: list[str] = dataclasses.field(default_factory=list)

  @property
  def ok(self) -> bool:
    return not self.problems


@dataclasses.dataclass
class VerifyReport:
  directory: Path
  dataset: str
  task: str
  shards: list[ShardReport]
  label_counts: dict[str, dict[str, int]]

  @property
  def ok(self) -> bool:
    return all(s.ok for s in self.shards)

  def first_problem(self) -> str:
    bad = [s for s in self.shards if not s.ok]
    more = sum(len(s.problems) for s in bad) - 1
    extra = f" (and {more} more problem(s))" if more > 0 else ""
    return f"{bad[0].problems[0]}{extra}"

  def as_dict(self) -> dict:
    return {"directory": str(self.directory), "dataset": self.dataset, "ok": self.ok,
            "shards": [dataclasses.asdict(s) for s in self.shards],
            "label_counts": self.label_counts}


def _parse_fn(task: str):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  scalar = {
      "image/encoded": tf.io.FixedLenFeature([], tf.string),
      "image/format": tf.io.FixedLenFeature([], tf.string),
      "image/height": tf.io.FixedLenFeature([], tf.int64),
      "image/width": tf.io.FixedLenFeature([], tf.int64),
      "image/source_id": tf.io.FixedLenFeature([], tf.string),
  }
  if task == CLASSIFICATION:
    scalar["image/class/label"] = tf.io.FixedLenFeature([], tf.int64)
    sparse = {}
  else:
    sparse = {k: tf.io.VarLenFeature(tf.float32) for k in (
        "image/object/bbox/xmin", "image/object/bbox/xmax", "image/object/bbox/ymin",
        "image/object/bbox/ymax", "image/object/area")}
    sparse["image/object/class/label"] = tf.io.VarLenFeature(tf.int64)
    sparse["image/object/is_crowd"] = tf.io.VarLenFeature(tf.int64)

  def parse(raw):
    ex = tf.io.parse_single_example(raw, {**scalar, **sparse})
    out = {k: ex[k] for k in scalar if k != "image/encoded"}
    out.update({k: tf.sparse.to_dense(ex[k]) for k in sparse})
    image = tf.io.decode_image(ex["image/encoded"], expand_animations=False)
    out["decoded_shape"] = tf.shape(image)
    return out

  return parse


def _check_record(rec: dict, task: str, class_ids: set[int], num_classes: int) -> str | None:
  height, width = int(rec["image/height"]), int(rec["image/width"])
  shape = rec["decoded_shape"]
  if (int(shape[0]), int(shape[1])) != (height, width):
    return (f"image decodes to {int(shape[0])}x{int(shape[1])} but image/height x image/width say"
            f" {height}x{width}")
  if task == CLASSIFICATION:
    label = int(rec["image/class/label"])
    if not 0 <= label < num_classes:
      return f"label {label} outside 0..{num_classes - 1}"
    return None
  boxes = [rec[f"image/object/bbox/{k}"] for k in ("ymin", "xmin", "ymax", "xmax")]
  labels = rec["image/object/class/label"]
  lengths = {len(b) for b in boxes} | {len(labels), len(rec["image/object/area"]),
                                       len(rec["image/object/is_crowd"])}
  if len(lengths) != 1:
    return f"object features have different lengths {sorted(lengths)}"
  ymin, xmin, ymax, xmax = boxes
  if len(ymin) and (np.min(boxes) < 0.0 or np.max(boxes) > 1.0 or np.any(ymin > ymax)
                    or np.any(xmin > xmax)):
    return "a box is outside [0, 1] or has min > max"
  unknown = sorted(set(int(c) for c in labels) - class_ids)
  if unknown:
    return f"object class {unknown[0]} is not in labels.txt / dataset_info.json"
  return None


def read_info(directory: Path) -> dict:
  """The dataset_info.json of a finished conversion; a one-line InputError otherwise.

  Needs no TensorFlow, so `convert-data --verify` refuses a wrong folder at once.
  """
  directory = Path(directory)
  info_path = directory / INFO_FILE
  if not directory.exists():
    raise InputError(f"{directory} does not exist")
  if not directory.is_dir():
    raise InputError(f"{directory} is not a folder")
  if not info_path.exists():
    raise InputError(f"{directory} has no {INFO_FILE}: not a finished nascli conversion")
  try:
    info = json.loads(info_path.read_text(encoding="utf-8"))
    # Everything verify_output reads, looked up once here.
    _ = (info["task"], int(info["num_classes"]), [int(c["id"]) for c in info["classes"]],
         [(shard["file"], shard["num_records"]) for split in info["splits"].values()
          for shard in split["shards"]])
  except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    why = f"it has no {e.args[0]!r} entry" if isinstance(e, KeyError) else reasons.reason(e)
    raise InputError(f"{info_path} is malformed: {why}") from None
  return info


def verify_output(directory: Path) -> VerifyReport:
  """Decodes every record of a conversion and compares everything with dataset_info.json."""
  directory = Path(directory)
  info = read_info(directory)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  task, splits = info["task"], info["splits"]
  class_ids = {int(c["id"]) for c in info["classes"]}
  num_classes = int(info["num_classes"])
  parse = _parse_fn(task)
  reports, label_counts = [], {}
  listed = set()
  for split, s in splits.items():
    counts: dict[str, int] = {}
    for shard in s["shards"]:
      listed.add(shard["file"])
      report = ShardReport(split, shard["file"], shard["num_records"])
      reports.append(report)
      path = directory / shard["file"]
      if not path.exists():
        report.problems.append(f"shard {path} is missing")
        continue
      ds = tf.data.TFRecordDataset(str(path)).map(
          parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
      it = iter(ds.as_numpy_iterator())
      while True:
        try:
          rec = next(it)
        except StopIteration:
          break
        except tf.errors.DataLossError:
          report.problems.append(f"shard {path} is truncated or corrupt at record {report.found}")
          break
        except tf.errors.InvalidArgumentError as e:
          reason = " ".join(str(e.message).split())[:160]
          report.problems.append(f"shard {path}: record {report.found} does not parse or decode:"
                                 f" {reason}")
          break
        problem = _check_record(rec, task, class_ids, num_classes)
        if problem:
          report.problems.append(f"shard {path}: record {report.found}: {problem}")
        if task == CLASSIFICATION:
          key = str(int(rec["image/class/label"]))
          counts[key] = counts.get(key, 0) + 1
        report.found += 1
      if report.found != report.expected and not any("truncated" in p for p in report.problems):
        report.problems.append(f"shard {path} holds {report.found} records, {INFO_FILE} says"
                               f" {report.expected}")
    if task == CLASSIFICATION:
      label_counts[split] = dict(sorted(counts.items(), key=lambda kv: int(kv[0])))
      if s.get("class_counts") and s["class_counts"] != label_counts[split]:
        reports[-1].problems.append(f"{split}: label counts differ from {INFO_FILE}")
  for name in sorted(os.listdir(directory)):
    m = sharding.SHARD_PATTERN.match(name)
    if m and m.group("prefix") in splits and name not in listed:
      reports.append(ShardReport(m.group("prefix"), name, None,
                                 problems=[f"shard {directory / name} is not in {INFO_FILE}"]))
  return VerifyReport(directory, info.get("dataset", "?"), task, reports, label_counts)


def report_table(report: VerifyReport) -> Group:
  """The verdict on a line of its own (a table title would wrap a long path to the table's
  width), then one row per shard."""
  verdict = Text(f"{report.dataset} in {report.directory}: "
                 + ("all records verified" if report.ok else "PROBLEMS FOUND"))
  table = Table()
  for col in ("split", "shard", "records", "expected", "status"):
    table.add_column(col)
  for s in report.shards:
    table.add_row(s.split, Text(s.file), str(s.found),
                  "-" if s.expected is None else str(s.expected),
                  "ok" if s.ok else Text(s.problems[0]))
  return Group(verdict, table)
