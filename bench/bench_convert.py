"""convert-data throughput: nascli's engine against Model Garden's `write_tf_record_dataset`.

    python bench/bench_convert.py [--cases digits32,digits224,folder20k] [--repeats 3]
                                  [--out bench/results/convert.json]

Every case turns the same images into classification TFRecords with the same seven features
(image/encoded, image/format, image/class/label, image/height, image/width, image/source_id,
image/filename), the same number of shards per split, in the same record order:

  digits32 / digits224  the 1,797 scikit-learn digits upscaled (cv2 INTER_LINEAR) to 32x32 or
                        224x224, 3 channels, encoded to PNG.
  folder20k             a synthetic image folder (10 class folders x 2,000 JPEGs, 64x64, made once
                        with cv2 from a fixed seed into a cache under /tmp), stored as JPEG bytes
                        after a full decode of each file to check it and read its size.

Contenders, each timed as one call in this already-warm Python process (TensorFlow, Model Garden
and nascli are imported before any timing; one untimed warm-up run per contender loads the lazy
imports such as scikit-learn and fills the page cache):

  nascli p=N   nascli.data.convert.convert(..., ShardingOptions(processes=N)); processes=1
               encodes in this process, N>=2 forks N workers and this process writes.
  mg mp=M      official.vision.data.tfrecord_lib.write_tf_record_dataset, once per split, with
               multiple_processes=M. Its semantics (read from the code): None -> a Pool of
               os.cpu_count() workers, 0 -> no pool (encodes in this process), M>=1 -> a Pool of M
               workers (starmap: every example comes back to this process, which writes).
               So mp=0 is the single-process equivalent of nascli p=1, and mp=2 of p=2.
               The baseline's work mirrors nascli's: for digits it loads the digits, splits them
               with the same seeded split, and its process_func upscales and PNG-encodes with
               cv2.imencode (default settings; the same encoder nascli uses, so the image bytes
               are identical -- checked); for folder20k it lists the folder, splits it the same
               way, and its process_func reads the file, fully decodes it with PIL to check it
               and get height/width, and builds the example from the original bytes. Features
               are built with Model Garden's `convert_to_feature`.

The timed interval is the whole conversion call (wall clock, time.perf_counter); images/s and all
ratios use it. nascli's own `stats["seconds"]` (encoding + writing only, after prepare and the
check pass) is reported beside it for nascli. Results are medians over --repeats runs, with runs of
the contenders interleaved.
"""

import argparse
import datetime
import hashlib
import io
import os
from pathlib import Path
import shutil
import statistics
import sys
import time

import benchlib  # bench/benchlib.py (scripts run from bench/)
import host  # bench/host.py

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import cv2  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402
import tensorflow as tf  # noqa: E402
from official.vision.data import tfrecord_lib  # noqa: E402

from nascli.data import splits as nascli_splits  # noqa: E402
from nascli.data.convert import ShardingOptions, convert  # noqa: E402
from nascli.data.source import ConvertOptions  # noqa: E402
import nascli.data.datasets  # noqa: E402,F401  (registers the sources before timing)

CASES = ("digits32", "digits224", "folder20k")
CACHE = Path("/tmp/nascli-bench-cache")
OUT_ROOT = Path("/tmp/nascli-bench-out")
FOLDER_CLASSES = 10
FOLDER_PER_CLASS = 2000
FOLDER_SIZE = 64
FOLDER_SEED = 1234
FOLDER_JPEG_QUALITY = 90
TARGET_SCALING = 1.8  # processes=2 / processes=1 on 2 cores
TARGET_VS_MG = 1.0  # nascli / Model Garden writer at equal process counts


# ----------------------------------------------------------------------------- the synthetic folder

def _synthetic_image(rng: np.random.Generator, cls: int) -> np.ndarray:
  """A 64x64 BGR image: a class-tinted gradient, a few filled shapes and a little noise."""
  s = FOLDER_SIZE
  yy, xx = np.mgrid[0:s, 0:s].astype(np.float32) / (s - 1)
  angle = rng.uniform(0, 2 * np.pi)
  ramp = np.cos(angle) * xx + np.sin(angle) * yy
  base = np.array([(cls * 25) % 256, (cls * 71 + 40) % 256, (cls * 113 + 80) % 256], np.float32)
  tint = rng.uniform(-40, 40, 3).astype(np.float32)
  img = (base + tint)[None, None, :] * (0.6 + 0.4 * ramp[..., None])
  img = np.clip(img, 0, 255).astype(np.uint8)
  for _ in range(int(rng.integers(2, 6))):
    color = tuple(int(c) for c in rng.integers(0, 256, 3))
    if rng.random() < 0.5:
      center = tuple(int(c) for c in rng.integers(0, s, 2))
      cv2.circle(img, center, int(rng.integers(4, s // 3)), color, -1, cv2.LINE_AA)
    else:
      p1 = tuple(int(c) for c in rng.integers(0, s, 2))
      p2 = tuple(int(c) for c in rng.integers(0, s, 2))
      cv2.rectangle(img, p1, p2, color, -1)
  noise = rng.normal(0, 6, img.shape)
  return np.clip(img.astype(np.float32) + noise, 0, 255).astype(np.uint8)


def synthetic_folder() -> Path:
  """The cached 20,000-image folder, generated on first use (deterministic from FOLDER_SEED)."""
  root = CACHE / (f"folder{FOLDER_CLASSES * FOLDER_PER_CLASS // 1000}k-{FOLDER_SIZE}px-"
                  f"q{FOLDER_JPEG_QUALITY}-seed{FOLDER_SEED}")
  done = root / ".complete"
  if done.exists():
    return root
  if root.exists():
    shutil.rmtree(root)
  print(f"generating {FOLDER_CLASSES * FOLDER_PER_CLASS} JPEGs into {root} ...", flush=True)
  start = time.perf_counter()
  rng = np.random.default_rng(FOLDER_SEED)
  for cls in range(FOLDER_CLASSES):
    class_dir = root / f"class_{cls:02d}"
    class_dir.mkdir(parents=True)
    for i in range(FOLDER_PER_CLASS):
      img = _synthetic_image(rng, cls)
      ok = cv2.imwrite(str(class_dir / f"img_{i:05d}.jpg"), img,
                       [cv2.IMWRITE_JPEG_QUALITY, FOLDER_JPEG_QUALITY])
      if not ok:
        raise RuntimeError(f"cannot write into {class_dir}")
  done.write_text("ok\n")
  print(f"  done in {time.perf_counter() - start:.1f}s", flush=True)
  return root


def _folder_bytes(root: Path) -> int:
  return sum(p.stat().st_size for p in root.rglob("*.jpg"))


# ------------------------------------------------------------------- Model Garden's process_funcs

def _example(encoded: bytes, fmt: str, label: int, height: int, width: int, source_id: str,
             filename: str) -> tf.train.Example:
  to = tfrecord_lib.convert_to_feature
  return tf.train.Example(features=tf.train.Features(feature={
      "image/encoded": to(encoded),
      "image/format": to(fmt.encode("utf8")),
      "image/class/label": to(int(label)),
      "image/height": to(int(height)),
      "image/width": to(int(width)),
      "image/source_id": to(source_id.encode("utf8")),
      "image/filename": to(filename.encode("utf8")),
  }))


def mg_digit_example(pixels: np.ndarray, label: int, original: int, image_size: int,
                     channels: int) -> tuple[tf.train.Example, int]:
  """Upscales one 8x8 digit, encodes it to PNG with cv2, builds the example (0 skipped)."""
  image = cv2.resize(pixels, (image_size, image_size), interpolation=cv2.INTER_LINEAR)
  if channels == 3:
    image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)  # RGB==BGR for grey; cv2 wants BGR.
  ok, buf = cv2.imencode(".png", image)
  if not ok:
    raise ValueError("PNG encoding failed")
  return _example(buf.tobytes(), "png", label, image_size, image_size, str(original),
                  f"digits_{original:04d}.png"), 0


def mg_file_example(path: str, label: int, rel: str) -> tuple[tf.train.Example, int]:
  """Reads one image file, decodes it fully (check + size), builds the example from its bytes."""
  with open(path, "rb") as f:
    data = f.read()
  with Image.open(io.BytesIO(data)) as im:
    im.load()
    fmt, height, width = im.format, im.height, im.width
  if fmt not in ("JPEG", "PNG"):
    raise ValueError(f"{rel}: {fmt} would need re-encoding")
  return _example(data, fmt.lower(), label, height, width, rel, rel), 0


def mg_digits(out: Path, image_size: int, mp: int, num_shards: int) -> int:
  """Model Garden's writer over the digits, split exactly as nascli splits them."""
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  data = datasets.load_digits()
  pixels = np.round(data.images * (255.0 / 16.0)).astype(np.uint8)
  labels = data.target.astype(np.int64)
  n = len(labels)
  n_val = nascli_splits.validation_count(n, None, None, 0.2)
  train, validation = nascli_splits.seeded_split(n, n_val, 0)
  written = 0
  for split, positions in (("train", train), ("validation", validation)):
    annotations = [(pixels[i], int(labels[i]), i, image_size, 3) for i in positions]
    tfrecord_lib.write_tf_record_dataset(str(out / split), iter(annotations), mg_digit_example,
                                         num_shards, multiple_processes=mp)
    written += len(annotations)
  return written


def mg_folder(out: Path, root: Path, mp: int, num_shards: int) -> int:
  """Model Garden's writer over an image folder, listed and split exactly as nascli does."""
  classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
  items = []
  for label, name in enumerate(classes):
    for entry in os.scandir(root / name):
      if entry.is_file() and not entry.name.startswith("."):
        items.append((f"{name}/{entry.name}", entry.path, label))
  items.sort()
  n = len(items)
  n_val = nascli_splits.validation_count(n, None, None, 0.1)
  train, validation = nascli_splits.seeded_split(n, n_val, 0)
  written = 0
  for split, positions in (("train", train), ("validation", validation)):
    annotations = [(items[i][1], items[i][2], items[i][0]) for i in positions]
    tfrecord_lib.write_tf_record_dataset(str(out / split), iter(annotations), mg_file_example,
                                         num_shards, multiple_processes=mp)
    written += len(annotations)
  return written


# ------------------------------------------------------------------------------------- the cases

def contenders(case: str, num_shards: int) -> list[tuple[str, str, int, object]]:
  """(label, tool, processes, fn(out) -> (records, nascli_stats or None)) for a case."""
  if case in ("digits32", "digits224"):
    size = 32 if case == "digits32" else 224

    def nascli_run(p):
      def fn(out):
        _, stats = convert("digits", out, ConvertOptions(image_size=size, channels=3),
                           ShardingOptions(processes=p, num_shards=num_shards, overwrite=True))
        return stats["records_written"], stats
      return fn

    def mg_run(mp):
      return lambda out: (mg_digits(out, size, mp, num_shards), None)
  elif case == "folder20k":
    root = synthetic_folder()

    def nascli_run(p):
      def fn(out):
        _, stats = convert("imagefolder", out, ConvertOptions(source=root),
                           ShardingOptions(processes=p, num_shards=num_shards, overwrite=True))
        return stats["records_written"], stats
      return fn

    def mg_run(mp):
      return lambda out: (mg_folder(out, root, mp, num_shards), None)
  else:
    raise SystemExit(f"unknown case {case!r}; known: {', '.join(CASES)}")
  return [("nascli p=1", "nascli", 1, nascli_run(1)),
          ("nascli p=2", "nascli", 2, nascli_run(2)),
          ("mg mp=0", "mg", 0, mg_run(0)),
          ("mg mp=1", "mg", 1, mg_run(1)),
          ("mg mp=2", "mg", 2, mg_run(2))]


def _out_dir(case: str, label: str) -> Path:
  return OUT_ROOT / case / label.replace(" ", "_").replace("=", "")


def _cpu_snapshot() -> tuple[float, float]:
  """(CPU seconds the whole machine was busy, CPU seconds of this process and reaped children)."""
  return host.machine_busy(), sum(os.times()[:4])


def wait_idle(timeout: float) -> float:
  """Waits (up to timeout seconds) until other processes use under 0.2 CPU; returns the wait."""
  start = time.perf_counter()
  while True:
    load = host.foreign_load(0.5)
    waited = time.perf_counter() - start
    if load < 0.2 or waited >= timeout:
      if load >= 0.2:
        print(f"  WARNING: machine still busy ({load:.1f} CPUs used by others) after"
              f" {waited:.0f}s; running anyway", flush=True)
      return waited
    time.sleep(2.0)


def _timed(fn, out: Path) -> tuple[float, int, dict | None, float]:
  """Wall seconds, records and nascli stats of one run, and the CPU seconds used by others."""
  if out.exists():
    shutil.rmtree(out)
  out.mkdir(parents=True)
  busy0, own0 = _cpu_snapshot()
  start = time.perf_counter()
  records, stats = fn(out)
  wall = time.perf_counter() - start
  busy1, own1 = _cpu_snapshot()
  # CPU time spent by processes that are not this benchmark (another job on the machine would
  # slow the multi-process runs most); jiffy resolution, so only large values mean anything.
  foreign = max(0.0, (busy1 - busy0) - (own1 - own0))
  return wall, records, stats, foreign


def _content_digest(out: Path) -> tuple[int, str, list[str]]:
  """Order-independent digest of what was written: (records, sha256, sorted feature keys)."""
  rows = []
  keys = set()
  for path in sorted(out.glob("*.tfrecord")):
    for raw in tf.data.TFRecordDataset(str(path)):
      f = tf.train.Example.FromString(raw.numpy()).features.feature
      keys.update(f.keys())
      rows.append("|".join([
          path.name.split("-")[0],
          hashlib.sha256(f["image/encoded"].bytes_list.value[0]).hexdigest(),
          f["image/format"].bytes_list.value[0].decode(),
          str(f["image/class/label"].int64_list.value[0]),
          str(f["image/height"].int64_list.value[0]), str(f["image/width"].int64_list.value[0]),
          f["image/source_id"].bytes_list.value[0].decode(),
          f["image/filename"].bytes_list.value[0].decode()]))
  rows.sort()
  return len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest(), sorted(keys)


def run_case(case: str, repeats: int, num_shards: int, warmup: int,
             idle_timeout: float) -> dict:
  runners = contenders(case, num_shards)
  for label, _, _, fn in runners:
    for _ in range(warmup):
      _timed(fn, _out_dir(case, label))
  runs = {label: [] for label, *_ in runners}
  for rep in range(repeats):
    for label, _, _, fn in runners:
      wait_idle(idle_timeout)
      wall, records, stats, foreign = _timed(fn, _out_dir(case, label))
      runs[label].append({"wall_s": wall, "records": records, "foreign_cpu_s": foreign,
                          "nascli_seconds": stats["seconds"] if stats else None})
      extra = f"  (nascli stats: {stats['seconds']:.3f}s)" if stats else ""
      if foreign > max(0.05, 0.1 * wall):
        extra += f"  WARNING: other processes used {foreign:.2f} CPU-s during this run"
      print(f"  {case} run {rep + 1}/{repeats} {label:<11} {wall:7.3f}s {records} records{extra}",
            flush=True)
  # Every contender must have written the same records (same image bytes, labels, ids, splits).
  digests = {label: _content_digest(_out_dir(case, label)) for label, *_ in runners}
  reference = digests[runners[0][0]]
  same = all(d[:2] == reference[:2] for d in digests.values())
  results = {}
  for label, tool, processes, _ in runners:
    rs = runs[label]
    records = rs[0]["records"]
    wall = statistics.median(r["wall_s"] for r in rs)
    entry = {"tool": tool, "processes": processes, "records": records,
             "wall_s_median": round(wall, 4), "images_per_second": round(records / wall, 1),
             "wall_s_runs": [round(r["wall_s"], 4) for r in rs],
             "foreign_cpu_s_runs": [round(r["foreign_cpu_s"], 2) for r in rs]}
    if tool == "nascli":
      own = statistics.median(r["nascli_seconds"] for r in rs)
      entry.update({"nascli_seconds_median": own,
                    "nascli_images_per_second": round(records / own, 1) if own else None,
                    "nascli_seconds_runs": [r["nascli_seconds"] for r in rs]})
    results[label] = entry

  def ips(label):
    return results[label]["images_per_second"]

  ratios = {
      "nascli p2/p1": round(ips("nascli p=2") / ips("nascli p=1"), 3),
      "nascli p2/p1 (stats seconds)": round(
          results["nascli p=2"]["nascli_images_per_second"]
          / results["nascli p=1"]["nascli_images_per_second"], 3),
      "mg mp2/mp0": round(ips("mg mp=2") / ips("mg mp=0"), 3),
      "nascli p1 / mg mp0": round(ips("nascli p=1") / ips("mg mp=0"), 3),
      "nascli p1 / mg mp1": round(ips("nascli p=1") / ips("mg mp=1"), 3),
      "nascli p2 / mg mp2": round(ips("nascli p=2") / ips("mg mp=2"), 3),
  }
  targets = {
      f"nascli p2/p1 >= {TARGET_SCALING}": ratios["nascli p2/p1"] >= TARGET_SCALING,
      "nascli p1 >= mg mp0": ratios["nascli p1 / mg mp0"] >= TARGET_VS_MG,
      "nascli p2 >= mg mp2": ratios["nascli p2 / mg mp2"] >= TARGET_VS_MG,
  }
  return {"results": results, "ratios": ratios, "targets_met": targets,
          "same_records": same,
          "content": {label: {"records": d[0], "sha256": d[1], "feature_keys": d[2]}
                      for label, d in digests.items()}}


# ---------------------------------------------------------------------------------- reporting

def print_table(report: dict) -> None:
  print()
  print("wall = median wall clock of the whole conversion call (images/s and ratios use it);"
        " stats = nascli's own stats['seconds'] (encode+write only)")
  print(f"{'case':<10} {'contender':<11} {'records':>7} {'wall s':>8} {'min-max wall':>13}"
        f" {'img/s':>9} {'stats s':>8} {'img/s (stats)':>13}")
  for case, res in report["cases"].items():
    for label, r in res["results"].items():
      own = (f"{r['nascli_seconds_median']:>8.3f} {r['nascli_images_per_second']:>13.1f}"
             if r["tool"] == "nascli" else f"{'-':>8} {'-':>13}")
      spread = f"{min(r['wall_s_runs']):.3f}-{max(r['wall_s_runs']):.3f}"
      print(f"{case:<10} {label:<11} {r['records']:>7} {r['wall_s_median']:>8.3f} {spread:>13}"
            f" {r['images_per_second']:>9.1f} {own}")
    print("           ratios (wall): " + ", ".join(f"{k} {v:.2f}" for k, v in res["ratios"].items()))
    print("           targets: " + ", ".join(f"{k}: {'met' if v else 'MISSED'}"
                                             for k, v in res["targets_met"].items())
          + f"; same records across contenders: {res['same_records']}")


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--cases", default=",".join(CASES),
                      help=f"comma-separated, from {', '.join(CASES)} (default: all)")
  parser.add_argument("--repeats", type=int, default=3, help="timed runs per contender (median)")
  parser.add_argument("--warmup", type=int, default=1, help="untimed runs per contender")
  parser.add_argument("--num_shards", "--num-shards", type=int, default=8,
                      help="shards per split, the same for every contender")
  parser.add_argument("--idle_timeout", "--idle-timeout", type=float, default=300.0,
                      help="before each timed run, wait up to this long for other processes to"
                      " go quiet (each run also records the CPU others used during it)")
  parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "convert.json",
                      help="JSON report (default: bench/results/convert.json)")
  args = parser.parse_args()
  cases = [c.strip() for c in args.cases.split(",") if c.strip()]
  for case in cases:
    if case not in CASES:
      parser.error(f"unknown case {case!r}; known: {', '.join(CASES)}")
  report = {"benchmark": "convert-data throughput",
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join([sys.executable, *sys.argv]),
            "machine": {**host.machine(("tensorflow", "opencv-python-headless", "pillow", "numpy")),
                        "stderr_is_tty": sys.stderr.isatty()},
            "settings": {"repeats": args.repeats, "warmup": args.warmup,
                         "num_shards_per_split": args.num_shards, "idle_timeout_s": args.idle_timeout,
                         "folder20k": {"classes": FOLDER_CLASSES, "per_class": FOLDER_PER_CLASS,
                                       "size": f"{FOLDER_SIZE}x{FOLDER_SIZE}",
                                       "jpeg_quality": FOLDER_JPEG_QUALITY, "seed": FOLDER_SEED},
                         "mg_png_encoder": "cv2.imencode('.png') defaults",
                         "timing": "wall clock of the whole conversion call, in-process"},
            "cases": {}}
  if "folder20k" in cases:
    root = synthetic_folder()
    report["settings"]["folder20k"].update({"path": str(root), "bytes": _folder_bytes(root)})
  for case in cases:
    print(f"== {case}", flush=True)
    report["cases"][case] = run_case(case, args.repeats, args.num_shards, args.warmup,
                                     args.idle_timeout)
  print_table(report)
  benchlib.write_json(report, args.out)


if __name__ == "__main__":
  main()
