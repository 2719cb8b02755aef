"""--latency_model in a search: every proposal's latency predicted before it trains.

The driver (search_loop.py) asks the gate about each proposal right after it journals it. The
prediction is deterministic (the same architecture always gets the same number), so resume and
early stopping are unchanged. Every trial reports it as its latency (TrialSpec.predicted_latency:
no trial times itself), and under `--latency_constraint hard` with a target a proposal predicted
over `target * (1 + --latency_margin)` is not trained: the driver journals `over_target` with
the penalty reward.py defines and tells the controller at once, and `Controller.rebuild`
replays it in journal order. Such proposals do not count toward --max_nas_trial.

Two refusals before anything is journaled, in one line each: a model of another space or input
size than the search's (`check_space`), and a target below the fastest architecture the model
predicts for the whole space. During the search, MAX_OVER_TARGET_RUN proposals in a row over the
target stop it: the controller does not find the part of the space that meets it.

TensorFlow-free and pyglove-free (the model file is JSON read with numpy): the CLI loads the
model in milliseconds, before any framework.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from nascli import storage
from nascli.errors import NascliError
from nascli.run_spec import LatencyModelRef, TrialSettings
from nascli.search import job_state
from nascli.search import reward as reward_lib

# Proposals in a row predicted over the hard target after which the search stops as unable to
# reach it. Each costs a prediction and two journal lines (milliseconds), so the bound is set by
# how rarely it may stop a search that could go on: if a fraction p of the space meets the
# target and proposals were independent draws, 100 misses in a row happen with probability
# (1 - p)**100: 0.6% at p = 5%, 4.8% at p = 3%. A learning controller, which is told every
# miss, does better than independent draws. 50 would stop 7.7% of the searches at p = 5%.
MAX_OVER_TARGET_RUN = 100
EVENT = "over_target"


def reference(path: str) -> LatencyModelRef:
  """The search's setting for the model file at `path`: its absolute path and fingerprint.

  Raises:
    NascliError: missing, corrupt or truncated file (one line, naming it).
  """
  model = _load(path)
  return LatencyModelRef(path if storage.is_gcs(path) else os.path.abspath(path),
                         model.fingerprint())


def _load(path: str) -> Any:
  from nascli import latency_model  # pylint: disable=g-import-not-at-top
  return latency_model.load(path)


def _size(size: Any) -> int | None:
  """The side of a square input size (`32`, `[32, 32]`, `[32, 32, 3]`)."""
  if isinstance(size, (list, tuple)) and size:
    size = size[0]
  return int(size) if isinstance(size, (int, float)) and not isinstance(size, bool) else None


class Gate:
  """A search's latency model, its target and what it decides about each proposal."""

  def __init__(self, settings: TrialSettings, objectives: Sequence[Any] | None = None):
    """Loads the model of `settings.latency_model` and checks it is the one the search's
    settings name (a model file rewritten since the job began is refused).

    Raises:
      NascliError: the file is missing, damaged or another model than the settings'.
    """
    ref = settings.latency_model
    if ref is None:
      raise ValueError("a Gate needs settings with a latency_model")
    self.path = ref.path
    self.model = _load(ref.path)
    found = self.model.fingerprint()
    if ref.fingerprint and found != ref.fingerprint:
      raise NascliError(
          f"--latency_model {ref.path} is not the latency model this search began with (its"
          f" fingerprint is {found[:12]}, the search's {ref.fingerprint[:12]}): restore that"
          " file, or start a new search with --overwrite or another --local_output_dir")
    self.target = settings.target_device_latency_ms
    self.margin = float(settings.latency_margin or 0.0)
    self.hard = settings.latency_constraint == "hard" and self.target is not None
    self.objectives = tuple(objectives) if objectives else None
    if self.hard and self.objectives:
      reward_lib.over_target_values(self.objectives, 1.0)  # refuses what it cannot tell
    self._cache: dict[str, float] = {}

  @property
  def limit_ms(self) -> float | None:
    """Predictions above this are over the target (None: no hard target)."""
    return self.target * (1.0 + self.margin) if self.hard else None

  def device(self) -> dict[str, Any]:
    """The predictions' `latency_device` (nascli/latency_source.py): predicted by this model."""
    return self.model.latency_device(self.path)

  def measure_request(self) -> dict[str, Any]:
    """What a worker needs to time an exported trial as the model's measurements were timed
    (nascli/search/measured.py)."""
    return {"runtime": self.model.runtime, "num_threads": self.model.num_threads or 1,
            "input_size": _size(self.model.input_size), "model": self.path}

  def _where(self) -> str:
    size = _size(self.model.input_size)
    return f"{self.model.runtime}" + (f" at {size}x{size}" if size else "")

  def check_space(self, space_name: str, space: Any, input_size: int | None) -> None:
    """Refuses, in one line, a model of another space (name or decisions) or input size than
    the search's (`input_size`: the side its latency is for; None: not known yet).

    Raises:
      NascliError: as above.
    """
    from nascli import latency_model  # pylint: disable=g-import-not-at-top
    latency_model.check_matches(self.model, space=space_name,
                                decisions=latency_model.decisions_of_space(space),
                                input_size=input_size, path=self.path)

  def check_target(self, space_name: str) -> None:
    """Refuses, in one line, a target below the fastest architecture the model predicts for
    the whole space (under either constraint: no architecture meets it, so it says nothing).

    Raises:
      NascliError: as above.
    """
    if self.target is None:
      return
    fastest, _ = self.model.fastest()
    if fastest > self.target * (1.0 + self.margin):
      margin = f" (+{self.margin:.0%} --latency_margin)" if self.margin else ""
      raise NascliError(
          f"--target_device_latency_ms {self.target:g}{margin} is below the fastest"
          f" architecture of {space_name} the latency model predicts ({fastest:.3g} ms,"
          f" {self._where()}): no architecture can meet it")

  def latency_ms(self, nas_params: Mapping[str, Any]) -> float:
    """The predicted latency of an architecture, in ms (cached: a trial asks again for each
    attempt)."""
    key = repr(sorted(nas_params.items()))
    if key not in self._cache:
      self._cache[key] = float(self.model.predict(dict(nas_params)))
    return self._cache[key]

  def prediction(self, nas_params: Mapping[str, Any]) -> dict[str, Any]:
    """What a trial reports as its latency (TrialSpec.predicted_latency)."""
    return {"latency_ms": self.latency_ms(nas_params), "latency_device": self.device()}

  def over(self, latency_ms: float) -> bool:
    limit = self.limit_ms
    return limit is not None and latency_ms > limit

  def penalty(self, latency_ms: float) -> float | list[float]:
    """What the controller is told for a proposal over the target (reward.py)."""
    if self.objectives:
      return reward_lib.over_target_values(self.objectives, latency_ms)
    return reward_lib.over_target_penalty(latency_ms, self.target)

  def over_target_event(self, trial_id: str, latency_ms: float) -> dict[str, Any]:
    """The journal event of a proposal that is not trained (job_state.py)."""
    return {"event": EVENT, "trial_id": trial_id, "latency_ms": latency_ms,
            "target_ms": self.target, "margin": self.margin,
            "reward": self.penalty(latency_ms), "latency_device": self.device()}


def unreachable(state: job_state.JobState, settings: Mapping[str, Any] | None = None,
                algorithm: str | None = None) -> str | None:
  """The line that stops a search whose last MAX_OVER_TARGET_RUN proposals were all over the
  target, with the range of their predicted latencies (from the journal alone); None while the
  search may go on."""
  run = state.over_target_run()
  if len(run) < MAX_OVER_TARGET_RUN:
    return None
  seen = [state.metrics[t]["latency_ms"] for t in run]
  trial = (settings or state.settings or {}).get("trial") or {}
  target, margin = trial.get("target_device_latency_ms"), trial.get("latency_margin") or 0
  by = f"the {algorithm} controller" if algorithm else "this controller"
  return (f"search stopped: --target_device_latency_ms {target:g}"
          + (f" (+{margin:.0%} --latency_margin)" if margin else "")
          + f" is unreachable in practice for {by}: its last {len(run)} proposals were all"
          f" predicted over it ({min(seen):.3g}-{max(seen):.3g} ms, not trained); raise the"
          " target, or try another --search_algorithm")
