"""Measures random mnasnet architectures for the latency-predictor benchmark (resumable).

    python bench/bench_latency_measure.py --count 160 --seed 1000 --out bench/results/latency_rows.jsonl

Why: `bench/bench_latency_model.py` asks how well a latency model, FLOPs, the parameter count
and the in-trial serving-function timing rank and predict what an architecture really costs on
`cpu-tflite` at the size it will serve. This script records, per architecture (the first
`--count` that nascli's random controller proposes with `--seed`, a seed apart from every
latency model's sampling), one JSON line:

  - cpu-tflite at 224x224 (mnasnet's deployment size) and at 32x32 (the main job's size),
    converted once and timed in two rounds, back to back (the measurement's own
    round-to-round agreement, the ceiling for any predictor), timed as
    `tf_vision/serving/arch_latency.py` times (1 thread, warm-up until settled, median of at
    least 50 calls and 0.5 s);
  - the host serving-function timing at 32x32 (what every trial reported before, runtime
    `cpu`), and FLOPs and parameters at both sizes.

One line per architecture is appended as it is done: a killed run continues where it was.
Run it pinned (`taskset -c 0`) on a machine as quiet as you can make it.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
CONFIG = ROOT / "tf_vision/configs/experiments/digits_clutter_mnasnet_search_cpu.yaml"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--count", type=int, default=160)
  parser.add_argument("--seed", type=int, default=1000)
  parser.add_argument("--sizes", default="224,32")
  parser.add_argument("--out", required=True)
  args = parser.parse_args()
  os.environ["CUDA_VISIBLE_DEVICES"] = ""
  import host  # pylint: disable=g-import-not-at-top
  # pylint: disable=g-import-not-at-top
  from nascli import frameworks
  frameworks.load()
  import numpy as np
  import tf_keras
  from nascli.search import controller
  from tf_vision import model_analysis, search_spaces
  from tf_vision.serving import arch_latency, device_latency

  out = Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  done = set()
  if out.exists():
    for line in out.read_text().splitlines():
      try:
        done.add(json.loads(line)["index"])
      except (ValueError, KeyError):
        pass  # a line cut by a kill: measured again
  space = search_spaces.resolve_search_space("mnasnet", None).build()
  archs = controller.random_architectures(space, args.count, args.seed)
  timing = arch_latency.Timing(num_threads=1)
  sizes = [int(s) for s in args.sizes.split(",")]
  machine = host.machine()
  for index, nas_params in enumerate(archs):
    if index in done:
      continue
    row = {"index": index, "seed": args.seed, "nas_params": nas_params,
           "cpu_model": machine["cpu_model"], "loadavg": os.getloadavg()}
    for size in sizes:
      params, model = arch_latency.build_model("mnasnet", nas_params, size, [str(CONFIG)])
      num_params, flops = model_analysis.model_size(model, [size, size, 3])
      row[f"params"] = num_params
      row[f"flops_{size}"] = flops
      flatbuffer = device_latency.convert_tflite(params, model)
      rounds = []
      for _ in range(2):  # one conversion, timed twice: the measurement's own agreement
        interp = arch_latency.interpreter(flatbuffer, timing.num_threads)
        detail = interp.get_input_details()[0]
        interp.set_tensor(detail["index"], np.random.default_rng(0).standard_normal(
            detail["shape"]).astype(np.float32))
        report = arch_latency.time_calls(interp.invoke, timing)
        rounds.append({k: report[k] for k in ("median_ms", "spread", "min_ms", "noisy",
                                              "rounds", "runs")})
      row[f"tflite_{size}"] = rounds
      if size == 32:
        serving = arch_latency.RUNTIMES["cpu"].measure(
            params, model, arch_latency.Timing(runs=20, retries=0))
        row["serving_32_ms"] = serving["median_ms"]
      tf_keras.backend.clear_session()
    row["time"] = time.time()
    with out.open("a") as f:
      f.write(json.dumps(row) + "\n")
      f.flush()
      os.fsync(f.fileno())
    print(f"{index}: " + ", ".join(f"{s}: {row[f'tflite_{s}'][0]['median_ms']} ms"
                                   for s in sizes), file=sys.stderr, flush=True)


if __name__ == "__main__":
  main()
