"""Config precedence and bad config input, through the same planning code `nascli train` runs."""

import pytest

from nascli.errors import NascliError
from nascli.training import TrainArgs, plan


@pytest.fixture(scope="module")
def digits_dir(tmp_path_factory):
  from nascli.data.convert import ShardingOptions, convert  # pylint: disable=g-import-not-at-top
  from nascli.data.source import ConvertOptions  # pylint: disable=g-import-not-at-top
  out = tmp_path_factory.mktemp("digits")
  convert("digits", out, ConvertOptions(image_size=16, progress=False),
          ShardingOptions(num_shards=2, processes=1))
  return str(out)


def test_data_set_fills_classes_size_and_paths(digits_dir):
  p = plan(TrainArgs(dataset_dir=digits_dir)).params
  assert p.task.model.num_classes == 10
  assert list(p.task.model.input_size) == [16, 16, 3]
  assert p.task.train_data.input_path.endswith("train-*-of-00002.tfrecord")
  assert p.task.validation_data.input_path.endswith("validation-*-of-00002.tfrecord")
  assert p.task.train_data.decode_jpeg_only is False


def test_precedence_defaults_config_files_override_hparams_options(digits_dir, tmp_path):
  first = tmp_path / "a.yaml"
  first.write_text("trainer:\n  train_steps: 111\n  steps_per_loop: 1\n"
                   "task:\n  losses:\n    l2_weight_decay: 0.5\n")
  second = tmp_path / "b.yaml"
  second.write_text("trainer:\n  train_steps: 222\n")
  hp = tmp_path / "hp.txt"
  hp.write_text("# FastNN file\noptimizer=adam\nlearning_rate=0.003\nstop_at_step=444\n"
                "weight_decay=0.25\n")
  args = TrainArgs(dataset_dir=digits_dir, config_files=[str(first), str(second)],
                   params_override="trainer.train_steps=333,task.model.num_classes=12")
  p = plan(args).params
  assert p.trainer.train_steps == 333  # override beats both files
  assert p.task.losses.l2_weight_decay == 0.5  # first file, untouched later
  assert p.task.model.num_classes == 12  # override beats the data set
  args.hparams_file = str(hp)
  p = plan(args).params
  assert p.trainer.train_steps == 444  # FastNN file beats --params_override
  assert p.task.losses.l2_weight_decay == 0.25
  opt = p.trainer.optimizer_config
  assert opt.optimizer.type == "adam" and opt.learning_rate.type == "fastnn"
  assert opt.learning_rate.fastnn.learning_rate == pytest.approx(0.003)
  args.fastnn = {"learning_rate": 0.007, "optimizer": "ftrl"}
  p = plan(args).params
  assert p.trainer.optimizer_config.optimizer.type == "ftrl"  # options beat the file
  assert p.trainer.optimizer_config.learning_rate.fastnn.learning_rate == pytest.approx(0.007)


def test_batch_size_and_epochs_from_dataset_info(digits_dir):
  p = plan(TrainArgs(dataset_dir=digits_dir, fastnn={"batch_size": 16, "num_epochs": 3}))
  assert p.params.task.train_data.global_batch_size == 16
  assert p.steps_per_epoch == 1438 // 16
  assert p.params.trainer.train_steps == 3 * (1438 // 16)


@pytest.mark.parametrize("kind,text,message", [
    ("override", "task.model.num_clases=3",
     "unknown config key 'task.model.num_clases' in --params_override (did you mean"
     " 'num_classes'?)"),
    ("file", "trainer:\n  train_stepz: 3\n", "unknown config key 'trainer.train_stepz' in"
     " --config_file"),
    ("hparams", "learning_rate=0.1\nlearnin_rate=3\n", ":2: unknown key 'learnin_rate'"),
    ("hparams", "optimizer=adamax\n", "key 'optimizer' must be one of"),
    ("hparams", "just a line\n", ":1: expected key=value"),
])
def test_bad_config_names_the_key_and_source(digits_dir, tmp_path, kind, text, message):
  args = TrainArgs(dataset_dir=digits_dir)
  path = tmp_path / "x"
  path.write_text(text)
  if kind == "override":
    args.params_override = text
  elif kind == "file":
    args.config_files = [str(path)]
  else:
    args.hparams_file = str(path)
  with pytest.raises(NascliError) as e:
    plan(args)
  assert message in str(e.value)
  assert "\n" not in str(e.value)


def test_unknown_experiment_and_missing_data(digits_dir):
  with pytest.raises(NascliError, match="unknown --experiment 'resnet_imagenett'.*did you mean"
                     " 'resnet_imagenet'"):
    plan(TrainArgs(experiment="resnet_imagenett", dataset_dir=digits_dir))
  with pytest.raises(NascliError, match="--training_data_path /nope/train-\\* matches no files"):
    plan(TrainArgs(training_data_path="/nope/train-*", validation_data_path="/nope/v*"))
  with pytest.raises(NascliError, match="the data is a classification data set but the"
                     " experiment is detection \\(use --model classification\\)"):
    plan(TrainArgs(dataset_dir=digits_dir, model="retinanet"))


def test_fastnn_model_name_and_eval_files(digits_dir, tmp_path):
  hp = tmp_path / "hp.txt"
  hp.write_text("model_name=mobilenet_v2_035\n"
                "eval_files=validation-00001-of-00002.tfrecord\n")
  p = plan(TrainArgs(dataset_dir=digits_dir, hparams_file=str(hp))).params
  assert p.task.model.backbone.type == "mobilenet"
  assert p.task.model.backbone.mobilenet.model_id == "MobileNetV2"
  assert p.task.model.backbone.mobilenet.filter_size_scale == pytest.approx(0.35)
  assert p.task.validation_data.input_path.endswith("/validation-00001-of-00002.tfrecord")
  hp.write_text("model_name=inception_resnet_v2\n")
  with pytest.raises(NascliError, match="model_name 'inception_resnet_v2' has no Model Garden"):
    plan(TrainArgs(dataset_dir=digits_dir, hparams_file=str(hp)))


def test_nas_params_str_selects_the_tunable_backbone_and_its_blocks(digits_dir, tmp_path):
  import json  # pylint: disable=g-import-not-at-top
  import pyglove as pg  # pylint: disable=g-import-not-at-top
  from tf_vision.search_spaces import get_search_space, nas_params  # pylint: disable=g-import-not-at-top
  space = get_search_space("mnasnet")
  algo = pg.geno.Random(seed=5)
  algo.setup(pg.dna_spec(space))
  params = nas_params.to_nas_params(space, algo.propose())
  path = tmp_path / "nas_params_str.json"
  path.write_text(json.dumps(params))
  plan_ = plan(TrainArgs(dataset_dir=digits_dir, nas_params_str=str(path)))
  assert plan_.experiment == "nas_classification_tunable_mnasnet"
  backbone = plan_.params.task.model.backbone
  assert backbone.type == "tunable_mnasnet"
  blocks = json.loads(backbone.tunable_mnasnet.block_specs_json)
  assert len(blocks) == 7
  assert str(blocks[0]["kernel_size"]) in params["blocks[0].kernel_size"]
  params["blocks[0].kernel_size"] = "2/2 (7)"
  with pytest.raises(NascliError, match="blocks\\[0\\].kernel_size"):
    plan(TrainArgs(dataset_dir=digits_dir, nas_params_str=json.dumps(params)))
