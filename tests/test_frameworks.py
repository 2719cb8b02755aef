"""The frameworks load with the collector paused, and the collector is left only new objects."""

import gc
import json
import os
import subprocess
import sys
import textwrap

import pytest

from nascli import frameworks


def _fresh_python(code: str) -> dict:
  """Runs `code` in a new interpreter (nothing imported yet) and returns the JSON it prints.

  TF_USE_LEGACY_KERAS is taken out of its environment (this session's conftest set it), so
  what the child sees is what importing nascli sets.
  """
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                        text=True, check=False, env=env)
  assert proc.returncode == 0, proc.stderr[-2000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_first_load_of_model_garden_freezes_what_it_imported():
  out = _fresh_python("""
      import gc, json, sys
      from nascli import frameworks
      before = "tensorflow" in sys.modules
      paused = []
      gc.callbacks.append(lambda phase, info: paused.append(info["generation"]))
      loaded = frameworks.load()
      print(json.dumps({
          "before": before, "loaded": loaded, "enabled": gc.isenabled(),
          "collections_during_load": len(paused),
          "frozen": gc.get_freeze_count(), "scanned": len(gc.get_objects()),
          "modules": [m in sys.modules for m in frameworks.MODEL_GARDEN],
          "again": frameworks.load(), "frozen_again": gc.get_freeze_count(),
          "keras3": "keras.src" in sys.modules, "sklearn": "sklearn" in sys.modules,
          "tf_keras": sys.modules["tensorflow"].keras.__name__}))
      """)
  # Importing nascli set TF_USE_LEGACY_KERAS: TensorFlow loaded no Keras 3 (nor the
  # scikit-learn it pulls in), and tf.keras is tf_keras, the Keras that Model Garden builds on.
  assert out["keras3"] is False and out["sklearn"] is False
  assert out["tf_keras"].startswith("tf_keras."), out["tf_keras"]
  assert out["before"] is False and out["loaded"] is True and out["enabled"] is True
  assert out["modules"] == [True] * len(frameworks.MODEL_GARDEN)
  assert out["collections_during_load"] == 0
  # TensorFlow and Model Garden are hundreds of thousands of objects; after the freeze the
  # collector's generations hold a small fraction of them.
  assert out["frozen"] > 200_000
  assert out["scanned"] < out["frozen"] // 20
  assert out["again"] is False and out["frozen_again"] == out["frozen"]


def test_already_imported_module_freezes_nothing():
  assert "json" in sys.modules
  frozen = gc.get_freeze_count()
  assert frameworks.load(("json",)) is False
  assert gc.get_freeze_count() == frozen
  assert gc.isenabled()


@pytest.mark.parametrize("enabled", [True, False])
def test_failed_import_restores_the_collector_and_freezes_nothing(enabled):
  frozen = gc.get_freeze_count()
  if not enabled:
    gc.disable()
  try:
    with pytest.raises(ModuleNotFoundError, match="nascli_no_such_module"):
      frameworks.load(("nascli_no_such_module",))
    assert gc.isenabled() is enabled
    assert gc.get_freeze_count() == frozen
  finally:
    gc.enable()


def test_small_module_in_a_fresh_process():
  out = _fresh_python("""
      import gc, json, sys
      from nascli import frameworks
      first = "fractions" not in sys.modules
      loaded = frameworks.load(("fractions",))
      print(json.dumps({"first": first, "loaded": loaded, "imported": "fractions" in sys.modules,
                        "enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}))
      """)
  assert out["first"] and out["loaded"] and out["imported"] and out["enabled"]
  assert out["frozen"] > 1000
