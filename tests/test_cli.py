"""The command line contract: spellings, exit codes, one-line errors, stdout vs stderr."""

import json
import os
import subprocess
import sys

from conftest import nascli_subprocess


def test_help_lists_commands_and_one_spelling_per_option(cli):
  code, out, _ = cli("--help")
  assert code == 0 and "convert-data" in out
  code, out, _ = cli("convert-data", "--help")
  assert code == 0
  assert "--num_shards" in out and "--num-shards" not in out  # both accepted: the test below


def test_underscore_and_dash_spellings_do_the_same(cli, tmp_path):
  code_a, out_a, _ = cli("convert-data", "digits", "--image_size", "8", "--num_shards", "2",
                         "--output_dir", tmp_path / "a", "--json")
  code_b, out_b, _ = cli("convert_data", "digits", "--image-size", "8", "--num-shards", "2",
                         "--output-dir", tmp_path / "b", "--json")
  assert code_a == code_b == 0
  a, b = json.loads(out_a), json.loads(out_b)
  assert a["splits"] == b["splits"]
  assert a["splits"]["train"]["shard_records"] == [540, 539]
  for name in ("train-00000-of-00002.tfrecord", "validation-00001-of-00002.tfrecord"):
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_unknown_dataset_is_one_line_listing_known_ones(cli, tmp_path):
  code, out, err = cli("convert-data", "imagenet21k", "--output_dir", tmp_path / "x")
  assert code == 1 and out == ""
  lines = err.strip().splitlines()
  assert len(lines) == 1
  assert lines[0].startswith("Error: unknown data set 'imagenet21k'; known: ")
  for name in ("cifar10", "coco", "digits", "flowers", "imagefolder", "mnist", "shapes"):
    assert name in lines[0]


def test_usage_errors_exit_2(cli):
  code, _, err = cli("convert-data", "digits", "--no_such_flag")
  assert code == 2 and "No such option" in err
  code, _, err = cli("convert-data")
  assert code == 2 and "NAME" in err


def test_output_dir_is_a_file_one_line_exit_1(cli, tmp_path):
  f = tmp_path / "f"
  f.write_text("keep me")
  code, _, err = cli("convert-data", "digits", "--output_dir", f)
  assert code == 1
  assert err.strip() == f"Error: output dir {f} is a file"
  assert f.read_text() == "keep me"


def test_verify_reports_truncated_shard_with_record_index(cli, tmp_path):
  out_dir = tmp_path / "d"
  assert cli("convert-data", "digits", "--image_size", "8", "--num_shards", "2",
             "--output_dir", out_dir)[0] == 0
  code, out, _ = cli("convert-data", "--verify", out_dir, "--json")
  report = json.loads(out)
  assert code == 0 and report["ok"]
  assert [s["found"] for s in report["shards"]] == [540, 539, 180, 179, 180, 179]
  assert sum(report["label_counts"]["train"].values()) == 1079
  shard = out_dir / "train-00001-of-00002.tfrecord"
  data = shard.read_bytes()
  shard.write_bytes(data[: len(data) // 2])
  code, out, err = cli("convert-data", "--verify", out_dir)
  assert code == 1
  line = err.strip()
  assert "\n" not in line
  assert line.startswith(f"Error: shard {shard} is truncated or corrupt at record ")
  index = int(line.split("at record ")[1].split()[0])
  assert 220 < index < 320  # about half of 540 records survive the cut
  assert "PROBLEMS FOUND" in out


def test_verify_of_a_folder_without_dataset_info(cli, tmp_path):
  code, _, err = cli("convert-data", "--verify", tmp_path)
  assert code == 1
  assert err.strip() == f"Error: {tmp_path} has no dataset_info.json: not a finished nascli conversion"


def test_python_dash_m_is_the_console_script_and_debug_shows_traceback(tmp_path):
  f = tmp_path / "f"
  f.write_text("x")
  plain = nascli_subprocess("convert-data", "digits", "--output_dir", f)
  assert plain.returncode == 1
  assert plain.stderr.strip().splitlines() == [f"Error: output dir {f} is a file"]
  debug = nascli_subprocess("convert-data", "digits", "--output_dir", f, env={"NASCLI_DEBUG": "1"})
  assert debug.returncode == 1
  assert "Traceback (most recent call last)" in debug.stderr
  assert debug.stderr.strip().endswith(f"Error: output dir {f} is a file")


def test_help_into_a_closed_pipe_ends_quietly(tmp_path):
  """`nascli --help | head -1`: the usage line is the first line, and a reader that went away
  ends nascli quietly with the shell's SIGPIPE code, not exit 1."""
  # A reader that has gone before nascli writes: every write fails.
  read, write = os.pipe()
  os.close(read)
  try:
    proc = subprocess.run([sys.executable, "-m", "nascli", "--help"], stdout=write,
                          stderr=subprocess.PIPE, text=True, check=False)
  finally:
    os.close(write)
  assert (proc.returncode, proc.stderr) == (141, "")
  # `head -1`: the first line is the usage line, whether nascli was still writing or not.
  head = subprocess.run(["sh", "-c", f"'{sys.executable}' -m nascli --help | head -1"],
                        capture_output=True, text=True, check=False)
  assert head.stdout.strip() == "Usage: nascli [OPTIONS] COMMAND [ARGS]..."


def test_a_log_message_off_a_terminal_is_one_line(tmp_path):
  """With stderr in a file, Rich would break a message at 80 columns, which spoils grep."""
  message = ("trial 3: --early_stopping asha stopped it at rung 1 (step 30, reward 0.06685);"
             " the next rung would have been step 90")
  script = ("import sys; from nascli import console, evaluation;"
            " console.stderr().print(sys.argv[1]); evaluation.stderr.print(sys.argv[1])")
  with open(tmp_path / "log", "w", encoding="utf-8") as log:
    subprocess.run([sys.executable, "-c", script, message], stderr=log, check=True,
                   env=dict(os.environ, COLUMNS=""))
  assert (tmp_path / "log").read_text().splitlines() == [message, message]
