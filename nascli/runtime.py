"""What every nascli process sets up and how it ends: `nascli`, a trial (process or warm worker)
and the latency image's entry point. Importing it does not import TensorFlow.

The fast exit: tf.data's autotuning thread (TensorFlow's `Model::OptimizeLoop`) sleeps between
rounds for a period that doubles from 10 ms to 60 s, and destroying an iterator waits for it. A
training iterator lives as long as the run, so at interpreter shutdown its destruction held `nascli
train` (and every search trial process) 15-60 s after its results were written (BENCHMARKS.md,
THOR section: 8 of 40 runs). By the time a command returns, everything it writes is on disk:
checkpoints are written synchronously, Orbit flushes its summary writers after every loop and
evaluation, the final evaluation's writer is flushed when its context exits, and job_status.json
and the log are closed files. What is left is flushed here, and the one thing TensorFlow's own
exit handlers clean up that outlives the process, autograph's generated modules, is removed here.
"""

import logging
import os
import sys
from typing import NoReturn

# tensorflow/python/autograph/pyct/loader.py `load_source`: every function autograph converts is
# written to tempfile.NamedTemporaryFile(prefix=this, suffix=".py", delete=False), imported, and
# kept in sys.modules under the file's base name; TF removes the file in an atexit lambda of its
# own (one per file, not reachable from outside), which os._exit skips.
_AUTOGRAPH_PREFIX = "__autograph_generated_file"

_requested = False
_inherited: frozenset[str] = frozenset()  # autograph modules a forked child got from its parent


def quiet_libraries() -> None:
  """TensorFlow and Model Garden log at INFO by default; nascli reports progress itself. Call it
  before TensorFlow is imported: TF_CPP_MIN_LOG_LEVEL is read once, at import."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  try:
    from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
    absl_logging.set_verbosity(absl_logging.WARNING)
  except ImportError:
    pass


def debug() -> bool:
  """NASCLI_DEBUG=1: tracebacks alongside the one-line errors."""
  return os.environ.get("NASCLI_DEBUG") == "1"


def request() -> None:
  """Called by code that loads TensorFlow or starts a training run in this process: `finish`
  then skips the interpreter's teardown."""
  global _requested  # pylint: disable=global-statement
  _requested = True


def _autograph_files() -> list[str]:
  """The generated-module files of this process (not of its parent, if it was forked)."""
  files = []
  for name, module in sys.modules.copy().items():  # a copy: other threads may import meanwhile
    if not name.startswith(_AUTOGRAPH_PREFIX) or name in _inherited:
      continue
    path = getattr(module, "__file__", None)
    if path and os.path.basename(path) == f"{name}.py":
      files.append(path)
  return files


def cleanup_temp_files() -> list[str]:
  """Removes the temp files autograph wrote for this process so far; returns their paths.

  Safe while the process goes on: the converted functions are already loaded (and kept by TF's
  conversion cache, so converting them again writes no new file); a traceback through one just
  shows no source line. TF's atexit handlers ignore a file that is already gone.
  """
  removed = []
  for path in _autograph_files():
    try:
      os.remove(path)
      removed.append(path)
    except OSError:  # gone already (an earlier call, a temp cleaner) or not ours to remove
      pass
  return removed


def _forget_inherited() -> None:
  global _inherited  # pylint: disable=global-statement
  _inherited = frozenset(n for n in sys.modules.copy() if n.startswith(_AUTOGRAPH_PREFIX))


os.register_at_fork(after_in_child=_forget_inherited)


def finish(code: int) -> NoReturn:
  """Exits with `code`: at once (temp files removed, streams flushed) if `request` was called,
  else normally (TensorFlow's atexit handlers then remove its files themselves)."""
  if not _requested:
    sys.exit(code)
  cleanup_temp_files()
  logging.shutdown()
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):  # closed or a broken pipe: nothing more can reach it
      pass
  os._exit(code)  # pylint: disable=protected-access
