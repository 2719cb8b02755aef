"""`mnist`: the four official IDX files (LeCun et al.), from a local folder or downloaded.

The official 10,000-image t10k set becomes `test` (read only by `nascli eval`); `validation`, on
which the search scores trials, is carved from the official 60,000-image training set, stratified
by class with --seed (default 10%, --validation_fraction / --validation_size), and `train` is the
rest of it. Headers are parsed and checked rather than skipped blindly, so a wrong or cut file
stops the conversion with its name instead of producing shifted images.
"""

import gzip
import hashlib
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from nascli.data import download, images, reasons, splits
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
# The official sets: name -> (images stem, labels stem).
OFFICIAL_SETS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# Our split name -> the official set its items come from.
ORIGINAL_SPLITS = {splits.TRAIN: "train", splits.VALIDATION: "train", splits.TEST: "test"}
# Share of the 60,000 training images held out as validation: 6,000, about one official test
# set's size, the 54k/6k split common for MNIST.
DEFAULT_VALIDATION_FRACTION = 0.1
# The options that would hold out a test split: MNIST's is the official t10k set.
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

  reads = frozenset({"source", "channels", "seed", "validation_fraction", "validation_size"})

  @classmethod
  def check_options(cls, options: ConvertOptions) -> None:
    if options.channels not in (None, 1, 3):
      raise NascliError(f"--channels must be 1 or 3 for mnist, got {options.channels}")
    splits.check_official_test(options, "mnist", OFFICIAL_SETS["test"][0])

  def prepare(self) -> None:
    self.check_options(self.options)
    self.channels = self.options.channels or 1
    self._paths = self._resolve()
    # By official set ("train", "test").
    self._images: dict[str, np.ndarray] = {}
    self._labels: dict[str, np.ndarray] = {}
    for official, (images_stem, labels_stem) in OFFICIAL_SETS.items():
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
      self._images[official] = pixels
      self._labels[official] = labels
    self._sha256 = {stem: _file_sha256(self._paths[stem]) for stem, _ in FILES}
    # validation carved from the official training set, stratified by class; train the rest;
    # test the official test set: (official set, positions in it) each.
    self._splits = splits.official_test_splits(self._labels["train"], len(self._labels["test"]),
                                               self.options, DEFAULT_VALIDATION_FRACTION)

  def _locate(self, split: str, index: int) -> tuple[str, int]:
    """(official set, position in it) of item `index` of `split`."""
    official, positions = self._splits[split]
    return official, int(positions[index])

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
        "original_splits": dict(ORIGINAL_SPLITS),
    })
    return info

  def classes(self) -> list[ClassInfo]:
    return [ClassInfo(i, name) for i, name in enumerate(CLASS_NAMES)]

  def split_sizes(self) -> dict[str, int]:
    return {split: len(positions) for split, (_, positions) in self._splits.items()}

  def split_origins(self) -> dict[str, str]:
    return splits.official_test_origins(
        f"the official training set ({OFFICIAL_SETS['train'][0]})", OFFICIAL_SETS["test"][0],
        self.options.seed)

  def settings(self) -> dict[str, Any]:
    o = self.options
    return {"channels": self.channels, "seed": o.seed,
            "validation_fraction": o.validation_fraction, "validation_size": o.validation_size}

  def estimated_bytes(self, split: str) -> int:
    official, positions = self._splits[split]
    _, rows, cols = self._images[official].shape
    return len(positions) * rows * cols * self.channels // 3

  def item_name(self, split: str, index: int) -> str:
    official, position = self._locate(split, index)
    return f"{self._paths[OFFICIAL_SETS[official][0]].name}[{position}]"

  def pixels(self, split: str, index: int) -> np.ndarray:
    """The image as stored: [28,28,channels] uint8, grey replicated for 3 channels."""
    official, position = self._locate(split, index)
    image = self._images[official][position][:, :, None]
    return np.repeat(image, 3, axis=2) if self.channels == 3 else image

  def record(self, split: str, index: int) -> Record:
    """source_id and filename name the official set and the position in it (mnist_train_17:
    item 17 of train-images-idx3-ubyte, whichever split it went to)."""
    official, position = self._locate(split, index)
    image = self.pixels(split, index)
    return Record(
        encoded=images.encode_png(image), format="png", height=image.shape[0],
        width=image.shape[1], label=int(self._labels[official][position]),
        source_id=f"mnist_{official}_{position}", filename=f"mnist_{official}_{position:05d}.png")
