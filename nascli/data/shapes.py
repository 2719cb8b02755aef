"""Deterministic synthetic object-detection data set ("shapes").

Offline detection work and RetinaNet/SpineNet training tests need data that
needs no download, renders the same on every machine, and is learnable (the
classes differ by shape) without being trivial (textured backgrounds, varied
colours and sizes, partial occlusion).

Class ids follow the Model Garden/COCO convention: 0 is background and the
shape classes are 1..len(CLASS_NAMES). Boxes are (ymin, xmin, ymax, xmax)
normalized to [0, 1] and tight to each object's *visible* pixels.
"""

import colorsys
import dataclasses
from typing import NamedTuple

import cv2
import numpy as np

CLASS_NAMES = ("rectangle", "ellipse", "triangle")

MIN_IMAGE_SIZE = 32
# Object extent as a fraction of the image side.
MIN_OBJECT_FRACTION = 0.12
MAX_OBJECT_FRACTION = 0.45
# Each earlier object must keep this share of its drawn pixels once later
# objects are drawn on top, so that every labelled box shows its shape.
MIN_VISIBLE_FRACTION = 0.3
# Placement tries per object before it is dropped.
_MAX_ATTEMPTS = 20
# Colour candidates per object; the one that contrasts most is kept.
_COLOUR_CANDIDATES = 6


@dataclasses.dataclass(frozen=True)
class ShapesSample:
  """One rendered image with its detection labels.

  Attributes:
    image: uint8 [H, W, 3] RGB.
    boxes: float32 [K, 4] (ymin, xmin, ymax, xmax) normalized to [0, 1].
    classes: int64 [K] class ids in 1..len(CLASS_NAMES).
    areas: float32 [K] visible object area in pixels.
  """
  image: np.ndarray
  boxes: np.ndarray
  classes: np.ndarray
  areas: np.ndarray


class RenderedShapes(NamedTuple):
  """A sample plus the masks its labels were derived from (for checks)."""
  sample: ShapesSample
  visible_masks: np.ndarray  # bool [K, H, W], after occlusion.
  drawn_masks: np.ndarray  # bool [K, H, W], each shape as drawn.


def render_sample(seed: int,
                  index: int,
                  image_size: int = 128,
                  max_objects: int = 4) -> ShapesSample:
  """Renders sample `index` of the data set `seed`; same inputs, same bytes."""
  return render_sample_with_masks(seed, index, image_size, max_objects).sample


def render_sample_with_masks(seed: int,
                             index: int,
                             image_size: int = 128,
                             max_objects: int = 4) -> RenderedShapes:
  """Like render_sample, also returning masks so labels can be verified."""
  if image_size < MIN_IMAGE_SIZE:
    raise ValueError(
        f"image_size must be >= {MIN_IMAGE_SIZE}, got {image_size}")
  if max_objects < 1:
    raise ValueError(f"max_objects must be >= 1, got {max_objects}")
  rng = np.random.default_rng([seed, index])
  size = image_size

  background = _background(rng, size)
  canvas = background.copy()
  num_objects = int(rng.integers(1, max_objects + 1))
  classes: list[int] = []
  drawn: list[np.ndarray] = []
  visible: list[np.ndarray] = []
  colours: list[np.ndarray] = []
  for _ in range(num_objects):
    for _ in range(_MAX_ATTEMPTS):
      class_id = int(rng.integers(1, len(CLASS_NAMES) + 1))
      mask = _draw_shape(rng, class_id, size)
      if not mask.any():
        continue
      # Later objects are drawn on top: earlier ones lose the overlap.
      if all((v & ~mask).sum() >= MIN_VISIBLE_FRACTION * d.sum()
             for v, d in zip(visible, drawn)):
        break
    else:
      continue  # Could not place it without hiding too much: drop it.
    colour = _contrasting_colour(rng, mask, background, visible, colours)
    for v in visible:
      v &= ~mask
    classes.append(class_id)
    drawn.append(mask)
    visible.append(mask.copy())
    colours.append(colour)
    canvas[mask] = colour

  noise_sigma = rng.uniform(2.0, 6.0)
  canvas += rng.normal(0.0, noise_sigma, size=canvas.shape)
  image = np.clip(np.rint(canvas), 0, 255).astype(np.uint8)

  visible_masks = np.asarray(visible, dtype=bool).reshape(-1, size, size)
  drawn_masks = np.asarray(drawn, dtype=bool).reshape(-1, size, size)
  boxes = np.asarray([_tight_box(m) for m in visible_masks],
                     dtype=np.float32).reshape(-1, 4)
  sample = ShapesSample(
      image=image,
      boxes=boxes,
      classes=np.asarray(classes, dtype=np.int64),
      areas=visible_masks.sum(axis=(1, 2)).astype(np.float32))
  return RenderedShapes(sample, visible_masks, drawn_masks)


def _background(rng: np.random.Generator, size: int) -> np.ndarray:
  """Muted gradient + stripes/checker + noise, so boxes are not trivial."""
  yy, xx = np.mgrid[0:size, 0:size].astype(np.float64) / size
  # Muted colours: pulled towards grey so saturated objects stand out.
  ends = rng.uniform(50.0, 200.0, size=(2, 3))
  ends = 0.5 * ends + 0.5 * ends.mean(axis=1, keepdims=True)
  angle = rng.uniform(0.0, 2.0 * np.pi)
  t = xx * np.cos(angle) + yy * np.sin(angle)
  t = (t - t.min()) / max(t.max() - t.min(), 1e-6)
  bg = ends[0] * (1.0 - t[..., None]) + ends[1] * t[..., None]

  cycles = rng.uniform(2.0, 12.0)  # Pattern periods across the image.
  if rng.random() < 0.5:
    theta = rng.uniform(0.0, np.pi)
    phase = rng.uniform(0.0, 2.0 * np.pi)
    u = xx * np.cos(theta) + yy * np.sin(theta)
    pattern = np.sin(2.0 * np.pi * cycles * u + phase)
  else:
    pattern = ((np.floor(xx * cycles) + np.floor(yy * cycles)) % 2) * 2 - 1
  amplitude = rng.uniform(8.0, 30.0)
  tint = rng.uniform(0.6, 1.0, size=3)
  bg += amplitude * pattern[..., None] * tint
  bg += rng.normal(0.0, rng.uniform(2.0, 8.0), size=bg.shape)
  return np.clip(bg, 0.0, 255.0)


def _draw_shape(rng: np.random.Generator, class_id: int,
                size: int) -> np.ndarray:
  """Draws one filled shape fully inside the image; returns its mask."""
  extent = rng.uniform(MIN_OBJECT_FRACTION, MAX_OBJECT_FRACTION) * size
  mask = np.zeros((size, size), dtype=np.uint8)
  name = CLASS_NAMES[class_id - 1]
  if name == "rectangle":
    long_side = extent
    short_side = max(3.0, extent * rng.uniform(0.45, 1.0))
    h, w = ((long_side, short_side) if rng.random() < 0.5 else
            (short_side, long_side))
    h, w = int(round(h)), int(round(w))
    y0 = int(rng.integers(0, size - h + 1))
    x0 = int(rng.integers(0, size - w + 1))
    cv2.rectangle(mask, (x0, y0), (x0 + w - 1, y0 + h - 1), 1, thickness=-1)
  elif name == "ellipse":
    semi_major = extent / 2.0
    semi_minor = max(2.0, semi_major * rng.uniform(0.45, 1.0))
    angle = rng.uniform(0.0, 180.0)
    cy, cx = _centre(rng, semi_major, size)
    cv2.ellipse(mask, (cx, cy),
                (int(round(semi_major)), int(round(semi_minor))), angle, 0.0,
                360.0, 1, thickness=-1)
  else:
    # Near-equilateral so triangles never degenerate into slivers.
    radius = extent / 2.0
    cy, cx = _centre(rng, radius, size)
    start = rng.uniform(0.0, 2.0 * np.pi)
    angles = start + np.deg2rad(np.array([0.0, 120.0, 240.0]) +
                                rng.uniform(-20.0, 20.0, size=3))
    radii = radius * rng.uniform(0.8, 1.0, size=3)
    points = np.stack([cx + radii * np.cos(angles),
                       cy + radii * np.sin(angles)], axis=1)
    points = np.clip(np.rint(points), 0, size - 1).astype(np.int32)
    cv2.fillPoly(mask, [points], 1)
  return mask.astype(bool)


def _centre(rng: np.random.Generator, radius: float,
            size: int) -> tuple[int, int]:
  """A centre that keeps a shape of `radius` inside the image."""
  r = int(np.ceil(radius))
  cy = int(rng.integers(r, size - r))
  cx = int(rng.integers(r, size - r))
  return cy, cx


def _contrasting_colour(rng: np.random.Generator, mask: np.ndarray,
                        background: np.ndarray, visible: list[np.ndarray],
                        colours: list[np.ndarray]) -> np.ndarray:
  """A saturated colour far from whatever the new shape is drawn over."""
  neighbours = [background[mask].mean(axis=0)]
  neighbours += [c for v, c in zip(visible, colours) if (v & mask).any()]
  best, best_distance = None, -1.0
  for _ in range(_COLOUR_CANDIDATES):
    rgb = colorsys.hsv_to_rgb(
        rng.random(), rng.uniform(0.75, 1.0), rng.uniform(0.7, 1.0))
    colour = np.asarray(rgb) * 255.0
    distance = min(float(np.linalg.norm(colour - n)) for n in neighbours)
    if distance > best_distance:
      best, best_distance = colour, distance
  return best


def _tight_box(mask: np.ndarray) -> tuple[float, float, float, float]:
  """Normalized (ymin, xmin, ymax, xmax) enclosing exactly the mask pixels."""
  height, width = mask.shape
  rows = np.flatnonzero(mask.any(axis=1))
  cols = np.flatnonzero(mask.any(axis=0))
  return (rows[0] / height, cols[0] / width, (rows[-1] + 1) / height,
          (cols[-1] + 1) / width)
