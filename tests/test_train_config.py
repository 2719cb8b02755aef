"""Config precedence and bad config input, through the same planning code `nascli train` runs."""

import pytest

from nascli.errors import NascliError
from nascli.run_spec import Architecture, DataSpec, RunSpec
from nascli.training import TrainArgs, plan


def _args(dataset_dir=None, training_data_path=None, validation_data_path=None, nas_params=None,
          **run) -> TrainArgs:
  """TrainArgs of a run with these data flags, searched architecture and other RunSpec fields."""
  return TrainArgs(run=RunSpec(
      data=DataSpec(dataset_dir=dataset_dir, training_data_path=training_data_path,
                    validation_data_path=validation_data_path),
      architecture=Architecture("mnasnet", nas_params) if nas_params else None, **run))


@pytest.fixture(scope="module")
def digits_dir(tmp_path_factory):
  from nascli.data.convert import ShardingOptions, convert  # pylint: disable=g-import-not-at-top
  from nascli.data.source import ConvertOptions  # pylint: disable=g-import-not-at-top
  out = tmp_path_factory.mktemp("digits")
  convert("digits", out, ConvertOptions(image_size=16, progress=False),
          ShardingOptions(num_shards=2, processes=1))
  return str(out)


def test_data_set_fills_classes_size_and_paths(digits_dir):
  p = plan(_args(dataset_dir=digits_dir)).params
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
  args = _args(dataset_dir=digits_dir, config_files=[str(first), str(second)],
                   params_override="trainer.train_steps=333,task.model.num_classes=12")
  p = plan(args).params
  assert p.trainer.train_steps == 333  # override beats both files
  assert p.task.losses.l2_weight_decay == 0.5  # first file, untouched later
  assert p.task.model.num_classes == 12  # override beats the data set
  args.run.hparams_file = str(hp)
  p = plan(args).params
  assert p.trainer.train_steps == 444  # FastNN file beats --params_override
  assert p.task.losses.l2_weight_decay == 0.25
  opt = p.trainer.optimizer_config
  assert opt.optimizer.type == "adam" and opt.learning_rate.type == "fastnn"
  assert opt.learning_rate.fastnn.learning_rate == pytest.approx(0.003)
  args.run.hparams = {"learning_rate": 0.007, "optimizer": "ftrl"}
  p = plan(args).params
  assert p.trainer.optimizer_config.optimizer.type == "ftrl"  # options beat the file
  assert p.trainer.optimizer_config.learning_rate.fastnn.learning_rate == pytest.approx(0.007)


def test_batch_size_and_epochs_from_dataset_info(digits_dir):
  p = plan(_args(dataset_dir=digits_dir, hparams={"batch_size": 16, "num_epochs": 3}))
  assert p.params.task.train_data.global_batch_size == 16
  assert p.steps_per_epoch == 1079 // 16
  assert p.params.trainer.train_steps == 3 * (1079 // 16)


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
  args = _args(dataset_dir=digits_dir)
  path = tmp_path / "x"
  path.write_text(text)
  if kind == "override":
    args.run.params_override = text
  elif kind == "file":
    args.run.config_files = [str(path)]
  else:
    args.run.hparams_file = str(path)
  with pytest.raises(NascliError) as e:
    plan(args)
  assert message in str(e.value)
  assert "\n" not in str(e.value)


def test_unknown_experiment_and_missing_data(digits_dir):
  with pytest.raises(NascliError, match="unknown --experiment 'resnet_imagenett'.*did you mean"
                     " 'resnet_imagenet'"):
    plan(_args(experiment="resnet_imagenett", dataset_dir=digits_dir))
  with pytest.raises(NascliError, match="--training_data_path /nope/train-\\* matches no files"):
    plan(_args(training_data_path="/nope/train-*", validation_data_path="/nope/v*"))
  with pytest.raises(NascliError, match="the data is a classification data set but the"
                     " experiment is detection \\(use --model classification\\)"):
    plan(_args(dataset_dir=digits_dir, model="retinanet"))


def test_fastnn_model_name_and_eval_files(digits_dir, tmp_path):
  hp = tmp_path / "hp.txt"
  hp.write_text("model_name=mobilenet_v2_035\n"
                "eval_files=validation-00001-of-00002.tfrecord\n")
  p = plan(_args(dataset_dir=digits_dir, hparams_file=str(hp))).params
  assert p.task.model.backbone.type == "mobilenet"
  assert p.task.model.backbone.mobilenet.model_id == "MobileNetV2"
  assert p.task.model.backbone.mobilenet.filter_size_scale == pytest.approx(0.35)
  assert p.task.validation_data.input_path.endswith("/validation-00001-of-00002.tfrecord")
  hp.write_text("model_name=inception_resnet_v2\n")
  with pytest.raises(NascliError, match="model_name 'inception_resnet_v2' has no Model Garden"):
    plan(_args(dataset_dir=digits_dir, hparams_file=str(hp)))


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
  # (The experiment's ImageNet schedule alone is refused on the digits: a sized one.)
  plan_ = plan(_args(dataset_dir=digits_dir, nas_params=str(path), params_override=(
      "trainer.train_steps=100,task.train_data.global_batch_size=32,"
      "task.validation_data.global_batch_size=64")))
  assert plan_.experiment == "nas_classification_tunable_mnasnet"
  backbone = plan_.params.task.model.backbone
  assert backbone.type == "tunable_mnasnet"
  blocks = json.loads(backbone.tunable_mnasnet.block_specs_json)
  assert len(blocks) == 7
  assert str(blocks[0]["kernel_size"]) in params["blocks[0].kernel_size"]
  params["blocks[0].kernel_size"] = "2/2 (7)"
  with pytest.raises(NascliError, match="blocks\\[0\\].kernel_size"):
    plan(_args(dataset_dir=digits_dir, nas_params=json.dumps(params)))


# ---- Model Garden's trainer invariants, checked when the config is built (issue 18). ----

NAS_MNASNET = "nas_classification_tunable_mnasnet"


@pytest.fixture(scope="module")
def shapes_dir(tmp_path_factory):
  from nascli.data.convert import ShardingOptions, convert  # pylint: disable=g-import-not-at-top
  from nascli.data.source import ConvertOptions  # pylint: disable=g-import-not-at-top
  out = tmp_path_factory.mktemp("shapes")
  convert("shapes", out, ConvertOptions(image_size=128, num_samples=16, validation_size=8,
                                        progress=False),
          ShardingOptions(num_shards=2, processes=1))
  return str(out)


def test_interval_contradiction_is_refused_before_anything_is_written(cli, digits_dir, tmp_path):
  model_dir = tmp_path / "run"
  code, _, err = cli("train", "--experiment", NAS_MNASNET, "--dataset_dir", digits_dir,
                     "--model_dir", model_dir, "--params_override",
                     "trainer.steps_per_loop=50,trainer.summary_interval=1222")
  assert code == 1
  assert err.strip().splitlines()[-1] == (
      "Error: invalid config: trainer.summary_interval 1222 (from --params_override) is not a"
      " multiple of trainer.steps_per_loop 50 (from --params_override): Orbit writes training"
      " summaries only at the end of a loop; set trainer.summary_interval=1250 or"
      " trainer.steps_per_loop=47")
  assert "ValueError" not in err
  assert not model_dir.exists()  # refused in plan(), before the model dir is made


def test_intervals_the_user_did_not_set_follow_the_steps_per_loop_they_did(digits_dir):
  # The case: only steps_per_loop given; the experiment's 1222-step intervals follow
  # (in a run that does not evaluate: the defaults' validation batch is larger than the digits').
  t = plan(TrainArgs(run=_args(experiment=NAS_MNASNET, dataset_dir=digits_dir,
                               params_override="trainer.steps_per_loop=50,"
                               "trainer.train_steps=1250").run, mode="train")).params.trainer
  assert (t.summary_interval, t.checkpoint_interval, t.validation_interval) == (1250, 1250, 1250)
  # Only an interval given: the default steps_per_loop (50) is lowered to divide it.
  t = plan(_args(dataset_dir=digits_dir,
                     params_override="trainer.summary_interval=30")).params.trainer
  assert (t.steps_per_loop, t.summary_interval, t.checkpoint_interval,
          t.validation_interval) == (30, 30, 60, 300)


@pytest.mark.parametrize("override,message", [
    ("trainer.train_steps=0", "trainer.train_steps 0 (from --params_override): training needs"
     " at least one step; set trainer.train_steps=33 (one epoch)"),
    ("trainer.steps_per_loop=0", "trainer.steps_per_loop 0 (from --params_override): Orbit runs"
     " at least one step per loop; set trainer.steps_per_loop=50"),
    ("trainer.steps_per_loop=50,trainer.checkpoint_interval=75", "trainer.checkpoint_interval 75"
     " (from --params_override) is not a multiple of trainer.steps_per_loop 50 (from"
     " --params_override): checkpoints are saved only at the end of a loop; set"
     " trainer.checkpoint_interval=100 or trainer.steps_per_loop=25"),
    ("trainer.steps_per_loop=40,trainer.validation_interval=300", "trainer.validation_interval"
     " 300 (from --params_override) is not a multiple of trainer.steps_per_loop 40 (from"
     " --params_override): evaluations cut the training loops at these steps; set"
     " trainer.validation_interval=320 or trainer.steps_per_loop=30"),
    ("trainer.validation_interval=-5", "trainer.validation_interval -5 (from --params_override):"
     " a negative interval never advances training; set trainer.validation_interval=300"),
    ("trainer.validation_steps=0", "trainer.validation_steps 0 (from --params_override): Orbit"
     " evaluates a positive number of batches, or -1 for the whole validation set; set"
     " trainer.validation_steps=-1"),
    ("task.validation_data.global_batch_size=0", "task.validation_data.global_batch_size 0 (from"
     " --params_override): a batch holds at least one example; set"
     " task.validation_data.global_batch_size=1"),
    ("trainer.optimizer_config.learning_rate.type=stepwise,"
     "trainer.optimizer_config.learning_rate.stepwise.boundaries=[100,200],"
     "trainer.optimizer_config.learning_rate.stepwise.values=[0.1,0.01]",
     "trainer.optimizer_config.learning_rate.stepwise.boundaries [100, 200] (from"
     " --params_override) and trainer.optimizer_config.learning_rate.stepwise.values [0.1, 0.01]"
     " (from --params_override): a step schedule has one value more than boundaries; give 3"
     " values or 1 boundaries"),
    ("task.init_checkpoint=/ckpts/ckpt-1,task.init_checkpoint_modules=head",
     "task.init_checkpoint_modules head (from --params_override): Model Garden initializes all"
     " or backbone; set task.init_checkpoint_modules=backbone"),
])
def test_trainer_invariants_name_the_keys_and_a_working_value(digits_dir, override, message):
  with pytest.raises(NascliError) as e:
    plan(_args(dataset_dir=digits_dir, params_override=override))
  assert str(e.value) == f"invalid config: {message}"


def test_batch_sizes_against_replicas(digits_dir):
  with pytest.raises(NascliError) as e:
    plan(_args(dataset_dir=digits_dir, strategy="mirrored", num_gpus=2,
                   params_override="task.train_data.global_batch_size=33"))
  assert str(e.value) == (
      "invalid config: task.train_data.global_batch_size 33 (from --params_override) is not"
      " divisible by the 2 replicas (mirrored on runtime.num_gpus 2): every replica gets an equal"
      " share; set task.train_data.global_batch_size=34 or 32")
  # The experiment's own batch sizes (32, 64) are rounded up for 3 replicas, with a note.
  run_plan = plan(_args(dataset_dir=digits_dir, strategy="mirrored", num_gpus=3))
  data = run_plan.params.task
  assert (data.train_data.global_batch_size, data.validation_data.global_batch_size) == (33, 66)
  assert "task.train_data.global_batch_size 32 -> 33: a multiple of the 3 replicas" in (
      run_plan.notes)
  assert run_plan.steps_per_epoch == 1079 // 33


def test_detection_input_size_against_max_level(shapes_dir):
  with pytest.raises(NascliError) as e:
    plan(_args(model="retinanet", dataset_dir=shapes_dir,
                   params_override="task.model.input_size=[100,100,3]"))
  assert str(e.value) == (
      "invalid config: task.model.input_size [100, 100, 3] (from --params_override) does not"
      " divide by 128, 2**task.model.max_level 7: the detector's feature maps halve at each"
      " level; set task.model.input_size=[128, 128, 3]")
  with pytest.raises(NascliError, match=r"does not divide by 256, 2\*\*task.model.max_level 8"
                     r" \(from --params_override\).*set task.model.input_size=\[256, 256, 3\]"):
    plan(_args(model="retinanet", dataset_dir=shapes_dir,
                   params_override="task.model.max_level=8"))


def test_values_nobody_set_are_fixed_silently():
  from tf_vision import params as params_lib  # pylint: disable=g-import-not-at-top
  from tf_vision.configs import consistency  # pylint: disable=g-import-not-at-top
  params = params_lib.load_experiment("nascli_retinanet")
  params.task.model.input_size = [100, 160, 3]
  params.trainer.steps_per_loop = 30  # the defaults' intervals: 10 (summary, checkpoint), 100
  ctx = consistency.Context(params=params)
  consistency.check(ctx)
  assert list(params.task.model.input_size) == [128, 256, 3]
  t = params.trainer
  assert (t.summary_interval, t.checkpoint_interval, t.validation_interval) == (30, 30, 120)


def test_absurd_schedules_get_a_warning_naming_the_numbers(digits_dir, capsys):
  # The values written by the user (the defaults' own are refused: tests/test_stage2.py).
  run_plan = plan(_args(experiment=NAS_MNASNET, dataset_dir=digits_dir, params_override=(
      "trainer.train_steps=12218,task.validation_data.global_batch_size=1024")))
  assert run_plan.warnings == [
      "trainer.train_steps 12218 at global batch 1024 is 11595 epochs of the 1079 training"
      " records (more than 1000): a schedule for a larger data set?",
      "task.validation_data.global_batch_size 1024 is larger than the 359 validation records and"
      " drop_remainder is on: evaluation sees no batch"]
  assert f"warning: {run_plan.warnings[0]}" in capsys.readouterr().err.splitlines()
  run_plan = plan(_args(dataset_dir=digits_dir, params_override=(
      "task.train_data.global_batch_size=2048,trainer.train_steps=10,trainer.steps_per_loop=10")))
  assert run_plan.warnings == [
      "task.train_data.global_batch_size 2048 is larger than the training set (1079 records): an"
      " epoch is shorter than one step",
      "the linear warmup (15 steps) is longer than trainer.train_steps 10: the learning rate never"
      " reaches its peak"]
  assert plan(_args(dataset_dir=digits_dir)).warnings == []  # the default recipe fits
