"""FastNN's eight optimizers, built by Model Garden's OptimizerFactory from FastNN hparams."""
# pylint: disable=protected-access

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from official.core import config_definitions as cfg
from official.modeling.optimization import legacy_adamw
from official.modeling.optimization import optimizer_factory
from official.vision.configs import image_classification as ic
from tf_vision.configs import fastnn
from tf_vision.configs import optimization
from tf_vision.optimization import optimizers
from tf_vision.optimization import schedules

legacy = tf_keras.optimizers.legacy

# FastNN optimizer -> (hparams beyond `optimizer`, class, expected get_config() items).
CASES = {
    "adadelta": ({"adadelta_rho": 0.8, "opt_epsilon": 1e-3}, legacy.Adadelta,
                 {"rho": 0.8, "epsilon": 1e-3}),
    "adagrad": ({"adagrad_initial_accumulator_value": 0.2}, legacy.Adagrad,
                {"initial_accumulator_value": 0.2, "epsilon": 1e-7}),
    "adam": ({"adam_beta1": 0.8, "adam_beta2": 0.99, "opt_epsilon": 0.5}, legacy.Adam,
             {"beta_1": 0.8, "beta_2": 0.99, "epsilon": 0.5, "amsgrad": False}),
    "ftrl": ({"ftrl_learning_rate_power": -0.6, "ftrl_initial_accumulator_value": 0.3,
              "ftrl_l1": 0.01, "ftrl_l2": 0.02}, legacy.Ftrl,
             {"learning_rate_power": -0.6, "initial_accumulator_value": 0.3,
              "l1_regularization_strength": 0.01, "l2_regularization_strength": 0.02}),
    "momentum": ({"momentum": 0.7}, legacy.SGD, {"momentum": 0.7, "nesterov": False}),
    "sgd": ({}, legacy.SGD, {"momentum": 0.0, "nesterov": False}),
    "rmsprop": ({"rmsprop_decay": 0.85, "rmsprop_momentum": 0.6, "opt_epsilon": 0.1},
                legacy.RMSprop, {"rho": 0.85, "momentum": 0.6, "epsilon": 0.1,
                                 "centered": False}),
    "adamweightdecay": ({"adam_beta1": 0.85, "adam_beta2": 0.98, "opt_epsilon": 1e-6},
                        legacy_adamw.AdamWeightDecay,
                        {"beta_1": 0.85, "beta_2": 0.98, "epsilon": 1e-6,
                         "weight_decay_rate": 0.01}),
}


def _experiment() -> cfg.ExperimentConfig:
  return cfg.ExperimentConfig(task=ic.ImageClassificationTask())


def _build(hparams: dict, use_legacy_optimizer: bool = True):
  config = _experiment()
  # A bare ExperimentConfig has no schedule; FastNN's default learning rate stands in.
  hparams = {"learning_rate": 0.01, **hparams}
  fastnn.apply_fastnn(config, hparams, has_gpu=False)
  factory = optimizer_factory.OptimizerFactory(config.trainer.optimizer_config)
  return config, factory.build_optimizer(factory.build_learning_rate(),
                                         use_legacy_optimizer=use_legacy_optimizer)


def _one_step(optimizer, seed=0):
  """One training step of a tiny Dense model; returns (weights before, weights after)."""
  tf_keras.utils.set_random_seed(seed)
  model = tf_keras.Sequential([tf_keras.layers.Dense(2, input_shape=(3,)),
                               tf_keras.layers.Dense(1)])
  x = tf.constant(np.random.RandomState(seed).randn(8, 3), tf.float32)
  y = tf.ones((8, 1))
  before = [w.numpy().copy() for w in model.trainable_variables]
  with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(model(x) - y))
  grads = tape.gradient(loss, model.trainable_variables)
  optimizer.apply_gradients(zip(grads, model.trainable_variables))
  return before, [w.numpy() for w in model.trainable_variables], grads


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimizer_from_fastnn_hparams(name):
  extra, cls, expected = CASES[name]
  config, optimizer = _build({"optimizer": name, "learning_rate": 0.05,
                              "learning_rate_decay_type": "fixed", **extra})
  assert type(optimizer) is cls  # pylint: disable=unidiomatic-typecheck
  got = optimizer.get_config()
  for key, value in expected.items():
    assert got[key] == pytest.approx(value), key
  assert float(optimizer.learning_rate(0)) == pytest.approx(0.05)
  assert isinstance(optimizer.learning_rate, schedules.FastnnDecay)
  before, after, _ = _one_step(optimizer)
  assert all(not np.allclose(b, a) for b, a in zip(before, after)), name
  assert config.trainer.optimizer_config.optimizer.type == fastnn.FASTNN_OPTIMIZERS[name].mg_type


def test_fastnn_defaults_fill_what_the_file_leaves_out():
  _, optimizer = _build({"optimizer": "adam"})
  # FastNN's opt_epsilon default is 1.0 (not Keras' 1e-7); its lr is 0.01.
  assert optimizer.get_config()["epsilon"] == 1.0
  assert float(optimizer.learning_rate(0)) == pytest.approx(0.01)
  _, optimizer = _build({"optimizer": "rmsprop"})
  got = optimizer.get_config()
  assert (got["rho"], got["momentum"], got["epsilon"]) == (0.9, 0.9, 1.0)


def test_adamweightdecay_excludes_like_bert_and_does_not_clip_by_itself():
  config, optimizer = _build({"optimizer": "adamweightdecay"})
  branch = config.trainer.optimizer_config.optimizer.adamw
  assert branch.exclude_from_weight_decay == ["LayerNorm", "layer_norm", "bias"]
  assert optimizer.gradient_clip_norm == 0.0
  assert optimizer._do_use_weight_decay("dense/kernel")
  assert not optimizer._do_use_weight_decay("dense/bias")
  assert not optimizer._do_use_weight_decay("encoder/LayerNorm/gamma")


@pytest.mark.parametrize("name,cls", [("adadelta", tf_keras.optimizers.experimental.Adadelta),
                                      ("ftrl", tf_keras.optimizers.experimental.Ftrl)])
def test_new_style_optimizers_registered_too(name, cls):
  _, optimizer = _build({"optimizer": name, "learning_rate_decay_type": "fixed"},
                        use_legacy_optimizer=False)
  assert type(optimizer) is cls  # pylint: disable=unidiomatic-typecheck
  before, after, _ = _one_step(optimizer)
  assert not np.allclose(before[0], after[0])


def test_max_gradient_norm_bounds_the_global_norm_of_the_update():
  # Plain SGD with lr 1: the update equals the (clipped) gradient.
  hparams = {"optimizer": "sgd", "learning_rate": 1.0, "learning_rate_decay_type": "fixed",
             "max_gradient_norm": 0.5}
  config, optimizer = _build(hparams)
  assert config.trainer.optimizer_config.optimizer.sgd.global_clipnorm == 0.5
  assert optimizer.get_config()["global_clipnorm"] == 0.5
  before, after, grads = _one_step(optimizer)
  grad_norm = float(tf.linalg.global_norm(grads))
  assert grad_norm > 0.5  # The test only means something if clipping had work to do.
  update_norm = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(after, before)))
  assert update_norm == pytest.approx(0.5, rel=1e-4)
  # Without it the full gradient is applied.
  _, optimizer = _build({k: v for k, v in hparams.items() if k != "max_gradient_norm"})
  before, after, _ = _one_step(optimizer)
  update_norm = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(after, before)))
  assert update_norm == pytest.approx(grad_norm, rel=1e-4)


def test_adadelta_and_ftrl_configs_are_the_keras_arguments():
  # OptimizerFactory passes the whole branch dict (name, clip fields included) as kwargs.
  assert optimization.AdadeltaConfig().as_dict() == {
      "clipnorm": None, "clipvalue": None, "global_clipnorm": None, "name": "Adadelta",
      "rho": 0.95, "epsilon": 1e-7}
  ftrl = optimization.FtrlConfig(l1_regularization_strength=0.1, clipnorm=2.0)
  built = legacy.Ftrl(learning_rate=0.1, **ftrl.as_dict())
  assert built.get_config()["l1_regularization_strength"] == pytest.approx(0.1)
  assert built.clipnorm == 2.0


def test_registration_is_idempotent():
  assert optimizer_factory.LEGACY_OPTIMIZERS_CLS["adadelta"] is legacy.Adadelta
  assert optimizer_factory.LEGACY_OPTIMIZERS_CLS["ftrl"] is legacy.Ftrl
  assert optimizer_factory.NEW_OPTIMIZERS_CLS["ftrl"] is tf_keras.optimizers.experimental.Ftrl
  for key, (legacy_cls, new_cls) in optimizers.OPTIMIZERS.items():
    optimizers.register_optimizer(key, legacy_cls, use_legacy_optimizer=True)
    optimizers.register_optimizer(key, new_cls, use_legacy_optimizer=False)
  with pytest.raises(ValueError, match="already registered"):
    optimizers.register_optimizer("ftrl", legacy.Adadelta, use_legacy_optimizer=True)
