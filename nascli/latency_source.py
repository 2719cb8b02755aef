"""What a latency number is: one label for every place that prints one.

A latency is only a claim when it says where it came from. Every trial's `latency_device`
(model_analysis.json, the journal's metrics) is a dict with:

  source              `trial` (timed in the trial), `calculator` (run_latency_calculator_local),
                      `latency_model` (predicted before training), `export` (the exported model
                      measured at the search's end)
  target_device_type  the runtime: cpu, gpu, cpu-tflite, ...
  device              the CPU or GPU it was measured on (for a prediction: the latency model's)
  input_size          the side of the square input it was timed at
  num_threads         TFLite interpreter threads, where they apply
  model               the latency model file (source latency_model)

`describe` turns it into the one line tables, logs and the report show. TensorFlow-free.
"""

import contextlib
import platform
from typing import Any, Mapping

SOURCES = {
    "trial": "measured in the trial",
    "calculator": "measured by run_latency_calculator_local",
    "latency_model": "predicted",
    "export": "measured on the exported model",
}


def describe(device: Mapping[str, Any] | None, short: bool = False) -> str:
  """`predicted by latency model M (cpu-tflite, 1 thread, 224x224, on CPU X)`; `short` drops
  the device name (table headers, axis titles)."""
  if not isinstance(device, Mapping) or not device:
    return "latency source unknown"
  source = str(device.get("source") or "")
  what = SOURCES.get(source, f"measured ({source})" if source else "measured")
  if source == "latency_model" and device.get("model"):
    what += f" by latency model {device['model']}"
  parts = []
  runtime = device.get("target_device_type")
  if runtime:
    parts.append({"cpu": "TF serving function, CPU",
                  "gpu": "TF serving function, GPU"}.get(str(runtime), str(runtime)))
  threads = device.get("num_threads")
  if isinstance(threads, int) and runtime not in ("cpu", "gpu"):
    parts.append(f"{threads} thread{'s' if threads != 1 else ''}")
  size = device.get("input_size")
  if isinstance(size, (list, tuple)) and len(size) >= 2:
    parts.append(f"{size[0]}x{size[1]}")
  elif isinstance(size, int):
    parts.append(f"{size}x{size}")
  if not short and device.get("device"):
    parts.append(f"on {device['device']}")
  return what + (f" ({', '.join(parts)})" if parts else "")


# bench/bench_latency_model.py, BENCHMARKS.md "Latency predictors": how the host serving-function
# timing of a trial ranks single-thread cpu-tflite latency of held-out random mnasnet
# architectures (Kendall tau), at each input size measured.
HOST_TIMING_TAU = {32: 0.56, 224: 0.30}


def host_timing_note(input_size: int | None) -> str:
  """What a search with a target but no latency model optimizes, said once at its start."""
  size = f"{input_size}x{input_size}" if input_size else "the serving size"
  known = ", ".join(f"{tau:.2f} at {s}x{s}" for s, tau in sorted(HOST_TIMING_TAU.items()))
  return (f"note: the latency target applies to each trial's own timing of its TensorFlow"
          f" serving function on this host at {size}, not to a device: it ranks single-thread"
          f" TFLite latency at Kendall tau {known} (BENCHMARKS.md); for a device target build a"
          " latency model there (nascli build_latency_model) and pass --latency_model")


def cpu_model() -> str:
  """This machine's CPU, as /proc/cpuinfo names it (else what platform knows)."""
  with contextlib.suppress(OSError):
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return " ".join(line.split(":", 1)[1].split())
  return platform.processor() or platform.machine() or "unknown CPU"
