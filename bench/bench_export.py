"""SavedModel export with and without Keras' per-layer traces (tf_vision/serving/export_lib.py).

    python bench/bench_export.py [--reps 3] [--spaces mnasnet,spinenet] [--work DIR]

Why: an end-of-search export of one mnasnet trial took about 10 s on this machine, and a
profile put most of it in `tf.saved_model.save` tracing every Keras layer's call for the
metadata `tf_keras.models.load_model` would use. The export is a Model Garden `ExportModule`
(a `tf.Module`) served through its signatures and never reloaded as Keras, so nascli now saves
with `save_traces=False`, what `Model.save(save_traces=False)` does. The baseline is Model
Garden's exporter as it is: the same `export_lib.export` call with nascli's scope replaced by a
no-op, in the same process, modes alternating run by run after one warm-up export each (the
first export of a process also traces TensorFlow's own functions).

The models: the trials of a 2-trial `nascli search_in_local` per space on the embedded default
data and testing YAML (`--export_top_k 0`), made once under --work. Reported per space and
mode: median export seconds, SavedModel bytes, and whether the `serving_default` outputs of
the two exports are equal on the same images.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("model_garden", "nascli")
SHORT = {"mnasnet": "trainer.train_steps=20,trainer.steps_per_loop=10,"
                    "trainer.checkpoint_interval=10",
         "spinenet": "trainer.train_steps=20,trainer.steps_per_loop=10,"
                     "trainer.checkpoint_interval=20,trainer.validation_interval=20,"
                     "trainer.optimizer_config.learning_rate.cosine.decay_steps=20"}


def _search(space: str, job: Path) -> list[Path]:
  if not (job / "trials.json").exists():
    subprocess.run([sys.executable, "-m", "nascli", "search_in_local", "--prebuilt_search_space",
                    space, "--local_output_dir", str(job), "--max_nas_trial", "2",
                    "--export_top_k", "0", "--seed", "1", "--search_docker_flags",
                    f"params_override={SHORT[space]}"], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
  return sorted(p for p in job.iterdir() if (p / "job_status.json").exists())


def _size(folder: Path) -> int:
  return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--reps", type=int, default=3)
  parser.add_argument("--spaces", default="mnasnet,spinenet")
  parser.add_argument("--work", default="/tmp/bench_export")
  args = parser.parse_args()
  work = Path(args.work)
  trials = {space: _search(space, work / space) for space in args.spaces.split(",")}

  sys.path.insert(0, str(ROOT))
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import tensorflow as tf
  from tf_vision import eval_lib, model_dir as model_dir_lib
  from tf_vision.serving import export_lib
  nascli_scope = export_lib.keras_saved_model_utils.keras_option_scope

  def export(mode: str, trial: Path, out: Path) -> float:
    params = model_dir_lib.load_params(str(trial), None)
    checkpoint = eval_lib.resolve_checkpoint(str(trial), None)
    scope = nascli_scope if mode == "nascli" else (lambda **_: contextlib.nullcontext())
    export_lib.keras_saved_model_utils.keras_option_scope = scope
    try:
      start = time.perf_counter()
      export_lib.export(params, checkpoint, out, overwrite=True)
      return time.perf_counter() - start
    finally:
      export_lib.keras_saved_model_utils.keras_option_scope = nascli_scope

  rows = []
  for space, dirs in trials.items():
    for mode in MODES:  # warm-up
      export(mode, dirs[0], work / "out" / space / f"warm-{mode}")
    seconds = {mode: [] for mode in MODES}
    for rep in range(args.reps):
      for mode in (MODES if rep % 2 == 0 else MODES[::-1]):
        for trial in dirs:
          seconds[mode].append(export(mode, trial, work / "out" / space / mode / trial.name))
    images = np.random.RandomState(0).randint(0, 256, (2, 64, 64, 3)).astype(np.uint8)
    outputs = {}
    for mode in MODES:
      fn = tf.saved_model.load(str(work / "out" / space / mode / dirs[0].name / "saved_model")
                               ).signatures["serving_default"]
      outputs[mode] = {k: v.numpy() for k, v in fn(inputs=tf.constant(images)).items()}
    equal = all(np.array_equal(outputs[MODES[0]][k], outputs[MODES[1]][k])
                for k in outputs[MODES[0]])
    for mode in MODES:
      rows.append({"space": space, "mode": mode, "exports": len(seconds[mode]),
                   "median_s": round(statistics.median(seconds[mode]), 2),
                   "saved_model_bytes": _size(work / "out" / space / mode / dirs[0].name
                                              / "saved_model"),
                   "outputs_equal": equal})
  print(json.dumps(rows, indent=1))
  for space in trials:
    base, ours = (next(r for r in rows if r["space"] == space and r["mode"] == m) for m in MODES)
    print(f"{space}: {base['median_s']} s -> {ours['median_s']} s per export,"
          f" {base['median_s'] / ours['median_s']:.2f}x faster", file=sys.stderr)


if __name__ == "__main__":
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  main()
