"""`digits`: the 8x8 handwritten digits that ship inside scikit-learn, the embedded default."""

import gzip
import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from nascli.data import images, splits
from nascli.data.source import ClassInfo, ConvertOptions, Record, Source, register_source
from nascli.errors import NascliError

DEFAULT_IMAGE_SIZE = 32
DEFAULT_CHANNELS = 3
DEFAULT_VALIDATION_FRACTION = 0.2
DEFAULT_TEST_FRACTION = 0.2
# Where scikit-learn keeps the digits, and how load_digits() parses them.
_CSV = Path("datasets", "data", "digits.csv.gz")


def load_digits() -> tuple[np.ndarray, np.ndarray, str]:
  """(images [1797, 8, 8] float64 ink levels 0..16, labels, scikit-learn's version).

  The same arrays as `sklearn.datasets.load_digits()`, read from the file it reads without
  importing scikit-learn, which brings scipy and pandas along (seconds of start-up).
  """
  spec = importlib.util.find_spec("sklearn")  # finds the package without running it
  if spec is None or not spec.submodule_search_locations:
    raise NascliError("the digits data set ships inside scikit-learn: pip install scikit-learn")
  version = importlib.metadata.version("scikit-learn")
  for folder in spec.submodule_search_locations:
    path = Path(folder) / _CSV
    if path.is_file():
      with gzip.open(path, mode="rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
      return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int), version
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  data = datasets.load_digits()  # a scikit-learn that moved the file
  return data.images, data.target, version


@register_source("digits")
class DigitsSource(Source):
  """1,797 real scanned digits (UCI), upscaled so image models can use them; needs no network."""

  reads = frozenset({"image_size", "channels", "seed", "validation_fraction", "validation_size",
                     "test_fraction", "test_size"})

  @classmethod
  def check_options(cls, options: ConvertOptions) -> None:
    if options.image_size is not None and options.image_size < 8:
      raise NascliError(f"--image_size {options.image_size} is smaller than the 8x8 source digits")
    if options.channels not in (None, 1, 3):
      raise NascliError(f"--channels must be 1 or 3, got {options.channels}")
    splits.check_fractions(options)

  def prepare(self) -> None:
    ink, labels, self._sklearn_version = load_digits()
    # 0..16 ink levels -> 0..255.
    self._pixels = np.round(ink * (255.0 / 16.0)).astype(np.uint8)
    self._labels = labels.astype(np.int64)
    self.image_size = self.options.image_size or DEFAULT_IMAGE_SIZE
    self.channels = self.options.channels or DEFAULT_CHANNELS
    if self.image_size < 8:
      raise NascliError(f"--image_size {self.image_size} is smaller than the 8x8 source digits")
    if self.channels not in (1, 3):
      raise NascliError(f"--channels must be 1 or 3, got {self.channels}")
    n = len(self._labels)
    o = self.options
    sizes = {splits.TEST: splits.held_out_count(n, o.test_fraction, o.test_size,
                                                DEFAULT_TEST_FRACTION, splits.TEST),
             splits.VALIDATION: splits.held_out_count(n, o.validation_fraction, o.validation_size,
                                                      DEFAULT_VALIDATION_FRACTION)}
    parts = splits.stratified_split(self._labels, sizes, o.seed)
    self._splits = {name: parts[name] for name in (splits.TRAIN, splits.VALIDATION, splits.TEST)}

  def source_info(self) -> dict[str, Any]:
    digest = hashlib.sha256(self._pixels.tobytes() + self._labels.tobytes()).hexdigest()
    return {"kind": "embedded", "package": "scikit-learn", "version": self._sklearn_version,
            "loader": "sklearn.datasets.load_digits", "sha256": digest}

  def classes(self) -> list[ClassInfo]:
    return [ClassInfo(i, str(i)) for i in range(10)]

  def split_sizes(self) -> dict[str, int]:
    return {k: len(v) for k, v in self._splits.items()}

  def split_origins(self) -> dict[str, str]:
    return {splits.TRAIN: "the scans not held out",
            **splits.carved(splits.HELD_OUT, self.options.seed, "stratified by class",
                            of="the 1,797 scans")}

  def settings(self) -> dict[str, Any]:
    return {"image_size": self.image_size, "channels": self.channels, "seed": self.options.seed,
            **{f"{part}_{what}": getattr(self.options, f"{part}_{what}")
               for part in splits.HELD_OUT for what in ("fraction", "size")}}

  def estimated_bytes(self, split: str) -> int:
    return len(self._splits[split]) * self.image_size ** 2 * self.channels // 4

  def item_name(self, split: str, index: int) -> str:
    return f"digits[{self._splits[split][index]}]"

  def pixels(self, split: str, index: int) -> np.ndarray:
    """The image as stored: upscaled, [H,W,channels] uint8."""
    image = cv2.resize(self._pixels[self._splits[split][index]],
                       (self.image_size, self.image_size), interpolation=cv2.INTER_LINEAR)
    return cv2.cvtColor(image, cv2.COLOR_GRAY2RGB) if self.channels == 3 else image[:, :, None]

  def record(self, split: str, index: int) -> Record:
    original = self._splits[split][index]
    return Record(
        encoded=images.encode_png(self.pixels(split, index)), format="png",
        height=self.image_size, width=self.image_size, label=int(self._labels[original]),
        source_id=str(original), filename=f"digits_{original:04d}.png")
