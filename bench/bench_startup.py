"""Start-up of `nascli train` with the frameworks frozen (nascli/frameworks.py) and without.

    python bench/bench_startup.py [--reps 3] [--data DIR] [--optimizers sgd,thor]

Why: a short `nascli train` process spent about 1.6 s of 14 s in Python's cyclic garbage
collector, rescanning the objects TensorFlow and Model Garden create at import. nascli now
imports them with the collector paused and freezes them. The baseline is what ran before:
each child imports the same modules the ordinary way first, which makes nascli's own
`frameworks.load()` a no-op. Everything else is the real command, in-process in the child
(`nascli.app.main`): the digits recipes (ResNet-10, batch 32), 40 steps in loops of 5, train
mode, seed 1. Modes alternate run by run. Reported per optimizer and mode, medians: the
child's wall time up to the command's return, the imports, the collector's time and its full
passes, and the training loop's trace and first call (timed around TensorFlow's function
tracing and call, patched in after the imports). DIR: a `nascli convert-data` folder at 32x32
(default: bench_thor.py's digits copy).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_thor  # bench/bench_thor.py (stdlib imports only: the child's modes stay apart)

ROOT = Path(__file__).resolve().parent.parent
MODES = ("plain", "frozen")
OVERRIDE = {"task": {"model": {"num_classes": 10}, "losses": {"label_smoothing": 0.0}},
            "trainer": {"train_steps": 40, "steps_per_loop": 5, "summary_interval": 5,
                        "validation_interval": 40, "validation_steps": 1,
                        "checkpoint_interval": 40}}


def child(mode: str, optimizer: str, data: str, model_dir: str) -> dict:
  """Runs `nascli train` in this process and returns what the parent reports."""
  start = time.perf_counter()
  import gc  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, str(ROOT))
  collector = {"seconds": 0.0, "full": 0, "began": 0.0}

  def on_gc(phase, info):
    if phase == "start":
      collector["began"] = time.perf_counter()
      return
    collector["seconds"] += time.perf_counter() - collector["began"]
    collector["full"] += info["generation"] == 2

  gc.callbacks.append(on_gc)
  # pylint: disable=g-import-not-at-top
  from nascli import frameworks
  if mode == "plain":
    import importlib
    for name in frameworks.MODEL_GARDEN:
      importlib.import_module(name)
  else:
    frameworks.load()
  imports = time.perf_counter() - start
  from tensorflow.python.eager.polymorphic_function import atomic_function
  from tensorflow.python.eager.polymorphic_function import tracing_compilation
  loop = {}
  trace_graph = tracing_compilation.func_graph_module.func_graph_from_py_func

  def timed_trace(name, *args, **kwargs):
    t = time.perf_counter()
    try:
      return trace_graph(name, *args, **kwargs)
    finally:
      if name == "loop_fn" and "trace_s" not in loop:
        loop["trace_s"] = time.perf_counter() - t

  call_flat = atomic_function.AtomicFunction.call_flat

  def timed_call(self, *args):
    t = time.perf_counter()
    try:
      return call_flat(self, *args)
    finally:
      name = self.name.decode() if isinstance(self.name, bytes) else str(self.name)
      if "loop_fn" in name and "first_call_s" not in loop:
        loop["first_call_s"] = time.perf_counter() - t

  tracing_compilation.func_graph_module.func_graph_from_py_func = timed_trace
  atomic_function.AtomicFunction.call_flat = timed_call
  from nascli import app
  code = app.main(["train", "--experiment", bench_thor.EXPERIMENT, "--dataset_dir", data,
                   "--config_file", str(bench_thor.recipe(optimizer)),
                   "--params_override", json.dumps(OVERRIDE), "--mode", "train",
                   "--model_dir", model_dir, "--seed", "1", "--json"])
  if code != 0:
    raise SystemExit(f"nascli train exited with {code}")
  return {"mode": mode, "optimizer": optimizer,
          "wall_s": round(time.perf_counter() - start, 3), "imports_s": round(imports, 3),
          "gc_s": round(collector["seconds"], 3), "gc_full_passes": collector["full"],
          "frozen_objects": gc.get_freeze_count(),
          **{k: round(v, 3) for k, v in loop.items()}}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--reps", type=int, default=3)
  parser.add_argument("--data", default="/tmp/nascli_bench_thor/data/digits32")
  parser.add_argument("--optimizers", default="sgd,thor")
  parser.add_argument("--out", help="also write the report as JSON here")
  parser.add_argument("--child", nargs=3, metavar=("MODE", "OPTIMIZER", "MODEL_DIR"),
                      help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    result = child(*args.child[:2], args.data, args.child[2])
    print("STARTUP_RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # pylint: disable=protected-access  # as the console script: no tf.data teardown
  if not Path(args.data).is_dir():
    sys.exit(f"no data set in {args.data}: run bench/bench_thor.py once, or give --data")
  runs = []
  with tempfile.TemporaryDirectory(prefix="nascli_bench_startup_") as work:
    for rep in range(args.reps):
      for optimizer in args.optimizers.split(","):
        for mode in MODES:
          model_dir = os.path.join(work, f"{optimizer}_{mode}_{rep}")
          proc = subprocess.run(
              [sys.executable, __file__, "--data", args.data, "--child", mode, optimizer,
               model_dir], capture_output=True, text=True, check=False, cwd=ROOT)
          line = [l for l in proc.stdout.splitlines() if l.startswith("STARTUP_RESULT ")]
          if proc.returncode != 0 or not line:
            sys.exit(f"child {mode} {optimizer} failed: {proc.stderr[-2000:]}")
          runs.append(json.loads(line[0].split(" ", 1)[1]))
          print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
  keys = ("wall_s", "imports_s", "gc_s", "gc_full_passes", "trace_s", "first_call_s")
  summary = {}
  for optimizer in args.optimizers.split(","):
    for mode in MODES:
      mine = [r for r in runs if r["optimizer"] == optimizer and r["mode"] == mode]
      summary[f"{optimizer} {mode}"] = {k: statistics.median(r[k] for r in mine) for k in keys}
  report = {"reps": args.reps, "runs": runs, "median": summary}
  if args.out:
    Path(args.out).write_text(json.dumps(report, indent=2))
  print(f"{'optimizer mode':14s} " + " ".join(f"{k:>14s}" for k in keys))
  for name, row in summary.items():
    print(f"{name:14s} " + " ".join(f"{row[k]:14.3f}" for k in keys))
  for optimizer in args.optimizers.split(","):
    plain, frozen = summary[f"{optimizer} plain"], summary[f"{optimizer} frozen"]
    print(f"{optimizer}: wall {frozen['wall_s'] / plain['wall_s']:.3f}x"
          f" ({frozen['wall_s'] - plain['wall_s']:+.2f} s), trace"
          f" {frozen['trace_s'] - plain['trace_s']:+.2f} s, collector"
          f" {frozen['gc_s'] - plain['gc_s']:+.2f} s")


if __name__ == "__main__":
  main()
