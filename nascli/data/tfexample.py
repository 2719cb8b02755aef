"""Records in the feature layout Model Garden's decoders read (DESIGN.md section 5).

A tf.train.Example is serialized here in plain Python, byte for byte what TensorFlow's
`SerializeToString(deterministic=True)` gives (tests/test_tfexample.py compares them), so that a
conversion never imports TensorFlow: `convert-data` starts in a second instead of tens of
seconds, and its forked workers stay small.

The messages (tensorflow/core/example/{example,feature}.proto, proto3):
  Example {Features features = 1}; Features {map<string, Feature> feature = 1};
  Feature {oneof kind {BytesList bytes_list = 1; FloatList float_list = 2;
  Int64List int64_list = 3}}; BytesList {repeated bytes value = 1};
  FloatList {repeated float value = 1 [packed]}; Int64List {repeated int64 value = 1 [packed]}.
Deterministic serialization writes map entries sorted by key, each as (key = 1, value = 2).
"""

import functools

import numpy as np

from nascli.data.source import Record

CLASSIFICATION_KEYS = ("image/encoded", "image/format", "image/class/label", "image/height",
                       "image/width", "image/source_id", "image/filename")
DETECTION_KEYS = ("image/encoded", "image/format", "image/height", "image/width",
                  "image/source_id", "image/filename", "image/object/bbox/xmin",
                  "image/object/bbox/xmax", "image/object/bbox/ymin", "image/object/bbox/ymax",
                  "image/object/class/label", "image/object/area", "image/object/is_crowd")

_U64 = 1 << 64
_SMALL = [bytes([i]) for i in range(0x80)]


def _varint(value: int) -> bytes:
  """Base-128 varint; a negative int64 is written as its 64-bit two's complement (10 bytes)."""
  if 0 <= value < 0x80:
    return _SMALL[value]
  if value < 0:
    value += _U64
  out = bytearray()
  while value > 0x7F:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
  """A length-delimited field (wire type 2)."""
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _bytes(*values: bytes) -> bytes:
  return _field(1, b"".join(_field(1, v) for v in values))


def _ints(values) -> bytes:
  packed = b"".join(_varint(int(v)) for v in values)
  return _field(3, _field(1, packed) if packed else b"")


def _floats(values) -> bytes:
  packed = np.asarray(values, "<f4").reshape(-1).tobytes()
  return _field(2, _field(1, packed) if packed else b"")


@functools.lru_cache(maxsize=256)
def _key(key: str) -> bytes:
  """A map entry's key field and the value field's tag: the same for every record."""
  return _field(1, key.encode("utf-8")) + b"\x12"


def serialize_features(feature: dict[str, bytes]) -> bytes:
  """The Example holding `feature` (name -> an encoded Feature from _bytes/_ints/_floats)."""
  entries = []
  for key in sorted(feature, key=lambda k: k.encode("utf-8")):
    value = feature[key]
    entries.append(_field(1, b"".join((_key(key), _varint(len(value)), value))))
  return _field(1, b"".join(entries))


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
  return serialize_features(feature)
