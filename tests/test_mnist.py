"""Tests for the mnist source: IDX files built from known pixels, gzipped or not.

Splits: `test` is the official t10k set; `validation` is carved from the official training set,
stratified by class and seeded; `train` is the rest of it.
"""

import gzip
import hashlib
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import decode_image, read_examples
from nascli.data import download
from convert_helpers import records, refusal
from nascli.errors import InputError, NascliError

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
STEMS = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte"]
NUM_TRAIN = 40
NUM_TEST = 5
# The default validation split: 10% of the official training set.
NUM_VALIDATION = 4


def _images_idx(pixels: np.ndarray, magic: int = 2051) -> bytes:
  n, rows, cols = pixels.shape
  return struct.pack(">iIII", magic, n, rows, cols) + pixels.astype(np.uint8).tobytes()


def _labels_idx(labels: np.ndarray, magic: int = 2049) -> bytes:
  return struct.pack(">iI", magic, len(labels)) + labels.astype(np.uint8).tobytes()


def _make_data(seed: int = 0) -> dict:
  rng = np.random.default_rng(seed)
  return {
      "train": (rng.integers(0, 256, (NUM_TRAIN, 28, 28), dtype=np.uint8),
                rng.integers(0, 10, NUM_TRAIN, dtype=np.uint8)),
      "test": (rng.integers(0, 256, (NUM_TEST, 28, 28), dtype=np.uint8),
                     rng.integers(0, 10, NUM_TEST, dtype=np.uint8)),
  }


def _write(folder: Path, data: dict, gz: bool = True, blobs: dict | None = None) -> Path:
  """The four official files in folder; `blobs` replaces the content of some (by stem)."""
  folder.mkdir(parents=True, exist_ok=True)
  content = {
      STEMS[0]: _images_idx(data["train"][0]), STEMS[1]: _labels_idx(data["train"][1]),
      STEMS[2]: _images_idx(data["test"][0]),
      STEMS[3]: _labels_idx(data["test"][1]),
  }
  content.update(blobs or {})
  for stem, blob in content.items():
    if gz:
      (folder / f"{stem}.gz").write_bytes(gzip.compress(blob, mtime=0))
    else:
      (folder / stem).write_bytes(blob)
  return folder


def _assert_matches(out: Path, data: dict, channels: int,
                    num_validation: int = NUM_VALIDATION) -> dict[str, dict[str, dict]]:
  """Every official image is in exactly one split, with its pixels and label: test is t10k;
  train and validation share the official training set. Returns the records by split."""
  ids = {official: {f"mnist_{official}_{i}" for i in range(len(data[official][1]))}
         for official in ("train", "test")}
  by_split = {split: records(out, split) for split in ("train", "validation", "test")}
  assert set(by_split["test"]) == ids["test"]
  assert not set(by_split["train"]) & set(by_split["validation"])
  assert set(by_split["train"]) | set(by_split["validation"]) == ids["train"]
  assert len(by_split["validation"]) == num_validation
  for split_records in by_split.values():
    for source_id, ex in split_records.items():
      _, official, i = source_id.split("_")
      pixels, labels = data[official]
      i = int(i)
      assert ex["image/class/label"] == [int(labels[i])]
      assert ex["image/height"] == [28] and ex["image/width"] == [28]
      assert ex["image/format"] == [b"png"]
      assert ex["image/filename"] == [f"mnist_{official}_{i:05d}.png".encode()]
      image = decode_image(ex["image/encoded"][0])
      assert image.shape == (28, 28, channels)
      for c in range(channels):
        np.testing.assert_array_equal(image[:, :, c], pixels[i])
  return by_split


def test_one_channel_round_trip(tmp_path, run_convert):
  data = _make_data()
  folder = _write(tmp_path / "mnist", data)
  info, stats, out = run_convert("mnist", source=folder, processes=2, num_shards=4)

  by_split = _assert_matches(out, data, channels=1)
  assert (out / "labels.txt").read_text() == "".join(f"{i}:{n}\n" for i, n in enumerate(NAMES))
  assert info["classes"][6] == {"id": 6, "name": "six"}
  assert info["settings"]["channels"] == 1
  assert stats["records_written"] == NUM_TRAIN + NUM_TEST
  train, val, test = (info["splits"][s] for s in ("train", "validation", "test"))
  assert [s["num_records"] for s in train["shards"]] == [9, 9, 9, 9]
  assert [s["num_records"] for s in val["shards"]] == [1, 1, 1, 1]
  assert [s["num_records"] for s in test["shards"]] == [2, 1, 1, 1]
  for split in (train, val, test):
    for shard in split["shards"]:
      path = out / shard["file"]
      assert len(read_examples(path)) == shard["num_records"]
      assert hashlib.sha256(path.read_bytes()).hexdigest() == shard["sha256"]
  for name, split in info["splits"].items():
    labels = [int(ex["image/class/label"][0]) for ex in by_split[name].values()]
    assert split["class_counts"] == {str(k): labels.count(k) for k in sorted(set(labels))}
  source = info["source"]
  assert source["kind"] == "folder" and source["path"] == str(folder)
  assert source["original_splits"] == {"train": "train", "validation": "train", "test": "test"}
  digests = [hashlib.sha256((folder / f"{s}.gz").read_bytes()).hexdigest() for s in STEMS]
  assert source["sha256"] == hashlib.sha256("".join(digests).encode()).hexdigest()


def test_three_channels_and_plain_idx(tmp_path, run_convert):
  data = _make_data(seed=1)
  plain = _write(tmp_path / "plain", data, gz=False)
  info, _, out = run_convert("mnist", output_dir=tmp_path / "rgb", source=plain, channels=3,
                             processes=1, num_shards=1)
  _assert_matches(out, data, channels=3)
  assert info["settings"]["channels"] == 3
  # The gzipped files give the very same shards.
  gz = _write(tmp_path / "gz", data)
  gz_info, _, _ = run_convert("mnist", output_dir=tmp_path / "rgb_gz", source=gz, channels=3,
                              num_shards=1)
  assert ([s["sha256"] for split in gz_info["splits"].values() for s in split["shards"]]
          == [s["sha256"] for split in info["splits"].values() for s in split["shards"]])


def test_wrong_magic_number(tmp_path, run_convert):
  data = _make_data()
  folder = _write(tmp_path / "mnist", data,
                  blobs={STEMS[2]: _images_idx(data["test"][0], magic=2049)})
  message = refusal(run_convert, InputError, "mnist", folder, tmp_path / "out")
  assert str(folder / "t10k-images-idx3-ubyte.gz") in message
  assert "2049" in message and "2051" in message


def test_image_label_count_mismatch(tmp_path, run_convert):
  data = _make_data()
  folder = _write(tmp_path / "mnist", data,
                  blobs={STEMS[1]: _labels_idx(data["train"][1][:-1])})
  message = refusal(run_convert, InputError, "mnist", folder, tmp_path / "out")
  assert "train-images-idx3-ubyte.gz" in message and "train-labels-idx1-ubyte.gz" in message
  assert f"{NUM_TRAIN} images" in message and f"{NUM_TRAIN - 1} labels" in message


def test_file_length_must_match_header(tmp_path, run_convert):
  data = _make_data()
  cut = _images_idx(data["train"][0])[:-100]
  folder = _write(tmp_path / "mnist", data, gz=False, blobs={STEMS[0]: cut})
  message = refusal(run_convert, InputError, "mnist", folder, tmp_path / "out")
  assert "train-images-idx3-ubyte holds" in message
  assert str(folder / STEMS[0]) in message


def test_corrupt_gzip(tmp_path, run_convert):
  folder = _write(tmp_path / "mnist", _make_data())
  path = folder / "t10k-labels-idx1-ubyte.gz"
  path.write_bytes(path.read_bytes()[:-12])
  message = refusal(run_convert, InputError, "mnist", folder, tmp_path / "out")
  assert "corrupt gzip" in message
  assert str(path) in message


def test_label_out_of_range(tmp_path, run_convert):
  data = _make_data()
  labels = data["test"][1].copy()
  labels[3] = 10
  folder = _write(tmp_path / "mnist", data, blobs={STEMS[3]: _labels_idx(labels)})
  message = refusal(run_convert, InputError, "mnist", folder, tmp_path / "out")
  assert "label 10 at index 3" in message


def test_missing_file(tmp_path, run_convert):
  folder = _write(tmp_path / "mnist", _make_data())
  (folder / "t10k-labels-idx1-ubyte.gz").unlink()
  message = refusal(run_convert, InputError, "mnist", folder, tmp_path / "out")
  assert "t10k-labels-idx1-ubyte.gz" in message and str(folder) in message


def test_bad_options(tmp_path, run_convert):
  folder = _write(tmp_path / "mnist", _make_data())
  with pytest.raises(NascliError, match="--channels must be 1 or 3"):
    run_convert("mnist", output_dir=tmp_path / "out", source=folder, channels=2)
  with pytest.raises(InputError, match="is not a folder"):
    run_convert("mnist", output_dir=tmp_path / "out2", source=folder / f"{STEMS[0]}.gz")


def test_download_without_source(tmp_path, run_convert, monkeypatch):
  data = _make_data()
  cache = _write(tmp_path / "cache", data)
  calls = []

  def fake_fetch(url, dest_dir, filename, *, md5=None, sha256=None, progress=True):
    assert progress is False
    calls.append((url, filename, md5))
    assert Path(dest_dir) == tmp_path / "dl"
    return cache / filename

  monkeypatch.setattr(download, "fetch", fake_fetch)
  info, _, out = run_convert("mnist", download_dir=tmp_path / "dl", num_shards=1)
  base = "https://storage.googleapis.com/cvdf-datasets/mnist/"
  assert calls == [
      (base + "train-images-idx3-ubyte.gz", "train-images-idx3-ubyte.gz",
       "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
      (base + "train-labels-idx1-ubyte.gz", "train-labels-idx1-ubyte.gz",
       "d53e105ee54ea40749a09fcbcd1e9432"),
      (base + "t10k-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz",
       "9fb629c4189551a2d022fa330f9573f3"),
      (base + "t10k-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
       "ec29112dd5afa0611ce80d1b7f02629c"),
  ]
  assert info["source"]["kind"] == "download" and info["source"]["url"] == base
  _assert_matches(out, data, channels=1)


# The three splits: tests/test_official_splits.py runs them on this source and mnist.


def test_item_names_and_ids_say_which_file(tmp_path):
  from nascli.data.datasets import source_for  # pylint: disable=g-import-not-at-top
  from nascli.data.source import ConvertOptions  # pylint: disable=g-import-not-at-top
  data = _make_data(seed=5)
  folder = _write(tmp_path / "mnist", data, gz=False)
  source = source_for("mnist", ConvertOptions(source=folder, progress=False, seed=2))
  source.prepare()
  seen = set()
  for split, size in source.split_sizes().items():
    for index in range(size):
      record = source.record(split, index)
      _, official, position = record.source_id.split("_")
      stem = STEMS[2] if official == "test" else STEMS[0]
      assert (official == "test") == (split == "test")
      assert source.item_name(split, index) == f"{stem}[{position}]"
      np.testing.assert_array_equal(source.pixels(split, index)[:, :, 0],
                                    data[official][0][int(position)])
      assert record.label == data[official][1][int(position)]
      seen.add(record.source_id)
  assert seen == {f"mnist_{o}_{i}" for o in ("train", "test") for i in range(len(data[o][1]))}
