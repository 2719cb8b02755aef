"""Tests for the synthetic shapes detection data set."""

import cv2
import numpy as np
import pytest

from nascli.data import shapes

_NUM_SAMPLES = 200


@pytest.fixture(scope="module")
def rendered() -> list[shapes.RenderedShapes]:
  return [shapes.render_sample_with_masks(7, i) for i in range(_NUM_SAMPLES)]


def test_same_seed_and_index_is_byte_identical():
  a = shapes.render_sample(3, 11)
  b = shapes.render_sample(3, 11)
  assert a.image.tobytes() == b.image.tobytes()
  np.testing.assert_array_equal(a.boxes, b.boxes)
  np.testing.assert_array_equal(a.classes, b.classes)
  np.testing.assert_array_equal(a.areas, b.areas)


def test_different_index_or_seed_gives_different_image():
  base = shapes.render_sample(3, 11).image
  assert not np.array_equal(base, shapes.render_sample(3, 12).image)
  assert not np.array_equal(base, shapes.render_sample(4, 11).image)


def test_dtypes_and_shapes():
  sample = shapes.render_sample(0, 0, image_size=96, max_objects=3)
  k = len(sample.classes)
  assert sample.image.dtype == np.uint8
  assert sample.image.shape == (96, 96, 3)
  assert sample.boxes.dtype == np.float32 and sample.boxes.shape == (k, 4)
  assert sample.classes.dtype == np.int64
  assert sample.areas.dtype == np.float32 and sample.areas.shape == (k,)
  assert 1 <= k <= 3


def test_boxes_valid_and_classes_in_range(rendered):
  for r in rendered:
    boxes = r.sample.boxes
    assert np.all((boxes >= 0.0) & (boxes <= 1.0))
    assert np.all(boxes[:, 0] < boxes[:, 2])
    assert np.all(boxes[:, 1] < boxes[:, 3])
    assert set(r.sample.classes.tolist()) <= {1, 2, 3}


def test_boxes_and_areas_match_visible_masks(rendered):
  for r in rendered:
    size = r.sample.image.shape[0]
    assert r.visible_masks.shape == (len(r.sample.classes), size, size)
    for box, area, mask in zip(r.sample.boxes, r.sample.areas,
                               r.visible_masks):
      rows = np.flatnonzero(mask.any(axis=1))
      cols = np.flatnonzero(mask.any(axis=0))
      expected = np.array([rows[0], cols[0], rows[-1] + 1, cols[-1] + 1],
                          dtype=np.float32) / size
      np.testing.assert_allclose(box, expected, rtol=0, atol=1e-6)
      assert area == mask.sum()


def test_occlusion_keeps_at_least_30_percent_visible(rendered):
  occluded = 0
  for r in rendered:
    visible = r.visible_masks.sum(axis=(1, 2))
    drawn = r.drawn_masks.sum(axis=(1, 2))
    assert np.all(visible >= shapes.MIN_VISIBLE_FRACTION * drawn)
    # Visible masks are what is left after drawing later shapes on top.
    assert np.all(r.visible_masks <= r.drawn_masks)
    assert r.visible_masks.sum(axis=0).max() <= 1
    assert r.visible_masks[-1].sum() == drawn[-1]
    occluded += int(np.sum(visible < drawn))
  # Overlap really happens, so the check above is not vacuous.
  assert occluded > 10


def test_classes_and_counts_vary(rendered):
  classes = np.concatenate([r.sample.classes for r in rendered])
  assert set(classes.tolist()) == {1, 2, 3}
  counts = {len(r.sample.classes) for r in rendered}
  assert counts == {1, 2, 3, 4}


def test_object_sizes_in_range(rendered):
  for r in rendered:
    for mask in r.drawn_masks:
      rows = np.flatnonzero(mask.any(axis=1))
      cols = np.flatnonzero(mask.any(axis=0))
      extent = max(rows[-1] - rows[0], cols[-1] - cols[0]) + 1
      # Rasterization and triangle jitter shift extents by a few pixels.
      assert 0.08 * 128 <= extent <= 0.5 * 128


def test_objects_contrast_with_background(rendered):
  """Learnability: each shape differs clearly from the background around it."""
  for r in rendered:
    image = r.sample.image.astype(np.float64)
    union = r.visible_masks.any(axis=0)
    for mask in r.visible_masks:
      ring = cv2.dilate(mask.astype(np.uint8), np.ones((5, 5), np.uint8))
      ring = ring.astype(bool) & ~union
      if ring.sum() < 10:
        continue
      distance = np.linalg.norm(image[mask].mean(axis=0) -
                                image[ring].mean(axis=0))
      assert distance > 60.0


def test_background_is_textured(rendered):
  for r in rendered[:20]:
    background = r.sample.image[~r.visible_masks.any(axis=0)]
    assert background.std(axis=0).max() > 5.0


def test_small_image_size_and_object_limit():
  sample = shapes.render_sample(1, 2, image_size=32, max_objects=1)
  assert sample.image.shape == (32, 32, 3)
  assert len(sample.classes) == 1
  with pytest.raises(ValueError):
    shapes.render_sample(1, 2, image_size=31)
  with pytest.raises(ValueError):
    shapes.render_sample(1, 2, max_objects=0)
