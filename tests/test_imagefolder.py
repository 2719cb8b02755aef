"""Tests for the `imagefolder` source: one sub-folder of images per class."""

import io
import json
from pathlib import Path

from conftest import decode_image, read_examples
import numpy as np
from PIL import Image
import pytest

from nascli.data import splits
from nascli.errors import InputError, NascliError

INFO = "dataset_info.json"


def _pixels(seed: int, height: int, width: int) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _save(path: Path, pixels: np.ndarray, fmt: str) -> bytes:
  path.parent.mkdir(parents=True, exist_ok=True)
  buf = io.BytesIO()
  Image.fromarray(pixels).save(buf, fmt)
  path.write_bytes(buf.getvalue())
  return buf.getvalue()


def _make_folder(root: Path) -> dict[str, dict]:
  """A class-per-folder tree with PNG, JPEG and BMP files, plus files that must be ignored.

  Returns what each stored record must hold, by relative path.
  """
  expected = {}

  def add(rel: str, label: int, fmt: str, seed: int, size=(6, 8)):
    pixels = _pixels(seed, *size)
    data = _save(root / rel, pixels, fmt)
    expected[rel] = {"label": label, "fmt": fmt, "pixels": pixels, "bytes": data}

  add("cat/a.png", 0, "PNG", 1, (6, 8))
  add("cat/sub/deeper/b.png", 0, "PNG", 2, (5, 7))  # found recursively
  add("cat/c.jpg", 0, "JPEG", 3, (16, 16))
  add("dog/d.bmp", 1, "BMP", 4, (4, 9))
  add("dog/e.PNG", 1, "PNG", 5, (3, 3))  # extension matched case-insensitively
  add("dog/f.JPEG", 1, "JPEG", 6, (8, 8))
  add("emu/g.png", 2, "PNG", 7, (9, 2))
  add("emu/h.png", 2, "PNG", 8, (2, 2))
  # Ignored: non-image files, hidden files and folders, loose files next to the classes.
  (root / "cat" / "notes.txt").write_text("not an image")
  (root / "README.md").write_text("about")
  (root / "cat" / ".hidden.png").write_bytes(b"garbage, never read")
  _save(root / "dog" / ".thumbs" / "t.png", _pixels(9, 2, 2), "PNG")
  _save(root / ".git" / "x.png", _pixels(10, 2, 2), "PNG")  # a hidden folder is no class
  return expected


def _by_id(examples: list[dict]) -> dict[str, dict]:
  return {ex["image/source_id"][0].decode(): ex for ex in examples}


def _assert_matches(example: dict, want: dict) -> None:
  encoded = example["image/encoded"][0]
  fmt = example["image/format"][0].decode()
  assert example["image/class/label"] == [want["label"]]
  h, w = want["pixels"].shape[:2]
  assert (example["image/height"], example["image/width"]) == ([h], [w])
  if want["fmt"] == "JPEG":
    assert fmt == "jpeg" and encoded == want["bytes"]  # the file's bytes, untouched
  elif want["fmt"] == "PNG":
    assert fmt == "png" and encoded == want["bytes"]
    np.testing.assert_array_equal(decode_image(encoded), want["pixels"])
  else:  # BMP: re-encoded to lossless PNG
    assert fmt == "png" and encoded[:8] == b"\x89PNG\r\n\x1a\n"
    np.testing.assert_array_equal(decode_image(encoded), want["pixels"])


def _assert_balanced(info: dict, out: Path) -> None:
  for split, entry in info["splits"].items():
    counts = [len(read_examples(out / s["file"])) for s in entry["shards"]]
    assert counts == [s["num_records"] for s in entry["shards"]]
    assert max(counts) - min(counts) <= 1
    assert sum(counts) == entry["num_records"], split


def test_folder_with_seeded_split(tmp_path, run_convert):
  root = tmp_path / "data"
  expected = _make_folder(root)
  info, _, out = run_convert("imagefolder", source=root, validation_fraction=0.25, seed=3,
                             processes=2, num_shards=2)
  assert (out / "labels.txt").read_text() == "0:cat\n1:dog\n2:emu\n"
  assert info["classes"] == [{"id": 0, "name": "cat"}, {"id": 1, "name": "dog"},
                             {"id": 2, "name": "emu"}]
  assert info["num_classes"] == 3
  train = _by_id(read_examples(out / "train-*.tfrecord"))
  validation = _by_id(read_examples(out / "validation-*.tfrecord"))
  # The seeded split of the whole list in relative-path order.
  rels = sorted(expected)
  train_pos, val_pos = splits.seeded_split(len(rels), 2, 3)
  assert set(validation) == {rels[i] for i in val_pos}
  assert set(train) == {rels[i] for i in train_pos}
  for rel, example in {**train, **validation}.items():
    _assert_matches(example, expected[rel])
  assert info["splits"]["train"]["num_records"] == 6
  assert info["splits"]["validation"]["num_records"] == 2
  _assert_balanced(info, out)
  source = info["source"]
  assert source["kind"] == "folder" and source["path"] == str(root)
  assert source["checksum_of"] == "listing" and len(source["sha256"]) == 64
  assert source["num_images"] == 8
  assert source["ignored_files"] == 2  # README.md and cat/notes.txt; hidden files not counted
  assert set(source["ignored_examples"]) == {"README.md", "cat/notes.txt"}
  assert info["settings"]["seed"] == 3 and info["settings"]["validation_fraction"] == 0.25
  assert not (out / ".nascli-work").exists()


def test_split_is_deterministic_and_seeded(tmp_path, run_convert):
  root = tmp_path / "data"
  _make_folder(root)
  info_a, _, _ = run_convert("imagefolder", tmp_path / "a", source=root, validation_size=3)
  info_b, _, _ = run_convert("imagefolder", tmp_path / "b", source=root, validation_size=3)
  info_c, _, out_c = run_convert("imagefolder", tmp_path / "c", source=root, validation_size=3,
                                 seed=1)
  shas = lambda info: [s["sha256"] for e in info["splits"].values() for s in e["shards"]]
  assert shas(info_a) == shas(info_b)
  assert shas(info_a) != shas(info_c)
  assert info_c["splits"]["validation"]["num_records"] == 3
  assert len(read_examples(out_c / "validation-*.tfrecord")) == 3


def test_validation_source(tmp_path, run_convert):
  root = tmp_path / "data"
  expected = _make_folder(root)
  val = tmp_path / "val"
  val_expected = {}
  for rel, label, seed in (("cat/v1.png", 0, 20), ("emu/v2.png", 2, 21)):  # no dog: fine
    pixels = _pixels(seed, 4, 5)
    val_expected[rel] = {"label": label, "fmt": "PNG", "pixels": pixels,
                         "bytes": _save(val / rel, pixels, "PNG")}
  info, _, out = run_convert("imagefolder", source=root, validation_source=val)
  train = _by_id(read_examples(out / "train-*.tfrecord"))
  validation = _by_id(read_examples(out / "validation-*.tfrecord"))
  assert set(train) == set(expected)
  assert set(validation) == set(val_expected)
  for rel, example in train.items():
    _assert_matches(example, expected[rel])
  for rel, example in validation.items():
    _assert_matches(example, val_expected[rel])
  assert info["source"]["validation_source"]["path"] == str(val)
  assert info["source"]["validation_source"]["num_images"] == 2
  assert info["source"]["validation_split"] == "validation_source"


def test_validation_source_with_unknown_class(tmp_path, run_convert):
  root = tmp_path / "data"
  _make_folder(root)
  _save(tmp_path / "val" / "cat" / "v.png", _pixels(1, 2, 2), "PNG")
  _save(tmp_path / "val" / "zebra" / "z.png", _pixels(2, 2, 2), "PNG")
  out = tmp_path / "out"
  with pytest.raises(InputError, match="zebra") as e:
    run_convert("imagefolder", out, source=root, validation_source=tmp_path / "val")
  assert "\n" not in str(e.value)
  assert not (out / INFO).exists()


def test_validation_source_and_fraction_conflict(tmp_path, run_convert):
  root = tmp_path / "data"
  _make_folder(root)
  _save(tmp_path / "val" / "cat" / "v.png", _pixels(1, 2, 2), "PNG")
  with pytest.raises(NascliError, match="--validation_source"):
    run_convert("imagefolder", source=root, validation_source=tmp_path / "val",
                validation_fraction=0.5)


def test_label_map_fixes_ids(tmp_path, run_convert):
  root = tmp_path / "data"
  expected = _make_folder(root)
  label_map = tmp_path / "labels.txt"
  label_map.write_text("0:emu\n1:cat\n2:fox\n3:dog\n")  # fox has no folder: allowed
  info, _, out = run_convert("imagefolder", source=root, label_map=label_map,
                             validation_size=2)
  assert (out / "labels.txt").read_text() == "0:emu\n1:cat\n2:fox\n3:dog\n"
  assert info["num_classes"] == 4
  new_id = {0: 1, 1: 3, 2: 0}  # old (sorted-name) id -> id in the map
  examples = _by_id(read_examples(out / "*.tfrecord"))
  assert set(examples) == set(expected)
  for rel, example in examples.items():
    assert example["image/class/label"] == [new_id[expected[rel]["label"]]], rel
  assert info["source"]["label_map"]["path"] == str(label_map)
  assert info["settings"]["label_map_sha256"] == info["source"]["label_map"]["sha256"]


@pytest.mark.parametrize("text,culprit", [
    ("0:cat\n1:dog\n3:emu\n", "id 2 is missing"),
    ("1:cat\n2:dog\n3:emu\n", "id 0 is missing"),
    ("0:cat\n1 dog\n2:emu\n", "line 2"),
    ("0:cat\nx:dog\n2:emu\n", "line 2"),
    ("0:cat\n1:\n2:emu\n", "line 2"),
    ("0:cat\n1:dog\n1:emu\n", "duplicate id 1"),
    ("0:cat\n1:dog\n2:cat\n", "duplicate name 'cat'"),
    ("0:cat\n1:dog\n", "'emu'"),  # a class folder absent from the map
    ("\n\n", "no 'id:name' lines"),
])
def test_bad_label_map(tmp_path, run_convert, text, culprit):
  root = tmp_path / "data"
  _make_folder(root)
  label_map = tmp_path / "my_labels.txt"
  label_map.write_text(text)
  out = tmp_path / "out"
  with pytest.raises(InputError) as e:
    run_convert("imagefolder", out, source=root, label_map=label_map)
  message = str(e.value)
  assert str(label_map) in message and culprit in message and "\n" not in message
  assert not (out / INFO).exists()


def test_empty_class_folder(tmp_path, run_convert):
  root = tmp_path / "data"
  _make_folder(root)
  (root / "fox").mkdir()
  (root / "fox" / "readme.txt").write_text("no images here")
  out = tmp_path / "out"
  with pytest.raises(InputError) as e:
    run_convert("imagefolder", out, source=root)
  assert str(root / "fox") in str(e.value) and "no image files" in str(e.value)
  assert not (out / INFO).exists()


def test_bad_source_folders(tmp_path, run_convert):
  out = tmp_path / "out"
  with pytest.raises(InputError, match="--source"):
    run_convert("imagefolder", out)
  with pytest.raises(InputError, match="does not exist") as e:
    run_convert("imagefolder", out, source=tmp_path / "missing")
  assert str(tmp_path / "missing") in str(e.value)
  (tmp_path / "file.png").write_bytes(b"x")
  with pytest.raises(InputError, match="is not a folder") as e:
    run_convert("imagefolder", out, source=tmp_path / "file.png")
  assert str(tmp_path / "file.png") in str(e.value)
  (tmp_path / "flat").mkdir()
  _save(tmp_path / "flat" / "a.png", _pixels(0, 2, 2), "PNG")
  with pytest.raises(InputError, match="no class sub-folders") as e:
    run_convert("imagefolder", out, source=tmp_path / "flat")
  assert str(tmp_path / "flat") in str(e.value)
  assert not (out / INFO).exists()


def _with_truncated_jpeg(root: Path) -> str:
  expected = _make_folder(root)
  for i in range(6):  # enough items for two shards per split
    _save(root / "emu" / f"more{i}.png", _pixels(30 + i, 3, 3), "PNG")
  data = expected["dog/f.JPEG"]["bytes"]
  (root / "dog" / "broken.jpg").write_bytes(data[: len(data) // 2])
  return "dog/broken.jpg"


def test_truncated_jpeg_stops_conversion(tmp_path, run_convert):
  root = tmp_path / "data"
  broken = _with_truncated_jpeg(root)
  out = tmp_path / "out"
  with pytest.raises(InputError) as e:
    run_convert("imagefolder", out, source=root, processes=2)
  assert broken in str(e.value) and "--skip_corrupt" in str(e.value)
  assert "\n" not in str(e.value)
  assert not (out / INFO).exists()
  assert not list(out.glob("*.tfrecord"))


def test_truncated_jpeg_skipped(tmp_path, run_convert):
  root = tmp_path / "data"
  broken = _with_truncated_jpeg(root)
  info, _, out = run_convert("imagefolder", source=root, skip_corrupt=True, processes=2,
                             num_shards=2, validation_size=4)
  on_disk = json.loads((out / INFO).read_text())
  skipped = {split: entry["skipped_corrupt"] for split, entry in on_disk["splits"].items()}
  items = [s["item"] for entries in skipped.values() for s in entries]
  assert items == [broken]
  split = next(split for split, entries in skipped.items() if entries)
  assert skipped[split][0]["reason"]
  # 15 images, one skipped: 14 written, none of them the broken file.
  examples = _by_id(read_examples(out / "*.tfrecord"))
  assert len(examples) == 14 and broken not in examples
  assert info["splits"]["train"]["num_records"] + info["splits"]["validation"]["num_records"] == 14
  assert {"train": 11, "validation": 4}[split] - 1 == info["splits"][split]["num_records"]
  _assert_balanced(info, out)
