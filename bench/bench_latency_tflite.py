"""TFLite latency against serving-function latency, on 10 random mnasnet architectures.

    python bench/bench_latency_tflite.py [--count 10] [--seed 0] [--runs 50] [--out FILE]

Why: `nascli run_latency_calculator_local --target_device_type cpu-tflite` times a trial as
MnasNet's mobile targets run it (the model converted to TFLite by Model Garden's converter, the
TFLite interpreter, a fixed number of threads), while `cpu` (and the in-trial default) times the
serving function of the SavedModel export in TensorFlow. Do the two rank architectures alike?
If they do, the cheaper in-trial number would do for a mobile target; if not, the calculator's
TFLite number is the one the reward needs.

The architectures: the first `--count` that nascli's random controller proposes with `--seed`
in the `mnasnet` space (`controller.random_architectures`), built at the testing YAML's input
size (32x32, tf_vision/test_files/fast_nas_classification_search_for_testing.yaml) with fresh
weights (the latency does not depend on them). Each is timed by both methods exactly as the
calculator does (`tf_vision/serving/device_latency.py`): 5 warm-up calls, then the median of
`--runs` timed calls, batch 1; TFLite with 1 and with 2 interpreter threads. Two rounds give
each method's own run-to-run rank agreement, the yardstick for the agreement between methods.
Kendall's tau from scipy.stats.kendalltau.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import benchlib  # bench/benchlib.py (scripts run from bench/)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
TESTING_YAML = ROOT / "tf_vision/test_files/fast_nas_classification_search_for_testing.yaml"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--count", type=int, default=10)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--runs", type=int, default=50)
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--out", default=None, help="Also write the results here (JSON).")
  args = parser.parse_args()
  os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the CPU, as --target_device_type cpu has it
  import host  # pylint: disable=g-import-not-at-top
  machine = host.machine()
  # pylint: disable=g-import-not-at-top
  from nascli import frameworks, training
  frameworks.load()
  import numpy as np
  import tf_keras
  from scipy import stats
  from nascli.run_spec import Architecture, DataSpec, RunSpec
  from nascli.search import controller, local_main
  from tf_vision import model_analysis, search_spaces
  from tf_vision.serving import device_latency, export_lib

  space = search_spaces.resolve_search_space("mnasnet", None).build()
  architectures = controller.random_architectures(space, args.count, args.seed)
  rows = []
  for index, nas_params in enumerate(architectures, 1):
    run = RunSpec(config_files=[str(TESTING_YAML)], seed=0,
                  data=DataSpec(dataset_dir=local_main.embedded_dataset("mnasnet")),
                  architecture=Architecture("mnasnet", nas_params))
    params = training.plan(training.TrainArgs(run=run)).params
    module = export_lib.get_export_module_cls(params.task)(
        params=params, batch_size=1, input_image_size=export_lib.image_size_of(params),
        input_type="image_tensor", num_channels=3)
    model = module.model
    num_params, flops = model_analysis.model_size(model, list(params.task.model.input_size))
    flatbuffer = device_latency.convert_tflite(params, model)
    row = {"architecture": index, "params": num_params, "flops": flops,
           "tflite_bytes": len(flatbuffer), "serving_ms": [], "tflite1_ms": [],
           "tflite2_ms": []}
    for _ in range(args.rounds):
      row["serving_ms"].append(device_latency.serving_latency(
          params, model, warmup=5, runs=args.runs)["latency_ms"])
      for threads in (1, 2):
        interpreter = device_latency.tflite_interpreter(flatbuffer, threads)
        detail = interpreter.get_input_details()[0]
        interpreter.set_tensor(detail["index"], np.random.default_rng(0).standard_normal(
            detail["shape"]).astype(np.float32))
        for _ in range(5):
          interpreter.invoke()
        times = []
        for _ in range(args.runs):
          start = time.perf_counter()
          interpreter.invoke()
          times.append((time.perf_counter() - start) * 1000.0)
        row[f"tflite{threads}_ms"].append(round(sorted(times)[len(times) // 2], 4))
    rows.append(row)
    print(json.dumps(row), file=sys.stderr, flush=True)
    tf_keras.backend.clear_session()

  def tau(a, b):
    result = stats.kendalltau(a, b)
    return {"tau": round(float(result.statistic), 3), "p": round(float(result.pvalue), 4)}

  first = lambda key: [r[key][0] for r in rows]  # noqa: E731
  second = lambda key: [r[key][-1] for r in rows]  # noqa: E731
  summary = {
      "serving_vs_tflite1": tau(first("serving_ms"), first("tflite1_ms")),
      "serving_vs_tflite2": tau(first("serving_ms"), first("tflite2_ms")),
      "tflite1_vs_tflite2": tau(first("tflite1_ms"), first("tflite2_ms")),
      "serving_round1_vs_round2": tau(first("serving_ms"), second("serving_ms")),
      "tflite1_round1_vs_round2": tau(first("tflite1_ms"), second("tflite1_ms")),
      "flops_vs_serving": tau([r["flops"] for r in rows], first("serving_ms")),
      "flops_vs_tflite1": tau([r["flops"] for r in rows], first("tflite1_ms")),
  }
  result = {"machine": machine, "args": vars(args), "rows": rows, "kendall": summary}
  benchlib.print_json(result, args.out)


if __name__ == "__main__":
  main()
