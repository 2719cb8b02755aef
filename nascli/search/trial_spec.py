"""What one attempt of one trial is told: TrialSpec (trial_spec.json) and its RungSpec."""

import dataclasses
import json
import os
from typing import Any

from nascli import storage
from nascli.run_spec import Architecture, TrialSettings, from_dict
from nascli.search import rungs


@dataclasses.dataclass
class RungSpec:
  """Early stopping: the rung an attempt trains to (0: the first), and the ladder's settings
  (scheduler.rung_steps: the steps depend on the trial's train_steps, known once its config is
  built)."""
  rung: int
  min_steps: int | None  # None: ceil(train_steps / reduction_factor**2)
  reduction_factor: int
  # latency_ms, params, flops of the trial's first rung (from the journal), once reported.
  measured: dict[str, Any] = dataclasses.field(default_factory=dict)
  # --paused_trials_per_worker: paused trials the warm worker keeps in memory, so that its
  # next rung continues there without a rebuild (tf_vision.train_lib.PausedRuns).
  kept_per_worker: int = 0

  def step(self, train_steps: int) -> int:
    steps = rungs.rung_steps(self.min_steps, self.reduction_factor, train_steps)
    return steps[min(self.rung, len(steps) - 1)]


@dataclasses.dataclass
class TrialSpec:
  """One attempt of one trial, as trial_spec.json holds it: the trial's architecture and the
  search's trial settings, as they are (its run's seed: a trial trains the same wherever it
  runs)."""
  job_dir: str
  trial_id: str
  search_space: str  # --prebuilt_search_space (with a module: the space it may be based on)
  nas_params: dict[str, str]
  trial: TrialSettings = dataclasses.field(default_factory=TrialSettings)
  spawned_at: float | None = None  # time.time() when the driver asked for the attempt
  # --search_space_module: the trial imports it and decodes nas_params against its space.
  search_space_module: str | None = None
  rung: RungSpec | None = None  # early stopping; None: the whole budget in one attempt
  # --latency_calculator external: the trial's folder in the job dir, where it asks the
  # calculator and reads its answer (None: trial_dir; a gs:// job dir's trials run staged).
  latency_dir: str | None = None
  # --latency_model: the latency the driver predicted before the trial trained, {latency_ms,
  # latency_device} (nascli/search/latency_gate.py): reported as it is, and nothing is timed.
  predicted_latency: dict[str, Any] | None = None

  @property
  def trial_dir(self) -> str:
    return os.path.join(self.job_dir, self.trial_id)

  def train_args(self) -> Any:
    """The nascli.training.TrainArgs this trial trains with: the search's run, this
    architecture, into the trial dir."""
    from nascli import training  # pylint: disable=g-import-not-at-top
    run = dataclasses.replace(self.trial.run, architecture=Architecture(
        self.search_space, self.nas_params, self.search_space_module))
    if self.trial.latency_input_size:  # params.yaml says where the model is timed
      run = dataclasses.replace(run, options=training.merge(run.options, {
          "task": {"latency_input_size": self.trial.latency_input_size}}))
    return training.TrainArgs(run=run, model_dir=self.trial_dir, keep_model=True,
                              stop_at=self.rung.step if self.rung else None,
                              curve_points=self.trial.validation_curve_points,
                              # A later rung, or a retried attempt, continues the data stream.
                              checkpoint_input=True,
                              keep_paused=self.rung.kept_per_worker if self.rung else 0)

  def space(self) -> Any:
    """The registry entry of the trial's space (its module imported and registered first)."""
    from tf_vision import search_spaces  # pylint: disable=g-import-not-at-top
    return search_spaces.resolve_search_space(self.search_space, self.search_space_module)


def write_spec(spec_path: str, spec: TrialSpec) -> None:
  storage.write_text(spec_path, json.dumps(dataclasses.asdict(spec), indent=2))


def read_spec(spec_path: str) -> TrialSpec:
  with open(spec_path, encoding="utf-8") as f:
    return from_dict(TrialSpec, json.load(f), what=spec_path)
