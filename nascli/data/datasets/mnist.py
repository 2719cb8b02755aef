"""`mnist`: the four official IDX files (LeCun et al.), from a local folder or downloaded.

Train is the 60,000-image train set; the official 10,000-image t10k ("test") set becomes
"validation". Headers are parsed and checked rather than skipped blindly, so a wrong or cut file
stops the conversion with its name instead of producing shifted images.
"""

import gzip
import hashlib
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from nascli.data import download, images, reasons
from nascli.data.source import ClassInfo, ConvertOptions, Record, Source, register_source
from nascli.errors import InputError, NascliError

BASE_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
# (file stem, md5 of the official .gz), in the order their checksums enter source_info's sha256.
FILES = (
    ("train-images-idx3-ubyte", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
    ("train-labels-idx1-ubyte", "d53e105ee54ea40749a09fcbcd1e9432"),
    ("t10k-images-idx3-ubyte", "9fb629c4189551a2d022fa330f9573f3"),
    ("t10k-labels-idx1-ubyte", "ec29112dd5afa0611ce80d1b7f02629c"),
)
# Our split name -> (images stem, labels stem, the official split name).
SPLITS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "train"),
    "validation": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", "test"),
}
# FastNN's labels.txt said "size" for six; the typo is not kept.
CLASS_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
IMAGES_MAGIC = 2051  # 0x00000803: unsigned bytes, 3 dimensions.
LABELS_MAGIC = 2049  # 0x00000801: unsigned bytes, 1 dimension.
_GZIP_MAGIC = b"\x1f\x8b"


def _read_idx(path: Path, magic: int) -> np.ndarray:
  """The uint8 array stored in an IDX file (gzip or plain), after checking its header and size."""
  try:
    data = path.read_bytes()
  except OSError as e:
    raise InputError(f"cannot read MNIST file {path}: {e.strerror or e}") from None
  if data[:2] == _GZIP_MAGIC:
    try:
      data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
      reason = reasons.reason(e)
      raise InputError(f"truncated or corrupt gzip file {path}: {reason}") from None
  ndim = 3 if magic == IMAGES_MAGIC else 1
  header_size = 4 + 4 * ndim
  if len(data) < header_size:
    raise InputError(f"MNIST file {path} is too short for an IDX header ({len(data)} bytes)")
  (found,) = struct.unpack(">i", data[:4])
  if found != magic:
    kind = "images" if magic == IMAGES_MAGIC else "labels"
    raise InputError(f"MNIST file {path} has IDX magic number {found}, expected {magic} for"
                     f" {kind}")
  dims = struct.unpack(f">{ndim}I", data[4:header_size])
  if ndim == 3 and (dims[1] == 0 or dims[2] == 0):
    raise InputError(f"MNIST file {path} declares {dims[1]}x{dims[2]} images")
  expected = header_size + int(np.prod(dims, dtype=np.int64))
  if len(data) != expected:
    raise InputError(f"MNIST file {path} holds {len(data)} bytes, its header {dims} needs"
                     f" {expected}")
  return np.frombuffer(data, np.uint8, offset=header_size).reshape(dims)


def _file_sha256(path: Path) -> str:
  return download.file_digest(path, "sha256")


@register_source("mnist")
class MnistSource(Source):
  """28x28 grey digits; pixels are decoded once in prepare() and shared with forked workers."""

  reads = frozenset({"source", "channels"})

  @classmethod
  def check_options(cls, options: ConvertOptions) -> None:
    if options.channels not in (None, 1, 3):
      raise NascliError(f"--channels must be 1 or 3 for mnist, got {options.channels}")

  def prepare(self) -> None:
    self.channels = self.options.channels or 1
    if self.channels not in (1, 3):
      raise NascliError(f"--channels must be 1 or 3 for mnist, got {self.channels}")
    self._paths = self._resolve()
    self._images: dict[str, np.ndarray] = {}
    self._labels: dict[str, np.ndarray] = {}
    for split, (images_stem, labels_stem, _) in SPLITS.items():
      images_path, labels_path = self._paths[images_stem], self._paths[labels_stem]
      pixels = _read_idx(images_path, IMAGES_MAGIC)
      labels = _read_idx(labels_path, LABELS_MAGIC)
      if len(pixels) != len(labels):
        raise InputError(f"MNIST file {images_path} holds {len(pixels)} images but"
                         f" {labels_path} holds {len(labels)} labels")
      bad = np.flatnonzero(labels >= len(CLASS_NAMES))
      if bad.size:
        raise InputError(f"MNIST file {labels_path} has label {labels[bad[0]]} at index"
                         f" {bad[0]}; labels are 0..{len(CLASS_NAMES) - 1}")
      self._images[split] = pixels
      self._labels[split] = labels
    self._sha256 = {stem: _file_sha256(self._paths[stem]) for stem, _ in FILES}

  def _resolve(self) -> dict[str, Path]:
    """The path of each official file: in --source (gzipped or not), or downloaded."""
    source = self.options.source
    if source is None:
      return {stem: download.fetch(BASE_URL + f"{stem}.gz", self.options.download_dir,
                                   f"{stem}.gz", md5=md5, progress=self.options.progress)
              for stem, md5 in FILES}
    source = Path(source)
    if not source.is_dir():
      what = "does not exist" if not source.exists() else "is not a folder"
      raise InputError(f"MNIST --source {source} {what}; give the folder holding"
                       f" {FILES[0][0]}.gz and the three other IDX files")
    paths = {}
    for stem, _ in FILES:
      for name in (f"{stem}.gz", stem):
        if (source / name).is_file():
          paths[stem] = source / name
          break
      else:
        raise InputError(f"MNIST file {stem}.gz (or {stem}) not found in {source}")
    return paths

  def source_info(self) -> dict[str, Any]:
    combined = hashlib.sha256("".join(self._sha256[stem] for stem, _ in FILES).encode())
    info: dict[str, Any] = {"kind": "download" if self.options.source is None else "folder"}
    if self.options.source is None:
      info["url"] = BASE_URL
    info["path"] = str(Path(self.options.source if self.options.source is not None
                            else self.options.download_dir))
    info.update({
        "sha256": combined.hexdigest(),
        "checksum_of": "sha256 of each file, in order " + ", ".join(
            self._paths[stem].name for stem, _ in FILES),
        "files": {self._paths[stem].name: self._sha256[stem] for stem, _ in FILES},
        "original_splits": {split: original for split, (_, _, original) in SPLITS.items()},
    })
    return info

  def classes(self) -> list[ClassInfo]:
    return [ClassInfo(i, name) for i, name in enumerate(CLASS_NAMES)]

  def split_sizes(self) -> dict[str, int]:
    return {split: len(labels) for split, labels in self._labels.items()}

  def settings(self) -> dict[str, Any]:
    return {"channels": self.channels}

  def estimated_bytes(self, split: str) -> int:
    _, rows, cols = self._images[split].shape
    return len(self._labels[split]) * rows * cols * self.channels // 3

  def item_name(self, split: str, index: int) -> str:
    return f"{self._paths[SPLITS[split][0]].name}[{index}]"

  def pixels(self, split: str, index: int) -> np.ndarray:
    """The image as stored: [28,28,channels] uint8, grey replicated for 3 channels."""
    image = self._images[split][index][:, :, None]
    return np.repeat(image, 3, axis=2) if self.channels == 3 else image

  def record(self, split: str, index: int) -> Record:
    image = self.pixels(split, index)
    original = SPLITS[split][2]
    return Record(
        encoded=images.encode_png(image), format="png", height=image.shape[0],
        width=image.shape[1], label=int(self._labels[split][index]),
        source_id=f"{split}_{index}", filename=f"mnist_{original}_{index:05d}.png")
