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
from train_logs import log_steps, train_until_logged

TRAIN_STEPS = 120
# Loops of 10 steps; no interval checkpoint before the end, so the one found at the interrupt
# step was saved by the interrupt.
OVERRIDE = (f"trainer.train_steps={TRAIN_STEPS},trainer.steps_per_loop=10,"
            "trainer.checkpoint_interval=1000")
# One training loop of all the steps: an interrupt that waited for the end of the loop would stop
# only at its end (the issue: minutes with steps_per_loop 1,222).
ONE_LOOP_STEPS = 80
ONE_LOOP = (f"trainer.train_steps={ONE_LOOP_STEPS},trainer.steps_per_loop={ONE_LOOP_STEPS},"
            f"trainer.checkpoint_interval={10 * ONE_LOOP_STEPS}")
_STOPPING = "\nCtrl-C: stopping at the next step; Ctrl-C again stops at once\n"
STEPS_PER_EPOCH = 1079 // 32
_LINE = re.compile(r"^Interrupted \((Ctrl-C|SIGTERM)\): training (\S+) at step (\d+) \(checkpoint"
                   r" saved\); run the same command again to resume from step (\d+)$")


@pytest.fixture(scope="module")
def digits32(tmp_path_factory):
  return convert_digits32(tmp_path_factory.mktemp("digits32"), num_shards=4)


def _args(digits32, model_dir):
  return ["train", "--dataset_dir", digits32, "--model_dir", str(model_dir), "--mode", "train",
          "--params_override", OVERRIDE]


def _log_steps(model_dir):
  return log_steps(model_dir, STEPS_PER_EPOCH)


def _metrics_steps(model_dir):
  with open(os.path.join(model_dir, "train_metrics.jsonl"), encoding="utf-8") as f:
    return [json.loads(line)["step"] for line in f]


def _interrupt_training(args, model_dir, err_path, signum):
  """Starts `nascli train`, sends `signum` once step 20 is logged; returns (code, stderr)."""
  with open(err_path, "w", encoding="utf-8") as err:
    proc = train_until_logged(args, model_dir, 2, 300, stderr=err)
    assert proc.poll() is None, "training ended before the signal"
    proc.send_signal(signum)
    code = proc.wait(timeout=120)
  with open(err_path, encoding="utf-8") as f:
    return code, f.read()


def _cpu_ticks(stat_path):
  """utime + stime of a process or thread, from its /proc stat file."""
  with open(stat_path, encoding="ascii") as f:
    fields = f.read().rsplit(")", 1)[1].split()
  return int(fields[11]) + int(fields[12])


def _sigint_in_one_loop(digits32, model_dir, err):
  """Starts `nascli train` of one loop of all the steps (ONE_LOOP) into `model_dir`, and sends it
  Ctrl-C once that loop runs steps; returns (its arguments, the process).

  The loop is one graph call, which reports nothing before its end: it runs once the main thread
  idles (waiting in that call) while the process works (TensorFlow's threads run the steps), for
  two seconds in a row. Before it, tracing the loop keeps the main thread busy.
  """
  args = ["train", "--dataset_dir", digits32, "--model_dir", str(model_dir), "--mode", "train",
          "--params_override", ONE_LOOP]
  proc = subprocess.Popen([sys.executable, "-m", "nascli", *args, "--verbose"],
                          stdout=subprocess.DEVNULL, stderr=err,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  main, whole = f"/proc/{proc.pid}/task/{proc.pid}/stat", f"/proc/{proc.pid}/stat"
  deadline = time.monotonic() + 300
  while time.monotonic() < deadline and proc.poll() is None:  # Orbit's line before the loop
    with open(err.name, encoding="utf-8") as f:
      if "training until step" in f.read():
        break
    time.sleep(0.1)
  try:
    idle_for, last = 0, (_cpu_ticks(main), _cpu_ticks(whole))
    while time.monotonic() < deadline and idle_for < 4:
      time.sleep(0.5)
      now = (_cpu_ticks(main), _cpu_ticks(whole))
      idle_for = idle_for + 1 if now[0] - last[0] <= 1 and now[1] - last[1] >= 10 else 0
      last = now
  except FileNotFoundError:  # it exited
    pass
  with open(err.name, encoding="utf-8") as f:
    assert proc.poll() is None, f"training ended before the signal:\n{f.read()}"
  proc.send_signal(signal.SIGINT)
  return args, proc


def _stopping_line_then(err_path, proc, seconds=60):
  """Waits for the first signal's line on stderr (said at once, while the loop still runs)."""
  deadline = time.monotonic() + seconds
  while time.monotonic() < deadline and proc.poll() is None:
    with open(err_path, encoding="utf-8") as f:
      if _STOPPING in f.read():
        return True
    time.sleep(0.05)
  return False


def test_sigint_stops_inside_a_long_loop_and_the_rerun_resumes_there(digits32, tmp_path):
  """One loop of all the steps: Ctrl-C says at once that it stops, stops at the next step (not
  at the loop's end), checkpoints there and exits 130; the same command again resumes there
  and trains to the planned step on the same learning-rate schedule."""
  model_dir = tmp_path / "run"
  err_path = tmp_path / "err.txt"
  with open(err_path, "w", encoding="utf-8") as err:
    args, proc = _sigint_in_one_loop(digits32, model_dir, err)
    code = proc.wait(timeout=120)
  err = err_path.read_text()
  assert code == 130, err
  match = _LINE.match(err.strip().splitlines()[-1])
  assert match, err
  step = int(match.group(3))
  assert 0 < step < ONE_LOOP_STEPS and int(match.group(4)) == step, err  # inside the loop
  assert _STOPPING in err, err
  assert "Traceback" not in err and "did not update" not in err, err
  assert (model_dir / f"ckpt-{step}.index").exists()
  assert f'model_checkpoint_path: "ckpt-{step}"' in (model_dir / "checkpoint").read_text()
  # The stopped loop's line and metrics are written, at the step it stopped at.
  assert _log_steps(model_dir) == [step] and _metrics_steps(model_dir) == [step]
  status = json.loads((model_dir / "job_status.json").read_text())
  assert (status["status"], status["step"], status["checkpoint_step"], status["signal"]) == (
      "interrupted", step, step, "SIGINT")

  resumed = nascli_subprocess(*args, "--json")
  assert resumed.returncode == 0, resumed.stderr
  assert f"resuming from the checkpoint at step {step}\n" in resumed.stderr
  result = json.loads(resumed.stdout)
  assert (result["step"], result["resumed_from"]) == (ONE_LOOP_STEPS, step)
  assert _log_steps(model_dir) == [step, ONE_LOOP_STEPS]
  # The schedule is that of the planned steps, before and after the stop.
  # pylint: disable=g-import-not-at-top
  from official.modeling.hyperparams import params_dict
  from official.modeling.optimization import optimizer_factory
  from tf_vision.configs import optimization
  config = optimization.OptimizationConfig()
  config.override(params_dict.read_yaml_to_params_dict(str(model_dir / "params.yaml"))
                  .trainer.optimizer_config.as_dict())
  schedule = optimizer_factory.OptimizerFactory(config).build_learning_rate()
  with open(model_dir / "train_metrics.jsonl", encoding="utf-8") as f:
    logged = {r["step"]: r["learning_rate"] for r in map(json.loads, f)}
  assert sorted(logged) == [step, ONE_LOOP_STEPS]
  for at, rate in logged.items():
    assert rate == pytest.approx(float(schedule(at)), rel=1e-5), at


# Slow tier (a training process of its own, 50 s): the default tier stops at once on the second
# signal inside a deferred section (test_a_second_signal_in_a_train_loop_stops_at_once) and
# Ctrl-C inside one long loop (test_sigint_stops_inside_a_long_loop_and_the_rerun_resumes_there).
@pytest.mark.slow
def test_a_second_sigint_inside_a_long_loop_exits_at_once(digits32, tmp_path):
  """The second Ctrl-C does not wait for the loop, nor for the stop at the next step."""
  model_dir = tmp_path / "run"
  err_path = tmp_path / "err.txt"
  with open(err_path, "w", encoding="utf-8") as err:
    _, proc = _sigint_in_one_loop(digits32, model_dir, err)
    said = _stopping_line_then(err_path, proc)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=30)
  err = err_path.read_text()
  assert said and code == 130, err
  assert err.endswith(_STOPPING + "\nInterrupted again: stopping at once.\n"), err
  # Nothing that looks complete: no `completed`, and a checkpoint the index names is whole.
  status = json.loads((model_dir / "job_status.json").read_text())
  assert status["status"] in ("running", "interrupted"), status
  index = model_dir / "checkpoint"
  if index.exists():
    name = re.search(r'^model_checkpoint_path: "(.+)"', index.read_text(), re.M).group(1)
    assert (model_dir / f"{name}.index").exists()


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


def test_a_relayed_repeat_is_the_same_interrupt():
  """A trial worker gets a Ctrl-C from its process group and again from its driver: the repeat
  must not end it before the trial records `interrupted` (the driver's second Ctrl-C does)."""
  code = ("import os, signal, time\n"
          "from nascli import interrupts\n"
          "interrupts.relayed()\n"
          "try:\n"
          "  with interrupts.handled(), interrupts.deferred('this test'):\n"
          "    os.kill(os.getpid(), signal.SIGINT)\n"
          "    time.sleep(0.2)\n"
          "    os.kill(os.getpid(), signal.SIGINT)\n"
          "    time.sleep(0.2)\n"
          "except interrupts.Interrupted as e:\n"
          "  print('interrupted once', e.exit_code)\n")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        check=False, timeout=300)
  assert (proc.returncode, proc.stdout) == (0, "interrupted once 130\n"), proc.stderr


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
