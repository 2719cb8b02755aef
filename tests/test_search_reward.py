"""MnasNet reward formulas, computed independently."""

import pytest

from nascli.errors import NascliError
from nascli.search import reward


def test_soft_reward_is_mnasnet_formula():
  assert reward.compute(0.8, 20.0, 10.0, "soft", 0.07) == pytest.approx(0.8 * 0.5 ** 0.07)
  assert reward.compute(0.8, 5.0, 10.0, "soft", 0.07) == pytest.approx(0.8 * 2.0 ** 0.07)
  assert reward.compute(0.8, 10.0, 10.0) == pytest.approx(0.8)


def test_hard_reward_penalizes_only_above_target():
  assert reward.compute(0.8, 5.0, 10.0, "hard") == pytest.approx(0.8)
  assert reward.compute(0.8, 10.0, 10.0, "hard") == pytest.approx(0.8)
  assert reward.compute(0.8, 40.0, 10.0, "hard") == pytest.approx(0.2)


def test_accuracy_alone_without_target_and_bad_settings():
  assert reward.compute(0.77, 123.0, None) == 0.77
  with pytest.raises(NascliError, match="unknown --latency_constraint 'medium'"):
    reward.check("medium", 10.0, 0.07)
  with pytest.raises(NascliError, match="must be positive"):
    reward.check("soft", 0.0, 0.07)
