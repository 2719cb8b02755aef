"""Tests for the cifar10 source: both official archive layouts built from known pixels.

Splits: `test` is the official test_batch; `validation` is carved from data_batch_1..5,
stratified by class and seeded; `train` is the rest of the training batches.
"""

import hashlib
import io
import json
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from conftest import decode_image, read_examples
from nascli.data import download
from nascli.errors import InputError, NascliError, OutputError, UnsafeInputError

CLASS_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
               "truck"]
TRAIN_PER_BATCH = 10
NUM_TRAIN = 5 * TRAIN_PER_BATCH
NUM_TEST = 5
# The default validation split: 10% of the training batches.
NUM_VALIDATION = 5
TRAIN_STEMS = [f"data_batch_{i}" for i in range(1, 6)]
PY = "cifar-10-batches-py"
BIN = "cifar-10-batches-bin"


def _make_data(seed: int = 0) -> dict:
  """Known pixels as CIFAR stores them: [N, 3072] rows in CHW order, labels and filenames."""
  rng = np.random.default_rng(seed)
  batches = {}
  for i, n in [(1, TRAIN_PER_BATCH), (2, TRAIN_PER_BATCH), (3, TRAIN_PER_BATCH),
               (4, TRAIN_PER_BATCH), (5, TRAIN_PER_BATCH), ("test", NUM_TEST)]:
    name = "test_batch" if i == "test" else f"data_batch_{i}"
    batches[name] = {
        "data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
        "labels": [int(v) for v in rng.integers(0, 10, size=n)],
        "filenames": [f"{name}_img_{k}.png" for k in range(n)],
    }
  return batches


def _pickle_batch(batch: dict, with_filenames: bool) -> bytes:
  obj = {b"batch_label": b"a batch", b"labels": batch["labels"], b"data": batch["data"]}
  if with_filenames:
    obj[b"filenames"] = [f.encode() for f in batch["filenames"]]
  return pickle.dumps(obj, protocol=2)


def _python_files(data: dict, with_filenames: bool = True) -> dict[str, bytes]:
  files = {name: _pickle_batch(b, with_filenames) for name, b in data.items()}
  files["batches.meta"] = pickle.dumps(
      {b"label_names": [n.encode() for n in CLASS_NAMES], b"num_cases_per_batch": 7,
       b"num_vis": 3072}, protocol=2)
  return files


def _binary_files(data: dict) -> dict[str, bytes]:
  files = {}
  for name, b in data.items():
    rows = np.concatenate([np.asarray(b["labels"], np.uint8)[:, None], b["data"]], axis=1)
    files[f"{name}.bin"] = rows.tobytes()
  files["batches.meta.txt"] = ("\n".join(CLASS_NAMES) + "\n\n").encode()
  return files


def _make_tar(path: Path, folder: str, files: dict[str, bytes]) -> Path:
  with tarfile.open(path, "w:gz") as tf:
    for name, data in files.items():
      info = tarfile.TarInfo(f"{folder}/{name}")
      info.size = len(data)
      tf.addfile(info, io.BytesIO(data))
  return path


def _items(data: dict, stems: list[str]) -> dict[str, tuple[np.ndarray, int, str]]:
  """source_id ("data_batch_3_4") -> (HWC pixels, label, pickled filename) of the batches."""
  items = {}
  for stem in stems:
    hwc = data[stem]["data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    for i, (label, filename) in enumerate(zip(data[stem]["labels"], data[stem]["filenames"])):
      items[f"{stem}_{i}"] = (hwc[i], label, filename)
  return items


def _records(out: Path, split: str) -> dict[str, dict]:
  """source_id -> example, of every record of a split (each source_id once)."""
  records = {}
  for ex in read_examples(out / f"{split}-*.tfrecord"):
    source_id = ex["image/source_id"][0].decode()
    assert source_id not in records
    records[source_id] = ex
  return records


def _assert_matches(out: Path, data: dict, filenames: bool,
                    num_validation: int = NUM_VALIDATION) -> dict[str, dict[str, dict]]:
  """Every official image is in exactly one split, with its pixels, label and filename: test is
  test_batch; train and validation share the training batches. Returns the records by split."""
  train_items, test_items = _items(data, TRAIN_STEMS), _items(data, ["test_batch"])
  by_split = {split: _records(out, split) for split in ("train", "validation", "test")}
  assert set(by_split["test"]) == set(test_items)
  assert not set(by_split["train"]) & set(by_split["validation"])
  assert set(by_split["train"]) | set(by_split["validation"]) == set(train_items)
  assert len(by_split["validation"]) == num_validation
  for records in by_split.values():
    for source_id, ex in records.items():
      pixels, label, name = {**train_items, **test_items}[source_id]
      stem, index = source_id.rsplit("_", 1)
      assert ex["image/format"] == [b"png"]
      assert ex["image/height"] == [32] and ex["image/width"] == [32]
      assert ex["image/class/label"] == [label]
      np.testing.assert_array_equal(decode_image(ex["image/encoded"][0]), pixels)
      want = name if filenames else f"cifar10_{stem}_{int(index):05d}.png"
      assert ex["image/filename"] == [want.encode()]
  return by_split


def _shard_digests(info: dict) -> list[tuple[str, str]]:
  return [(s["file"], s["sha256"]) for split in info["splits"].values() for s in split["shards"]]


def _assert_failed_cleanly(out: Path) -> None:
  assert not (out / "dataset_info.json").exists()
  assert not list(out.glob("*.tfrecord"))


def test_python_archive(tmp_path, run_convert):
  data = _make_data()
  archive = _make_tar(tmp_path / "cifar-10-python.tar.gz", PY, _python_files(data))
  info, stats, out = run_convert("cifar10", source=archive, processes=2, num_shards=5)

  by_split = _assert_matches(out, data, filenames=True)
  assert (out / "labels.txt").read_text() == "".join(f"{i}:{n}\n"
                                                     for i, n in enumerate(CLASS_NAMES))
  assert info["classes"] == [{"id": i, "name": n} for i, n in enumerate(CLASS_NAMES)]
  assert info["num_classes"] == 10
  assert info["source"]["kind"] == "archive"
  assert info["source"]["format"] == "python"
  assert info["source"]["path"] == str(archive)
  assert info["source"]["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
  assert info["source"]["original_splits"] == {"train": "train", "validation": "train",
                                               "test": "test"}
  assert stats["records_written"] == NUM_TRAIN + NUM_TEST
  # Shards are even and the info file agrees with the files on disk.
  train, val, test = (info["splits"][s] for s in ("train", "validation", "test"))
  assert (train["num_records"], train["num_shards"]) == (45, 5)
  assert [s["num_records"] for s in train["shards"]] == [9] * 5
  assert [s["num_records"] for s in val["shards"]] == [1] * 5
  assert [s["num_records"] for s in test["shards"]] == [1] * 5
  for split in (train, val, test):
    for shard in split["shards"]:
      path = out / shard["file"]
      assert hashlib.sha256(path.read_bytes()).hexdigest() == shard["sha256"]
      assert len(read_examples(path)) == shard["num_records"]
  for name, split in info["splits"].items():
    labels = [int(ex["image/class/label"][0]) for ex in by_split[name].values()]
    assert split["class_counts"] == {str(k): labels.count(k) for k in sorted(set(labels))}


def test_binary_archive_gives_identical_shards(tmp_path, run_convert):
  data = _make_data(seed=1)
  # The binary layout has no filenames, so the pickles here leave them out too.
  py = _make_tar(tmp_path / "py.tar.gz", PY, _python_files(data, with_filenames=False))
  binary = _make_tar(tmp_path / "cifar-10-binary.tar.gz", BIN, _binary_files(data))
  py_info, _, py_out = run_convert("cifar10", output_dir=tmp_path / "py", source=py,
                                   processes=1, num_shards=5)
  bin_info, _, bin_out = run_convert("cifar10", output_dir=tmp_path / "bin", source=binary,
                                     processes=2, num_shards=5)

  _assert_matches(bin_out, data, filenames=False)
  assert bin_info["source"]["format"] == "binary"
  assert bin_info["classes"] == py_info["classes"]
  assert _shard_digests(bin_info) == _shard_digests(py_info)
  for name, _ in _shard_digests(py_info):
    assert (py_out / name).read_bytes() == (bin_out / name).read_bytes()
  assert (py_out / "labels.txt").read_bytes() == (bin_out / "labels.txt").read_bytes()


@pytest.mark.parametrize("layout", ["python", "binary"])
def test_extracted_folder(tmp_path, run_convert, layout):
  data = _make_data(seed=2)
  files, folder = ((_python_files(data, with_filenames=False), PY) if layout == "python"
                   else (_binary_files(data), BIN))
  root = tmp_path / "extracted"
  (root / folder).mkdir(parents=True)
  for name, blob in files.items():
    (root / folder / name).write_bytes(blob)
  archive = _make_tar(tmp_path / "a.tar.gz", folder, files)
  a_info, _, _ = run_convert("cifar10", output_dir=tmp_path / "a", source=archive, num_shards=2)
  # Either the extraction root or the batches folder itself.
  for i, source in enumerate([root, root / folder]):
    info, _, out = run_convert("cifar10", output_dir=tmp_path / f"f{i}", source=source,
                               num_shards=2)
    assert info["source"]["kind"] == "folder"
    assert info["source"]["checksum_of"] == "listing"
    assert info["source"]["format"] == layout
    assert _shard_digests(info) == _shard_digests(a_info)
  _assert_matches(out, data, filenames=False)


class _Evil:
  def __init__(self, marker: Path):
    self.marker = marker

  def __reduce__(self):
    return os.system, (f"touch {self.marker}",)


def test_malicious_pickle_is_refused(tmp_path, run_convert):
  marker = tmp_path / "pwned"
  files = _python_files(_make_data())
  files["data_batch_2"] = pickle.dumps({b"data": _Evil(marker), b"labels": []}, protocol=2)
  archive = _make_tar(tmp_path / "cifar-10-python.tar.gz", PY, files)
  out = tmp_path / "out"
  with pytest.raises(UnsafeInputError) as e:
    run_convert("cifar10", output_dir=out, source=archive)
  message = str(e.value)
  assert "\n" not in message
  assert "data_batch_2" in message and str(archive) in message
  assert not marker.exists()
  _assert_failed_cleanly(out)


def test_malicious_meta_in_folder_is_refused(tmp_path, run_convert):
  marker = tmp_path / "pwned"
  folder = tmp_path / PY
  folder.mkdir()
  for name, blob in _python_files(_make_data()).items():
    (folder / name).write_bytes(blob)
  (folder / "batches.meta").write_bytes(pickle.dumps(_Evil(marker), protocol=2))
  out = tmp_path / "out"
  with pytest.raises(UnsafeInputError, match="batches.meta"):
    run_convert("cifar10", output_dir=out, source=folder)
  assert not marker.exists()
  _assert_failed_cleanly(out)


def test_truncated_archive(tmp_path, run_convert):
  good = _make_tar(tmp_path / "good.tar.gz", PY, _python_files(_make_data()))
  archive = tmp_path / "cifar-10-python.tar.gz"
  archive.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
  out = tmp_path / "out"
  with pytest.raises(InputError) as e:
    run_convert("cifar10", output_dir=out, source=archive)
  assert "\n" not in str(e.value)
  assert str(archive) in str(e.value) and "truncated" in str(e.value)
  _assert_failed_cleanly(out)


@pytest.mark.parametrize("layout,missing", [("python", "data_batch_3"),
                                            ("python", "batches.meta"),
                                            ("binary", "test_batch.bin")])
def test_missing_member(tmp_path, run_convert, layout, missing):
  data = _make_data()
  files, folder = ((_python_files(data), PY) if layout == "python"
                   else (_binary_files(data), BIN))
  del files[missing]
  archive = _make_tar(tmp_path / "cifar.tar.gz", folder, files)
  out = tmp_path / "out"
  with pytest.raises(InputError) as e:
    run_convert("cifar10", output_dir=out, source=archive)
  message = str(e.value)
  assert "\n" not in message
  assert str(archive) in message and f"{folder}/{missing}" in message
  _assert_failed_cleanly(out)


def test_missing_file_in_folder(tmp_path, run_convert):
  folder = tmp_path / PY
  folder.mkdir()
  for name, blob in _python_files(_make_data()).items():
    if name != "test_batch":
      (folder / name).write_bytes(blob)
  with pytest.raises(InputError, match=r"has no file test_batch$"):
    run_convert("cifar10", output_dir=tmp_path / "out", source=tmp_path)
  _assert_failed_cleanly(tmp_path / "out")


def test_not_a_cifar_archive(tmp_path, run_convert):
  archive = _make_tar(tmp_path / "other.tar.gz", "stuff", {"readme.txt": b"hello"})
  with pytest.raises(InputError, match="not a CIFAR-10 archive") as e:
    run_convert("cifar10", output_dir=tmp_path / "out", source=archive)
  assert str(archive) in str(e.value)
  _assert_failed_cleanly(tmp_path / "out")


def test_mixed_layouts_are_refused(tmp_path, run_convert):
  data = _make_data()
  files = {f"{PY}/{k}": v for k, v in _python_files(data).items()}
  files.update({f"{BIN}/{k}": v for k, v in _binary_files(data).items()})
  archive = tmp_path / "both.tar.gz"
  with tarfile.open(archive, "w:gz") as tf:
    for name, blob in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(blob)
      tf.addfile(info, io.BytesIO(blob))
  with pytest.raises(InputError, match="mixes python and binary"):
    run_convert("cifar10", output_dir=tmp_path / "out", source=archive)
  _assert_failed_cleanly(tmp_path / "out")


def test_bad_label_names(tmp_path, run_convert):
  files = _binary_files(_make_data())
  files["batches.meta.txt"] = b"cat\ndog\n"
  archive = _make_tar(tmp_path / "cifar.tar.gz", BIN, files)
  with pytest.raises(InputError, match="has 2 names, expected 10"):
    run_convert("cifar10", output_dir=tmp_path / "out", source=archive)
  _assert_failed_cleanly(tmp_path / "out")


def test_download_without_source(tmp_path, run_convert, monkeypatch):
  data = _make_data()
  cached = _make_tar(tmp_path / "cifar-10-python.tar.gz", PY, _python_files(data))
  calls = []

  def fake_fetch(url, dest_dir, filename, *, md5=None, sha256=None, progress=True):
    assert progress is False
    calls.append((url, Path(dest_dir), filename, md5, sha256))
    return cached

  monkeypatch.setattr(download, "fetch", fake_fetch)
  info, _, out = run_convert("cifar10", download_dir=tmp_path / "dl", num_shards=1)
  assert calls == [("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz", tmp_path / "dl",
                    "cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a", None)]
  assert info["source"]["kind"] == "download"
  assert info["source"]["url"] == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
  assert info["source"]["sha256"] == hashlib.sha256(cached.read_bytes()).hexdigest()
  _assert_matches(out, data, filenames=True)
  assert json.loads((out / "dataset_info.json").read_text())["dataset"] == "cifar10"


# ----- the three splits (issue 47: the search must not select on the test set)


def _pixel_digests(records: dict[str, dict]) -> set[str]:
  return {hashlib.sha256(decode_image(ex["image/encoded"][0]).tobytes()).hexdigest()
          for ex in records.values()}


def test_splits_are_disjoint_and_whole(tmp_path, run_convert):
  data = _make_data(seed=3)
  archive = _make_tar(tmp_path / "cifar-10-python.tar.gz", PY, _python_files(data))
  info, _, out = run_convert("cifar10", source=archive, num_shards=2)
  by_split = _assert_matches(out, data, filenames=True)
  digests = {split: _pixel_digests(records) for split, records in by_split.items()}
  assert {split: len(d) for split, d in digests.items()} == {
      "train": NUM_TRAIN - NUM_VALIDATION, "validation": NUM_VALIDATION, "test": NUM_TEST}
  for a, b in [("train", "validation"), ("train", "test"), ("validation", "test")]:
    assert not digests[a] & digests[b], (a, b)
  whole = {hashlib.sha256(pixels.tobytes()).hexdigest()
           for pixels, _, _ in _items(data, TRAIN_STEMS + ["test_batch"]).values()}
  assert set().union(*digests.values()) == whole
  assert {s: info["splits"][s]["num_records"] for s in by_split} == {
      "train": NUM_TRAIN - NUM_VALIDATION, "validation": NUM_VALIDATION, "test": NUM_TEST}


def test_validation_is_stratified_and_seeded(tmp_path, run_convert):
  data = _make_data(seed=4)
  archive = _make_tar(tmp_path / "cifar-10-python.tar.gz", PY, _python_files(data))
  train_labels = [label for stem in TRAIN_STEMS for label in data[stem]["labels"]]
  chosen = {}
  for seed in (0, 1):
    info, _, out = run_convert("cifar10", output_dir=tmp_path / f"s{seed}", source=archive,
                               num_shards=1, seed=seed, validation_fraction=0.3)
    by_split = _assert_matches(out, data, filenames=True, num_validation=15)
    counts = info["splits"]["validation"]["class_counts"]
    for c in set(train_labels):
      share = 15 * train_labels.count(c) / NUM_TRAIN
      assert abs(counts.get(str(c), 0) - share) <= 1, (c, counts, share)
    chosen[seed] = set(by_split["validation"])
  assert chosen[0] != chosen[1]
  # The same seed gives the same shards.
  again, _, _ = run_convert("cifar10", output_dir=tmp_path / "again", source=archive,
                            num_shards=1, seed=1, validation_fraction=0.3)
  assert _shard_digests(again) == _shard_digests(info)


def test_dataset_info_records_origins_seed_and_sizes(tmp_path, run_convert):
  data = _make_data()
  archive = _make_tar(tmp_path / "cifar-10-binary.tar.gz", BIN, _binary_files(data))
  info, _, out = run_convert("cifar10", source=archive, num_shards=1, seed=7,
                             validation_size=12)
  splits = info["splits"]
  assert {s: splits[s]["num_records"] for s in splits} == {
      "train": NUM_TRAIN - 12, "validation": 12, "test": NUM_TEST}
  assert splits["train"]["origin"] == (
      "the official training set (data_batch_1..5) less the validation split")
  assert splits["validation"]["origin"] == (
      "carved from the official training set (data_batch_1..5): stratified by class, seed 7")
  assert splits["test"]["origin"] == "the official test set (test_batch)"
  assert "eval" in splits["test"]["role"] and "search" in splits["validation"]["role"]
  assert {k: info["settings"][k] for k in ("seed", "validation_fraction", "validation_size")} == {
      "seed": 7, "validation_fraction": None, "validation_size": 12}
  assert json.loads((out / "dataset_info.json").read_text())["splits"]["test"]["origin"] == (
      "the official test set (test_batch)")
  # Another seed is another conversion: its shards are not taken for these.
  with pytest.raises(OutputError, match="different conversion"):
    run_convert("cifar10", output_dir=out, source=archive, num_shards=1, seed=8,
                validation_size=12)


def test_validation_options_change_sizes(tmp_path, run_convert):
  data = _make_data()
  archive = _make_tar(tmp_path / "cifar-10-python.tar.gz", PY, _python_files(data))
  for i, (options, held_out) in enumerate([({}, 5), ({"validation_fraction": 0.2}, 10),
                                           ({"validation_size": 1}, 1),
                                           ({"validation_size": 49}, 49)]):
    info, _, out = run_convert("cifar10", output_dir=tmp_path / f"o{i}", source=archive,
                               num_shards=1, **options)
    sizes = {s: info["splits"][s]["num_records"] for s in info["splits"]}
    assert sizes == {"train": NUM_TRAIN - held_out, "validation": held_out, "test": NUM_TEST}
  _assert_matches(out, data, filenames=True, num_validation=49)


@pytest.mark.parametrize("options,flag", [
    ({"validation_size": 50}, "--validation_size 50 must be between 1 and 49"),
    ({"validation_fraction": 1.5}, "--validation_fraction 1.5 must be between 0 and 1"),
    ({"validation_fraction": 0.1, "validation_size": 3}, "--validation_size or"),
    ({"test_fraction": 0.1}, "--test_fraction does not apply to cifar10"),
    ({"test_size": 5}, "--test_size does not apply to cifar10"),
])
def test_bad_split_options(tmp_path, run_convert, options, flag):
  archive = _make_tar(tmp_path / "cifar-10-python.tar.gz", PY, _python_files(_make_data()))
  out = tmp_path / "out"
  with pytest.raises(NascliError) as e:
    run_convert("cifar10", output_dir=out, source=archive, **options)
  assert "\n" not in str(e.value) and flag in str(e.value)
  _assert_failed_cleanly(out)


def test_command_refuses_test_flags(tmp_path, cli):
  archive = _make_tar(tmp_path / "cifar-10-python.tar.gz", PY, _python_files(_make_data()))
  for flag, value in [("--test_fraction", "0.1"), ("--test_size", "5"),
                      ("--test_source", archive)]:
    code, stdout, stderr = cli("convert-data", "cifar10", "--source", archive, flag, value,
                               "--output_dir", tmp_path / "out")
    assert (code, stdout) == (1, ""), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert f"{flag} does not apply to cifar10" in stderr
    assert not (tmp_path / "out").exists()


def test_item_names_and_ids_say_which_batch(tmp_path):
  from nascli.data.source import ConvertOptions, source_for  # pylint: disable=g-import-not-at-top
  data = _make_data(seed=5)
  archive = _make_tar(tmp_path / "cifar-10-python.tar.gz", PY, _python_files(data))
  source = source_for("cifar10", ConvertOptions(source=archive, progress=False, seed=2))
  source.prepare()
  items = _items(data, TRAIN_STEMS + ["test_batch"])
  seen = set()
  for split, size in source.split_sizes().items():
    for index in range(size):
      name = source.item_name(split, index)
      record = source.record(split, index)
      stem, in_batch = record.source_id.rsplit("_", 1)
      assert name == f"{archive}:{PY}/{stem}[{in_batch}]"
      assert (stem == "test_batch") == (split == "test")
      np.testing.assert_array_equal(source.pixels(split, index), items[record.source_id][0])
      assert record.filename == items[record.source_id][2]
      seen.add(record.source_id)
  assert seen == set(items)
