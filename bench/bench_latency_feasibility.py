"""Feasibility before training: a hard-target search with a latency model against without one.

    python bench/bench_latency_feasibility.py --seeds 0,1,2,3,4 --trials 4 --target 0.3 \
        --latency_model tf_vision/latency_models/mnasnet_cpu-tflite_32.json \
        --out bench/results/latency_feasibility.json

Why: without a latency model a search under a device target trains every proposal and learns
its latency afterwards (in the trial, on the host, or from the latency calculator), so an
architecture over the target costs a full training. With `--latency_model` such a proposal is
skipped before it trains. Same seeds, same flags, once with and once without the model:

  - trainings spent (every search trains `--trials`; the model's search also journals the
    proposals it skipped, each costing a prediction of about a millisecond);
  - trainings spent on architectures over the target, judged by the device itself: every
    trained architecture of both searches is timed for real on cpu-tflite at 32x32, 1 thread
    (tf_vision/serving/arch_latency.py), after the searches;
  - the best accuracy among trained architectures that really meet the target.

The searches are `nascli search_in_local` on the embedded digits and the testing YAML (100
steps), the default TPE controller, `--latency_constraint hard`. Each run's rows are appended
to `--out` as it ends (a killed run continues with the seeds left).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TESTING_YAML = ROOT / "tf_vision/test_files/fast_nas_classification_search_for_testing.yaml"


def _search(job: Path, seed: int, trials: int, target: float, model: str | None) -> list[dict]:
  cmd = [sys.executable, "-m", "nascli", "search_in_local", "--prebuilt_search_space=mnasnet",
         "--seed", str(seed), "--max_nas_trial", str(trials), "--target_device_latency_ms",
         str(target), "--latency_constraint", "hard", "--export_top_k", "0",
         "--local_output_dir", str(job), "--json"]
  if model:
    cmd += ["--latency_model", model]
  proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  if proc.returncode != 0:
    raise SystemExit(f"search failed: {proc.stderr[-2000:]}")
  return json.loads(proc.stdout)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--seeds", default="0,1,2,3,4")
  parser.add_argument("--trials", type=int, default=4)
  parser.add_argument("--target", type=float, default=0.3)
  parser.add_argument("--latency_model", required=True)
  parser.add_argument("--out", required=True)
  parser.add_argument("--work_dir", default=None)
  args = parser.parse_args()
  out = Path(args.out)
  done = {}
  if out.exists():
    for line in out.read_text().splitlines():
      try:
        row = json.loads(line)
        done[(row["seed"], row["with_model"])] = row
      except (ValueError, KeyError):
        pass
  work = Path(args.work_dir or tempfile.mkdtemp(prefix="feasibility-"))
  # pylint: disable=g-import-not-at-top
  from nascli import frameworks
  frameworks.load()
  import tf_keras
  from tf_vision.serving import arch_latency
  timing = arch_latency.Timing(num_threads=1)
  measured: dict[str, float] = {}

  def real_ms(nas_params: dict) -> float:
    key = json.dumps(nas_params, sort_keys=True)
    if key not in measured:
      measured[key] = arch_latency.measure_architecture(
          "mnasnet", nas_params, 32, "cpu-tflite", timing, [str(TESTING_YAML)])["latency_ms"]
      tf_keras.backend.clear_session()
    return measured[key]

  for seed in [int(s) for s in args.seeds.split(",")]:
    for with_model in (True, False):
      if (seed, with_model) in done:
        continue
      job = work / f"seed{seed}-{'model' if with_model else 'none'}"
      rows = _search(job, seed, args.trials, args.target,
                     args.latency_model if with_model else None)
      trained = [r for r in rows if r["status"] == "completed"]
      for r in trained:
        r["real_ms"] = real_ms(r["nas_params"])
      feasible = [r["accuracy"] for r in trained if r["real_ms"] <= args.target]
      row = {"seed": seed, "with_model": with_model, "trainings": len(trained),
             "skipped_before_training": sum(r["status"] == "over_target" for r in rows),
             "trained_over_target_real": sum(r["real_ms"] > args.target for r in trained),
             "best_feasible_accuracy": max(feasible) if feasible else None,
             "trained": [{"trial_id": r["trial_id"], "accuracy": r["accuracy"],
                          "latency_ms": r["latency_ms"], "real_ms": r["real_ms"]}
                         for r in trained]}
      with out.open("a") as f:
        f.write(json.dumps(row) + "\n")
      print(json.dumps({k: v for k, v in row.items() if k != "trained"}), flush=True)


if __name__ == "__main__":
  main()
