"""Loads the frameworks with Python's cyclic garbage collector paused, then freezes them.

Why: importing TensorFlow and Model Garden leaves about 470,000 long-lived objects that the
collector keeps rescanning. In a `nascli train` process it spent 1.6 s in collection, 9 full
passes of 0.04-0.3 s that found almost nothing: 1.0 s during `import tensorflow`, and a 0.3 s
pass during the tracing of the training loop (BENCHMARKS.md, "Start-up: the garbage
collector"). Paused imports and `gc.freeze()` (the objects move to a generation no collection
scans) leave the collector only what the run itself creates. The import-time cycles that
are frozen with the rest are about 2 MB (5,600 objects) and stay for the process's life.
"""

import gc
import importlib
import sys

# What a training, evaluation, export or trial process imports before it builds anything.
MODEL_GARDEN = ("tensorflow", "tf_keras", "orbit", "official.vision", "tf_vision.train_lib")


def load(modules: tuple[str, ...] = MODEL_GARDEN) -> bool:
  """Imports `modules` with the collector paused and freezes the heap; True if it did.

  Only the process's first import of the first module pays, so only then is the heap frozen:
  a process that already has it (a test session, a second command in one interpreter) may
  hold garbage cycles of its own, which a freeze would keep for good.
  """
  if not modules or modules[0] in sys.modules:
    return False
  enabled = gc.isenabled()
  gc.disable()
  try:
    for name in modules:
      importlib.import_module(name)
    gc.freeze()
  finally:
    if enabled:
      gc.enable()
  return True
