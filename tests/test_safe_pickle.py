"""Tests for nascli.data.safe_pickle: CIFAR-10 from untrusted pickles."""

import builtins
import codecs
import io
import os
import pickle
import struct
import warnings

import numpy as np
import pytest

from nascli.data import safe_pickle
from nascli.errors import InputError
from nascli.errors import UnsafeInputError

N = 5


def _known_batch():
  """HWC images, labels, filenames, and the CHW [N, 3072] rows CIFAR stores."""
  rng = np.random.default_rng(1234)
  images = rng.integers(0, 256, size=(N, 32, 32, 3), dtype=np.uint8)
  labels = [3, 0, 9, 1, 7]
  filenames = [f"img_{i}.png".encode() for i in range(N)]
  rows = images.transpose(0, 3, 1, 2).reshape(N, 3072).copy()
  return images, labels, filenames, rows


class _Py2Pickler(pickle._Pickler):  # pylint: disable=protected-access
  """Writes bytes as Python 2 `str` opcodes, as cPickle did for CIFAR."""
  dispatch = pickle._Pickler.dispatch.copy()  # pylint: disable=protected-access

  def save_bytes(self, obj):
    if len(obj) < 256:
      self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
    else:
      self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
    self.memoize(obj)

  dispatch[bytes] = save_bytes


def _py2_pickle(obj) -> bytes:
  """A pickle shaped like the real CIFAR-10 python batches (numpy 1, py2)."""
  buf = io.BytesIO()
  _Py2Pickler(buf, protocol=2).dump(obj)
  data = buf.getvalue()
  assert b"_codecs" not in data
  return data.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


def test_protocol2_batch_round_trips_to_hwc():
  images, labels, filenames, rows = _known_batch()
  data = pickle.dumps({b"batch_label": b"training batch 1 of 5",
                       b"labels": labels, b"data": rows,
                       b"filenames": filenames}, protocol=2)
  got_images, got_labels, got_names = safe_pickle.load_cifar_batch(
      data, "data_batch_1")
  assert got_images.dtype == np.uint8 and got_images.shape == (N, 32, 32, 3)
  np.testing.assert_array_equal(got_images, images)
  # Pixel (y=2, x=5, green) of image 4 is CHW offset 1*1024 + 2*32 + 5.
  assert got_images[4, 2, 5, 1] == rows[4, 1024 + 64 + 5]
  assert got_labels.dtype == np.int64
  assert got_labels.tolist() == labels
  assert got_names == [f"img_{i}.png" for i in range(N)]


def test_python2_style_pickle_loads_without_deprecation_warning():
  images, labels, filenames, rows = _known_batch()
  data = _py2_pickle({b"labels": labels, b"data": rows,
                      b"filenames": filenames})
  assert b"numpy.core.multiarray" in data
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    got_images, got_labels, got_names = safe_pickle.load_cifar_batch(
        data, "data_batch_2")
  np.testing.assert_array_equal(got_images, images)
  assert got_labels.tolist() == labels
  assert got_names[0] == "img_0.png"


def test_batch_without_filenames():
  _, labels, _, rows = _known_batch()
  data = pickle.dumps({b"labels": labels, b"data": rows}, protocol=2)
  _, _, names = safe_pickle.load_cifar_batch(data, "b")
  assert names == []


def test_numpy_scalar_labels_are_allowed():
  _, labels, _, rows = _known_batch()
  data = pickle.dumps({b"labels": [np.int64(v) for v in labels],
                       b"data": rows}, protocol=2)
  assert b"scalar" in data
  _, got_labels, _ = safe_pickle.load_cifar_batch(data, "b")
  assert got_labels.tolist() == labels


class _SystemCall:

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return (os.system, (f"touch {self.marker}",))


class _ExecCall:

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return (builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.mark.parametrize("payload,protocol,culprit", [
    (_SystemCall, 2, f"{os.system.__module__}.system"),
    (_SystemCall, 4, f"{os.system.__module__}.system"),
    (_ExecCall, 2, "__builtin__.exec"),  # Protocol 2 writes Python 2 names.
    (_ExecCall, 4, "builtins.exec"),
])
def test_malicious_pickle_is_refused_and_not_run(tmp_path, payload, protocol,
                                                 culprit):
  marker = tmp_path / "MARKER"
  _, labels, _, rows = _known_batch()
  data = pickle.dumps({b"labels": labels, b"data": rows,
                       b"x": payload(marker)}, protocol=protocol)
  with pytest.raises(UnsafeInputError) as exc:
    safe_pickle.load_cifar_batch(data, "cifar-10-python.tar.gz:data_batch_1")
  msg = str(exc.value)
  assert msg.startswith(f"refusing to unpickle {culprit} from ")
  assert "from cifar-10-python.tar.gz:data_batch_1: not allowed" in msg
  assert not marker.exists()


def test_other_codecs_are_refused():

  class Rot13:

    def __reduce__(self):
      return (codecs.encode, ("payload", "rot13"))

  data = pickle.dumps({b"x": Rot13()}, protocol=2)
  with pytest.raises(UnsafeInputError, match="encoding 'rot13'"):
    safe_pickle.load_cifar_batch(data, "b")


def test_truncated_and_garbage_pickles():
  _, labels, _, rows = _known_batch()
  data = pickle.dumps({b"labels": labels, b"data": rows}, protocol=2)
  with pytest.raises(InputError, match=r"^cannot unpickle data_batch_3: "):
    safe_pickle.load_cifar_batch(data[:len(data) // 2], "data_batch_3")
  with pytest.raises(InputError, match=r"^cannot unpickle junk: "):
    safe_pickle.load_cifar_batch(b"\x00not a pickle at all", "junk")
  with pytest.raises(InputError, match=r"^cannot unpickle empty: "):
    safe_pickle.load_cifar_batch(b"", "empty")


@pytest.mark.parametrize("batch,problem", [
    ([1, 2, 3], "not a dict"),
    ({b"labels": [1]}, "no b'data'"),
    ({b"data": np.zeros((1, 3072), np.uint8)}, "no b'labels'"),
    ({b"data": np.zeros((2, 3071), np.uint8), b"labels": [1, 2]}, "shape"),
    ({b"data": np.zeros((2, 3072), np.float32), b"labels": [1, 2]}, "uint8"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, "labels"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 10]},
     "label 10 is outside 0..9"),
    ({b"data": np.zeros((1, 3072), np.uint8), b"labels": [b"cat"]},
     "integers"),
    ({b"data": np.zeros((1, 3072), np.uint8), b"labels": [1],
      b"filenames": [b"a", b"b"]}, "1 images but 2 filenames"),
])
def test_bad_structure_names_source_and_problem(batch, problem):
  data = pickle.dumps(batch, protocol=2)
  with pytest.raises(InputError) as exc:
    safe_pickle.load_cifar_batch(data, "my_batch")
  assert "my_batch" in str(exc.value) and problem in str(exc.value)
  assert not isinstance(exc.value, UnsafeInputError)


def test_meta():
  names = [b"airplane", b"automobile", b"bird"]
  data = _py2_pickle({b"num_cases_per_batch": 10000, b"label_names": names,
                      b"num_vis": 3072})
  assert safe_pickle.load_cifar_meta(data, "batches.meta") == [
      "airplane", "automobile", "bird"]
  with pytest.raises(InputError, match="batches.meta: no b'label_names'"):
    safe_pickle.load_cifar_meta(pickle.dumps({}, protocol=2), "batches.meta")


def test_binary_batch_round_trip():
  images, labels, _, rows = _known_batch()
  data = b"".join(bytes([label]) + row.tobytes()
                  for label, row in zip(labels, rows))
  assert len(data) == N * 3073
  got_images, got_labels, names = safe_pickle.load_cifar_binary_batch(
      data, "data_batch_1.bin")
  np.testing.assert_array_equal(got_images, images)
  assert got_images.shape == (N, 32, 32, 3)
  assert got_labels.dtype == np.int64 and got_labels.tolist() == labels
  assert names == []


def test_binary_batch_errors():
  with pytest.raises(InputError, match=r"test_batch\.bin: 3072 bytes is not"):
    safe_pickle.load_cifar_binary_batch(bytes(3072), "test_batch.bin")
  with pytest.raises(InputError, match=r"x\.bin: label 11 is outside"):
    safe_pickle.load_cifar_binary_batch(bytes([11]) + bytes(3072), "x.bin")
  with pytest.raises(InputError, match=r"e\.bin: empty"):
    safe_pickle.load_cifar_binary_batch(b"", "e.bin")


def test_parse_cifar_binary_meta():
  text = "airplane\nautomobile\n\n  bird \n\n"
  assert safe_pickle.parse_cifar_binary_meta(text) == [
      "airplane", "automobile", "bird"]
  assert safe_pickle.parse_cifar_binary_meta(text.encode()) == [
      "airplane", "automobile", "bird"]
  with pytest.raises(InputError, match="batches.meta.txt: no class names"):
    safe_pickle.parse_cifar_binary_meta("\n\n")
