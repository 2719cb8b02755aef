"""Every shipped YAML recipe loads onto its experiment with no unknown key, and says what it
promises (the THOR recipes' optimizer and schedules; the shapes detection recipe learns)."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPES = {
    "configs/experiments/coco_retinanet_spinenet49_gpu.yaml": "retinanet_spinenet_coco",
    "configs/experiments/digits_clutter_mnasnet_search_cpu.yaml":
        "nas_classification_tunable_mnasnet",
    "configs/experiments/digits_resnet10_cpu.yaml": "nascli_classification",
    "configs/experiments/digits_resnet10_thor_cpu.yaml": "nascli_classification",
    "configs/experiments/imagenet_mnasnet_gpu.yaml": "nascli_classification",
    "configs/experiments/imagenet_resnet50_gpu.yaml": "resnet_imagenet",
    "configs/experiments/mnasnet_search_finetune_gpu.yaml": "nas_classification_tunable_mnasnet",
    "configs/experiments/mnasnet_search_gpu.yaml": "nas_classification_tunable_mnasnet",
    "configs/experiments/resnet50_thor_gpu.yaml": "resnet_imagenet",
    "configs/experiments/shapes_retinanet_spinenet_mobile_cpu.yaml": "nascli_retinanet",
    "configs/experiments/spinenet_search_finetune_gpu.yaml": "nas_retinanet_tunable_spinenet",
    "configs/experiments/spinenet_search_gpu.yaml": "nas_retinanet_tunable_spinenet",
    "test_files/fast_nas_classification_search_for_testing.yaml":
        "nas_classification_tunable_mnasnet",
    "test_files/fast_nas_detection_spinenet_search_for_testing.yaml":
        "nas_retinanet_tunable_spinenet",
}


def _load(recipe):
  from tf_vision import params as params_lib  # pylint: disable=g-import-not-at-top
  params = params_lib.load_experiment(RECIPES[recipe])
  path = str(ROOT / "tf_vision" / recipe)
  params_lib.apply_override(params, params_lib.load_yaml_source(path, path), path)
  return params


def test_every_recipe_is_listed():
  shipped = {str(p.relative_to(ROOT / "tf_vision")) for p in
             [*(ROOT / "tf_vision").glob("configs/experiments/*.yaml"),
              *(ROOT / "tf_vision").glob("test_files/*.yaml")]}
  assert shipped == set(RECIPES)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipe_loads_with_no_unknown_key(recipe):
  params = _load(recipe)
  assert params.trainer.train_steps > 0


def test_thor_gpu_recipe_has_the_seed_values():
  params = _load("configs/experiments/resnet50_thor_gpu.yaml")
  opt = params.trainer.optimizer_config
  assert opt.optimizer.type == "thor" and opt.learning_rate.type == "thor_lr"
  thor, lr = opt.optimizer.thor, opt.learning_rate.thor_lr
  assert (thor.damping_init, thor.damping_decay, thor.frequency) == (0.02345, 0.5467, 834)
  assert (lr.lr_init, lr.lr_decay, lr.lr_end_epoch) == (0.05672, 4.9687, 50)
  assert params.task.train_data.global_batch_size == 32 * 8
  assert params.task.losses.label_smoothing == 0.1
  assert thor.steps_per_epoch == lr.steps_per_epoch == 1281167 // 256
  assert (thor.steps_per_epoch % thor.frequency) == 0  # THOR: frequency divides the epoch
  assert params.trainer.train_steps == 40 * thor.steps_per_epoch


def test_thor_cpu_recipe_refreshes_divide_the_epoch():
  params = _load("configs/experiments/digits_resnet10_thor_cpu.yaml")
  thor = params.trainer.optimizer_config.optimizer.thor
  assert thor.steps_per_epoch == 1079 // 32 and thor.steps_per_epoch % thor.frequency == 0


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_recipe_passes_the_trainer_invariants_as_written(recipe):
  """Every key a recipe writes counts as the user's: nothing in it may need a silent fix."""
  # pylint: disable=g-import-not-at-top
  from tf_vision import params as params_lib
  from tf_vision.configs import consistency
  params = _load(recipe)
  path = str(ROOT / "tf_vision" / recipe)
  written = params_lib.load_yaml_source(path, path)
  explicit = {key: recipe for key in params_lib.leaves(written)}
  # The GPU recipes are meant for 1, 2, 4 or 8 GPUs: batches must split evenly over 8.
  replicas = 8 if recipe.endswith("_gpu.yaml") else 1
  before = params.as_dict()
  consistency.check(consistency.Context(params=params, explicit=explicit, num_replicas=replicas))
  assert params.as_dict() == before


# Slow tier (400 steps): the default tier trains and evaluates RetinaNet with COCO metrics
# (tests/test_train_detection.py).
@pytest.mark.slow
def test_shapes_detection_recipe_learns(cli, tmp_path):
  """The documented detection recipe must detect shapes after a short run of it: its first
  version (BN momentum 0.99, learning rate 0.02) still scored 0.000 on every metric at 200."""
  # pylint: disable=g-import-not-at-top
  from nascli.data.convert import ShardingOptions, convert
  from nascli.data.source import ConvertOptions
  data = tmp_path / "shapes"
  convert("shapes", data, ConvertOptions(num_samples=256, validation_size=32, progress=False),
          ShardingOptions(num_shards=2, processes=1))
  recipe = ROOT / "tf_vision/configs/experiments/shapes_retinanet_spinenet_mobile_cpu.yaml"
  steps = 80  # a fifth of the recipe, its schedule shortened to match
  code, out, err = cli(
      "train", "--model", "retinanet", "--dataset_dir", data, "--model_dir", tmp_path / "run",
      "--config_file", recipe, "--seed", "1", "--json", "--params_override",
      f"trainer.train_steps={steps},trainer.checkpoint_interval={steps},"
      f"trainer.validation_interval={steps},"
      f"trainer.optimizer_config.learning_rate.cosine.decay_steps={steps}")
  assert code == 0, err
  metrics = json.loads(out)["eval_metrics"]
  # A model that has not learnt detects nothing: AP50 and ARmax100 are exactly 0.
  assert metrics["ARmax100"] > 0.1 and metrics["AP50"] > 0.01, {
      key: metrics[key] for key in ("AP", "AP50", "ARmax100")}
