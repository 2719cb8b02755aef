"""Our TFRecord writer produces exactly the bytes TensorFlow's own writer produces."""

import hashlib

import numpy as np

from nascli.data.tfrecord_io import TFRecordFileWriter


def test_byte_identical_to_tensorflow_writer_and_readable(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  records = [b"", b"x", rng.bytes(1000), rng.bytes(70_000)] + [rng.bytes(int(n))
                                                              for n in rng.integers(0, 500, 50)]
  ours, theirs = tmp_path / "ours.tfrecord", tmp_path / "theirs.tfrecord"
  with TFRecordFileWriter(ours) as writer:
    for r in records:
      writer.write(r)
  with tf.io.TFRecordWriter(str(theirs)) as writer:
    for r in records:
      writer.write(r)
  assert ours.read_bytes() == theirs.read_bytes()
  assert [x.numpy() for x in tf.data.TFRecordDataset(str(ours))] == records


def test_sha256_and_size_are_those_of_the_file(tmp_path):
  path = tmp_path / "a.tfrecord"
  with TFRecordFileWriter(path) as writer:
    for i in range(10):
      writer.write(bytes([i]) * i)
  data = path.read_bytes()
  assert writer.sha256 == hashlib.sha256(data).hexdigest()
  assert writer.size == len(data) == sum(16 + i for i in range(10))
  assert writer.num_records == 10
