"""Latency is timed at the size the model will serve, not at the size a proxy trains at."""

import dataclasses
import json

import pytest

from nascli.run_spec import DataSpec, ProxySettings, RunSpec, TrialSettings
from nascli.search import trial as trial_lib
from tests.conftest import convert_digits32

TESTING_YAML = "tf_vision/test_files/fast_nas_classification_search_for_testing.yaml"


def _nas_params() -> dict[str, str]:
  # pylint: disable=g-import-not-at-top
  from nascli.search import controller
  from tf_vision import search_spaces
  space = search_spaces.resolve_search_space("mnasnet", None).build()
  return controller.random_architectures(space, 1, 0)[0]


NAS_PARAMS = _nas_params()


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
  return convert_digits32(tmp_path_factory.mktemp("digits"), num_shards=2)


def _run(digits, **proxy) -> RunSpec:
  return RunSpec(config_files=[TESTING_YAML], seed=0, data=DataSpec(dataset_dir=digits),
                 proxy=ProxySettings(**proxy) if proxy else None)


def test_a_proxy_that_trains_smaller_keeps_the_recipes_serving_size(digits):
  # pylint: disable=g-import-not-at-top
  from nascli import training
  from nascli.run_spec import Architecture
  from tf_vision.serving import export_lib
  run = dataclasses.replace(_run(digits, image_size=16),
                            architecture=Architecture("mnasnet", NAS_PARAMS))
  params = training.plan(training.TrainArgs(run=run)).params
  assert list(params.task.model.input_size) == [16, 16, 3]
  assert params.task.latency_input_size == 32  # the recipe's size, carried in params.yaml
  assert export_lib.serving_size_of(params) == 32
  assert export_lib.serving_size_of(params, override=64) == 64
  served = export_lib.at_serving_size(params)
  assert list(served.task.model.input_size) == [32, 32, 3]
  assert list(params.task.model.input_size) == [16, 16, 3]  # a copy: the trial's is intact
  plain = training.plan(training.TrainArgs(run=dataclasses.replace(run, proxy=None))).params
  assert plain.task.latency_input_size is None and export_lib.serving_size_of(plain) == 32
  assert export_lib.at_serving_size(plain) is plain


def test_a_trial_trained_at_a_proxy_size_is_timed_at_the_serving_size(digits, tmp_path):
  """A trial trains at 16x16 and is timed at --latency_input_size 40; its analysis says so."""
  run = dataclasses.replace(_run(digits, image_size=16, train_steps=4),
                            options={"trainer": {"validation_steps": 1}})
  spec = trial_lib.TrialSpec(
      job_dir=str(tmp_path), trial_id="1", search_space="mnasnet", nas_params=NAS_PARAMS,
      trial=TrialSettings(run=run, latency_runs=3, latency_input_size=40))
  analysis = trial_lib.run(spec)
  device = analysis["latency_device"]
  assert device["source"] == "trial" and device["input_size"] == 40
  assert analysis["latency"]["image_size"] == [40, 40]
  assert "fresh weights" in analysis["latency"]["measured_on"]
  from tf_vision import model_dir  # pylint: disable=g-import-not-at-top
  saved = model_dir.load_params(str(tmp_path / "1"))
  assert saved.task.latency_input_size == 40  # what the latency calculator reads
  assert list(saved.task.model.input_size) == [16, 16, 3]
  from nascli import latency_source  # pylint: disable=g-import-not-at-top
  label = latency_source.describe(device)
  assert label.startswith("measured in the trial") and "40x40" in label, label
  json.dumps(analysis)  # what model_analysis.json holds
