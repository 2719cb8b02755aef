"""The contract between a data set and the shard writer, and the registry of data sets.

A Source is built in the parent process (it resolves, downloads and indexes its data there) and is
inherited by forked worker processes, which call `record()` (and `check()`) for item positions.
"""

import abc
import dataclasses
import difflib
from pathlib import Path
from typing import Any, Callable

import numpy as np

from nascli.errors import InputError, NascliError

_SOURCES: dict[str, type["Source"]] = {}

CLASSIFICATION = "classification"
DETECTION = "detection"


def register_source(name: str) -> Callable[[type["Source"]], type["Source"]]:
  """Registers a Source class under the data set name users type on the command line."""

  def decorator(cls: type["Source"]) -> type["Source"]:
    if name in _SOURCES:
      raise KeyError(f"data set {name!r} registered twice")
    cls.name = name
    _SOURCES[name] = cls
    return cls

  return decorator


def known_sources() -> list[str]:
  return sorted(_SOURCES)


def registered() -> dict[str, type["Source"]]:
  """The data sets registered so far (nascli.data.datasets registers the built-in ones)."""
  return dict(_SOURCES)


def lookup_source(name: str) -> type["Source"]:
  if name not in _SOURCES:
    close = difflib.get_close_matches(name.lower(), known_sources(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise NascliError(f"unknown data set {name!r}{hint}; known: {', '.join(known_sources())}")
  return _SOURCES[name]


@dataclasses.dataclass
class ConvertOptions:
  """Everything `convert-data` was asked; each source reads the fields that concern it."""
  source: Path | None = None
  validation_source: Path | None = None
  test_source: Path | None = None
  download_dir: Path = Path.home() / ".cache" / "nascli" / "downloads"
  work_dir: Path | None = None  # scratch space for extraction, inside the output folder
  seed: int = 0
  validation_fraction: float | None = None
  validation_size: int | None = None
  test_fraction: float | None = None
  test_size: int | None = None
  image_size: int | None = None
  channels: int | None = None
  num_samples: int | None = None
  label_map: Path | None = None
  image_dir: Path | None = None  # coco: the images of a lone annotation JSON
  skip_corrupt: bool = False
  progress: bool = True


# ConvertOptions fields a user sets with a flag of the same name, and the flag.
OPTION_FLAGS = {
    "source": "--source", "validation_source": "--validation_source", "seed": "--seed",
    "validation_fraction": "--validation_fraction", "validation_size": "--validation_size",
    "test_source": "--test_source", "test_fraction": "--test_fraction",
    "test_size": "--test_size",
    "image_size": "--image_size", "channels": "--channels", "num_samples": "--num_samples",
    "label_map": "--label_map", "image_dir": "--image_dir",
}


@dataclasses.dataclass
class ClassInfo:
  id: int
  name: str


@dataclasses.dataclass
class Record:
  """One image and its annotations, ready to become a tf.train.Example."""
  encoded: bytes
  format: str  # "png" or "jpeg"
  height: int
  width: int
  source_id: str
  filename: str
  label: int | None = None  # classification
  # Detection: normalized boxes (ymin, xmin, ymax, xmax), class ids, pixel areas, crowd flags.
  boxes: np.ndarray | None = None
  classes: np.ndarray | None = None
  areas: np.ndarray | None = None
  is_crowd: np.ndarray | None = None


class CorruptItemError(InputError):
  """An item that cannot be decoded; --skip_corrupt skips it, otherwise it stops the conversion.

  `item` names the file (or the archive member), `reason` says what is wrong with it in a few
  words; neither holds an object's repr.
  """

  def __init__(self, item: str, reason: str):
    super().__init__(self._message(item, reason))
    self.item = item
    self.reason = reason

  @staticmethod
  def _message(item: str, reason: str) -> str:
    return f"corrupt image {item}: {reason} (pass --skip_corrupt to skip it)"

  def named(self, item: str) -> "CorruptItemError":
    """The same error naming the item as the engine's messages do."""
    return type(self)(item, self.reason)

  def __reduce__(self):
    return type(self), (self.item, self.reason)


class MissingItemError(CorruptItemError):
  """An item whose file is not there (an annotation file naming an image that does not exist)."""

  def __init__(self, item: str, reason: str = "missing file"):
    super().__init__(item, reason)

  @staticmethod
  def _message(item: str, reason: str) -> str:
    return f"missing image file {item} (pass --skip_corrupt to skip it)"


class Source(abc.ABC):
  """A data set: named splits of items in a fixed order, and how to turn an item into a Record."""

  name: str = ""
  task: str = CLASSIFICATION
  # True when items can be corrupt and must be checked before shards are planned.
  needs_check: bool = False
  # The ConvertOptions fields (OPTION_FLAGS) this data set reads; a flag it would ignore is
  # refused rather than silently doing nothing.
  reads: frozenset[str] = frozenset()

  @classmethod
  def check_options(cls, options: ConvertOptions) -> None:
    """Refuses option values this data set cannot use, before anything is read or imported.

    Runs in the parent before prepare(); it must stay cheap (no data read, no TensorFlow).
    """

  def __init__(self, options: ConvertOptions):
    self.options = options
    # Filled by the engine after the check pass, before the writing workers are forked.
    self.checked: dict[str, dict[int, Any]] = {}

  @abc.abstractmethod
  def prepare(self) -> None:
    """Resolves, downloads, extracts and indexes the data (parent process, before any worker)."""

  @abc.abstractmethod
  def source_info(self) -> dict[str, Any]:
    """Where the data came from: kind, path or URL, checksum (goes into dataset_info.json)."""

  @abc.abstractmethod
  def classes(self) -> list[ClassInfo]:
    """Class ids and names, in id order."""

  @abc.abstractmethod
  def split_sizes(self) -> dict[str, int]:
    """Number of items of each split: {"train": 45000, "validation": 5000, "test": 10000}."""

  @abc.abstractmethod
  def split_origins(self) -> dict[str, str]:
    """Where each split's items come from, in a phrase ("the official test set (test_batch)",
    "carved from the training items: stratified by class, seed 0"); goes into dataset_info.json
    so that a reader knows which split is untouched by the search (nascli.data.splits)."""

  @abc.abstractmethod
  def record(self, split: str, index: int) -> Record:
    """Encodes item `index` of `split` (runs in worker processes)."""

  def item_name(self, split: str, index: int) -> str:
    """A human name for an item in messages and reports (a file path where there is one)."""
    return f"{split}[{index}]"

  def check(self, split: str, index: int) -> Any:
    """Raises CorruptItemError when the item cannot be decoded (runs in worker processes).

    What it returns (e.g. the image's size and format) is kept by the engine and handed back to
    `record()` through `checked_probe()`, so an item is decoded once, not twice.
    """

  def checked_probe(self, split: str, index: int) -> Any:
    """What `check()` returned for this item in the check pass, or None."""
    return self.checked.get(split, {}).get(index)

  def estimated_bytes(self, split: str) -> int:
    """Rough encoded size of a split, used to pick a default shard count."""
    return 0

  def settings(self) -> dict[str, Any]:
    """Options that change the output bytes; a re-run with other settings must not reuse shards."""
    return {}
