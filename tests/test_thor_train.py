"""THOR selected from a config in a real `nascli train` run: it learns, resumes, and evaluates."""

import json
import os

import pytest

from conftest import convert_digits32
from conftest import nascli_subprocess

RECIPE = "tf_vision/configs/experiments/digits_resnet10_thor_cpu.yaml"


@pytest.fixture(scope="module")
def digits32(tmp_path_factory):
  return convert_digits32(tmp_path_factory.mktemp("digits32"), num_shards=2)


def test_thor_recipe_trains_and_resumes(digits32, tmp_path):
  model_dir = tmp_path / "run"
  common = ["train", "--experiment", "nascli_classification", "--dataset_dir", digits32,
            "--config_file", RECIPE, "--model_dir", model_dir, "--json"]
  first = nascli_subprocess(*common, "--params_override",
                            "trainer.train_steps=33,trainer.checkpoint_interval=33,"
                            "trainer.steps_per_loop=33", "--mode", "train")
  assert first.returncode == 0, first.stderr[-2000:]
  assert json.loads(first.stdout)["step"] == 33
  again = nascli_subprocess(*common, "--params_override",
                            "trainer.train_steps=66,trainer.checkpoint_interval=33,"
                            "trainer.steps_per_loop=33")
  assert again.returncode == 0, again.stderr[-2000:]
  result = json.loads(again.stdout)
  assert result["resumed_from"] == 33 and result["step"] == 66
  # 66 steps (2 epochs of 33) of THOR on ResNet-10 from scratch: far above chance (0.1).
  assert result["eval_metrics"]["accuracy"] > 0.6, result["eval_metrics"]
  from tf_vision.model_dir import load_params  # pylint: disable=g-import-not-at-top
  params = load_params(str(model_dir))
  assert params.trainer.optimizer_config.optimizer.type == "thor"
  assert params.trainer.optimizer_config.learning_rate.type == "thor_lr"
  # THOR's state is in the checkpoint: factors and per-kernel inverses.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  names = [n for n, _ in tf.train.list_variables(os.path.join(model_dir, "ckpt-66"))]
  assert any("thor_a_inv" in n for n in names) and any("thor_0_a" in n for n in names), names[:20]
  with open(model_dir / "log", encoding="utf-8") as f:
    assert [line.split(",")[0] for line in f] == ["epoch: 1 step: 33", "epoch: 2 step: 33"]
