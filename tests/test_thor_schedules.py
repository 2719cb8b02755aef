"""THOR's learning-rate and damping schedules against MindSpore's (fastnn_thor.md §B.6/B.7)."""

import decimal

import numpy as np
import pytest
import tf_keras

from official.modeling.optimization import optimizer_factory
from tf_vision.configs import optimization
from tf_vision.optimization import thor_schedules

SPE = 5004  # ImageNet steps per epoch at 8 x 32


def mindspore_lr(lr_init, lr_decay, lr_end_epoch, steps_per_epoch, decay_epochs=39):
  """MindSpore resnet_thor train.py get_model_lr, ported line by line."""
  out = []
  for i in range(steps_per_epoch * lr_end_epoch):
    epoch = (i + 1) / steps_per_epoch
    lr = lr_init * (1.0 - float(epoch) / lr_end_epoch) ** lr_decay
    if epoch >= decay_epochs:
      lr = lr * 0.5
    if epoch >= decay_epochs + 1:
      lr = lr * 0.5
    out.append(lr)
  return np.array(out, np.float32)


def mindspore_damping(damping_init, damping_decay, steps_per_epoch, total_epochs):
  """MindSpore resnet_thor train.py get_model_damping."""
  out = []
  for step in range(steps_per_epoch * total_epochs):
    epoch = (step + 1) / steps_per_epoch
    out.append(damping_init * (damping_decay ** (epoch / 10)))
  return np.array(out, np.float32)


def _at_epochs(schedule, epochs):
  return [float(schedule(int(round(e * SPE)) - 1)) for e in epochs]


# §B.7: values at e = 1/10/20/30/39/40, as printed there.
LR_TABLE = {
    "ascend": ((0.045, 6, 70), ["0.0413", "0.0178", "0.00598", "0.00157", "1.7e-4", "7.0e-5"]),
    "gpu_old": ((0.04, 5, 58), ["0.0367", "0.0155", "0.00483", "0.00105", "7.5e-5", "2.9e-5"]),
    "gpu_new": ((0.05672, 4.9687, 50),
                ["0.0513", "0.0187", "0.00448", "0.000598", "1.5e-5", "4.8e-6"]),
}


def assert_rounds_to(value: float, printed: str) -> None:
  """`value` rounds to `printed` at the last digit printed."""
  last_place = decimal.Decimal(printed).as_tuple().exponent
  assert abs(value - float(printed)) <= 0.5 * 10.0 ** last_place, (value, printed)


@pytest.mark.parametrize("config", sorted(LR_TABLE))
def test_lr_matches_the_reference_table(config):
  (lr_init, lr_decay, lr_end), expected = LR_TABLE[config]
  schedule = thor_schedules.ThorPolynomial(lr_init, lr_decay, lr_end, SPE)
  for value, printed in zip(_at_epochs(schedule, [1, 10, 20, 30, 39, 40]), expected):
    assert_rounds_to(value, printed)


def test_lr_equals_mindspore_array_every_step():
  spe, end = 7, 50
  schedule = thor_schedules.ThorPolynomial(0.05672, 4.9687, end, spe)
  want = mindspore_lr(0.05672, 4.9687, end, spe)
  got = np.array([float(schedule(i)) for i in range(0, spe * end, 3)], np.float32)
  np.testing.assert_allclose(got, want[::3], rtol=1e-6, atol=0)
  assert float(schedule(spe * end + 5)) == 0.0  # past the end: 0, not NaN


def test_lr_halving_epochs_configurable():
  spe = 10
  default = thor_schedules.ThorPolynomial(0.1, 2, 50, spe)
  moved = thor_schedules.ThorPolynomial(0.1, 2, 50, spe, halving_epochs=(5,))
  step = 5 * spe - 1  # e = 5 exactly
  assert float(moved(step)) == pytest.approx(0.5 * float(default(step)), rel=1e-6)
  assert float(moved(step - 1)) == pytest.approx(float(default(step - 1)), rel=1e-6)
  assert float(default(39 * spe - 1)) == pytest.approx(
      0.5 * 0.1 * (1 - 39 / 50) ** 2, rel=1e-6)
  assert float(default(40 * spe - 1)) == pytest.approx(
      0.25 * 0.1 * (1 - 40 / 50) ** 2, rel=1e-6)


# §B.6: values at epochs 0/10/20/30/40, as printed there.
DAMPING_TABLE = {
    "ascend": ((0.03, 0.87), ["0.0300", "0.0261", "0.0227", "0.0198", "0.0172"]),
    "gpu_old": ((0.02, 0.87), ["0.0200", "0.0174", "0.0151", "0.0132", "0.0115"]),
    "gpu_new": ((0.02345, 0.5467), ["0.0235", "0.0128", "0.0070", "0.0038", "0.0021"]),
}


@pytest.mark.parametrize("config", sorted(DAMPING_TABLE))
def test_damping_matches_the_reference_table(config):
  (init, decay), expected = DAMPING_TABLE[config]
  schedule = thor_schedules.ThorDamping(init, decay, SPE)
  for value, printed in zip(_at_epochs(schedule, [0, 10, 20, 30, 40]), expected):
    assert_rounds_to(value, printed)


def test_damping_equals_mindspore_array_at_refresh_steps():
  spe, frequency = 12, 4
  schedule = thor_schedules.ThorDamping(0.02345, 0.5467, spe)
  want = mindspore_damping(0.02345, 0.5467, spe, 30)
  for step in range(0, len(want), frequency):  # refresh k reads damping[k * frequency]
    assert float(schedule(step)) == pytest.approx(float(want[step]), rel=1e-6)


def test_serialization_round_trip():
  for schedule in (thor_schedules.ThorPolynomial(0.04, 5, 58, 100, halving_epochs=(20, 30)),
                   thor_schedules.ThorDamping(0.02, 0.87, 100)):
    config = tf_keras.optimizers.schedules.serialize(schedule)
    again = tf_keras.optimizers.schedules.deserialize(config)
    assert type(again) is type(schedule)  # pylint: disable=unidiomatic-typecheck
    for step in (0, 999, 2500):
      assert float(again(step)) == float(schedule(step))


def test_lr_config_builds_the_schedule():
  config = optimization.OptimizationConfig()
  config.override({"optimizer": {"type": "sgd"}, "learning_rate": {
      "type": "thor_lr", "thor_lr": {"lr_init": 0.04, "lr_decay": 5, "lr_end_epoch": 58,
                                     "steps_per_epoch": SPE, "halving_epochs": [39, 40]}}},
                  is_strict=True)
  assert optimizer_factory.LR_CLS["thor_lr"] is thor_schedules.ThorPolynomial
  lr = optimizer_factory.OptimizerFactory(config).build_learning_rate()
  assert isinstance(lr, thor_schedules.ThorPolynomial)
  assert_rounds_to(_at_epochs(lr, [10])[0], "0.0155")
  with pytest.raises(ValueError):
    thor_schedules.ThorPolynomial(steps_per_epoch=0)
  with pytest.raises(ValueError):
    thor_schedules.ThorDamping(steps_per_epoch=0)
