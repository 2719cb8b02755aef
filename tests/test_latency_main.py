"""`python -m tf_vision.serving.latency_main`: the latency image's entry point on a real export.
It ends as nascli does (nascli.runtime.finish): quiet, the exit code right, no teardown once
TensorFlow is loaded, and no temp files left."""

import json
import os
import subprocess
import sys

import pytest

from official.core import exp_factory
from official.vision import registry_imports  # noqa: F401  pylint: disable=unused-import
from tf_vision.serving import export_lib, latency_main


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
  """A ResNet-10 32x32 classifier, initialized weights (enough to time an architecture)."""
  params = exp_factory.get_exp_config("resnet_imagenet")
  params.task.model.backbone.resnet.model_id = 10
  params.task.model.input_size = [32, 32, 3]
  params.task.model.num_classes = 10
  return export_lib.export(params, None, tmp_path_factory.mktemp("latency_main") / "export")


def _latency_main(*args, temp) -> subprocess.CompletedProcess:
  """`python -m tf_vision.serving.latency_main ARGS` with an exit handler that tells whether the
  interpreter's teardown ran; TMPDIR is `temp`, TensorFlow's log level left to the entry point."""
  code = ("import atexit, runpy, sys\n"
          "atexit.register(lambda: print('teardown ran', file=sys.stderr))\n"
          f"sys.argv = ['latency_main', *{list(map(str, args))!r}]\n"
          "runpy.run_module('tf_vision.serving.latency_main', run_name='__main__', alter_sys=True)")
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        env=dict(env, TMPDIR=str(temp)), check=False, timeout=300)


def test_prints_a_positive_latency_as_json(saved_model, tmp_path):
  export_dir = saved_model.removesuffix("/saved_model")  # the export folder works too
  out_file = tmp_path / "latency.json"
  temp = tmp_path / "temp"
  temp.mkdir()
  result = _latency_main("--saved_model_dir", export_dir, "--batch-sizes", "1,2", "--warmup", "1",
                         "--runs", "3", "--output_file", out_file, temp=temp)
  assert result.returncode == 0, result.stderr
  assert result.stderr == ""  # no TensorFlow log, and no teardown after the report
  report = json.loads(result.stdout)  # stdout is the report and nothing else
  assert report["image_size"] == [32, 32]  # from params.yaml beside the SavedModel
  assert report["input_type"] == "image_tensor" and report["device"]
  assert sorted(report["batch"]) == ["1", "2"]
  for stats in report["batch"].values():
    assert stats["runs"] == 3 and 0 < stats["min_ms"] <= stats["median_ms"]
  assert json.loads(out_file.read_text()) == report
  assert os.listdir(temp) == []


def test_exit_codes_through_the_fast_exit(tmp_path):
  temp = tmp_path / "temp"
  temp.mkdir()
  error = _latency_main("--saved_model_dir", tmp_path, temp=temp)  # TensorFlow loaded, then 1
  assert error.returncode == 1
  assert error.stderr == f"Error: not a SavedModel folder: {tmp_path}\n"  # no teardown either
  usage = _latency_main("--runs", "3", temp=temp)  # argparse: exit 2 before TensorFlow loads
  assert usage.returncode == 2
  assert usage.stderr.splitlines()[-1:] == ["teardown ran"]  # an ordinary exit
  assert "required: --saved_model_dir" in usage.stderr
  assert os.listdir(temp) == []


def test_errors_are_one_line(saved_model, tmp_path, capsys):
  assert latency_main.main(["--saved_model_dir", str(tmp_path)]) == 1
  err = capsys.readouterr().err
  assert err == f"Error: not a SavedModel folder: {tmp_path}\n"
  assert latency_main.main(["--saved_model_dir", saved_model, "--input_type", "tf_example",
                            "--runs", "1"]) == 1
  err = capsys.readouterr().err
  assert len(err.splitlines()) == 1 and err.startswith("Error: input_type tf_example does not"
                                                       " match")
  with pytest.raises(SystemExit) as usage:
    latency_main.main(["--saved_model_dir", saved_model, "--batch_sizes", "one"])
  assert usage.value.code == 2
