"""FastNN learning-rate schedules: the formulas of FastNN's optimizer_utils.py at chosen steps.

Expected values are computed here in plain Python from FastNN's definitions (warmup factor
0.01 ** ((W - t) / W), staircase exponential decay, linear polynomial decay), independently of
the schedule code, then compared with the schedules built directly and through Model Garden's
OptimizerFactory.
"""

import math

import pytest
import tf_keras

from official.modeling.optimization import optimizer_factory
from official.modeling.optimization import lr_schedule
from tf_vision.configs import optimization
from tf_vision.optimization import schedules

BASE = 0.1


def fastnn_lr(t, *, base=BASE, warmup_steps=0, decay_type="exponential", scheme="",
              total=300, factor=0.94, end=0.0001):
  """FastNN's learning rate at step t, written from its definition (float64)."""
  if decay_type == "fixed":
    return base
  lr_w = base * 0.01 ** ((warmup_steps - t) / warmup_steps) if t < warmup_steps else base
  if scheme:
    start = {"luong234": int(total * 2 / 3), "luong5": int(total / 2),
             "luong10": int(total / 2)}[scheme]
    times = {"luong234": 4, "luong5": 5, "luong10": 10}[scheme]
    decay_steps = int((total - start) / times)
  else:
    start, decay_steps = total, 0
  if t < start or decay_steps == 0:
    return lr_w
  if decay_type == "exponential":
    return lr_w * factor ** math.floor((t - start) / decay_steps)
  p = min(t - start, decay_steps) / decay_steps
  return (lr_w - end) * (1 - p) + end


def values(schedule, steps):
  return [float(schedule(s)) for s in steps]


def test_t2t_warmup_brief_numbers():
  sched = schedules.T2tWarmup(schedules.FastnnDecay(BASE, total_steps=1000), warmup_steps=100)
  assert values(sched, [0, 50, 100, 150]) == pytest.approx([0.001, 0.01, 0.1, 0.1], rel=1e-5)
  # Exponential growth: each step multiplies by 100 ** (1 / W).
  assert float(sched(11)) / float(sched(10)) == pytest.approx(100 ** (1 / 100), rel=1e-5)


def test_zero_warmup_steps_is_no_warmup():
  sched = schedules.T2tWarmup(schedules.FastnnDecay(BASE, total_steps=100), warmup_steps=0)
  assert values(sched, [0, 1, 99]) == pytest.approx([BASE] * 3)


def test_luong234_exponential_with_factor_half():
  # S=300: start = 200, decay_steps = int(100 / 4) = 25.
  sched = schedules.FastnnDecay(BASE, total_steps=300, decay_scheme="luong234",
                                decay_factor=0.5)
  assert (sched.start_decay_step, sched.decay_steps) == (200, 25)
  steps = [0, 199, 200, 224, 225, 249, 250, 299]
  expected = [BASE, BASE, BASE, BASE, BASE / 2, BASE / 2, BASE / 4, BASE / 8]
  assert values(sched, steps) == pytest.approx(expected, rel=1e-6)
  assert expected == pytest.approx(
      [fastnn_lr(t, scheme="luong234", factor=0.5) for t in steps])


@pytest.mark.parametrize("scheme,start,decay_steps", [("luong5", 50, 10), ("luong10", 50, 5)])
def test_luong5_and_luong10(scheme, start, decay_steps):
  sched = schedules.FastnnDecay(BASE, total_steps=100, decay_scheme=scheme, decay_factor=0.5)
  assert (sched.start_decay_step, sched.decay_steps) == (start, decay_steps)
  steps = [0, start - 1, start, start + decay_steps - 1, start + decay_steps, 99]
  expected = [fastnn_lr(t, scheme=scheme, total=100, factor=0.5) for t in steps]
  assert values(sched, steps) == pytest.approx(expected, rel=1e-6)
  # Decays by 1/2 `times` times at most before S.
  times = 5 if scheme == "luong5" else 10
  assert float(sched(99)) == pytest.approx(BASE * 0.5 ** (times - 1), rel=1e-6)


def test_luong_scheme_rounds_like_python_int():
  # S=301: start = int(200.67) = 200, decay_steps = int(101 / 4) = 25.
  sched = schedules.FastnnDecay(BASE, total_steps=301, decay_scheme="luong234")
  assert (sched.start_decay_step, sched.decay_steps) == (200, 25)


def test_polynomial_ramps_to_end_learning_rate_then_stays():
  end = 0.001
  sched = schedules.FastnnDecay(BASE, total_steps=300, decay_type="polynomial",
                                decay_scheme="luong234", end_learning_rate=end)
  steps = [0, 199, 200, 210, 220, 224, 225, 260, 299, 1000]
  expected = [fastnn_lr(t, decay_type="polynomial", scheme="luong234", end=end)
              for t in steps]
  assert values(sched, steps) == pytest.approx(expected, rel=1e-5)
  assert float(sched(210)) == pytest.approx(BASE - (BASE - end) * 10 / 25, rel=1e-5)
  assert values(sched, [225, 299, 1000]) == pytest.approx([end] * 3, rel=1e-5)


def test_fixed_is_constant_and_ignores_warmup_and_scheme():
  decay = schedules.FastnnDecay(BASE, total_steps=300, decay_type="fixed",
                                decay_scheme="luong234", decay_factor=0.5)
  sched = schedules.T2tWarmup(decay, warmup_steps=100)
  assert values(sched, [0, 50, 200, 299, 5000]) == pytest.approx([BASE] * 5)
  assert values(decay, [0, 299]) == pytest.approx([BASE] * 2)


def test_empty_scheme_never_decays_before_total_steps():
  for decay_type in ("exponential", "polynomial"):
    sched = schedules.FastnnDecay(BASE, total_steps=300, decay_type=decay_type,
                                  decay_factor=0.5)
    assert (sched.start_decay_step, sched.decay_steps) == (300, 0)
    # FastNN would divide by decay_steps=0 from step S on; ours keeps the rate.
    assert values(sched, [0, 150, 299, 300, 301]) == pytest.approx([BASE] * 5)


def test_warmup_overlapping_polynomial_decay_matches_fastnn():
  # W > start: FastNN decays the warmed-up rate, which is not a plain product.
  kw = dict(decay_type="polynomial", scheme="luong234", end=0.01)
  sched = schedules.T2tWarmup(
      schedules.FastnnDecay(BASE, total_steps=300, decay_type="polynomial",
                            decay_scheme="luong234", end_learning_rate=0.01),
      warmup_steps=250)
  steps = [0, 100, 199, 200, 210, 240, 249, 250, 299]
  assert values(sched, steps) == pytest.approx(
      [fastnn_lr(t, warmup_steps=250, **kw) for t in steps], rel=1e-5)


def test_warmup_overlapping_exponential_decay_matches_fastnn():
  sched = schedules.T2tWarmup(
      schedules.FastnnDecay(BASE, total_steps=300, decay_scheme="luong234", decay_factor=0.5),
      warmup_steps=250)
  steps = [0, 199, 200, 230, 249, 250, 299]
  assert values(sched, steps) == pytest.approx(
      [fastnn_lr(t, warmup_steps=250, scheme="luong234", factor=0.5) for t in steps],
      rel=1e-5)


def test_t2t_warmup_multiplies_other_schedules_and_constants():
  poly = lr_schedule.PolynomialDecayWithOffset(initial_learning_rate=BASE, decay_steps=100,
                                               end_learning_rate=0.0)
  sched = schedules.T2tWarmup(poly, warmup_steps=10)
  assert float(sched(5)) == pytest.approx(float(poly(5)) * 0.01 ** 0.5, rel=1e-5)
  assert float(sched(50)) == pytest.approx(float(poly(50)), rel=1e-6)
  const = schedules.T2tWarmup(0.2, warmup_steps=4)
  assert values(const, [0, 2, 4]) == pytest.approx([0.002, 0.02, 0.2], rel=1e-5)


def test_errors_name_the_culprit():
  with pytest.raises(ValueError, match="unknown decay scheme 'luong3'"):
    schedules.FastnnDecay(BASE, total_steps=300, decay_scheme="luong3")
  with pytest.raises(ValueError, match="unknown learning-rate decay type 'cosine'"):
    schedules.FastnnDecay(BASE, total_steps=300, decay_type="cosine")
  with pytest.raises(ValueError, match="'luong5' needs total_steps"):
    schedules.FastnnDecay(BASE, total_steps=0, decay_scheme="luong5")
  with pytest.raises(ValueError, match="warmup_steps must be >= 0"):
    schedules.T2tWarmup(BASE, warmup_steps=-1)


def test_tiny_total_steps_decays_every_step_instead_of_nan():
  # S=5, luong10: FastNN's decay_steps int(3/10) = 0 would give NaN; we decay every step.
  sched = schedules.FastnnDecay(BASE, total_steps=5, decay_scheme="luong10", decay_factor=0.5)
  assert (sched.start_decay_step, sched.decay_steps) == (2, 1)
  assert values(sched, [0, 1, 2, 3, 4]) == pytest.approx(
      [BASE, BASE, BASE, BASE / 2, BASE / 4])


def test_get_config_round_trip():
  decay = schedules.FastnnDecay(BASE, total_steps=300, decay_type="polynomial",
                                decay_scheme="luong5", decay_factor=0.7,
                                end_learning_rate=0.003, name="d")
  assert decay.get_config() == {
      "learning_rate": BASE, "total_steps": 300, "decay_type": "polynomial",
      "decay_scheme": "luong5", "decay_factor": 0.7, "end_learning_rate": 0.003, "name": "d"}
  sched = schedules.T2tWarmup(decay, warmup_steps=40)
  again = schedules.T2tWarmup.from_config(sched.get_config())
  assert isinstance(again.after_warmup_lr_sched, schedules.FastnnDecay)
  steps = [0, 20, 40, 150, 160, 299]
  assert values(again, steps) == pytest.approx(values(sched, steps))
  # Keras' generic (de)serialization finds them by their registered names.
  restored = tf_keras.optimizers.schedules.deserialize(
      tf_keras.optimizers.schedules.serialize(sched))
  assert values(restored, steps) == pytest.approx(values(sched, steps))


def _factory(lr: dict, warmup: dict | None = None):
  config = optimization.OptimizationConfig({
      "optimizer": {"type": "sgd"},
      "learning_rate": {"type": "fastnn", "fastnn": lr},
      "warmup": warmup or {"type": None},
  })
  return optimizer_factory.OptimizerFactory(config)


def test_registered_in_model_garden_tables():
  assert optimizer_factory.LR_CLS["fastnn"] is schedules.FastnnDecay
  assert optimizer_factory.WARMUP_CLS["t2t"] is schedules.T2tWarmup
  # Registering again (a re-import) is a no-op; another class under the key is refused.
  schedules.register_schedule(optimizer_factory.LR_CLS, "fastnn", schedules.FastnnDecay)
  with pytest.raises(ValueError, match="already registered"):
    schedules.register_schedule(optimizer_factory.LR_CLS, "fastnn", schedules.T2tWarmup)
  assert optimizer_factory.LR_CLS["fastnn"] is schedules.FastnnDecay


def test_factory_builds_the_same_schedules():
  lr = {"learning_rate": BASE, "decay_type": "exponential", "decay_scheme": "luong234",
        "decay_factor": 0.5, "total_steps": 300}
  factory = _factory(lr, {"type": "t2t", "t2t": {"warmup_steps": 100}})
  built = factory.build_learning_rate()
  assert isinstance(built, schedules.T2tWarmup)
  assert isinstance(built.after_warmup_lr_sched, schedules.FastnnDecay)
  steps = [0, 50, 100, 199, 200, 225, 299]
  expected = [fastnn_lr(t, warmup_steps=100, scheme="luong234", factor=0.5) for t in steps]
  assert values(built, steps) == pytest.approx(expected, rel=1e-5)
  assert expected[:3] == pytest.approx([0.001, 0.01, 0.1])
  optimizer = factory.build_optimizer(built)
  assert isinstance(optimizer, tf_keras.optimizers.legacy.SGD)
  assert optimizer.learning_rate is built

  plain = _factory({"learning_rate": BASE, "decay_type": "polynomial",
                    "decay_scheme": "luong10", "end_learning_rate": 0.0, "total_steps": 100}
                   ).build_learning_rate()
  assert isinstance(plain, schedules.FastnnDecay)
  steps = [0, 49, 50, 52, 54, 55, 99]
  assert values(plain, steps) == pytest.approx(
      [fastnn_lr(t, decay_type="polynomial", scheme="luong10", total=100, end=0.0)
       for t in steps], rel=1e-5, abs=1e-9)
