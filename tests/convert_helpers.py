"""Test helpers for `convert-data`: archives to convert, the records a conversion wrote read
back, and the check that a refused one left nothing behind."""

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from conftest import decode_image, read_examples


def make_tgz(path: Path, files: dict[str, bytes]) -> Path:
  """A .tar.gz at `path` holding `files` (member name -> content)."""
  with tarfile.open(path, "w:gz") as tf:
    for name, data in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tf.addfile(info, io.BytesIO(data))
  return path


def records(out: Path, split: str) -> dict[str, dict]:
  """source_id -> example, of every record of a split (each source_id once)."""
  by_id = {}
  for ex in read_examples(out / f"{split}-*.tfrecord"):
    source_id = ex["image/source_id"][0].decode()
    assert source_id not in by_id
    by_id[source_id] = ex
  return by_id


def pixel_digests(by_id: dict[str, dict]) -> set[str]:
  """sha256 of the decoded pixels of each record."""
  return {hashlib.sha256(decode_image(ex["image/encoded"][0]).tobytes()).hexdigest()
          for ex in by_id.values()}


def shard_digests(info: dict) -> list[tuple[str, str]]:
  return [(s["file"], s["sha256"]) for split in info["splits"].values() for s in split["shards"]]


def assert_failed_cleanly(out: Path) -> None:
  assert not (out / "dataset_info.json").exists()
  assert not list(out.glob("*.tfrecord"))


def refusal(run_convert, error: type[Exception], name: str, source, out: Path) -> str:
  """The message of the `error` converting `name` from `source` into `out` raises: one line,
  and `out` left without shards or dataset_info.json."""
  with pytest.raises(error) as e:
    run_convert(name, output_dir=out, source=source)
  message = str(e.value)
  assert "\n" not in message
  assert_failed_cleanly(out)
  return message
