"""Noise: one architecture's in-trial latency while another trial trains beside it.

    python bench/bench_latency_noise.py --repeats 10 --out bench/results/latency_noise.json

Why: `search` runs 2 trials at a time by default, and each trial times itself while the other
trains on the same cores. A latency model's prediction is a function of the architecture alone
(the same number every time); the in-trial serving-function timing and a TFLite timing are
not. One random mnasnet architecture (seed 0's first) at 32x32 is timed `--repeats` times as a
trial times itself (the median of 20 serving-function calls, batch 1) and as
build_latency_model times cpu-tflite (1 thread, warm-up until settled, median of at least 50
calls and 0.5 s), first with the machine otherwise idle, then while a `nascli train` of the
testing YAML runs beside it on the same 2 cores. Reports each method's min, median, max and
(max - min) / median.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TESTING_YAML = ROOT / "tf_vision/test_files/fast_nas_classification_search_for_testing.yaml"


def _stats(values: list[float]) -> dict:
  values = sorted(values)
  median = values[len(values) // 2]
  return {"min": round(values[0], 4), "median": round(median, 4), "max": round(values[-1], 4),
          "range_over_median": round((values[-1] - values[0]) / median, 3), "values": values}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--repeats", type=int, default=10)
  parser.add_argument("--out", default=None)
  args = parser.parse_args()
  # pylint: disable=g-import-not-at-top
  from nascli import frameworks
  frameworks.load()
  import tf_keras
  from nascli.search import controller
  from tf_vision import search_spaces
  from tf_vision.serving import arch_latency, latency
  space = search_spaces.resolve_search_space("mnasnet", None).build()
  nas_params = controller.random_architectures(space, 1, 0)[0]
  params, model = arch_latency.build_model("mnasnet", nas_params, 32, [str(TESTING_YAML)])
  result = {"nas_params": nas_params}
  for load in ("idle", "beside a training"):
    trainer = None
    if load != "idle":
      work = tempfile.mkdtemp(prefix="noise-")
      data = os.path.join(work, "digits")
      subprocess.run([sys.executable, "-m", "nascli", "convert-data", "digits", "--output_dir",
                      data], check=True, capture_output=True)
      trainer = subprocess.Popen(
          [sys.executable, "-m", "nascli", "train", "--dataset_dir", data, "--model_dir",
           os.path.join(work, "run"), "--params_override", "trainer.train_steps=100000"],
          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
      time.sleep(40)  # past its start-up, into its steps
    serving, tflite = [], []
    for _ in range(args.repeats):
      report = latency.measure_model_latency(params, model, batch_sizes=(1,), runs=20)
      serving.append(report["batch"]["1"]["median_ms"])
      tflite.append(arch_latency.RUNTIMES["cpu-tflite"].measure(
          params, model, arch_latency.Timing(num_threads=1))["latency_ms"])
    if trainer is not None:
      trainer.kill()
      trainer.wait()
    result[load] = {"in_trial_serving_ms": _stats(serving), "cpu_tflite_ms": _stats(tflite)}
    print(json.dumps({load: {k: {s: v[s] for s in ("min", "median", "max", "range_over_median")}
                             for k, v in result[load].items()}}), flush=True)
  tf_keras.backend.clear_session()
  if args.out:
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
  main()
