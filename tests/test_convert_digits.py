"""The conversion engine end to end on the embedded digits: pixels, balance, resume, re-runs."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from sklearn import datasets

from conftest import decode_image, nascli_subprocess, read_examples
from nascli.errors import OutputError


def _expected_digit(original_index, size, channels):
  import cv2  # pylint: disable=g-import-not-at-top
  digits = datasets.load_digits()
  pixels = np.round(digits.images[original_index] * (255.0 / 16.0)).astype(np.uint8)
  image = cv2.resize(pixels, (size, size), interpolation=cv2.INTER_LINEAR)[:, :, None]
  return np.repeat(image, channels, axis=2), int(digits.target[original_index])


def test_digits_pixels_labels_and_balance(run_convert):
  info, stats, out = run_convert("digits", image_size=16, channels=3, num_shards=4, processes=2)
  assert stats["records_written"] == 1797
  assert info["num_classes"] == 10
  assert (out / "labels.txt").read_text() == "".join(f"{i}:{i}\n" for i in range(10))
  train = read_examples(out / "train-*")
  val = read_examples(out / "validation-*")
  test = read_examples(out / "test-*")
  assert len(train) == info["splits"]["train"]["num_records"] == 1079
  assert len(val) == len(test) == 359
  # Every source image appears exactly once across the three splits, and no decoded image of
  # the test split is in another (the search never sees it).
  ids = sorted(int(r["image/source_id"][0]) for r in train + val + test)
  assert ids == list(range(1797))
  hashes = {name: {hash(decode_image(r["image/encoded"][0]).tobytes()) for r in records}
            for name, records in (("train", train), ("validation", val), ("test", test))}
  # Some digits scans are pixel-identical to each other; only those may repeat across splits.
  pixels = datasets.load_digits().images.reshape(1797, -1)
  repeats = len(pixels) - len(np.unique(pixels, axis=0))
  assert len(hashes["test"] & (hashes["train"] | hashes["validation"])) <= repeats
  # Stratified: each class holds 20% of its scans in validation and in test, within one.
  labels = datasets.load_digits().target
  for split, records in (("validation", val), ("test", test)):
    for c in range(10):
      got = sum(r["image/class/label"][0] == c for r in records)
      assert abs(got - 359 * (labels == c).sum() / 1797) < 1, (split, c, got)
    assert info["splits"][split]["origin"] == (
        "carved from the 1,797 scans: stratified by class, seed 0")
  assert info["splits"]["test"]["role"].startswith("final `nascli eval` only")
  for rec in train[:25] + val[:25] + test[:10]:
    original = int(rec["image/source_id"][0])
    expected, label = _expected_digit(original, 16, 3)
    np.testing.assert_array_equal(decode_image(rec["image/encoded"][0]), expected)
    assert rec["image/class/label"] == [label]
    assert rec["image/format"] == [b"png"]
    assert rec["image/height"] == [16] and rec["image/width"] == [16]
  counts = [s["num_records"] for s in info["splits"]["train"]["shards"]]
  assert len(counts) == 4 and max(counts) - min(counts) <= 1
  files = sorted(os.path.basename(p) for p in glob.glob(str(out / "train-*")))
  assert files == [f"train-0000{i}-of-00004.tfrecord" for i in range(4)]
  for shard in info["splits"]["train"]["shards"]:
    assert len(read_examples(out / shard["file"])) == shard["num_records"]
  # dataset_info agrees with the files and the labels actually written.
  label_counts = {}
  for rec in train:
    label_counts[str(rec["image/class/label"][0])] = label_counts.get(
        str(rec["image/class/label"][0]), 0) + 1
  assert info["splits"]["train"]["class_counts"] == dict(
      sorted(label_counts.items(), key=lambda kv: int(kv[0])))
  assert info["splits"]["train"]["image_sizes"]["distinct"] == {"16x16": 1079}
  on_disk = json.loads((out / "dataset_info.json").read_text())
  assert on_disk["splits"] == info["splits"]
  assert not (out / ".nascli-convert-state.json").exists()


def test_one_channel_and_num_workers_and_drop_remainder(run_convert):
  info, _, out = run_convert("digits", image_size=8, channels=1, num_workers=3,
                             drop_remainder=True, num_shards=4)
  train = info["splits"]["train"]
  # 4 shards raised to 6 so 3 workers get 2 files each; 1079 = 6*179 + 5 dropped.
  assert train["num_shards"] == 6
  assert [s["num_records"] for s in train["shards"]] == [179] * 6
  assert len(train["dropped"]) == 5
  assert train["num_records"] == 1074
  rec = read_examples(out / "train-00000-of-00006.tfrecord")[0]
  assert decode_image(rec["image/encoded"][0]).shape == (8, 8, 1)


def test_same_input_gives_byte_identical_shards_with_any_process_count(run_convert, tmp_path):
  _, _, a = run_convert("digits", output_dir=tmp_path / "a", processes=1, image_size=12)
  _, _, b = run_convert("digits", output_dir=tmp_path / "b", processes=2, image_size=12)
  files = sorted(os.listdir(a))
  assert files == sorted(os.listdir(b))
  for name in files:
    if name.endswith(".tfrecord"):
      assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_rerun_verifies_instead_of_rewriting(run_convert):
  info, stats, out = run_convert("digits", image_size=8)
  mtimes = {p: os.stat(p).st_mtime_ns for p in glob.glob(str(out / "*.tfrecord"))}
  info2, stats2, _ = run_convert("digits", image_size=8, output_dir=out)
  assert info2["status"] == "verified" and stats2["records_written"] == 0
  assert mtimes == {p: os.stat(p).st_mtime_ns for p in glob.glob(str(out / "*.tfrecord"))}
  # Other settings on the same folder are refused, and nothing is lost.
  with pytest.raises(OutputError, match="different conversion.*image_size"):
    run_convert("digits", image_size=9, output_dir=out)
  assert mtimes == {p: os.stat(p).st_mtime_ns for p in glob.glob(str(out / "*.tfrecord"))}
  # A damaged shard is named on re-run.
  victim = sorted(mtimes)[0]
  with open(victim, "r+b") as f:
    f.seek(40)
    f.write(b"\x00\x01")
  with pytest.raises(OutputError, match=os.path.basename(victim)):
    run_convert("digits", image_size=8, output_dir=out)
  # --overwrite rewrites it.
  info3, stats3, _ = run_convert("digits", image_size=8, output_dir=out, overwrite=True)
  assert info3["status"] == "written" and stats3["records_written"] == 1797


def test_output_dir_that_is_a_file_or_holds_foreign_shards(run_convert, tmp_path):
  a_file = tmp_path / "file"
  a_file.write_text("x")
  with pytest.raises(OutputError, match="is a file"):
    run_convert("digits", output_dir=a_file)
  foreign = tmp_path / "foreign"
  foreign.mkdir()
  (foreign / "train-00000-of-00001.tfrecord").write_bytes(b"precious")
  with pytest.raises(OutputError, match="train-00000-of-00001.tfrecord not written by"):
    run_convert("digits", output_dir=foreign)
  assert (foreign / "train-00000-of-00001.tfrecord").read_bytes() == b"precious"


def test_killed_conversion_resumes_and_ends_identical(tmp_path):
  """SIGKILL mid-write, run again: completed shards are kept, the result equals a clean run."""
  args = ["convert-data", "digits", "--image_size", "160", "--num_shards", "24",
          "--processes", "1", "--json"]
  killed = tmp_path / "killed"
  proc = subprocess.Popen([sys.executable, "-m", "nascli", *args, "--output_dir", str(killed)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  deadline = time.monotonic() + 120
  state = killed / ".nascli-convert-state.json"
  while time.monotonic() < deadline and proc.poll() is None:
    try:
      if json.loads(state.read_text())["completed"]:
        break
    except (OSError, ValueError, KeyError):
      pass
    time.sleep(0.005)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  finished = glob.glob(str(killed / "*.tfrecord"))
  assert finished, "the conversion was killed before any shard finished"
  assert not (killed / "dataset_info.json").exists(), "killed too late: conversion had finished"
  assert (killed / ".nascli-convert-state.json").exists()

  resumed = nascli_subprocess(*args, "--output_dir", killed)
  assert resumed.returncode == 0, resumed.stderr
  result = json.loads(resumed.stdout)
  assert "resuming" in resumed.stderr
  assert 0 < result["records_written"] < 1797

  clean = tmp_path / "clean"
  assert nascli_subprocess(*args, "--output_dir", clean).returncode == 0
  names = sorted(p for p in os.listdir(clean) if p.endswith(".tfrecord"))
  assert sorted(os.listdir(killed)) == sorted(os.listdir(clean))
  for name in names:
    assert (killed / name).read_bytes() == (clean / name).read_bytes(), name
  assert json.loads((killed / "dataset_info.json").read_text())["splits"] == json.loads(
      (clean / "dataset_info.json").read_text())["splits"]
