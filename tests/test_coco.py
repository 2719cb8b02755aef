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
  assert list(info["splits"]) == ["train", "validation", "test"]
  # val2017 is the test set; validation is 10% of train2017 (1 of 3 images: the empty one).
  assert info["splits"]["train"]["num_records"] == 2
  assert info["splits"]["validation"]["num_records"] == 1
  assert info["splits"]["test"]["num_records"] == 2
  assert info["splits"]["train"]["num_objects"] == 3
  assert info["splits"]["validation"]["num_objects"] == 0
  assert info["splits"]["test"]["num_objects"] == 2
  assert info["splits"]["train"]["class_counts"] == {"1": 2, "3": 1}
  assert info["splits"]["train"]["origin"] == (
      "the train2017 images (instances_train2017.json), less the validation images carved from"
      " them")
  assert info["splits"]["validation"]["origin"] == (
      "carved from the train2017 images (instances_train2017.json): random by image id, seed 0")
  assert info["splits"]["test"]["origin"] == (
      "the folder's own val2017 split (instances_val2017.json), the source's evaluation set")
  assert info["settings"]["seed"] == 0 and info["settings"]["split_files"] == {
      "train": "annotations/instances_train2017.json",
      "test": "annotations/instances_val2017.json"}
  assert (out / "labels.txt").read_text() == "1:cat\n3:dog\n"
  assert info["num_classes"] == 4  # max id + 1, gap kept
  src = info["source"]
  assert src["kind"] == "folder" and src["checksum_of"] == "listing" and len(src["sha256"]) == 64
  assert src["skipped_annotations"] == 1
  assert src["splits"]["train"]["original_name"] == "train2017"
  assert src["splits"]["validation"]["original_name"] == "train2017"
  assert src["splits"]["test"]["original_name"] == "val2017"
  assert [src["splits"][s]["carved"] for s in ("train", "validation", "test")] == [
      True, True, False]
  assert src["splits"]["train"]["skipped_annotations"] == 1  # image 7's zero-width box
  assert src["splits"]["validation"]["num_annotations"] == 0
  # Only a whole original file is a split's ground truth; a carved one's is built from records.
  assert src["validation_annotations"] is None
  assert src["test_annotations"] == str(root / "annotations" / "instances_val2017.json")
  assert src["seed"] == 0
  on_disk = json.loads((out / "dataset_info.json").read_text())
  assert on_disk["splits"] == info["splits"] and on_disk["source"] == src


def test_model_garden_decoder_reads_coco_records(run_convert, layout):
  from official.vision.dataloaders import tf_example_decoder  # pylint: disable=g-import-not-at-top
  root, truth = layout
  _, _, out = run_convert("coco", source=root, num_shards=1)
  decoder = tf_example_decoder.TfExampleDecoder()
  seen = {}
  for split in ("train", "validation", "test"):
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
  # Canonical order: by image id; validation carved from train2017, val2017 is test.
  assert seen == {"train": [7, 42], "validation": [100], "test": [5, 9]}
  train = read_examples(out / "train-*.tfrecord")
  assert train[0]["image/encoded"][0] == truth["train_files"]["b.jpg"]  # original JPEG bytes
  assert [r["image/format"][0] for r in train] == [b"jpeg", b"png"]
  assert [r["image/filename"][0] for r in train] == [b"b.jpg", b"a.png"]


def test_single_json_file_is_the_train_split(run_convert, layout, tmp_path):
  root, _ = layout
  # Beside its folder (annotations/ next to train2017/); validation and test carved from it.
  info, _, out = run_convert("coco", output_dir=tmp_path / "one",
                             source=root / "annotations" / "instances_train2017.json")
  assert {s: info["splits"][s]["num_records"] for s in info["splits"]} == {
      "train": 1, "validation": 1, "test": 1}
  assert info["source"]["kind"] == "file" and info["source"]["validation_annotations"] is None
  assert info["source"]["test_annotations"] is None
  assert (out / "labels.txt").read_text() == "1:cat\n3:dog\n"
  # Images in the JSON's own folder, validation from --validation_source.
  flat = tmp_path / "flat"
  flat.mkdir()
  for p in (root / "train2017").iterdir():
    (flat / p.name).write_bytes(p.read_bytes())
  (flat / "mine.json").write_bytes((root / "annotations/instances_train2017.json").read_bytes())
  val = root / "annotations" / "instances_val2017.json"
  info, _, _ = run_convert("coco", output_dir=tmp_path / "two", source=flat / "mine.json",
                           validation_source=val)
  # Validation given: only test is carved (1 of 3 train images).
  assert [info["splits"][s]["num_records"] for s in ("train", "validation", "test")] == [2, 2, 1]
  assert info["source"]["validation_annotations"] == str(val)
  assert info["source"]["test_annotations"] is None
  assert info["splits"]["validation"]["origin"] == f"--validation_source {val}"
  assert info["splits"]["test"]["origin"] == (
      "carved from the mine images (mine.json): random by image id, seed 0")
  info, _, _ = run_convert("coco", output_dir=tmp_path / "three", source=flat / "mine.json",
                           test_source=val)
  assert [info["splits"][s]["num_records"] for s in ("train", "validation", "test")] == [2, 1, 2]
  assert info["splits"]["train"]["num_objects"] == 3  # the carved image 100 has no objects
  assert info["source"]["test_annotations"] == str(val) and info["source"]["seed"] == 0
  assert info["splits"]["test"]["origin"] == f"--test_source {val}"


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
  assert info["splits"]["train"]["num_records"] == 1
  assert [s["item"] for s in info["splits"]["train"]["skipped_corrupt"]] == [str(a_png)]
  assert info["splits"]["test"]["skipped_corrupt"] == [
      {"item": str(root / "val2017" / "v9.png"), "reason": "missing file"}]
  assert info["source"]["splits"]["test"]["missing_files"] == 1
  ids = [r["image/source_id"][0] for r in read_examples(out / "train-*.tfrecord")]
  assert ids == [b"7"]


def _labelling_tool_export(tmp_path: Path) -> tuple[Path, Path, dict]:
  """What labelling tools export: one annotation JSON and, elsewhere, a folder of images."""
  images = tmp_path / "export" / "images"
  images.mkdir(parents=True)
  # id -> (height, width); 10% held out twice: validation image 3, test image 1 (seed 0)
  sizes = {1: (20, 30), 2: (16, 24), 3: (12, 12), 4: (10, 14)}
  for image_id, (h, w) in sizes.items():
    (images / f"frame_{image_id}.png").write_bytes(_png(_pixels(h, w, image_id)))
  doc = {"categories": CATEGORIES,
         "images": [{"id": i, "file_name": f"frame_{i}.png", "height": h, "width": w}
                    for i, (h, w) in sizes.items()],
         "annotations": [_ann(1, 1, 3, [3.5, 2, 12, 10], 120.0),
                         _ann(2, 1, 1, [0, 0, 30, 20], 600.0),
                         _ann(3, 2, 1, [6, 4, 12, 8], 96.0),
                         _ann(4, 3, 3, [1, 2, 5, 6], 30.0),
                         _ann(5, 4, 1, [2, 2, 4, 4], 16.0)]}
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
  assert {s: info["splits"][s]["num_records"] for s in info["splits"]} == {
      "train": 2, "validation": 1, "test": 1}
  ids = {s: [int(r["image/source_id"][0]) for r in read_examples(out / f"{s}-*.tfrecord")]
         for s in info["splits"]}
  assert ids == {"train": [2, 4], "validation": [3], "test": [1]}
  records = {int(r["image/source_id"][0]): r for r in read_examples(out / "*.tfrecord")}
  assert sorted(records) == [1, 2, 3, 4]  # every image in one split, with its own annotations
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
  assert err == (f"Error: none of the 4 images listed in {annotations} is in {elsewhere} (the"
                 " first: frame_1.png); check --image_dir\n")
  code, _, err = cli("convert-data", "coco", "--source", annotations, "--object_annotations_file",
                     annotations, "--output_dir", tmp_path / "out")
  assert code == 1 and "give the annotation JSON once" in err
  assert not (tmp_path / "out").exists()


def test_image_dir_does_not_apply_to_the_coco_folder_layout(run_convert, layout, tmp_path):
  root, _ = layout
  with pytest.raises(NascliError, match="--image_dir applies to one annotation JSON"):
    run_convert("coco", output_dir=tmp_path / "out", source=root, image_dir=root / "train2017")


def _many(tmp_path: Path, n: int = 20, name: str = "many") -> tuple[Path, dict]:
  """One instances JSON of `n` distinct 8x8 PNGs, image id i with one box of class 1 or 3."""
  images = tmp_path / name
  images.mkdir()
  doc = {"categories": CATEGORIES, "images": [], "annotations": []}
  for i in range(1, n + 1):
    (images / f"{i}.png").write_bytes(_png(_pixels(8, 8, 1000 + i)))
    doc["images"].append({"id": i, "file_name": f"{i}.png", "height": 8, "width": 8})
    doc["annotations"].append(_ann(i, i, 1 if i % 2 else 3, [0, 0, 1 + i % 7, 2], 2.0))
  path = tmp_path / f"{name}.json"
  path.write_text(json.dumps(doc))
  return path, doc


def _decoded_by_split(out: Path, splits=("train", "validation", "test")) -> dict:
  """{split: {image id: (sha256 of the decoded pixels, class ids, xmax)}} read back from shards."""
  import hashlib  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  seen = {}
  for split in splits:
    seen[split] = {}
    for r in read_examples(out / f"{split}-*.tfrecord"):
      pixels = tf.io.decode_image(r["image/encoded"][0]).numpy()
      seen[split][int(r["image/source_id"][0])] = (
          hashlib.sha256(pixels.tobytes()).hexdigest(), r["image/object/class/label"],
          r["image/object/bbox/xmax"])
  return seen


def test_carved_splits_are_disjoint_whole_and_carry_their_annotations(run_convert, tmp_path):
  import hashlib  # pylint: disable=g-import-not-at-top
  path, doc = _many(tmp_path)
  info, _, out = run_convert("coco", output_dir=tmp_path / "out", source=path, seed=4)
  sizes = {s: info["splits"][s]["num_records"] for s in info["splits"]}
  assert sizes == {"train": 16, "validation": 2, "test": 2}  # 10% of 20 each, by default
  seen = _decoded_by_split(out)
  hashes = {s: {h for h, _, _ in v.values()} for s, v in seen.items()}
  assert not (hashes["train"] & hashes["validation"] or hashes["train"] & hashes["test"]
              or hashes["validation"] & hashes["test"])
  source = {hashlib.sha256(_pixels(8, 8, 1000 + i).tobytes()).hexdigest() for i in range(1, 21)}
  assert hashes["train"] | hashes["validation"] | hashes["test"] == source  # nothing lost
  for split, images in seen.items():
    assert sorted(images) == [i for i in range(1, 21) if i in images]  # image-id order kept
    for image_id, (_, classes, xmax) in images.items():
      ann = doc["annotations"][image_id - 1]
      assert classes == [ann["category_id"]], (split, image_id)
      np.testing.assert_allclose(xmax, [ann["bbox"][2] / 8])
  # Origins, seed and sizes are recorded; a carved split names no annotation file of its own.
  for split in ("validation", "test"):
    assert info["splits"][split]["origin"] == (
        "carved from the many images (many.json): random by image id, seed 4")
    assert info["source"][f"{split}_annotations"] is None
    assert info["source"]["splits"][split]["num_annotations"] == 2
  assert info["source"]["seed"] == 4 and info["settings"]["seed"] == 4
  # Another seed draws other images; the validation images stay when test comes from a file.
  other, _, out_other = run_convert("coco", output_dir=tmp_path / "seed5", source=path, seed=5)
  assert _decoded_by_split(out_other)["validation"].keys() != seen["validation"].keys()
  test_file, _ = _many(tmp_path, n=3, name="extra")
  given, _, out_given = run_convert("coco", output_dir=tmp_path / "given", source=path, seed=4,
                                    test_source=test_file)
  assert [given["splits"][s]["num_records"] for s in ("train", "validation", "test")] == [18, 2, 3]
  assert _decoded_by_split(out_given, ["validation"])["validation"] == seen["validation"]
  assert other["fingerprint"] != info["fingerprint"] != given["fingerprint"]


def test_split_flags_size_the_carved_splits(run_convert, tmp_path):
  path, _ = _many(tmp_path)
  info, _, _ = run_convert("coco", output_dir=tmp_path / "a", source=path, validation_size=5,
                           test_fraction=0.25)
  assert [info["splits"][s]["num_records"] for s in ("train", "validation", "test")] == [10, 5, 5]
  assert info["settings"]["validation_size"] == 5 and info["settings"]["test_fraction"] == 0.25
  info, _, _ = run_convert("coco", output_dir=tmp_path / "b", source=path, test_size=3,
                           validation_fraction=0.3)
  assert [info["splits"][s]["num_records"] for s in ("train", "validation", "test")] == [11, 6, 3]
  for bad, match in (
      (dict(test_size=20), r"^--test_size 20 must be between 1 and 19 for 20 images$"),
      (dict(validation_size=10, test_size=10),
       r"^holding out 10 validation \+ 10 test of 20 images leaves none to train on"),
      (dict(test_fraction=1.5), r"^--test_fraction 1.5 must be between 0 and 1$"),
      (dict(test_source=path, test_size=2),
       r"^--test_source gives the test split; --test_size sizes only a test split carved"),
      (dict(validation_source=path, validation_fraction=0.2),
       r"^--validation_source gives the validation split; --validation_fraction sizes only"),
      (dict(validation_source=path, test_source=path, seed=3),
       r"^--seed applies only to a carved split"),
      (dict(test_source=path), r"^.*many.json and .*many.json both list the image .*1.png;"
       " the splits must not share images$")):
    with pytest.raises(NascliError, match=match) as e:
      run_convert("coco", output_dir=tmp_path / "bad", source=path, **bad)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "bad" / "dataset_info.json").exists()


def test_split_flags_of_the_folder_layout(run_convert, cli, layout, tmp_path):
  root, _ = layout
  val = root / "annotations" / "instances_val2017.json"
  for args, expected in (
      (["--test_source", val], "--test_source applies only when --source is one instances JSON"),
      (["--validation_source", val], "--validation_source applies only when --source is one"),
      (["--test_size", "1"], f"--test_size applies only to a carved test split; the val* split"
       f" of {root} is the test set"),
      (["--validation_size", "3"], "--validation_size 3 must be between 1 and 2 for 3 images")):
    code, out, err = cli("convert-data", "coco", "--source", root, *args, "--output_dir",
                         tmp_path / "o")
    assert (code, out) == (1, ""), err
    assert err.startswith("Error: ") and expected in err and err.count("\n") == 1, err
  assert not (tmp_path / "o" / "dataset_info.json").exists()
  # Without val*, test is carved from train2017 too, and --test_size applies.
  val.unlink()
  info, _, _ = run_convert("coco", output_dir=tmp_path / "carved", source=root)
  assert [info["splits"][s]["num_records"] for s in ("train", "validation", "test")] == [1, 1, 1]
  assert info["splits"]["test"]["origin"] == (
      "carved from the train2017 images (instances_train2017.json): random by image id, seed 0")
  with pytest.raises(NascliError, match=r"^--test_size 3 must be between 1 and 2 for 3 images$"):
    run_convert("coco", output_dir=tmp_path / "bad", source=root, test_size=3)
