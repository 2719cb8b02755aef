"""Our tf.train.Example encoder writes exactly the bytes TensorFlow's deterministic one writes."""

import numpy as np

from nascli.data import tfexample
from nascli.data.source import Record


def _tf_serialize(record: Record) -> bytes:
  """The reference: the same features built with TensorFlow's own protos."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  b = lambda *v: tf.train.Feature(bytes_list=tf.train.BytesList(value=list(v)))  # noqa: E731
  i = lambda v: tf.train.Feature(int64_list=tf.train.Int64List(  # noqa: E731
      value=[int(x) for x in v]))
  f = lambda v: tf.train.Feature(float_list=tf.train.FloatList(  # noqa: E731
      value=[float(x) for x in v]))
  feature = {"image/encoded": b(record.encoded), "image/format": b(record.format.encode()),
             "image/height": i([record.height]), "image/width": i([record.width]),
             "image/source_id": b(record.source_id.encode()),
             "image/filename": b(record.filename.encode())}
  if record.label is not None:
    feature["image/class/label"] = i([record.label])
  if record.boxes is not None:
    boxes = np.asarray(record.boxes, np.float32).reshape(-1, 4)
    feature.update({
        "image/object/bbox/ymin": f(boxes[:, 0]), "image/object/bbox/xmin": f(boxes[:, 1]),
        "image/object/bbox/ymax": f(boxes[:, 2]), "image/object/bbox/xmax": f(boxes[:, 3]),
        "image/object/class/label": i(record.classes), "image/object/area": f(record.areas),
        "image/object/is_crowd": i(record.is_crowd)})
  example = tf.train.Example(features=tf.train.Features(feature=feature))
  return example.SerializeToString(deterministic=True)


def _records() -> list[Record]:
  rng = np.random.default_rng(0)
  out = []
  # Sizes around every varint length boundary of the image bytes (1, 2 and 3 bytes).
  for n, label in ((0, 0), (1, 1), (127, 9), (128, 127), (300, 128), (16_383, 300_000),
                   (16_384, 2**40), (70_000, -1)):
    out.append(Record(encoded=rng.bytes(n), format="png", height=n % 97 + 1, width=2**20,
                      source_id=f"id{n}", filename=f"dir/ünïcode_{n}.png", label=label))
  for k in (0, 1, 5):
    boxes = np.sort(rng.random((k, 4)).astype(np.float32), axis=1)
    out.append(Record(
        encoded=rng.bytes(500), format="jpeg", height=480, width=640, source_id=str(k),
        filename=f"{k}.jpg", boxes=boxes, classes=rng.integers(1, 91, k),
        areas=rng.random(k).astype(np.float32) * 1e4, is_crowd=rng.integers(0, 2, k)))
  return out


def test_byte_identical_to_tensorflow_and_parsed_back():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for record in _records():
    ours = tfexample.serialize(record)
    assert ours == _tf_serialize(record), record.source_id
    parsed = tf.train.Example.FromString(ours).features.feature
    assert parsed["image/encoded"].bytes_list.value == [record.encoded]
    assert parsed["image/filename"].bytes_list.value == [record.filename.encode()]
    if record.label is not None:
      assert parsed["image/class/label"].int64_list.value == [record.label]
    else:
      np.testing.assert_array_equal(parsed["image/object/bbox/ymax"].float_list.value,
                                    np.asarray(record.boxes, np.float32)[:, 2])


def test_encoder_does_not_import_tensorflow():
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  code = ("import sys; from nascli.data import convert, tfexample, parallel; "
          "print('tensorflow' in sys.modules)")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
  assert result.stdout.strip() == "False"
