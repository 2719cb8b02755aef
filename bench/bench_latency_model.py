"""Latency predictors against measured cpu-tflite latency of held-out mnasnet architectures.

    python bench/bench_latency_model.py --rows bench/results/latency_rows.jsonl \
        [--train 100] [--out bench/results/latency_model.json]

Reads the rows `bench/bench_latency_measure.py` recorded (random mnasnet architectures, each
timed on cpu-tflite, 1 thread, at 224x224 and 32x32, two rounds back to back, plus the host
serving-function timing at 32x32 that trials reported before latency models). The first
`--train` rows fit; every later row is held out. For each input size it reports, on the
held-out rows only:

  - the latency model (`nascli.latency_model.build`: kind chosen by CV on the training rows),
  - FLOPs and the parameter count (ranked as they are; for "within 10%" a least-squares line
    ms = a * x + b fitted on the same training rows, the fairest use of them as predictors),
  - the in-trial serving-function timing at 32x32 (ranked as it is; line fitted likewise),
  - the measurement's own second round (the ceiling: no predictor can agree with a measurement
    better than the measurement agrees with itself),

as Kendall's tau (scipy.stats.kendalltau) against the first round's median, and the share
within ±10% of it. Also the cost of building the model: the measuring seconds per architecture.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import benchlib  # bench/benchlib.py (scripts run from bench/)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _line(x_train, y_train, x_test):
  a, b = np.polyfit(np.asarray(x_train, float), np.asarray(y_train, float), 1)
  return a * np.asarray(x_test, float) + b


def analyse(rows: list[dict], size: int, train: int, seed: int) -> dict:
  # pylint: disable=g-import-not-at-top
  from nascli import latency_model
  key = f"tflite_{size}"
  rows = [r for r in rows if key in r]
  fit, held = rows[:train], rows[train:]
  measured = lambda rs: [r[key][0]["median_ms"] for r in rs]  # noqa: E731
  model = latency_model.build(
      [(r["nas_params"], r[key][0]["median_ms"]) for r in fit],
      [(r["nas_params"], r[key][0]["median_ms"]) for r in held],
      space="mnasnet", decisions=latency_model.decisions_of_space("mnasnet"),
      runtime="cpu-tflite", runtime_version="bench", device=rows[0]["cpu_model"],
      input_size=size, num_threads=1, seed=seed)
  y = measured(held)
  out = {"input_size": size, "train": len(fit), "heldout": len(held),
         "measured_ms_range": [round(min(y), 3), round(max(y), 3)],
         "chosen_kind": model.predictor["kind"], "cv_mape": model.cv}
  predictors = {
      "latency_model": [model.predict(r["nas_params"]) for r in held],
      "flops": _line([r[f"flops_{size}"] for r in fit], measured(fit),
                     [r[f"flops_{size}"] for r in held]),
      "params": _line([r["params"] for r in fit], measured(fit), [r["params"] for r in held]),
  }
  ranks = {"flops": [r[f"flops_{size}"] for r in held], "params": [r["params"] for r in held]}
  if all("serving_32_ms" in r for r in rows):
    predictors["in_trial_serving_32"] = _line([r["serving_32_ms"] for r in fit], measured(fit),
                                              [r["serving_32_ms"] for r in held])
    ranks["in_trial_serving_32"] = [r["serving_32_ms"] for r in held]
  second = [r[key][1]["median_ms"] for r in held]
  predictors["measurement_round_2"] = second
  table = {}
  for name, pred in predictors.items():
    table[name] = {"kendall_tau": benchlib.tau(ranks.get(name, pred), y),
                   "within_10pct": benchlib.within(pred, y)}
  out["predictors"] = table
  out["noisy_share"] = round(float(np.mean([r[key][0]["noisy"] for r in held])), 3)
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", required=True)
  parser.add_argument("--train", type=int, default=100)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default=None)
  args = parser.parse_args()
  rows = []
  for line in Path(args.rows).read_text().splitlines():
    try:
      rows.append(json.loads(line))
    except ValueError:
      pass  # a line cut by a kill
  rows.sort(key=lambda r: r["index"])
  times = [r["time"] for r in rows]
  gaps = np.diff(times)
  result = {
      "rows": len(rows), "cpu_model": rows[0]["cpu_model"],
      "seconds_per_architecture_both_sizes": round(float(np.median(gaps)), 2) if len(gaps) else None,
      "sizes": [analyse(rows, s, args.train, args.seed) for s in (224, 32)
                if any(f"tflite_{s}" in r for r in rows)],
  }
  benchlib.print_json(result, args.out)


if __name__ == "__main__":
  main()
