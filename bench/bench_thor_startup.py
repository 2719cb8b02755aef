"""THOR's start-up against SGD's: tracing and first execution of Orbit's training loop.

    python bench/bench_thor_startup.py [--data DIR] [--steps_per_loop 11] [--low_rank auto]

Why: on the CPU benchmark (bench_thor.py) THOR's first training loop costs about 1 s more than
SGD's, a large share of the wall time to target on runs this short. This isolates it: the
recipe's task, model and optimizer (THOR attached, slots created, as `nascli train` does) under
a OneDeviceStrategy, and the loop Orbit runs (`orbit.utils.create_tf_while_loop_fn` around
`strategy.run(task.train_step)` in a tf.function). Reported per optimizer, each in its own
child process: the trace of the loop (get_concrete_function), its first call (graph
optimization and the first run of the loop's steps), then two more calls (steady loops), and
the graph's size (nodes, functions, `If` ops). DIR: a `nascli convert-data` folder at 32x32
(default: bench_thor.py's digits copy, made by it).
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPTIMIZERS = ("sgd", "thor")


def measure(optimizer: str, data: str, steps_per_loop: int, low_rank: str) -> dict:
  """Runs in the child: times the loop's trace, first call and steady calls."""
  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, str(ROOT))
  from nascli import frameworks
  frameworks.load()  # as `nascli train` does: imports with the collector paused, then frozen
  import orbit
  import tensorflow as tf
  from bench_thor import build_recipe
  from tf_vision.optimization import wrappers
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  params, task, model, opt, _ = build_recipe(
      optimizer, {"low_rank": low_rank} if optimizer == "thor" else None, data, strategy)
  with strategy.scope():  # slots before tracing, as `nascli train` does
    wrappers.create_slots(opt, model.trainable_variables)
  dataset = strategy.distribute_datasets_from_function(
      lambda ctx: task.build_inputs(params.task.train_data, ctx))
  iterator = iter(dataset)

  def step(inputs):
    strategy.run(lambda x: task.train_step(x, model=model, optimizer=opt, metrics=None),
                 args=(inputs,))

  loop = tf.function(orbit.utils.create_tf_while_loop_fn(lambda it: step(next(it))))
  n = tf.constant(steps_per_loop)
  next(iterator)  # the input pipeline's start-up is not the optimizer's
  t0 = time.perf_counter()
  concrete = loop.get_concrete_function(iterator, n)
  t1 = time.perf_counter()
  times = []
  for _ in range(3):
    start = time.perf_counter()
    loop(iterator, n)
    times.append(time.perf_counter() - start)
  graph = concrete.graph.as_graph_def()
  nodes = len(graph.node) + sum(len(f.node_def) for f in graph.library.function)
  ifs = sum(1 for f in graph.library.function for nd in f.node_def
            if nd.op in ("If", "StatelessIf"))
  return {"optimizer": optimizer, "trace_s": round(t1 - t0, 3),
          "first_call_s": round(times[0], 3), "steady_call_s": round(min(times[1:]), 3),
          "first_loop_excess_s": round(t1 - t0 + times[0] - min(times[1:]), 3),
          "graph_nodes": nodes, "graph_functions": len(graph.library.function), "if_ops": ifs}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data", default="/tmp/nascli_bench_thor/data/digits32")
  parser.add_argument("--steps_per_loop", type=int, default=11)
  parser.add_argument("--low_rank", default="auto", choices=["auto", "always", "never"])
  parser.add_argument("--child", choices=OPTIMIZERS, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    print(json.dumps(measure(args.child, args.data, args.steps_per_loop, args.low_rank)))
    return
  if not Path(args.data).is_dir():
    sys.exit(f"no data set in {args.data}: run bench/bench_thor.py once, or give --data")
  rows = []
  for optimizer in OPTIMIZERS:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", optimizer, "--data", args.data,
         "--steps_per_loop", str(args.steps_per_loop), "--low_rank", args.low_rank],
        capture_output=True, text=True, check=False)
    if proc.returncode != 0:
      sys.exit(f"{optimizer} child failed: {proc.stderr[-2000:]}")
    rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
  for row in rows:
    print(json.dumps(row))
  sgd, thor_row = rows
  print(f"THOR - SGD: trace {thor_row['trace_s'] - sgd['trace_s']:+.2f} s, first call"
        f" {thor_row['first_call_s'] - sgd['first_call_s']:+.2f} s, first-loop excess"
        f" {thor_row['first_loop_excess_s'] - sgd['first_loop_excess_s']:+.2f} s")


if __name__ == "__main__":
  main()
