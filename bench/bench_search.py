"""search_in_local: what a trial costs with warm workers against one process per trial, and
evolution against random search.

    python bench/bench_search.py overhead [--trials 3] [--proxy_seconds 120] [--proxy_trials 2]
                                          [--rounds 2]
    python bench/bench_search.py throughput [--trials 6] [--rounds 1] [--with_ray]
    python bench/bench_search.py latency_agreement [--architectures 12] [--runs 50]
                                                   [--input_size 32]
    python bench/bench_search.py spinenet [--trials 2] [--parallel 1] [--rounds 1]
                                          [--params_override ...]
    python bench/bench_search.py algorithms [--seeds 1,2,3] [--trials 12]
                                            [--population_size 4] [--tournament_size 2]
    python bench/bench_search.py early_stopping [--seeds 1,2,3] [--trials 6]
        [--schedulers none,asha,asha_promotions]
                                                [--proxy_steps 540] [--min_steps 90]
                                                [--reduction_factor 3] [--asha_trials_factor 2]
    (all: [--work_dir /tmp/nascli_bench_search] [--out bench/results/search_<part>.json])

Every search is the real command, `python -m nascli search_in_local --prebuilt_search_space
mnasnet` (spinenet for `spinenet`), on the embedded data (digits at 32x32, shapes at 128x128;
converted into WORK_DIR/cache before anything is timed) with the space's testing YAML
(tf_vision/test_files/fast_nas_*_for_testing.yaml). Numbers come from what the search writes:
each trial's model_analysis.json `timing` (nascli/search/trial.py: timing_breakdown) and the
search's wall time.

Two trial executions are compared, side by side in one run, alternating (A B, then B A in the
next round, so that the machine's drift falls on both):
  warm      `--trial_isolation worker` (the default): warm worker processes run trial after
            trial; latency timed on the trained model's serving function in memory.
  baseline  `--trial_isolation process --export_every_trial`: what a search did before warm
            workers, one fresh process per trial and a SavedModel export per trial. Latency is
            now always timed in memory; the old per-trial cost of timing it on the exported
            SavedModel (2.2 s a testing trial then, ~0.6 s in memory now) cannot be reproduced
            by flags, so the baseline is that much cheaper than the old search was. The export
            cost is reproduced.

overhead    Per configuration, the testing YAML (`--trials` trials) and a proxy task whose
            training steps take about `--proxy_seconds` (`--proxy_trials` trials; the step count
            is computed from the steady per-step time the testing runs measured, the cosine
            decay follows it), `--rounds` rounds of warm and baseline, one trial at a time,
            `--export_top_k 0` (no exports at the end, so that the search's wall time is its
            trials). A trial's fixed overhead is everything but the training steps and the
            evaluation: start-up (a fresh process's start and imports; in a warm worker what
            was left of the worker's start when the trial was asked for), config/model build
            and tracing, checkpoints, export, latency timing, params/FLOPs. Warm workers start
            with the driver, so part of a worker's imports can precede its first trial and be
            in no trial's timing; the whole command's overhead per trial ((wall time - training
            steps - evaluation) / trials, the driver's own start included) and the time from
            the command's start to its first trial count it. Reported per configuration and
            execution: medians of each timing part and of the fixed overhead (seconds and
            share), over all trials and over the trials after each search's first, the whole
            command's overhead per trial, trials/hour of the searches, and baseline/warm
            ratios.
throughput  Trials/hour of the default main-job search (mnasnet, embedded digits, testing YAML,
            `--trials` trials, seed 1) at 1 and 2 at a time: before (baseline flags) against
            after (no flags: warm workers, `--export_top_k 3`), the command's whole wall time
            (driver start, final exports of the best trials included). `--with_ray` adds the
            same two on `nascli search` with a private Ray instance (slow).
latency_agreement
            `--architectures` architectures of the mnasnet space (random proposals, seed 4), each
            built untrained from the search's own trial config (testing YAML, digits); latency at
            batch 1 (`--runs` timed calls, median) of the serving function in memory
            (latency.measure_model_latency, what a trial measures) and of a SavedModel exported
            from the same weights (export_lib.export, then latency.measure_latency: what a
            trial measured before), one after the other, the order alternating per
            architecture; then the same two functions call by call in turn (A B, B A, ...), so
            that other work on a shared machine slows both alike. Reported for both ways: the
            medians per architecture, their ratio, the median ratio and the Spearman rank
            correlation (goal >= 0.9). Runs in this process, nothing else of the bench with it.
spinenet    The default spinenet search (embedded shapes, testing YAML), `--trials` trials
            `--parallel` at a time, warm against baseline (`--export_top_k 0`); per-trial total
            seconds (goal: <= 60 s warm) and its parts, and each trial's AP.
algorithms  For each seed, a search of `--trials` trials with `random` and one with
            `regularized_evolution` (population/tournament as given), two trials at a time.
            The reward is the validation accuracy (no latency target): latency timed on a
            shared 2-core machine while another trial trains is noisy, and that noise would
            favour whichever search ran at quieter moments.
            Reported: the best reward each search reached, best-so-far after each trial, the
            number of distinct architectures, and per seed evolution's best minus random's.
early_stopping
            Per seed (`--seeds`), random search on digits with a `--proxy_steps` proxy (cosine
            decay over it), one trial at a time, validation accuracy as the reward: no early
            stopping with `--trials` trials against each `--schedulers` value after none
            (`--early_stopping asha` and `asha_promotions` by default; `--min_steps`,
            `--reduction_factor`), each proposing `--asha_trials_factor` times as many. The same seed
            proposes the same architectures in the same order (random search ignores rewards),
            so ASHA sees a superset of the same architectures. Compute = training steps spent,
            rungs included (scheduler.compute_spent, from the journal), and wall time. Reported
            per seed: each search's best full-budget reward, ASHA's best within the compute no
            early stopping spent, the compute at which ASHA first reached no early stopping's
            best and its ratio; the spread of no early stopping's best over seeds.
"""

import argparse
import collections
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import host  # bench/host.py (scripts run from bench/)

ROOT = Path(__file__).resolve().parents[1]
TEST_FILES = ROOT / "tf_vision" / "test_files"
TESTING_YAML = TEST_FILES / "fast_nas_classification_search_for_testing.yaml"
TARGET_MS = 2.0
# The two trial executions every comparison runs (see the module docstring).
MODES = {
    "warm": ["--trial_isolation", "worker"],
    "baseline": ["--trial_isolation", "process", "--export_every_trial"],
}
NO_FINAL_EXPORT = ["--export_top_k", "0"]
BASELINE_NOTE = ("baseline = --trial_isolation process --export_every_trial (one process and"
                 " one SavedModel export per trial, as before warm workers); latency is timed in"
                 " memory in both: the old timing on the exported SavedModel (2.2 s a testing"
                 " trial, BENCHMARKS.md at commit 166dd5a, against ~0.6 s in memory) is no longer reproducible"
                 " by flags, the export is")
_EXPORT_LINE = "exporting the SavedModel"  # search_loop._export_best's first line on stderr


def _env(work_dir: Path) -> dict:
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NASCLI_CACHE_DIR=str(work_dir / "cache"))


def prepare_data(work_dir: Path, space: str) -> str:
  """Converts (or verifies) the space's embedded data set in the bench's cache, untimed; returns
  its folder."""
  code = ("from nascli.search import local_main;"
          f" print(local_main.embedded_dataset({space!r}))")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        env=_env(work_dir), cwd=ROOT, check=False)
  if proc.returncode != 0:
    raise SystemExit(f"converting the {space} data failed:\n{proc.stderr[-3000:]}")
  return proc.stdout.strip().splitlines()[-1]


def search(job_dir: Path, work_dir: Path, *flags: str, target_ms: float | None = TARGET_MS,
           command: str = "search_in_local", space: str = "mnasnet") -> dict:
  """Runs one search (search_in_local, or search on Ray); returns its command, wall time, the
  seconds its final exports took (from its 'exporting the SavedModel' line to its end) and
  every trial's analysis."""
  cmd = [sys.executable, "-m", "nascli", command, "--prebuilt_search_space", space,
         "--local_output_dir", str(job_dir), "--json", *flags]
  if target_ms is not None:
    cmd += ["--target_device_latency_ms", str(target_ms)]
  job_dir.parent.mkdir(parents=True, exist_ok=True)
  log_path = job_dir.parent / f"{job_dir.name}.stderr.log"
  tail = collections.deque(maxlen=60)
  export_at = None
  with tempfile.TemporaryFile("w+", encoding="utf-8") as out, \
       open(log_path, "w", encoding="utf-8") as log:
    started_at, start = time.time(), time.monotonic()
    # pylint: disable-next=consider-using-with
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, text=True,
                            env=_env(work_dir), cwd=ROOT)
    for line in proc.stderr:
      if export_at is None and line.startswith(_EXPORT_LINE):
        export_at = time.monotonic()
      log.write(line)
      tail.append(line)
    returncode = proc.wait()
    wall = time.monotonic() - start
    out.seek(0)
    stdout = out.read()
  if returncode != 0:
    raise SystemExit(f"search failed ({shlex.join(cmd)}):\n{''.join(tail)[-3000:]}")
  rows = json.loads(stdout)
  trials, ready = [], []
  for row in sorted(rows, key=lambda r: int(r["trial_id"])):
    with open(job_dir / row["trial_id"] / "model_analysis.json", encoding="utf-8") as f:
      trials.append(json.load(f))
    with open(job_dir / row["trial_id"] / "trial_spec.json", encoding="utf-8") as f:
      spawned = json.load(f).get("spawned_at")
    if spawned and trials[-1]["timing"]["startup_s"] is not None:
      ready.append(spawned + trials[-1]["timing"]["startup_s"])
  return {"command": shlex.join(cmd), "wall_s": wall, "rows": rows, "trials": trials,
          # The command's start -> its first trial begins: the driver's start and, overlapped
          # with it or after it, the first worker's or trial process's start and imports.
          "before_first_trial_s": round(min(ready) - started_at, 2) if ready else None,
          "final_export_s": None if export_at is None else round(wall - (export_at - start), 2)}


def _median(values):
  values = [v for v in values if v is not None]
  return round(statistics.median(values), 3) if values else None


def _ratio(a, b, digits: int = 2):
  return round(a / b, digits) if a is not None and b else None


def _parts(trials: list[dict]) -> dict:
  keys = trials[0]["timing"].keys()
  return {k: _median([t["timing"][k] for t in trials]) for k in keys}


def _rounds(count: int):
  """(round, mode) pairs: warm then baseline, then baseline then warm, and so on."""
  for r in range(count):
    order = ("warm", "baseline") if r % 2 == 0 else ("baseline", "warm")
    for mode in order:
      yield r, mode


def _work_s(trial: dict) -> float:
  return trial["timing"]["train_steps_s"] + trial["timing"]["eval_s"]


def _execution_summary(results: list[dict]) -> dict:
  """One execution's searches of one configuration: timing medians over all their trials, and
  over the trials after each search's first; and the whole command's overhead per trial.

  A trial's `startup_s` is the wait from its request to its start. Warm workers are started
  as the driver starts (executors.prestart), so part of the first worker's start (its imports)
  can be before the first request and is in no trial's timing: `before_first_trial_s` (command
  start -> first trial begins) and `command_overhead_s_per_trial` ((wall time - training steps
  - evaluation) / trials) count it, with the driver's own time, in either execution."""
  trials = [t for r in results for t in r["trials"]]
  later = [t for r in results for t in r["trials"][1:]]
  wall = sum(r["wall_s"] for r in results)
  trial_total = sum(t["timing"]["total_s"] for t in trials)
  command_overhead = wall - sum(_work_s(t) for t in trials)
  return {
      "searches": len(results), "trials": len(trials), "train_steps": trials[0]["step"],
      "median_parts_s": _parts(trials),
      "fixed_overhead_s_median": _median([t["timing"]["fixed_overhead_s"] for t in trials]),
      "fixed_overhead_share_median": _median([t["timing"]["fixed_overhead_share"]
                                              for t in trials]),
      "fixed_overhead_s_runs": [t["timing"]["fixed_overhead_s"] for t in trials],
      "first_trial_startup_s": [r["trials"][0]["timing"]["startup_s"] for r in results],
      "later_trials": ({"trials": len(later),
                        "fixed_overhead_s_median": _median(
                            [t["timing"]["fixed_overhead_s"] for t in later]),
                        "fixed_overhead_share_median": _median(
                            [t["timing"]["fixed_overhead_share"] for t in later]),
                        "total_s_median": _median([t["timing"]["total_s"] for t in later])}
                       if later else None),
      "search_wall_s": [round(r["wall_s"], 2) for r in results],
      "before_first_trial_s": [r["before_first_trial_s"] for r in results],
      "command_overhead_s_per_trial": round(command_overhead / len(trials), 2),
      "command_overhead_share": round(command_overhead / wall, 3),
      "trials_per_hour": round(len(trials) / wall * 3600, 1),
      "driver_s_per_trial": round((wall - trial_total) / len(trials), 2),
      "accuracy": [round(t["accuracy"], 4) for t in trials],
      "commands": [r["command"] for r in results],
  }


def _compare(label: str, by_mode: dict[str, list[dict]]) -> dict:
  warm, base = (_execution_summary(by_mode[m]) for m in ("warm", "baseline"))
  ratios = {k: _ratio(base["median_parts_s"][k], warm["median_parts_s"][k])
            for k in warm["median_parts_s"]}
  return {"label": label, "warm": warm, "baseline": base,
          "baseline_over_warm": {
              "fixed_overhead_s": _ratio(base["fixed_overhead_s_median"],
                                         warm["fixed_overhead_s_median"]),
              "command_overhead_s_per_trial": _ratio(base["command_overhead_s_per_trial"],
                                                     warm["command_overhead_s_per_trial"]),
              "parts": ratios},
          "warm_over_baseline_trials_per_hour": _ratio(warm["trials_per_hour"],
                                                       base["trials_per_hour"], 3)}


def _print_compare(c: dict) -> None:
  w, b = c["warm"], c["baseline"]
  later = w["later_trials"]
  print(f"{c['label']}: fixed overhead per trial (median) warm {w['fixed_overhead_s_median']} s"
        f" ({w['fixed_overhead_share_median']:.0%}), baseline {b['fixed_overhead_s_median']} s"
        f" ({b['fixed_overhead_share_median']:.0%}), baseline/warm"
        f" {c['baseline_over_warm']['fixed_overhead_s']}x"
        + (f"; warm after its first trial {later['fixed_overhead_s_median']} s" if later else "")
        + f"; trials/h warm {w['trials_per_hour']} vs {b['trials_per_hour']}"
        f" ({c['warm_over_baseline_trials_per_hour']}x)", file=sys.stderr)
  print(f"    whole command, per trial: overhead warm {w['command_overhead_s_per_trial']} s"
        f" ({w['command_overhead_share']:.0%}), baseline {b['command_overhead_s_per_trial']} s"
        f" ({b['command_overhead_share']:.0%}); command start -> first trial: warm"
        f" {w['before_first_trial_s']} s, baseline {b['before_first_trial_s']} s",
        file=sys.stderr)
  for key, value in w["median_parts_s"].items():
    print(f"    {key:22s} warm {value!s:>8}  baseline {b['median_parts_s'][key]!s:>8}",
          file=sys.stderr)


def overhead(args) -> dict:
  work = Path(args.work_dir)
  prepare_data(work, "mnasnet")
  testing = {"warm": [], "baseline": []}
  for r, mode in _rounds(args.rounds):
    result = search(work / f"overhead_testing_{mode}_{r}", work, "--max_nas_trial",
                    str(args.trials), "--max_parallel_nas_trial", "1", "--seed", str(1 + r),
                    "--overwrite", *MODES[mode], *NO_FINAL_EXPORT)
    testing[mode].append(result)
    print(f"testing YAML, round {r + 1}, {mode}: {result['wall_s']:.0f} s", file=sys.stderr)
  all_testing = [t for rs in testing.values() for r in rs for t in r["trials"]]
  steps = all_testing[0]["step"]
  per_step = statistics.median(t["timing"]["train_steps_s"] / t["step"] for t in all_testing)
  proxy_steps = max(100, int(round(args.proxy_seconds / per_step / 100.0)) * 100)
  loop = max(20, proxy_steps // 10)
  override = (f"trainer.train_steps={proxy_steps},trainer.steps_per_loop={loop},"
              f"trainer.summary_interval={loop},trainer.checkpoint_interval={proxy_steps},"
              f"trainer.validation_interval={proxy_steps},"
              f"trainer.optimizer_config.learning_rate.cosine.decay_steps={proxy_steps}")
  proxy = {"warm": [], "baseline": []}
  for r, mode in _rounds(args.rounds):
    result = search(work / f"overhead_proxy_{mode}_{r}", work, "--max_nas_trial",
                    str(args.proxy_trials), "--max_parallel_nas_trial", "1", "--seed",
                    str(1 + r), "--params_override", override, "--overwrite", *MODES[mode],
                    *NO_FINAL_EXPORT)
    proxy[mode].append(result)
    print(f"proxy, round {r + 1}, {mode}: {result['wall_s']:.0f} s", file=sys.stderr)
  out = {"testing_yaml": _compare(f"testing YAML ({steps} steps)", testing),
         "proxy": _compare(f"~{args.proxy_seconds:.0f} s proxy ({proxy_steps} steps)", proxy),
         "steady_seconds_per_step": round(per_step, 5), "baseline_note": BASELINE_NOTE}
  for key in ("testing_yaml", "proxy"):
    _print_compare(out[key])
  return out


def throughput(args) -> dict:
  """Trials per hour before (baseline flags) and after (defaults), 1 and 2 at a time."""
  work = Path(args.work_dir)
  prepare_data(work, "mnasnet")
  ray_dir = tempfile.mkdtemp(prefix="rayb", dir="/tmp")
  flags_of = {"before": MODES["baseline"], "after": []}
  commands = ["search_in_local"] + (["search"] if args.with_ray else [])
  runs = []
  try:
    for r in range(args.rounds):
      for parallel in (1, 2):
        flip = (r + parallel) % 2 == 0
        order = ("after", "before") if flip else ("before", "after")
        for command in commands:
          for when in order:
            flags = ["--max_nas_trial", str(args.trials), "--max_parallel_nas_trial",
                     str(parallel), "--seed", "1", "--overwrite", *flags_of[when]]
            if command == "search":
              flags += ["--ray_address", "local", "--ray_num_cpus", "2", "--ray_temp_dir",
                        ray_dir]
            result = search(work / f"tp_{command}_{when}_{parallel}_{r}", work, *flags,
                            command=command)
            trials = result["trials"]
            runs.append({
                "executor": "ray (local instance)" if command == "search" else "local",
                "when": when, "parallel": parallel, "round": r, "trials": len(trials),
                "wall_s": round(result["wall_s"], 1),
                "trials_per_hour": round(len(trials) / result["wall_s"] * 3600, 1),
                "final_export_s": result["final_export_s"],
                "before_first_trial_s": result["before_first_trial_s"],
                "startup_s_median": _median([t["timing"]["startup_s"] for t in trials]),
                "fixed_overhead_s_median": _median([t["timing"]["fixed_overhead_s"]
                                                    for t in trials]),
                "trial_total_s_median": _median([t["timing"]["total_s"] for t in trials]),
                "command": result["command"]})
            print(f"{runs[-1]['executor']} {when} x{parallel}: {runs[-1]['trials_per_hour']}"
                  f" trials/h ({result['wall_s']:.0f} s)", file=sys.stderr)
  finally:
    shutil.rmtree(ray_dir, ignore_errors=True)

  def tph(executor, when, parallel):
    rs = [x for x in runs if (x["executor"].split()[0], x["when"], x["parallel"])
          == (executor, when, parallel)]
    return round(sum(x["trials"] for x in rs) / sum(x["wall_s"] for x in rs) * 3600, 1)

  executors = ["local"] + (["ray"] if args.with_ray else [])
  table = {f"{e} {w} x{p}": tph(e, w, p) for e in executors for w in ("before", "after")
           for p in (1, 2)}
  ratios = {}
  for e in executors:
    for p in (1, 2):
      ratios[f"{e}: after/before trials per hour, {p} at a time"] = _ratio(
          tph(e, "after", p), tph(e, "before", p), 3)
    for w in ("before", "after"):
      ratios[f"{e} {w}: 2 at a time / 1 at a time, trials per hour"] = _ratio(
          tph(e, w, 2), tph(e, w, 1), 3)
  if args.with_ray:
    for w in ("before", "after"):
      for p in (1, 2):
        ratios[f"{w}: ray/local trials per hour, {p} at a time"] = _ratio(
            tph("ray", w, p), tph("local", w, p), 3)
  for key, value in ratios.items():
    print(f"{key}: {value}", file=sys.stderr)
  return {"runs": runs, "trials_per_hour": table, "ratios": ratios,
          "before_flags": " ".join(MODES["baseline"]),
          "after_flags": "(none: --trial_isolation worker --export_top_k 3)",
          "baseline_note": BASELINE_NOTE}


def spearman(a: list[float], b: list[float]) -> float:
  """Spearman's rank correlation: Pearson's of the ranks (ties get their average rank)."""
  def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
      j = i
      while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
        j += 1
      for k in range(i, j + 1):
        out[order[k]] = (i + j) / 2.0 + 1.0
      i = j + 1
    return out

  ra, rb = ranks(a), ranks(b)
  ma, mb = statistics.fmean(ra), statistics.fmean(rb)
  cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
  var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
  return cov / var if var else float("nan")


def _architectures(count: int, seed: int) -> list[dict]:
  """The first `count` random proposals of the mnasnet space."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import controller
  from tf_vision import search_spaces
  return controller.random_architectures(search_spaces.get_search_space("mnasnet"), count, seed)


def _timed_calls(functions: dict, inputs, warmup: int, runs: int) -> dict[str, list[float]]:
  """Milliseconds of `runs` calls of each function, the calls alternating (A B, B A, ...) so
  that whatever else the machine runs meanwhile slows both alike. A call is timed as
  tf_vision/serving/latency.py times it: outputs copied to numpy."""
  names = list(functions)
  for name in names:
    for _ in range(warmup):
      {k: v.numpy() for k, v in functions[name](inputs).items()}
  times = {name: [] for name in names}
  for i in range(runs):
    for name in names if i % 2 == 0 else names[::-1]:
      start = time.perf_counter()
      {k: v.numpy() for k, v in functions[name](inputs).items()}
      times[name].append((time.perf_counter() - start) * 1000.0)
  return times


def latency_agreement(args) -> dict:
  """In-memory serving-function latency against the exported SavedModel's, per architecture."""
  work = Path(args.work_dir)
  data = prepare_data(work, "mnasnet")
  # pylint: disable=g-import-not-at-top
  from nascli import frameworks, runtime
  runtime.quiet_libraries()
  frameworks.load()
  import tensorflow as tf
  import tf_keras
  from nascli import training
  from nascli.run_spec import Architecture, DataSpec, RunSpec
  from official.core import task_factory
  from tf_vision.serving import export_lib, latency
  override = (None if args.input_size is None else
              f"task.model.input_size=[{args.input_size},{args.input_size},3]")
  scratch = Path(tempfile.mkdtemp(prefix="latency_agreement_", dir=work))
  rows = []
  try:
    for index, nas_params in enumerate(_architectures(args.architectures, args.seed)):
      run = RunSpec(config_files=[str(TESTING_YAML)], params_override=override,
                    data=DataSpec(dataset_dir=data), seed=1,
                    architecture=Architecture("mnasnet", nas_params))
      model_dir = scratch / str(index)
      params = training.plan(training.TrainArgs(run=run, model_dir=str(model_dir))).params
      model = task_factory.get_task(params.task, logging_dir=str(model_dir)).build_model()
      prefix = tf.train.Checkpoint(model=model).write(str(model_dir / "weights" / "ckpt"))
      start = time.monotonic()
      saved = export_lib.export(params, prefix, model_dir / "export", overwrite=True)
      export_s = time.monotonic() - start

      # What a trial measures now, and what it measured before, each as the trial calls it.
      def in_memory():
        return latency.measure_model_latency(params, model, batch_sizes=(1,),
                                             runs=args.runs)["batch"]["1"]

      def from_saved_model():
        return latency.measure_latency(saved, batch_sizes=(1,), runs=args.runs)["batch"]["1"]

      if index == 0:
        in_memory()  # untimed: the process's first calls pay one-off runtime set-up
      order = ("in_memory", "saved_model") if index % 2 == 0 else ("saved_model", "in_memory")
      measured = {}
      for what in order:
        measured[what] = in_memory() if what == "in_memory" else from_saved_model()
      # The same two functions, call by call in turn: the machine's drift cancels out.
      signature = tf.saved_model.load(saved).signatures[latency.SIGNATURE_KEY]
      input_name = next(iter(signature.structured_input_signature[1]))
      inputs = latency.make_inputs("image_tensor", 1, export_lib.image_size_of(params))
      paired = _timed_calls(
          {"in_memory": latency.serving_function(params, model),
           "saved_model": lambda x, s=signature, n=input_name: s(**{n: x})},
          inputs, warmup=5, runs=args.runs)
      row = {"architecture": index, "nas_params": nas_params, "params": model.count_params(),
             "order": list(order), "export_s": round(export_s, 2),
             "in_memory_ms": measured["in_memory"]["median_ms"],
             "saved_model_ms": measured["saved_model"]["median_ms"],
             "in_memory": measured["in_memory"], "saved_model": measured["saved_model"],
             "paired_in_memory_ms": round(statistics.median(paired["in_memory"]), 4),
             "paired_saved_model_ms": round(statistics.median(paired["saved_model"]), 4),
             "paired_in_memory_min_ms": round(min(paired["in_memory"]), 4),
             "paired_saved_model_min_ms": round(min(paired["saved_model"]), 4)}
      row["ratio"] = round(row["in_memory_ms"] / row["saved_model_ms"], 4)
      row["paired_ratio"] = round(row["paired_in_memory_ms"] / row["paired_saved_model_ms"], 4)
      rows.append(row)
      print(f"architecture {index}: {row['params']:,} params; one after the other: in memory"
            f" {row['in_memory_ms']:.3f} ms, SavedModel {row['saved_model_ms']:.3f} ms, ratio"
            f" {row['ratio']:.3f}; call by call in turn: {row['paired_in_memory_ms']:.3f} /"
            f" {row['paired_saved_model_ms']:.3f} ms, ratio {row['paired_ratio']:.3f}"
            f" (export {export_s:.1f} s)", file=sys.stderr)
      tf_keras.backend.clear_session()
  finally:
    shutil.rmtree(scratch, ignore_errors=True)

  def agreement(a_key: str, b_key: str, ratio_key: str | None) -> dict:
    a, b = [r[a_key] for r in rows], [r[b_key] for r in rows]
    out = {"spearman": round(spearman(a, b), 4), "saved_model_ms_range": [min(b), max(b)]}
    if ratio_key:
      ratios = [r[ratio_key] for r in rows]
      out.update({"median_ratio_in_memory_over_saved_model": round(statistics.median(ratios), 4),
                  "ratio_range": [min(ratios), max(ratios)]})
    return out

  sequential = agreement("in_memory_ms", "saved_model_ms", "ratio")
  paired = agreement("paired_in_memory_ms", "paired_saved_model_ms", "paired_ratio")
  summary = {
      "architectures": len(rows), "runs": args.runs, "goal_spearman": 0.9,
      # As the trials call them: measure_model_latency, then measure_latency (or the reverse).
      "one_after_the_other": dict(sequential, goal_met=sequential["spearman"] >= 0.9),
      # The same two functions, their calls alternating.
      "call_by_call": dict(paired, goal_met=paired["spearman"] >= 0.9),
      "call_by_call_minimum": agreement("paired_in_memory_min_ms", "paired_saved_model_min_ms",
                                        None),
      # How much of the ranking is size alone.
      "spearman_params_vs_saved_model": round(
          spearman([r["params"] for r in rows], [r["paired_saved_model_ms"] for r in rows]), 4),
      "export_s_median": _median([r["export_s"] for r in rows]),
  }
  for label, s in (("one after the other", sequential), ("call by call", paired)):
    print(f"latency agreement over {len(rows)} architectures, {label}: Spearman"
          f" {s['spearman']:.3f} (goal >= 0.9), median in-memory/SavedModel"
          f" {s['median_ratio_in_memory_over_saved_model']:.3f} (range"
          f" {s['ratio_range'][0]:.3f}..{s['ratio_range'][1]:.3f}); SavedModel medians"
          f" {s['saved_model_ms_range'][0]:.3f}..{s['saved_model_ms_range'][1]:.3f} ms",
          file=sys.stderr)
  return {"rows": rows, "summary": summary,
          "input_size": args.input_size or "the testing YAML's (32)",
          "how": ("per architecture: training.plan(TrainArgs(RunSpec(config_files=[testing YAML],"
                  " data=digits, architecture=mnasnet nas_params))).params;"
                  " task_factory.get_task(params.task).build_model(); the untrained weights"
                  " written with tf.train.Checkpoint(model=model) and exported with"
                  " export_lib.export(params, checkpoint, dir). One after the other (order"
                  " alternating per architecture): latency.measure_model_latency(params, model,"
                  " batch_sizes=(1,), runs=R) and latency.measure_latency(saved,"
                  " batch_sizes=(1,), runs=R), warmup 5 each. Call by call: the same two"
                  " functions (latency.serving_function and the loaded serving_default),"
                  " R calls each, alternating A B / B A, warmup 5 each")}


def spinenet(args) -> dict:
  """The default spinenet search, warm against baseline: per-trial seconds and parts."""
  work = Path(args.work_dir)
  prepare_data(work, "spinenet")
  by_mode = {"warm": [], "baseline": []}
  for r, mode in _rounds(args.rounds):
    result = search(work / f"spinenet_{mode}_{r}", work, "--max_nas_trial", str(args.trials),
                    "--max_parallel_nas_trial", str(args.parallel), "--seed", str(1 + r),
                    "--overwrite", *MODES[mode], *NO_FINAL_EXPORT,
                    *(["--params_override", args.params_override] if args.params_override
                      else []), target_ms=None, space="spinenet")
    by_mode[mode].append(result)
    print(f"spinenet, round {r + 1}, {mode}: {result['wall_s']:.0f} s", file=sys.stderr)
  out = _compare(f"spinenet testing YAML, {args.parallel} at a time"
                 + (f" (--params_override {args.params_override})" if args.params_override
                    else ""), by_mode)
  for mode in ("warm", "baseline"):
    trials = [t for r in by_mode[mode] for t in r["trials"]]
    out[mode]["total_s_runs"] = [t["timing"]["total_s"] for t in trials]
    out[mode]["total_s_median"] = _median(out[mode]["total_s_runs"])
  out["goal_warm_total_s"] = 60.0
  out["goal_met"] = out["warm"]["total_s_median"] <= 60.0
  out["baseline_note"] = BASELINE_NOTE
  _print_compare(out)
  print(f"spinenet trial total (median): warm {out['warm']['total_s_median']} s (goal <= 60),"
        f" baseline {out['baseline']['total_s_median']} s; AP warm {out['warm']['accuracy']},"
        f" baseline {out['baseline']['accuracy']}", file=sys.stderr)
  return out


def algorithms(args) -> dict:
  work = Path(args.work_dir)
  prepare_data(work, "mnasnet")
  runs = []
  for seed in [int(s) for s in args.seeds.split(",")]:
    for algorithm in ("random", "regularized_evolution"):
      flags = ["--max_nas_trial", str(args.trials), "--max_parallel_nas_trial",
               str(args.parallel), "--seed", str(seed), "--search_algorithm", algorithm,
               "--overwrite"]
      if algorithm == "regularized_evolution":
        flags += ["--population_size", str(args.population_size), "--tournament_size",
                  str(args.tournament_size)]
      result = search(work / f"algo_{algorithm}_{seed}", work, *flags, target_ms=None)
      rewards = [r["reward"] for r in sorted(result["rows"], key=lambda r: int(r["trial_id"]))]
      best_so_far, best = [], None
      for r in rewards:
        best = r if best is None else max(best, r)
        best_so_far.append(round(best, 4))
      runs.append({"seed": seed, "algorithm": algorithm, "best_reward": best,
                   "best_so_far": best_so_far, "rewards": [round(r, 4) for r in rewards],
                   "distinct_architectures": len({json.dumps(r["nas_params"], sort_keys=True)
                                                  for r in result["rows"]}),
                   "wall_s": round(result["wall_s"], 1), "command": result["command"]})
      print(f"seed {seed} {algorithm}: best {best:.4f} after {len(rewards)} trials"
            f" ({result['wall_s']:.0f} s)", file=sys.stderr)
  by = {a: [r for r in runs if r["algorithm"] == a] for a in ("random", "regularized_evolution")}
  diffs = [e["best_reward"] - r["best_reward"]
           for r, e in zip(by["random"], by["regularized_evolution"])]
  return {"runs": runs,
          "summary": {a: {"best_reward_median": _median([r["best_reward"] for r in rs]),
                          "best_reward_mean": round(
                              statistics.mean(r["best_reward"] for r in rs), 4),
                          "mean_best_so_far": [round(statistics.mean(v), 4) for v in
                                               zip(*[r["best_so_far"] for r in rs])]}
                      for a, rs in by.items()},
          "evolution_minus_random_best_per_seed": [round(d, 4) for d in diffs],
          "evolution_wins": sum(d > 0 for d in diffs), "ties": sum(d == 0 for d in diffs)}


def _compute_curve(job_dir: Path, train_steps: int) -> dict:
  """From a search's journal, in event order: training steps spent so far (every attempt that
  reported, rungs included) and the best reward of a trial trained to the full budget so far."""
  sys.path.insert(0, str(ROOT))
  from nascli.search import scheduler  # pylint: disable=g-import-not-at-top
  with open(job_dir / "journal.jsonl", encoding="utf-8") as f:
    events = [json.loads(line) for line in f if line.strip()]
  curve, best = [], None
  for i, e in enumerate(events):
    if e["event"] not in (scheduler.RUNG, "completed"):
      continue
    # What the journal so far says was spent (an attempt's steps depend on the ones before).
    spent = sum(t["steps"] for t in scheduler.compute_spent(events[:i + 1], train_steps).values())
    if e["event"] == "completed":
      best = e["reward"] if best is None else max(best, e["reward"])
    curve.append([spent, None if best is None else round(best, 4)])
  per_trial = scheduler.compute_spent(events, train_steps)
  statuses = collections.Counter(e["event"] for e in events
                                 if e["event"] in ("completed", "stopped", "failed"))
  # Attempts after a trial's first rung: wall seconds, continued in memory or from a checkpoint.
  later = [e["metrics"] for e in events if e["event"] in ("rung", "completed")
           and (e["metrics"].get("rung") or 0) > 0]
  promoted = {key: [m["wall_s"] for m in later if bool(m.get("in_memory")) == flag]
              for key, flag in (("in_memory", True), ("from_checkpoint", False))}
  return {"curve": curve, "steps": sum(t["steps"] for t in per_trial.values()),
          "promoted_attempts": {k: {"count": len(v), "wall_s_mean":
                                    round(statistics.mean(v), 2) if v else None}
                                for k, v in promoted.items()},
          "attempt_wall_s": round(sum(t["wall_s"] for t in per_trial.values()), 1),
          "best_reward": best, "statuses": dict(statuses)}


def early_stopping(args) -> dict:
  """ASHA against no early stopping on digits with a proxy long enough for ranking to matter."""
  work = Path(args.work_dir)
  prepare_data(work, "mnasnet")
  steps = args.proxy_steps
  loop = args.min_steps
  override = (f"trainer.train_steps={steps},trainer.steps_per_loop={loop},"
              f"trainer.summary_interval={loop},trainer.checkpoint_interval={steps},"
              f"trainer.validation_interval={steps},"
              f"trainer.optimizer_config.learning_rate.cosine.decay_steps={steps}")
  names = args.schedulers.split(",")
  if names[0] != "none":
    raise SystemExit("early_stopping: --schedulers must start with none (the baseline)")
  configs = {"none": ["--max_nas_trial", str(args.trials), "--early_stopping", "none"]}
  for name in names[1:]:
    # NAME@K: --paused_trials_per_worker K (e.g. asha_promotions@0: promotions from checkpoints)
    rule, _, kept = name.partition("@")
    # auto: the default decides its rungs, as a user who gives no early-stopping flag gets.
    ladder = [] if rule == "auto" else ["--min_steps", str(args.min_steps),
                                        "--reduction_factor", str(args.reduction_factor)]
    configs[name] = ["--max_nas_trial", str(args.trials * args.asha_trials_factor),
                     "--early_stopping", rule, *ladder,
                     *(["--paused_trials_per_worker", kept] if kept else [])]
  data_flags = shlex.split(args.data_flags or "")
  runs = []
  seeds = [int(s) for s in args.seeds.split(",")]
  for i, seed in enumerate(seeds):
    order = names[i % len(names):] + names[:i % len(names)]  # each first on some seed
    for name in order:
      job = work / f"es_{name}_{seed}"
      result = search(job, work, *configs[name], "--max_parallel_nas_trial", "1", "--seed",
                      str(seed), "--search_algorithm", "random", "--params_override", override,
                      "--overwrite", *data_flags,
                      *NO_FINAL_EXPORT, target_ms=None)
      curve = _compute_curve(job, steps)
      runs.append({"seed": seed, "early_stopping": name, "wall_s": round(result["wall_s"], 1),
                   "command": result["command"], **curve})
      print(f"seed {seed} {name}: best {curve['best_reward']} with {curve['steps']} steps"
            f" ({result['wall_s']:.0f} s, {curve['statuses']})", file=sys.stderr)
  by = {n: {r["seed"]: r for r in runs if r["early_stopping"] == n} for n in configs}
  nones = [r["best_reward"] for r in by["none"].values()]
  # Run-to-run spread: the std of no early stopping's best over the seeds; "reached" within it.
  spread = statistics.stdev(nones) if len(nones) > 1 else 0.0
  summary = {"none_best_mean": round(statistics.mean(nones), 4),
             "none_best_std_over_seeds": round(spread, 4),
             "none_wall_s_mean": round(statistics.mean(r["wall_s"] for r in by["none"].values()),
                                       1)}
  per_seed = {}
  for name in names[1:]:
    per_seed[name] = _versus_none(by["none"], by[name], seeds, spread)
    summary[name] = {
        "best_mean": round(statistics.mean(r["best_reward"] for r in by[name].values()), 4),
        "compute_ratio_mean": round(statistics.mean(
            r["steps"] / by["none"][r["seed"]]["steps"] for r in by[name].values()), 3),
        "wall_ratio_mean": round(statistics.mean(p["wall_ratio"] for p in per_seed[name]), 3),
        "seeds_within_spread_at_half_compute": sum(
            1 for p in per_seed[name] if p["compute_ratio_to_reach_within_spread"] is not None
            and p["compute_ratio_to_reach_within_spread"] <= 0.5)}
  return {"proxy_steps": steps, "override": override, "runs": runs, "per_seed": per_seed,
          "summary": summary}


def _versus_none(none_runs: dict, runs: dict, seeds: list[int], spread: float) -> list[dict]:
  """Per seed: a scheduler's search against no early stopping's on the same seed."""
  per_seed = []
  for seed in seeds:
    none, asha = none_runs[seed], runs[seed]
    # The compute at which ASHA's best full-budget reward first reached no early stopping's.
    # The curve's rewards are rounded to 4 places: compare at that precision.
    reach = next((c for c, b in asha["curve"]
                  if b is not None and b >= round(none["best_reward"], 4)),
                 None)
    # ASHA's best within the compute no early stopping spent.
    within = max((b for c, b in asha["curve"] if b is not None and c <= none["steps"]),
                 default=None)
    per_seed.append({"seed": seed, "none_best": none["best_reward"],
                     "asha_best": asha["best_reward"], "asha_best_within_none_compute": within,
                     "none_steps": none["steps"], "asha_steps": asha["steps"],
                     "asha_steps_to_reach_none_best": reach,
                     "compute_ratio_to_reach": _ratio(reach, none["steps"], 3),
                     "wall_ratio": _ratio(asha["wall_s"], none["wall_s"], 3)})
    p = per_seed[-1]
    p["asha_steps_to_reach_none_best_within_spread"] = reach = next(
        (c for c, b in asha["curve"]
         if b is not None and b >= round(p["none_best"] - spread, 4)), None)
    p["compute_ratio_to_reach_within_spread"] = _ratio(reach, p["none_steps"], 3)
  return per_seed


PARTS = {"overhead": overhead, "throughput": throughput, "latency_agreement": latency_agreement,
         "spinenet": spinenet, "algorithms": algorithms, "early_stopping": early_stopping}
DEFAULT_TRIALS = {"overhead": 3, "throughput": 6, "spinenet": 2, "algorithms": 12,
                  "early_stopping": 6}
DEFAULT_ROUNDS = {"overhead": 2, "throughput": 1, "spinenet": 1}


def main() -> None:
  parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
  parser.add_argument("part", choices=tuple(PARTS))
  parser.add_argument("--work_dir", default="/tmp/nascli_bench_search")
  parser.add_argument("--out")
  parser.add_argument("--trials", type=int)
  parser.add_argument("--rounds", type=int, help="warm/baseline (before/after) pairs per"
                      " configuration, alternating their order")
  parser.add_argument("--proxy_seconds", type=float, default=120.0)
  parser.add_argument("--proxy_trials", type=int, default=2)
  parser.add_argument("--with_ray", action="store_true", help="throughput: also nascli search")
  parser.add_argument("--architectures", type=int, default=12)
  parser.add_argument("--runs", type=int, default=50, help="latency_agreement: timed calls")
  parser.add_argument("--input_size", type=int, default=None,
                      help="latency_agreement: image size (default: the testing YAML's)")
  parser.add_argument("--seed", type=int, default=4, help="latency_agreement: proposals' seed")
  parser.add_argument("--params_override", help="spinenet: added to the search (a shorter"
                      " trial for a quick check of the bench itself)")
  parser.add_argument("--seeds", default="1,2,3")
  parser.add_argument("--parallel", type=int)
  parser.add_argument("--population_size", type=int, default=4)
  parser.add_argument("--tournament_size", type=int, default=2)
  parser.add_argument("--proxy_steps", type=int, default=540,
                      help="early_stopping: a full trial's training steps")
  parser.add_argument("--min_steps", type=int, default=90, help="early_stopping: ASHA's first"
                      " rung (also the proxy's steps_per_loop)")
  parser.add_argument("--reduction_factor", type=int, default=3)
  parser.add_argument("--schedulers", default="none,asha,asha_promotions",
                      help="early_stopping: none, then the --early_stopping values to compare")
  parser.add_argument("--data_flags", help="early_stopping: flags added to every search, e.g."
                      " \"--dataset_dir DIR --config_file YAML\" (default: the embedded digits"
                      " and the testing YAML)")
  parser.add_argument("--asha_trials_factor", type=int, default=2,
                      help="early_stopping: ASHA proposes this many times --trials")
  args = parser.parse_args()
  if args.trials is None:
    args.trials = DEFAULT_TRIALS.get(args.part)
  if args.rounds is None:
    args.rounds = DEFAULT_ROUNDS.get(args.part, 1)
  if args.parallel is None:
    args.parallel = 1 if args.part == "spinenet" else 2
  start = time.monotonic()
  machine = host.machine()
  result = PARTS[args.part](args)
  report = {"part": args.part, "args": vars(args),
            "bench_command": shlex.join([sys.executable, *sys.argv]),
            "machine": machine, "loadavg_at_end": os.getloadavg(),
            "bench_wall_s": round(time.monotonic() - start, 1), **result}
  out = Path(args.out or ROOT / "bench" / "results" / f"search_{args.part}.json")
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(report, indent=2))
  print(json.dumps(report, indent=2))
  print(f"wrote {out} ({report['bench_wall_s']:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
  main()
