"""nascli.runtime: quiet libraries, the debug flag, and a fast exit that leaves no temp files."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import convert_digits32
from nascli import runtime

FOREIGN = "__autograph_generated_fileOTHERPROCESS.py"  # another process's, running meanwhile


def _python(code: str, script_dir=None, env: dict | None = None) -> subprocess.CompletedProcess:
  """Runs `code` in a fresh interpreter; from a file in `script_dir` where autograph must read
  the source of its functions (it cannot convert code given with -c)."""
  args = ["-c", textwrap.dedent(code)]
  if script_dir is not None:
    script = script_dir / "script.py"
    script.write_text(textwrap.dedent(code))
    args = [str(script)]
  full_env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  full_env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])
  return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                        env=dict(full_env, **(env or {})), check=False, timeout=600)


@pytest.mark.parametrize("value, expected", [
    ("1", True), ("0", False), ("", False), ("true", False), (None, False)])
def test_debug_is_nascli_debug_1(monkeypatch, value, expected):
  if value is None:
    monkeypatch.delenv("NASCLI_DEBUG", raising=False)
  else:
    monkeypatch.setenv("NASCLI_DEBUG", value)
  assert runtime.debug() is expected


def test_import_loads_no_tensorflow():
  proc = _python("""
      import sys
      from nascli import runtime
      print(sorted({m.split(".")[0] for m in sys.modules} & {"tensorflow", "tf_keras", "absl",
                                                             "official", "typer"}))
      """)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout == "[]\n"


def test_quiet_libraries_keeps_errors_and_warnings_only():
  proc = _python("""
      import os
      from nascli import runtime
      runtime.quiet_libraries()  # before TensorFlow: its C++ log level is read at import
      import tensorflow as tf
      from absl import logging as absl_logging
      print(os.environ["TF_CPP_MIN_LOG_LEVEL"])
      tf.get_logger().info("tf info")
      tf.get_logger().warning("tf warning")
      tf.get_logger().error("tf error")
      absl_logging.info("absl info")
      absl_logging.warning("absl warning")
      tf.reduce_sum(tf.ones([2]))  # a first op: C++ start-up logs at INFO or WARNING otherwise
      """)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout == "3\n"
  lines = proc.stderr.splitlines()
  assert [line for line in lines if "tf " in line or "absl " in line] == [
      line for line in lines if line.endswith(("tf error", "absl warning"))]
  assert len(lines) == 2, proc.stderr


def test_quiet_libraries_keeps_a_log_level_the_user_set(monkeypatch):
  monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
  runtime.quiet_libraries()
  assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"


def test_finish_removes_this_process_autograph_files_only(tmp_path):
  """Not a forked child's parent's, not another process's; and a child's own ones too."""
  temp = tmp_path / "temp"
  temp.mkdir()
  (temp / FOREIGN).write_text("x = 1\n")
  proc = _python("""
      import json, os, sys, tempfile
      from nascli import runtime
      import tensorflow as tf
      from tensorflow.python.autograph.pyct import loader

      @tf.function
      def f(x):
        return x + 1 if x > 0 else x - 1  # autograph converts it: a generated module file
      f(tf.constant(1))
      tmp = tempfile.gettempdir()
      mine = sorted(n for n in os.listdir(tmp) if n != %r)
      child = os.fork()
      if child == 0:  # TF's own loader, as autograph calls it (no TF ops after a fork)
        _, path = loader.load_source("y = 2\\n", delete_on_exit=True)
        runtime.request()
        runtime.finish(4 if os.path.exists(path) else 3)
      _, status = os.waitpid(child, 0)
      after_child = sorted(n for n in os.listdir(tmp) if n != %r)
      runtime.request()
      print(json.dumps({"mine": mine, "child": os.waitstatus_to_exitcode(status),
                        "after_child": after_child}))
      runtime.finish(5)
      """ % (FOREIGN, FOREIGN), tmp_path, env={"TMPDIR": str(temp), "TF_CPP_MIN_LOG_LEVEL": "3"})
  assert proc.returncode == 5, proc.stderr
  report = json.loads(proc.stdout)
  assert report["mine"] and all(n.startswith("__autograph_generated_file") and n.endswith(".py")
                                for n in report["mine"])
  assert report["child"] == 4  # the child wrote a file of its own...
  assert report["after_child"] == report["mine"]  # ...removed it, and left the parent's alone
  assert os.listdir(temp) == [FOREIGN]


def test_cleanup_between_runs_removes_new_files_and_keeps_functions_working(tmp_path):
  temp = tmp_path / "temp"
  temp.mkdir()
  proc = _python("""
      import json, os, tempfile
      from nascli import runtime
      import tensorflow as tf
      tmp = tempfile.gettempdir()

      def step(x):
        for i in tf.range(3):
          x += tf.cast(i, x.dtype)
        return x

      first = tf.function(step)(tf.constant(1.0)).numpy()
      removed_first = runtime.cleanup_temp_files()
      left_first = os.listdir(tmp)
      # A new trace of the same function (a new trial's model): the conversion is cached, and
      # the converted code runs without its file.
      second = tf.function(step)(tf.constant(1.0)).numpy()
      removed_second = runtime.cleanup_temp_files()
      print(json.dumps({"values": [float(first), float(second)], "removed_first":
                        len(removed_first), "left_first": left_first,
                        "removed_second": len(removed_second), "left": os.listdir(tmp)}))
      """, tmp_path, env={"TMPDIR": str(temp), "TF_CPP_MIN_LOG_LEVEL": "3"})
  assert proc.returncode == 0, proc.stderr
  report = json.loads(proc.stdout)
  assert report["values"] == [4.0, 4.0]
  assert report["removed_first"] >= 1 and report["left_first"] == []
  assert report["removed_second"] == 0 and report["left"] == []
  assert os.listdir(temp) == []  # and TF's own exit handlers did not mind


# Slow tier: the cleanup it checks in a real `nascli train` is checked in-process by the
# default tier (test_finish_removes_this_process_autograph_files_only).
@pytest.mark.slow
def test_nascli_train_removes_the_autograph_files_it_wrote(tmp_path):
  """`python -m nascli train` as a user runs it, with a probe around the cleanup: the files are
  there just before os._exit (so without the cleanup they would be left), and then gone."""
  data = convert_digits32(tmp_path / "digits32", num_shards=2)
  temp = tmp_path / "temp"
  temp.mkdir()
  (temp / FOREIGN).write_text("x = 1\n")
  report = tmp_path / "probe.json"
  argv = ["nascli", "train", "--dataset_dir", data, "--model_dir", str(tmp_path / "run"),
          "--experiment", "nas_classification_tunable_mnasnet", "--config_file",
          "tf_vision/test_files/fast_nas_classification_search_for_testing.yaml",
          "--params_override", "trainer.train_steps=10,trainer.steps_per_loop=5", "--json"]
  proc = _python(f"""
      import json, os, runpy, sys
      from nascli import runtime
      cleanup = runtime.cleanup_temp_files
      def probe():
        before = sorted(os.listdir({str(temp)!r}))
        removed = cleanup()
        with open({str(report)!r}, "w") as f:
          json.dump({{"before": before, "removed": removed}}, f)
        return removed
      runtime.cleanup_temp_files = probe
      sys.argv = {argv!r}
      runpy.run_module("nascli", run_name="__main__", alter_sys=True)  # python -m nascli
      """, env={"TMPDIR": str(temp)})
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert json.loads(proc.stdout)["step"] == 10
  probe = json.loads(report.read_text())
  written = [n for n in probe["before"] if n != FOREIGN]
  assert len(written) >= 5, probe  # the train and eval steps, the data pipeline
  assert all(n.startswith("__autograph_generated_file") and n.endswith(".py") for n in written)
  assert sorted(os.path.basename(p) for p in probe["removed"]) == written
  assert {os.path.dirname(p) for p in probe["removed"]} == {str(temp)}
  assert os.listdir(temp) == [FOREIGN]
