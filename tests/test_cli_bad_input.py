"""Every bad input through the real command line: exit 1, one line naming the culprit, and no
output that looks complete."""

import io
import tarfile

import cv2
import numpy as np
import pytest


def _png(path, value=128, size=8):
  path.parent.mkdir(parents=True, exist_ok=True)
  cv2.imwrite(str(path), np.full((size, size, 3), value, np.uint8))


def _folder(root, classes=("cat", "dog"), per_class=4):
  for c in classes:
    for i in range(per_class):
      _png(root / c / f"{i}.png", value=20 * i)
  return root


def _corrupt_image(tmp_path):
  root = _folder(tmp_path / "src")
  good = cv2.imencode(".jpg", np.full((32, 32, 3), 50, np.uint8))[1].tobytes()
  (root / "dog" / "broken.jpg").write_bytes(good[: len(good) // 2])
  return ["imagefolder", "--source", root], "dog/broken.jpg"


def _empty_class(tmp_path):
  root = _folder(tmp_path / "src")
  (root / "bird").mkdir()
  return ["imagefolder", "--source", root], str(root / "bird")


def _label_map_gap(tmp_path):
  root = _folder(tmp_path / "src")
  labels = tmp_path / "labels.txt"
  labels.write_text("0:cat\n2:dog\n")
  return ["imagefolder", "--source", root, "--label_map", labels], f"{labels}: ids must be 0..1"


def _truncated_archive(tmp_path):
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    data = np.random.default_rng(0).bytes(200_000)
    info = tarfile.TarInfo("cifar-10-batches-py/data_batch_1")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
  archive = tmp_path / "cifar-10-python.tar.gz"
  archive.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
  return ["cifar10", "--source", archive], f"truncated or corrupt archive {archive}"


def _unsafe_archive(tmp_path):
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    info = tarfile.TarInfo("../evil.jpg")
    info.size = 3
    tar.addfile(info, io.BytesIO(b"bad"))
  archive = tmp_path / "flower_photos.tgz"
  archive.write_bytes(buf.getvalue())
  return ["flowers", "--source", archive], "../evil.jpg"


def _missing_source(tmp_path):
  return ["imagefolder", "--source", tmp_path / "nope"], str(tmp_path / "nope")


def _malformed_coco(tmp_path):
  ann = tmp_path / "coco" / "annotations" / "instances_train2017.json"
  ann.parent.mkdir(parents=True)
  (tmp_path / "coco" / "train2017").mkdir()
  ann.write_text('{"images": [')
  return ["coco", "--source", tmp_path / "coco"], str(ann)


def _unknown_name(tmp_path):
  del tmp_path
  return ["cifar100"], "unknown data set 'cifar100'"


@pytest.mark.parametrize("make", [_corrupt_image, _empty_class, _label_map_gap, _truncated_archive,
                                  _unsafe_archive, _missing_source, _malformed_coco, _unknown_name])
def test_bad_input_one_line_exit_1_nothing_complete(make, cli, tmp_path):
  args, culprit = make(tmp_path)
  out_dir = tmp_path / "out"
  code, stdout, stderr = cli("convert-data", *args, "--output_dir", out_dir, "--processes", "1")
  lines = stderr.strip().splitlines()
  assert code == 1, stderr
  assert len(lines) == 1 and lines[0].startswith("Error: "), stderr
  assert culprit in lines[0]
  assert stdout == ""
  if out_dir.exists():
    names = [p.name for p in out_dir.iterdir()]
    assert "dataset_info.json" not in names
    assert not [n for n in names if n.endswith(".tfrecord")], names


def test_skip_corrupt_keeps_shards_balanced(cli, tmp_path):
  args, culprit = _corrupt_image(tmp_path)
  code, stdout, stderr = cli("convert-data", *args, "--skip_corrupt", "--validation_size", "3",
                             "--test_size", "2",
                             "--num_shards", "2", "--output_dir", tmp_path / "out", "--json")
  assert code == 0, stderr
  import json  # pylint: disable=g-import-not-at-top
  result = json.loads(stdout)
  # 9 images: 2 test, 3 validation (the broken one among them, seed 0), 4 train.
  assert result["splits"]["train"]["shard_records"] == [2, 2]
  assert result["splits"]["validation"]["shard_records"] == [1, 1]
  assert result["splits"]["test"]["shard_records"] == [1, 1]
  assert result["splits"]["validation"]["skipped_corrupt"] == 1
  assert sum(result["splits"][s]["skipped_corrupt"] for s in ("train", "validation", "test")) == 1
  assert culprit in stderr
