"""`python -m tf_vision.serving.latency_main`: the latency image's entry point on a real export."""

import json
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


def test_prints_a_positive_latency_as_json(saved_model, tmp_path):
  export_dir = saved_model.removesuffix("/saved_model")  # the export folder works too
  out_file = tmp_path / "latency.json"
  result = subprocess.run(
      [sys.executable, "-m", "tf_vision.serving.latency_main", "--saved_model_dir", export_dir,
       "--batch-sizes", "1,2", "--warmup", "1", "--runs", "3", "--output_file", str(out_file)],
      capture_output=True, text=True, check=False, timeout=300)
  assert result.returncode == 0, result.stderr
  report = json.loads(result.stdout)  # stdout is the report and nothing else
  assert report["image_size"] == [32, 32]  # from params.yaml beside the SavedModel
  assert report["input_type"] == "image_tensor" and report["device"]
  assert sorted(report["batch"]) == ["1", "2"]
  for stats in report["batch"].values():
    assert stats["runs"] == 3 and 0 < stats["min_ms"] <= stats["median_ms"]
  assert json.loads(out_file.read_text()) == report


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
