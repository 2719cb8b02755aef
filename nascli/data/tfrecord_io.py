"""TFRecord files written without the TensorFlow runtime, hashed while they are written.

The format is TensorFlow's: per record a little-endian uint64 length, the masked CRC32C of those
8 bytes, the data, and the masked CRC32C of the data. Writing it in Python lets forked worker
processes write shards without touching TensorFlow, and gives the file's sha256 without reading
it back.
"""

import hashlib
import os
import struct
from pathlib import Path

import google_crc32c

_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
  crc = google_crc32c.value(data)
  return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
  """One record in TFRecord framing."""
  header = struct.pack("<Q", len(data))
  return b"".join((header, struct.pack("<I", masked_crc32c(header)), data,
                   struct.pack("<I", masked_crc32c(data))))


class TFRecordFileWriter:
  """Writes records to `path`; `close()` flushes and fsyncs, then `sha256` and `size` are final."""

  def __init__(self, path: str | Path):
    self._file = open(path, "wb")  # pylint: disable=consider-using-with
    self._hash = hashlib.sha256()
    self.size = 0
    self.num_records = 0

  def write(self, data: bytes) -> None:
    framed = frame(data)
    self._file.write(framed)
    self._hash.update(framed)
    self.size += len(framed)
    self.num_records += 1

  @property
  def sha256(self) -> str:
    return self._hash.hexdigest()

  def close(self) -> None:
    if self._file.closed:
      return
    self._file.flush()
    os.fsync(self._file.fileno())
    self._file.close()

  def abort(self) -> None:
    self._file.close()

  def __enter__(self) -> "TFRecordFileWriter":
    return self

  def __exit__(self, exc_type, *exc) -> None:
    if exc_type is None:
      self.close()
    else:
      self.abort()
