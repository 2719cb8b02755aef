"""`nascli convert-data` as a user meets it: hints that work as written, fast refusals, Ctrl-C,
output for scripts and logs."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

import tf_probe
from conftest import nascli_subprocess
from convert_helpers import make_tgz
from nascli.data.convert import STATE_FILE
from nascli.errors import OutputError

INFO = "dataset_info.json"


def _image_folder(root: Path, per_class: int = 5, ext: str = "png", size=(6, 7)) -> Path:
  for c, name in enumerate(("cat", "dog")):
    for i in range(per_class):
      pixels = np.random.default_rng(10 * c + i).integers(0, 256, (*size, 3), dtype=np.uint8)
      (root / name).mkdir(parents=True, exist_ok=True)
      cv2.imwrite(str(root / name / f"{i}.{ext}"), pixels)
  return root


def _one_line(err: str) -> str:
  lines = err.strip().splitlines()
  assert len(lines) == 1, err
  return lines[0]


def test_skip_corrupt_hint_followed_verbatim(cli, tmp_path):
  root = _image_folder(tmp_path / "photos")
  (root / "dog" / "holiday.jpg").write_text("a text file, renamed")
  out = tmp_path / "out"
  command = ["convert-data", "imagefolder", "--source", root, "--output_dir", out,
             "--validation_size", "2", "--test_size", "2", "--json"]
  code, stdout, stderr = cli(*command)
  line = _one_line(stderr)
  assert code == 1 and stdout == ""
  assert line == ("Error: corrupt image dog/holiday.jpg: not an image file (its bytes match no"
                  " image format) (pass --skip_corrupt to skip it)")
  assert "object at 0x" not in line
  assert not out.exists()  # nothing was finished: nothing is left, not even the folder

  code, stdout, stderr = cli(*command, "--skip_corrupt")  # exactly what the hint says
  assert code == 0, stderr
  assert "skipped 1 corrupt or missing image(s)" in stderr and "dog/holiday.jpg" in stderr
  result = json.loads(stdout)
  assert result["status"] == "written" and result["records_written"] == 10
  assert result["splits"]["validation"]["num_records"] == 2
  assert result["splits"]["test"]["num_records"] == 2
  assert result["splits"]["train"]["num_records"] == 6
  info = json.loads((out / INFO).read_text())
  skipped = [s for split in info["splits"].values() for s in split["skipped_corrupt"]]
  assert skipped == [{"item": "dog/holiday.jpg",
                      "reason": "not an image file (its bytes match no image format)"}]

  # The same command again: the finished conversion is recognised; without --skip_corrupt it
  # answers as a fresh run would, naming the image it skipped.
  code, stdout, _ = cli(*command, "--skip_corrupt")
  assert code == 0 and json.loads(stdout)["status"] == "verified"
  code, _, stderr = cli(*command)
  assert code == 1 and "corrupt image dog/holiday.jpg" in _one_line(stderr)


def test_hint_followed_in_a_folder_that_already_existed(cli, tmp_path):
  root = _image_folder(tmp_path / "photos")
  (root / "cat" / "x.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
  out = tmp_path / "existing"
  out.mkdir()
  command = ["convert-data", "imagefolder", "--source", root, "--output_dir", out,
             "--validation_size", "2", "--test_size", "2"]
  code, _, stderr = cli(*command)
  assert code == 1 and "cat/x.png" in stderr
  assert sorted(os.listdir(out)) == []  # the folder is the user's: kept, and left empty
  code, _, stderr = cli(*command, "--skip_corrupt", "--num_shards", "2")
  assert code == 0, stderr


def test_unfinished_run_without_finished_shards_restarts_with_other_settings(run_convert,
                                                                             tmp_path, capsys):
  out = tmp_path / "out"
  out.mkdir()
  old = {"fingerprint": {"dataset": "digits", "settings": {"image_size": 9}}, "completed": {}}
  (out / STATE_FILE).write_text(json.dumps(old))
  (out / ".train-00000-of-00002.tfrecord.tmp").write_bytes(b"half")
  info, stats, _ = run_convert("digits", output_dir=out, image_size=8, num_shards=2)
  assert info["status"] == "written" and stats["records_written"] == 1797
  assert "starting afresh" in capsys.readouterr().err
  assert sorted(os.listdir(out)) == [INFO, "labels.txt", "test-00000-of-00002.tfrecord",
                                     "test-00001-of-00002.tfrecord",
                                     "train-00000-of-00002.tfrecord",
                                     "train-00001-of-00002.tfrecord",
                                     "validation-00000-of-00002.tfrecord",
                                     "validation-00001-of-00002.tfrecord"]


def test_unfinished_run_with_finished_shards_and_other_settings_is_refused(run_convert, tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  shard = out / "train-00000-of-00004.tfrecord"
  shard.write_bytes(b"finished under other settings")
  old = {"fingerprint": {"dataset": "digits", "settings": {"image_size": 9}},
         "completed": {shard.name: {"sha256": "0" * 64}}}
  (out / STATE_FILE).write_text(json.dumps(old))
  with pytest.raises(OutputError, match=r"other settings .* and 1 finished shard\(s\); run it"
                                        r" again with its settings"):
    run_convert("digits", output_dir=out, image_size=8)
  assert shard.read_bytes() == b"finished under other settings"


def _bad_image_cases(tmp_path: Path) -> list[tuple[list, str]]:
  """Per reader: a command whose input holds a bad file, and that file's name."""
  cases = []
  root = _image_folder(tmp_path / "folder")
  (root / "cat" / "fake.jpg").write_text("text")
  cases.append((["imagefolder", "--source", root], "cat/fake.jpg"))

  good = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))[1].tobytes()
  flowers = {f"flower_photos/{c}/{i}.jpg": good for c in (
      "daisy", "dandelion", "roses", "sunflowers", "tulips") for i in range(2)}
  flowers["flower_photos/roses/fake.jpg"] = b"text"
  cases.append((["flowers", "--source", make_tgz(tmp_path / "flowers.tgz", flowers),
                 "--validation_size", "2", "--test_size", "2"], "roses/fake.jpg"))
  cases.append((["cifar10", "--source", make_tgz(tmp_path / "cifar-10-python.tar.gz", {
      f"cifar-10-batches-py/{n}": b"text" for n in (
          "data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5",
          "test_batch", "batches.meta")})], "cifar-10-batches-py/data_batch_1"))
  mnist = tmp_path / "mnist"
  mnist.mkdir()
  for stem in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte"):
    (mnist / f"{stem}.gz").write_bytes(b"\x1f\x8b text")
  cases.append((["mnist", "--source", mnist], "train-images-idx3-ubyte.gz"))
  coco = tmp_path / "coco"
  (coco / "images").mkdir(parents=True)
  cv2.imwrite(str(coco / "images" / "a.png"), np.zeros((4, 4, 3), np.uint8))
  cv2.imwrite(str(coco / "images" / "c.png"), np.ones((4, 4, 3), np.uint8))
  (coco / "images" / "b.jpg").write_text("text")
  (coco / "ann.json").write_text(json.dumps({  # 3 images: validation and test are carved
      "images": [{"id": 1, "file_name": "a.png"}, {"id": 2, "file_name": "b.jpg"},
                 {"id": 3, "file_name": "c.png"}],
      "annotations": [], "categories": [{"id": 1, "name": "x"}]}))
  cases.append((["coco", "--source", coco / "ann.json", "--image_dir", coco / "images"],
                 str(coco / "images" / "b.jpg")))
  not_an_archive = tmp_path / "photos.tgz"
  not_an_archive.write_text("text")
  cases.append((["flowers", "--source", not_an_archive], str(not_an_archive)))
  return cases


def test_errors_name_the_file_never_an_object_repr(cli, tmp_path):
  for args, culprit in _bad_image_cases(tmp_path):
    code, stdout, stderr = cli("convert-data", *args, "--output_dir", tmp_path / "out")
    line = _one_line(stderr)
    assert code == 1 and stdout == "", line
    assert culprit in line, line
    assert not re.search(r"object at 0x|<\w", line), line
    assert not (tmp_path / "out").exists(), line


# Run in a fresh interpreter: it reports, per command, main()'s exit code and stderr, and at the
# end whether TensorFlow was imported.
_REFUSALS = textwrap.dedent("""
    import contextlib, io, json, sys
    from nascli.app import main
    results = []
    for args in json.loads(sys.argv[1]):
      err = io.StringIO()
      with contextlib.redirect_stderr(err):
        code = main(args)
      results.append([code, err.getvalue()])
    print(json.dumps({"results": results, "tensorflow": "tensorflow" in sys.modules}))
    """)


def test_bad_flags_are_refused_before_tensorflow_is_imported(tmp_path):
  folder = _image_folder(tmp_path / "photos")
  missing = tmp_path / "missing"
  a_file = tmp_path / "file.txt"
  a_file.write_text("x")
  coco = tmp_path / "coco"
  (coco / "annotations").mkdir(parents=True)
  cases = [
      (["cifar100"], "unknown data set 'cifar100' (did you mean 'cifar10'?); known: "),
      (["imagefolder", "--source", missing], f"--source {missing} does not exist"),
      (["digits", "--num_shards", "0"], "--num_shards must be at least 1, got 0"),
      (["digits", "--num_workers", "0"], "--num_workers must be at least 1, got 0"),
      (["digits", "--processes", "-2"], "--processes must be 0 (all cores) or more, got -2"),
      (["digits", "--validation_fraction", "1.5"], "--validation_fraction 1.5 must be between"),
      (["digits", "--validation_fraction", "0.2", "--validation_size", "9"], "not both"),
      (["digits", "--image_size", "4"], "--image_size 4 is smaller than the 8x8 source digits"),
      (["digits", "--channels", "2"], "--channels must be 1 or 3, got 2"),
      (["shapes", "--image_size", "16"], "--image_size 16: image_size must be >= 32"),
      (["shapes", "--num_samples", "0"], "--num_samples must be at least 1, got 0"),
      (["cifar10", "--test_fraction", "0.1"], "--test_fraction does not apply to cifar10 (only to"),
      (["digits", "--test_fraction", "0.5", "--validation_fraction", "0.5"],
       "--validation_fraction 0.5 and --test_fraction 0.5 hold out everything"),
      (["digits", "--test_size", "0"], "--test_size must be at least 1, got 0"),
      (["imagefolder", "--source", folder, "--image_size", "32"], "--image_size does not apply"),
      (["imagefolder", "--source", folder, "--label_map", missing],
       f"label map {missing} is not a file"),
      (["coco", "--source", coco, "--image_dir", folder], "--image_dir applies to one"),
      (["coco", "--object_annotations_file", a_file, "--image_dir", missing],
       f"--image_dir {missing} does not exist"),
      (["digits", "--output_dir", a_file], f"output dir {a_file} is a file"),
      (["--verify", missing], f"--verify {missing} does not exist"),
      (["--verify", folder], f"{folder} has no dataset_info.json"),
  ]
  argv = [["convert-data", *map(str, args)] for args, _ in cases]
  # Last, a whole conversion: it needs TensorFlow no more than the refusals do.
  argv.append(["convert-data", "digits", "--image_size", "8", "--output_dir",
               str(tmp_path / "digits"), "--json"])
  start = time.monotonic()
  proc = subprocess.run([sys.executable, "-c", _REFUSALS, json.dumps(argv)], capture_output=True,
                        text=True, check=False, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert proc.returncode == 0, proc.stderr
  report = json.loads(proc.stdout.strip().splitlines()[-1])
  for (args, expected), (code, err) in zip(cases, report["results"]):
    assert code == 1, (args, err)
    assert expected in _one_line(err), (args, err)
    assert _one_line(err).startswith("Error: "), (args, err)
  assert report["results"][-1][0] == 0, report["results"][-1][1]
  assert (tmp_path / "digits" / INFO).exists()
  assert report["tensorflow"] is False
  print(f"{len(argv)} commands in {time.monotonic() - start:.1f} s")


def _state(out: Path) -> dict:
  try:
    return json.loads((out / STATE_FILE).read_text())
  except (OSError, ValueError):
    return {}


def _interrupt(args: list, out: Path, signum: int, after_shards: int, group: bool
               ) -> subprocess.CompletedProcess:
  """Starts `nascli ARGS`, sends `signum` once `after_shards` shards are finished."""
  proc = subprocess.Popen([sys.executable, "-m", "nascli", *map(str, args)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  deadline = time.monotonic() + 300
  while time.monotonic() < deadline and proc.poll() is None:
    if len(_state(out).get("completed", {})) >= after_shards:
      break
    time.sleep(0.005)
  assert proc.poll() is None, "the conversion ended before it could be interrupted"
  if group:  # what a terminal's Ctrl-C does: the whole foreground group, workers included
    os.killpg(proc.pid, signum)
  else:
    proc.send_signal(signum)
  stdout, stderr = proc.communicate(timeout=120)
  return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_ctrl_c_and_sigterm_keep_finished_shards_and_the_rerun_finishes_the_same(
    run_convert, tmp_path):
  out = tmp_path / "out"
  args = ["convert-data", "digits", "--image_size", "64", "--num_shards", "12", "--processes",
          "2", "--output_dir", out]
  first = _interrupt(args, out, signal.SIGINT, after_shards=1, group=True)
  kept = len(_state(out)["completed"])
  assert first.returncode == 130, first.stderr
  assert first.stdout == ""
  assert first.stderr == (f"Interrupted (Ctrl-C): converting digits into {out} ({kept} finished"
                          " shard(s) kept); run the same command again to continue\n")
  assert not list(out.glob(".*.tmp")) and not (out / INFO).exists()

  second = _interrupt(args, out, signal.SIGTERM, after_shards=kept + 1, group=False)
  assert second.returncode == 143, second.stderr
  assert second.stderr.splitlines()[-1].startswith("Interrupted (SIGTERM): converting digits")
  assert "Traceback" not in second.stderr

  third = nascli_subprocess(*args, "--json")
  assert third.returncode == 0, third.stderr
  assert "resuming:" in third.stderr
  assert 0 < json.loads(third.stdout)["records_written"] < 1797
  _, _, clean = run_convert("digits", output_dir=tmp_path / "clean", image_size=64,
                            num_shards=12)
  shas = lambda d: {split: [s["sha256"] for s in v["shards"]]  # noqa: E731
                    for split, v in json.loads((d / INFO).read_text())["splits"].items()}
  assert shas(out) == shas(clean)
  assert sorted(os.listdir(out)) == sorted(os.listdir(clean))


def test_piped_table_is_whole_and_logs_get_progress_lines(tmp_path):
  out = tmp_path / ("a-long-folder-name-that-a-terminal-of-80-columns-would-cut-" * 2) / "digits"
  proc = nascli_subprocess("convert-data", "digits", "--image_size", "32", "--num_shards", "2",
                           "--processes", "1", "--output_dir", out,
                           env={"NASCLI_PROGRESS_SECONDS": "0.01"})
  assert proc.returncode == 0, proc.stderr
  assert f"{out}/train-*-of-00002.tfrecord" in proc.stdout
  assert f"{out}/validation-*-of-00002.tfrecord" in proc.stdout
  assert f"wrote digits in {out} (" in proc.stdout
  assert "…" not in proc.stdout
  lines = [l for l in proc.stderr.splitlines() if l.startswith("writing: ")]
  assert lines, proc.stderr
  for line in lines:
    assert re.fullmatch(r"writing: (train|validation|test), \d+/1797 images \(\d+%\),"
                        r" \d+ images/s, elapsed \d+:\d\d:\d\d, ETA (\d+:\d\d:\d\d|unknown)",
                        line), line


def test_verify_table_is_whole_off_a_terminal(cli, tmp_path):
  out = tmp_path / ("another-long-folder-name-for-the-verify-table-" * 2) / "digits"
  assert cli("convert-data", "digits", "--image_size", "8", "--num_shards", "2", "--output_dir",
             out)[0] == 0
  code, stdout, _ = cli("convert-data", "--verify", out)  # capsys: stdout is not a terminal
  assert code == 0
  assert f"digits in {out}: all records verified" in stdout
  for name in ("train-00000-of-00002.tfrecord", "validation-00001-of-00002.tfrecord"):
    assert name in stdout


def test_finished_conversion_of_an_earlier_version_is_still_recognised(run_convert, tmp_path):
  # Conversions written before --skip_corrupt left the fingerprint carry it.
  info, _, out = run_convert("digits", image_size=8, num_shards=2)
  on_disk = json.loads((out / INFO).read_text())
  on_disk["fingerprint"]["skip_corrupt"] = False
  (out / INFO).write_text(json.dumps(on_disk))
  again, stats, _ = run_convert("digits", output_dir=out, image_size=8, num_shards=2)
  assert again["status"] == "verified" and stats["records_written"] == 0
  assert again["splits"] == info["splits"]


def test_resume_after_the_skipped_images_changed_rewrites_the_shards(run_convert, tmp_path):
  # BMPs are re-encoded to PNG: slow enough to be interrupted after the first shard.
  root = _image_folder(tmp_path / "photos", per_class=400, ext="bmp", size=(32, 32))
  victim = root / "dog" / "7.bmp"
  good = victim.read_bytes()
  broken = good[:10] + b"\xff\xff\xff\x7f" + good[14:]  # pixel data offset past the end
  victim.write_bytes(broken)
  out = tmp_path / "out"
  args = ["convert-data", "imagefolder", "--source", root, "--skip_corrupt", "--num_shards", "16",
          "--processes", "1", "--output_dir", out]
  stopped = _interrupt(args, out, signal.SIGINT, after_shards=1, group=False)
  assert stopped.returncode == 130, stopped.stderr
  victim.write_bytes(good)  # repaired in place: the listing (names, sizes) is unchanged
  resumed = nascli_subprocess(*args, "--json")
  assert resumed.returncode == 0, resumed.stderr
  assert "the images to convert changed since the interrupted run" in resumed.stderr
  assert json.loads(resumed.stdout)["records_written"] == 800
  _, _, clean = run_convert("imagefolder", output_dir=tmp_path / "clean", source=root,
                            num_shards=16)
  shas = lambda d: [s["sha256"] for v in json.loads((d / INFO).read_text())[  # noqa: E731
      "splits"].values() for s in v["shards"]]
  assert shas(out) == shas(clean)


def test_rerun_of_a_finished_conversion_answers_without_tensorflow(tmp_path):
  """A finished conversion run again is verified from its files: the same result rows, no
  TensorFlow loaded (a search's embedded data set takes the same path on every rerun)."""
  args = ("convert-data", "digits", "--image_size", "8", "--num_shards", "2", "--processes", "1",
          "--output_dir", tmp_path / "digits", "--json")
  first = nascli_subprocess(*args)
  assert first.returncode == 0, first.stderr
  again, tf_loaded = tf_probe.run(*args)
  assert again.returncode == 0, again.stderr
  written, verified = json.loads(first.stdout), json.loads(again.stdout)
  assert (written["status"], verified["status"]) == ("written", "verified")
  assert verified["splits"] == written["splits"] and verified["records_written"] == 0
  assert not tf_loaded
