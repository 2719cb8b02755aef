"""A process that trained ends without interpreter teardown (nascli.runtime.finish), and loses
nothing by it: no result, no summary, no checkpoint; and it leaves no temp file behind."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import convert_digits32
from conftest import nascli_subprocess


def _python(code: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                        text=True, check=False)


@pytest.mark.parametrize("requested", [True, False])
def test_finish_skips_teardown_only_when_requested(requested):
  proc = _python(f"""
      import atexit, logging, sys
      from nascli import runtime
      logging.basicConfig(stream=open("/dev/stderr", "w"), level=logging.INFO)
      atexit.register(lambda: print("teardown ran", file=sys.stderr))
      if {requested}:
        runtime.request()
      logging.info("logged before the exit")
      print("a result without a newline", end="")  # still buffered: finish must flush it
      runtime.finish(3)
      """)
  assert proc.returncode == 3
  assert proc.stdout == "a result without a newline"
  assert "logged before the exit" in proc.stderr
  assert ("teardown ran" in proc.stderr) is not requested


def test_train_process_leaves_complete_files(tmp_path):
  data = convert_digits32(tmp_path / "digits32", num_shards=2)
  model_dir = tmp_path / "run"
  temp = tmp_path / "temp"
  temp.mkdir()
  proc = nascli_subprocess(
      "train", "--dataset_dir", data, "--model_dir", model_dir, "--json", "--params_override",
      "trainer.train_steps=6,trainer.steps_per_loop=3,trainer.summary_interval=3,"
      "trainer.checkpoint_interval=6,trainer.validation_interval=6", env={"TMPDIR": str(temp)})
  assert proc.returncode == 0, proc.stderr
  assert os.listdir(temp) == []  # autograph's generated modules went with the process
  result = json.loads(proc.stdout)  # the whole result reached stdout
  assert result["step"] == 6 and result["status"] == "completed"
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  steps = {}
  for sub in ("train", "validation"):
    for path in (model_dir / sub).glob("events.out.tfevents.*"):
      for event in tf.compat.v1.train.summary_iterator(str(path)):
        for value in event.summary.value:
          steps.setdefault((sub, value.tag), set()).add(event.step)
  # The last training loop's and the final evaluation's summaries were flushed to disk.
  assert steps[("train", "training_loss")] == {3, 6}
  assert 6 in steps[("validation", "accuracy")]
  assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-6")
  status = json.loads((model_dir / "job_status.json").read_text())
  assert status["status"] == "completed" and status["step"] == 6
  assert len((model_dir / "log").read_text().splitlines()) == 2  # steps 3 and 6
