"""The run contract (nascli/run_spec.py): one nested RunSpec that train, the config builder, a
search and its trials carry; the config built, completed and locked once, in tf_vision.params.

The expected configs in tests/run_contract/ were written by the code before the contract (its
plan() plus what its _train changed after it): the same command must give the same params.yaml.
"""

import dataclasses
import inspect
import json
import os
from pathlib import Path

import pytest
import yaml

from conftest import convert_digits32
from nascli.errors import NascliError
from nascli.run_spec import Architecture, DataSpec, RunSpec, TrialSettings, from_dict
from test_nas_params import MNASNET_NAS_PARAMS_STR, SPINENET_NAS_PARAMS_STR

HERE = Path(__file__).resolve().parent
TEST_FILES = HERE.parent / "tf_vision" / "test_files"
EXPECTED = HERE / "run_contract"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
  """digits/ (32x32) and shapes/ (128x128), two shards each, as the expected configs saw them."""
  # pylint: disable=g-import-not-at-top
  from nascli.data.convert import ShardingOptions, convert
  from nascli.data.source import ConvertOptions
  root = tmp_path_factory.mktemp("run_contract")
  convert_digits32(root / "digits", num_shards=2)
  convert("shapes", root / "shapes", ConvertOptions(image_size=128, num_samples=32,
                                                     validation_size=8, progress=False),
          ShardingOptions(num_shards=2, processes=1))
  return root


def _runs(root: Path) -> dict:
  """The two runs: flags as `nascli train` would turn them into the contract."""
  # pylint: disable=g-import-not-at-top
  from nascli import training
  return {
      # --config_file, --params_override, a FastNN option, --keep_checkpoint_max, a searched
      # architecture, and multi-worker training without a seed (its file order is seeded).
      "classification": training.TrainArgs(run=RunSpec(
          config_files=[str(TEST_FILES / "fast_nas_classification_search_for_testing.yaml")],
          params_override="trainer.train_steps=30", hparams={"weight_decay": 0.0001},
          options={"trainer": {"max_to_keep": 2}}, data=DataSpec(dataset_dir=str(root / "digits")),
          strategy="multi_worker_mirrored",
          architecture=Architecture("mnasnet", MNASNET_NAS_PARAMS_STR))),
      # A seeded spinenet trial's run into a model dir: the COCO ground truth goes there.
      "detection": training.TrainArgs(run=RunSpec(
          config_files=[str(TEST_FILES / "fast_nas_detection_spinenet_search_for_testing.yaml")],
          data=DataSpec(dataset_dir=str(root / "shapes")), seed=5,
          architecture=Architecture("spinenet", SPINENET_NAS_PARAMS_STR)),
          model_dir="/MODEL_DIR/trial", mode="train_and_post_eval"),
  }


def _differences(want, got, prefix=""):
  if isinstance(want, dict) and isinstance(got, dict):
    return [d for key in sorted(set(want) | set(got))
            for d in _differences(want.get(key), got.get(key), f"{prefix}{key}.")]
  return [] if want == got else [f"{prefix[:-1]}: {want!r} != {got!r}"]


@pytest.mark.parametrize("kind", ["classification", "detection"])
def test_same_command_same_params_yaml_as_before(data_root, kind):
  from nascli import training  # pylint: disable=g-import-not-at-top
  args = _runs(data_root)[kind]
  run_plan = training.plan(args)
  params = run_plan.params
  assert params._locked  # pylint: disable=protected-access  (nothing changes it after build)
  expected = yaml.safe_load((EXPECTED / f"{kind}_params.yaml").read_text().replace(
      "{DATA}", str(data_root)))
  got = yaml.safe_load(yaml.safe_dump(params.as_dict()))  # as params.yaml holds it
  differences = _differences(expected, got)
  assert not differences, differences[:10]
  if kind == "detection":
    assert params.task.train_data.seed == 5 and params.task.train_data.deterministic is True
    # The file the config names is written by the runner, into its model dir, before training.
    gt = run_plan.ground_truth
    assert gt.path == params.task.annotation_file == "/MODEL_DIR/trial/validation_annotations.json"
    assert gt.validation_path == params.task.validation_data.input_path
    assert gt.class_names == {1: "rectangle", 2: "ellipse", 3: "triangle"}
    # A run that does not evaluate needs no ground truth.
    no_eval = training.plan(dataclasses.replace(args, mode="train"))
    assert no_eval.ground_truth is None and no_eval.params.task.annotation_file is None
  else:
    assert params.task.train_data.seed == 20260101  # tf_vision.params.MULTI_WORKER_FILE_SEED
    assert run_plan.ground_truth is None


def test_the_ground_truth_file_is_written_where_the_config_says(data_root, tmp_path):
  from nascli import training  # pylint: disable=g-import-not-at-top
  args = dataclasses.replace(_runs(data_root)["detection"], model_dir=str(tmp_path / "m"))
  run_plan = training.plan(args)
  assert not (tmp_path / "m").exists()  # planning writes nothing
  os.makedirs(tmp_path / "m")
  assert run_plan.ground_truth.write() == run_plan.params.task.annotation_file
  written = json.loads((tmp_path / "m" / "validation_annotations.json").read_text())
  assert len(written["images"]) == 8  # the validation split
  assert {c["name"] for c in written["categories"]} == {"rectangle", "ellipse", "triangle"}


def test_trial_spec_json_is_the_nested_trial_spec(tmp_path):
  from nascli.search import trial as trial_lib  # pylint: disable=g-import-not-at-top
  settings = TrialSettings(run=RunSpec(config_files=["/a.yaml"], data=DataSpec(dataset_dir="/d"),
                                       seed=7), target_device_latency_ms=2.0)
  spec = trial_lib.TrialSpec(job_dir=str(tmp_path), trial_id="3", search_space="mnasnet",
                             nas_params={"blocks[0].kernel_size": "0/2 (3)"}, trial=settings)
  path = str(tmp_path / "trial_spec.json")
  trial_lib.write_spec(path, spec)
  written = json.loads(Path(path).read_text())
  assert written["trial"]["run"]["data"]["dataset_dir"] == "/d"
  assert written["trial"]["target_device_latency_ms"] == 2.0
  assert trial_lib.read_spec(path) == spec
  # What it trains: the search's run with the trial's architecture, into the trial's dir.
  args = spec.train_args()
  assert args.run == dataclasses.replace(
      settings.run, architecture=Architecture("mnasnet", spec.nas_params))
  assert (args.model_dir, args.keep_model) == (str(tmp_path / "3"), True)
  # An older, flat trial_spec.json is refused by name, not misread.
  with pytest.raises(NascliError, match=r"unknown key\(s\) config_files, dataset_dir"):
    from_dict(trial_lib.TrialSpec, {"job_dir": "j", "trial_id": "1", "search_space": "mnasnet",
                                    "nas_params": {}, "config_files": [], "dataset_dir": "d"})


def _search_args(tmp_path, **flags):
  """SearchArgs as `search_in_local` builds them from its flags (its defaults, then `flags`)."""
  # pylint: disable=g-import-not-at-top
  from nascli.commands import search_flags
  from nascli.commands.search_in_local import search_in_local
  values = {name: p.default for name, p in inspect.signature(search_in_local).parameters.items()}
  values.update(local_output_dir=str(tmp_path / "job"), **flags)
  return search_flags.from_flags(values)


def test_search_settings_resume_with_the_same_flags_refuse_others(tmp_path, monkeypatch):
  # pylint: disable=g-import-not-at-top
  from nascli.errors import OutputError
  from nascli.search import journal as journal_lib
  from nascli.search.search_loop import MUTABLE
  monkeypatch.chdir(tmp_path)
  (tmp_path / "c.yaml").write_text("trainer: {}\n")
  args = _search_args(tmp_path, seed=7, config_file=["c.yaml"], target_device_latency_ms=2.0)
  assert args.seed == args.trial.run.seed == 7
  settings = args.settings()
  assert settings["trial"]["run"]["config_files"] == [str(tmp_path / "c.yaml")]  # absolute
  assert args.trial.run.config_files == ["c.yaml"]  # as given
  job = tmp_path / "job"
  journal_lib.check_settings(job, settings, False, mutable_keys=MUTABLE)
  again = _search_args(tmp_path, seed=7, config_file=["c.yaml"], target_device_latency_ms=2.0,
                       export_every_trial=True, max_nas_trial=9)  # mutable ones may change
  journal_lib.check_settings(job, again.settings(), False, mutable_keys=MUTABLE)
  for flags, differs in [({"seed": 8}, "trial.run.seed 7 -> 8"),
                         ({"latency_weight": 0.1}, "trial.latency_weight 0.07 -> 0.1"),
                         ({"dataset_dir": "d"}, "trial.run.data.dataset_dir None ->")]:
    other = _search_args(tmp_path, **{"seed": 7, "config_file": ["c.yaml"],
                                      "target_device_latency_ms": 2.0, **flags})
    with pytest.raises(OutputError, match="other settings") as e:
      journal_lib.check_settings(job, other.settings(), False, mutable_keys=MUTABLE)
    assert differs in str(e.value)


def test_docker_flags_set_the_trials_run(tmp_path):
  from nascli.search import local_main  # pylint: disable=g-import-not-at-top
  args = _search_args(tmp_path, config_file=["a.yaml"])
  model = local_main.apply_docker_flags(args, [
      "params_override=trainer.train_steps=5", "training_data_path=/t-*",
      "validation_data_path=/v-*", "config_file=b.yaml", "experiment=e", "model=retinanet"])
  run = args.trial.run
  assert model == "retinanet"
  assert (run.params_override, run.experiment, run.config_files) == (
      "trainer.train_steps=5", "e", ["a.yaml", "b.yaml"])
  assert (run.data.training_data_path, run.data.validation_data_path) == ("/t-*", "/v-*")


def test_a_proxy_task_shortens_the_recipe_shrinks_the_images_and_takes_part_of_the_data(
    data_root):
  """run_spec.ProxySettings over the classification run: every step count scales with the
  steps (the schedule decays as the recipe's does), the input size and the training files
  change, the validation data does not."""
  # pylint: disable=g-import-not-at-top
  from nascli import training
  from nascli.run_spec import ProxySettings
  args = _runs(data_root)["classification"]
  full = training.plan(args).params
  proxy = ProxySettings(train_steps=15, image_size=24, train_data_fraction=0.5)
  short = training.plan(dataclasses.replace(args, run=dataclasses.replace(
      args.run, proxy=proxy))).params
  lr, short_lr = (p.trainer.optimizer_config.learning_rate for p in (full, short))
  assert (full.trainer.train_steps, short.trainer.train_steps) == (30, 15)
  assert short_lr.cosine.decay_steps * 2 == lr.cosine.decay_steps == 100
  assert short.trainer.steps_per_loop * 2 == full.trainer.steps_per_loop
  assert list(short.task.model.input_size) == [24, 24, 3]
  assert full.task.train_data.input_path.endswith("train-*-of-00002.tfrecord")
  assert short.task.train_data.input_path == full.task.train_data.input_path.replace(
      "*", "00000")
  assert short.task.validation_data.input_path == full.task.validation_data.input_path
  with pytest.raises(NascliError, match="the proxy task: train_data_fraction must be in"):
    training.plan(dataclasses.replace(args, run=dataclasses.replace(
        args.run, proxy=ProxySettings(train_data_fraction=1.5))))
