"""FastNN hyperparameter files and their mapping onto Model Garden experiment configs."""

import textwrap

import pytest

from nascli.errors import NascliError
from official.core import exp_factory
from official.modeling.optimization.configs import optimization_config as mg_optimization
from official.vision.configs import image_classification  # noqa: F401  (registers experiments)
from official.vision.configs import retinanet  # noqa: F401
from tf_vision.configs import fastnn
from tf_vision.configs import optimization

# FastNN's documented table plus the flags.py flags the brief names.
BRIEF_KEYS = """dataset_name dataset_dir num_sample_per_epoch num_classes train_files
preprocessing_name shuffle_buffer_size num_parallel_batches prefetch_buffer_size
num_preprocessing_threads datasets_use_caching task_type model_name num_epochs weight_decay
max_gradient_norm batch_size model_dir ckpt_file_name warmup_steps warmup_scheme decay_scheme
learning_rate_decay_factor learning_rate_decay_type learning_rate end_learning_rate optimizer
adadelta_rho adagrad_initial_accumulator_value adam_beta1 adam_beta2 opt_epsilon
ftrl_learning_rate_power ftrl_initial_accumulator_value ftrl_l1 ftrl_l2 momentum
rmsprop_momentum rmsprop_decay stop_at_step log_loss_every_n_iters profile_every_n_iters
profile_at_task log_device_placement print_model_statistics hooks use_fp16 loss_scale
enable_paisoar protocol labels_offset save_checkpoints_steps job_name task_index
worker_hosts""".split()


def _write(tmp_path, text, name="hparams.txt"):
  path = tmp_path / name
  path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
  return path


def _resnet():
  return optimization.upgrade_optimization_config(exp_factory.get_exp_config("resnet_imagenet"))


# ------------------------------------------------------------------------------------------
# Keys and file format.

def test_every_brief_key_is_known_with_fastnn_types_and_defaults():
  assert set(BRIEF_KEYS) <= set(fastnn.FASTNN_KEYS)
  spec = fastnn.FASTNN_KEYS
  assert (spec["batch_size"].type, spec["batch_size"].default) == (int, 32)
  assert (spec["learning_rate"].type, spec["learning_rate"].default) == (float, 0.01)
  assert (spec["optimizer"].default, spec["opt_epsilon"].default) == ("rmsprop", 1.0)
  assert (spec["use_fp16"].type, spec["use_fp16"].default) == (bool, True)
  assert spec["weight_decay"].default == 0.00004
  assert spec["learning_rate_decay_type"].choices == ("fixed", "exponential", "polynomial")
  assert spec["decay_scheme"].choices == ("", "luong234", "luong5", "luong10")
  assert spec["max_gradient_norm"].optional and spec["max_gradient_norm"].default is None
  # Every key is either mapped, left to the caller, or noted as without effect.
  assert set(fastnn._SETTERS) == set(fastnn.FASTNN_KEYS)  # pylint: disable=protected-access
  assert fastnn.CALLER_KEYS >= {"dataset_name", "dataset_dir", "train_files", "model_name",
                                "model_dir", "ckpt_file_name", "task_type"}


def test_parse_good_file(tmp_path):
  path = _write(tmp_path, """
      # FastNN hyperparameters for flowers
      enable_paisoar=False

      batch_size = 128   # per GPU
      use_fp16=true
      datasets_use_caching=0
      log_device_placement=True
      print_model_statistics=1
      dataset_name=flowers
      dataset_dir=/data/flowers#1
      model_name="inception_resnet_v2"
      optimizer=sgd
      learning_rate=1e-3
      ftrl_learning_rate_power=-0.5
      max_gradient_norm=None
      decay_scheme=
      --num_classes=5
      job_name=worker
  """)
  assert fastnn.parse_hparams_file(path) == {
      "enable_paisoar": False, "batch_size": 128, "use_fp16": True,
      "datasets_use_caching": False, "log_device_placement": True,
      "print_model_statistics": True, "dataset_name": "flowers",
      "dataset_dir": "/data/flowers#1", "model_name": "inception_resnet_v2",
      "optimizer": "sgd", "learning_rate": 0.001, "ftrl_learning_rate_power": -0.5,
      "max_gradient_norm": None, "decay_scheme": "", "num_classes": 5, "job_name": "worker"}


@pytest.mark.parametrize("line,message", [
    ("batch_size 128", "expected key=value, got 'batch_size 128'"),
    ("=5", "missing key before '=' in '=5'"),
    ("enable_paisora=True", "unknown key 'enable_paisora' (did you mean 'enable_paisoar'?)"),
    ("zzz=1", "unknown key 'zzz'"),
    ("batch_size=12.5", "key 'batch_size' must be an integer, got '12.5'"),
    ("learning_rate=fast", "key 'learning_rate' must be a number, got 'fast'"),
    ("learning_rate=nan", "key 'learning_rate' must be a finite number, got 'nan'"),
    ("use_fp16=yes", "key 'use_fp16' must be True/False/true/false/1/0, got 'yes'"),
    ("optimizer=adamw", "key 'optimizer' must be one of 'adadelta', 'adagrad', 'adam', 'ftrl',"
     " 'momentum', 'sgd', 'rmsprop', 'adamweightdecay'; got 'adamw' (did you mean 'adam'?)"),
    ("decay_scheme=luong3", "key 'decay_scheme' must be one of '', 'luong234', 'luong5',"
     " 'luong10'; got 'luong3' (did you mean 'luong234'?)"),
    ("batch_size=None", "key 'batch_size' must be an integer, got 'None'"),
])
def test_parse_bad_line_names_file_line_and_key(tmp_path, line, message):
  path = _write(tmp_path, f"# header\nmodel_name=resnet\n\n{line}\nbatch_size_typo_after=1\n")
  with pytest.raises(NascliError) as e:
    fastnn.parse_hparams_file(path)
  assert str(e.value) == f"{path}:4: {message}"
  assert "\n" not in str(e.value)


def test_parse_duplicate_key(tmp_path):
  path = _write(tmp_path, "batch_size=32\nuse_fp16=False\nbatch_size=64\n")
  with pytest.raises(NascliError) as e:
    fastnn.parse_hparams_file(path)
  assert str(e.value) == f"{path}:3: duplicate key 'batch_size' (first set on line 1)"


def test_parse_missing_file(tmp_path):
  with pytest.raises(NascliError, match="hparams file .*nope.txt does not exist"):
    fastnn.parse_hparams_file(tmp_path / "nope.txt")


# ------------------------------------------------------------------------------------------
# Optimization config superset.

def test_our_optimization_config_is_a_strict_superset():
  mg = exp_factory.get_exp_config("resnet_imagenet").trainer.optimizer_config
  ours = optimization.OptimizationConfig()
  ours.override(mg.as_dict(), is_strict=True)
  assert ours.as_dict() == mg.as_dict()
  fresh = optimization.OptimizationConfig()
  fresh.override(mg_optimization.OptimizationConfig().as_dict(), is_strict=True)
  assert fresh.as_dict() == mg_optimization.OptimizationConfig().as_dict()
  for mg_type in ("sgd", "adam", "adamw", "lamb", "lars", "rmsprop", "adagrad", "slide"):
    mg_config = mg_optimization.OptimizationConfig({"optimizer": {"type": mg_type}})
    optimization.OptimizationConfig().override(mg_config.as_dict(), is_strict=True)


def test_upgrade_keeps_every_value_including_unchosen_branches():
  config = exp_factory.get_exp_config("resnet_imagenet")
  config.trainer.optimizer_config.optimizer.adam.beta_1 = 0.5  # not the chosen branch
  before = config.trainer.optimizer_config.as_dict()
  optimization.upgrade_optimization_config(config)
  upgraded = config.trainer.optimizer_config
  assert isinstance(upgraded, optimization.OptimizationConfig)
  assert isinstance(upgraded.optimizer, optimization.OptimizerConfig)
  assert upgraded.as_dict() == before
  assert upgraded.optimizer.adam.beta_1 == 0.5
  assert upgraded.learning_rate.stepwise.boundaries == [30 * 312, 60 * 312, 80 * 312]
  assert optimization.upgrade_optimization_config(config).trainer.optimizer_config is upgraded
  # Our one-of fields are selectable through an ordinary override now.
  config.override({"trainer": {"optimizer_config": {"optimizer": {"type": "ftrl"}}}})
  assert upgraded.optimizer.get().name == "Ftrl"


# ------------------------------------------------------------------------------------------
# apply_fastnn.

FULL = {
    "dataset_name": "flowers", "dataset_dir": "/data", "train_files": "a,b",
    "model_name": "resnet", "model_dir": "/ckpt", "ckpt_file_name": "model.ckpt",
    "task_type": "finetune", "num_classes": 5, "batch_size": 16,
    "shuffle_buffer_size": 512, "prefetch_buffer_size": 8, "datasets_use_caching": True,
    "weight_decay": 0.0005, "stop_at_step": 300, "num_epochs": 3,
    "log_loss_every_n_iters": 20, "save_checkpoints_steps": 100, "optimizer": "rmsprop",
    "rmsprop_decay": 0.8, "rmsprop_momentum": 0.7, "opt_epsilon": 0.01,
    "max_gradient_norm": 5.0, "learning_rate": 0.2, "learning_rate_decay_type": "polynomial",
    "decay_scheme": "luong5", "learning_rate_decay_factor": 0.5, "end_learning_rate": 0.002,
    "warmup_steps": 30, "warmup_scheme": "t2t", "use_fp16": True, "loss_scale": 128.0,
    "labels_offset": 0, "task_index": 1, "worker_hosts": "h1:1,h2:2",
}


def test_apply_full_file_to_resnet_imagenet_on_gpu():
  config = _resnet()
  notes = fastnn.apply_fastnn(config, dict(FULL), has_gpu=True, num_replicas=4)
  task, trainer, runtime = config.task, config.trainer, config.runtime
  assert task.model.num_classes == 5
  assert task.train_data.global_batch_size == 64
  assert task.validation_data.global_batch_size == 64
  assert task.train_data.shuffle_buffer_size == 512
  assert task.train_data.prefetch_buffer_size == 8
  assert task.train_data.cache is True
  assert task.losses.l2_weight_decay == 0.0005
  assert trainer.train_steps == 300
  assert (trainer.steps_per_loop, trainer.summary_interval) == (20, 20)
  assert trainer.checkpoint_interval == 100
  opt = trainer.optimizer_config
  assert opt.optimizer.type == "rmsprop"
  assert (opt.optimizer.rmsprop.rho, opt.optimizer.rmsprop.momentum,
          opt.optimizer.rmsprop.epsilon) == (0.8, 0.7, 0.01)
  assert opt.optimizer.rmsprop.global_clipnorm == 5.0
  assert opt.learning_rate.type == "fastnn"
  assert opt.learning_rate.fastnn.as_dict() == {
      "name": "FastnnDecay", "learning_rate": 0.2, "decay_type": "polynomial",
      "decay_scheme": "luong5", "decay_factor": 0.5, "end_learning_rate": 0.002,
      "total_steps": 300}
  assert opt.warmup.type == "t2t" and opt.warmup.t2t.warmup_steps == 30
  assert runtime.mixed_precision_dtype == "float16" and runtime.loss_scale == 128.0
  assert task.train_data.dtype == "float16" and task.validation_data.dtype == "float16"
  assert (runtime.task_index, runtime.worker_hosts) == (1, "h1:1,h2:2")
  assert runtime.distribution_strategy == "multi_worker_mirrored"
  # Caller keys are not written anywhere.
  assert task.train_data.input_path.endswith("train*")
  assert trainer.optimizer_config.optimizer.get() is opt.optimizer.rmsprop
  assert "num_epochs ignored: stop_at_step sets the training length" in notes
  assert any("caches decoded, augmented examples" in n for n in notes)
  config.validate()


def test_apply_on_cpu_keeps_float32_and_says_so():
  config = _resnet()
  notes = fastnn.apply_fastnn(config, {"use_fp16": True, "loss_scale": 64.0}, has_gpu=False)
  assert config.runtime.mixed_precision_dtype == "float32"
  assert config.task.train_data.dtype == "float32"
  assert config.runtime.loss_scale is None
  assert notes == ["use_fp16=True needs a GPU: training in float32 on this CPU",
                   "loss_scale=64.0 has no effect without float16 training"]


def test_apply_to_retinanet():
  config = optimization.upgrade_optimization_config(
      exp_factory.get_exp_config("retinanet_resnetfpn_coco"))
  notes = fastnn.apply_fastnn(
      config, {"num_classes": 4, "weight_decay": 1e-4, "batch_size": 2, "use_fp16": False,
               "optimizer": "momentum", "momentum": 0.8, "learning_rate_decay_type": "fixed",
               "learning_rate": 0.02, "warmup_steps": 10},
      has_gpu=False, num_replicas=2)
  assert config.task.model.num_classes == 4
  assert config.task.losses.l2_weight_decay == 1e-4
  assert config.task.train_data.global_batch_size == 4
  assert config.task.train_data.dtype == "float32"  # RetinaNet's default is bfloat16.
  assert config.runtime.mixed_precision_dtype == "float32"
  sgd = config.trainer.optimizer_config.optimizer
  assert (sgd.type, sgd.sgd.momentum, sgd.sgd.nesterov) == ("sgd", 0.8, False)
  assert notes == ["warmup_steps=10 has no effect: FastNN's fixed learning rate ignores warmup"]


def test_optimizer_parameters_without_optimizer_tune_the_experiment_optimizer():
  config = _resnet()  # Model Garden's SGD with momentum 0.9.
  notes = fastnn.apply_fastnn(config, {"momentum": 0.5, "adam_beta1": 0.8}, has_gpu=False)
  assert config.trainer.optimizer_config.optimizer.sgd.momentum == 0.5
  assert notes == ["adam_beta1 has no effect with the experiment's optimizer 'sgd'"
                   " (set optimizer= to choose one)"]
  notes = fastnn.apply_fastnn(_resnet(), {"optimizer": "sgd", "momentum": 0.9,
                                          "opt_epsilon": 1.0}, has_gpu=False)
  assert notes == ["momentum has no effect with optimizer=sgd",
                   "opt_epsilon has no effect with optimizer=sgd"]


def test_training_length_from_epochs():
  config = _resnet()
  fastnn.apply_fastnn(config, {"num_epochs": 3, "learning_rate": 0.1, "decay_scheme": "luong234"},
                      has_gpu=False, steps_per_epoch=50)
  assert config.trainer.train_steps == 150
  assert config.trainer.optimizer_config.learning_rate.fastnn.total_steps == 150
  # Steps per epoch from num_sample_per_epoch and the global batch.
  config = _resnet()
  fastnn.apply_fastnn(config, {"num_epochs": 2, "num_sample_per_epoch": 1000, "batch_size": 25},
                      has_gpu=False, num_replicas=2)
  assert config.trainer.train_steps == 40
  # Unknown epoch length: nothing changes, and the note says why.
  config = _resnet()
  train_steps = config.trainer.train_steps
  notes = fastnn.apply_fastnn(config, {"num_epochs": 2}, has_gpu=False)
  assert config.trainer.train_steps == train_steps
  assert notes == ["num_epochs=2 ignored: the number of steps per epoch is unknown (give"
                   " stop_at_step or num_sample_per_epoch)"]


def test_schedule_total_steps_defaults_to_the_experiment_length_and_follows_stop_at_step():
  config = _resnet()
  fastnn.apply_fastnn(config, {"learning_rate": 0.1}, has_gpu=False)
  lr = config.trainer.optimizer_config.learning_rate
  assert lr.type == "fastnn"
  assert lr.fastnn.total_steps == config.trainer.train_steps == 90 * 312
  assert (lr.fastnn.decay_type, lr.fastnn.decay_scheme, lr.fastnn.decay_factor) == (
      "exponential", "", 0.94)
  fastnn.apply_fastnn(config, {"stop_at_step": 77}, has_gpu=False)
  assert lr.fastnn.total_steps == 77


def test_checkpoint_interval_is_aligned_to_steps_per_loop():
  config = _resnet()
  notes = fastnn.apply_fastnn(config, {"log_loss_every_n_iters": 10,
                                       "save_checkpoints_steps": 25}, has_gpu=False)
  assert (config.trainer.steps_per_loop, config.trainer.checkpoint_interval) == (10, 30)
  assert notes == ["checkpoint interval 25 is not a multiple of steps_per_loop 10:"
                   " checkpoints every 30 steps"]
  # A new log interval re-aligns the experiment's own checkpoint interval (312 here).
  config = _resnet()
  fastnn.apply_fastnn(config, {"log_loss_every_n_iters": 100}, has_gpu=False)
  assert config.trainer.checkpoint_interval == 400


def test_warmup_schemes():
  config = _resnet()  # Model Garden's linear warmup.
  notes = fastnn.apply_fastnn(config, {"warmup_steps": 100, "warmup_scheme": "linear"},
                              has_gpu=False)
  assert config.trainer.optimizer_config.warmup.type is None
  assert notes == ["warmup_scheme='linear' is not 't2t': no warmup (as FastNN)"]
  config = _resnet()
  fastnn.apply_fastnn(config, {"warmup_steps": 0}, has_gpu=False)
  assert config.trainer.optimizer_config.warmup.type is None
  config = _resnet()
  fastnn.apply_fastnn(config, {"warmup_steps": 7}, has_gpu=False)  # scheme defaults to t2t
  assert config.trainer.optimizer_config.warmup.get().warmup_steps == 7


def test_keys_without_effect_are_noted():
  hparams = {"enable_paisoar": True, "protocol": "grpc", "hooks": "StopAtStepHook",
             "profile_every_n_iters": 5, "profile_at_task": 0, "job_name": "worker",
             "log_device_placement": True, "num_parallel_batches": 4}
  notes = fastnn.apply_fastnn(_resnet(), hparams, has_gpu=False)
  assert len(notes) == len(hparams)
  for key, note in zip(sorted(hparams), sorted(notes)):
    assert note.startswith(f"{key}=") and "has no effect" in note


def test_apply_errors_name_the_key():
  with pytest.raises(NascliError, match=r"key 'labels_offset' \(1\) is not supported"):
    fastnn.apply_fastnn(_resnet(), {"labels_offset": 1}, has_gpu=False)
  fastnn.apply_fastnn(_resnet(), {"labels_offset": 0}, has_gpu=False)
  with pytest.raises(NascliError, match=r"unknown FastNN key 'batchsize' \(did you mean"
                                        r" 'batch_size'\?\)"):
    fastnn.apply_fastnn(_resnet(), {"batchsize": 3}, has_gpu=False)
  with pytest.raises(NascliError, match="FastNN key 'batch_size' must be an integer, got 2.5"):
    fastnn.apply_fastnn(_resnet(), {"batch_size": 2.5}, has_gpu=False)
  with pytest.raises(NascliError, match="FastNN key 'learning_rate_decay_type' must be one of"):
    fastnn.apply_fastnn(_resnet(), {"learning_rate_decay_type": "cosine"}, has_gpu=False)
  with pytest.raises(NascliError, match="FastNN learning rate .*'luong234' needs total_steps"):
    config = _resnet()
    config.trainer.train_steps = 0
    fastnn.apply_fastnn(config, {"decay_scheme": "luong234"}, has_gpu=False)
  # Strings (e.g. from command-line options) are parsed like file values.
  config = _resnet()
  fastnn.apply_fastnn(config, {"batch_size": "8", "use_fp16": "false"}, has_gpu=True)
  assert config.task.train_data.global_batch_size == 8
  assert config.runtime.mixed_precision_dtype == "float32"
