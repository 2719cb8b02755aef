"""Tests for the `shapes` source: deterministic synthetic detection shards Model Garden reads."""

import hashlib
import json

import numpy as np
import pytest

from conftest import read_examples
from nascli.data import shapes
from nascli.errors import NascliError

SEED = 3
NUM_SAMPLES = 10  # validation and test: round(10 * 0.2) = 2 each


def _raw_records(pattern) -> list[bytes]:
  import glob  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return [r.numpy() for p in sorted(glob.glob(str(pattern))) for r in tf.data.TFRecordDataset(p)]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  """One conversion shared by the read-back tests (seed 3, 10 + 2 + 2 images of 128x128)."""
  from nascli.data.convert import ShardingOptions, convert  # pylint: disable=g-import-not-at-top
  from nascli.data.source import ConvertOptions  # pylint: disable=g-import-not-at-top
  out = tmp_path_factory.mktemp("shapes") / "out"
  info, _ = convert("shapes", out, ConvertOptions(seed=SEED, num_samples=NUM_SAMPLES,
                                                  progress=False),
                    ShardingOptions(num_shards=2, processes=1))
  return info, out


def test_split_sizes_labels_and_info(converted):
  info, out = converted
  assert info["task"] == "detection"
  assert info["splits"]["train"]["num_records"] == NUM_SAMPLES
  assert info["splits"]["validation"]["num_records"] == 2
  assert info["splits"]["test"]["num_records"] == 2
  assert list(info["splits"]) == ["train", "validation", "test"]
  assert [s["num_records"] for s in info["splits"]["train"]["shards"]] == [5, 5]
  assert (out / "labels.txt").read_text() == "1:rectangle\n2:ellipse\n3:triangle\n"
  assert info["num_classes"] == 4
  assert info["source"]["kind"] == "synthetic"
  assert len(info["source"]["sha256"]) == 64
  assert info["settings"]["seed"] == SEED and info["settings"]["image_size"] == 128
  assert (info["settings"]["num_validation"], info["settings"]["num_test"]) == (2, 2)
  origins = {split: info["splits"][split]["origin"] for split in info["splits"]}
  assert origins == {
      split: f"rendered by nascli.data.shapes.render_sample, seed {SEED}, images {span} (no other"
             " split renders them)"
      for split, span in (("train", "0..9"), ("validation", "10..11"), ("test", "12..13"))}
  assert info["splits"]["test"]["role"].startswith("final `nascli eval` only")
  assert json.loads((out / "dataset_info.json").read_text())["splits"] == info["splits"]
  expected_objects = sum(len(shapes.render_sample(SEED, i).classes) for i in range(NUM_SAMPLES))
  assert info["splits"]["train"]["num_objects"] == expected_objects


def test_model_garden_decoder_reads_what_render_sample_drew(converted):
  from official.vision.dataloaders import tf_example_decoder  # pylint: disable=g-import-not-at-top
  _, out = converted
  decoder = tf_example_decoder.TfExampleDecoder()
  ids, pixels = {}, {}
  for split in ("train", "validation", "test"):
    raws = _raw_records(out / f"{split}-*.tfrecord")
    ids[split], pixels[split] = set(), set()
    for raw in raws:
      d = decoder.decode(raw)
      index = int(d["source_id"].numpy())
      ids[split].add(index)
      pixels[split].add(hashlib.sha256(d["image"].numpy().tobytes()).hexdigest())
      sample = shapes.render_sample(SEED, index)
      np.testing.assert_array_equal(d["image"].numpy(), sample.image)
      np.testing.assert_array_equal(d["groundtruth_boxes"].numpy(), sample.boxes)
      np.testing.assert_array_equal(d["groundtruth_classes"].numpy(), sample.classes)
      np.testing.assert_array_equal(d["groundtruth_area"].numpy(), sample.areas)
      assert not d["groundtruth_is_crowd"].numpy().any()
      assert int(d["height"]) == int(d["width"]) == 128
  # Train takes global indices 0..9, validation the next ones, test the ones after: never the
  # same image (by index nor by decoded pixels), and every rendered index is in one split.
  assert ids["train"] == set(range(NUM_SAMPLES))
  assert ids["validation"] == {NUM_SAMPLES, NUM_SAMPLES + 1}
  assert ids["test"] == {NUM_SAMPLES + 2, NUM_SAMPLES + 3}
  assert sum(len(p) for p in pixels.values()) == NUM_SAMPLES + 4
  assert not (pixels["train"] & pixels["validation"] or pixels["train"] & pixels["test"]
              or pixels["validation"] & pixels["test"])
  filenames = [r["image/filename"][0] for r in read_examples(out / "validation-*.tfrecord")]
  assert filenames == [b"shapes_000010.png", b"shapes_000011.png"]
  filenames = [r["image/filename"][0] for r in read_examples(out / "test-*.tfrecord")]
  assert filenames == [b"shapes_000012.png", b"shapes_000013.png"]


def test_same_seed_same_bytes_other_seed_other_bytes(run_convert, tmp_path):
  kwargs = dict(num_samples=10, image_size=64, num_shards=2)
  info_a, _, out_a = run_convert("shapes", output_dir=tmp_path / "a", seed=1, **kwargs)
  info_b, _, out_b = run_convert("shapes", output_dir=tmp_path / "b", seed=1, **kwargs)
  info_c, _, out_c = run_convert("shapes", output_dir=tmp_path / "c", seed=2, **kwargs)
  names = sorted(p.name for p in out_a.glob("*.tfrecord"))
  assert len(names) == 6  # train, validation, test: 2 shards each
  for name in names:
    assert (out_a / name).read_bytes() == (out_b / name).read_bytes()
    assert (out_a / name).read_bytes() != (out_c / name).read_bytes()
  assert info_a["source"]["sha256"] == info_b["source"]["sha256"] != info_c["source"]["sha256"]


def test_model_garden_retinanet_pipeline_consumes_the_shards(converted):
  """Model Garden's own InputReader + TfExampleDecoder + RetinaNet parser, unchanged."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from official.common import dataset_fn
  from official.core import input_reader
  from official.vision.configs import retinanet as retinanet_cfg
  from official.vision.dataloaders import retinanet_input, tf_example_decoder
  # pylint: enable=g-import-not-at-top
  _, out = converted
  params = retinanet_cfg.DataConfig(input_path=str(out / "train-*-of-*.tfrecord"),
                                    global_batch_size=2, is_training=True, dtype="float32")
  parser = retinanet_input.Parser(
      output_size=[128, 128], min_level=3, max_level=7, num_scales=3,
      aspect_ratios=[0.5, 1.0, 2.0], anchor_size=4.0, dtype="float32")
  reader = input_reader.InputReader(
      params, dataset_fn=dataset_fn.pick_dataset_fn(params.file_type),
      decoder_fn=tf_example_decoder.TfExampleDecoder().decode,
      parser_fn=parser.parse_fn(params.is_training))
  images, labels = next(iter(reader.read()))
  assert images.shape == (2, 128, 128, 3) and images.dtype == tf.float32
  positives = sum(int(tf.reduce_sum(tf.cast(t > 0, tf.int32)))
                  for t in labels["cls_targets"].values())
  assert positives > 0
  assert set(labels["cls_targets"]) == {"3", "4", "5", "6", "7"}


@pytest.mark.parametrize("image_size", [16, 31])
def test_too_small_image_size_names_the_flag(run_convert, tmp_path, image_size):
  with pytest.raises(NascliError, match=r"^--image_size") as e:
    run_convert("shapes", output_dir=tmp_path / "bad", image_size=image_size, num_samples=4)
  assert "\n" not in str(e.value)
  assert not (tmp_path / "bad" / "dataset_info.json").exists()


def test_validation_size_and_fraction(run_convert, tmp_path):
  info, _, _ = run_convert("shapes", output_dir=tmp_path / "v", num_samples=8, image_size=32,
                           validation_size=3)
  assert info["splits"]["validation"]["num_records"] == 3
  assert info["splits"]["test"]["num_records"] == 2  # round(8 * 0.2)
  with pytest.raises(NascliError, match="--validation_fraction"):
    run_convert("shapes", output_dir=tmp_path / "w", num_samples=8, validation_fraction=1.5)
  assert not (tmp_path / "w" / "dataset_info.json").exists()


def test_test_size_and_fraction(run_convert, tmp_path):
  info, _, _ = run_convert("shapes", output_dir=tmp_path / "s", num_samples=8, image_size=32,
                           test_size=3)
  assert [info["splits"][s]["num_records"] for s in ("train", "validation", "test")] == [8, 2, 3]
  assert info["splits"]["test"]["origin"].endswith("images 10..12 (no other split renders them)")
  info, _, _ = run_convert("shapes", output_dir=tmp_path / "f", num_samples=8, image_size=32,
                           test_fraction=0.5, validation_fraction=0.25)
  assert [info["splits"][s]["num_records"] for s in ("train", "validation", "test")] == [8, 2, 4]
  assert info["settings"]["num_test"] == 4
  for bad, match in ((dict(test_fraction=1.5), r"^--test_fraction 1.5 must be in \(0, 1\]$"),
                     (dict(test_size=0), r"^--test_size must be at least 1, got 0$"),
                     (dict(test_size=2, test_fraction=0.5),
                      r"^give --test_size or --test_fraction, not both$")):
    with pytest.raises(NascliError, match=match):
      run_convert("shapes", output_dir=tmp_path / "bad", num_samples=8, image_size=32, **bad)
    assert not (tmp_path / "bad" / "dataset_info.json").exists()


def test_test_flags_are_read_by_shapes(cli, tmp_path):
  code, _, err = cli("convert-data", "shapes", "--num_samples", "4", "--image_size", "32",
                     "--test_size", "1", "--validation_size", "1", "--output_dir", tmp_path / "o")
  assert code == 0, err
  info = json.loads((tmp_path / "o" / "dataset_info.json").read_text())
  assert {s: info["splits"][s]["num_records"] for s in info["splits"]} == {
      "train": 4, "validation": 1, "test": 1}
