"""Tests for the cifar10 source: both official archive layouts built from known pixels.

Splits: `test` is the official test_batch; `validation` is carved from data_batch_1..5,
stratified by class and seeded; `train` is the rest of the training batches.
"""

import hashlib
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from conftest import decode_image, read_examples
from nascli.data import download
from convert_helpers import make_tgz, records, refusal, shard_digests
from nascli.errors import InputError, UnsafeInputError

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
  """A .tar.gz of `files` inside `folder`, as the official archives hold them."""
  return make_tgz(path, {f"{folder}/{name}": data for name, data in files.items()})


def _items(data: dict, stems: list[str]) -> dict[str, tuple[np.ndarray, int, str]]:
  """source_id ("data_batch_3_4") -> (HWC pixels, label, pickled filename) of the batches."""
  items = {}
  for stem in stems:
    hwc = data[stem]["data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    for i, (label, filename) in enumerate(zip(data[stem]["labels"], data[stem]["filenames"])):
      items[f"{stem}_{i}"] = (hwc[i], label, filename)
  return items


def _assert_matches(out: Path, data: dict, filenames: bool,
                    num_validation: int = NUM_VALIDATION) -> dict[str, dict[str, dict]]:
  """Every official image is in exactly one split, with its pixels, label and filename: test is
  test_batch; train and validation share the training batches. Returns the records by split."""
  train_items, test_items = _items(data, TRAIN_STEMS), _items(data, ["test_batch"])
  by_split = {split: records(out, split) for split in ("train", "validation", "test")}
  assert set(by_split["test"]) == set(test_items)
  assert not set(by_split["train"]) & set(by_split["validation"])
  assert set(by_split["train"]) | set(by_split["validation"]) == set(train_items)
  assert len(by_split["validation"]) == num_validation
  for split_records in by_split.values():
    for source_id, ex in split_records.items():
      pixels, label, name = {**train_items, **test_items}[source_id]
      stem, index = source_id.rsplit("_", 1)
      assert ex["image/format"] == [b"png"]
      assert ex["image/height"] == [32] and ex["image/width"] == [32]
      assert ex["image/class/label"] == [label]
      np.testing.assert_array_equal(decode_image(ex["image/encoded"][0]), pixels)
      want = name if filenames else f"cifar10_{stem}_{int(index):05d}.png"
      assert ex["image/filename"] == [want.encode()]
  return by_split


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
  assert shard_digests(bin_info) == shard_digests(py_info)
  for name, _ in shard_digests(py_info):
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
    assert shard_digests(info) == shard_digests(a_info)
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
  message = refusal(run_convert, UnsafeInputError, "cifar10", archive, tmp_path / "out")
  assert "data_batch_2" in message and str(archive) in message
  assert not marker.exists()


def test_malicious_meta_in_folder_is_refused(tmp_path, run_convert):
  marker = tmp_path / "pwned"
  folder = tmp_path / PY
  folder.mkdir()
  for name, blob in _python_files(_make_data()).items():
    (folder / name).write_bytes(blob)
  (folder / "batches.meta").write_bytes(pickle.dumps(_Evil(marker), protocol=2))
  message = refusal(run_convert, UnsafeInputError, "cifar10", folder, tmp_path / "out")
  assert "batches.meta" in message
  assert not marker.exists()


def test_truncated_archive(tmp_path, run_convert):
  good = _make_tar(tmp_path / "good.tar.gz", PY, _python_files(_make_data()))
  archive = tmp_path / "cifar-10-python.tar.gz"
  archive.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
  message = refusal(run_convert, InputError, "cifar10", archive, tmp_path / "out")
  assert str(archive) in message and "truncated" in message


@pytest.mark.parametrize("layout,missing", [("python", "data_batch_3"),
                                            ("python", "batches.meta"),
                                            ("binary", "test_batch.bin")])
def test_missing_member(tmp_path, run_convert, layout, missing):
  data = _make_data()
  files, folder = ((_python_files(data), PY) if layout == "python"
                   else (_binary_files(data), BIN))
  del files[missing]
  archive = _make_tar(tmp_path / "cifar.tar.gz", folder, files)
  message = refusal(run_convert, InputError, "cifar10", archive, tmp_path / "out")
  assert str(archive) in message and f"{folder}/{missing}" in message


def test_missing_file_in_folder(tmp_path, run_convert):
  folder = tmp_path / PY
  folder.mkdir()
  for name, blob in _python_files(_make_data()).items():
    if name != "test_batch":
      (folder / name).write_bytes(blob)
  message = refusal(run_convert, InputError, "cifar10", tmp_path, tmp_path / "out")
  assert message.endswith("has no file test_batch")


def test_not_a_cifar_archive(tmp_path, run_convert):
  archive = _make_tar(tmp_path / "other.tar.gz", "stuff", {"readme.txt": b"hello"})
  message = refusal(run_convert, InputError, "cifar10", archive, tmp_path / "out")
  assert "not a CIFAR-10 archive" in message
  assert str(archive) in message


def test_mixed_layouts_are_refused(tmp_path, run_convert):
  data = _make_data()
  files = {f"{PY}/{k}": v for k, v in _python_files(data).items()}
  files.update({f"{BIN}/{k}": v for k, v in _binary_files(data).items()})
  archive = make_tgz(tmp_path / "both.tar.gz", files)
  message = refusal(run_convert, InputError, "cifar10", archive, tmp_path / "out")
  assert "mixes python and binary" in message


def test_bad_label_names(tmp_path, run_convert):
  files = _binary_files(_make_data())
  files["batches.meta.txt"] = b"cat\ndog\n"
  archive = _make_tar(tmp_path / "cifar.tar.gz", BIN, files)
  message = refusal(run_convert, InputError, "cifar10", archive, tmp_path / "out")
  assert "has 2 names, expected 10" in message


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


# The three splits: tests/test_official_splits.py runs them on this source and mnist.


def test_item_names_and_ids_say_which_batch(tmp_path):
  from nascli.data.datasets import source_for  # pylint: disable=g-import-not-at-top
  from nascli.data.source import ConvertOptions  # pylint: disable=g-import-not-at-top
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
