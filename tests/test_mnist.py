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
from nascli.errors import InputError, NascliError, OutputError

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


def _records(out: Path, split: str) -> dict[str, dict]:
  """source_id -> example, of every record of a split (each source_id once)."""
  records = {}
  for ex in read_examples(out / f"{split}-*.tfrecord"):
    source_id = ex["image/source_id"][0].decode()
    assert source_id not in records
    records[source_id] = ex
  return records


def _assert_matches(out: Path, data: dict, channels: int,
                    num_validation: int = NUM_VALIDATION) -> dict[str, dict[str, dict]]:
  """Every official image is in exactly one split, with its pixels and label: test is t10k;
  train and validation share the official training set. Returns the records by split."""
  ids = {official: {f"mnist_{official}_{i}" for i in range(len(data[official][1]))}
         for official in ("train", "test")}
  by_split = {split: _records(out, split) for split in ("train", "validation", "test")}
  assert set(by_split["test"]) == ids["test"]
  assert not set(by_split["train"]) & set(by_split["validation"])
  assert set(by_split["train"]) | set(by_split["validation"]) == ids["train"]
  assert len(by_split["validation"]) == num_validation
  for records in by_split.values():
    for source_id, ex in records.items():
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


def _assert_failed_cleanly(out: Path) -> None:
  assert not (out / "dataset_info.json").exists()
  assert not list(out.glob("*.tfrecord"))


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
  out = tmp_path / "out"
  with pytest.raises(InputError) as e:
    run_convert("mnist", output_dir=out, source=folder)
  message = str(e.value)
  assert "\n" not in message
  assert str(folder / "t10k-images-idx3-ubyte.gz") in message
  assert "2049" in message and "2051" in message
  _assert_failed_cleanly(out)


def test_image_label_count_mismatch(tmp_path, run_convert):
  data = _make_data()
  folder = _write(tmp_path / "mnist", data,
                  blobs={STEMS[1]: _labels_idx(data["train"][1][:-1])})
  out = tmp_path / "out"
  with pytest.raises(InputError) as e:
    run_convert("mnist", output_dir=out, source=folder)
  message = str(e.value)
  assert "train-images-idx3-ubyte.gz" in message and "train-labels-idx1-ubyte.gz" in message
  assert f"{NUM_TRAIN} images" in message and f"{NUM_TRAIN - 1} labels" in message
  _assert_failed_cleanly(out)


def test_file_length_must_match_header(tmp_path, run_convert):
  data = _make_data()
  cut = _images_idx(data["train"][0])[:-100]
  folder = _write(tmp_path / "mnist", data, gz=False, blobs={STEMS[0]: cut})
  with pytest.raises(InputError, match="train-images-idx3-ubyte holds") as e:
    run_convert("mnist", output_dir=tmp_path / "out", source=folder)
  assert str(folder / STEMS[0]) in str(e.value)
  _assert_failed_cleanly(tmp_path / "out")


def test_corrupt_gzip(tmp_path, run_convert):
  folder = _write(tmp_path / "mnist", _make_data())
  path = folder / "t10k-labels-idx1-ubyte.gz"
  path.write_bytes(path.read_bytes()[:-12])
  with pytest.raises(InputError, match="corrupt gzip") as e:
    run_convert("mnist", output_dir=tmp_path / "out", source=folder)
  assert str(path) in str(e.value)
  _assert_failed_cleanly(tmp_path / "out")


def test_label_out_of_range(tmp_path, run_convert):
  data = _make_data()
  labels = data["test"][1].copy()
  labels[3] = 10
  folder = _write(tmp_path / "mnist", data, blobs={STEMS[3]: _labels_idx(labels)})
  with pytest.raises(InputError, match="label 10 at index 3"):
    run_convert("mnist", output_dir=tmp_path / "out", source=folder)
  _assert_failed_cleanly(tmp_path / "out")


def test_missing_file(tmp_path, run_convert):
  folder = _write(tmp_path / "mnist", _make_data())
  (folder / "t10k-labels-idx1-ubyte.gz").unlink()
  with pytest.raises(InputError) as e:
    run_convert("mnist", output_dir=tmp_path / "out", source=folder)
  assert "t10k-labels-idx1-ubyte.gz" in str(e.value) and str(folder) in str(e.value)
  _assert_failed_cleanly(tmp_path / "out")


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


# ----- the three splits (issue 47: the search must not select on the test set)


def _pixel_digests(records: dict[str, dict]) -> set[str]:
  return {hashlib.sha256(decode_image(ex["image/encoded"][0]).tobytes()).hexdigest()
          for ex in records.values()}


def test_splits_are_disjoint_and_whole(tmp_path, run_convert):
  data = _make_data(seed=3)
  info, _, out = run_convert("mnist", source=_write(tmp_path / "mnist", data), num_shards=2)
  by_split = _assert_matches(out, data, channels=1)
  digests = {split: _pixel_digests(records) for split, records in by_split.items()}
  sizes = {"train": NUM_TRAIN - NUM_VALIDATION, "validation": NUM_VALIDATION, "test": NUM_TEST}
  assert {split: len(d) for split, d in digests.items()} == sizes
  for a, b in [("train", "validation"), ("train", "test"), ("validation", "test")]:
    assert not digests[a] & digests[b], (a, b)
  whole = {hashlib.sha256(image[:, :, None].tobytes()).hexdigest()
           for official in ("train", "test") for image in data[official][0]}
  assert set().union(*digests.values()) == whole
  assert {s: info["splits"][s]["num_records"] for s in sizes} == sizes


def test_validation_is_stratified_and_seeded(tmp_path, run_convert):
  data = _make_data(seed=4)
  folder = _write(tmp_path / "mnist", data)
  labels = data["train"][1].tolist()
  chosen = {}
  for seed in (0, 1):
    info, _, out = run_convert("mnist", output_dir=tmp_path / f"s{seed}", source=folder,
                               num_shards=1, seed=seed, validation_fraction=0.25)
    by_split = _assert_matches(out, data, channels=1, num_validation=10)
    counts = info["splits"]["validation"]["class_counts"]
    for c in set(labels):
      share = 10 * labels.count(c) / NUM_TRAIN
      assert abs(counts.get(str(c), 0) - share) <= 1, (c, counts, share)
    chosen[seed] = set(by_split["validation"])
  assert chosen[0] != chosen[1]


def test_dataset_info_records_origins_seed_and_sizes(tmp_path, run_convert):
  folder = _write(tmp_path / "mnist", _make_data())
  info, _, out = run_convert("mnist", source=folder, num_shards=1, seed=7, validation_size=12)
  splits = info["splits"]
  assert {s: splits[s]["num_records"] for s in splits} == {
      "train": NUM_TRAIN - 12, "validation": 12, "test": NUM_TEST}
  assert splits["train"]["origin"] == (
      "the official training set (train-images-idx3-ubyte) less the validation split")
  assert splits["validation"]["origin"] == ("carved from the official training set"
                                            " (train-images-idx3-ubyte): stratified by class,"
                                            " seed 7")
  assert splits["test"]["origin"] == "the official test set (t10k-images-idx3-ubyte)"
  assert "eval" in splits["test"]["role"] and "search" in splits["validation"]["role"]
  assert {k: info["settings"][k] for k in ("seed", "validation_fraction", "validation_size")} == {
      "seed": 7, "validation_fraction": None, "validation_size": 12}
  # Another validation size is another conversion: its shards are not taken for these.
  with pytest.raises(OutputError, match="different conversion"):
    run_convert("mnist", output_dir=out, source=folder, num_shards=1, seed=7, validation_size=11)


def test_validation_options_change_sizes(tmp_path, run_convert):
  data = _make_data()
  folder = _write(tmp_path / "mnist", data)
  for i, (options, held_out) in enumerate([({}, 4), ({"validation_fraction": 0.5}, 20),
                                           ({"validation_size": 1}, 1),
                                           ({"validation_size": 39}, 39)]):
    info, _, out = run_convert("mnist", output_dir=tmp_path / f"o{i}", source=folder,
                               num_shards=1, **options)
    sizes = {s: info["splits"][s]["num_records"] for s in info["splits"]}
    assert sizes == {"train": NUM_TRAIN - held_out, "validation": held_out, "test": NUM_TEST}
  _assert_matches(out, data, channels=1, num_validation=39)


@pytest.mark.parametrize("options,flag", [
    ({"validation_size": 40}, "--validation_size 40 must be between 1 and 39"),
    ({"validation_fraction": 0.0}, "--validation_fraction 0.0 must be between 0 and 1"),
    ({"validation_fraction": 0.1, "validation_size": 3}, "--validation_size or"),
    ({"test_fraction": 0.1}, "--test_fraction does not apply to mnist"),
    ({"test_size": 5}, "--test_size does not apply to mnist"),
])
def test_bad_split_options(tmp_path, run_convert, options, flag):
  folder = _write(tmp_path / "mnist", _make_data())
  out = tmp_path / "out"
  with pytest.raises(NascliError) as e:
    run_convert("mnist", output_dir=out, source=folder, **options)
  assert "\n" not in str(e.value) and flag in str(e.value)
  _assert_failed_cleanly(out)


def test_command_refuses_test_flags(tmp_path, cli):
  folder = _write(tmp_path / "mnist", _make_data())
  for flag, value in [("--test_fraction", "0.1"), ("--test_size", "5"),
                      ("--test_source", folder)]:
    code, stdout, stderr = cli("convert-data", "mnist", "--source", folder, flag, value,
                               "--output_dir", tmp_path / "out")
    assert (code, stdout) == (1, ""), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert f"{flag} does not apply to mnist" in stderr
    assert not (tmp_path / "out").exists()


def test_item_names_and_ids_say_which_file(tmp_path):
  from nascli.data.source import ConvertOptions, source_for  # pylint: disable=g-import-not-at-top
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
