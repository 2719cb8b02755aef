"""Does a task + recipe tell architectures apart by more than retraining one changes?

    python bench/bench_task_signal.py --dataset_dir DIR [--config_file YAML ...]
        [--params_override A.B=C,...] [--archs 10] [--arch_seed 0] [--seeds 0,1]
        [--space mnasnet] [--work_dir bench/results/task_signal] [--out FILE.json]

Takes the first --archs architectures random search proposes with --arch_seed (the same set
for every recipe), trains each one once per training seed (`nascli train --nas_params_str JSON
--seed S`, everything else equal: the data in --dataset_dir, the recipe in --config_file and
--params_override, passed through unchanged) and prints a markdown table: per architecture its
accuracy under each seed, then Kendall tau (scipy.stats.kendalltau) between the rankings under
the first two seeds, the spread (std across architectures of their mean accuracy), the noise
(pooled within-architecture std across seeds: the root of the mean per-architecture sample
variance) and their ratio, the accuracy range, the seconds per training (`nascli train`'s own
training time and the wall time of the whole command, start-up included) and the machine.

Every training is a subprocess of the product's own command, one at a time (each uses every
core). Resumable: each finished training leaves WORK_DIR/archII_seedS.json and is skipped on a
rerun (an unfinished one is started afresh, so its time is clean); WORK_DIR/recipe.json holds
the data set, recipe and architectures, and a rerun with other ones is refused (use another
--work_dir). The result JSON (default WORK_DIR/summary.json) has every number of the table.

Give the recipe as a whole (a copy of the testing YAML with your changes, plus overrides):
with a config flag, `nascli train --nas_params_str` starts from the experiment's defaults
beneath it (without one it would use stage 2's recipe, 11 epochs of the data). Example, the
testing YAML stretched to 810 steps on digits_clutter (BENCHMARKS.md):

    nascli convert-data digits_clutter --output_dir /tmp/dc --num_shards 2
    O=trainer.train_steps=810,trainer.steps_per_loop=90,trainer.checkpoint_interval=810
    O=$O,trainer.validation_interval=810
    O=$O,trainer.optimizer_config.learning_rate.cosine.decay_steps=810
    python bench/bench_task_signal.py --dataset_dir /tmp/dc --params_override $O \\
        --config_file tf_vision/test_files/fast_nas_classification_search_for_testing.yaml \\
        --work_dir bench/results/task_signal_dc_sgd810
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
import host  # noqa: E402  pylint: disable=wrong-import-position


def architectures(space: str, count: int, seed: int) -> list[dict]:
  """The first `count` proposals of random search with `seed` (Vertex nas_params)."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import controller
  from tf_vision import search_spaces
  return controller.random_architectures(search_spaces.get_search_space(space), count, seed)


def describe(nas_params: dict) -> str:
  """A short text for one mnasnet architecture: per group repeats x block kernel filters."""
  groups = {}
  for key, value in nas_params.items():
    group, field = key.split(".", 1)
    literal = value.split("(", 1)[1].rstrip(")").strip("'") if "(" in value else value
    groups.setdefault(group, {})[field] = literal
  parts = []
  for g in groups.values():
    if {"num_repeats", "block_fn", "kernel_size", "output_filters"} <= set(g):
      fn = "c" if g["block_fn"] == "conv" else f"m{g.get('expand_ratio', '')}"
      se = "s" if g.get("se_ratio") not in (None, "0.0") else ""
      parts.append(f"{g['num_repeats']}{fn}k{g['kernel_size']}{se}/{g['output_filters']}")
  return " ".join(parts) if parts else f"{len(nas_params)} decisions"


def train(work_dir: str, index: int, seed: int, nas_params: dict, a: argparse.Namespace) -> dict:
  """One training (skipped when its result exists); returns its result record."""
  name = f"arch{index:02d}_seed{seed}"
  result_path = os.path.join(work_dir, f"{name}.json")
  if os.path.exists(result_path):
    with open(result_path, encoding="utf-8") as f:
      return json.load(f)
  model_dir = os.path.join(work_dir, name)
  shutil.rmtree(model_dir, ignore_errors=True)  # an unfinished run: start afresh
  cmd = [sys.executable, "-m", "nascli", "train", "--nas_params_str", json.dumps(nas_params),
         "--search_space", a.space, "--dataset_dir", a.dataset_dir, "--model_dir", model_dir,
         "--seed", str(seed), "--json"]
  for config in a.config_file or ():
    cmd += ["--config_file", config]
  if a.params_override:
    cmd += ["--params_override", a.params_override]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  load = os.getloadavg()[0]
  start = time.monotonic()
  proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
  wall = time.monotonic() - start
  if proc.returncode != 0:
    sys.exit(f"{name}: nascli train failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
  out = json.loads(proc.stdout)
  metrics = out["eval_metrics"]
  record = {"arch": index, "seed": seed, "accuracy": metrics[a.metric],
            "train_seconds": out.get("seconds"), "wall_seconds": round(wall, 1),
            "steps": out.get("step"), "loadavg_at_start": load, "eval_metrics": metrics}
  with open(result_path + ".tmp", "w", encoding="utf-8") as f:
    json.dump(record, f, indent=1)
  os.replace(result_path + ".tmp", result_path)
  if not a.keep_model_dirs:
    shutil.rmtree(model_dir, ignore_errors=True)
  print(f"{name}: {a.metric} {record['accuracy']:.4f}, {record['train_seconds']} s training,"
        f" {wall:.0f} s wall (load {load:.1f})", file=sys.stderr, flush=True)
  return record


def summarize(accuracy: list[list[float]], records: list[dict]) -> dict:
  """Tau between the first two seeds, spread, pooled noise, their ratio, range and timings."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  first = [row[0] for row in accuracy]
  second = [row[1] for row in accuracy]
  tau = stats.kendalltau(first, second)
  means = [statistics.fmean(row) for row in accuracy]
  spread = statistics.stdev(means)
  noise = math.sqrt(statistics.fmean(statistics.variance(row) for row in accuracy))
  flat = [x for row in accuracy for x in row]
  train_s = [r["train_seconds"] for r in records if r.get("train_seconds") is not None]
  wall_s = [r["wall_seconds"] for r in records]
  return {"kendall_tau": tau.statistic, "tau_p_value": tau.pvalue, "spread_std": spread,
          "noise_pooled_std": noise, "ratio": spread / noise if noise else math.inf,
          "mean_abs_seed_difference": statistics.fmean(abs(x - y)
                                                       for x, y in zip(first, second)),
          "accuracy_min": min(flat), "accuracy_max": max(flat),
          "accuracy_median": statistics.median(flat),
          "train_seconds_median": statistics.median(train_s) if train_s else None,
          "train_seconds_max": max(train_s) if train_s else None,
          "wall_seconds_median": statistics.median(wall_s), "wall_seconds_max": max(wall_s),
          "wall_seconds_total": round(sum(wall_s))}


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--dataset_dir", required=True, help="a convert-data folder")
  p.add_argument("--config_file", action="append", help="passed to nascli train; repeatable")
  p.add_argument("--params_override", help="passed to nascli train")
  p.add_argument("--archs", type=int, default=10, help="random architectures (at least 3)")
  p.add_argument("--arch_seed", type=int, default=0, help="seed of random search's proposals")
  p.add_argument("--seeds", default="0,1", help="training seeds, comma separated (at least 2;"
                 " tau compares the first two)")
  p.add_argument("--space", default="mnasnet")
  p.add_argument("--metric", default="accuracy", help="key of nascli train's eval_metrics")
  p.add_argument("--work_dir", default=os.path.join(HERE, "results", "task_signal"))
  p.add_argument("--out", help="summary JSON (default WORK_DIR/summary.json)")
  p.add_argument("--keep_model_dirs", action="store_true",
                 help="keep each training's model dir (default: only its result JSON)")
  a = p.parse_args()
  seeds = [int(s) for s in a.seeds.split(",")]
  if len(seeds) < 2 or len(set(seeds)) != len(seeds) or a.archs < 3:
    p.error("--seeds needs at least two distinct seeds and --archs at least 3")
  a.dataset_dir = os.path.abspath(a.dataset_dir)
  a.config_file = [os.path.abspath(c) for c in a.config_file or ()]
  os.makedirs(a.work_dir, exist_ok=True)

  archs = architectures(a.space, a.archs, a.arch_seed)
  recipe = {"space": a.space, "arch_seed": a.arch_seed, "dataset_dir": a.dataset_dir,
            "config_files": a.config_file, "params_override": a.params_override,
            "metric": a.metric, "config_texts": {}}
  for c in a.config_file:
    with open(c, encoding="utf-8") as f:
      recipe["config_texts"][c] = f.read()
  recipe_path = os.path.join(a.work_dir, "recipe.json")
  known = []
  if os.path.exists(recipe_path):
    with open(recipe_path, encoding="utf-8") as f:
      old = json.load(f)
    known = old["architectures"]
    common = min(len(known), len(archs))
    if ({k: old.get(k) for k in recipe} != recipe or known[:common] != archs[:common]):
      sys.exit(f"{a.work_dir} holds trainings of another recipe or data set ({recipe_path});"
               " use another --work_dir")
  if len(archs) > len(known):  # a rerun with fewer --archs keeps the longer list
    with open(recipe_path, "w", encoding="utf-8") as f:
      json.dump({**recipe, "architectures": archs}, f, indent=1)

  machine = host.machine()
  started = time.monotonic()
  records, accuracy = [], []
  for i, nas_params in enumerate(archs):
    row = []
    for seed in seeds:
      record = train(a.work_dir, i, seed, nas_params, a)
      records.append(record)
      row.append(record["accuracy"])
    accuracy.append(row)
  summary = summarize(accuracy, records)
  result = {"recipe": recipe, "seeds": seeds, "accuracy": accuracy, "summary": summary,
            "records": records, "machine": machine,
            "seconds_this_run": round(time.monotonic() - started)}
  out = a.out or os.path.join(a.work_dir, "summary.json")
  with open(out, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=1)

  s = summary
  configs = ", ".join(os.path.relpath(c, ROOT) for c in a.config_file) or "(none)"
  print(f"data: {a.dataset_dir}; recipe: --config_file {configs}"
        f"{'' if not a.params_override else ' --params_override ' + a.params_override}\n")
  print("| arch | architecture (per group: repeats, conv/mbconv+expand, kernel, se, filters) | "
        + " | ".join(f"seed {sd}" for sd in seeds) + " | mean |")
  print("|---|---|" + "---|" * len(seeds) + "---|")
  for i, (nas_params, row) in enumerate(zip(archs, accuracy)):
    print(f"| {i} | {describe(nas_params)} | " + " | ".join(f"{x:.4f}" for x in row)
          + f" | {statistics.fmean(row):.4f} |")
  print(f"\n- Kendall tau, seed {seeds[0]} vs seed {seeds[1]}: **{s['kendall_tau']:.3f}**"
        f" (p {s['tau_p_value']:.3g}; mean |difference| {s['mean_abs_seed_difference']:.4f})")
  print(f"- ratio spread / noise: **{s['ratio']:.2f}** (std of the architectures' mean"
        f" {a.metric} {s['spread_std']:.4f}; pooled within-architecture std across"
        f" {len(seeds)} seeds {s['noise_pooled_std']:.4f})")
  print(f"- {a.metric}: {s['accuracy_min']:.4f}-{s['accuracy_max']:.4f}"
        f" (median {s['accuracy_median']:.4f})")
  print(f"- seconds per training: {s['train_seconds_median']:.0f} training"
        f" (max {s['train_seconds_max']:.0f}), {s['wall_seconds_median']:.0f} wall with"
        f" start-up and evaluation (max {s['wall_seconds_max']:.0f}); all trainings"
        f" {s['wall_seconds_total']} s")
  print(f"- machine: {machine['cpu_model']}, {machine['affinity']} of {machine['nproc']} cores,"
        f" {machine['mem_gib']} GiB; TensorFlow {machine['tensorflow']}, tf-models-official"
        f" {machine['tf-models-official']}, tf-keras {machine['tf-keras']}; load average at"
        f" start {machine['loadavg_at_start'][0]:.2f}")
  print(f"- summary: {out}")


if __name__ == "__main__":
  main()
