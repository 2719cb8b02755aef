"""Shared test helpers: run conversions in-process and read back what they wrote."""

import glob
import json
import os
import re
import socket
import struct
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _cache_bytecode_outside_the_tree() -> None:
  """Lets this process and every process the suite starts reuse compiled bytecode.

  With PYTHONDONTWRITEBYTECODE set (as on the 2-core CI machine) and a venv installed without
  compiled bytecode (uv's default), every interpreter compiles TensorFlow, Keras and Model
  Garden from source: about 10 s of CPU per process that imports them, and the suite starts
  hundreds (each CLI subprocess, warm worker, Ray worker). Bytecode then goes to a cache of its
  own (PYTHONPYCACHEPREFIX), never beside the sources, so the checkout and the venv stay as
  they are. A prefix already set is kept; where bytecode may be written, nothing changes.
  """
  if not (sys.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE")):
    return
  prefix = os.environ.get("PYTHONPYCACHEPREFIX") or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nascli-tests",
      "pycache")
  try:
    os.makedirs(prefix, exist_ok=True)
  except OSError:
    return
  os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
  os.environ["PYTHONPYCACHEPREFIX"] = prefix
  sys.pycache_prefix = prefix
  sys.dont_write_bytecode = False


_cache_bytecode_outside_the_tree()

import nascli  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS before a test module imports TensorFlow)

import numpy as np  # noqa: E402
import pytest  # noqa: E402


# The modules that take longest, longest first (seconds a module took in a full run on the
# 2-core CI machine, `pytest --durations=0`): xdist hands whole modules (--dist loadfile) to
# its workers in collection order (--no-loadscope-reorder), so the long ones start first and
# the short ones fill in at the end, rather than one worker finishing a 100 s module alone.
# A module left out runs after all of these, in file name order: add any that takes a minute
# or more (test_ray_cluster.py, 240 s, was left out and started among the last).
# The first seven: a 2-worker run with the bytecode cache (see above), while a third CPU-bound
# job shared the 2 cores; the rest: the full run before that cache, or one core where noted.
LONGEST_FIRST = (
    "test_search_local.py",  # 465
    "test_train_run.py",  # 370
    "test_proxy_end_to_end.py",  # 315
    "test_ray_cluster.py",  # 210
    "test_gcs_search.py",  # 190
    "test_search_ray.py",  # 160
    "test_train_interrupt.py",  # 140
    "test_stage2.py",  # 150
    "test_train_distributed.py",  # 150
    "test_build_latency_model.py",  # 100 on one core with the bytecode cache (175 before)
    "test_rungs_equal_one_go.py",  # 115 on one core with the bytecode cache
    "test_launchers.py",  # 130
    "test_thor_train.py",  # 100
    "test_asha_promotions.py",  # 100
    "test_latency_constraint.py",  # 100 on one core with the bytecode cache
    "test_thor_optimizer.py",  # 75
    "test_search_resume.py",  # 75
    "test_latency_calculator.py",  # 70
    "test_backbone_fingerprints.py",  # 70 on a loaded machine
    "test_mnasnet_backbone.py",  # 65
    "test_runtime.py",  # 60
    "test_gcs_data.py",  # 60
    "test_search_controller.py",  # 55
    "test_export_lib.py",  # 50
    "test_latency_main.py",  # 45
    "test_executor_failures.py",  # 45
    "test_tunable_backbones.py",  # 40
)


def pytest_collection_modifyitems(config, items):
  del config
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: same order within


def read_examples(pattern: str | Path) -> list[dict]:
  """Every record of the shards matching `pattern`, in shard then record order, as plain dicts."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  out = []
  for path in sorted(glob.glob(str(pattern))):
    for raw in tf.data.TFRecordDataset(path):
      ex = tf.train.Example.FromString(raw.numpy())
      rec = {}
      for key, feat in ex.features.feature.items():
        kind = feat.WhichOneof("kind")
        rec[key] = list(getattr(feat, kind).value)
      out.append(rec)
  return out


def png_size(path) -> tuple[int, int]:
  """(width, height) of a PNG file, after checking it is one (its signature and IHDR chunk)."""
  with open(path, "rb") as f:
    head = f.read(24)
  assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
  return struct.unpack(">II", head[16:24])


def decode_image(encoded: bytes, channels: int = 0) -> np.ndarray:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.io.decode_image(encoded, channels=channels, expand_animations=False).numpy()


@pytest.fixture
def run_convert(tmp_path):
  """Calls the conversion engine; returns (dataset_info, stats, output_dir)."""
  from nascli.data.convert import ShardingOptions, convert  # pylint: disable=g-import-not-at-top
  from nascli.data.source import ConvertOptions  # pylint: disable=g-import-not-at-top

  def _run(name, output_dir=None, processes=1, num_shards=None, num_workers=1,
           drop_remainder=False, overwrite=False, **options):
    output_dir = Path(output_dir or tmp_path / f"out_{name}")
    options.setdefault("download_dir", tmp_path / "downloads")
    options.setdefault("progress", False)
    info, stats = convert(
        name, output_dir, ConvertOptions(**options),
        ShardingOptions(num_shards=num_shards, num_workers=num_workers,
                        drop_remainder=drop_remainder, processes=processes, overwrite=overwrite))
    return info, stats, output_dir

  return _run


def nascli_subprocess(*args, env=None, **kwargs):
  """Runs `python -m nascli ARGS` as a user would; returns the CompletedProcess (text mode)."""
  full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
  return subprocess.run([sys.executable, "-m", "nascli", *map(str, args)], capture_output=True,
                        text=True, env=full_env, check=False, **kwargs)


# Runs nascli.app.main on each argv in one fresh interpreter (the CLI's own imports take a
# second; TensorFlow's 15-40 s would show as "tensorflow" in sys.modules).
_RUNNER = r"""
import contextlib, io, json, sys
from nascli.app import main
for args in json.loads(sys.argv[1]):
  err = io.StringIO()
  with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    code = main(args)
  print(json.dumps([code, err.getvalue(), "tensorflow" in sys.modules]), flush=True)
"""


def main_in_fresh_interpreter(argvs, env=None, cwd=None, timeout=300):
  """[(exit code, stderr, whether TensorFlow was imported)] per argv, from one interpreter."""
  proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps([list(map(str, a))
                                                                   for a in argvs])],
                        capture_output=True, text=True, check=False, timeout=timeout, cwd=cwd,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {})))
  assert proc.returncode == 0, proc.stderr[-2000:]
  results = [tuple(json.loads(line)) for line in proc.stdout.splitlines()]
  assert len(results) == len(argvs), proc.stdout
  return results


def retrain_best_trial(job, rows, cache, model_dir, env=None):
  """Stage 2 on a search job: `train` retrains the best of `rows` (the search's result rows),
  warm-started from its search checkpoint, for 10 steps. Returns (its trial id, the process)."""
  best = max(rows, key=lambda r: r["reward"])["trial_id"]
  return best, nascli_subprocess(
      "train", "--search_job_dir", job, "--train_nas_trial_numbers", best,
      "--retrain_use_search_job_checkpoint", "--model_dir", model_dir,
      "--dataset_dir", os.path.join(cache, "data", "digits-image_size32-format2"), "--config_file",
      "tf_vision/test_files/fast_nas_classification_search_for_testing.yaml",
      "--params_override", "trainer.train_steps=10,trainer.steps_per_loop=5", "--json",
      env=env)


def restore_tensorflow_scopes() -> bool:
  """Leaves this thread's TensorFlow scopes as a fresh process has them; True if any was left.

  A SIGINT raised as KeyboardInterrupt between two bytecodes of `strategy.scope()`'s __enter__
  or __exit__ leaves the scope half entered: a CLI process then exits, but a test process goes
  on, and every later in-process run fails ("Mixing different tf.distribute.Strategy objects",
  "Caching devices is not yet supported"). Tests that interrupt a command in this process call
  this afterwards.
  """
  # pylint: disable=g-import-not-at-top,protected-access
  from tensorflow.python.eager import context
  from tensorflow.python.framework import ops
  from tensorflow.python.ops import variable_scope
  graph = ops.get_default_graph()
  ctx = context.context()
  left = bool(getattr(graph, "_distribution_strategy_stack", None)
              or graph._variable_creator_stack or ctx.device_name)
  graph._distribution_strategy_stack = []
  graph._variable_creator_stack = []
  ctx._set_device("", context._starting_device_spec)
  del ops.get_collection_ref(variable_scope._VARSCOPESTORE_KEY)[:]
  return left


@pytest.fixture
def cli(capsys):
  """Runs nascli's main() in-process; returns (exit_code, stdout, stderr)."""
  from nascli.app import main  # pylint: disable=g-import-not-at-top

  def _run(*args):
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err

  return _run


def journal_events(job_dir):
  with open(os.path.join(job_dir, "journal.jsonl"), encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]


# What a finished trial folder holds (an event file's name blanked: it differs per run) when its
# trial trained 20 steps with a checkpoint every 10 and the search exported it at the end. One
# list for the local, gs:// and Ray jobs: a trial folder is the same wherever its job dir is.
FINISHED_TRIAL_FILES = sorted([
    "checkpoint", "ckpt-10.data-00000-of-00001", "ckpt-10.index", "ckpt-20.data-00000-of-00001",
    "ckpt-20.index", "export/checkpoint/checkpoint", "export/checkpoint/ckpt-1.data-00000-of-00001",
    "export/checkpoint/ckpt-1.index", "export/params.yaml", "export/saved_model/fingerprint.pb",
    "export/saved_model/saved_model.pb",
    "export/saved_model/variables/variables.data-00000-of-00001",
    "export/saved_model/variables/variables.index", "job_status.json", "log",
    "model_analysis.json", "nas_params_str.json", "nascli_run.json", "params.yaml",
    "train/events.out.tfevents.*", "train_metrics.jsonl", "trial.log", "trial_spec.json",
    "validation/events.out.tfevents.*"])


def trial_files(names) -> list[str]:
  """The kinds of files of a trial folder, from names relative to it, as FINISHED_TRIAL_FILES
  lists them (a resumed trial has an event file per run: one kind)."""
  return sorted({re.sub(r"events\.out\.tfevents\..*", "events.out.tfevents.*", n) for n in names})


def controller_proposals(algorithm, seed, count=3, space="mnasnet"):
  """The first proposals of a fresh controller in this process, as a driver makes them (a
  driver's proposals are compared with these: tests/test_search_local.py)."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import controller
  from tf_vision import search_spaces
  ctl = controller.Controller.rebuild(search_spaces.get_search_space(space), algorithm, seed, [])
  dnas = []
  for _ in range(count):
    dna, _ = ctl.propose_new(dnas)
    dnas.append(list(dna))
  return dnas


def convert_digits32(out, num_shards: int, num_workers: int = 1) -> str:
  """The embedded digits at 32x32 as shards in `out` (in-process, one process)."""
  from nascli.data.convert import ShardingOptions, convert  # pylint: disable=g-import-not-at-top
  from nascli.data.source import ConvertOptions  # pylint: disable=g-import-not-at-top
  convert("digits", out, ConvertOptions(image_size=32, progress=False),
          ShardingOptions(num_shards=num_shards, num_workers=num_workers, processes=1))
  return str(out)


def free_ports(count: int) -> list[int]:
  """Ports free on 127.0.0.1 now (for a TF_CONFIG cluster of local workers)."""
  socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
  try:
    for s in socks:
      s.bind(("127.0.0.1", 0))
    return [s.getsockname()[1] for s in socks]
  finally:
    for s in socks:
      s.close()


def checkpoint_variables(prefix) -> dict[str, np.ndarray]:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  reader = tf.train.load_checkpoint(str(prefix))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def assert_same_variables(a: dict, b: dict) -> None:
  assert sorted(a) == sorted(b)
  assert len([n for n in a if "/kernel/" in n]) >= 10, sorted(a)  # the whole ResNet, not a stub
  for name in a:
    np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory):
  """A GCS emulator (fake-gcs-server) for the session, with STORAGE_EMULATOR_HOST set for the
  tests and their subprocesses and the bucket `gcs_emulator.BUCKET` created.
  `gcs_emulator.tf_env()` is the extra environment under which TensorFlow's own gs:// reader
  reaches it too (see tests/gcs_emulator.py).

  If it cannot start, the tests that use it fail (never skip): gs:// support is not optional.
  """
  import gcs_emulator as emu  # pylint: disable=g-import-not-at-top
  workdir = tmp_path_factory.mktemp("gcs_emulator")
  try:
    emulator = emu.Emulator(free_ports(1)[0], workdir)
    emulator.start()
    emulator.create_bucket(emu.BUCKET)
  except ImportError as e:
    pytest.fail(f"GCS emulator missing ({e}): install the test extra (pip install -e '.[test]')",
                pytrace=False)
  except Exception as e:  # pylint: disable=broad-except
    pytest.fail(f"GCS emulator did not start: {e}", pytrace=False)
  emulator.bucket = emu.BUCKET
  with pytest.MonkeyPatch.context() as mp:
    mp.setenv("STORAGE_EMULATOR_HOST", emulator.url)
    try:
      yield emulator
    finally:
      emulator.stop()


@pytest.fixture
def gcs_prefix(gcs_emulator, request):
  """A fresh `gs://BUCKET/<test name>-<random>` URL on the emulator, empty, for one test."""
  name = "".join(c if c.isalnum() or c in "-_" else "_" for c in request.node.name)[:60]
  return f"gs://{gcs_emulator.bucket}/{name}-{os.urandom(4).hex()}"
