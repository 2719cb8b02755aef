"""A trial trained in early-stopping rungs is the trial trained in one go (issue 26), whether its
warm worker continues it in memory (the model, optimizer, input iterator and traced functions
kept since the last rung: --paused_trials_per_worker) or resumes it from a checkpoint that
also holds the training input's position (tf.data iterator state: shuffle buffer, cache) and the
dropout generators' state: either way the later attempts read the same batches and draw the same
masks as one uninterrupted training."""

import json
import types

import pytest

from conftest import journal_events, nascli_subprocess

SHORT = "trainer.train_steps=40,trainer.steps_per_loop=10,trainer.checkpoint_interval=10"


def _search(job, *flags):
  # No end-of-search export: nothing here reads it (tests/test_search_local.py checks it).
  proc = nascli_subprocess("search_in_local", "--max_nas_trial", "1", "--params_override",
                           SHORT, "--export_top_k", "0", "--local_output_dir", str(job), "--json",
                           *flags)
  assert proc.returncode == 0, proc.stderr[-2000:]
  return json.loads(proc.stdout)


def test_a_trial_promoted_through_every_rung_ends_with_the_one_go_metrics(tmp_path):
  """The same architecture and seed: 40 steps in one attempt, and in rungs of 10, 20 and 40
  steps (three attempts), continued in the warm worker's memory (the default) or resumed from
  the last rung's checkpoint (--paused_trials_per_worker 0): equal accuracy and loss, to the
  last bit."""
  rung_flags = ("--early_stopping", "asha", "--min_steps", "10", "--reduction_factor", "2")
  one_go = _search(tmp_path / "one_go")
  in_memory = _search(tmp_path / "in_memory", *rung_flags)
  resumed = _search(tmp_path / "resumed", *rung_flags, "--paused_trials_per_worker", "0")
  for job, kept in (("in_memory", True), ("resumed", False)):
    events = journal_events(tmp_path / job)
    assert [e["event"] for e in events if e["event"] in ("started", "rung", "promoted")] == [
        "started", "rung", "promoted", "started", "rung", "promoted", "started"]
    # Which attempts went on in memory, as the journal records it: the later rungs, when kept.
    assert [e["metrics"]["in_memory"] for e in events if e["event"] in ("rung", "completed")
            ] == [False, kept, kept]
    log = (tmp_path / job / "1" / "trial.log").read_text()
    assert log.count("in memory (the model, optimizer and input") == (2 if kept else 0)
    assert log.count("resuming from the checkpoint at step") == (0 if kept else 2)
  analyses = {job: json.loads((tmp_path / job / "1" / "model_analysis.json").read_text())
              for job in ("one_go", "in_memory", "resumed")}
  for job in ("in_memory", "resumed"):
    assert analyses[job]["resumed_from"] == 20 and analyses[job]["rung"] == 2
    assert analyses[job]["eval_metrics"] == analyses["one_go"]["eval_metrics"], job
  assert set(analyses["one_go"]["eval_metrics"]) >= {"accuracy", "top_5_accuracy",
                                                     "validation_loss"}
  (a,), (b,), (c,) = one_go, in_memory, resumed
  assert a["nas_params"] == b["nas_params"] == c["nas_params"]
  assert a["status"] == b["status"] == c["status"] == "completed"
  assert a["accuracy"] == b["accuracy"] == c["accuracy"] == (
      analyses["one_go"]["eval_metrics"]["accuracy"])


def _state(step):
  """What PausedRuns reads of a kept run: its trainer's global step (a real tf.Variable)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  trainer = types.SimpleNamespace(global_step=tf.Variable(step, dtype=tf.int64))
  return types.SimpleNamespace(runner=types.SimpleNamespace(trainer=trainer), in_loop=True,
                               evaluating=True, writing_checkpoint=False)


@pytest.mark.parametrize("limit", [1, 2])
def test_paused_runs_continue_only_the_same_run_at_its_step(tmp_path, limit):
  """A kept run is taken once, for the same model dir and config, at the step it paused at; a
  later checkpoint (another worker trained the trial on), another config, or a run pushed out
  by `limit` newer ones is let go (the caller resumes from the checkpoint)."""
  from tf_vision import train_lib  # pylint: disable=g-import-not-at-top
  runs = train_lib.PausedRuns()
  a, b, c = (str(tmp_path / name) for name in "abc")
  runs.keep(a, "config", _state(10), limit)
  runs.keep(b, "config", _state(30), limit)
  assert len(runs) == limit
  taken = runs.take(b, "config", 30)
  assert taken is not None and int(taken.runner.trainer.global_step.numpy()) == 30
  assert not taken.in_loop and not taken.evaluating  # reset as it was kept
  assert runs.take(b, "config", 30) is None  # taken: it is the caller's now
  assert (runs.take(a, "config", 10) is not None) == (limit == 2)  # the oldest, beyond 1
  runs.keep(c, "config", _state(20), limit)
  assert runs.take(c, "config", 60) is None  # the trial's checkpoint moved on elsewhere
  runs.keep(c, "config", _state(20), limit)
  assert runs.take(c, "other config", 20) is None
  assert len(runs) == 0


# Slow tier: that a trial trained in rungs ends as the one-go trial is checked in the default
# tier on classification (test_a_trial_promoted_through_every_rung_ends_with_the_one_go_metrics).
@pytest.mark.slow
def test_a_detection_trial_trains_in_rungs(tmp_path):
  """The default spinenet search's trials (RetinaNet on the embedded shapes, whose input draws
  random augmentations with stateful ops that a checkpoint cannot hold) checkpoint their input
  without those ops' state and train in rungs: rung 1 continues in memory, and the trial
  completes with its COCO metrics."""
  steps = ("trainer.train_steps=4,trainer.steps_per_loop=2,trainer.summary_interval=2,"
           "trainer.checkpoint_interval=2,trainer.validation_interval=4,"
           "trainer.optimizer_config.learning_rate.cosine.decay_steps=4,"
           "trainer.optimizer_config.warmup.linear.warmup_steps=1")
  proc = nascli_subprocess(
      "search_in_local", "--prebuilt_search_space=spinenet", "--max_nas_trial", "1",
      "--params_override", steps, "--early_stopping", "asha", "--min_steps", "2",
      "--reduction_factor", "2", "--export_top_k", "0", "--local_output_dir",
      str(tmp_path / "job"), "--json")
  assert proc.returncode == 0, proc.stderr[-2000:]
  (row,) = json.loads(proc.stdout)
  assert row["status"] == "completed"
  events = journal_events(tmp_path / "job")
  assert [(e["event"], e["metrics"]["step"], e["metrics"]["in_memory"]) for e in events
          if e["event"] in ("rung", "completed")] == [("rung", 2, False), ("completed", 4, True)]
  analysis = json.loads((tmp_path / "job" / "1" / "model_analysis.json").read_text())
  assert analysis["accuracy_metric"] == "AP" and {"AP", "AP50"} <= set(analysis["eval_metrics"])
  assert 0.0 <= analysis["accuracy"] <= 1.0 and analysis["step"] == 4
  log = (tmp_path / "job" / "1" / "trial.log").read_text()
  assert "random augmentations with stateful ops" in log
