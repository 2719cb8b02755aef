"""The TFLite interpreter every nascli timing uses, and the quiet it runs in: shared by the
runtimes (arch_latency.py) and the model-level helpers (device_latency.py, layer_latency.py),
so neither imports the other for it."""

import contextlib
import os
import sys
import tempfile
from typing import Any


@contextlib.contextmanager
def native_stderr_quiet():
  """The TFLite converter's and interpreter's C++ code log a dozen lines per model through absl,
  which TF_CPP_MIN_LOG_LEVEL does not reach: file descriptor 2 goes to a temporary file while
  they run (left alone under NASCLI_DEBUG=1)."""
  if os.environ.get('NASCLI_DEBUG') == '1':
    yield
    return
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as sink:
    os.dup2(sink.fileno(), 2)
    try:
      yield
    finally:
      os.dup2(saved, 2)
      os.close(saved)


def interpreter(flatbuffer: bytes, num_threads: int) -> Any:
  """The LiteRT interpreter of `ai_edge_litert` (XNNPACK by default), else `tf.lite`'s."""
  try:
    from ai_edge_litert import interpreter as litert  # pylint: disable=g-import-not-at-top
    with native_stderr_quiet():
      interp = litert.Interpreter(model_content=flatbuffer, num_threads=num_threads)
  except ImportError:
    import warnings  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', UserWarning)
      interp = tf.lite.Interpreter(model_content=flatbuffer, num_threads=num_threads)
  with native_stderr_quiet():  # XNNPACK's "Created TensorFlow Lite XNNPACK delegate" line
    interp.allocate_tensors()
  return interp
