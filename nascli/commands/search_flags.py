"""The flags of the search family (Vertex's spellings), each declared once, and what they build.

The Ray flags (`RAY`, built into an executor by ray_flags.py) and the latency commands'
--target_device_type are declared here too. Each is declared with `options.shared` (help,
default, spelling) and checked by a registered `_check`; `search_in_local` and `search` take
them all (`SEARCH`), `search_resume`, the proxy-task commands and `build_latency_model` the
groups they need (`SPACE`, `RECIPE`, `WORKERS`, ...). Both searches run the same search
(nascli/search/search_loop.py); only where trials run differs. `check` refuses what is wrong
with these flags before the commands import TensorFlow, Model Garden or pyglove (15-40 s): a
bad value costs well under 2 s.
"""

import contextlib
import glob
import hashlib
import inspect
import json
import math
import os
import sys
from typing import Any, Callable, Iterator, Optional

from nascli import checks
from nascli import interrupts
from nascli import latency_calculator as latency_lib
from nascli import storage
from nascli.commands import options
from nascli.commands import ray_flags
from nascli.commands.options import shared
from nascli.errors import NascliError
from nascli.search import local_main
from nascli.search import pareto as pareto_lib
from nascli.search import reward as reward_lib
from nascli.search import scheduler as scheduler_lib
from tf_vision.search_spaces import registry as space_registry
from tf_vision.serving import arch_latency

# The search spaces' registry loads no pyglove: the prebuilt names are read from it. What the
# controller's registry holds (nascli.search.controller) is spelled out so a name is checked
# without importing it (it imports pyglove); tests/test_search_flags.py asserts that these agree.
PREBUILT_SEARCH_SPACES = tuple(space_registry.known_search_spaces())
# name: (the options it takes, (fewest, most) objectives it optimizes; None: any number).
SEARCH_ALGORITHMS: dict[str, tuple[tuple[str, ...], tuple[int, int | None]]] = {
    "gp_bo": ((), (1, 1)),
    "nsga2": (("population_size",), (2, None)),
    "random": ((), (1, None)),
    "regularized_evolution": (("population_size", "tournament_size"), (1, 1)),
    "reinforce": ((), (1, 1)),
    "tpe": ((), (1, None)),
}
# The default controller, chosen on NAS-Bench-201 (BENCHMARKS.md): it beat random and
# regularized evolution on CIFAR-10, CIFAR-100 and ImageNet16-120.
DEFAULT_ALGORITHM = "tpe"
ALGORITHM_DEFAULTS = {"population_size": 20, "tournament_size": 5}  # controller.DEFAULT_*

Space = shared("prebuilt_search_space", str, "mnasnet", help="mnasnet (classification) or spinenet"
    " (detection).")
SpaceModule = shared("search_space_module", Optional[str], None, help="pkg.module.fn: your own"
    " space, a function returning a pyglove space shaped as --prebuilt_search_space's, or"
    " registered with register_search_space.")
Algorithm = shared("search_algorithm", str, DEFAULT_ALGORITHM, help="tpe (Optuna's TPE), gp_bo (a"
    " Gaussian process, expected improvement), regularized_evolution, reinforce (policy gradient),"
    " random; with --objectives: nsga2, tpe or random.")
Seed = shared("seed", int, 0, help="Controller seed.")
MaxTrials = shared("max_nas_trial", int, 4, help="Trials in total (resumes count what is done).")
MaxParallel = shared("max_parallel_nas_trial", int, 1, help="Trials at once.")
MaxFailed = shared("max_failed_nas_trial", Optional[int], None, help="Stop once more trials than"
    " this fail (default: --max_nas_trial).")
TargetLatency = shared("target_device_latency_ms", Optional[float], None, help="Latency target of"
    " the MnasNet reward (unset: reward = accuracy).")
Constraint = shared("latency_constraint", str, "soft", help="soft or hard.")
LatencyWeight = shared("latency_weight", float, 0.07, help="w of accuracy * (target/latency)**w.")
OutputDir = shared("local_output_dir", Optional[str], None, help="The search job dir, a folder or"
    " gs://BUCKET/PREFIX (default: nascli_output/search_<space>).")
DockerFlags = shared("search_docker_flags", Optional[list[str]], None, help="Vertex's trainer"
    " flags: params_override=..., training_data_path=..., validation_data_path=...,"
    " model=retinanet, config_file=...")
PrebuiltTrainer = shared("use_prebuilt_trainer", bool, True, help="Accepted for Vertex"
    " compatibility: nascli always runs its own TF-vision trainer.")
Experiment = shared("experiment", Optional[str], None, help="Registered experiment of the trials.")
ConfigFiles = shared("config_file", Optional[list[str]], None, help="Trial YAML(s) (default: the"
    " testing YAML of the space).")
Override = shared("params_override", Optional[str], None, help="Override applied to every trial.")
TrainPath = shared("training_data_path", Optional[str], None, help="TFRecord glob(s).")
ValidationPath = shared("validation_data_path", Optional[str], None, help="TFRecord glob(s).")
DatasetDir = shared("dataset_dir", Optional[str], None, help="A convert-data folder (default: the"
    " embedded data set).")
Population = shared("population_size", Optional[int], None, help="regularized_evolution population"
    " (default 20), nsga2's (default 8).")
Tournament = shared("tournament_size", Optional[int], None, help="regularized_evolution"
    " tournament.")
Overwrite = shared("overwrite", bool, False, help="Start over in a job dir made with other"
    " settings.")
AsJson = shared("as_json", bool, False, spelling="json", help="Print the trials as JSON.")
WarmStartFrom = shared("warm_start_from", Optional[str], None, help="A finished or stopped search"
    " job dir of the same search space: its architectures and rewards seed this search's"
    " controller (not counted as trials; other data, settings and trial counts allowed).")
TRIAL_ISOLATIONS = ("worker", "process")  # nascli.search.executors' registry, spelled out
TrialIsolation = shared("trial_isolation", str, "worker", help="worker: warm worker processes run"
    " trial after trial (TensorFlow loaded once; a worker whose trial failed is replaced);"
    " process: a fresh process per trial.")


def _seconds(text: str) -> float:
  """--trial_timeout's value, read as Click reads the command line: a positive number of
  seconds, else refused in one line before anything is imported."""
  try:
    value = float(text)
  except ValueError:
    value = math.nan
  if not (math.isfinite(value) and value > 0):
    raise NascliError(f"--trial_timeout must be a positive number of seconds, got {text}")
  return value


TrialTimeout = shared("trial_timeout", Optional[float], None, parser=_seconds, help="Seconds a"
    " trial attempt may run once begun; past it the attempt is killed, its trial failed with the"
    " reason timeout, and its worker replaced (default: no limit).")
MaxTrialsPerWorker = shared("max_trials_per_worker", int, 10, help="Trials a warm worker runs"
    " before a fresh one takes over (memory cannot creep).")
ExportTopK = shared("export_top_k", int, 3, help="At the end, export a SavedModel (TRIAL/export)"
    " of the K best trials; any other: `nascli export --model_dir JOB/TRIAL`.")
ExportEveryTrial = shared("export_every_trial", bool, False, help="Each trial exports its"
    " SavedModel as it ends.")
EarlyStopping = shared("early_stopping", str, "auto", help="Stop weak trials early: auto"
    " (asha_promotions when a first rung trains at least 2 epochs or --min_steps is given, and"
    " --max_nas_trial is at least --reduction_factor to the number of rungs; else none), none,"
    " median (Ray Tune's MedianStoppingRule), asha (asynchronous successive halving, Ray Tune's"
    " stop rule) or asha_promotions (the paper's promotion rule: trials pause at each rung, free"
    " workers promote the top 1/eta). Trials train in rungs of --min_steps * --reduction_factor**k"
    " steps, report, and are stopped or go on from their checkpoint.")
MinSteps = shared("min_steps", Optional[int], None, help="With --early_stopping: the steps a trial"
    " trains before its first report (its first rung). Default: trainer.train_steps /"
    " reduction_factor**2, rounded up (rungs at about 1/9, 1/3 and all of the budget).")
PausedTrialsPerWorker = shared("paused_trials_per_worker", int, 1, help="With --early_stopping:"
    " trials paused at a rung that a warm worker keeps in memory (model, optimizer, input), so"
    " that a promotion it runs continues there without a rebuild; others resume from their"
    " checkpoint, to the same result. 0: none (less memory).")
ReductionFactor = shared("reduction_factor", Optional[int], None, help="With --early_stopping:"
    " each rung this many times the last; asha and asha_promotions keep the top 1/this of each"
    " rung (default 3).")
LatencyCalculator = shared("latency_calculator", str, latency_lib.IN_TRIAL, help="Who measures a"
    " trial's latency: in_trial (the trial times its serving function where it trained) or"
    " external (`nascli run_latency_calculator_local` on the target device: each trial asks it and"
    " waits).")
LatencyTimeout = shared("latency_timeout_s", float, latency_lib.DEFAULT_TIMEOUT_S, help="With"
    " --latency_calculator external: seconds a trial waits for its latency, then fails naming the"
    " calculator.")
LatencyModelFile = shared("latency_model", Optional[str], None, help="A latency model file"
    " (build_latency_model) of the search's space and latency input size: every proposal's latency"
    " is predicted before it trains (no trial times itself); with --latency_constraint hard and a"
    " target, a proposal predicted over it is not trained (state over_target, not counted in"
    " --max_nas_trial). search_resume: the previous job's own model where it is now, if it moved"
    " (default: the path the job recorded).")
TargetDevice = shared("target_device_type", str, "cpu-tflite", help="The runtime timed, one of"
    f" {', '.join(arch_latency.RUNTIMES)}: cpu-tflite is the model converted to TFLite and run by"
    " LiteRT with XNNPACK (a phone's or an edge CPU's runtime, MnasNet's mobile latency); cpu and"
    " gpu time the SavedModel's serving function in TensorFlow, on this CPU with GPUs hidden or"
    " on this machine's GPU.")
LatencyInputSize = shared("latency_input_size", Optional[int], None, help="The side of the square"
    " input latency is timed (or predicted) at: the size the model will serve, e.g. 224 for a"
    " phone classifier trained here at 32. Default: the config's task.latency_input_size (a proxy"
    " task keeps the recipe's size there), else its training input size.")
LatencyMargin = shared("latency_margin", float, 0.0, help="With --latency_model and"
    " --latency_constraint hard: a proposal is over the target when predicted above target * (1 +"
    " this fraction); e.g. 0.1 trains what is predicted up to 10% over, for the model's error.")
Objectives = shared("objectives", Optional[str], None, help="A Pareto front instead of the MnasNet"
    " reward: METRIC:max|min,... of accuracy, latency_ms, flops, params, seconds (e.g."
    " accuracy:max,latency_ms:min).")

# The Ray flags of the commands whose trials can run on a Ray cluster (ray_flags.py builds
# their executor).
RayAddress = shared("ray_address", Optional[str], None, help="auto (the cluster this machine"
    " belongs to), HOST:PORT, or local (a private Ray instance on this machine).")
CpusPerTrial = shared("num_cpus_per_trial", float, 1.0, help="CPUs Ray reserves for each trial.")
GpusPerTrial = shared("num_gpus_per_trial", float, 0.0, help="GPUs Ray reserves for each trial (it"
    " sets CUDA_VISIBLE_DEVICES).")
MaxTrialRetries = shared("max_trial_retries", int, 2, help="Retries of a trial whose worker or"
    " node died.")
RuntimeEnv = shared("runtime_env", Optional[str], None, help="Ray runtime_env for the trials:"
    " JSON, or a JSON file.")
ContainerImage = shared("container_image", Optional[str], None, help="Run trials in this image"
    " (e.g. the one `nascli build` made); Ray's runtime_env image_uri.")
RayNumCpus = shared("ray_num_cpus", Optional[int], None, help="With --ray_address local: CPUs of"
    " the private instance.")
RayTempDir = shared("ray_temp_dir", Optional[str], None, help="With --ray_address local: its"
    " session/temp folder.")
# The Ray flags of a command whose trials run on Ray, in the order help lists them, and the
# groups of them a command takes alone (options.takes).
RESOURCES = ("num_cpus_per_trial", "num_gpus_per_trial")
IMAGE = ("runtime_env", "container_image")
LOCAL = ("ray_num_cpus", "ray_temp_dir")
RAY = ("ray_address", *RESOURCES, "max_trial_retries", *IMAGE, *LOCAL)

# Groups of the flags above, in the order help lists them: what a command takes (options.takes).
SPACE = ("prebuilt_search_space", "search_space_module")
RECIPE = ("experiment", "config_file", "params_override", "training_data_path",
          "validation_data_path", "dataset_dir")
WORKERS = ("trial_isolation", "max_trials_per_worker", "trial_timeout")
REWARD = ("target_device_latency_ms", "latency_constraint", "latency_weight",
          "latency_calculator", "latency_timeout_s", "latency_model", "latency_margin",
          "latency_input_size")
SEARCH = (*SPACE, "search_algorithm", "seed", "max_nas_trial", "max_parallel_nas_trial",
          "max_failed_nas_trial", *REWARD, "local_output_dir", "search_docker_flags",
          "use_prebuilt_trainer", *RECIPE, "population_size", "tournament_size", "overwrite",
          *WORKERS, "export_top_k", "export_every_trial", "objectives", "early_stopping",
          "min_steps", "reduction_factor", "paused_trials_per_worker", "warm_start_from",
          "as_json")
# What the proxy-task commands take of the search's flags beside their own.
JOB = ("max_parallel_nas_trial", "local_output_dir")
DOCKER_RECIPE = ("search_docker_flags", *RECIPE)
TRIALS_ON_RAY = ("overwrite", *WORKERS, *RAY, "as_json")


def search_args(prebuilt_search_space, search_space_module, search_algorithm, seed,
                max_nas_trial, max_parallel_nas_trial, max_failed_nas_trial,
                target_device_latency_ms, latency_constraint, latency_weight, local_output_dir,
                experiment, config_file, params_override, training_data_path,
                validation_data_path, dataset_dir, population_size, tournament_size, overwrite,
                trial_isolation, max_trials_per_worker, export_top_k, export_every_trial,
                objectives=None, early_stopping="none", min_steps=None, reduction_factor=None,
                paused_trials_per_worker=1, search_docker_flags=None, trial_timeout=None,
                warm_start_from=None, latency_calculator=latency_lib.IN_TRIAL,
                latency_timeout_s=latency_lib.DEFAULT_TIMEOUT_S, latency_model=None,
                latency_margin=0.0, latency_input_size=None, **extra):
  """The SearchArgs the shared flags describe (`extra`: fields only one command has;
  `search_docker_flags` only name the default job dir: local_main applies them)."""
  job_dir = local_output_dir or default_job_dir(dict(locals()))
  # pylint: disable=g-import-not-at-top
  from nascli.run_spec import DataSpec, RunSpec, TrialSettings
  from nascli.search.search_args import SearchArgs
  scheduler = scheduler_lib.SchedulerSettings(
      name=early_stopping, min_steps=min_steps,
      reduction_factor=reduction_factor or scheduler_lib.DEFAULT_REDUCTION_FACTOR)
  options = {k: v for k, v in (("population_size", population_size),
                               ("tournament_size", tournament_size)) if v is not None}
  run = RunSpec(experiment=experiment, config_files=list(config_file or []),
                params_override=params_override, seed=seed,
                data=DataSpec(training_data_path=training_data_path,
                              validation_data_path=validation_data_path, dataset_dir=dataset_dir))
  # The model file is read here (milliseconds, no framework): its fingerprint is a setting.
  from nascli.search import latency_gate
  trial = TrialSettings(run=run, target_device_latency_ms=target_device_latency_ms,
                        latency_constraint=latency_constraint, latency_weight=latency_weight,
                        export_every_trial=export_every_trial,
                        latency_calculator=latency_calculator,
                        latency_timeout_s=latency_timeout_s,
                        latency_model=(latency_gate.reference(latency_model) if latency_model
                                       else None),
                        latency_margin=float(latency_margin or 0.0),
                        latency_input_size=latency_input_size)
  return SearchArgs(
      job_dir=job_dir,
      search_space=prebuilt_search_space, search_space_module=search_space_module,
      search_algorithm=search_algorithm, max_nas_trial=max_nas_trial,
      max_parallel_nas_trial=max_parallel_nas_trial, max_failed_nas_trial=max_failed_nas_trial,
      overwrite=overwrite, algorithm_options=options, trial_isolation=trial_isolation,
      max_trials_per_worker=max_trials_per_worker, trial_timeout=trial_timeout,
      paused_trials_per_worker=paused_trials_per_worker, export_top_k=export_top_k, trial=trial,
      objectives=pareto_lib.canonical(objectives) if objectives else None, scheduler=scheduler,
      warm_start_from=warm_start_from, **extra)


# The shared flags the proxy-task commands do not take, at what their trainings need: no reward
# to optimize, no Pareto front, no early stopping, nothing exported.
UNSEARCHED = {"target_device_latency_ms": None, "latency_constraint": "soft",
              "latency_weight": 0.07, "population_size": None, "tournament_size": None,
              "export_top_k": 0, "export_every_trial": False, "objectives": None,
              "early_stopping": "none", "min_steps": None, "reduction_factor": None,
              "paused_trials_per_worker": 0}


def from_flags(values: dict, **extra):
  """search_args from a command's parameters (its `locals()`): the shared flags are picked out.
  Without --local_output_dir, says on stderr which job dir the settings give."""
  shared = [name for name in inspect.signature(search_args).parameters if name != "extra"]
  # A flag a command does not take (the proxy-task commands: --warm_start_from) keeps its default.
  args = search_args(**{name: values[name] for name in shared if name in values}, **extra)
  if not values["local_output_dir"]:
    print(f"job dir: {args.job_dir} (the default for these settings; --local_output_dir to"
          " choose)", file=sys.stderr, flush=True)
  return args


# The flags that change what a search's trials compute or which architectures it proposes, at
# their declared defaults (tests/test_search_flags.py asserts both searches keep them). A
# search that leaves them so has the job dir nascli_output/search_<space>; one that sets any of
# them another (default_job_dir), so that searches of other settings never share a default one.
DEFINING_DEFAULTS: dict[str, Any] = {name: options.SHARED[name].default for name in (
    "search_space_module", "search_algorithm", "seed", "target_device_latency_ms",
    "latency_constraint", "latency_weight", "search_docker_flags", "experiment", "config_file",
    "params_override", "training_data_path", "validation_data_path", "dataset_dir",
    "population_size", "tournament_size", "objectives", "early_stopping", "min_steps",
    "reduction_factor", "warm_start_from", "latency_calculator", "latency_model",
    "latency_margin", "latency_input_size")}


def _defining_value(name: str, value: Any) -> Any:
  """A flag's value as it names a job dir: paths absolute, no value and an empty list alike."""
  if value in (None, [], ()):
    return None
  if name == "config_file":
    return [p if storage.is_gcs(p) else os.path.abspath(p) for p in value]
  if name in ("dataset_dir", "warm_start_from", "latency_model") and not storage.is_gcs(value):
    return os.path.abspath(value)
  return list(value) if isinstance(value, (list, tuple)) else value


def default_job_dir(values: dict[str, Any]) -> str:
  """The job dir of a search without --local_output_dir: nascli_output/search_<space> (the
  --search_space_module's function name for a module's space); with any flag of
  DEFINING_DEFAULTS set otherwise, `-<8 hex digits>` of their values appended. Flags that only
  change how trials run (--trial_isolation, --max_parallel_nas_trial, --export_top_k, ...)
  keep the folder: a rerun with them resumes the same job."""
  module = values.get("search_space_module")
  name = module.rsplit(".", 1)[-1] if module else values["prebuilt_search_space"]
  differing = {k: _defining_value(k, values.get(k)) for k, default in DEFINING_DEFAULTS.items()
               if k != "search_space_module"
               and _defining_value(k, values.get(k)) != _defining_value(k, default)}
  suffix = None
  if differing:
    text = json.dumps(differing, sort_keys=True, default=str)
    suffix = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
  return local_main.default_job_dir(name, suffix)


def own_job_dir(values: dict[str, Any], default: Callable[[], str],
                why: str = "the default for these settings") -> None:
  """Without --local_output_dir, a job of its own kind (never a search's default) in `default()`,
  said on stderr."""
  if not values["local_output_dir"]:
    values["local_output_dir"] = default()
    print(f"job dir: {values['local_output_dir']} ({why}; --local_output_dir to choose)",
          file=sys.stderr, flush=True)


def run_trials(values: dict[str, Any], run: Callable[[Any, Any], Any]) -> Any:
  """`run(search_args, executor)` as the flags say: the Ray flags checked, on Ray with
  --ray_address (the driver's prints to stderr: logs, not results), else here; an interrupt
  before the first trial named."""
  env = ray_flags.check(values) if values["ray_address"] else None
  with interrupt_described(values):
    args = from_flags(values, max_trial_retries=values["max_trial_retries"])
    executor = ray_flags.executor(values, env) if values["ray_address"] else None
    with contextlib.redirect_stdout(sys.stderr) if executor else contextlib.nullcontext():
      return run(args, executor)


def previous_job(values: dict[str, Any], name: str, previous: str | None) -> None:
  """Vertex's --previous_..._dir names the job to resume, as --local_output_dir does: either,
  or both alike."""
  if previous:
    if values["local_output_dir"] and values["local_output_dir"] != previous:
      raise NascliError(f"--{name} and --local_output_dir name different jobs; give one")
    values["local_output_dir"] = previous


def print_rows(rows: list[dict], as_json: bool) -> None:
  if as_json:
    print(json.dumps(rows, indent=2, default=str))
    return
  for row in rows:
    reward = "-" if row.get("reward") is None else f"{row['reward']:.4f}"
    print(f"trial {row['trial_id']}: {row['status']}, reward {reward}")


# --------------------------------------------------------------------------- fast refusals

_CHECKS: list[Callable[[dict[str, Any]], None]] = []


def _check(fn: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
  """Registers a check of the shared flags; they run in registration order."""
  _CHECKS.append(fn)
  return fn


def check(values: dict[str, Any]) -> None:
  """Refuses a bad shared flag (a command's `locals()`) in one line naming it, before any
  TensorFlow, Model Garden or pyglove import: counts, reward settings, names (with a
  did-you-mean), --search_docker_flags, config files, overrides and the data folder."""
  for fn in _CHECKS:
    fn(values)


def unknown(flag_name: str, value: str, known: Any) -> NascliError:
  """`unknown --flag 'x' (did you mean 'y'?); known: ...`: one wording for every command."""
  return NascliError(f"unknown --{flag_name} {value!r}{checks.closest(value, known)}; known:"
                     f" {', '.join(known)}")


def _at_least(values: dict[str, Any], name: str, low: int) -> None:
  if values.get(name) is not None and values[name] < low:
    raise NascliError(f"--{name} must be at least {low}, got {values[name]}")


@_check
def _counts(values: dict[str, Any]) -> None:
  _at_least(values, "max_nas_trial", 1)
  _at_least(values, "max_parallel_nas_trial", 1)
  _at_least(values, "max_failed_nas_trial", 0)
  _at_least(values, "max_trials_per_worker", 1)
  _at_least(values, "paused_trials_per_worker", 0)
  _at_least(values, "export_top_k", 0)


check_counts = _counts  # search_resume takes the counts (and only them, of these flags)


@_check
def _isolation(values: dict[str, Any]) -> None:
  if values["trial_isolation"] not in TRIAL_ISOLATIONS:
    raise unknown("trial_isolation", values["trial_isolation"], TRIAL_ISOLATIONS)


@_check
def _reward(values: dict[str, Any]) -> None:
  constraint = values["latency_constraint"]
  if constraint not in reward_lib.known_constraints():
    raise unknown("latency_constraint", constraint, reward_lib.known_constraints())
  target, weight = values["target_device_latency_ms"], values["latency_weight"]
  if target is not None and not (math.isfinite(target) and target > 0):
    raise NascliError(f"--target_device_latency_ms must be a positive number of milliseconds,"
                      f" got {target}")
  if not (math.isfinite(weight) and weight >= 0):
    raise NascliError(f"--latency_weight must be a number >= 0, got {weight}")
  reward_lib.check(constraint, target, weight)


@_check
def _latency_calculator(values: dict[str, Any]) -> None:
  name = values.get("latency_calculator", latency_lib.IN_TRIAL)
  if name not in latency_lib.LATENCY_CALCULATORS:
    raise unknown("latency_calculator", name, latency_lib.LATENCY_CALCULATORS)
  timeout = values.get("latency_timeout_s", latency_lib.DEFAULT_TIMEOUT_S)
  if not (math.isfinite(timeout) and timeout > 0):
    raise NascliError(f"--latency_timeout_s must be a positive number of seconds, got {timeout}")


@_check
def _latency_model(values: dict[str, Any]) -> None:
  """--latency_model: a readable model file (its space and input size are matched once the
  search's config is built); --latency_margin a fraction >= 0."""
  margin = values.get("latency_margin", 0.0)
  if not (math.isfinite(margin) and margin >= 0):
    raise NascliError(f"--latency_margin must be a fraction >= 0 (0.1: 10% over the target),"
                      f" got {margin}")
  path = values.get("latency_model")
  if not path:
    return
  if values.get("latency_calculator", latency_lib.IN_TRIAL) != latency_lib.IN_TRIAL:
    raise NascliError(f"--latency_model predicts every trial's latency: --latency_calculator"
                      f" {values['latency_calculator']} would never be asked; give one of them")
  from nascli import latency_model  # pylint: disable=g-import-not-at-top
  latency_model.load(path)  # missing, corrupt or truncated: one line naming it


@_check
def _latency_input_size(values: dict[str, Any]) -> None:
  _at_least(values, "latency_input_size", 1)


@_check
def _objectives(values: dict[str, Any]) -> None:
  if values.get("objectives") is not None:
    pareto_lib.parse_objectives(values["objectives"])


@_check
def _early_stopping(values: dict[str, Any]) -> None:
  scheduler_lib.check(values.get("early_stopping", "none"), values.get("min_steps"),
                      values.get("reduction_factor"),
                      multi_objective=values.get("objectives") is not None)


@_check
def check_space(values: dict[str, Any]) -> None:
  space = values["prebuilt_search_space"]
  if space not in PREBUILT_SEARCH_SPACES:
    raise unknown("prebuilt_search_space", space, PREBUILT_SEARCH_SPACES)
  if values["search_space_module"] is not None:
    space_registry.check_module_path(values["search_space_module"], "--search_space_module")


@_check
def _algorithm(values: dict[str, Any]) -> None:
  name = values["search_algorithm"]
  if name not in SEARCH_ALGORITHMS:
    raise unknown("search_algorithm", name, SEARCH_ALGORITHMS)
  options, (fewest, most) = SEARCH_ALGORITHMS[name]
  count = len(pareto_lib.parse_objectives(values["objectives"])) if values.get(
      "objectives") is not None else 1
  if count < fewest or (most is not None and count > most):
    able = [a for a, (_, (lo, hi)) in SEARCH_ALGORITHMS.items()
            if lo <= count and (hi is None or count <= hi)]
    if count == 1:
      raise NascliError(f"--search_algorithm {name} optimizes {fewest} or more objectives: give"
                        f" --objectives (e.g. accuracy:max,latency_ms:min), or for one scalar"
                        f" reward use: {', '.join(able)}")
    raise NascliError(f"--search_algorithm {name} cannot optimize {count} objectives"
                      f" (--objectives); use: {', '.join(able)}")
  given = {k: values[k] for k in ALGORITHM_DEFAULTS if values.get(k) is not None}
  for key in given:
    if key not in options:
      takers = [a for a, (taken, _) in SEARCH_ALGORITHMS.items() if key in taken]
      raise NascliError(f"--{key} is an option of --search_algorithm {' or '.join(takers)},"
                        f" not {name}")
  if not given:
    return
  _at_least(values, "population_size", 1)
  if "tournament_size" not in options:
    return
  _at_least(values, "tournament_size", 2)
  sizes = {**ALGORITHM_DEFAULTS, **given}
  if sizes["population_size"] < sizes["tournament_size"]:
    raise NascliError(f"--population_size ({sizes['population_size']}) must be at least"
                      f" --tournament_size ({sizes['tournament_size']})")


def _yaml_check(source: str | None, what: str) -> None:
  # YAML is imported on use: every command's start-up pays for what this module imports.
  from tf_vision.configs import yaml_source  # pylint: disable=g-import-not-at-top
  yaml_source.check(source, what)


def _config_file(path: str, what: str = "--config_file") -> None:
  if not storage.is_gcs(path) and not os.path.isfile(path):
    raise NascliError(f"{what} {path}: no such file")
  _yaml_check(path, what)


def _dataset_dir(path: str, what: str = "--dataset_dir") -> None:
  if not storage.is_gcs(path) and not os.path.isdir(path):
    raise NascliError(f"{what} {path}: no such folder")


def _data_path(patterns: str, what: str) -> None:
  """TFRecord file patterns, comma-separated as Model Garden's input_path takes them."""
  for pattern in (p.strip() for p in patterns.split(",")):
    if pattern and not storage.is_gcs(pattern) and not glob.glob(pattern):
      raise NascliError(f"{what} {pattern}: no file matches")


@_check
def _sources(values: dict[str, Any]) -> None:
  for path in values["config_file"] or []:
    _config_file(path)
  _yaml_check(values["params_override"], "--params_override")
  if values["dataset_dir"]:
    _dataset_dir(values["dataset_dir"])
  for name in ("training_data_path", "validation_data_path"):
    if values[name]:
      _data_path(values[name], f"--{name}")
  out = values["local_output_dir"]
  if out and not storage.is_gcs(out) and os.path.exists(out) and not os.path.isdir(out):
    raise NascliError(f"--local_output_dir {out} is a file; the search needs a folder there")


@_check
def _warm_start_from(values: dict[str, Any]) -> None:
  """--warm_start_from: a readable search job of the same space and objectives, with a
  completed trial (reads its journal: no pyglove, no TensorFlow)."""
  if not values.get("warm_start_from"):
    return
  from nascli.search import warm_start  # pylint: disable=g-import-not-at-top
  warm_start.check(values["warm_start_from"], values["prebuilt_search_space"],
                   values["search_space_module"],
                   pareto_lib.canonical(values["objectives"]) if values.get("objectives")
                   else None, values["local_output_dir"])


def _docker_model(value: str, values: dict[str, Any], what: str) -> None:
  del what
  space = values["prebuilt_search_space"]
  expected = space_registry.get_entry(space).require_binding().model
  if value != expected and not values["search_space_module"]:
    raise NascliError(f"model={value} does not fit search space {space} (it builds a"
                      f" {expected} model)")


# How each --search_docker_flags KEY=VALUE is checked: as the flag of the same name.
_DOCKER_CHECKS: dict[str, Callable[[str, dict[str, Any], str], None]] = {
    "config_file": lambda value, values, what: _config_file(value, what),
    "params_override": lambda value, values, what: _yaml_check(value, what),
    "dataset_dir": lambda value, values, what: _dataset_dir(value, what),
    "training_data_path": lambda value, values, what: _data_path(value, what),
    "validation_data_path": lambda value, values, what: _data_path(value, what),
    "model": _docker_model,
}


@_check
def _docker_flags(values: dict[str, Any]) -> None:
  """Vertex's trainer flags: the syntax, the keys, and each value as its own flag's check."""
  for key, value in local_main.parse_docker_flags(values["search_docker_flags"] or []):
    if key in _DOCKER_CHECKS:
      _DOCKER_CHECKS[key](value, values, f"--search_docker_flags {key}")


def local_search() -> Any:
  """nascli.search.local_main, which runs a search, with the report page's writer registered:
  nascli.report registers it as it is imported (it reads the search's results, so the search
  cannot import it). Imported here, after the flags' checks: seconds of imports."""
  # pylint: disable=g-import-not-at-top,unused-import
  from nascli import report  # noqa: F401
  from nascli.search import local_main
  return local_main


@contextlib.contextmanager
def interrupt_described(values: dict[str, Any]) -> Iterator[None]:
  """An interrupt before the search loop (which says more itself) names the search and how
  to continue."""
  try:
    yield
  except KeyboardInterrupt as e:
    if getattr(e, "what", None):
      raise
    job_dir = values["local_output_dir"] or default_job_dir(values)
    again = "run the same command again" + (" without --overwrite" if values["overwrite"]
                                            else "")
    raise interrupts.Interrupted.of(e, f"search {job_dir} before a trial started",
                                    f"{again} to continue") from None
