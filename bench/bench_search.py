"""search_in_local: what a trial's time is spent on, and evolution against random search.

    python bench/bench_search.py overhead [--trials 3] [--proxy_seconds 120]
    python bench/bench_search.py algorithms [--seeds 1,2,3] [--trials 12]
                                            [--population_size 4] [--tournament_size 2]
    python bench/bench_search.py throughput [--trials 6]
    (both: [--work_dir /tmp/nascli_bench_search] [--out bench/results/search_<part>.json])

Every search is the real command, `python -m nascli search_in_local --prebuilt_search_space
mnasnet`, on the embedded digits (32x32, converted once into WORK_DIR/cache) with the mnasnet
testing YAML (tf_vision/test_files/fast_nas_classification_search_for_testing.yaml), each trial
its own process. Numbers come from what the search writes: each trial's model_analysis.json
`timing` (see nascli/search/trial.py: timing_breakdown) and the journal.

overhead    `--trials` trials of the testing YAML one at a time, then one trial of a proxy task
            whose training steps take about `--proxy_seconds` (the step count is computed from
            the steady per-step time the first part measured; the cosine decay follows it). A
            trial's fixed overhead is everything but the training steps and the evaluation:
            process start and imports, config/model build and graph tracing (the first loop's
            excess over the steady step time), checkpoints, export, latency timing, FLOPs
            count. Reported: each part's median seconds and the overhead's share of a trial,
            plus the driver's own time per trial (search wall time over trials minus the
            trials' time).
algorithms  For each seed, a search of `--trials` trials with `random` and one with
            `regularized_evolution` (population/tournament as given), two trials at a time.
            The reward is the validation accuracy (no latency target): latency timed on a
            shared 2-core machine while another trial trains is noisy, and that noise would
            favour whichever search ran at quieter moments.
            Reported: the best reward each search reached, best-so-far after each trial, the
            number of distinct architectures, and per seed evolution's best minus random's.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import host  # bench/host.py (scripts run from bench/)

ROOT = Path(__file__).resolve().parents[1]
TESTING_YAML = ROOT / "tf_vision" / "test_files" / "fast_nas_classification_search_for_testing.yaml"
TARGET_MS = 2.0


def search(job_dir: Path, work_dir: Path, *flags: str, target_ms: float | None = TARGET_MS,
           command: str = "search_in_local") -> dict:
  """Runs one search (search_in_local, or search on Ray); returns its wall time and every
  trial's analysis."""
  cmd = [sys.executable, "-m", "nascli", command, "--prebuilt_search_space", "mnasnet",
         "--local_output_dir", str(job_dir), "--json", *flags]
  if target_ms is not None:
    cmd += ["--target_device_latency_ms", str(target_ms)]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NASCLI_CACHE_DIR=str(work_dir / "cache"))
  start = time.monotonic()
  proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, cwd=ROOT)
  wall = time.monotonic() - start
  if proc.returncode != 0:
    raise SystemExit(f"search failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
  rows = json.loads(proc.stdout)
  trials = []
  for row in rows:
    with open(job_dir / row["trial_id"] / "model_analysis.json", encoding="utf-8") as f:
      trials.append(json.load(f))
  return {"wall_s": wall, "rows": rows, "trials": trials}


def _median(values):
  values = [v for v in values if v is not None]
  return round(statistics.median(values), 3) if values else None


def _parts(trials: list[dict]) -> dict:
  keys = trials[0]["timing"].keys()
  return {k: _median([t["timing"][k] for t in trials]) for k in keys}


def overhead(args) -> dict:
  work = Path(args.work_dir)
  testing = search(work / "overhead_testing", work, "--max_nas_trial", str(args.trials),
                   "--seed", "1", "--overwrite")
  steps = [t["step"] for t in testing["trials"]]
  per_step = statistics.median(t["timing"]["train_steps_s"] / t["step"]
                               for t in testing["trials"])
  proxy_steps = max(100, int(round(args.proxy_seconds / per_step / 100.0)) * 100)
  loop = max(20, proxy_steps // 10)
  override = (f"trainer.train_steps={proxy_steps},trainer.steps_per_loop={loop},"
              f"trainer.summary_interval={loop},trainer.checkpoint_interval={proxy_steps},"
              f"trainer.validation_interval={proxy_steps},"
              f"trainer.optimizer_config.learning_rate.cosine.decay_steps={proxy_steps}")
  proxy = search(work / "overhead_proxy", work, "--max_nas_trial", "1", "--seed", "1",
                 "--params_override", override, "--overwrite")

  def summary(result, label):
    trials = result["trials"]
    parts = _parts(trials)
    trial_total = sum(t["timing"]["total_s"] for t in trials)
    return {"label": label, "trials": len(trials), "train_steps": trials[0]["step"],
            "median_parts_s": parts,
            "fixed_overhead_share_runs": [t["timing"]["fixed_overhead_share"] for t in trials],
            "search_wall_s": round(result["wall_s"], 2),
            "driver_s_per_trial": round((result["wall_s"] - trial_total) / len(trials), 2),
            "accuracy": [round(t["accuracy"], 4) for t in trials]}

  return {"testing_yaml": summary(testing, f"testing YAML ({steps[0]} steps)"),
          "proxy": summary(proxy, f"~{args.proxy_seconds:.0f} s proxy ({proxy_steps} steps)"),
          "steady_seconds_per_step": round(per_step, 5)}


def algorithms(args) -> dict:
  work = Path(args.work_dir)
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
                   "wall_s": round(result["wall_s"], 1)})
      print(f"seed {seed} {algorithm}: best {best:.4f} after {len(rewards)} trials"
            f" ({result['wall_s']:.0f} s)", file=sys.stderr)
  by = {a: [r for r in runs if r["algorithm"] == a] for a in ("random", "regularized_evolution")}
  diffs = [e["best_reward"] - r["best_reward"]
           for r, e in zip(by["random"], by["regularized_evolution"])]
  return {"runs": runs,
          "summary": {a: {"best_reward_median": _median([r["best_reward"] for r in rs]),
                          "best_reward_mean": round(statistics.mean(r["best_reward"] for r in rs), 4),
                          "mean_best_so_far": [round(statistics.mean(v), 4) for v in
                                               zip(*[r["best_so_far"] for r in rs])]}
                      for a, rs in by.items()},
          "evolution_minus_random_best_per_seed": [round(d, 4) for d in diffs],
          "evolution_wins": sum(d > 0 for d in diffs), "ties": sum(d == 0 for d in diffs)}


def throughput(args) -> dict:
  """Trials per hour, local processes against Ray tasks, 1 and 2 at a time."""
  work = Path(args.work_dir)
  ray_dir = tempfile.mkdtemp(prefix="rayb", dir="/tmp")
  runs = []
  try:
    for parallel in (1, 2):
      for command in ("search_in_local", "search"):
        flags = ["--max_nas_trial", str(args.trials), "--max_parallel_nas_trial", str(parallel),
                 "--seed", "1", "--overwrite"]
        if command == "search":
          flags += ["--ray_address", "local", "--ray_num_cpus", "2", "--ray_temp_dir", ray_dir]
        result = search(work / f"tp_{command}_{parallel}", work, *flags, command=command)
        trials = result["trials"]
        runs.append({
            "executor": "ray (local instance)" if command == "search" else "local processes",
            "parallel": parallel, "trials": len(trials), "wall_s": round(result["wall_s"], 1),
            "trials_per_hour": round(len(trials) / result["wall_s"] * 3600, 1),
            # spawn (spec written) -> the trial's training starts: process start and imports,
            # plus, on Ray, the task's scheduling and worker hand-off.
            "startup_s_median": _median([t["timing"]["startup_s"] for t in trials]),
            "trial_total_s_median": _median([t["timing"]["total_s"] for t in trials])})
        print(f"{runs[-1]['executor']} x{parallel}: {runs[-1]['trials_per_hour']} trials/h",
              file=sys.stderr)
  finally:
    shutil.rmtree(ray_dir, ignore_errors=True)
  by = {(r["executor"].split()[0], r["parallel"]): r for r in runs}
  ratios = {}
  for p in (1, 2):
    ratios[f"ray/local trials per hour, {p} at a time"] = round(
        by[("ray", p)]["trials_per_hour"] / by[("local", p)]["trials_per_hour"], 3)
    ratios[f"ray scheduling overhead per trial, {p} at a time (s, startup difference)"] = round(
        by[("ray", p)]["startup_s_median"] - by[("local", p)]["startup_s_median"], 2)
  for e in ("local", "ray"):
    ratios[f"{e}: 2 at a time / 1 at a time, trials per hour"] = round(
        by[(e, 2)]["trials_per_hour"] / by[(e, 1)]["trials_per_hour"], 3)
  return {"runs": runs, "ratios": ratios}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("part", choices=("overhead", "algorithms", "throughput"))
  parser.add_argument("--work_dir", default="/tmp/nascli_bench_search")
  parser.add_argument("--out")
  parser.add_argument("--trials", type=int)
  parser.add_argument("--proxy_seconds", type=float, default=120.0)
  parser.add_argument("--seeds", default="1,2,3")
  parser.add_argument("--parallel", type=int, default=2)
  parser.add_argument("--population_size", type=int, default=4)
  parser.add_argument("--tournament_size", type=int, default=2)
  args = parser.parse_args()
  if args.trials is None:
    args.trials = {"overhead": 3, "algorithms": 12, "throughput": 6}[args.part]
  start = time.monotonic()
  result = {"overhead": overhead, "algorithms": algorithms, "throughput": throughput}[
      args.part](args)
  report = {"part": args.part, "args": vars(args),
            "machine": host.machine(),
            "bench_wall_s": round(time.monotonic() - start, 1), **result}
  out = Path(args.out or ROOT / "bench" / "results" / f"search_{args.part}.json")
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(report, indent=2))
  print(json.dumps(report, indent=2))


if __name__ == "__main__":
  main()
