"""A path that is not a search job dir, given to each command that reads one, tried as a new
user would: one line, exit 1, the same words for the same mistake (nascli/search/search_job.py),
and before any framework is imported. And scripts/screenshot_report.py without Playwright."""

import importlib.util
import json
import runpy
import sys

import pytest

from conftest import main_in_fresh_interpreter

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.fixture
def folders(tmp_path):
  """A missing path, a file, a converted data set (as `nascli convert` leaves one), a train
  model dir, and an empty folder."""
  data = tmp_path / "data" / "digits"
  data.mkdir(parents=True)
  (data / "dataset_info.json").write_text(json.dumps({"name": "digits"}))
  (data / "train-00000-of-00001.tfrecord").write_bytes(b"")
  model = tmp_path / "model"
  model.mkdir()
  (model / "params.yaml").write_text("task: {}\n")
  empty = tmp_path / "empty"
  empty.mkdir()
  afile = tmp_path / "notes.txt"
  afile.write_text("x")
  return {"missing": tmp_path / "missing", "file": afile, "data": data, "model": model,
          "empty": empty}


def test_each_command_says_the_same_mistake_in_the_same_words(folders):
  f = folders
  calc = ["run_latency_calculator_local", "--local_output_dir"]
  cases = [
      (["list_trials", f["missing"]], f"{f['missing']} does not exist"),
      (["list_trials", f["file"]], f"{f['file']} is a file, not a nascli search job"),
      (["list_trials", f["data"]],
       f"{f['data']} is a converted data set (dataset_info.json), not a nascli search job"),
      (["list_trials", f["model"]],
       f"{f['model']} is a train or eval model dir (params.yaml), not a nascli search job"),
      (["list_trials", f["empty"]], f"{f['empty']} is not a nascli search job (no journal.jsonl)"),
      # The calculator is refused the same, where a search would never start ...
      (calc + [f["missing"]], f"--local_output_dir {f['missing']} does not exist; start the"
       " search first (the calculator then waits for its trials)"),
      (calc + [f["file"]], f"--local_output_dir {f['file']} is a file, not a nascli search job"),
      (calc + [f["data"]], f"--local_output_dir {f['data']} is a converted data set"
       " (dataset_info.json), not a nascli search job"),
      (calc + [f["data"], "--once"], f"--local_output_dir {f['data']} is a converted data set"
       " (dataset_info.json), not a nascli search job"),
      (calc + [f["model"], "--once"], f"--local_output_dir {f['model']} is a train or eval model"
       " dir (params.yaml), not a nascli search job"),
  ]
  results = main_in_fresh_interpreter([c[0] for c in cases])
  for (argv, message), (code, err, tf_loaded) in zip(cases, results, strict=True):
    assert (code, err, tf_loaded) == (1, f"Error: {message}\n", False), argv


def test_the_calculator_still_waits_in_an_empty_folder_before_its_search(folders):
  """A calculator may start before its search: an empty folder is no mistake (--once: nothing
  waits, exit 0)."""
  [(code, err, _)] = main_in_fresh_interpreter(
      [["run_latency_calculator_local", "--local_output_dir", folders["empty"], "--once"]])
  assert code == 0, err
  assert "measured 0 trial(s); --once: nothing else waits" in err


def test_screenshot_report_without_playwright_names_what_to_install(monkeypatch, capsys,
                                                                     tmp_path):
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: None if name == "playwright" else real(name, *a))
  monkeypatch.setattr(sys, "argv", ["screenshot_report.py", str(tmp_path), "out.png"])
  with pytest.raises(SystemExit) as e:
    runpy.run_path(str(ROOT / "scripts" / "screenshot_report.py"), run_name="__main__")
  assert e.value.code == 1
  assert capsys.readouterr().err == ("Error: scripts/screenshot_report.py needs Playwright,"
                                     " which the test setup installs: bash scripts/setup.sh"
                                     " --test\n")
  assert not (tmp_path / "report.html").exists()  # refused before the report was written
