"""`shapes`: the synthetic detection set of `nascli.data.shapes`, the offline detection default.

The images are a pure function of the settings, so the checksum in dataset_info.json is the
checksum of the settings: two conversions with the same settings write identical shards.

Every image is `render_sample(seed, g)` for a global index g: train takes 0..n-1 (`--num_samples`),
validation the next ones, test the ones after, so no image is in two splits. The held-out splits
are rendered beside the training images (not carved from them): `--validation_fraction` /
`--validation_size` and `--test_fraction` / `--test_size` size them relative to `--num_samples`
(default 20% each).
"""

import hashlib
import json
from typing import Any

import numpy as np

from nascli.data import images, shapes, splits
from nascli.data.source import (DETECTION, ClassInfo, ConvertOptions, Record, Source,
                                register_source)
from nascli.errors import NascliError

DEFAULT_NUM_SAMPLES = 512
DEFAULT_IMAGE_SIZE = 128
DEFAULT_VALIDATION_FRACTION = 0.2
DEFAULT_TEST_FRACTION = 0.2
MAX_OBJECTS = 4
# Bump when nascli.data.shapes renders different pixels or labels for the same settings, so that
# a re-run never reuses shards of the old renderer.
GENERATOR_VERSION = "nascli.data.shapes/1"


@register_source("shapes")
class ShapesSource(Source):
  """Rendered rectangles, ellipses and triangles; train, validation and test never share an
  image."""

  task = DETECTION
  reads = frozenset({"image_size", "channels", "num_samples", "seed", "validation_fraction",
                     "validation_size", "test_fraction", "test_size"})

  @classmethod
  def check_options(cls, options: ConvertOptions) -> None:
    cls(options).prepare()  # cheap: settings and one rendered image

  def prepare(self) -> None:
    opts = self.options
    self.num_train = DEFAULT_NUM_SAMPLES if opts.num_samples is None else opts.num_samples
    if self.num_train < 1:
      raise NascliError(f"--num_samples must be at least 1, got {self.num_train}")
    # Rendered beside the training images, so sized against --num_samples, not carved from it.
    self.num_validation, self.num_test = (
        splits.held_out_count(self.num_train, getattr(opts, f"{part}_fraction"),
                              getattr(opts, f"{part}_size"), default, part, beside=True)
        for part, default in ((splits.VALIDATION, DEFAULT_VALIDATION_FRACTION),
                              (splits.TEST, DEFAULT_TEST_FRACTION)))
    self.image_size = DEFAULT_IMAGE_SIZE if opts.image_size is None else opts.image_size
    if opts.channels not in (None, 3):
      raise NascliError(f"--channels {opts.channels}: shapes images are RGB (3 channels)")
    try:  # The generator owns the size rules; render one image to apply them before any worker.
      shapes.render_sample(opts.seed, 0, self.image_size, MAX_OBJECTS)
    except ValueError as e:
      raise NascliError(f"--image_size {self.image_size}: {e}") from None
    # Global indices: train 0..n_train-1, validation after them, test after validation, so no
    # image is in two splits (train and validation keep the indices they had before test).
    self._offsets = {splits.TRAIN: 0, splits.VALIDATION: self.num_train,
                     splits.TEST: self.num_train + self.num_validation}

  def settings(self) -> dict[str, Any]:
    return {"generator_version": GENERATOR_VERSION, "seed": self.options.seed,
            "num_samples": self.num_train, "num_validation": self.num_validation,
            "num_test": self.num_test, "image_size": self.image_size,
            "max_objects": MAX_OBJECTS}

  def source_info(self) -> dict[str, Any]:
    canonical = json.dumps(self.settings(), sort_keys=True, separators=(",", ":"))
    return {"kind": "synthetic", "generator": "nascli.data.shapes.render_sample",
            "version": GENERATOR_VERSION, "checksum_of": "settings",
            "sha256": hashlib.sha256(canonical.encode()).hexdigest()}

  def classes(self) -> list[ClassInfo]:
    return [ClassInfo(i + 1, name) for i, name in enumerate(shapes.CLASS_NAMES)]

  def split_sizes(self) -> dict[str, int]:
    return {splits.TRAIN: self.num_train, splits.VALIDATION: self.num_validation,
            splits.TEST: self.num_test}

  def split_origins(self) -> dict[str, str]:
    def rendered(split: str) -> str:
      first = self._offsets[split]
      last = first + self.split_sizes()[split] - 1
      return (f"rendered by nascli.data.shapes.render_sample, seed {self.options.seed}, images"
              f" {first}..{last} (no other split renders them)")
    return {split: rendered(split) for split in (splits.TRAIN, *splits.HELD_OUT)}

  def estimated_bytes(self, split: str) -> int:
    # Noisy textures compress poorly: about 80% of the raw RGB bytes as PNG.
    return self.split_sizes()[split] * self.image_size ** 2 * 3 * 4 // 5

  def global_index(self, split: str, index: int) -> int:
    return self._offsets[split] + index

  def item_name(self, split: str, index: int) -> str:
    return f"shapes[{self.global_index(split, index)}]"

  def record(self, split: str, index: int) -> Record:
    g = self.global_index(split, index)
    sample = shapes.render_sample(self.options.seed, g, self.image_size, MAX_OBJECTS)
    return Record(
        encoded=images.encode_png(sample.image), format="png", height=self.image_size,
        width=self.image_size, source_id=str(g), filename=f"shapes_{g:06d}.png",
        boxes=sample.boxes, classes=sample.classes, areas=sample.areas,
        is_crowd=np.zeros(len(sample.classes), np.int64))
