"""A COCO ground-truth JSON written from detection TFRecords.

Model Garden's COCO evaluator can build its ground truth from the validation records itself, but
that path breaks on numpy >= 2.4 (platform notes, gotcha 3); handing it an annotation file avoids
it, and the file is also what pycocotools users expect.
"""

import json
import os

import tensorflow as tf

_FEATURES = {
    "image/source_id": tf.io.FixedLenFeature([], tf.string),
    "image/height": tf.io.FixedLenFeature([], tf.int64),
    "image/width": tf.io.FixedLenFeature([], tf.int64),
    "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
    "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    "image/object/area": tf.io.VarLenFeature(tf.float32),
    "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
}


def _parse(raw):
  ex = tf.io.parse_single_example(raw, _FEATURES)
  return {k: (tf.sparse.to_dense(v) if isinstance(v, tf.sparse.SparseTensor) else v)
          for k, v in ex.items()}


def build(file_pattern: str, class_names: dict[int, str] | None = None) -> dict:
  """The COCO dict (images, annotations, categories) of every record matching the pattern."""
  files = sorted(f for p in file_pattern.split(",") for f in tf.io.gfile.glob(p.strip()))
  images, annotations, categories = [], [], set()
  for rec in tf.data.TFRecordDataset(files).map(_parse).as_numpy_iterator():
    image_id = int(rec["image/source_id"])
    height, width = int(rec["image/height"]), int(rec["image/width"])
    images.append({"id": image_id, "height": height, "width": width})
    labels = rec["image/object/class/label"]
    for i, label in enumerate(labels):
      ymin, xmin = rec["image/object/bbox/ymin"][i] * height, rec["image/object/bbox/xmin"][i] * width
      ymax, xmax = rec["image/object/bbox/ymax"][i] * height, rec["image/object/bbox/xmax"][i] * width
      area = rec["image/object/area"]
      annotations.append({
          "id": len(annotations) + 1, "image_id": image_id, "category_id": int(label),
          "bbox": [float(xmin), float(ymin), float(xmax - xmin), float(ymax - ymin)],
          "area": float(area[i]) if len(area) > i else float((xmax - xmin) * (ymax - ymin)),
          "iscrowd": int(rec["image/object/is_crowd"][i]) if len(
              rec["image/object/is_crowd"]) > i else 0})
      categories.add(int(label))
  names = class_names or {}
  for known in names:
    categories.add(known)
  return {"images": images, "annotations": annotations,
          "categories": [{"id": c, "name": names.get(c, str(c))} for c in sorted(categories)]}


def write(file_pattern: str, path: str, class_names: dict[int, str] | None = None) -> str:
  """Writes the ground truth atomically; returns its path."""
  data = build(file_pattern, class_names)
  tmp = f"{path}.{os.getpid()}.tmp"  # Workers sharing a model dir each write it whole.
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(data, f)
  os.replace(tmp, path)
  return path
