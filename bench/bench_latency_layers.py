"""Layer tables against whole-architecture models, on one `build_latency_model --measure_layers` job.

    nascli build_latency_model --latency_input_size 224 --num_architectures 60 \
        --num_heldout 50 --pin_cpus 1 --measure_layers --local_output_dir JOB
    python bench/bench_latency_layers.py --job JOB --retime --pin_cpus 1 \
        [--out bench/results/latency_layers_224.json]

The job measured its architectures (60 fitted, 50 held out) and every layer of the space
alone, interleaved, in one session. This script refits on the fitted architectures only and
reports, on the held-out ones (Kendall tau and the share within ±10% of the measured median):

  - `layer_lookup` (the sum of the architecture's layers timed alone, calibrated),
  - `cost_features` (the best kind without a layer table),
  - the kind cross-validation chooses among all,
  - the raw sum of the layers (ranked as it is; for ±10% a line `ms = a x + b`),
  - the analytic multiply-adds (`mac_*` cost features summed: FLOPs / 2; ranked, and a line),
  - the ceiling: with `--retime` the held-out architectures are timed again now, minutes to an
    hour after the job's round (pinned to `--pin_cpus`, the job's timing settings; journaled in
    JOB/bench_retime.jsonl, so a rerun continues): the measurement's agreement with itself
    across time, which bounds what any predictor can show against one round.

Every predictor is also scored against the mean of the two rounds, the least noisy truth here.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

import benchlib  # bench/benchlib.py (scripts run from bench/)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _line(x_train, y_train, x_test):
  a, b = np.polyfit(np.asarray(x_train, float), np.asarray(y_train, float), 1)
  return a * np.asarray(x_test, float) + b


def _journal(job: Path) -> list[dict]:
  out = []
  for line in (job / "measurements.jsonl").read_text().split("\n")[:-1]:
    if line.strip():
      out.append(json.loads(line))
  return out


def _retime(job: Path, held: list[dict], settings: dict, cpus: tuple[int, ...]) -> dict:
  """{index: ms} of the held-out architectures timed again (journaled, resumable)."""
  # pylint: disable=g-import-not-at-top
  from tf_vision.serving import arch_latency
  path = job / "bench_retime.jsonl"
  done = {}
  if path.exists():
    for line in path.read_text().split("\n")[:-1]:
      if line.strip():
        e = json.loads(line)
        done[e["index"]] = e["latency_ms"]
  pending = [e for e in held if e["index"] not in done]
  if not pending:
    return done
  arch_latency.pin(cpus)
  from nascli import frameworks
  frameworks.load()
  timing = arch_latency.Timing(num_threads=settings["num_threads"], runs=settings["runs"],
                               cpus=cpus)
  configs = [c["path"] for c in settings["config_files"]]
  with open(path, "a", encoding="utf-8") as f:
    for n, e in enumerate(pending, 1):
      report = arch_latency.measure_architecture(
          settings["search_space"], e["nas_params"], settings["input_size"],
          settings["runtime"], timing, configs)
      done[e["index"]] = report["latency_ms"]
      f.write(json.dumps({"index": e["index"], "latency_ms": report["latency_ms"],
                          "noisy": report["noisy"], "loadavg": os.getloadavg()}) + "\n")
      f.flush()
      print(f"re-timed {n}/{len(pending)}: {report['latency_ms']:.4g} ms", file=sys.stderr)
  return done


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--job", required=True)
  parser.add_argument("--retime", action="store_true")
  parser.add_argument("--pin_cpus", default="1")
  parser.add_argument("--out", default=None)
  args = parser.parse_args()
  # pylint: disable=g-import-not-at-top
  from nascli import latency_model
  from tf_vision.search_spaces import cost_features
  import tf_vision.search_spaces  # noqa: F401
  job = Path(args.job)
  events = _journal(job)
  settings = events[0]["settings"]
  space, size = settings["search_space"], settings["input_size"]
  measured = {e["index"]: e for e in events if e["event"] == "measured"}
  table = {e["key"]: e["latency_ms"] for e in events if e["event"] == "layer"}
  fit = [measured[i] for i in sorted(measured) if measured[i]["split"] == "train"]
  held = [measured[i] for i in sorted(measured) if measured[i]["split"] == "heldout"]
  session = next(e for e in events if e["event"] == "session")
  decisions = latency_model.decisions_of_space(space)

  def build(kinds=None):
    return latency_model.build(
        [(e["nas_params"], e["latency_ms"]) for e in fit], [], space=space, decisions=decisions,
        runtime=settings["runtime"], runtime_version=session["runtime_version"],
        device=session["device"], input_size=size, num_threads=settings["num_threads"],
        seed=settings["seed"], layer_table=table, kinds=kinds)

  layers = cost_features.layers(space)
  features = cost_features.cost_features(space)
  layer_sum = lambda e: sum(table[k] for k in layers(e["nas_params"], size))  # noqa: E731
  macs = lambda e: sum(v for k, v in features(e["nas_params"], size).items()  # noqa: E731
                       if k.startswith("mac_") and "_level" not in k)
  y_fit = [e["latency_ms"] for e in fit]
  chosen = build()
  preds = {
      f"chosen by CV ({chosen.kind})": [chosen.predict(e["nas_params"]) for e in held],
      "layer_lookup": [build(["layer_lookup"]).predict(e["nas_params"]) for e in held],
      "cost_features": [build(["cost_features"]).predict(e["nas_params"]) for e in held],
      "layer sum, as it is": _line([layer_sum(e) for e in fit], y_fit,
                                   [layer_sum(e) for e in held]),
      "multiply-adds": _line([macs(e) for e in fit], y_fit, [macs(e) for e in held]),
  }
  ranks = {"layer sum, as it is": [layer_sum(e) for e in held],
           "multiply-adds": [macs(e) for e in held]}
  y1 = np.array([e["latency_ms"] for e in held])
  second = None
  if args.retime:
    cpus = tuple(int(c) for c in args.pin_cpus.split(","))
    again = _retime(job, held, settings, cpus)
    second = np.array([again[e["index"]] for e in held])
    preds["the measurement again, later (the ceiling)"] = second
  table_out = {}
  for name, pred in preds.items():
    row = {"vs_round_1": {"kendall_tau": benchlib.tau(ranks.get(name, pred), y1),
                          "within_10pct": benchlib.within(pred, y1), "mape": benchlib.mape(pred, y1)}}
    if second is not None and not name.startswith("the measurement"):
      mean = (y1 + second) / 2
      row["vs_mean_of_rounds"] = {"kendall_tau": benchlib.tau(ranks.get(name, pred), mean),
                                  "within_10pct": benchlib.within(pred, mean),
                                  "mape": benchlib.mape(pred, mean)}
    table_out[name] = row
  first_t = min(e["time"] for e in events if e["event"] in ("measured", "layer"))
  last_t = max(e["time"] for e in events if e["event"] in ("measured", "layer"))
  result = {
      "job": str(job), "space": space, "input_size": size, "device": session["device"],
      "runtime": f"{settings['runtime']} ({session['runtime_version']})",
      "train": len(fit), "heldout": len(held), "layers": len(table),
      "measured_ms_range": [round(float(y1.min()), 3), round(float(y1.max()), 3)],
      "cv_mape": {k: (round(v, 1) if v is not None else None) for k, v in chosen.cv.items()},
      "scales": build(["layer_lookup"]).predictor.get("scales"),
      "job_span": [first_t, last_t],
      "predictors": table_out,
      "noisy_share": round(float(np.mean([bool(e["report"].get("noisy")) for e in held])), 3),
  }
  benchlib.print_json(result, args.out)


if __name__ == "__main__":
  main()
