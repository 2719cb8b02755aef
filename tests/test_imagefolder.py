"""Tests for the `imagefolder` source: one sub-folder of images per class."""

import hashlib
import io
import json
from pathlib import Path

from conftest import decode_image, read_examples
import numpy as np
from PIL import Image
import pytest

from nascli.data import splits
from nascli.data.datasets import imagefolder
from nascli.errors import InputError, NascliError

INFO = "dataset_info.json"
SPLITS = ("train", "validation", "test")


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


def _split_examples(out: Path) -> dict[str, dict[str, dict]]:
  return {split: _by_id(read_examples(out / f"{split}-*.tfrecord")) for split in SPLITS}


def _pixel_hashes(examples: dict[str, dict]) -> set[str]:
  return {hashlib.sha256(decode_image(ex["image/encoded"][0]).tobytes()).hexdigest()
          for ex in examples.values()}


def _assert_disjoint_and_whole(by_split: dict[str, dict[str, dict]], everything: set[str]):
  """No decoded image is in two splits, and the splits together are `everything` (no loss)."""
  hashes = {split: _pixel_hashes(examples) for split, examples in by_split.items()}
  for split, examples in by_split.items():
    assert len(hashes[split]) == len(examples), split  # the fixture's images all differ
  for a, b in (("train", "validation"), ("train", "test"), ("validation", "test")):
    assert not hashes[a] & hashes[b], (a, b)
    assert not set(by_split[a]) & set(by_split[b]), (a, b)
  assert set().union(*(set(examples) for examples in by_split.values())) == everything
  assert sum(len(examples) for examples in by_split.values()) == len(everything)


CARVED = ("carved from the --source folder: stratified by class"
          " (nascli.data.splits.stratified_split), seed {}")


def test_folder_with_stratified_split(tmp_path, run_convert):
  root = tmp_path / "data"
  expected = _make_folder(root)
  info, _, out = run_convert("imagefolder", source=root, validation_fraction=0.25, test_size=2,
                             seed=3, processes=2, num_shards=2)
  assert (out / "labels.txt").read_text() == "0:cat\n1:dog\n2:emu\n"
  assert info["classes"] == [{"id": 0, "name": "cat"}, {"id": 1, "name": "dog"},
                             {"id": 2, "name": "emu"}]
  assert info["num_classes"] == 3
  by_split = _split_examples(out)
  # One stratified split of the whole list in relative-path order, test cut first.
  rels = sorted(expected)
  want = splits.stratified_split([expected[r]["label"] for r in rels],
                                 {"test": 2, "validation": 2}, 3)
  for split in SPLITS:
    assert set(by_split[split]) == {rels[i] for i in want[split]}, split
  _assert_disjoint_and_whole(by_split, set(expected))
  for examples in by_split.values():
    for rel, example in examples.items():
      _assert_matches(example, expected[rel])
  assert [info["splits"][s]["num_records"] for s in SPLITS] == [4, 2, 2]
  assert list(info["splits"]) == list(SPLITS)
  _assert_balanced(info, out)
  origins = {split: info["splits"][split]["origin"] for split in SPLITS}
  assert origins == {
      "train": "the --source folder, less the test and validation images carved from it",
      "validation": CARVED.format(3), "test": CARVED.format(3)}
  assert info["splits"]["test"]["role"] == splits.ROLES["test"]
  source = info["source"]
  assert source["kind"] == "folder" and source["path"] == str(root)
  assert source["checksum_of"] == "listing" and len(source["sha256"]) == 64
  assert source["num_images"] == 8
  assert source["ignored_files"] == 2  # README.md and cat/notes.txt; hidden files not counted
  assert set(source["ignored_examples"]) == {"README.md", "cat/notes.txt"}
  assert source["validation_split"] == source["test_split"] == "carved from --source"
  assert source["split_rule"] == imagefolder.CARVE_RULE and source["seed"] == 3
  assert source["split_sizes"] == {"train": 4, "validation": 2, "test": 2}
  settings = info["settings"]
  assert settings["seed"] == 3 and settings["validation_fraction"] == 0.25
  assert settings["test_size"] == 2 and settings["test_fraction"] is None
  assert not (out / ".nascli-work").exists()


def _make_uneven(root: Path) -> dict[str, int]:
  """35 tiny distinct PNGs in classes of 20, 10 and 5; label by relative path."""
  labels = {}
  for label, (name, count) in enumerate((("ant", 20), ("bee", 10), ("cow", 5))):
    for i in range(count):
      rel = f"{name}/{i:02d}.png"
      _save(root / rel, _pixels(100 * label + i, 2, 2), "PNG")
      labels[rel] = label
  return labels


@pytest.mark.parametrize("options,sizes", [
    ({}, {"train": 27, "validation": 4, "test": 4}),  # 0.1 each: round(3.5) = 4
    ({"test_fraction": 0.2, "validation_size": 6}, {"train": 22, "validation": 6, "test": 7}),
    ({"test_size": 9, "validation_fraction": 0.3, "seed": 5},
     {"train": 16, "validation": 10, "test": 9}),  # round(10.5) = 10
])
def test_carved_splits_are_stratified_disjoint_and_whole(tmp_path, run_convert, options, sizes):
  root = tmp_path / "data"
  labels = _make_uneven(root)
  info, _, out = run_convert("imagefolder", source=root, **options)
  by_split = _split_examples(out)
  assert {split: len(by_split[split]) for split in SPLITS} == sizes
  assert {split: info["splits"][split]["num_records"] for split in SPLITS} == sizes
  assert info["source"]["split_sizes"] == sizes
  _assert_disjoint_and_whole(by_split, set(labels))
  share = {0: 20 / 35, 1: 10 / 35, 2: 5 / 35}
  for split in ("validation", "test"):
    counts = {c: 0 for c in share}
    for rel, example in by_split[split].items():
      assert example["image/class/label"] == [labels[rel]]
      counts[labels[rel]] += 1
    for c, fraction in share.items():
      assert abs(counts[c] - sizes[split] * fraction) <= 1, (split, c, counts)
  seed = options.get("seed", 0)
  assert info["splits"]["test"]["origin"] == CARVED.format(seed)
  assert info["splits"]["validation"]["origin"] == CARVED.format(seed)
  assert info["source"]["seed"] == seed


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
  assert info_c["splits"]["test"]["num_records"] == 1  # round(0.8)
  assert len(read_examples(out_c / "validation-*.tfrecord")) == 3
  # Another test size is other settings: refused over the finished output, not reused.
  with pytest.raises(NascliError, match="--overwrite"):
    run_convert("imagefolder", tmp_path / "a", source=root, validation_size=3, test_size=2)
  info_d, _, _ = run_convert("imagefolder", tmp_path / "a", source=root, validation_size=3,
                             test_size=2, overwrite=True)
  assert info_d["splits"]["test"]["num_records"] == 2
  assert info_d["fingerprint"] != info_a["fingerprint"]


def _held_folder(root: Path, files, first_seed: int) -> dict[str, dict]:
  out = {}
  for k, (rel, label) in enumerate(files):
    pixels = _pixels(first_seed + k, 4, 5)
    out[rel] = {"label": label, "fmt": "PNG", "pixels": pixels,
                "bytes": _save(root / rel, pixels, "PNG")}
  return out


def test_validation_source(tmp_path, run_convert):
  root = tmp_path / "data"
  expected = _make_folder(root)
  val = tmp_path / "val"
  val_expected = _held_folder(val, (("cat/v1.png", 0), ("emu/v2.png", 2)), 20)  # no dog: fine
  info, _, out = run_convert("imagefolder", source=root, validation_source=val, test_size=2)
  by_split = _split_examples(out)
  assert set(by_split["validation"]) == set(val_expected)
  # test is carved from --source alone (stratified, seed 0), the rest is train.
  rels = sorted(expected)
  want = splits.stratified_split([expected[r]["label"] for r in rels], {"test": 2}, 0)
  assert set(by_split["test"]) == {rels[i] for i in want["test"]}
  assert set(by_split["train"]) == {rels[i] for i in want["train"]}
  assert set(by_split["train"]) | set(by_split["test"]) == set(expected)
  _assert_disjoint_and_whole(by_split, set(expected) | set(val_expected))
  for split in ("train", "test"):
    for rel, example in by_split[split].items():
      _assert_matches(example, expected[rel])
  for rel, example in by_split["validation"].items():
    _assert_matches(example, val_expected[rel])
  source = info["source"]
  assert source["validation_source"]["path"] == str(val)
  assert source["validation_source"]["num_images"] == 2
  assert source["validation_split"] == "--validation_source"
  assert source["test_split"] == "carved from --source"
  assert source["checksum_of"] == "listing of --source and --validation_source"
  assert info["splits"]["validation"]["origin"] == "the --validation_source folder"
  assert info["splits"]["test"]["origin"] == CARVED.format(0)
  assert info["splits"]["train"]["origin"] == (
      "the --source folder, less the test images carved from it")
  assert info["settings"]["validation_source"] is True
  assert info["settings"]["test_source"] is False


def test_test_source(tmp_path, run_convert):
  root = tmp_path / "data"
  expected = _make_folder(root)
  test = tmp_path / "test"
  test_expected = _held_folder(test, (("dog/t1.png", 1), ("emu/t2.png", 2), ("emu/t3.png", 2)),
                               40)
  info, _, out = run_convert("imagefolder", tmp_path / "a", source=root, test_source=test,
                             validation_size=2, seed=4)
  by_split = _split_examples(out)
  assert set(by_split["test"]) == set(test_expected)
  rels = sorted(expected)
  want = splits.stratified_split([expected[r]["label"] for r in rels], {"validation": 2}, 4)
  assert set(by_split["validation"]) == {rels[i] for i in want["validation"]}
  _assert_disjoint_and_whole(by_split, set(expected) | set(test_expected))
  for rel, example in by_split["test"].items():
    _assert_matches(example, test_expected[rel])
  source = info["source"]
  assert source["test_source"]["path"] == str(test) and source["test_source"]["num_images"] == 3
  assert source["test_split"] == "--test_source"
  assert source["validation_split"] == "carved from --source"
  assert source["checksum_of"] == "listing of --source and --test_source"
  assert info["splits"]["test"]["origin"] == "the --test_source folder"
  assert info["splits"]["validation"]["origin"] == CARVED.format(4)
  assert info["settings"]["test_source"] is True
  assert [info["splits"][s]["num_records"] for s in SPLITS] == [6, 2, 3]
  # The listing checksum covers --test_source: another test image is another source.
  _held_folder(test, (("dog/t4.png", 1),), 50)
  info_b, _, _ = run_convert("imagefolder", tmp_path / "b", source=root, test_source=test,
                             validation_size=2, seed=4)
  assert info_b["source"]["sha256"] != source["sha256"]
  assert info_b["source"]["test_source"]["num_images"] == 4
  assert info_b["fingerprint"]["source_checksum"] != info["fingerprint"]["source_checksum"]


def test_both_sources_leave_source_whole(tmp_path, run_convert):
  root = tmp_path / "data"
  expected = _make_folder(root)
  val = _held_folder(tmp_path / "val", (("cat/v.png", 0),), 60)
  test = _held_folder(tmp_path / "test", (("dog/t.png", 1),), 70)
  info, _, out = run_convert("imagefolder", source=root, validation_source=tmp_path / "val",
                             test_source=tmp_path / "test")
  by_split = _split_examples(out)
  assert set(by_split["train"]) == set(expected)
  assert set(by_split["validation"]) == set(val) and set(by_split["test"]) == set(test)
  assert info["splits"]["train"]["origin"] == "the --source folder"
  assert "split_rule" not in info["source"]
  assert info["source"]["checksum_of"] == (
      "listing of --source and --validation_source and --test_source")


@pytest.mark.parametrize("part", ["validation", "test"])
def test_held_out_source_with_unknown_class(tmp_path, run_convert, part):
  root = tmp_path / "data"
  _make_folder(root)
  _save(tmp_path / "held" / "cat" / "v.png", _pixels(1, 2, 2), "PNG")
  _save(tmp_path / "held" / "zebra" / "z.png", _pixels(2, 2, 2), "PNG")
  out = tmp_path / "out"
  with pytest.raises(InputError, match="zebra") as e:
    run_convert("imagefolder", out, source=root, **{f"{part}_source": tmp_path / "held"})
  assert str(e.value).startswith(f"{part} class folder ")
  assert "\n" not in str(e.value)
  assert not (out / INFO).exists()


@pytest.mark.parametrize("part,flag,value", [
    ("validation", "validation_fraction", 0.5), ("validation", "validation_size", 2),
    ("test", "test_fraction", 0.5), ("test", "test_size", 2)])
def test_held_out_source_and_size_conflict(tmp_path, run_convert, part, flag, value):
  root = tmp_path / "data"
  _make_folder(root)
  _save(tmp_path / "held" / "cat" / "v.png", _pixels(1, 2, 2), "PNG")
  options = {f"{part}_source": tmp_path / "held", flag: value}
  with pytest.raises(NascliError) as e:
    run_convert("imagefolder", source=root, **options)
  assert str(e.value) == (f"give --{part}_source or --{part}_fraction/--{part}_size, not both")
  with pytest.raises(NascliError, match=f"--{part}_source"):  # before anything is read
    imagefolder.ImageFolderSource.check_options(imagefolder.ConvertOptions(**options))


@pytest.mark.parametrize("options,culprit", [
    ({"test_size": 8}, "--test_size 8 must be between 1 and 7 for 8 images"),
    ({"test_fraction": 1.5}, "--test_fraction 1.5 must be between 0 and 1"),
    ({"validation_size": 0}, "--validation_size 0 must be between 1 and 7"),
    ({"test_size": 4, "validation_size": 4}, "pass smaller --test_size / --validation_size"),
    ({"test_size": 2, "test_fraction": 0.2}, "give --test_size or --test_fraction, not both"),
])
def test_bad_held_out_sizes(tmp_path, run_convert, options, culprit):
  root = tmp_path / "data"
  _make_folder(root)
  out = tmp_path / "out"
  with pytest.raises(NascliError) as e:
    run_convert("imagefolder", out, source=root, **options)
  assert culprit in str(e.value) and "\n" not in str(e.value)
  assert not (out / INFO).exists()


def test_bad_test_fraction_refused_before_reading(tmp_path):
  with pytest.raises(NascliError, match="--test_fraction 1.0 must be between 0 and 1"):
    imagefolder.ImageFolderSource.check_options(imagefolder.ConvertOptions(test_fraction=1.0))


def test_too_few_images_to_carve(tmp_path, run_convert):
  root = tmp_path / "data"
  _save(root / "cat" / "a.png", _pixels(1, 2, 2), "PNG")
  _save(root / "cat" / "b.png", _pixels(2, 2, 2), "PNG")
  out = tmp_path / "out"
  with pytest.raises(InputError) as e:
    run_convert("imagefolder", out, source=root)
  message = str(e.value)
  assert message == (f"--source {root} holds 2 image(s); carving test and validation from it"
                     " needs at least 3 (or pass --test_source and --validation_source)")
  assert not (out / INFO).exists()
  # With --validation_source only test is carved: 2 images are enough.
  _save(tmp_path / "val" / "cat" / "v.png", _pixels(3, 2, 2), "PNG")
  info, _, _ = run_convert("imagefolder", tmp_path / "ok", source=root,
                           validation_source=tmp_path / "val")
  assert [info["splits"][s]["num_records"] for s in SPLITS] == [1, 1, 1]


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
                             num_shards=2, validation_size=4, test_size=3)
  on_disk = json.loads((out / INFO).read_text())
  skipped = {split: entry["skipped_corrupt"] for split, entry in on_disk["splits"].items()}
  items = [s["item"] for entries in skipped.values() for s in entries]
  assert items == [broken]
  split = next(split for split, entries in skipped.items() if entries)
  assert skipped[split][0]["reason"]
  # 15 images, one skipped: 14 written, none of them the broken file.
  examples = _by_id(read_examples(out / "*.tfrecord"))
  assert len(examples) == 14 and broken not in examples
  assert sum(info["splits"][s]["num_records"] for s in SPLITS) == 14
  assert {"train": 8, "validation": 4, "test": 3}[split] - 1 == info["splits"][split]["num_records"]
  _assert_balanced(info, out)
