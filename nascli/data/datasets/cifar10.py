"""`cifar10`: the official CIFAR-10 archive (python pickles or binary records), local or downloaded.

The official test_batch becomes `test` (read only by `nascli eval`); `validation`, on which the
search scores trials, is carved from the official training set (data_batch_1..5 in order),
stratified by class with --seed (default 10%, --validation_fraction / --validation_size), and
`train` is the rest of it. Members are read in memory straight from the tar (no extraction),
pickles only through the restricted unpickler of `safe_pickle`, and both formats decode to the
same arrays, so they give identical shards.
"""

import dataclasses
import hashlib
import posixpath
from pathlib import Path
from typing import Any, Callable

import numpy as np

from nascli.data import archives, download, images, safe_pickle, splits
from nascli.data.source import ClassInfo, ConvertOptions, Record, Source, register_source
from nascli.errors import InputError

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
ARCHIVE_NAME = "cifar-10-python.tar.gz"
MD5 = "c58f30108f718f92721af3b95e74349a"
NUM_TRAIN_BATCHES = 5
# Bytes of an average CIFAR PNG, for the default shard count.
_PNG_BYTES = 2600
# Share of the 50,000 training images held out as validation: 5,000 (500 a class), the 45k/5k
# split common in NAS papers; half the official test set's size.
DEFAULT_VALIDATION_FRACTION = 0.1


@dataclasses.dataclass(frozen=True)
class _Format:
  """The file names and readers of one of the two official CIFAR-10 layouts."""
  name: str
  folder: str
  train: tuple[str, ...]
  test: str
  meta: str
  load_batch: Callable[[bytes, str], tuple[np.ndarray, np.ndarray, list[str]]]
  load_meta: Callable[[bytes, str], list[str]]

  @property
  def files(self) -> tuple[str, ...]:
    return (*self.train, self.test, self.meta)


PYTHON = _Format(
    name="python", folder="cifar-10-batches-py",
    train=tuple(f"data_batch_{i}" for i in range(1, NUM_TRAIN_BATCHES + 1)),
    test="test_batch", meta="batches.meta", load_batch=safe_pickle.load_cifar_batch,
    load_meta=safe_pickle.load_cifar_meta)
BINARY = _Format(
    name="binary", folder="cifar-10-batches-bin",
    train=tuple(f"data_batch_{i}.bin" for i in range(1, NUM_TRAIN_BATCHES + 1)),
    test="test_batch.bin", meta="batches.meta.txt",
    load_batch=safe_pickle.load_cifar_binary_batch,
    load_meta=lambda data, where: safe_pickle.parse_cifar_binary_meta(data, where))
FORMATS = (PYTHON, BINARY)
# Our split name -> the official set its items come from.
ORIGINAL_SPLITS = {splits.TRAIN: "train", splits.VALIDATION: "train", splits.TEST: "test"}
def _format_of(basename: str) -> _Format | None:
  for fmt in FORMATS:
    if basename in fmt.files:
      return fmt
  return None


def _listing_sha256(root: Path, folder: Path) -> str:
  """sha256 over the sorted `relative path, size` lines of every file under folder."""
  lines = sorted(f"{p.relative_to(root).as_posix()}\t{p.stat().st_size}\n"
                 for p in folder.rglob("*") if p.is_file())
  return hashlib.sha256("".join(lines).encode()).hexdigest()


@dataclasses.dataclass
class _Batch:
  """One decoded batch file and where it came from (for messages)."""
  where: str
  images: np.ndarray
  labels: np.ndarray
  filenames: list[str]
  stem: str = ""  # data_batch_3, test_batch: the same in both formats (names and ids)


@register_source("cifar10")
class Cifar10Source(Source):
  """60,000 32x32 colour images in 10 classes; pixels stay in memory for the forked workers."""

  reads = frozenset({"source", "seed", "validation_fraction", "validation_size"})

  @classmethod
  def check_options(cls, options: ConvertOptions) -> None:
    splits.check_official_test(options, "cifar10", PYTHON.test)

  def prepare(self) -> None:
    self.check_options(self.options)
    source = self.options.source
    if source is None:
      self._path = download.fetch(URL, self.options.download_dir, ARCHIVE_NAME, md5=MD5,
                                  progress=self.options.progress)
      self._kind = "download"
    else:
      self._path = Path(source)
      if not self._path.exists():
        raise InputError(f"CIFAR-10 --source {self._path} does not exist; give"
                         f" {ARCHIVE_NAME}, cifar-10-binary.tar.gz or an extracted folder")
      self._kind = "folder" if self._path.is_dir() else "archive"
    if self._kind == "folder":
      self._format, batches, self._sha256 = self._read_folder(self._path)
    else:
      self._format, batches = self._read_archive(self._path)
      self._sha256 = download.file_digest(self._path, "sha256")
    self._assemble(batches)
    # validation carved from the official training set, stratified by class; train the rest;
    # test the official test set: (official set, positions in it) each.
    self._splits = splits.official_test_splits(self._labels["train"], len(self._labels["test"]),
                                               self.options, DEFAULT_VALIDATION_FRACTION)

  # ----- reading

  def _read_archive(self, archive: Path) -> tuple[_Format, dict[str, _Batch | list[str]]]:
    """Decodes the batch and meta members of a tar in memory; the format comes from the names."""
    decoded: dict[str, _Batch | list[str]] = {}
    members: dict[str, str] = {}  # basename -> full member name
    formats: dict[str, str] = {}  # format name -> a member of that format
    for member, data in archives.iter_tar_members(
        archive, lambda name: _format_of(posixpath.basename(name)) is not None):
      base = posixpath.basename(member)
      if base in members:
        raise InputError(f"CIFAR-10 archive {archive} holds two members named {base}:"
                         f" {members[base]} and {member}")
      fmt = _format_of(base)
      formats.setdefault(fmt.name, member)
      if len(formats) > 1:
        raise InputError(f"CIFAR-10 archive {archive} mixes python and binary batches"
                         f" ({formats['python']}, {formats['binary']})")
      members[base] = member
      where = f"{archive}:{member}"
      decoded[base] = (fmt.load_meta(data, where) if base == fmt.meta
                       else _Batch(where, *fmt.load_batch(data, where)))
    if not formats:
      raise InputError(f"{archive} is not a CIFAR-10 archive: it has no {PYTHON.train[0]} or"
                       f" {BINARY.train[0]} member")
    fmt = PYTHON if "python" in formats else BINARY
    prefix = posixpath.dirname(next(iter(members.values())))
    for base in fmt.files:
      if base not in decoded:
        missing = posixpath.join(prefix, base) if prefix else base
        raise InputError(f"CIFAR-10 archive {archive} has no member {missing}")
    return fmt, decoded

  def _read_folder(self, root: Path) -> tuple[_Format, dict[str, _Batch | list[str]], str]:
    """Decodes an extracted archive: root itself or its cifar-10-batches-{py,bin} sub-folder."""
    found = []
    for folder in (root, root / PYTHON.folder, root / BINARY.folder):
      for fmt in FORMATS:
        if folder.is_dir() and any((folder / name).is_file() for name in fmt.files):
          found.append((folder, fmt))
    if not found:
      raise InputError(f"no CIFAR-10 batches in folder {root}: expected {PYTHON.folder}/ or"
                       f" {BINARY.folder}/ (or their {PYTHON.train[0]} /"
                       f" {BINARY.train[0]} files)")
    if len(found) > 1:
      where = ", ".join(f"{fmt.name} in {folder}" for folder, fmt in found)
      raise InputError(f"folder {root} holds more than one set of CIFAR-10 batches ({where});"
                       " point --source at one of them")
    folder, fmt = found[0]
    decoded: dict[str, _Batch | list[str]] = {}
    for base in fmt.files:
      path = folder / base
      if not path.is_file():
        raise InputError(f"CIFAR-10 folder {folder} has no file {base}")
      try:
        data = path.read_bytes()
      except OSError as e:
        raise InputError(f"cannot read CIFAR-10 file {path}: {e.strerror or e}") from None
      decoded[base] = (fmt.load_meta(data, str(path)) if base == fmt.meta
                       else _Batch(str(path), *fmt.load_batch(data, str(path))))
    return fmt, decoded, _listing_sha256(root, folder)

  def _assemble(self, decoded: dict[str, Any]) -> None:
    """Joins the official train batches in order and keeps both official sets' arrays (by
    official name, "train" and "test") for the workers."""
    fmt = self._format
    names = decoded[fmt.meta]
    if len(names) != safe_pickle.NUM_CLASSES:
      raise InputError(f"CIFAR-10 class list {fmt.meta} in {self._path} has {len(names)} names,"
                       f" expected {safe_pickle.NUM_CLASSES}")
    self._class_names = names
    self._images: dict[str, np.ndarray] = {}
    self._labels: dict[str, np.ndarray] = {}
    self._filenames: dict[str, list[str | None]] = {}
    # Per official set: (first index, batch location, batch stem) of each batch, for item names.
    self._origins: dict[str, list[tuple[int, str, str]]] = {}
    for official, files in (("train", fmt.train), ("test", (fmt.test,))):
      batches = [decoded[base] for base in files]
      for base, batch in zip(files, batches):
        batch.stem = base.removesuffix(".bin")
      self._images[official] = np.concatenate([b.images for b in batches])
      self._labels[official] = np.concatenate([b.labels for b in batches])
      self._filenames[official] = [
          name for b in batches for name in (b.filenames or [None] * len(b.labels))]
      starts = np.cumsum([0] + [len(b.labels) for b in batches[:-1]])
      self._origins[official] = [(int(s), b.where, b.stem) for s, b in zip(starts, batches)]

  def _locate(self, split: str, index: int) -> tuple[str, int, str, str, int]:
    """(official set, position in it, batch location, batch stem, index in the batch)."""
    official, positions = self._splits[split]
    position = int(positions[index])
    start, where, stem = next(o for o in reversed(self._origins[official]) if o[0] <= position)
    return official, position, where, stem, position - start

  # ----- the Source contract

  def source_info(self) -> dict[str, Any]:
    info: dict[str, Any] = {"kind": self._kind}
    if self._kind == "download":
      info.update({"url": URL, "md5": MD5})
    info.update({"path": str(self._path), "format": self._format.name, "sha256": self._sha256})
    if self._kind == "folder":
      info["checksum_of"] = "listing"
    info["original_splits"] = dict(ORIGINAL_SPLITS)
    return info

  def classes(self) -> list[ClassInfo]:
    return [ClassInfo(i, name) for i, name in enumerate(self._class_names)]

  def split_sizes(self) -> dict[str, int]:
    return {split: len(positions) for split, (_, positions) in self._splits.items()}

  def split_origins(self) -> dict[str, str]:
    return splits.official_test_origins(f"the official training set ({self._batch_range()})",
                                        self._origins["test"][0][2], self.options.seed)

  def _batch_range(self) -> str:
    stems = [stem for _, _, stem in self._origins["train"]]
    return f"{stems[0]}..{stems[-1].rsplit('_', 1)[-1]}"

  def settings(self) -> dict[str, Any]:
    o = self.options
    return {"seed": o.seed, "validation_fraction": o.validation_fraction,
            "validation_size": o.validation_size}

  def estimated_bytes(self, split: str) -> int:
    return len(self._splits[split][1]) * _PNG_BYTES

  def item_name(self, split: str, index: int) -> str:
    _, _, where, _, in_batch = self._locate(split, index)
    return f"{where}[{in_batch}]"

  def pixels(self, split: str, index: int) -> np.ndarray:
    """The image as stored: [32,32,3] uint8 RGB."""
    official, positions = self._splits[split]
    return self._images[official][positions[index]]

  def record(self, split: str, index: int) -> Record:
    """source_id names the official batch and the index in it (data_batch_3_17, test_batch_4),
    as does the filename where the pickles carry none."""
    official, position, _, stem, in_batch = self._locate(split, index)
    image = self._images[official][position]
    filename = self._filenames[official][position] or f"cifar10_{stem}_{in_batch:05d}.png"
    return Record(
        encoded=images.encode_png(image), format="png", height=image.shape[0],
        width=image.shape[1], label=int(self._labels[official][position]),
        source_id=f"{stem}_{in_batch}", filename=filename)
