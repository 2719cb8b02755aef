"""A trial trained in early-stopping rungs is the trial trained in one go (issue 26): each rung
resumes from a checkpoint that also holds the training input's position (tf.data iterator
state: shuffle buffer, cache) and the dropout generators' state, so the resumed attempts read
the same batches and draw the same masks as one uninterrupted training."""

import json

from conftest import journal_events, nascli_subprocess

SHORT = "trainer.train_steps=40,trainer.steps_per_loop=10,trainer.checkpoint_interval=10"


def _search(job, *flags):
  proc = nascli_subprocess("search_in_local", "--max_nas_trial", "1", "--params_override",
                           SHORT, "--local_output_dir", str(job), "--json", *flags)
  assert proc.returncode == 0, proc.stderr[-2000:]
  return json.loads(proc.stdout)


def test_a_trial_promoted_through_every_rung_ends_with_the_one_go_metrics(tmp_path):
  """The same architecture and seed: 40 steps in one attempt, and in rungs of 10, 20 and 40
  steps (three attempts, each resuming the last one's checkpoint): equal accuracy and loss, to
  the last bit."""
  one_go = _search(tmp_path / "one_go")
  rungs = _search(tmp_path / "rungs", "--early_stopping", "asha", "--min_steps", "10",
                  "--reduction_factor", "2")
  events = journal_events(tmp_path / "rungs")
  assert [e["event"] for e in events if e["event"] in ("started", "rung", "promoted")] == [
      "started", "rung", "promoted", "started", "rung", "promoted", "started"]
  (a,), (b,) = one_go, rungs
  assert a["nas_params"] == b["nas_params"] and a["status"] == b["status"] == "completed"
  analyses = [json.loads((job / "1" / "model_analysis.json").read_text())
              for job in (tmp_path / "one_go", tmp_path / "rungs")]
  assert analyses[1]["resumed_from"] == 20 and analyses[1]["rung"] == 2
  assert analyses[0]["eval_metrics"] == analyses[1]["eval_metrics"]
  assert set(analyses[0]["eval_metrics"]) >= {"accuracy", "top_5_accuracy", "validation_loss"}
  assert a["accuracy"] == b["accuracy"] == analyses[0]["eval_metrics"]["accuracy"]
