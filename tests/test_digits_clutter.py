"""digits_clutter: the embedded digits drawn hard (random scale, angle, place, colour, clutter)."""

import numpy as np
import pytest

import nascli.data.datasets  # pylint: disable=unused-import  (registers the sources)
from conftest import decode_image
from conftest import read_examples
from nascli.data.datasets import digits_clutter
from nascli.data.source import ConvertOptions
from nascli.data.datasets import source_for
from nascli.errors import NascliError


def _source(**options):
  source = source_for('digits_clutter', ConvertOptions(progress=False, **options))
  source.prepare()
  return source


def test_each_scan_is_drawn_three_times_on_one_side_of_the_split_only():
  source = _source()
  sizes = source.split_sizes()
  # digits' stratified 60/20/20 split of 1,797 scans, each drawn 3 times.
  assert sizes == {'train': 1079 * 3, 'validation': 359 * 3, 'test': 359 * 3}
  scans = {split: {int(source.record(split, i).source_id) for i in range(n)}
           for split, n in sizes.items()}
  assert [len(s) for s in scans.values()] == [1079, 359, 359]
  assert not scans['train'] & scans['validation'] and not scans['test'] & (
      scans['train'] | scans['validation'])
  assert source.split_origins()['test'] == (
      'carved from the 1,797 scans: stratified by class, seed 0; each scan drawn 3 times')
  assert not np.array_equal(source.pixels('test', 0), source.pixels('validation', 0))
  labels = [source.record('validation', i).label for i in range(9)]
  assert labels[0:3] == [labels[0]] * 3 and labels[3:6] == [labels[3]] * 3


def test_drawings_differ_and_are_a_pure_function_of_seed_split_and_index():
  a, b = _source(), _source()
  first = [a.pixels('train', i) for i in range(3)]  # three drawings of one scan
  assert all(p.shape == (32, 32, 3) and p.dtype == np.uint8 for p in first)
  assert not np.array_equal(first[0], first[1]) and not np.array_equal(first[1], first[2])
  assert np.array_equal(b.pixels('train', 1), first[1])
  assert not np.array_equal(_source(seed=1).pixels('train', 1), first[1])
  # Not the clean upscaled scan: noise and colour everywhere (the clean one is mostly black).
  assert (first[0] > 0).mean() > 0.9 and first[0].std() > 20
  grey = _source(channels=1, image_size=40).pixels('validation', 5)
  assert grey.shape == (40, 40, 1)


def test_a_too_small_image_size_is_refused_in_one_line():
  with pytest.raises(NascliError, match='--image_size 12: digits_clutter draws at 16 pixels'):
    digits_clutter.DigitsClutterSource.check_options(ConvertOptions(image_size=12))


def test_convert_writes_the_drawn_pngs(run_convert):
  """Two processes write the bytes one would: every drawing decodes to the source's pixels."""
  _, _, out = run_convert('digits_clutter', num_shards=2, processes=2)
  records = read_examples(out / 'validation-*.tfrecord')
  assert len(records) == 359 * 3
  source = _source()
  decoded = {r['image/filename'][0].decode(): r for r in records}
  assert len(decoded) == len(records)  # one file name per drawing
  name = sorted(decoded)[0]
  index = int(name.split('_')[-1].split('.')[0])
  assert np.array_equal(decode_image(decoded[name]['image/encoded'][0]),
                        source.pixels('validation', index))
  assert decoded[name]['image/class/label'][0] == source.record('validation', index).label
