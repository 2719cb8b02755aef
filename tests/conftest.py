"""Shared test helpers: run conversions in-process and read back what they wrote."""

import glob
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


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
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
  return subprocess.run([sys.executable, "-m", "nascli", *map(str, args)], capture_output=True,
                        text=True, env=full_env, check=False, **kwargs)


@pytest.fixture
def cli(capsys):
  """Runs nascli's main() in-process; returns (exit_code, stdout, stderr)."""
  from nascli.app import main  # pylint: disable=g-import-not-at-top

  def _run(*args):
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err

  return _run
