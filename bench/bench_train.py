"""train throughput: `nascli train` against Model Garden's `official.vision.train`, same config.

    python bench/bench_train.py [--steps 600] [--repeats 3] [--out bench/results/train.json]
                                [--steps_per_loop 100] [--checkpoint_interval N] [--tty]
                                [--no_pipeline] [--retries 0]

Both contenders train the same Model Garden experiment config, built from the same YAML file:
Model Garden's registered `resnet_imagenet` experiment overridden to ResNet-10 on 32x32x3 images,
10 classes, global batch 32, float32, one_device strategy on the CPU, SGD + cosine schedule, no
augmentation, over the TFRecords of `nascli convert-data digits --image_size 32` (1,438 training
images in 8 shards). After every run the script checks that the two `params.yaml` files the runs
wrote are equal.

  nascli  `python -m nascli train --experiment resnet_imagenet --config_file CFG --mode train
          --model_dir DIR --json` (nascli's runner: Model Garden's OrbitExperimentRunner plus
          nascli's per-loop action: log line, NaN check, train_metrics.jsonl, progress display;
          stderr is a pipe, so Rich's live bar is off, as under a scheduler; --tty runs a third
          contender under a pseudo-terminal, with the live bar on).
  mg      `python -m official.vision.train --experiment=resnet_imagenet --config_file=CFG
          --mode=train --model_dir=DIR` (Model Garden's own driver, its defaults: asynchronous
          checkpoint saving).

Each run is a fresh process with a fresh model dir. What is measured:

  steady steps/s  from the `steps_per_second` summaries Orbit writes after every loop of
                  --steps_per_loop steps (both contenders run the same Orbit controller, so the
                  same timer: the time between the ends of two loops, including the checkpoint
                  saves and summary writes between them). The first loop (tf.function tracing,
                  input pipeline start) is excluded; the rate is the steps of loops 2..n over
                  the sum of their durations.
  wall s          the whole process, from spawn to exit (imports, model build, tracing, all
                  loops, the final checkpoint), split into start (spawn -> Orbit's timer
                  starts), the first loop, the steady loops and end (last loop -> exit).
  foreign load    CPUs used by other processes during the steady loops (sampled every 0.5 s
                  from /proc/stat minus the child's own /proc/<pid>/stat), during each loop,
                  and during the whole run.
  clean steps/s   the same rate over only the loops 3..n during which other processes used
                  under 0.1 CPU, pooled over all runs of a contender (loop 2 is left out
                  because both contenders still speed up in it): an estimate that contention
                  from other jobs does not touch.
  CPU ms/step     the child's CPU time per step over the steady loops (the work per step; it
                  moves less with contention than steps/s does).

Contenders run interleaved (order alternates every repeat) so that other work on the machine hits
both alike; the table gives medians over --repeats runs and the median of the per-repeat ratios.

The input pipeline is measured on its own in a separate process (one per repeat, interleaved
with the training runs): the same config's `task.build_inputs(params.task.train_data)`, Model
Garden's classification input reader (TFRecord read, parse, PNG decode, resize, batch, prefetch)
over the same shards, iterated without training: images/s over --pipeline_batches batches after
--pipeline_warmup batches, and the CPU it spent per batch. It is compared with the fastest rate
training consumes images (clean steps/s, else steady steps/s, x global batch).

A run whose steady loops saw other processes use more than --max_foreign_load CPUs can be rerun
(--retries, default 0: on a machine that stays busy, retries only cost time; the clean-loop rate
is the contention-free figure). Everything, per run and per loop, goes to the JSON report.
"""

import argparse
import datetime
import json
import os
from pathlib import Path
import pty
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

import benchlib  # bench/benchlib.py (scripts run from bench/)
import host  # bench/host.py

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parent.parent
OUT_ROOT = Path("/tmp/nascli-bench-train")
EXPERIMENT = "resnet_imagenet"
GLOBAL_BATCH = 32
IMAGE_SIZE = 32
TARGET_VS_MG = 0.97  # nascli steady steps/s / Model Garden's, from the issue
# A loop counts as "clean" when other processes used fewer CPUs than this during it; clean loops
# 3..n give a second, contention-free estimate (loop 2 still runs slower in both contenders).
CLEAN_LOAD = 0.1
CLK_TCK = os.sysconf("SC_CLK_TCK")
_ORBIT_LINE = re.compile(r"train \| step:\s*(\d+) \| steps/sec:\s*([0-9.]+)")
PIPELINE_MARK = "PIPELINE_RESULT "


# ----------------------------------------------------------------------------- data and config

def ensure_data(root: Path) -> Path:
  """The `convert-data digits --image_size 32` output (converted once, then reused)."""
  out = root / f"digits{IMAGE_SIZE}"
  if not (out / "dataset_info.json").exists():
    print(f"converting digits to {out}", flush=True)
    subprocess.run([sys.executable, "-m", "nascli", "convert-data", "digits", "--image_size",
                    str(IMAGE_SIZE), "--output_dir", str(out), "--overwrite"],
                   cwd=REPO, check=True, stdout=subprocess.DEVNULL)
  return out


def write_config(path: Path, data: Path, steps: int, steps_per_loop: int,
                 checkpoint_interval: int) -> dict:
  """The one YAML both contenders apply over `resnet_imagenet`; returns it as a dict."""
  info = json.loads((data / "dataset_info.json").read_text())
  config = {
      "runtime": {"distribution_strategy": "one_device", "num_gpus": 0,
                  "mixed_precision_dtype": "float32", "enable_xla": False},
      "task": {
          "model": {"num_classes": int(info["num_classes"]),
                    "input_size": [IMAGE_SIZE, IMAGE_SIZE, 3],
                    "backbone": {"type": "resnet", "resnet": {"model_id": 10}}},
          "losses": {"l2_weight_decay": 1e-4},
          "train_data": {
              "input_path": str(data / info["splits"]["train"]["file_pattern"]),
              "global_batch_size": GLOBAL_BATCH, "decode_jpeg_only": False,
              "aug_crop": False, "aug_rand_hflip": False, "shuffle_buffer_size": 2048},
          "validation_data": {
              "input_path": str(data / info["splits"]["validation"]["file_pattern"]),
              "global_batch_size": 64, "decode_jpeg_only": False, "aug_crop": False,
              "drop_remainder": False},
      },
      "trainer": {
          "train_steps": steps, "steps_per_loop": steps_per_loop,
          "summary_interval": steps_per_loop, "checkpoint_interval": checkpoint_interval,
          "validation_interval": steps, "validation_steps": -1, "max_to_keep": 3,
          "optimizer_config": {
              "optimizer": {"type": "sgd", "sgd": {"momentum": 0.9}},
              "learning_rate": {"type": "cosine", "cosine": {"initial_learning_rate": 0.1,
                                                             "decay_steps": steps}},
              "warmup": {"type": "linear", "linear": {"warmup_steps": max(1, steps // 20),
                                                      "warmup_learning_rate": 0.0}}}},
  }
  import yaml  # pylint: disable=g-import-not-at-top
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(yaml.safe_dump(config, sort_keys=False))
  return config


def commands(config: Path, model_dir: Path) -> dict[str, list[str]]:
  py = sys.executable
  return {
      "nascli": [py, "-m", "nascli", "train", "--experiment", EXPERIMENT, "--config_file",
                 str(config), "--mode", "train", "--model_dir", str(model_dir), "--json"],
      "mg": [py, "-m", "official.vision.train", f"--experiment={EXPERIMENT}",
             f"--config_file={config}", "--mode=train", f"--model_dir={model_dir}"],
  }


# --------------------------------------------------------------------------------- CPU accounting

def _proc_cpu(pid: int) -> float | None:
  try:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
      fields = f.read().rsplit(")", 1)[1].split()
  except OSError:
    return None
  return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime of all its threads


class Sampler(threading.Thread):
  """Samples (time, machine busy CPU-s, child CPU-s) every 0.5 s while a child runs."""

  def __init__(self, pid: int):
    super().__init__(daemon=True)
    self.pid = pid
    self.samples: list[tuple[float, float, float]] = []
    self.stop = threading.Event()

  def run(self) -> None:
    while not self.stop.is_set():
      child = _proc_cpu(self.pid)
      if child is not None:
        self.samples.append((time.time(), host.machine_busy(), child))
      self.stop.wait(0.5)

  def foreign_load(self, start: float, end: float) -> float | None:
    """Mean CPUs used by everything but the child (and this script) between two wall times."""
    inside = [s for s in self.samples if start <= s[0] <= end]
    if len(inside) < 2:
      return None
    (t0, b0, c0), (t1, b1, c1) = inside[0], inside[-1]
    return max(0.0, ((b1 - b0) - (c1 - c0)) / max(t1 - t0, 1e-9))

  def child_cores(self, start: float, end: float) -> float | None:
    """Mean CPUs the child used between two wall times."""
    inside = [s for s in self.samples if start <= s[0] <= end]
    if len(inside) < 2:
      return None
    (t0, _, c0), (t1, _, c1) = inside[0], inside[-1]
    return (c1 - c0) / max(t1 - t0, 1e-9)


def wait_idle(timeout: float) -> float:
  """Waits (up to timeout seconds) until other processes use under 0.3 CPU; returns the load."""
  start = time.perf_counter()
  while True:
    load = host.foreign_load(1.0)
    if load < 0.3 or time.perf_counter() - start >= timeout:
      return load
    time.sleep(2.0)


# ------------------------------------------------------------------------------------ one run

def _drain(fd: int, sink) -> None:
  """Copies a pseudo-terminal's output to a file until the child closes it."""
  while True:
    try:
      chunk = os.read(fd, 65536)
    except OSError:
      return
    if not chunk:
      return
    sink.write(chunk)


def run_process(cmd: list[str], log_path: Path, tty: bool = False) -> dict:
  """Runs one contender; wall time, its CPU time, the machine's busy CPU and the samples."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  if tty:
    env.update(COLUMNS="120", LINES="40", TERM="xterm-256color")
  children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
  busy0 = host.machine_busy()
  start_wall = time.time()
  start = time.perf_counter()
  with open(log_path, "wb") as log:
    if tty:
      master, slave = pty.openpty()
      proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log,
                              stderr=slave)
      os.close(slave)
      reader = threading.Thread(target=_drain, args=(master, log), daemon=True)
      reader.start()
    else:
      proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT)
    sampler = Sampler(proc.pid)
    sampler.start()
    try:
      rc = proc.wait()
    except BaseException:  # Ctrl-C or SIGTERM: do not leave the contender running
      proc.kill()
      proc.wait()
      raise
    wall = time.perf_counter() - start
    sampler.stop.set()
    sampler.join()
    if tty:
      reader.join(timeout=5)
      os.close(master)
  busy = host.machine_busy() - busy0
  children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = ((children1.ru_utime - children0.ru_utime) + (children1.ru_stime - children0.ru_stime))
  if rc != 0:
    tail = log_path.read_bytes()[-3000:].decode(errors="replace")
    raise SystemExit(f"{' '.join(cmd)} failed with exit code {rc}; log {log_path}:\n{tail}")
  return {"wall_s": wall, "start_wall_time": start_wall, "cpu_s": cpu,
          "foreign_cpu_s": max(0.0, busy - cpu), "sampler": sampler}


def loop_rates(model_dir: Path) -> list[dict]:
  """Per-loop {step, steps_per_second, wall_time, loss} from Orbit's training summaries."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel("ERROR")  # summary_iterator's deprecation warning
  loops: dict[int, dict] = {}
  for path in sorted((model_dir / "train").glob("events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      for value in event.summary.value:
        if value.tag in ("steps_per_second", "training_loss"):
          entry = loops.setdefault(int(event.step), {"step": int(event.step)})
          number = float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else float(
              value.simple_value)
          entry["steps_per_second" if value.tag == "steps_per_second" else "loss"] = number
          entry["wall_time"] = event.wall_time
  return [loops[s] for s in sorted(loops) if "steps_per_second" in loops[s]]


def orbit_log_rates(log_path: Path) -> list[tuple[int, float]]:
  """(step, steps/sec) from Orbit's printed `train | step: S | steps/sec: R` lines (cross-check)."""
  text = log_path.read_bytes().decode(errors="replace")
  seen = {}
  for m in _ORBIT_LINE.finditer(text):
    seen[int(m.group(1))] = float(m.group(2))  # absl logs and print() give each line twice
  return sorted(seen.items())


def steady(loops: list[dict], steps_per_loop: int) -> tuple[float, float, float]:
  """(steps/s over loops 2..n, their seconds, the first loop's seconds)."""
  durations, steps, prev = [], [], 0
  for entry in loops:
    n = entry["step"] - prev
    prev = entry["step"]
    steps.append(n)
    durations.append(n / entry["steps_per_second"])
  if len(loops) < 2:
    raise SystemExit(f"need at least 2 loops of {steps_per_loop} steps; raise --steps")
  return sum(steps[1:]) / sum(durations[1:]), sum(durations[1:]), durations[0]


def train_run(label: str, cmd: list[str], model_dir: Path, log_path: Path,
              steps_per_loop: int, tty: bool = False) -> dict:
  if model_dir.exists():
    shutil.rmtree(model_dir)
  proc = run_process(cmd, log_path, tty=tty)
  loops = loop_rates(model_dir)
  rate, steady_s, first_s = steady(loops, steps_per_loop)
  sampler: Sampler = proc.pop("sampler")
  # The steady window: from the end of the first loop to the end of the last.
  steady_load = sampler.foreign_load(loops[0]["wall_time"], loops[-1]["wall_time"])
  # CPU work per step: less sensitive to other processes than steps/s (they take turns on the
  # cores; the work a step needs stays about the same).
  cores = sampler.child_cores(loops[0]["wall_time"], loops[-1]["wall_time"])
  loop_loads, clean = [None], []
  for i in range(1, len(loops)):
    load = sampler.foreign_load(loops[i - 1]["wall_time"], loops[i]["wall_time"])
    loop_loads.append(None if load is None else round(load, 3))
    steps = loops[i]["step"] - loops[i - 1]["step"]
    if i >= 2 and load is not None and load < CLEAN_LOAD:
      clean.append({"loop": i + 1, "steps": steps,
                    "seconds": steps / loops[i]["steps_per_second"]})
  result = {
      "label": label, "steady_steps_per_second": rate, "steady_seconds": steady_s,
      "first_loop_seconds": first_s,
      "outside_loops_seconds": proc["wall_s"] - first_s - steady_s,
      # spawn -> Orbit's timer starts (imports, config, model, checkpoint restore check), and
      # the end of the last loop -> exit (final checkpoint, status files, interpreter teardown).
      "startup_seconds": loops[0]["wall_time"] - first_s - proc["start_wall_time"],
      "teardown_seconds": proc["start_wall_time"] + proc["wall_s"] - loops[-1]["wall_time"],
      "loop_steps_per_second": [round(e["steps_per_second"], 3) for e in loops],
      "orbit_log_steps_per_second": [r for _, r in orbit_log_rates(log_path)],
      "final_loss": loops[-1].get("loss"),
      "foreign_load_steady": steady_load,
      "loop_foreign_load": loop_loads,
      "clean_loops": clean,
      "cpu_cores_steady": cores,
      "cpu_ms_per_step_steady": None if cores is None else 1000 * cores / rate,
      "foreign_load_run": proc["foreign_cpu_s"] / proc["wall_s"],
      "loadavg_after": os.getloadavg()[0],
      **{k: v for k, v in proc.items() if k != "start_wall_time"},
  }
  metrics = model_dir / "train_metrics.jsonl"
  if metrics.exists():  # nascli's own per-loop timer (cross-check)
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    result["nascli_metrics_steps_per_second"] = [round(r["steps_per_second"], 3) for r in rows]
  return result


def params_yaml(model_dir: Path) -> dict:
  import yaml  # pylint: disable=g-import-not-at-top

  class _Loader(yaml.SafeLoader):
    pass

  _Loader.add_constructor("tag:yaml.org,2002:python/tuple",
                          lambda loader, node: tuple(loader.construct_sequence(node)))
  return yaml.load((model_dir / "params.yaml").read_text(), Loader=_Loader)  # noqa: S506


def _diff(a, b, prefix="") -> list[str]:
  if isinstance(a, dict) and isinstance(b, dict):
    out = []
    for k in sorted(set(a) | set(b)):
      if k not in a or k not in b:
        out.append(f"{prefix}{k}: only in {'nascli' if k in a else 'mg'}")
      else:
        out += _diff(a[k], b[k], f"{prefix}{k}.")
    return out
  return [] if a == b else [f"{prefix[:-1]}: {a!r} != {b!r}"]


# ------------------------------------------------------------------------------ input pipeline

def pipeline_worker(config_path: str, batches: int, warmup: int) -> None:
  """(In a child process) iterates Model Garden's training input pipeline without training."""
  # pylint: disable=g-import-not-at-top
  import yaml
  from official.core import exp_factory, task_factory
  from official.vision import registry_imports  # noqa: F401  pylint: disable=unused-import
  t0 = time.perf_counter()
  params = exp_factory.get_exp_config(EXPERIMENT)
  with open(config_path, encoding="utf-8") as f:
    params.override(yaml.safe_load(f), is_strict=True)
  params.validate()
  params.lock()
  task = task_factory.get_task(params.task)
  dataset = task.build_inputs(params.task.train_data)
  iterator = iter(dataset)
  images, labels = next(iterator)
  build_s = time.perf_counter() - t0
  for _ in range(warmup):
    next(iterator)
  cpu0, start = time.process_time(), time.perf_counter()
  count = 0
  for _ in range(batches):
    images, labels = next(iterator)
    count += int(images.shape[0])
  wall = time.perf_counter() - start
  cpu = time.process_time() - cpu0
  print(PIPELINE_MARK + json.dumps({
      "batches": batches, "images": count, "seconds": wall, "images_per_second": count / wall,
      "batches_per_second": batches / wall, "cpu_ms_per_batch": 1000 * cpu / batches,
      "cpu_cores_used": cpu / wall, "build_and_first_batch_s": build_s,
      "batch_shape": list(images.shape), "batch_dtype": images.dtype.name,
      "labels_shape": list(labels.shape)}), flush=True)


def pipeline_run(config: Path, log_path: Path, batches: int, warmup: int) -> dict:
  cmd = [sys.executable, str(Path(__file__).resolve()), "--_pipeline_worker", str(config),
         "--pipeline_batches", str(batches), "--pipeline_warmup", str(warmup)]
  proc = run_process(cmd, log_path)
  sampler: Sampler = proc.pop("sampler")
  text = log_path.read_text(errors="replace")
  line = [l for l in text.splitlines() if l.startswith(PIPELINE_MARK)][-1]
  result = json.loads(line[len(PIPELINE_MARK):])
  end = proc["start_wall_time"] + proc["wall_s"]
  result.update({"wall_s": proc["wall_s"],
                 "foreign_load_timed": sampler.foreign_load(end - result["seconds"] - 0.5, end),
                 "foreign_load_run": proc["foreign_cpu_s"] / proc["wall_s"]})
  return result


# ---------------------------------------------------------------------------------- reporting

def _spread(values: list[float], fmt: str) -> str:
  return f"{format(min(values), fmt)}-{format(max(values), fmt)}"


def _median_or_none(values: list[float | None], digits: int) -> float | None:
  values = [v for v in values if v is not None]
  return round(statistics.median(values), digits) if values else None


def summarize(runs: dict[str, list[dict]], pipeline: list[dict]) -> dict:
  summary = {}
  for label, rs in runs.items():
    rates = [r["steady_steps_per_second"] for r in rs]
    summary[label] = {
        "steady_steps_per_second_median": round(statistics.median(rates), 3),
        "steady_steps_per_second_runs": [round(v, 3) for v in rates],
        "images_per_second_median": round(statistics.median(rates) * GLOBAL_BATCH, 1),
        "wall_s_median": round(statistics.median(r["wall_s"] for r in rs), 2),
        "wall_s_runs": [round(r["wall_s"], 2) for r in rs],
        "first_loop_s_median": round(statistics.median(r["first_loop_seconds"] for r in rs), 2),
        "outside_loops_s_median": round(
            statistics.median(r["outside_loops_seconds"] for r in rs), 2),
        "startup_s_median": round(statistics.median(r["startup_seconds"] for r in rs), 2),
        "teardown_s_median": round(statistics.median(r["teardown_seconds"] for r in rs), 2),
        "cpu_s_median": round(statistics.median(r["cpu_s"] for r in rs), 1),
        "cpu_ms_per_step_steady_median": _median_or_none(
            [r["cpu_ms_per_step_steady"] for r in rs], 2),
        "cpu_ms_per_step_steady_runs": [None if r["cpu_ms_per_step_steady"] is None else round(
            r["cpu_ms_per_step_steady"], 2) for r in rs],
        "cpu_cores_steady_median": _median_or_none([r["cpu_cores_steady"] for r in rs], 2),
        "foreign_load_steady_runs": [None if r["foreign_load_steady"] is None
                                     else round(r["foreign_load_steady"], 2) for r in rs],
        "final_loss_runs": [None if r["final_loss"] is None else round(r["final_loss"], 4)
                            for r in rs],
    }
  for label, rs in runs.items():
    clean = [c for r in rs for c in r["clean_loops"]]
    seconds = sum(c["seconds"] for c in clean)
    summary[label]["clean_loops"] = len(clean)
    summary[label]["clean_steps_per_second"] = (
        round(sum(c["steps"] for c in clean) / seconds, 3) if seconds else None)
  paired = [n["steady_steps_per_second"] / m["steady_steps_per_second"]
            for n, m in zip(runs["nascli"], runs["mg"])]
  paired_wall = [m["wall_s"] / n["wall_s"] for n, m in zip(runs["nascli"], runs["mg"])]
  ratio = (summary["nascli"]["steady_steps_per_second_median"]
           / summary["mg"]["steady_steps_per_second_median"])
  ratios = {"nascli/mg steady steps/s (medians)": round(ratio, 4),
            "nascli/mg steady steps/s (median of paired runs)": round(
                statistics.median(paired), 4),
            "paired runs": [round(p, 4) for p in paired],
            "nascli/mg end-to-end speed (mg wall / nascli wall, median of pairs)": round(
                statistics.median(paired_wall), 4)}
  clean_n = summary["nascli"]["clean_steps_per_second"]
  clean_m = summary["mg"]["clean_steps_per_second"]
  if clean_n and clean_m:
    ratios["nascli/mg clean loops 3..n steps/s (pooled)"] = round(clean_n / clean_m, 4)
  cpu_n = summary["nascli"]["cpu_ms_per_step_steady_median"]
  cpu_m = summary["mg"]["cpu_ms_per_step_steady_median"]
  if cpu_n and cpu_m:
    ratios["mg/nascli CPU ms per step (steady; > 1: nascli does less work per step)"] = round(
        cpu_m / cpu_n, 4)
  if "nascli tty" in runs:
    ratios["nascli tty / mg steady steps/s (medians)"] = round(
        summary["nascli tty"]["steady_steps_per_second_median"]
        / summary["mg"]["steady_steps_per_second_median"], 4)
  result = {"contenders": summary, "ratios": ratios,
            "target_met": {f"nascli >= {TARGET_VS_MG} x mg (steady steps/s, medians)":
                           ratio >= TARGET_VS_MG}}
  if pipeline:
    ips = [p["images_per_second"] for p in pipeline]
    # The fastest rate training was seen to take images at: the contention-free (clean-loop)
    # rate where there is one, else the median.
    consumption = max((s["clean_steps_per_second"] or s["steady_steps_per_second_median"])
                      * GLOBAL_BATCH for s in summary.values())
    result["input_pipeline"] = {
        "images_per_second_median": round(statistics.median(ips), 1),
        "images_per_second_runs": [round(v, 1) for v in ips],
        "cpu_ms_per_batch_median": round(statistics.median(p["cpu_ms_per_batch"]
                                                           for p in pipeline), 2),
        "cpu_cores_used_median": round(statistics.median(p["cpu_cores_used"]
                                                         for p in pipeline), 2),
        "foreign_load_timed_runs": [None if p["foreign_load_timed"] is None
                                    else round(p["foreign_load_timed"], 2) for p in pipeline],
        "batch_shape": pipeline[0]["batch_shape"], "batch_dtype": pipeline[0]["batch_dtype"],
        "training_consumption_images_per_second": round(consumption, 1),
        "headroom (pipeline / consumption)": round(statistics.median(ips) / consumption, 2),
        "pipeline CPU share of a training step (cpu ms per batch / step ms)": round(
            statistics.median(p["cpu_ms_per_batch"] for p in pipeline)
            / (1000 * GLOBAL_BATCH / consumption), 3),
    }
  return result


def print_table(report: dict) -> None:
  res = report["results"]
  print()
  print("steady steps/s: Orbit's per-loop steps_per_second summaries, loops 2..n (first loop"
        " excluded); medians over repeats")
  print(f"{'contender':<11} {'steps/s':>8} {'min-max':>13} {'img/s':>7} {'wall s':>7}"
        f" {'min-max':>11} {'start s':>7} {'1st loop s':>10} {'end s':>5} {'CPU s':>6}"
        f" {'CPU ms/step':>11}"
        f" {'clean steps/s (loops)':>21} {'foreign load (steady)':>22}")
  for label, s in res["contenders"].items():
    loads = ",".join("-" if v is None else f"{v:.2f}" for v in s["foreign_load_steady_runs"])
    print(f"{label:<11} {s['steady_steps_per_second_median']:>8.2f}"
          f" {_spread(s['steady_steps_per_second_runs'], '.2f'):>13}"
          f" {s['images_per_second_median']:>7.0f} {s['wall_s_median']:>7.1f}"
          f" {_spread(s['wall_s_runs'], '.1f'):>11} {s['startup_s_median']:>7.2f}"
          f" {s['first_loop_s_median']:>10.2f} {s['teardown_s_median']:>5.2f}"
          f" {s['cpu_s_median']:>6.1f} {s['cpu_ms_per_step_steady_median'] or 0:>11.1f}"
          f" {s['clean_steps_per_second'] or 0:>15.2f} ({s['clean_loops']:>3})"
          f" {loads:>22}")
  for k, v in res["ratios"].items():
    print(f"  {k}: {v}")
  for k, v in res["target_met"].items():
    print(f"  target {k}: {'met' if v else 'MISSED'}")
  print(f"  same params.yaml in every pair: {report['same_params']}")
  p = res.get("input_pipeline")
  if p:
    print()
    print(f"input pipeline (task.build_inputs, no training): {p['images_per_second_median']:.0f}"
          f" img/s (runs {', '.join(f'{v:.0f}' for v in p['images_per_second_runs'])}),"
          f" {p['cpu_ms_per_batch_median']:.2f} CPU ms/batch, {p['cpu_cores_used_median']:.2f}"
          f" cores busy; training consumes {p['training_consumption_images_per_second']:.0f}"
          f" img/s -> headroom {p['headroom (pipeline / consumption)']:.1f}x; the pipeline's"
          f" CPU is {100 * p['pipeline CPU share of a training step (cpu ms per batch / step ms)']:.0f}%"
          " of a training step's time")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=600, help="training steps per run")
  parser.add_argument("--steps_per_loop", "--steps-per-loop", type=int, default=100)
  parser.add_argument("--checkpoint_interval", "--checkpoint-interval", type=int, default=None,
                      help="default: --steps_per_loop (a checkpoint every loop, as nascli's"
                      " experiments do)")
  parser.add_argument("--repeats", type=int, default=3, help="runs per contender (median)")
  parser.add_argument("--tty", action="store_true",
                      help="also run nascli under a pseudo-terminal (Rich live progress bar on)")
  parser.add_argument("--pipeline_batches", "--pipeline-batches", type=int, default=200)
  parser.add_argument("--pipeline_warmup", "--pipeline-warmup", type=int, default=20)
  parser.add_argument("--no_pipeline", "--no-pipeline", action="store_true")
  parser.add_argument("--idle_timeout", "--idle-timeout", type=float, default=20.0,
                      help="before each run, wait up to this long for other processes to go"
                      " quiet (each run records the load others put on the machine anyway)")
  parser.add_argument("--max_foreign_load", "--max-foreign-load", type=float, default=0.25,
                      help="rerun a training run (up to --retries times) whose steady loops saw"
                      " other processes use more CPUs than this; every discarded run is kept in"
                      " the JSON")
  parser.add_argument("--retries", type=int, default=0)
  parser.add_argument("--work_dir", "--work-dir", type=Path, default=OUT_ROOT)
  parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "train.json")
  parser.add_argument("--_pipeline_worker", help=argparse.SUPPRESS)
  args = parser.parse_args()
  signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
  if args._pipeline_worker:  # pylint: disable=protected-access
    pipeline_worker(args._pipeline_worker, args.pipeline_batches, args.pipeline_warmup)  # pylint: disable=protected-access
    return

  work = args.work_dir
  data = ensure_data(work)
  config_path = work / "config.yaml"
  ckpt = args.checkpoint_interval or args.steps_per_loop
  config = write_config(config_path, data, args.steps, args.steps_per_loop, ckpt)
  cmds = commands(config_path, Path("MODEL_DIR"))
  report = {"benchmark": "train throughput",
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join([sys.executable, *sys.argv]),
            "machine": host.machine(host.PACKAGES + ("rich",)),
            "settings": {"steps": args.steps, "steps_per_loop": args.steps_per_loop,
                         "checkpoint_interval": ckpt, "repeats": args.repeats,
                         "global_batch_size": GLOBAL_BATCH, "experiment": EXPERIMENT,
                         "data": str(data), "config": config,
                         "commands": {k: " ".join(v) for k, v in cmds.items()},
                         "pipeline_batches": args.pipeline_batches,
                         "pipeline_warmup": args.pipeline_warmup,
                         "idle_timeout_s": args.idle_timeout,
                         "max_foreign_load": args.max_foreign_load, "retries": args.retries}}
  labels = ["nascli", "mg"] + (["nascli tty"] if args.tty else [])
  runs: dict[str, list[dict]] = {label: [] for label in labels}
  pipeline: list[dict] = []
  discarded: list[dict] = []
  same_params = True
  logs = work / "logs"
  logs.mkdir(parents=True, exist_ok=True)
  for rep in range(args.repeats):
    order = labels if rep % 2 == 0 else labels[::-1]  # alternate who goes first
    for label in order:
      tool = "nascli" if label.startswith("nascli") else "mg"
      model_dir = work / "runs" / label.replace(" ", "_")
      for attempt in range(args.retries + 1):
        load_before = wait_idle(args.idle_timeout * (1 + attempt))
        log_path = logs / f"{label.replace(' ', '_')}-{rep + 1}-{attempt + 1}.log"
        r = train_run(label, commands(config_path, model_dir)[tool], model_dir, log_path,
                      args.steps_per_loop, tty=label.endswith("tty"))
        r.update({"foreign_load_before": load_before, "repeat": rep + 1, "attempt": attempt + 1})
        loads = r["foreign_load_steady"]
        busy = loads is not None and loads > args.max_foreign_load
        print(f"  run {rep + 1}/{args.repeats} {label:<10} steady"
              f" {r['steady_steps_per_second']:6.2f} steps/s  wall {r['wall_s']:5.1f}s  first loop"
              f" {r['first_loop_seconds']:5.2f}s  loops {r['loop_steps_per_second']}  CPU"
              f" {r['cpu_ms_per_step_steady'] or 0:.1f} ms/step  clean loops {len(r['clean_loops'])}"
              f"  foreign load"
              f" {'-' if loads is None else f'{loads:.2f}'}"
              + ("  (busy machine: discarded, rerun)" if busy and attempt < args.retries
                 else "  (busy machine: kept, no retries left)" if busy else ""), flush=True)
        if not busy or attempt == args.retries:
          runs[label].append(r)
          break
        discarded.append(r)
    nascli_params = params_yaml(work / "runs" / "nascli")
    diff = _diff(nascli_params, params_yaml(work / "runs" / "mg"))
    if diff:
      same_params = False
      print(f"  WARNING: params.yaml differ: {diff[:5]}", flush=True)
    if not args.no_pipeline:
      wait_idle(args.idle_timeout)
      p = pipeline_run(config_path, logs / f"pipeline-{rep + 1}.log", args.pipeline_batches,
                       args.pipeline_warmup)
      pipeline.append(p)
      print(f"  run {rep + 1}/{args.repeats} pipeline   {p['images_per_second']:7.0f} img/s"
            f"  {p['cpu_ms_per_batch']:.2f} CPU ms/batch", flush=True)
  report["same_params"] = same_params
  report["results"] = summarize(runs, pipeline)
  report["runs"] = runs
  report["pipeline_runs"] = pipeline
  report["discarded_busy_runs"] = discarded
  report["machine"]["loadavg_at_end"] = os.getloadavg()
  print_table(report)
  benchlib.write_json(report, args.out)


if __name__ == "__main__":
  main()
