"""Ctrl-C and SIGTERM during `nascli train`, `eval` and `export`: one line, exit 130 / 143,
`interrupted` in job_status.json, a checkpoint at the step reached, and a rerun that resumes
there and ends where the uninterrupted run would."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import convert_digits32
from conftest import nascli_subprocess
from conftest import restore_tensorflow_scopes

TRAIN_STEPS = 120
# Loops of 10 steps; no interval checkpoint before the end, so the one found at the interrupt
# step was saved by the interrupt.
OVERRIDE = (f"trainer.train_steps={TRAIN_STEPS},trainer.steps_per_loop=10,"
            "trainer.checkpoint_interval=1000")
STEPS_PER_EPOCH = 1438 // 32
_LINE = re.compile(r"^Interrupted \((Ctrl-C|SIGTERM)\): training (\S+) at step (\d+) \(checkpoint"
                   r" saved\); run the same command again to resume from step (\d+)$")


@pytest.fixture(scope="module")
def digits32(tmp_path_factory):
  return convert_digits32(tmp_path_factory.mktemp("digits32"), num_shards=4)


def _args(digits32, model_dir):
  return ["train", "--dataset_dir", digits32, "--model_dir", str(model_dir), "--mode", "train",
          "--params_override", OVERRIDE]


def _log_steps(model_dir):
  steps = []
  with open(os.path.join(model_dir, "log"), encoding="utf-8") as f:
    for line in f:
      epoch, rest = line.split(" step: ")
      steps.append((int(epoch.split()[1]) - 1) * STEPS_PER_EPOCH + int(rest.split(",")[0]))
  return steps


def _metrics_steps(model_dir):
  with open(os.path.join(model_dir, "train_metrics.jsonl"), encoding="utf-8") as f:
    return [json.loads(line)["step"] for line in f]


def _interrupt_training(args, model_dir, err_path, signum):
  """Starts `nascli train`, sends `signum` once step 20 is logged; returns (code, stderr)."""
  with open(err_path, "w", encoding="utf-8") as err:
    proc = subprocess.Popen([sys.executable, "-m", "nascli", *args], stdout=subprocess.DEVNULL,
                            stderr=err, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    log = model_dir / "log"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
      if log.exists() and len(log.read_text().splitlines()) >= 2:
        break
      time.sleep(0.05)
    assert proc.poll() is None, "training ended before the signal"
    proc.send_signal(signum)
    code = proc.wait(timeout=120)
  with open(err_path, encoding="utf-8") as f:
    return code, f.read()


def test_sigint_saves_a_checkpoint_there_and_the_rerun_resumes_from_it(digits32, tmp_path):
  model_dir = tmp_path / "run"
  args = _args(digits32, model_dir)
  code, err = _interrupt_training(args, model_dir, tmp_path / "err.txt", signal.SIGINT)
  assert code == 130, err
  last = err.strip().splitlines()[-1]
  match = _LINE.match(last)
  assert match, err
  assert match.group(1) == "Ctrl-C" and match.group(2) == str(model_dir)
  step = int(match.group(3))
  assert int(match.group(4)) == step and 20 <= step < TRAIN_STEPS, last
  assert "Traceback" not in err
  # Stopped at the end of a loop: the log, the metrics and the checkpoint all end at that step.
  assert _log_steps(model_dir) == list(range(10, step + 1, 10))
  assert _metrics_steps(model_dir) == list(range(10, step + 1, 10))
  assert (model_dir / f"ckpt-{step}.index").exists()
  assert f'model_checkpoint_path: "ckpt-{step}"' in (model_dir / "checkpoint").read_text()
  status = json.loads((model_dir / "job_status.json").read_text())
  assert (status["status"], status["step"], status["checkpoint_step"], status["signal"]) == (
      "interrupted", step, step, "SIGINT")

  resumed = nascli_subprocess(*args, "--json")
  assert resumed.returncode == 0, resumed.stderr
  assert f"resuming from the checkpoint at step {step}\n" in resumed.stderr
  result = json.loads(resumed.stdout)
  assert (result["step"], result["resumed_from"]) == (TRAIN_STEPS, step)
  # One line per loop, none repeated or missing across the interrupt.
  assert _log_steps(model_dir) == list(range(10, TRAIN_STEPS + 1, 10))
  assert _metrics_steps(model_dir) == list(range(10, TRAIN_STEPS + 1, 10))
  status = json.loads((model_dir / "job_status.json").read_text())
  assert (status["status"], status["step"]) == ("completed", TRAIN_STEPS)


@pytest.fixture(scope="module")
def sigterm_run(digits32, tmp_path_factory):
  """A run stopped by SIGTERM: (exit code, stderr, model dir); eval and export read it too."""
  tmp = tmp_path_factory.mktemp("sigterm")
  model_dir = tmp / "run"
  code, err = _interrupt_training(_args(digits32, model_dir), model_dir, tmp / "err.txt",
                                  signal.SIGTERM)
  return code, err, model_dir


def test_sigterm_leaves_interrupted_and_exits_143(sigterm_run):
  code, err, model_dir = sigterm_run
  assert code == 143, err
  match = _LINE.match(err.strip().splitlines()[-1])
  assert match and match.group(1) == "SIGTERM", err
  step = int(match.group(3))
  assert (model_dir / f"ckpt-{step}.index").exists()
  status = json.loads((model_dir / "job_status.json").read_text())
  assert (status["status"], status["step"], status["signal"]) == ("interrupted", step, "SIGTERM")


def test_a_signal_in_a_train_loop_waits_for_its_end():
  """The first signal is held to the end of the block and raised there as nascli's Interrupted;
  outside such a block it is raised at once, as before."""
  from nascli import interrupts  # pylint: disable=g-import-not-at-top
  reached = []
  with interrupts.handled():
    with pytest.raises(interrupts.Interrupted) as e:
      with interrupts.deferred("this test"):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the handler has run by now
        reached.append(interrupts.received())
    assert reached == [signal.SIGTERM] and e.value.exit_code == 143
  with interrupts.handled():  # afresh: a second signal in one block would end pytest
    with pytest.raises(interrupts.Interrupted):
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(0.2)
      reached.append("not reached")
  assert reached == [signal.SIGTERM]


def test_a_second_signal_in_a_train_loop_stops_at_once():
  """Holding the first signal back must not swallow the second (a run the user cannot stop)."""
  code = ("import os, signal, time\n"
          "from nascli import interrupts\n"
          "with interrupts.handled(), interrupts.deferred('this test'):\n"
          "  os.kill(os.getpid(), signal.SIGINT)\n"
          "  time.sleep(0.2)\n"
          "  os.kill(os.getpid(), signal.SIGINT)\n"
          "  time.sleep(5)\n"
          "print('not stopped')\n")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        check=False, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert proc.returncode == 130 and proc.stdout == "", proc.stderr
  assert proc.stderr.endswith("Ctrl-C: stopping after this test; Ctrl-C again stops at once\n"
                              "\nInterrupted again: stopping at once.\n"), proc.stderr


def _in_process_interrupt(cli, delay, *args):
  """Runs a command in this process (TensorFlow already loaded) with a SIGINT after `delay` s."""
  from nascli import frameworks  # pylint: disable=g-import-not-at-top
  frameworks.load()
  timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
  timer.start()
  try:
    return cli(*args)
  finally:
    timer.cancel()
    restore_tensorflow_scopes()  # the signal may have landed inside a strategy scope's entry


@pytest.fixture
def trained(sigterm_run):
  model_dir = sigterm_run[2]
  assert (model_dir / "checkpoint").exists(), sigterm_run[1]
  return model_dir


def _interrupted_run(cli, output, *args):
  """An in-process interrupt, sent again if it was lost: a signal whose handler runs inside a
  finalizer or weakref callback raises there, where Python ignores exceptions (seen in CI: the
  eval then ran to its end). A lost one leaves a complete result, removed before the retry."""
  for delay in (0.5, 0.8, 1.1):
    code, out, err = _in_process_interrupt(cli, delay, *args)
    if code != 0:
      return code, out, err
    assert out.startswith(("result: ", "exported ")), out  # it ran to its end
    if output.is_dir():
      shutil.rmtree(output)
    elif output.exists():
      output.unlink()
  return code, out, err


def test_eval_interrupted_says_what_in_one_line(cli, trained):
  code, out, err = _interrupted_run(cli, trained / "eval_metrics.json", "eval", "--model_dir",
                                    trained)
  assert (code, out) == (130, ""), err
  assert err == (f"Interrupted (Ctrl-C): evaluating {trained}; run the same command again\n")
  assert not (trained / "eval_metrics.json").exists()


def test_export_interrupted_says_what_in_one_line(cli, trained, tmp_path):
  export_dir = tmp_path / "export"
  code, out, err = _interrupted_run(cli, export_dir, "export", "--model_dir", trained,
                                    "--export_dir", export_dir)
  assert (code, out) == (130, ""), err
  assert err == (f"Interrupted (Ctrl-C): exporting {trained} to {export_dir}; run the same"
                 " command again\n")
  assert not export_dir.exists() and not list(tmp_path.glob(".export.partial-*"))


def test_an_error_raised_once_a_signal_arrived_counts_as_the_interrupt(capsys):
  """A signal that lands while TensorFlow's C++ code runs Python can come back as TensorFlow's
  own error: it is still reported as the interrupt (its exit code, no 'unexpected' error)."""
  from nascli import interrupts  # pylint: disable=g-import-not-at-top
  with interrupts.handled():
    with pytest.raises(RuntimeError) as e:
      with interrupts.deferred("this test"):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        raise RuntimeError("a library's own error")
    assert interrupts.caused(e.value) and interrupts.exit_code(e.value) == 143
    assert interrupts.message(e.value) == "Interrupted (SIGTERM)"
  with interrupts.handled():
    assert not interrupts.caused(RuntimeError("no signal"))
  capsys.readouterr()
