"""Which decisions of the search space matter: Optuna's fANOVA over the journal's trials.

The trials become an in-memory Optuna study (`create_trial`: each decision a categorical
parameter over its candidates' indices, the value the trial's reward or one objective), and
`optuna.importance.FanovaImportanceEvaluator` (Hutter et al. 2014: the share of the reward's
variance each decision explains, from a random forest) ranks them. Optuna's and not a forest of
our own: it is the evaluator optuna-dashboard shows, and a reader can reproduce it.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

# A nas_params value: "<index>/<num_candidates> (<literal>)", the literal part optional.
_VALUE_RE = re.compile(r'(\d+)/(\d+)(?: \((.*)\))?', re.S)
# Below this many scored trials a forest explains noise; the page says so instead.
MIN_TRIALS = 5
# Fewer trees than Optuna's 64: the search refreshes the page after every trial, and the
# ranking of a few decisions is stable with 16 (seeded: the same journal, the same page).
N_TREES = 16


def choice(value: Any) -> tuple[int, int] | None:
  """(index, number of candidates) of a categorical decision's value, else None."""
  match = _VALUE_RE.fullmatch(value.strip()) if isinstance(value, str) else None
  if not match:
    return None
  index, count = int(match.group(1)), int(match.group(2))
  return (index, count) if 0 <= index < count else None


def importances(nas_params: Sequence[Mapping[str, Any]], values: Sequence[float]
                ) -> dict[str, float] | None:
  """{decision: importance (sums to 1)}, most important first; None when there are fewer than
  MIN_TRIALS trials or no decision varies among them. Decisions that are not categorical
  (pg.floatv) are left out."""
  if len(values) < MIN_TRIALS:
    return None
  keys: dict[str, int] = {}
  for params in nas_params:
    for key, value in params.items():
      parsed = choice(value)
      if parsed is None:
        keys[key] = -1
      elif keys.get(key, 0) >= 0:
        keys[key] = max(keys.get(key, 0), parsed[1])
  varying = [k for k, n in keys.items() if n > 1 and len(
      {choice(p.get(k)) for p in nas_params if choice(p.get(k)) is not None}) > 1]
  if not varying:
    return None
  # pylint: disable=g-import-not-at-top
  import optuna
  from optuna.distributions import CategoricalDistribution
  optuna.logging.set_verbosity(optuna.logging.WARNING)
  distributions = {k: CategoricalDistribution(tuple(range(keys[k]))) for k in varying}
  study = optuna.create_study(direction='maximize')
  for params, value in zip(nas_params, values):
    chosen = {k: choice(params.get(k)) for k in varying}
    if any(c is None for c in chosen.values()):
      continue
    study.add_trial(optuna.trial.create_trial(
        params={k: c[0] for k, c in chosen.items()}, distributions=distributions,
        value=float(value)))
  if len(study.trials) < MIN_TRIALS:
    return None
  evaluator = optuna.importance.FanovaImportanceEvaluator(n_trees=N_TREES, seed=0)
  result = optuna.importance.get_param_importances(study, evaluator=evaluator, normalize=True)
  return {k: float(v) for k, v in result.items()}
