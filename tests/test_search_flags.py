"""Bad search flags are refused before TensorFlow, Model Garden, pyglove or Ray is imported.

Each refusal runs in a fresh interpreter that calls nascli.app.main and then reports which of
those frameworks it imported: a refusal that needed one of them cost 15-40 s instead of ~1 s.
"""

import json
import subprocess
import sys

import pytest

from nascli.commands import search_flags

HEAVY = ("tensorflow", "official", "pyglove", "ray")
_SCRIPT = r"""
import contextlib, io, json, sys
from nascli.app import main
results = []
for argv in json.loads(sys.argv[1]):
  err, out = io.StringIO(), io.StringIO()
  with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
    code = main(argv)
  results.append([code, out.getvalue(), err.getvalue()])
print(json.dumps({"results": results, "imported": [m for m in json.loads(sys.argv[2])
                                                   if m in sys.modules]}))
"""


def _refusals(argvs):
  """(exit code, stdout, stderr) of main(argv) for each argv, and the heavy modules imported."""
  proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(argvs), json.dumps(HEAVY)],
                        capture_output=True, text=True, check=False, timeout=120)
  assert proc.returncode == 0, proc.stderr
  report = json.loads(proc.stdout)
  return report["results"], report["imported"]


def _bad_yaml(tmp_path):
  path = tmp_path / "bad.yaml"
  path.write_text("task:\n  model: [1, 2\n")
  return str(path)


# (flags, the whole error line after "Error: ", or a part of it for the longer ones)
LOCAL_CASES = [
    (["--max_nas_trial", "0"], "--max_nas_trial must be at least 1, got 0"),
    (["--max_parallel_nas_trial", "0"], "--max_parallel_nas_trial must be at least 1, got 0"),
    (["--max_failed_nas_trial", "-1"], "--max_failed_nas_trial must be at least 0, got -1"),
    (["--trial_isolation", "procss"],
     "unknown --trial_isolation 'procss' (did you mean 'process'?); known: worker, process"),
    (["--max_trials_per_worker", "0"], "--max_trials_per_worker must be at least 1, got 0"),
    (["--export_top_k", "-1"], "--export_top_k must be at least 0, got -1"),
    (["--target_device_latency_ms", "0"],
     "--target_device_latency_ms must be a positive number of milliseconds, got 0.0"),
    (["--latency_constraint", "firm"], "unknown --latency_constraint 'firm'; known: hard, soft"),
    (["--latency_weight", "-0.5"], "--latency_weight must be a number >= 0, got -0.5"),
    (["--prebuilt_search_space=spinet"],
     "unknown --prebuilt_search_space 'spinet' (did you mean 'spinenet'?); known: mnasnet,"
     " spinenet"),
    (["--search_algorithm", "regularised_evolution"],
     "unknown --search_algorithm 'regularised_evolution' (did you mean"
     " 'regularized_evolution'?); known: gp_bo, nsga2, random, regularized_evolution, reinforce,"
     " tpe"),
    (["--population_size", "4"],
     "--population_size is an option of --search_algorithm nsga2 or regularized_evolution, not tpe"),
    (["--search_algorithm", "regularized_evolution", "--tournament_size", "1"],
     "--tournament_size must be at least 2, got 1"),
    (["--search_algorithm", "regularized_evolution", "--population_size", "3"],
     "--population_size (3) must be at least --tournament_size (5)"),
    (["--search_algorithm", "nsga2"],
     "--search_algorithm nsga2 optimizes 2 or more objectives: give --objectives (e.g."
     " accuracy:max,latency_ms:min), or for one scalar reward use: gp_bo, random,"
     " regularized_evolution, reinforce, tpe"),
    (["--search_algorithm", "reinforce", "--objectives", "accuracy:max,latency_ms:min"],
     "--search_algorithm reinforce cannot optimize 2 objectives (--objectives); use: nsga2,"
     " random, tpe"),
    (["--search_algorithm", "nsga2", "--objectives", "accuracy:max,params:min",
      "--population_size", "0"], "--population_size must be at least 1, got 0"),
    (["--search_docker_flags", "bogus=1"], "--search_docker_flags 'bogus=1': expected KEY=VALUE"),
    (["--search_docker_flags", "model=retinanet"],
     "model=retinanet does not fit search space mnasnet (it builds a classification model)"),
    (["--search_docker_flags", "config_file=missing.yaml"],
     "--search_docker_flags config_file missing.yaml: no such file"),
    (["--config_file", "missing.yaml"], "--config_file missing.yaml: no such file"),
    (["--config_file", "BAD_YAML"], "cannot read --config_file BAD_YAML"),
    (["--params_override", "task: {model: [1,"], "--params_override is neither a file nor valid"),
    (["--dataset_dir", "/no/such/folder"], "--dataset_dir /no/such/folder: no such folder"),
    (["--training_data_path", "/no/train-*.tfrecord"],
     "--training_data_path /no/train-*.tfrecord: no file matches"),
    (["--search_space_module", "spaces-tiny"],
     "--search_space_module 'spaces-tiny': expected a dotted path 'package.module.function'"),
]


def test_bad_search_in_local_flags_are_refused_before_any_framework_loads(tmp_path):
  bad_yaml = _bad_yaml(tmp_path)
  job = tmp_path / "job"
  argvs = [["search_in_local", "--local_output_dir", str(job),
            *[bad_yaml if a == "BAD_YAML" else a for a in flags]] for flags, _ in LOCAL_CASES]
  results, imported = _refusals(argvs)
  assert imported == []
  for (flags, expected), (code, stdout, stderr) in zip(LOCAL_CASES, results):
    expected = expected.replace("BAD_YAML", bad_yaml)
    lines = stderr.splitlines()
    usage = expected.startswith("unknown --")  # a bad choice: a usage error
    assert (code, stdout, len(lines)) == (2 if usage else 1, "", 1), (flags, stderr)
    assert lines[0].startswith(f"Error: {expected}"), (flags, lines[0])
  assert not job.exists()


def test_bad_search_flags_on_ray_are_refused_before_ray_loads(tmp_path):
  job = str(tmp_path / "job")
  cases = [
      (["--max_nas_trial", "0"], "Error: --max_nas_trial must be at least 1, got 0"),
      (["--prebuilt_search_space", "mnasnett"],
       "Error: unknown --prebuilt_search_space 'mnasnett' (did you mean 'mnasnet'?)"),
      (["--max_trial_retries", "-1"], "Error: --max_trial_retries must not be negative, got -1"),
      (["--num_gpus_per_trial", "-1"], "Error: --num_gpus_per_trial must not be negative"),
      (["--runtime_env", "{not json"], "Error: --runtime_env: not valid JSON"),
  ]
  results, imported = _refusals([["search", "--local_output_dir", job, *flags]
                                 for flags, _ in cases])
  assert imported == []
  for (flags, expected), (code, _, stderr) in zip(cases, results):
    usage = expected.startswith("Error: unknown --")  # a bad choice: a usage error
    assert code == (2 if usage else 1) and stderr.count("\n") == 1, (flags, stderr)
    assert stderr.startswith(expected), (flags, stderr)


def test_the_name_lists_agree_with_the_registries():
  # pylint: disable=g-import-not-at-top
  from nascli.search import controller
  from tf_vision import search_spaces
  assert list(search_flags.PREBUILT_SEARCH_SPACES) == search_spaces.known_search_spaces() == [
      "mnasnet", "spinenet"]
  for space in search_flags.PREBUILT_SEARCH_SPACES:  # each trains a model, offline by default
    entry = search_spaces.get_entry(space)
    assert entry.binding is not None and entry.defaults is not None and entry.block_specs
  assert list(search_flags.SEARCH_ALGORITHMS) == controller.known_algorithms()
  from nascli.search import search_loop  # pylint: disable=g-import-not-at-top
  assert search_flags.DEFAULT_ALGORITHM == search_loop.SearchArgs(job_dir="j").search_algorithm
  for name, (_, (fewest, most)) in search_flags.SEARCH_ALGORITHMS.items():
    for count in range(1, 5):
      assert controller.algorithm_supports_objectives(name, count) == (
          fewest <= count and (most is None or count <= most)), (name, count)
  from nascli.search import executors  # pylint: disable=g-import-not-at-top
  assert sorted(search_flags.TRIAL_ISOLATIONS) == sorted(executors.known_isolations())
  assert search_flags.ALGORITHM_DEFAULTS == {
      "population_size": controller.DEFAULT_POPULATION_SIZE,
      "tournament_size": controller.DEFAULT_TOURNAMENT_SIZE}
  # Each algorithm takes exactly the options the list says.
  for name, (options, (fewest, _)) in search_flags.SEARCH_ALGORITHMS.items():
    controller.make_algorithm(name, 0, fewest, **{k: search_flags.ALGORITHM_DEFAULTS[k]
                                                  for k in options})
    for other in set(search_flags.ALGORITHM_DEFAULTS) - set(options):
      with pytest.raises(Exception, match=f"no option '{other}'"):
        controller.make_algorithm(name, 0, fewest, **{other: 3})


def _flag_defaults(command):
  import inspect  # pylint: disable=g-import-not-at-top
  return {name: p.default for name, p in inspect.signature(command).parameters.items()}


def test_a_default_job_dir_is_named_by_the_settings_that_define_the_search():
  """The README's main job keeps nascli_output/search_mnasnet; a module's space or another
  seed gets a folder of its own; flags of how trials run keep the folder (a rerun resumes)."""
  from nascli.commands.search_in_local import search_in_local  # pylint: disable=g-import-not-at-top
  defaults = _flag_defaults(search_in_local)
  name = search_flags.default_job_dir
  assert name(defaults) == "nascli_output/search_mnasnet"
  assert name(dict(defaults, search_space_module="my_spaces.tiny_mnasnet")) == (
      "nascli_output/search_tiny_mnasnet")
  assert name(dict(defaults, trial_isolation="process", export_top_k=1,
                   max_parallel_nas_trial=2, max_nas_trial=8)) == "nascli_output/search_mnasnet"
  seeded = {name(dict(defaults, seed=s)) for s in (1, 2)}
  assert len(seeded) == 2 and all(d.startswith("nascli_output/search_mnasnet-") for d in seeded)
  docker = name(dict(defaults, search_docker_flags=["params_override=trainer.train_steps=5"]))
  assert docker not in seeded | {"nascli_output/search_mnasnet"}


@pytest.mark.parametrize("command", ["search_in_local", "search"])
def test_the_job_defining_defaults_agree_with_the_commands(command):
  import importlib  # pylint: disable=g-import-not-at-top
  module = importlib.import_module(f"nascli.commands.{command}")
  defaults = _flag_defaults(getattr(module, command))
  assert {k: defaults[k] for k in search_flags.DEFINING_DEFAULTS} == (
      search_flags.DEFINING_DEFAULTS)


def test_early_stopping_with_no_rung_below_the_budget_is_refused():
  from nascli.errors import NascliError  # pylint: disable=g-import-not-at-top
  from nascli.search import scheduler  # pylint: disable=g-import-not-at-top
  with pytest.raises(NascliError, match=r"--early_stopping asha --min_steps 500: the trials"
                     r" train 100 steps .* give --min_steps below 100 \(e\.g\. 12\)"):
    scheduler.check_budget("asha", 500, None, 100)
  with pytest.raises(NascliError, match="--min_steps 100:"):
    scheduler.check_budget("median", 100, 3, 100)
  scheduler.check_budget("asha", None, None, 100)  # rungs at 12, 36, 100
  scheduler.check_budget("asha", 99, 3, 100)
