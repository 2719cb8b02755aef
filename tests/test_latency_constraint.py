"""--latency_model in a search (issue 46, item 2): every proposal's latency predicted before it
trains, proposals over a hard target journaled `over_target` and never trained, their penalty
told to the controller and replayed on resume, refusals in one line before anything is journaled.

The latency models are real ones, fitted by nascli.latency_model.build on rows made here for the
real mnasnet space (latency a fixed function of the decisions). The driver is the real
SearchLoop, its controller the real TPE; only the trials' training is left out in most tests:
their executor records each attempt as nascli.search.trial would (accuracy a fixed function of
the architecture, the latency the driver predicted, the reward by reward.py), and preflight's
config check answers what the testing YAML's config gives. One end-to-end `search_in_local` and
one real trial process train for real.
"""

import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import journal_events
from conftest import main_in_fresh_interpreter
from conftest import nascli_subprocess
from nascli import latency_model as lm
from nascli.errors import NascliError
from nascli.run_spec import RunSpec
from nascli.run_spec import TrialSettings
from nascli.search import executors
from nascli.search import journal as journal_lib
from nascli.search import latency_gate
from nascli.search import preflight
from nascli.search import resume
from nascli.search import reward as reward_lib
from nascli.search import search_loop
from nascli.search import trial as trial_lib
from nascli.search import warm_workers
from nascli.search import writers
from nascli.search.controller import Controller
from nascli.search.controller import ReplayMismatchError
from tf_vision import job_status
from tf_vision import search_spaces

TARGET = 0.8  # ms; random mnasnet architectures are predicted at about 0.88 +- 0.1 ms here
MARGIN = 0.1
LIMIT = TARGET * (1 + MARGIN)
SEED = 8  # TPE's first proposals at this seed: over, within the margin, over, under
SHORT = "trainer.train_steps=20,trainer.steps_per_loop=10,trainer.checkpoint_interval=10"


def indices(nas_params):
  return [int(v.split("/")[0]) for v in nas_params.values()]


def latency_of(nas_params):
  """The "measured" latency the models are fitted on: linear in the candidate indices, so the
  fitted model predicts it closely and its fastest architecture (all zeros) is 0.2 ms."""
  return 0.2 + 0.02 * sum(indices(nas_params))


def accuracy_of(nas_params):
  """A fixed accuracy landscape over the architectures, in [0.3, 0.9]."""
  i = indices(nas_params)
  return 0.3 + 0.6 * sum(x * (k % 3) for k, x in enumerate(i)) / (2 * 2 * len(i))


def _architectures(decisions, count, seed):
  rng = random.Random(seed)
  return [{k: f"{i}/{len(v)} ({v[i]})" for k, v in decisions.items()
           for i in [rng.randrange(len(v))]} for _ in range(count)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  """Latency model files: `m32` fitted at 32x32 (the testing YAML's input size), the same model
  at 224x224, of another space's name, of another mnasnet (a candidate renamed), a corrupt and
  a truncated file."""
  out = tmp_path_factory.mktemp("latency_models")
  decisions = lm.decisions_of_space("mnasnet")
  rows = [(a, latency_of(a)) for a in _architectures(decisions, 100, 0)]
  model = lm.build(rows[:80], rows[80:], space="mnasnet", decisions=decisions,
                   runtime="cpu-tflite", runtime_version="test", device="test cpu",
                   input_size=32, num_threads=1, seed=0)
  paths = {name: str(out / f"{name}.json") for name in
           ("m32", "m224", "spinenet", "renamed", "corrupt", "truncated")}
  model.save(paths["m32"])
  dataclasses.replace(model, input_size=224).save(paths["m224"])
  dataclasses.replace(model, space="spinenet").save(paths["spinenet"])
  renamed = json.loads(json.dumps(decisions))
  first = next(iter(renamed))
  renamed[first][0] = "7"
  dataclasses.replace(model, decisions=renamed).save(paths["renamed"])
  text = open(paths["m32"], encoding="utf-8").read()
  with open(paths["corrupt"], "w", encoding="utf-8") as f:
    f.write(text.replace('"space"', '"spac e"', 1))
  with open(paths["truncated"], "w", encoding="utf-8") as f:
    f.write(text[:len(text) // 2])
  return paths


class _Executor(executors.Executor):
  """Attempts that end at their first poll, recorded as nascli.search.trial records a trial
  that trained: accuracy_of the architecture, the latency the driver predicted for it
  (TrialSpec.predicted_latency), the reward by reward.py. `started`: the specs, in order."""

  def __init__(self):
    self.started = []

  def slots(self, max_parallel):
    return [None] * max_parallel

  def prestart(self, count, log_dir):
    del count, log_dir

  def start(self, spec_path, trial_dir, slot, publish_to=None):
    spec = trial_lib.read_spec(spec_path)
    self.started.append(spec)
    return spec

  def poll(self, handle):
    spec, settings = handle, handle.trial
    accuracy = accuracy_of(spec.nas_params)
    predicted = spec.predicted_latency
    analysis = {"accuracy": accuracy, "latency_ms": predicted["latency_ms"],
                "latency_device": predicted["latency_device"], "params": 1000, "flops": 5000,
                "seconds": 0.1,
                "reward": reward_lib.compute(accuracy, predicted["latency_ms"],
                                             settings.target_device_latency_ms,
                                             settings.latency_constraint,
                                             settings.latency_weight)}
    with open(os.path.join(spec.trial_dir, "model_analysis.json"), "w", encoding="utf-8") as f:
      json.dump(analysis, f)
    job_status.write(spec.trial_dir, job_status.COMPLETED)
    return executors.Outcome(returncode=0)

  def interrupt(self, handles, signum):
    del handles, signum

  def close(self):
    pass


class _Check:
  def remove(self):
    pass


class _Checker:
  log_path = "config-check.log"

  def close(self):
    pass


def _stub_preflight(set_attr, input_size=32):
  """preflight's config check, answered as the testing YAML's config would be (20 steps, 32x32
  input) without a worker; and no derived outputs (writers.py, tested on their own: the search
  below and test_search_results.py), whose plots would cost most of these searches' time."""
  set_attr(writers.Outputs, "update", lambda self, state: [])
  set_attr(preflight, "prepare", lambda args: _Check())
  set_attr(warm_workers, "start_config_check", lambda executor, check, log_dir: _Checker())
  set_attr(preflight, "wait", lambda check, checker, log: {
      "train_steps": 20, "steps_per_epoch": None, "latency_input_size": input_size})


def _args(job, model, *, target=TARGET, margin=MARGIN, constraint="hard", max_nas_trial=6,
          algorithm="tpe", **extra):
  trial = TrialSettings(run=RunSpec(seed=SEED), target_device_latency_ms=target,
                        latency_constraint=constraint, latency_margin=margin,
                        latency_model=latency_gate.reference(model))
  options = {"n_startup_trials": 3} if algorithm == "tpe" else {}
  return search_loop.SearchArgs(job_dir=str(job), search_space="mnasnet",
                                search_algorithm=algorithm, algorithm_options=options,
                                max_nas_trial=max_nas_trial, export_top_k=0, trial=trial,
                                **extra)


def _search(args):
  """Runs the real SearchLoop with the executor above; returns (loop, final state)."""
  loop = search_loop.SearchLoop(args, _Executor())
  return loop, loop.run()


def _decisions(job):
  """What a search decided, from its journal: the proposals in order, and which were over."""
  events = journal_events(job)
  return ([(e["trial_id"], e["dna"]) for e in events if e["event"] == "proposed"],
          [(e["trial_id"], e["reward"]) for e in events if e["event"] == "over_target"],
          [(e["trial_id"], e["reward"]) for e in events if e["event"] == "completed"])


@pytest.fixture(scope="module")
def hard_search(models, tmp_path_factory):
  """The uninterrupted hard-constraint search the tests compare with: (job dir, loop, state)."""
  with pytest.MonkeyPatch.context() as mp:
    _stub_preflight(mp.setattr)
    job = tmp_path_factory.mktemp("hard") / "job"
    loop, state = _search(_args(job, models["m32"]))
  return job, loop, state


def test_no_architecture_predicted_over_the_target_is_trained(models, hard_search):
  job, loop, state = hard_search
  model = lm.load(models["m32"])
  events = journal_events(job)
  proposed = {e["trial_id"]: e["nas_params"] for e in events if e["event"] == "proposed"}
  predicted = {t: model.predict(p) for t, p in proposed.items()}
  started = {e["trial_id"] for e in events if e["event"] == "started"}
  over = [e for e in events if e["event"] == "over_target"]
  assert over and started
  assert all(predicted[t] <= LIMIT for t in started)
  assert {e["trial_id"] for e in over} == {t for t, ms in predicted.items() if ms > LIMIT}
  assert started | {e["trial_id"] for e in over} == set(proposed)
  assert [s.trial_id for s in loop.executor.started] == sorted(started, key=int)
  device = {"source": "latency_model", "model": models["m32"], "target_device_type": "cpu-tflite",
            "device": "test cpu", "input_size": 32, "num_threads": 1}
  for event in over:  # journaled right after its proposal, with its prediction and penalty
    i = events.index(event)
    assert events[i - 1]["event"] == "proposed" and events[i - 1]["trial_id"] == event["trial_id"]
    assert event["latency_ms"] == predicted[event["trial_id"]]
    assert (event["target_ms"], event["margin"], event["latency_device"]) == (
        TARGET, MARGIN, device)
    assert event["reward"] == pytest.approx(TARGET / event["latency_ms"] - 1)
    assert -1 < event["reward"] < 0
    assert state.status[event["trial_id"]] == journal_lib.OVER_TARGET
  # Trained trials report the prediction as their latency, and their reward is reward.py's.
  for event in (e for e in events if e["event"] == "completed"):
    ms = predicted[event["trial_id"]]
    assert event["metrics"]["latency_ms"] == ms and event["metrics"]["latency_device"] == device
    accuracy = accuracy_of(proposed[event["trial_id"]])
    assert event["reward"] == pytest.approx(accuracy * min(1.0, TARGET / ms))
  # The budget counts trained trials only: 6 trained, more proposed.
  assert len(started) == 6 == state.trained_count() and len(proposed) == 6 + len(over)
  assert journal_lib.replay(events) == state


def test_the_controller_learns_the_penalty_and_a_rebuild_replays_it(models, hard_search):
  job, loop, _ = hard_search
  events = journal_events(job)
  space = search_spaces.get_search_space("mnasnet")
  over = {tuple(e["dna"]): next(o["reward"] for o in events if o["event"] == "over_target"
                                and o["trial_id"] == e["trial_id"])
          for e in events if e["event"] == "proposed"
          and any(o["event"] == "over_target" and o["trial_id"] == e["trial_id"] for o in events)}
  live = loop._ctl  # pylint: disable=protected-access
  assert {d: live._rewards[d] for d in over} == over  # pylint: disable=protected-access
  rebuilt = Controller.rebuild(space, "tpe", SEED, events, n_startup_trials=3)
  assert rebuilt._rewards == live._rewards  # pylint: disable=protected-access
  assert rebuilt.propose_new(set())[0] == live.propose_new(set())[0]
  # Without the penalties the replay goes elsewhere: the live run's proposals depended on them.
  with pytest.raises(ReplayMismatchError):
    Controller.rebuild(space, "tpe", SEED, [e for e in events if e["event"] != "over_target"],
                       n_startup_trials=3)


def test_with_objectives_the_penalty_is_a_vector_worse_than_any_trained_trial():
  """[0 for a max objective, -latency for latency_ms:min], signed as trained trials' vectors, and
  the journal's state keeps it as such."""
  from nascli.search import pareto  # pylint: disable=g-import-not-at-top
  objectives = pareto.parse_objectives("accuracy:max,latency_ms:min")
  assert reward_lib.over_target_values(objectives, 0.9) == [0.0, -0.9]
  trained = pareto.signed_values(objectives, {"accuracy": 0.1, "latency_ms": 0.85})
  assert pareto.dominates(trained, (0.0, -0.9))
  state = journal_lib.replay([
      {"event": "search_started", "settings": {}},
      {"event": "proposed", "trial_id": "1", "dna": [0], "nas_params": {}},
      {"event": "over_target", "trial_id": "1", "latency_ms": 0.9, "target_ms": 0.8,
       "margin": 0.0, "reward": [0.0, -0.9], "latency_device": {"source": "latency_model"}}])
  assert state.status["1"] == journal_lib.OVER_TARGET and state.reward_vectors["1"] == (0.0, -0.9)
  assert state.metrics["1"] == {"latency_ms": 0.9, "latency_device": {"source": "latency_model"}}
  assert state.trained_count() == 0 and state.over_target_run() == ["1"]
  assert state.reasons["1"] == "predicted 0.9 ms, over the target 0.8 ms: not trained"
  with pytest.raises(NascliError, match="over the latency target and never runs"):
    state.apply({"event": "started", "trial_id": "1", "attempt": 1, "seq": 4})


def _resume_from_prefix(models, source, events, upto, job):
  """A job dir whose journal is `events[:upto]` (a driver killed there), resumed to its end."""
  os.makedirs(job)
  with open(os.path.join(job, "journal.jsonl"), "w", encoding="utf-8") as f:
    f.writelines(json.dumps(e) + "\n" for e in events[:upto])
  for name in os.listdir(source):  # the trial folders it had written by then
    if name.isdigit() and any(e.get("trial_id") == name for e in events[:upto]):
      shutil.copytree(os.path.join(source, name), os.path.join(job, name))
  return _search(_args(job, models["m32"]))[1]


def test_a_driver_killed_anywhere_resumes_to_the_same_decisions(models, hard_search, tmp_path,
                                                                monkeypatch):
  """Killed between a proposal and its over_target event, after an over_target event, while a
  trial ran: the rerun proposes, skips and trains exactly what the uninterrupted search did."""
  _stub_preflight(monkeypatch.setattr)
  job, _, _ = hard_search
  events = journal_events(job)
  kinds = [e["event"] for e in events]
  first_over = kinds.index("over_target")
  cuts = {"between proposed and over_target": first_over,
          "after over_target": first_over + 1,
          "while a trial ran": len(kinds) - 1 - kinds[::-1].index("started") + 1}
  for name, upto in cuts.items():
    resumed = tmp_path / name.replace(" ", "_")
    _resume_from_prefix(models, job, events, upto, str(resumed))
    assert _decisions(resumed) == _decisions(job), name
    assert journal_events(resumed)[:upto] == events[:upto]


def test_sigkill_of_the_driver_then_rerun_makes_the_same_decisions(models, hard_search, tmp_path,
                                                                   monkeypatch):
  job = tmp_path / "job"
  driver = subprocess.Popen([sys.executable, os.path.abspath(__file__), str(job), models["m32"]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  journal = job / "journal.jsonl"
  deadline = time.monotonic() + 120
  try:
    while not (journal.exists() and journal.read_text().count('"event":"completed"') >= 2):
      assert driver.poll() is None, driver.stderr.read().decode()[-2000:]
      assert time.monotonic() < deadline
      time.sleep(0.05)
    driver.send_signal(signal.SIGKILL)
    assert driver.wait(timeout=30) == -signal.SIGKILL
  finally:
    if driver.poll() is None:
      driver.kill()
    driver.stderr.close()
  before = journal_events(job)
  assert sum(e["event"] == "completed" for e in before) < 6  # killed mid-search
  _stub_preflight(monkeypatch.setattr)
  _search(_args(job, models["m32"]))
  assert journal_events(job)[:len(before)] == before
  assert _decisions(job) == _decisions(hard_search[0])


def test_refusals_before_anything_is_journaled(models, tmp_path, monkeypatch):
  """Another space (its name or a candidate), another input size, a target no architecture
  meets, an objective an untrained proposal cannot be told: one line each, no journal."""
  fastest = lm.load(models["m32"]).fastest()[0]
  cases = [
      (dict(model=models["spinenet"]), 32,
       f"{models['spinenet']}: latency model of search space 'spinenet', but the search is over"
       " 'mnasnet'"),
      (dict(model=models["renamed"]), 32,
       f"{models['renamed']}: latency model of another 'mnasnet' space than the search's:"
       " candidate 0 of 'blocks[0].num_repeats' is (7) in the model, (1) in the search's space"),
      (dict(model=models["m32"]), 224,
       f"{models['m32']}: latency model at input size 32x32, but the search serves at 224x224"),
      (dict(model=models["m32"], target=0.1, margin=0.0), 32,
       "--target_device_latency_ms 0.1 is below the fastest architecture of mnasnet the latency"
       f" model predicts ({fastest:.3g} ms, cpu-tflite at 32x32): no architecture can meet it"),
      (dict(model=models["m32"], target=fastest / 1.25, margin=0.2, constraint="soft"), 32,
       f"--target_device_latency_ms {fastest / 1.25:g} (+20% --latency_margin) is below the"
       " fastest architecture"),
      (dict(model=models["m32"], objectives=["accuracy:max", "flops:min"],
            algorithm="random"), 32,
       "--objectives flops:min: a proposal skipped over the hard latency target has no flops"),
  ]
  for i, (kwargs, size, line) in enumerate(cases):
    _stub_preflight(monkeypatch.setattr, input_size=size)
    job = tmp_path / str(i)
    model = kwargs.pop("model")
    with pytest.raises(NascliError) as e:
      search_loop.SearchLoop(_args(job, model, **kwargs), _Executor())
    assert str(e.value).startswith(line) and "\n" not in str(e.value), str(e.value)
    assert not (job / "journal.jsonl").exists()


def test_a_target_the_controller_never_meets_stops_the_search(models, tmp_path, monkeypatch):
  """Reachable (the fastest architecture is predicted at a third of a millisecond) but random
  proposals never get near 0.5 ms: after MAX_OVER_TARGET_RUN of them in a row (12 here, for
  time) the search stops, one line, exit 1 (nothing trained), and a rerun says the same from
  the journal without running anything."""
  _stub_preflight(monkeypatch.setattr)
  monkeypatch.setattr(latency_gate, "MAX_OVER_TARGET_RUN", 12)
  job = tmp_path / "job"
  args = _args(job, models["m32"], target=0.5, margin=0.0, algorithm="random")
  with pytest.raises(NascliError) as e:
    _search(args)
  events = journal_events(job)
  over = [e["latency_ms"] for e in events if e["event"] == "over_target"]
  assert len(over) == latency_gate.MAX_OVER_TARGET_RUN and not any(
      e["event"] == "started" for e in events)
  assert str(e.value) == (
      "search stopped: --target_device_latency_ms 0.5 is unreachable in practice for the random"
      f" controller: its last {latency_gate.MAX_OVER_TARGET_RUN} proposals were all predicted"
      f" over it ({min(over):.3g}-{max(over):.3g} ms, not trained); raise the target, or try"
      " another --search_algorithm")
  assert search_loop.finished_job(args) is not None  # reported from its journal
  with pytest.raises(NascliError, match="unreachable in practice"):
    search_loop.report_finished(args, search_loop.finished_job(args), "mnasnet", "accuracy")


def test_settings_carry_the_model_and_a_resume_refuses_another(models, tmp_path):
  job = str(tmp_path / "job")
  args = _args(job, models["m32"])
  trial = args.settings()["trial"]
  assert trial["latency_model"] == {"path": models["m32"],
                                    "fingerprint": lm.load(models["m32"]).fingerprint()}
  assert trial["latency_margin"] == MARGIN
  plain = search_loop.SearchArgs(job_dir=job).settings()["trial"]  # old jobs still resume
  assert "latency_model" not in plain and "latency_margin" not in plain
  journal_lib.check_settings(job, args.settings(), False, mutable_keys=search_loop.MUTABLE)
  with pytest.raises(NascliError, match=r"differs in: trial\.latency_model\.fingerprint"):
    journal_lib.check_settings(job, _args(job, models["m224"]).settings(), False,
                               mutable_keys=search_loop.MUTABLE)
  # The same model moved elsewhere is the same search (the new path is used from then on).
  moved = str(tmp_path / "moved.json")
  shutil.copy(models["m32"], moved)
  journal_lib.check_settings(job, _args(job, moved).settings(), False,
                             mutable_keys=search_loop.MUTABLE)
  # search_resume --latency_model: only the previous job's own model, checked before copying.
  assert resume.latency_model_for(job, moved).path == moved
  with pytest.raises(NascliError, match="is not the latency model"):
    resume.latency_model_for(job, models["m224"])
  plain_job = str(tmp_path / "plain")
  journal_lib.check_settings(plain_job, search_loop.SearchArgs(job_dir=plain_job).settings(),
                             False, mutable_keys=search_loop.MUTABLE)
  with pytest.raises(NascliError, match="was searched without a latency model"):
    resume.latency_model_for(plain_job, models["m32"])


def test_flag_refusals_load_no_framework(models, tmp_path):
  """A missing, corrupt or truncated model file and bad companions of --latency_model: one
  line, exit 1, before TensorFlow is imported and before a job dir is made."""
  job = str(tmp_path / "job")
  base = ["search_in_local", "--local_output_dir", job, "--target_device_latency_ms", "0.8"]
  cases = [
      (["--latency_model", str(tmp_path / "none.json")], "none.json"),
      (["--latency_model", models["corrupt"]], f"{models['corrupt']}: unknown field 'spac e'"),
      (["--latency_model", models["truncated"]],
       f"{models['truncated']}: truncated latency model file"),
      (["--latency_model", models["m32"], "--latency_margin", "-0.1"],
       "--latency_margin must be a fraction >= 0"),
      (["--latency_model", models["m32"], "--latency_calculator", "external"],
       "--latency_model predicts every trial's latency: --latency_calculator external"),
  ]
  results = main_in_fresh_interpreter([base + extra for extra, _ in cases])
  for (code, err, tf_loaded), (_, culprit) in zip(results, cases):
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and culprit in lines[0], err
    assert not tf_loaded
  assert not os.path.exists(job)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("nascli_cache"))


def test_search_in_local_skips_over_target_proposals_and_trials_report_the_prediction(
    models, cache, tmp_path):
  """The embedded default and the testing YAML, for real: proposals predicted over the target
  are journaled and never trained, the trained ones report the predicted latency (nothing is
  timed) and their reward is computed from it. Then one of them trained again by the real
  trial process under the soft reward."""
  job = tmp_path / "job"
  proc = nascli_subprocess(
      "search_in_local", "--prebuilt_search_space", "mnasnet", "--local_output_dir", job,
      "--seed", SEED, "--max_nas_trial", "2", "--target_device_latency_ms", TARGET,
      "--latency_constraint", "hard", "--latency_margin", MARGIN, "--latency_model",
      models["m32"], "--search_docker_flags", f"params_override={SHORT}", "--export_top_k", "1",
      "--json", env={"NASCLI_CACHE_DIR": cache})
  assert proc.returncode == 0, proc.stderr[-3000:]
  model = lm.load(models["m32"])
  events = journal_events(job)
  proposed = {e["trial_id"]: e["nas_params"] for e in events if e["event"] == "proposed"}
  over = {e["trial_id"] for e in events if e["event"] == "over_target"}
  completed = {e["trial_id"]: e for e in events if e["event"] == "completed"}
  assert over and len(completed) == 2 and set(proposed) == over | set(completed)
  assert all(model.predict(proposed[t]) > LIMIT for t in over)
  assert {e["trial_id"] for e in events if e["event"] == "started"} == set(completed)
  for trial_id, event in completed.items():
    ms = model.predict(proposed[trial_id])
    assert ms <= LIMIT
    analysis = json.loads((job / trial_id / "model_analysis.json").read_text())
    assert analysis["latency_ms"] == event["metrics"]["latency_ms"] == ms
    assert analysis["latency_device"]["source"] == "latency_model"
    assert analysis["latency_device"]["model"] == models["m32"]
    assert analysis["timing"]["latency_s"] == 0  # nothing timed: the prediction is the latency
    assert analysis["params"] > 10_000 and analysis["flops"] > analysis["params"]
    accuracy = analysis["accuracy"]
    assert event["reward"] == pytest.approx(accuracy * (1.0 if ms <= TARGET else TARGET / ms))
  statuses = {r["trial_id"]: r["status"] for r in json.loads(proc.stdout)}
  assert {t for t, s in statuses.items() if s == "over_target"} == over
  # The exported best trial was timed for real on the model's runtime, beside its prediction.
  measured = [e for e in events if e["event"] == "measured"]
  best = max(completed, key=lambda t: completed[t]["reward"])
  assert [e["trial_id"] for e in measured] == [best]
  assert measured[0]["predicted_ms"] == model.predict(proposed[best])
  assert measured[0]["latency_ms"] > 0 and measured[0]["latency_device"]["source"] == "export"
  assert measured[0]["latency_device"]["target_device_type"] == model.runtime
  assert measured[0]["latency_device"]["input_size"] == 32
  assert (job / best / "export" / "saved_model" / "saved_model.pb").exists()
  assert f"trial {best}: predicted " in proc.stderr and "measured on the exported" in proc.stderr
  rows = {r["trial_id"]: r for r in json.loads(
      nascli_subprocess("list_trials", job, "--json").stdout)}
  assert rows[best]["measured_latency_ms"] == measured[0]["latency_ms"]
  # preflight gave the input size the model was matched with: the config's 32x32.
  assert '"latency_input_size": 32' in (job / "workers" / "worker-1.log").read_text()

  # The soft reward of a real trial uses the predicted latency too.
  trial_id = min(completed, key=int)
  spec = json.loads((job / trial_id / "trial_spec.json").read_text())
  spec["job_dir"] = str(tmp_path / "soft")
  spec["trial"]["latency_constraint"] = "soft"
  spec["trial"]["run"]["params_override"] = SHORT.replace("=20", "=10")
  spec_path = tmp_path / "soft_spec.json"
  spec_path.write_text(json.dumps(spec))
  ran = subprocess.run(executors.trial_command(str(spec_path)), capture_output=True, text=True,
                       check=False, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert ran.returncode == 0, ran.stderr[-3000:]
  analysis = json.loads((tmp_path / "soft" / trial_id / "model_analysis.json").read_text())
  ms = model.predict(proposed[trial_id])
  assert analysis["latency_ms"] == ms and analysis["step"] == 10
  assert analysis["reward"] == pytest.approx(analysis["accuracy"] * (TARGET / ms) ** 0.07)


if __name__ == "__main__":
  # The driver the SIGKILL test kills: the hard search of `_args(JOB, MODEL)`, as hard_search.
  _stub_preflight(setattr)
  _search(_args(sys.argv[1], sys.argv[2]))
