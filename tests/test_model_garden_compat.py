"""Model Garden's own classification decoder and input reader read what convert-data writes."""

import numpy as np

from conftest import decode_image, read_examples


def test_model_garden_decoder_and_input_reader_read_digits(run_convert):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official.core import input_reader  # pylint: disable=g-import-not-at-top
  from official.vision.configs import image_classification as ic  # pylint: disable=g-import-not-at-top
  from official.vision.dataloaders import classification_input  # pylint: disable=g-import-not-at-top

  info, _, out = run_convert("digits", image_size=32, num_shards=2)
  raw = next(iter(tf.data.TFRecordDataset(str(out / "train-00000-of-00002.tfrecord"))))
  ours = read_examples(out / "train-00000-of-00002.tfrecord")[0]
  decoded = classification_input.Decoder().decode(raw)
  assert decoded["image/encoded"].numpy() == ours["image/encoded"][0]
  assert int(decoded["image/class/label"]) == ours["image/class/label"][0]

  params = ic.DataConfig(input_path=str(out / "train-*"), global_batch_size=16, is_training=False,
                         decode_jpeg_only=False, dtype="float32", shuffle_buffer_size=1)
  parser = classification_input.Parser(output_size=[32, 32], num_classes=info["num_classes"],
                                       decode_jpeg_only=False, aug_rand_hflip=False,
                                       aug_crop=False)
  reader = input_reader.InputReader(
      params, dataset_fn=tf.data.TFRecordDataset,
      decoder_fn=classification_input.Decoder().decode,
      parser_fn=parser.parse_fn(is_training=False))
  images, labels = next(iter(reader.read()))
  assert images.shape == (16, 32, 32, 3)
  assert images.dtype == tf.float32
  labels = labels.numpy()
  assert set(labels.tolist()) <= set(range(10)) and len(set(labels.tolist())) > 3
  # The parser normalizes with ImageNet statistics; undoing it recovers our pixels.
  mean = np.array([0.485, 0.456, 0.406]) * 255
  std = np.array([0.229, 0.224, 0.225]) * 255
  first = np.round(images[0].numpy() * std + mean).astype(np.int64)
  records = read_examples(out / "train-*")
  candidates = [decode_image(r["image/encoded"][0]) for r in records
                if r["image/class/label"][0] == labels[0]]
  assert any(np.abs(first - c).max() <= 1 for c in candidates)
