"""Tests for the `flowers` source: TensorFlow's flower_photos.tgz, split by FastNN's rule."""

import hashlib
import io
from pathlib import Path
import random
import tarfile

from conftest import read_examples
import numpy as np
from PIL import Image
import pytest

from nascli.data.datasets import imagefolder
from nascli.errors import InputError, NascliError, UnsafeInputError

CLASSES = ("daisy", "dandelion", "roses", "sunflowers", "tulips")
PER_CLASS = 3
INFO = "dataset_info.json"


def _jpeg(seed: int) -> bytes:
  pixels = np.random.default_rng(seed).integers(0, 256, (8 + seed % 3, 10, 3), dtype=np.uint8)
  buf = io.BytesIO()
  Image.fromarray(pixels).save(buf, "JPEG", quality=90)
  return buf.getvalue()


def _members() -> dict[str, bytes]:
  """The archive's files: a few JPEGs per class and the LICENSE.txt the real one has."""
  files = {"flower_photos/LICENSE.txt": b"All images in this archive are licensed ...\n"}
  for c, name in enumerate(CLASSES):
    for i in range(PER_CLASS):
      files[f"flower_photos/{name}/{1000 * c + i}_photo.jpg"] = _jpeg(10 * c + i)
  return files


def _make_tgz(path: Path, files: dict[str, bytes]) -> Path:
  with tarfile.open(path, "w:gz") as tf:
    for name, data in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tf.addfile(info, io.BytesIO(data))
  return path


def _write_tree(root: Path, files: dict[str, bytes]) -> None:
  for name, data in files.items():
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(data)


def _fastnn_validation(rels: list[str], size: int, seed: int) -> set[str]:
  order = sorted(rels)
  random.Random(seed).shuffle(order)
  return set(order[:size])


def _shard_shas(info: dict) -> list[str]:
  return [s["sha256"] for e in info["splits"].values() for s in e["shards"]]


def test_archive(tmp_path, run_convert):
  files = _members()
  tgz = _make_tgz(tmp_path / "flower_photos.tgz", files)
  info, _, out = run_convert("flowers", source=tgz, validation_size=4, processes=2,
                             num_shards=2)
  assert (out / "labels.txt").read_text() == "".join(f"{i}:{n}\n" for i, n in enumerate(CLASSES))
  assert info["splits"]["train"]["num_records"] == 11
  assert info["splits"]["validation"]["num_records"] == 4
  images = {rel.removeprefix("flower_photos/"): data for rel, data in files.items()
            if rel.endswith(".jpg")}
  train = read_examples(out / "train-*.tfrecord")
  validation = read_examples(out / "validation-*.tfrecord")
  ids = lambda examples: {ex["image/source_id"][0].decode() for ex in examples}
  assert ids(validation) == _fastnn_validation(list(images), 4, 0)
  assert ids(train) | ids(validation) == set(images) and len(train) == 11
  for ex in train + validation:
    rel = ex["image/source_id"][0].decode()
    assert ex["image/format"] == [b"jpeg"]
    assert ex["image/encoded"][0] == images[rel]  # JPEG bytes as they are
    assert ex["image/class/label"] == [CLASSES.index(rel.split("/")[0])]
    h, w = Image.open(io.BytesIO(images[rel])).size[::-1]
    assert (ex["image/height"], ex["image/width"]) == ([h], [w])
  for entry in info["splits"].values():
    counts = [s["num_records"] for s in entry["shards"]]
    assert len(counts) == 2 and max(counts) - min(counts) <= 1
  source = info["source"]
  assert source["kind"] == "archive" and source["path"] == str(tgz)
  assert source["sha256"] == hashlib.sha256(tgz.read_bytes()).hexdigest()
  assert source["ignored_files"] == 1  # LICENSE.txt
  assert "FastNN" in source["validation_split"] and source["validation_size"] == 4
  assert not (out / ".nascli-work").exists()


def test_folder_and_parent_folder_give_same_records(tmp_path, run_convert):
  files = _members()
  tgz = _make_tgz(tmp_path / "flower_photos.tgz", files)
  _write_tree(tmp_path / "extracted", files)
  info_tgz, _, _ = run_convert("flowers", tmp_path / "a", source=tgz, validation_size=5, seed=7)
  info_dir, _, _ = run_convert("flowers", tmp_path / "b",
                               source=tmp_path / "extracted" / "flower_photos",
                               validation_size=5, seed=7)
  info_parent, _, _ = run_convert("flowers", tmp_path / "c", source=tmp_path / "extracted",
                                  validation_size=5, seed=7)
  assert _shard_shas(info_tgz) == _shard_shas(info_dir) == _shard_shas(info_parent)
  assert info_dir["source"]["kind"] == "folder"
  assert info_dir["source"]["checksum_of"] == "listing"
  assert info_dir["source"]["sha256"] == info_parent["source"]["sha256"]


def test_validation_fraction(tmp_path, run_convert):
  tgz = _make_tgz(tmp_path / "flower_photos.tgz", _members())
  info, _, _ = run_convert("flowers", source=tgz, validation_fraction=0.2)
  assert info["splits"]["validation"]["num_records"] == 3
  assert info["splits"]["train"]["num_records"] == 12


def test_default_validation_size_needs_enough_images(tmp_path, run_convert):
  tgz = _make_tgz(tmp_path / "flower_photos.tgz", _members())
  out = tmp_path / "out"
  with pytest.raises(InputError, match="--validation_size") as e:
    run_convert("flowers", out, source=tgz)
  assert "350" in str(e.value)
  assert not (out / INFO).exists()


def test_download_records_checksum(tmp_path, run_convert, monkeypatch):
  tgz = _make_tgz(tmp_path / "flower_photos.tgz", _members())
  calls = []

  def fake_fetch(url, dest_dir, filename, **kwargs):
    calls.append((url, Path(dest_dir), filename, kwargs))
    return tgz

  monkeypatch.setattr(imagefolder.download, "fetch", fake_fetch)
  info, _, _ = run_convert("flowers", validation_size=2)
  assert calls == [(imagefolder.FLOWERS_URL, tmp_path / "downloads", "flower_photos.tgz",
                    {"progress": False})]  # no checksum enforced
  assert info["source"]["kind"] == "download"
  assert info["source"]["url"] == imagefolder.FLOWERS_URL
  assert info["source"]["sha256"] == hashlib.sha256(tgz.read_bytes()).hexdigest()


def test_unsafe_archive(tmp_path, run_convert):
  files = _members()
  files["../evil.jpg"] = _jpeg(99)
  tgz = _make_tgz(tmp_path / "flower_photos.tgz", files)
  out = tmp_path / "out"
  with pytest.raises(UnsafeInputError, match="evil.jpg"):
    run_convert("flowers", out, source=tgz, validation_size=2)
  assert not list(tmp_path.rglob("evil.jpg"))
  assert not (out / INFO).exists() and not list(out.glob("*.tfrecord"))
  assert not list(out.rglob("*.jpg"))


def test_missing_class_folder(tmp_path, run_convert):
  files = {k: v for k, v in _members().items() if "/tulips/" not in k}
  tgz = _make_tgz(tmp_path / "flower_photos.tgz", files)
  out = tmp_path / "out"
  with pytest.raises(InputError, match="'tulips'"):
    run_convert("flowers", out, source=tgz, validation_size=2)
  assert not (out / INFO).exists()


def test_missing_source(tmp_path, run_convert):
  with pytest.raises(InputError, match="nowhere.tgz"):
    run_convert("flowers", source=tmp_path / "nowhere.tgz")


def test_no_validation_source(tmp_path, run_convert):
  tgz = _make_tgz(tmp_path / "flower_photos.tgz", _members())
  with pytest.raises(NascliError, match="--validation_source"):
    run_convert("flowers", source=tgz, validation_source=tmp_path)
