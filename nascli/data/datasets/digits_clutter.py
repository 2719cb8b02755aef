"""`digits_clutter`: the embedded digits made hard enough that architectures differ.

On the plain digits (centred, clean, upscaled 8x8 scans) most mnasnet architectures reach 97-99%
within minutes and differ by a few validation images, about what retraining one changes
(BENCHMARKS.md, the proxy study and the recorded curves), so a search there ranks seeds. Here
each scan is drawn several times (`VARIANTS`) onto a noisy coloured background, scaled,
rotated and moved at random, in a random colour, beside fragments of other digits as clutter:
a model must find the digit and tell it from the strokes around it, which takes receptive field
and capacity. Train, validation and test are split by *scan* (stratified by digit) before any
drawing, so no scan appears on two sides. Every image is a pure function of (seed, split, index), so conversion in
parallel processes writes the same bytes.
"""

import dataclasses
from typing import Any

import cv2
import numpy as np

from nascli.data.datasets import digits
from nascli.data.source import Record
from nascli.data.source import register_source
from nascli.errors import NascliError

VARIANTS = 3  # drawings of each scan
_SPLIT_CODES = {"train": 1, "validation": 2, "test": 3}
_FRAGMENTS = 1  # clutter pieces per image
_FRAGMENT_ALPHA = 0.5  # how opaque a clutter piece is
_SCALE = (0.6, 0.9)  # the digit's side, as a fraction of the image's
_ANGLE = 20.0  # the digit turns by up to this many degrees either way
_NOISE = 10.0  # std of the pixel noise, in levels
_CONTRAST = 110.0  # least mean difference between a colour and the background


@register_source("digits_clutter")
class DigitsClutterSource(digits.DigitsSource):
  """The 1,797 scikit-learn digit scans, each drawn 3 times at random scale, angle, place and
  colour on a noisy background with fragments of other digits; needs no network."""

  def prepare(self) -> None:
    super().prepare()
    self._scans = self._splits  # split -> scan indices
    self._splits = {name: [scan for scan in scans for _ in range(VARIANTS)]
                    for name, scans in self._scans.items()}

  def source_info(self) -> dict[str, Any]:
    return {**super().source_info(), "generator": "digits_clutter", "variants": VARIANTS}

  def split_origins(self) -> dict[str, str]:
    return {split: f"{origin}; each scan drawn {VARIANTS} times"
            for split, origin in super().split_origins().items()}

  def settings(self) -> dict[str, Any]:
    return {**super().settings(), "variants": VARIANTS, "fragments": _FRAGMENTS}

  def item_name(self, split: str, index: int) -> str:
    return f"digits_clutter[{split}:{index}, scan {self._splits[split][index]}]"

  def record(self, split: str, index: int) -> Record:
    # One file name per drawing (the scan's own would repeat); source_id stays the scan's.
    return dataclasses.replace(super().record(split, index),
                               filename=f"digits_clutter_{split}_{index:05d}.png")

  def pixels(self, split: str, index: int) -> np.ndarray:
    size = self.image_size
    rng = np.random.default_rng([self.options.seed, _SPLIT_CODES[split], index])
    scan = self._pixels[self._splits[split][index]].astype(np.float32) / 255.0
    base = rng.uniform(0, 140, 3).astype(np.float32)
    image = np.empty((size, size, 3), np.float32)
    image[:] = base
    # A smooth tint across the image, then pixel noise.
    ramp = np.linspace(-1.0, 1.0, size, dtype=np.float32)
    image += (rng.uniform(-25, 25, 3)[None, None, :]
              * ramp[:, None, None] * rng.choice([-1.0, 1.0]))
    same_side = self._scans[split]
    for _ in range(_FRAGMENTS):
      other = self._pixels[same_side[rng.integers(len(same_side))]].astype(np.float32) / 255.0
      y, x = rng.integers(0, 5, 2)
      piece = cv2.resize(other[y:y + 4, x:x + 4], (size // 2, size // 2),
                         interpolation=cv2.INTER_LINEAR)
      _paint(image, piece, rng.integers(0, size - size // 2 + 1, 2), _colour(rng, base),
             alpha=_FRAGMENT_ALPHA)
    scale = int(round(size * rng.uniform(*_SCALE)))
    digit = cv2.resize(scan, (scale, scale), interpolation=cv2.INTER_LINEAR)
    turn = cv2.getRotationMatrix2D((scale / 2, scale / 2), float(rng.uniform(-_ANGLE, _ANGLE)), 1.0)
    digit = cv2.warpAffine(digit, turn, (scale, scale), flags=cv2.INTER_LINEAR)
    _paint(image, digit, rng.integers(0, size - scale + 1, 2), _colour(rng, base), alpha=1.0)
    image += rng.normal(0, _NOISE, image.shape).astype(np.float32)
    out = np.clip(np.round(image), 0, 255).astype(np.uint8)
    if self.channels == 1:
      return cv2.cvtColor(out, cv2.COLOR_RGB2GRAY)[:, :, None]
    return out

  @classmethod
  def check_options(cls, options) -> None:
    super().check_options(options)
    if options.image_size is not None and options.image_size < 16:
      raise NascliError(f"--image_size {options.image_size}: digits_clutter draws at 16 pixels"
                        " or more")


def _colour(rng: np.random.Generator, background: np.ndarray) -> np.ndarray:
  """A colour that stands out from the background by at least `_CONTRAST` levels on average."""
  colour = rng.uniform(0, 255, 3)
  if np.abs(colour - background).mean() < _CONTRAST:
    colour = np.where(background < 128, rng.uniform(170, 255, 3), rng.uniform(0, 60, 3))
  return colour.astype(np.float32)


def _paint(image: np.ndarray, mask: np.ndarray, at: np.ndarray, colour: np.ndarray,
           alpha: float) -> None:
  """Blends `colour` into `image` where `mask` (0..1) has ink, its top-left corner at `at`."""
  y, x = int(at[0]), int(at[1])
  h, w = mask.shape
  weight = (alpha * np.clip(mask, 0.0, 1.0))[:, :, None]
  region = image[y:y + h, x:x + w]
  region[:] = region * (1 - weight) + colour[None, None, :] * weight

