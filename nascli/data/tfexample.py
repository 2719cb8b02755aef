"""Records in the feature layout Model Garden's decoders read (DESIGN.md section 5)."""

import numpy as np
import tensorflow as tf

from nascli.data.source import Record

CLASSIFICATION_KEYS = ("image/encoded", "image/format", "image/class/label", "image/height",
                       "image/width", "image/source_id", "image/filename")
DETECTION_KEYS = ("image/encoded", "image/format", "image/height", "image/width",
                  "image/source_id", "image/filename", "image/object/bbox/xmin",
                  "image/object/bbox/xmax", "image/object/bbox/ymin", "image/object/bbox/ymax",
                  "image/object/class/label", "image/object/area", "image/object/is_crowd")


def _bytes(*values: bytes) -> tf.train.Feature:
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))


def _ints(values) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))


def _floats(values) -> tf.train.Feature:
  return tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in values]))


def serialize(record: Record) -> bytes:
  """The serialized tf.train.Example for a record (detection when it carries boxes)."""
  feature = {
      "image/encoded": _bytes(record.encoded),
      "image/format": _bytes(record.format.encode()),
      "image/height": _ints([record.height]),
      "image/width": _ints([record.width]),
      "image/source_id": _bytes(record.source_id.encode()),
      "image/filename": _bytes(record.filename.encode()),
  }
  if record.label is not None:
    feature["image/class/label"] = _ints([record.label])
  if record.boxes is not None:
    boxes = np.asarray(record.boxes, np.float32).reshape(-1, 4)
    num = len(boxes)
    classes = np.asarray(record.classes, np.int64).reshape(-1)
    areas = (np.asarray(record.areas, np.float32).reshape(-1) if record.areas is not None
             else (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) * record.height
             * record.width)
    crowd = (np.asarray(record.is_crowd, np.int64).reshape(-1) if record.is_crowd is not None
             else np.zeros([num], np.int64))
    feature.update({
        "image/object/bbox/ymin": _floats(boxes[:, 0]),
        "image/object/bbox/xmin": _floats(boxes[:, 1]),
        "image/object/bbox/ymax": _floats(boxes[:, 2]),
        "image/object/bbox/xmax": _floats(boxes[:, 3]),
        "image/object/class/label": _ints(classes),
        "image/object/area": _floats(areas),
        "image/object/is_crowd": _ints(crowd),
    })
  example = tf.train.Example(features=tf.train.Features(feature=feature))
  return example.SerializeToString(deterministic=True)
