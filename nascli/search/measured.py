"""The exported best trials of a search with a latency model, timed for real.

A latency model's prediction steers the search; whether it held for the architectures the
search picked is a measurement. When the search exports its best trials, the worker that
exports them also builds each trial's model at the latency model's input size and times it on
the model's runtime, with its thread count (tf_vision/serving/arch_latency.py), writing
`<trial>/measured_latency.json`. The driver then journals one informational `measured` event
per trial {trial_id, latency_ms, predicted_ms, latency_device (source `export`), spread,
noisy}, which list_trials, `--json` and the report show beside the prediction. Replay ignores
it: it changes no decision.
"""

import json
from typing import Any, Mapping

from nascli import storage
from nascli.errors import NascliError

FILE_NAME = "measured_latency.json"
EVENT = "measured"


def measure_trial(trial_dir: str, request: Mapping[str, Any]) -> dict[str, Any]:
  """Times the trial's model (its params.yaml, at the request's input size) on the request's
  runtime; writes and returns the result (an `error` instead when it cannot be timed)."""
  # pylint: disable=g-import-not-at-top
  import tf_keras
  from nascli import latency_calculator
  from tf_vision import model_dir
  from tf_vision.serving import arch_latency, export_lib
  result: dict[str, Any] = {}
  try:
    params = export_lib.at_serving_size(model_dir.load_params(trial_dir),
                                        request.get("input_size"))
    model = export_lib.serving_model(params)
    runtime = arch_latency.runtime(request["runtime"])
    threads = int(request.get("num_threads") or 1)
    report = runtime.measure(params, model, arch_latency.Timing(num_threads=threads))
    size = export_lib.serving_size_of(params)
    result = {"latency_ms": report["latency_ms"], "spread": report.get("spread"),
              "noisy": bool(report.get("noisy")),
              "latency_device": {**latency_calculator.device_of(
                  request["runtime"], None, "export", input_size=size),
                                 "num_threads": threads, "runtime_version": runtime.version()}}
  except Exception as e:  # pylint: disable=broad-except
    result = {"error": " ".join(f"{type(e).__name__}: {e}".split())[:300]}
  finally:
    tf_keras.backend.clear_session()
  storage.write_text(storage.join(trial_dir, FILE_NAME), json.dumps(result, indent=2))
  return result


def event(job_dir: str, trial_id: str, state: Any) -> dict[str, Any] | None:
  """The `measured` event of a trial whose measured_latency.json is there (None otherwise)."""
  try:
    data = json.loads(storage.read_text(storage.join(job_dir, trial_id, FILE_NAME)))
  except (NascliError, OSError, ValueError):
    return None
  if not isinstance(data, dict) or not isinstance(data.get("latency_ms"), (int, float)):
    return None
  predicted = state.metrics.get(trial_id, {}).get("latency_ms")
  return {"event": EVENT, "trial_id": trial_id, "latency_ms": data["latency_ms"],
          "predicted_ms": predicted, "spread": data.get("spread"),
          "noisy": bool(data.get("noisy")), "latency_device": data.get("latency_device")}


def line(measured: Mapping[str, Any]) -> str:
  """`trial 3: predicted 0.143 ms, measured 0.151 ms (+5.6%) on cpu-tflite ...`."""
  from nascli import latency_source  # pylint: disable=g-import-not-at-top
  predicted, ms = measured.get("predicted_ms"), measured["latency_ms"]
  text = f"trial {measured['trial_id']}: measured {ms:.4g} ms"
  if isinstance(predicted, (int, float)) and predicted > 0:
    text = (f"trial {measured['trial_id']}: predicted {predicted:.4g} ms, measured {ms:.4g} ms"
            f" ({(ms / predicted - 1) * 100:+.1f}%)")
  text += f", {latency_source.describe(measured.get('latency_device'))}"
  return text + (" (noisy)" if measured.get("noisy") else "")
