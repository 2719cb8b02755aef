"""Bad THOR settings fail as one line when the run is planned, like an unknown config key,
not when Model Garden builds the optimizer after the model dir has been written."""

import json

import pytest

from conftest import convert_digits32, nascli_subprocess
from nascli.errors import ConfigValueError
from nascli.run_spec import DataSpec, RunSpec
from nascli.training import TrainArgs, plan

RECIPE = "tf_vision/configs/experiments/digits_resnet10_thor_cpu.yaml"
THOR = "trainer.optimizer_config.optimizer.thor"


@pytest.fixture(scope="module")
def digits_dir(tmp_path_factory):
  return convert_digits32(tmp_path_factory.mktemp("digits"), num_shards=1)


def _thor_override(**fields) -> str:
  return json.dumps({"trainer": {"optimizer_config": {"optimizer": {"thor": fields}}}})


def _train_args(digits_dir, model_dir, override):
  return ["train", "--config_file", RECIPE, "--experiment", "nascli_classification",
          "--dataset_dir", digits_dir, "--model_dir", model_dir, "--params_override", override]


@pytest.mark.parametrize("field,value,culprit", [
    # An unknown key: the behaviour the value errors must match.
    ("precondition_dtyp", "float16", f"unknown config key '{THOR}.precondition_dtyp'"),
    ("precondition_dtype", "float8", f"{THOR}.precondition_dtype is 'float8'; allowed: float32,"
     " bfloat16, float16"),
    ("frequency", 0, f"{THOR}.frequency is 0; allowed: an integer >= 1"),
    ("momentum", 1.5, f"{THOR}.momentum is 1.5; allowed: a number in [0, 1]"),
    ("low_rank", "sometimes", f"{THOR}.low_rank is 'sometimes'; allowed: auto, always, never"),
])
def test_bad_thor_value_one_line_exit_1_no_model_dir(cli, digits_dir, tmp_path, field, value,
                                                     culprit):
  model_dir = tmp_path / "model"
  code, stdout, stderr = cli(*_train_args(digits_dir, model_dir,
                                          _thor_override(**{field: value})))
  assert code == 1, stderr
  assert stderr.startswith("Error: ") and stderr.count("\n") == 1, stderr
  assert culprit in stderr
  assert stdout == ""
  assert not model_dir.exists(), list(model_dir.iterdir())


def test_real_process_no_traceback(digits_dir, tmp_path):
  model_dir = tmp_path / "model"
  proc = nascli_subprocess(*_train_args(digits_dir, model_dir, _thor_override(loss_scale=0)))
  assert proc.returncode == 1, proc.stderr
  assert proc.stderr == (f"Error: invalid config: {THOR}.loss_scale is 0; allowed: a number"
                         " > 0\n")
  assert not model_dir.exists()


def test_only_the_chosen_optimizer_is_checked(digits_dir):
  override = json.dumps({"trainer": {"optimizer_config": {"optimizer": {
      "type": "sgd", "thor": {"block_size": 0}}}}})
  params = plan(TrainArgs(run=RunSpec(
      experiment="nascli_classification", config_files=[RECIPE],
      data=DataSpec(dataset_dir=digits_dir), params_override=override))).params
  assert params.trainer.optimizer_config.optimizer.type == "sgd"
  with pytest.raises(ConfigValueError, match=f"{THOR}.block_size is 0"):
    plan(TrainArgs(run=RunSpec(
        experiment="nascli_classification", config_files=[RECIPE],
        data=DataSpec(dataset_dir=digits_dir), params_override=_thor_override(block_size=0))))
