"""Tests for the `coco` source: a tiny COCO layout from known pixels, read back by Model Garden."""

import glob
import io
import json
from pathlib import Path
import re

import numpy as np
from PIL import Image
import pytest

from conftest import read_examples
from nascli.errors import InputError, NascliError, UnsafeInputError

CATEGORIES = [{"id": 1, "name": "cat", "supercategory": "animal"},
              {"id": 3, "name": "dog", "supercategory": "animal"}]  # id 2 left out on purpose


def _pixels(height: int, width: int, seed: int) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _png(pixels: np.ndarray) -> bytes:
  buf = io.BytesIO()
  Image.fromarray(pixels).save(buf, format="PNG")
  return buf.getvalue()


def _jpeg(pixels: np.ndarray) -> bytes:
  buf = io.BytesIO()
  Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
  return buf.getvalue()


def _ann(ann_id, image_id, category_id, bbox, area, iscrowd=0):
  return {"id": ann_id, "image_id": image_id, "category_id": category_id, "bbox": bbox,
          "area": area, "iscrowd": iscrowd, "segmentation": []}


def _write(root: Path, name: str, files: dict[str, bytes], doc: dict) -> Path:
  (root / name).mkdir(parents=True, exist_ok=True)
  for file_name, data in files.items():
    (root / name / file_name).write_bytes(data)
  (root / "annotations").mkdir(exist_ok=True)
  path = root / "annotations" / f"instances_{name}.json"
  path.write_text(json.dumps(doc))
  return path


def make_layout(root: Path) -> dict:
  """train2017: 3 images (PNG, JPEG, PNG without objects); val2017: 2 PNGs; returns the truth."""
  px = {42: _pixels(20, 30, 0), 7: _pixels(24, 16, 1), 100: _pixels(10, 12, 2),
        5: _pixels(16, 16, 3), 9: _pixels(12, 20, 4)}
  train_files = {"a.png": _png(px[42]), "b.jpg": _jpeg(px[7]), "empty.png": _png(px[100])}
  train = {
      "info": {}, "licenses": [], "categories": CATEGORIES,
      "images": [{"id": 42, "file_name": "a.png", "height": 20, "width": 30},
                 {"id": 7, "file_name": "b.jpg", "height": 24, "width": 16},
                 {"id": 100, "file_name": "empty.png", "height": 10, "width": 12}],
      "annotations": [
          _ann(1, 42, 1, [3, 2, 12, 10], 100.5),
          _ann(2, 42, 3, [15, 4, 15, 16], 200.0, iscrowd=1),
          _ann(3, 7, 3, [4, 6, 0, 5], 0.0),  # zero width: skipped
          _ann(4, 7, 1, [8, 12, 12, 20], 77.0),  # runs past the right and bottom: clipped
      ]}
  val = {
      "categories": CATEGORIES,
      "images": [{"id": 9, "file_name": "v9.png", "height": 12, "width": 20},
                 {"id": 5, "file_name": "v5.png", "height": 16, "width": 16}],
      "annotations": [_ann(10, 5, 1, [0, 0, 8, 8], 64.0), _ann(11, 9, 3, [10, 6, 10, 6], 60.0)]}
  _write(root, "train2017", train_files, train)
  _write(root, "val2017", {"v5.png": _png(px[5]), "v9.png": _png(px[9])}, val)
  expected = {  # image id -> (boxes ymin,xmin,ymax,xmax, classes, areas, crowd, height, width)
      42: ([[2 / 20, 3 / 30, 12 / 20, 15 / 30], [4 / 20, 15 / 30, 20 / 20, 30 / 30]],
           [1, 3], [100.5, 200.0], [False, True], 20, 30),
      7: ([[12 / 24, 8 / 16, 1.0, 1.0]], [1], [77.0], [False], 24, 16),
      100: (np.zeros([0, 4]), [], [], [], 10, 12),
      5: ([[0.0, 0.0, 8 / 16, 8 / 16]], [1], [64.0], [False], 16, 16),
      9: ([[6 / 12, 10 / 20, 1.0, 1.0]], [3], [60.0], [False], 12, 20),
  }
  return {"pixels": px, "expected": expected, "train_files": train_files}


@pytest.fixture
def layout(tmp_path):
  root = tmp_path / "coco"
  return root, make_layout(root)


def _raw_records(pattern) -> list[bytes]:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return [r.numpy() for p in sorted(glob.glob(str(pattern))) for r in tf.data.TFRecordDataset(p)]


def test_layout_converts_with_splits_labels_and_counts(run_convert, layout):
  root, _ = layout
  info, _, out = run_convert("coco", source=root)
  assert info["task"] == "detection"
  assert info["splits"]["train"]["num_records"] == 3
  assert info["splits"]["validation"]["num_records"] == 2
  assert info["splits"]["train"]["num_objects"] == 3
  assert info["splits"]["validation"]["num_objects"] == 2
  assert info["splits"]["train"]["class_counts"] == {"1": 2, "3": 1}
  assert (out / "labels.txt").read_text() == "1:cat\n3:dog\n"
  assert info["num_classes"] == 4  # max id + 1, gap kept
  src = info["source"]
  assert src["kind"] == "folder" and src["checksum_of"] == "listing" and len(src["sha256"]) == 64
  assert src["skipped_annotations"] == 1
  assert src["splits"]["train"]["original_name"] == "train2017"
  assert src["splits"]["validation"]["original_name"] == "val2017"
  assert src["validation_annotations"] == str(root / "annotations" / "instances_val2017.json")
  on_disk = json.loads((out / "dataset_info.json").read_text())
  assert on_disk["splits"] == info["splits"] and on_disk["source"] == src


def test_model_garden_decoder_reads_coco_records(run_convert, layout):
  from official.vision.dataloaders import tf_example_decoder  # pylint: disable=g-import-not-at-top
  root, truth = layout
  _, _, out = run_convert("coco", source=root, num_shards=1)
  decoder = tf_example_decoder.TfExampleDecoder()
  seen = {}
  for split in ("train", "validation"):
    seen[split] = []
    for raw in _raw_records(out / f"{split}-*.tfrecord"):
      d = decoder.decode(raw)
      image_id = int(d["source_id"].numpy())
      seen[split].append(image_id)
      boxes, classes, areas, crowd, height, width = truth["expected"][image_id]
      np.testing.assert_allclose(d["groundtruth_boxes"].numpy(),
                                 np.asarray(boxes, np.float32).reshape(-1, 4), atol=1e-7)
      np.testing.assert_array_equal(d["groundtruth_classes"].numpy(), classes)
      np.testing.assert_allclose(d["groundtruth_area"].numpy(), areas)
      np.testing.assert_array_equal(d["groundtruth_is_crowd"].numpy(), crowd)
      assert (int(d["height"]), int(d["width"])) == (height, width)
      assert d["image"].shape == (height, width, 3)
      if image_id != 7:  # PNG: lossless
        np.testing.assert_array_equal(d["image"].numpy(), truth["pixels"][image_id])
  assert seen == {"train": [7, 42, 100], "validation": [5, 9]}  # canonical order: by image id
  train = read_examples(out / "train-*.tfrecord")
  assert train[0]["image/encoded"][0] == truth["train_files"]["b.jpg"]  # original JPEG bytes
  assert [r["image/format"][0] for r in train] == [b"jpeg", b"png", b"png"]
  assert [r["image/filename"][0] for r in train] == [b"b.jpg", b"a.png", b"empty.png"]


def test_single_json_file_is_the_train_split(run_convert, layout, tmp_path):
  root, _ = layout
  # Beside its folder (annotations/ next to train2017/).
  info, _, out = run_convert("coco", output_dir=tmp_path / "one",
                             source=root / "annotations" / "instances_train2017.json")
  assert list(info["splits"]) == ["train"] and info["splits"]["train"]["num_records"] == 3
  assert info["source"]["kind"] == "file" and info["source"]["validation_annotations"] is None
  assert (out / "labels.txt").read_text() == "1:cat\n3:dog\n"
  # Images in the JSON's own folder, validation from --validation_source.
  flat = tmp_path / "flat"
  flat.mkdir()
  for p in (root / "train2017").iterdir():
    (flat / p.name).write_bytes(p.read_bytes())
  (flat / "mine.json").write_bytes((root / "annotations/instances_train2017.json").read_bytes())
  info, _, _ = run_convert("coco", output_dir=tmp_path / "two", source=flat / "mine.json",
                           validation_source=root / "annotations" / "instances_val2017.json")
  assert info["splits"]["train"]["num_objects"] == 3
  assert info["splits"]["validation"]["num_records"] == 2


def _expect_input_error(run_convert, out: Path, match: str, error=InputError, **options):
  with pytest.raises(error, match=match) as e:
    run_convert("coco", output_dir=out, **options)
  assert "\n" not in str(e.value)
  assert not (out / "dataset_info.json").exists()
  return str(e.value)


def test_invalid_json_missing_key_and_unknown_category(run_convert, layout, tmp_path):
  root, _ = layout
  val = root / "annotations" / "instances_val2017.json"
  doc = json.loads(val.read_text())
  name = re.escape(str(val))
  val.write_text('{"images": [}')
  _expect_input_error(run_convert, tmp_path / "o1", rf"^{name} is not valid JSON", source=root)
  val.write_text(json.dumps({k: v for k, v in doc.items() if k != "categories"}))
  _expect_input_error(run_convert, tmp_path / "o2", rf"^{name} .*'categories'", source=root)
  bad = dict(doc, annotations=doc["annotations"] + [_ann(99, 5, 2, [1, 1, 2, 2], 4.0)])
  val.write_text(json.dumps(bad))
  _expect_input_error(run_convert, tmp_path / "o3", rf"^{name}: annotation 99 .*category_id 2",
                      source=root)
  bad = dict(doc, images=doc["images"] + [{"id": 77, "file_name": "../../etc/passwd"}])
  val.write_text(json.dumps(bad))
  _expect_input_error(run_convert, tmp_path / "o4", rf"^{name}: image 77 .*etc/passwd",
                      error=UnsafeInputError, source=root)
  _expect_input_error(run_convert, tmp_path / "o5", "^coco needs --source", error=NascliError)
  _expect_input_error(run_convert, tmp_path / "o6", r"has no annotations/instances_",
                      source=root / "train2017")


def test_corrupt_and_missing_images(run_convert, layout, tmp_path):
  root, truth = layout
  a_png = root / "train2017" / "a.png"
  a_png.write_bytes(truth["train_files"]["a.png"][:60])  # truncated
  msg = _expect_input_error(run_convert, tmp_path / "o1", "corrupt image", source=root)
  assert str(a_png) in msg and "--skip_corrupt" in msg
  (root / "val2017" / "v9.png").unlink()
  info, _, out = run_convert("coco", output_dir=tmp_path / "o2", source=root, skip_corrupt=True)
  assert info["splits"]["train"]["num_records"] == 2
  assert [s["item"] for s in info["splits"]["train"]["skipped_corrupt"]] == [str(a_png)]
  assert info["splits"]["validation"]["skipped_corrupt"] == [
      {"item": str(root / "val2017" / "v9.png"), "reason": "missing file"}]
  assert info["source"]["splits"]["validation"]["missing_files"] == 1
  ids = [r["image/source_id"][0] for r in read_examples(out / "train-*.tfrecord")]
  assert ids == [b"7", b"100"]


def _labelling_tool_export(tmp_path: Path) -> tuple[Path, Path, dict]:
  """What labelling tools export: one annotation JSON and, elsewhere, a folder of images."""
  images = tmp_path / "export" / "images"
  images.mkdir(parents=True)
  sizes = {1: (20, 30), 2: (16, 24)}  # id -> (height, width)
  for image_id, (h, w) in sizes.items():
    (images / f"frame_{image_id}.png").write_bytes(_png(_pixels(h, w, image_id)))
  doc = {"categories": CATEGORIES,
         "images": [{"id": i, "file_name": f"frame_{i}.png", "height": h, "width": w}
                    for i, (h, w) in sizes.items()],
         "annotations": [_ann(1, 1, 3, [3.5, 2, 12, 10], 120.0),
                         _ann(2, 1, 1, [0, 0, 30, 20], 600.0),
                         _ann(3, 2, 1, [6, 4, 12, 8], 96.0)]}
  annotations = tmp_path / "labels" / "project_export.json"
  annotations.parent.mkdir()
  annotations.write_text(json.dumps(doc))
  return annotations, images, doc


@pytest.mark.parametrize("spelling", ["--object_annotations_file", "--source"])
def test_image_dir_with_a_separate_annotation_json(cli, tmp_path, spelling):
  annotations, images, doc = _labelling_tool_export(tmp_path)
  out = tmp_path / "out"
  code, _, err = cli("convert-data", "coco", spelling, annotations, "--image_dir", images,
                     "--output_dir", out, "--num_shards", "1")
  assert code == 0, err
  info = json.loads((out / "dataset_info.json").read_text())
  assert info["source"]["image_dir"] == str(images)
  assert info["splits"]["train"]["num_records"] == 2
  records = {int(r["image/source_id"][0]): r for r in read_examples(out / "train-*.tfrecord")}
  sizes = {i["id"]: (i["height"], i["width"]) for i in doc["images"]}
  for image_id, record in records.items():
    anns = [a for a in doc["annotations"] if a["image_id"] == image_id]
    h, w = sizes[image_id]
    assert record["image/object/class/label"] == [a["category_id"] for a in anns]
    for key, value in (("xmin", lambda b: b[0] / w), ("ymin", lambda b: b[1] / h),
                       ("xmax", lambda b: (b[0] + b[2]) / w),
                       ("ymax", lambda b: (b[1] + b[3]) / h)):
      np.testing.assert_allclose(record[f"image/object/bbox/{key}"],
                                 [value(a["bbox"]) for a in anns], rtol=1e-6)
    assert record["image/object/area"] == [a["area"] for a in anns]
    assert record["image/filename"] == [f"frame_{image_id}.png".encode()]


def test_missing_image_is_reported_as_missing_naming_it(cli, tmp_path):
  annotations, images, _ = _labelling_tool_export(tmp_path)
  (images / "frame_2.png").unlink()
  out = tmp_path / "out"
  args = ["convert-data", "coco", "--object_annotations_file", annotations, "--image_dir", images,
          "--output_dir", out]
  code, _, err = cli(*args)
  assert code == 1
  assert err == (f"Error: missing image file {images / 'frame_2.png'} (pass --skip_corrupt to skip"
                 " it)\n")
  assert "corrupt" not in err.split("(pass")[0]
  code, _, err = cli(*args, "--skip_corrupt")
  assert code == 0, err
  info = json.loads((out / "dataset_info.json").read_text())
  assert info["splits"]["train"]["skipped_corrupt"] == [
      {"item": str(images / "frame_2.png"), "reason": "missing file"}]
  assert info["splits"]["train"]["num_records"] == 1


def test_wrong_image_dir_is_named_before_any_image_is_read(cli, tmp_path):
  annotations, _, _ = _labelling_tool_export(tmp_path)
  elsewhere = tmp_path / "elsewhere"
  elsewhere.mkdir()
  code, _, err = cli("convert-data", "coco", "--source", annotations, "--image_dir", elsewhere,
                     "--output_dir", tmp_path / "out")
  assert code == 1
  assert err == (f"Error: none of the 2 images listed in {annotations} is in {elsewhere} (the"
                 " first: frame_1.png); check --image_dir\n")
  code, _, err = cli("convert-data", "coco", "--source", annotations, "--object_annotations_file",
                     annotations, "--output_dir", tmp_path / "out")
  assert code == 1 and "give the annotation JSON once" in err
  assert not (tmp_path / "out").exists()


def test_image_dir_does_not_apply_to_the_coco_folder_layout(run_convert, layout, tmp_path):
  root, _ = layout
  with pytest.raises(NascliError, match="--image_dir applies to one annotation JSON"):
    run_convert("coco", output_dir=tmp_path / "out", source=root, image_dir=root / "train2017")
