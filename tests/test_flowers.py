"""Tests for the `flowers` source: TensorFlow's flower_photos.tgz, split by FastNN's rule."""

import hashlib
import io
from pathlib import Path
import random

from conftest import decode_image, read_examples
from convert_helpers import make_tgz
import numpy as np
from PIL import Image
import pytest

from nascli.data import splits
from nascli.data.datasets import imagefolder
from nascli.data.source import ConvertOptions
from nascli.errors import InputError, NascliError, UnsafeInputError

CLASSES = ("daisy", "dandelion", "roses", "sunflowers", "tulips")
PER_CLASS = 3
INFO = "dataset_info.json"
SPLITS = ("train", "validation", "test")


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


def _write_tree(root: Path, files: dict[str, bytes]) -> None:
  for name, data in files.items():
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_bytes(data)


def _fastnn_order(rels: list[str], seed: int) -> list[str]:
  """FastNN's (TF-slim's download_and_convert_flowers) order: sorted, then shuffled."""
  order = sorted(rels)
  random.Random(seed).shuffle(order)
  return order


def _shard_shas(info: dict) -> list[str]:
  return [s["sha256"] for e in info["splits"].values() for s in e["shards"]]


def test_archive(tmp_path, run_convert):
  files = _members()
  tgz = make_tgz(tmp_path / "flower_photos.tgz", files)
  info, _, out = run_convert("flowers", source=tgz, validation_size=4, test_size=3, processes=2,
                             num_shards=2)
  assert (out / "labels.txt").read_text() == "".join(f"{i}:{n}\n" for i, n in enumerate(CLASSES))
  assert [info["splits"][s]["num_records"] for s in SPLITS] == [8, 4, 3]
  images = {rel.removeprefix("flower_photos/"): data for rel, data in files.items()
            if rel.endswith(".jpg")}
  by_split = {s: read_examples(out / f"{s}-*.tfrecord") for s in SPLITS}
  ids = {s: [ex["image/source_id"][0].decode() for ex in examples]
         for s, examples in by_split.items()}
  # FastNN's validation split unchanged; test is the next 3 of the same order; train the rest.
  order = _fastnn_order(list(images), 0)
  assert set(ids["validation"]) == set(order[:4])
  assert set(ids["test"]) == set(order[4:7])
  assert set(ids["train"]) == set(order[7:])
  # Disjoint (by decoded pixels too) and nothing lost.
  pixels = {s: {hashlib.sha256(decode_image(ex["image/encoded"][0]).tobytes()).hexdigest()
                for ex in examples} for s, examples in by_split.items()}
  for a, b in (("train", "validation"), ("train", "test"), ("validation", "test")):
    assert not pixels[a] & pixels[b] and not set(ids[a]) & set(ids[b]), (a, b)
  assert sorted(ids["train"] + ids["validation"] + ids["test"]) == sorted(images)
  for examples in by_split.values():
    for ex in examples:
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
  assert source["split_rule"] == imagefolder.FLOWERS_RULE and "FastNN" in source["split_rule"]
  assert source["validation_split"] == source["test_split"] == "carved from flower_photos"
  assert source["validation_size"] == 4 and source["test_size"] == 3 and source["seed"] == 0
  assert source["split_sizes"] == {"train": 8, "validation": 4, "test": 3}
  shuffled = ("all image paths in relative-path order shuffled with"
              " random.Random(seed).shuffle, then")
  assert info["splits"]["validation"]["origin"] == (
      f"carved from flower_photos: {shuffled} the first 4 (FastNN's validation split)"
      " (not stratified), seed 0")
  assert info["splits"]["test"]["origin"] == (
      f"carved from flower_photos: {shuffled} the next 3 after the 4 validation images"
      " (not stratified), seed 0")
  assert info["splits"]["train"]["origin"] == (
      "flower_photos: the images after the first 7 of FastNN's shuffled order (FLOWERS_RULE)")
  assert info["splits"]["test"]["role"] == splits.ROLES["test"]
  assert info["settings"]["test_size"] == 3 and info["settings"]["validation_size"] == 4
  assert not (out / ".nascli-work").exists()


def _fake_source(n: int, **options) -> tuple[imagefolder.FlowersSource, list]:
  """A FlowersSource over n made-up items (no files): enough to run its split rule."""
  source = imagefolder.FlowersSource(ConvertOptions(**options))
  items = [imagefolder._Item(path="", rel=f"{CLASSES[i % 5]}/{i:04d}.jpg", label=i % 5, size=0)
           for i in range(n)]
  items.sort(key=lambda item: item.rel)
  source._train_folder = imagefolder._Folder(root=Path("flower_photos"), items=items, ignored=[])
  return source, items


@pytest.mark.parametrize("seed", [0, 7])
def test_default_sizes_are_fastnn_350_then_350(seed):
  """The real archive's 3,670 images: FastNN's 350 validation, the next 350 test, 2,970 train."""
  source, items = _fake_source(3670, seed=seed)
  parts = source._split(items, ["test", "validation"])
  order = _fastnn_order([item.rel for item in items], seed)
  rels = {part: [item.rel for item in parts[part]] for part in SPLITS}
  assert rels["validation"] == sorted(order[:350])  # exactly FastNN's validation split
  assert rels["test"] == sorted(order[350:700])
  assert rels["train"] == sorted(order[700:])
  source._splits = parts
  assert source.split_sizes() == {"train": 2970, "validation": 350, "test": 350}


@pytest.mark.parametrize("options,sizes", [
    ({"test_fraction": 0.2}, (350, 734)),  # round(3670 * 0.2)
    ({"test_size": 100, "validation_fraction": 0.05}, (184, 100)),  # round(183.5) = 184
])
def test_test_options_change_sizes(options, sizes):
  source, items = _fake_source(3670, **options)
  parts = source._split(items, ["test", "validation"])
  assert (len(parts["validation"]), len(parts["test"])) == sizes
  order = _fastnn_order([item.rel for item in items], 0)
  v, t = sizes
  assert [item.rel for item in parts["test"]] == sorted(order[v:v + t])


def test_folder_and_parent_folder_give_same_records(tmp_path, run_convert):
  files = _members()
  tgz = make_tgz(tmp_path / "flower_photos.tgz", files)
  _write_tree(tmp_path / "extracted", files)
  info_tgz, _, _ = run_convert("flowers", tmp_path / "a", source=tgz, validation_size=5,
                               test_size=2, seed=7)
  info_dir, _, _ = run_convert("flowers", tmp_path / "b",
                               source=tmp_path / "extracted" / "flower_photos",
                               validation_size=5, test_size=2, seed=7)
  info_parent, _, _ = run_convert("flowers", tmp_path / "c", source=tmp_path / "extracted",
                                  validation_size=5, test_size=2, seed=7)
  assert _shard_shas(info_tgz) == _shard_shas(info_dir) == _shard_shas(info_parent)
  assert info_dir["source"]["kind"] == "folder"
  assert info_dir["source"]["checksum_of"] == "listing"
  assert info_dir["source"]["sha256"] == info_parent["source"]["sha256"]


def test_fractions(tmp_path, run_convert):
  tgz = make_tgz(tmp_path / "flower_photos.tgz", _members())
  info, _, _ = run_convert("flowers", source=tgz, validation_fraction=0.2, test_fraction=0.4)
  assert [info["splits"][s]["num_records"] for s in SPLITS] == [6, 3, 6]
  assert info["settings"]["test_fraction"] == 0.4


@pytest.mark.parametrize("options", [{}, {"validation_size": 4}, {"test_size": 4}])
def test_default_sizes_need_enough_images(tmp_path, run_convert, options):
  tgz = make_tgz(tmp_path / "flower_photos.tgz", _members())
  out = tmp_path / "out"
  with pytest.raises(InputError) as e:
    run_convert("flowers", out, source=tgz, **options)
  message = str(e.value)
  assert "holds only 15 images" in message and "350" in message and "\n" not in message
  assert "--validation_size / --test_size" in message
  assert not (out / INFO).exists()


@pytest.mark.parametrize("options,culprit", [
    ({"validation_size": 4, "test_size": 15}, "--test_size 15 must be between 1 and 14"),
    ({"validation_size": 4, "test_fraction": 1.0}, "--test_fraction 1.0 must be between 0 and 1"),
    ({"validation_size": 8, "test_size": 7}, "too few for 8 validation + 7 test images"),
    ({"validation_size": 4, "test_size": 2, "test_fraction": 0.1},
     "give --test_size or --test_fraction, not both"),
])
def test_bad_test_sizes(tmp_path, run_convert, options, culprit):
  tgz = make_tgz(tmp_path / "flower_photos.tgz", _members())
  out = tmp_path / "out"
  with pytest.raises(NascliError) as e:
    run_convert("flowers", out, source=tgz, **options)
  assert culprit in str(e.value) and "\n" not in str(e.value)
  assert not (out / INFO).exists()


def test_download_records_checksum(tmp_path, run_convert, monkeypatch):
  tgz = make_tgz(tmp_path / "flower_photos.tgz", _members())
  calls = []

  def fake_fetch(url, dest_dir, filename, **kwargs):
    calls.append((url, Path(dest_dir), filename, kwargs))
    return tgz

  monkeypatch.setattr(imagefolder.download, "fetch", fake_fetch)
  info, _, _ = run_convert("flowers", validation_size=2, test_size=2)
  assert calls == [(imagefolder.FLOWERS_URL, tmp_path / "downloads", "flower_photos.tgz",
                    {"progress": False})]  # no checksum enforced
  assert info["source"]["kind"] == "download"
  assert info["source"]["url"] == imagefolder.FLOWERS_URL
  assert info["source"]["sha256"] == hashlib.sha256(tgz.read_bytes()).hexdigest()


def test_unsafe_archive(tmp_path, run_convert):
  files = _members()
  files["../evil.jpg"] = _jpeg(99)
  tgz = make_tgz(tmp_path / "flower_photos.tgz", files)
  out = tmp_path / "out"
  with pytest.raises(UnsafeInputError, match="evil.jpg"):
    run_convert("flowers", out, source=tgz, validation_size=2)
  assert not list(tmp_path.rglob("evil.jpg"))
  assert not (out / INFO).exists() and not list(out.glob("*.tfrecord"))
  assert not list(out.rglob("*.jpg"))


def test_missing_class_folder(tmp_path, run_convert):
  files = {k: v for k, v in _members().items() if "/tulips/" not in k}
  tgz = make_tgz(tmp_path / "flower_photos.tgz", files)
  out = tmp_path / "out"
  with pytest.raises(InputError, match="'tulips'"):
    run_convert("flowers", out, source=tgz, validation_size=2)
  assert not (out / INFO).exists()


def test_missing_source(tmp_path, run_convert):
  with pytest.raises(InputError, match="nowhere.tgz"):
    run_convert("flowers", source=tmp_path / "nowhere.tgz")


@pytest.mark.parametrize("part", ["validation", "test"])
def test_no_held_out_source(tmp_path, run_convert, part):
  tgz = make_tgz(tmp_path / "flower_photos.tgz", _members())
  with pytest.raises(NascliError) as e:
    run_convert("flowers", source=tgz, validation_size=2, test_size=2,
                **{f"{part}_source": tmp_path})
  assert str(e.value) == (f"flowers takes no --{part}_source: its {part} split is drawn from the"
                          " archive")
  # The command refuses the flag before anything is read (it is not in `reads`).
  assert f"{part}_source" not in imagefolder.FlowersSource.reads
  assert {f"{part}_size", f"{part}_fraction"} <= imagefolder.FlowersSource.reads
