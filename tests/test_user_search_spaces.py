"""User search spaces (`--search_space_module pkg.module.fn`): one registration per space, the
trials decode against the user's space, and stage 2 rebuilds its models.

The spaces are in tests/user_spaces/tiny_mnasnet.py (importable as `user_spaces.tiny_mnasnet`:
pytest puts tests/ on sys.path, the subprocesses get it through PYTHONPATH).
"""

import json
import os
from pathlib import Path
import subprocess
import sys

import pyglove as pg
import pytest

from conftest import nascli_subprocess
from nascli.errors import NascliError
from nascli.run_spec import Architecture, RunSpec, TrialSettings
from nascli.search import local_main
from nascli.search import trial as trial_lib
from nascli.training import with_architecture
from tf_vision import search_spaces
from tf_vision.search_spaces import registry

TESTS = Path(__file__).resolve().parent
MODULE = "user_spaces.tiny_mnasnet"
TINY = f"{MODULE}.tiny_mnasnet"  # registered with the decorator
SHAPED = f"{MODULE}.mnasnet_shaped"  # Vertex's kind: a plain function, mnasnet-shaped
ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
# Ten steps, no evaluation before the end: the trials only have to train and be measured.
SHORT = "trainer.train_steps=10,trainer.steps_per_loop=10,trainer.checkpoint_interval=10"


@pytest.fixture(autouse=True)
def fresh_registry():
  """Each test imports the user module anew; what it registered is gone afterwards (other
  tests assert the registry holds the prebuilt spaces only)."""
  before = set(registry.known_search_spaces())
  yield
  for name in set(registry.known_search_spaces()) - before:
    registry.unregister_search_space(name)
  for name in [m for m in sys.modules if m == "user_spaces" or m.startswith("user_spaces.")]:
    del sys.modules[name]


def _user_module():
  import user_spaces.tiny_mnasnet as module  # pylint: disable=g-import-not-at-top
  return module


def test_each_space_is_registered_once_with_all_it_needs():
  for name in ("_BINDINGS", "register_binding", "binding_for", "known_spaces", "SpaceBinding"):
    assert not hasattr(trial_lib, name), name
  assert not hasattr(local_main, "DEFAULTS") and not hasattr(local_main, "EmbeddedDefault")
  mnasnet = search_spaces.get_entry("mnasnet")
  assert mnasnet.binding == registry.ModelBinding(
      "classification", "nas_classification_tunable_mnasnet", "tunable_mnasnet", "accuracy")
  assert (mnasnet.defaults.dataset, dict(mnasnet.defaults.convert_options)) == (
      "digits", {"image_size": 32})
  assert Path(mnasnet.defaults.config_path()).is_file()
  spinenet = search_spaces.get_entry("spinenet")
  assert (spinenet.binding.model, spinenet.binding.metric, spinenet.defaults.dataset) == (
      "retinanet", "AP", "shapes")
  assert Path(spinenet.defaults.config_path()).is_file()
  # The flag checks read the same registry without pyglove or TensorFlow.
  code = ("import sys; from nascli.commands import search_flags; "
          "print(search_flags.PREBUILT_SEARCH_SPACES, 'pyglove' in sys.modules, "
          "'tensorflow' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True, cwd=str(TESTS.parent))
  assert out.stdout.split() == ["('mnasnet',", "'spinenet')", "False", "False"]


def test_registered_module_space_decodes_with_its_own_block_specs():
  space = search_spaces.resolve_search_space("mnasnet", TINY)
  module = _user_module()
  assert (space.name, space.build, space.based_on) == ("tiny_mnasnet", module.tiny_mnasnet, None)
  # binding='mnasnet': the prebuilt space's model, data and YAML; its own block specs.
  prebuilt = search_spaces.get_entry("mnasnet")
  assert (space.binding, space.defaults) == (prebuilt.binding, prebuilt.defaults)
  nas_params = {"kernel_size": "1/2 (5)", "num_repeats": "1/2 (2)"}
  _, specs = search_spaces.decode("tiny_mnasnet", nas_params)
  assert len(specs) == 7 and specs[1] == {
      "num_repeats": 2, "block_fn": "conv", "expand_ratio": 1, "kernel_size": 5,
      "se_ratio": 0.0, "output_filters": 8}
  assert specs[0]["kernel_size"] == 3 and specs[6]["output_filters"] == 32
  # The stage-2 path (`train --nas_params_str ... --search_space_module ...`).
  run = with_architecture(RunSpec(architecture=Architecture("mnasnet", nas_params, TINY)))
  assert (run.model, run.experiment) == ("classification", "nas_classification_tunable_mnasnet")
  assert json.loads(run.options["task"]["model"]["backbone"]["tunable_mnasnet"][
      "block_specs_json"]) == specs


def test_vertex_style_function_takes_the_prebuilt_space_it_is_shaped_as():
  space = search_spaces.resolve_search_space("mnasnet", SHAPED)
  assert (space.name, space.based_on) == (SHAPED, "mnasnet")
  assert space.binding == search_spaces.get_entry("mnasnet").binding
  assert [str(dp.id) for dp in search_spaces.get_dna_spec(SHAPED).decision_points] == [
      "blocks[1].num_repeats", "blocks[1].kernel_size"]
  _, specs = search_spaces.decode(SHAPED, {"blocks[1].num_repeats": "0/2 (1)",
                                           "blocks[1].kernel_size": "1/2 (5)"})
  assert specs == _user_module().block_specs({"kernel_size": 5, "num_repeats": 1})
  # Not shaped as spinenet's: refused in one line before any trial.
  with pytest.raises(NascliError) as e:
    search_spaces.resolve_search_space("spinenet", SHAPED)
  assert str(e.value) == (
      f"search space module '{SHAPED}': its points are not shaped as the spinenet space's (give"
      " --prebuilt_search_space the space it follows, or register it with its own block_specs):"
      " KeyError: 'intermediate_blocks'")


def test_importing_a_space_module_again_registers_it_again():
  """A warm worker imports the module once per process; a reload, or the same file imported
  under another name, re-runs the decorator: same definition, no error."""
  first = search_spaces.resolve_search_space("mnasnet", TINY)
  del sys.modules[MODULE]
  again = search_spaces.resolve_search_space("mnasnet", TINY)
  assert again.name == "tiny_mnasnet" and again.build is not first.build
  assert registry.get_entry("tiny_mnasnet") == again
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("other_name", TESTS / "user_spaces" /
                                                "tiny_mnasnet.py")
  spec.loader.exec_module(importlib.util.module_from_spec(spec))
  assert registry.get_entry("tiny_mnasnet").build.__module__ == "other_name"
  with pytest.raises(ValueError, match=r"'tiny_mnasnet' is already registered \(by "):
    registry.register_search_space("tiny_mnasnet")(lambda: pg.Dict(x=pg.oneof([1, 2])))


_REFUSE = r"""
import contextlib, io, json, sys
from nascli.app import main
out = []
for argv in json.loads(sys.argv[1]):
  err = io.StringIO()
  with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    code = main(argv)
  out.append([code, err.getvalue()])
print(json.dumps([out, "tensorflow" in sys.modules]))
"""


def test_bad_space_modules_are_refused_in_one_line_before_tensorflow(tmp_path):
  job = str(tmp_path / "job")
  search = ["search_in_local", "--local_output_dir", job, "--search_space_module"]
  cases = [
      (search + [f"{MODULE}.nope"],
       f"search space module '{MODULE}.nope': module '{MODULE}' has no function 'nope'"),
      (search + ["no_such_pkg.spaces.build"],
       "search space module 'no_such_pkg.spaces.build': cannot import module 'no_such_pkg.spaces'"
       " (ModuleNotFoundError: No module named 'no_such_pkg')"),
      (search + [SHAPED, "--prebuilt_search_space", "spinenet"],
       f"search space module '{SHAPED}': its points are not shaped as the spinenet space's"),
      (["train", "--nas_params_str", "{}", "--search_space_module", "spaces-tiny"],
       "--search_space_module 'spaces-tiny': expected a dotted path 'package.module.function'"),
  ]
  proc = subprocess.run([sys.executable, "-c", _REFUSE, json.dumps([a for a, _ in cases])],
                        capture_output=True, text=True, check=False, timeout=120,
                        env=dict(os.environ, **ENV), cwd=str(TESTS.parent))
  assert proc.returncode == 0, proc.stderr
  results, tensorflow_loaded = json.loads(proc.stdout)
  assert not tensorflow_loaded
  for (argv, expected), (code, stderr) in zip(cases, results):
    assert code == 1 and stderr.count("\n") == 1, (argv, stderr)
    assert stderr.startswith(f"Error: {expected}"), (argv, stderr)
  assert not os.path.exists(job)


def test_trial_spec_carries_the_module(tmp_path):
  spec = trial_lib.TrialSpec(job_dir=str(tmp_path), trial_id="1", search_space="mnasnet",
                             nas_params={"kernel_size": "0/2 (3)", "num_repeats": "0/2 (1)"},
                             trial=TrialSettings(), search_space_module=TINY)
  path = str(tmp_path / "trial_spec.json")
  trial_lib.write_spec(path, spec)
  assert json.loads(Path(path).read_text())["search_space_module"] == TINY
  read = trial_lib.read_spec(path)
  assert read == spec and read.space().name == "tiny_mnasnet"
  assert read.train_args().run.architecture == Architecture("mnasnet", spec.nas_params, TINY)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("nascli_cache"))


# Slow tier: the default tier loads, checks and samples user spaces here and runs searches
# and stage 2 on the prebuilt ones (tests/test_search_local.py, tests/test_stage2.py).
@pytest.mark.slow
def test_two_trial_search_on_a_user_space_then_stage_2(cache, tmp_path):
  """A real search of the registered tiny space on the embedded digits (its binding's data and
  YAML), 10 steps a trial, then stage 2 of trial 1 from the job dir. ~1.5-2 min on 2 cores
  (two TensorFlow start-ups and three short trainings): the issue asks for a real search."""
  job = tmp_path / "job"
  proc = nascli_subprocess("search_in_local", "--search_space_module", TINY,
                           "--local_output_dir", job, "--seed", "1", "--max_nas_trial", "2",
                           "--export_top_k", "0", "--search_docker_flags",
                           f"params_override={SHORT}", "--json",
                           env=dict(ENV, NASCLI_CACHE_DIR=cache))
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = json.loads(proc.stdout)
  assert [(r["trial_id"], r["status"]) for r in rows] == [("1", "completed"), ("2", "completed")]
  assert rows[0]["nas_params"] != rows[1]["nas_params"]
  module = _user_module()
  sizes = set()
  for r in rows:
    assert list(r["nas_params"]) == ["kernel_size", "num_repeats"]  # the user's decisions
    assert r["accuracy_metric"] == "accuracy" and 0 <= r["accuracy"] <= 1
    trial = job / r["trial_id"]
    assert json.loads((trial / "trial_spec.json").read_text())["search_space_module"] == TINY
    chosen = pg.materialize(module.tiny_mnasnet(),
                            search_spaces.from_nas_params("tiny_mnasnet", r["nas_params"]))
    assert _block_specs(trial / "params.yaml") == module.block_specs(chosen)
    sizes.add(json.loads((trial / "model_analysis.json").read_text())["params"])
  assert len(sizes) == 2  # two architectures of the user's space, two model sizes
  # One warm worker ran both trials: the module imported and registered once per process.
  assert sorted(os.listdir(job / "workers")) == ["worker-1.log"]
  assert f"search {job}: tiny_mnasnet, tpe" in proc.stderr  # the search names the space

  # Stage 2 rebuilds trial 1's model from its trial_spec.json (the module) and nas_params.
  stage2 = tmp_path / "stage2"
  retrain = nascli_subprocess("train", "--search_job_dir", job, "--train_nas_trial_numbers",
                              "1", "--model_dir", stage2, "--mode", "train", "--params_override",
                              "trainer.train_steps=5,trainer.steps_per_loop=5", "--json",
                              env=ENV)
  assert retrain.returncode == 0, retrain.stderr[-3000:]
  assert json.loads(retrain.stdout)[0]["step"] == 5
  assert _block_specs(stage2 / "1" / "params.yaml") == _block_specs(job / "1" / "params.yaml")


def _block_specs(params_yaml: Path) -> list[dict]:
  from tf_vision.params import load_yaml_source  # pylint: disable=g-import-not-at-top
  saved = load_yaml_source(str(params_yaml), "params.yaml")
  assert saved["task"]["model"]["backbone"]["type"] == "tunable_mnasnet"
  return json.loads(saved["task"]["model"]["backbone"]["tunable_mnasnet"]["block_specs_json"])
