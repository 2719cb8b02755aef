"""Loads CIFAR-10 batches without trusting their pickles.

The python version of CIFAR-10 ships its batches as pickles, and unpickling
runs whatever callables the pickle names. A downloaded or user-supplied file
is untrusted, so the unpickler here resolves only the few numpy callables a
CIFAR batch needs and refuses everything else before it runs.

The binary version of CIFAR-10 (records of one label byte and 3072 pixel
bytes) needs no pickle; it is read here too so both formats give the same
arrays.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np

# pylint: disable=g-import-not-at-top
try:  # numpy >= 2; importing numpy.core there warns.
  from numpy._core import multiarray as _multiarray
except ImportError:  # numpy 1.x has only numpy.core.
  from numpy.core import multiarray as _multiarray
# pylint: enable=g-import-not-at-top

from nascli.data import reasons
from nascli.errors import InputError
from nascli.errors import UnsafeInputError

IMAGE_SIZE = 32
CHANNELS = 3
PIXELS = IMAGE_SIZE * IMAGE_SIZE * CHANNELS  # 3072, in CHW order.
NUM_CLASSES = 10
BINARY_RECORD = 1 + PIXELS


def _show(text: str) -> str:
  """Quotes text with control characters so an error stays one line."""
  return text if text.isprintable() else ascii(text)


def _latin1_encode(obj: Any, encoding: str = "utf-8",
                   errors: str = "strict") -> bytes:
  """`_codecs.encode` limited to latin-1, the only use a protocol-2 pickle has.

  Python 3 writes bytes into a protocol-2 pickle as
  `_codecs.encode(str, "latin1")`; other codecs (and non-str input) have no
  place in a CIFAR batch.
  """
  if not isinstance(obj, str) or encoding.lower().replace("_", "-") not in (
      "latin1", "latin-1", "iso-8859-1") or errors != "strict":
    raise UnsafeInputError(
        f"refusing _codecs.encode with encoding {_show(repr(encoding))}: "
        "only latin-1 occurs in a CIFAR batch")
  return obj.encode("latin-1")


# (module, name) as written in the pickle -> the object it may load. Both the
# numpy 1 (numpy.core) and numpy 2 (numpy._core) spellings resolve to the
# module imported above, so numpy 2's deprecated numpy.core is never imported.
_RECONSTRUCT = _multiarray._reconstruct  # pylint: disable=protected-access
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy.core.multiarray", "scalar"): _multiarray.scalar,
    ("numpy._core.multiarray", "scalar"): _multiarray.scalar,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,
}


class CifarUnpickler(pickle.Unpickler):
  """An Unpickler that can only rebuild numpy arrays and plain containers.

  Every global a pickle names goes through find_class (GLOBAL, STACK_GLOBAL,
  INST, OBJ and the copyreg extension opcodes), so refusing there refuses
  before any named callable can run.
  """

  def __init__(self, data: bytes, source: str):
    super().__init__(io.BytesIO(data), encoding="bytes")
    self._source = source

  def find_class(self, module: str, name: str) -> Any:
    try:
      return _ALLOWED[(module, name)]
    except (KeyError, TypeError):
      raise UnsafeInputError(
          f"refusing to unpickle {_show(f'{module}.{name}')} from "
          f"{_show(self._source)}: not allowed in a CIFAR batch") from None

  def persistent_load(self, pid: Any) -> Any:
    raise UnsafeInputError(
        f"refusing to unpickle a persistent id from {_show(self._source)}: "
        "not allowed in a CIFAR batch")


def _unpickle(data: bytes, source: str) -> dict[bytes, Any]:
  """Unpickles a CIFAR pickle into a dict with bytes keys."""
  try:
    obj = CifarUnpickler(data, source).load()
  except UnsafeInputError:
    raise
  except RecursionError:
    raise InputError(f"cannot unpickle {_show(source)}: nested too deeply") \
        from None
  except Exception as err:  # pylint: disable=broad-except
    # Untrusted bytes can make the allowed numpy callables raise almost
    # anything (TypeError, ValueError, ...); all of it means a bad file.
    raise InputError(f"cannot unpickle {_show(source)}: {reasons.reason(err)}") from None
  if not isinstance(obj, dict):
    raise InputError(f"{_show(source)} is not a CIFAR pickle: it holds a "
                     f"{type(obj).__name__}, not a dict")
  # Python 2 pickles give bytes keys; one written by Python 3 may use str.
  return {k.encode("latin-1") if isinstance(k, str) else k: v
          for k, v in obj.items()}


def _decode_names(values: Any, source: str, key: str) -> list[str]:
  if not isinstance(values, (list, tuple)) or not all(
      isinstance(v, (bytes, str)) for v in values):
    raise InputError(f"{_show(source)}: {key} is not a list of strings")
  return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v
          for v in values]


def _chw_to_hwc(pixels: np.ndarray) -> np.ndarray:
  """[N, 3072] CHW rows -> contiguous uint8 [N, 32, 32, 3]."""
  images = pixels.reshape(-1, CHANNELS, IMAGE_SIZE, IMAGE_SIZE)
  return np.ascontiguousarray(images.transpose(0, 2, 3, 1), dtype=np.uint8)


def _check_labels(labels: np.ndarray, source: str) -> None:
  if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
    bad = labels[(labels < 0) | (labels >= NUM_CLASSES)][0]
    raise InputError(f"{_show(source)}: label {int(bad)} is outside "
                     f"0..{NUM_CLASSES - 1}")


def load_cifar_batch(
    data: bytes, source: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
  """Reads a CIFAR-10 python batch (data_batch_N, test_batch).

  Args:
    data: the pickle's bytes.
    source: names the batch in error messages (file or archive member).

  Returns:
    images: uint8 [N, 32, 32, 3] in HWC order.
    labels: int64 [N], each in 0..9.
    filenames: N decoded names, or [] when the batch has none.

  Raises:
    UnsafeInputError: the pickle names a callable a batch does not need.
    InputError: the pickle is corrupt or is not a CIFAR-10 batch.
  """
  batch = _unpickle(data, source)
  where = _show(source)
  pixels = batch.get(b"data")
  if pixels is None:
    raise InputError(f"{where}: no b'data' entry; not a CIFAR-10 batch")
  if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8:
    kind = getattr(pixels, "dtype", type(pixels).__name__)
    raise InputError(f"{where}: b'data' must be a uint8 array, got {kind}")
  if pixels.ndim != 2 or pixels.shape[1] != PIXELS:
    raise InputError(f"{where}: b'data' must have shape [N, {PIXELS}], got "
                     f"{list(pixels.shape)}")
  n = pixels.shape[0]

  if b"labels" not in batch:
    raise InputError(f"{where}: no b'labels' entry; not a CIFAR-10 batch")
  raw_labels = batch[b"labels"]
  if not isinstance(raw_labels, (list, tuple, np.ndarray)):
    raise InputError(f"{where}: b'labels' must be a list, got "
                     f"{type(raw_labels).__name__}")
  try:
    labels = np.asarray(raw_labels)
  except ValueError:
    raise InputError(f"{where}: b'labels' is not a list of integers") from None
  if labels.ndim != 1 or len(labels) != n:
    raise InputError(f"{where}: {n} images but b'labels' has shape "
                     f"{list(labels.shape)}")
  if n and (labels.dtype == np.bool_ or
            not np.issubdtype(labels.dtype, np.integer)):
    raise InputError(f"{where}: b'labels' must be integers, got "
                     f"{labels.dtype}")
  labels = labels.astype(np.int64)
  _check_labels(labels, source)

  filenames: list[str] = []
  if b"filenames" in batch:
    filenames = _decode_names(batch[b"filenames"], source, "b'filenames'")
    if len(filenames) != n:
      raise InputError(f"{where}: {n} images but {len(filenames)} filenames")
  return _chw_to_hwc(pixels), labels, filenames


def load_cifar_meta(data: bytes, source: str) -> list[str]:
  """Reads the class names from a CIFAR-10 python `batches.meta` pickle."""
  meta = _unpickle(data, source)
  if b"label_names" not in meta:
    raise InputError(f"{_show(source)}: no b'label_names' entry; not a "
                     "CIFAR-10 batches.meta")
  names = _decode_names(meta[b"label_names"], source, "b'label_names'")
  if not names:
    raise InputError(f"{_show(source)}: b'label_names' is empty")
  return names


def load_cifar_binary_batch(
    data: bytes, source: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
  """Reads a CIFAR-10 binary batch (data_batch_N.bin, test_batch.bin).

  Each record is one label byte then 3072 pixel bytes in CHW order. Returns
  the same triple as load_cifar_batch, with no filenames (the binary format
  has none), so callers can treat both formats alike.
  """
  where = _show(source)
  if not data:
    raise InputError(f"{where}: empty CIFAR-10 binary batch")
  if len(data) % BINARY_RECORD:
    raise InputError(
        f"{where}: {len(data)} bytes is not a whole number of "
        f"{BINARY_RECORD}-byte CIFAR-10 records; truncated or not CIFAR-10")
  records = np.frombuffer(data, dtype=np.uint8).reshape(-1, BINARY_RECORD)
  labels = records[:, 0].astype(np.int64)
  _check_labels(labels, source)
  return _chw_to_hwc(records[:, 1:]), labels, []


def parse_cifar_binary_meta(text: str | bytes,
                            source: str = "batches.meta.txt") -> list[str]:
  """Reads class names from `batches.meta.txt`: one per line, blanks skipped."""
  if isinstance(text, bytes):
    try:
      text = text.decode("utf-8")
    except UnicodeDecodeError as err:
      raise InputError(f"{_show(source)}: not UTF-8 text ({err.reason} at "
                       f"byte {err.start})") from None
  names = [line.strip() for line in text.splitlines() if line.strip()]
  if not names:
    raise InputError(f"{_show(source)}: no class names")
  return names
