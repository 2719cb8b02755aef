"""search_resume (a new job continuing an old one) and --warm_start_from (a new search seeded
with an old job's history): the journal-level properties without training, one real resume."""

import hashlib
import json
import os

import pyglove as pg
import pytest

from conftest import journal_events
from conftest import main_in_fresh_interpreter
from conftest import nascli_subprocess
from nascli.errors import NascliError
from nascli.search import controller as controller_lib
from nascli.search import journal as journal_lib
from nascli.search import resume
from nascli.search import warm_start
from nascli.search.controller import Controller

# 4 * 3 * 3**2 = 108 architectures, the cheap encoding: proposals are what is tested here.
SPACE = pg.Dict(width=pg.oneof([8, 16, 32, 64]), act=pg.oneof(["relu", "swish", "gelu"]),
                kernels=pg.List([pg.oneof([3, 5, 7]) for _ in range(2)]))
CHEAP = {"to_nas_params": lambda space, dna: {"dna": str(dna.to_numbers())}}
# TPE past its random start within a few trials, so that the history shapes proposals.
TPE = {"n_startup_trials": 3, **CHEAP}
TINY = "trainer.train_steps=4,trainer.steps_per_loop=2,trainer.checkpoint_interval=2"


def reward_of(dna):
  """A fixed landscape: the recorded rewards a real search would have measured."""
  return round(0.1 * dna[0] + 0.03 * dna[1] - 0.02 * sum(dna[2:]), 6)


def _run(ctl, count, events, first_id=1):
  """A driver's turns without training: propose, journal, feed the landscape's reward back."""
  for i in range(first_id, first_id + count):
    proposed = {p["dna"] if isinstance(p["dna"], tuple) else tuple(p["dna"])
                for p in events if p["event"] == "proposed"}
    dna, _ = ctl.propose_new(proposed)
    events.append({"event": "proposed", "trial_id": str(i), "dna": list(dna)})
    events.append({"event": "started", "trial_id": str(i), "attempt": 1})
    ctl.feedback(dna, reward_of(dna))
    events.append({"event": "completed", "trial_id": str(i), "reward": reward_of(dna),
                   "metrics": {}})
  return events


def _write_job(job_dir, events, settings=None):
  """A job dir whose journal holds `events` after search_started (as a search writes it)."""
  journal = journal_lib.journal_for(job_dir)
  os.makedirs(job_dir, exist_ok=True)
  with journal.open_for_writing():
    journal.append({"event": "search_started", "fingerprint": "x",
                    "settings": settings or {"search_space": "mnasnet",
                                             "search_space_module": None,
                                             "search_algorithm": "tpe"}})
    for event in events:
      journal.append(event)


def _tree(path):
  """Every file under `path` with its sha256: what must not change in a previous job dir."""
  out = {}
  for root, _, files in os.walk(path):
    for name in files:
      full = os.path.join(root, name)
      with open(full, "rb") as f:
        out[os.path.relpath(full, path)] = hashlib.sha256(f.read()).hexdigest()
  return out


def test_a_resumed_job_proposes_what_an_uninterrupted_search_does(tmp_path):
  uninterrupted = _run(Controller(SPACE, "tpe", 5, **TPE), 8, [])
  old = tmp_path / "old"
  _write_job(old, uninterrupted[:12])  # 4 trials
  before = _tree(old)
  settings = resume.prepare(str(old), str(tmp_path / "new"), max_nas_trial=8)
  assert settings["search_algorithm"] == "tpe"
  events = journal_events(tmp_path / "new")
  assert [e["event"] for e in events[-2:]] == ["completed", "resumed_from"]
  assert events[-1]["previous_job_dir"] == str(old) and events[-1]["previous_trials"] == 4
  ctl = Controller.rebuild(SPACE, "tpe", 5, events, **TPE)
  resumed = _run(ctl, 4, [e for e in events if e["event"] != "search_started"], first_id=5)
  dnas = lambda evs: [e["dna"] for e in evs if e["event"] == "proposed"]  # noqa: E731
  assert len(dnas(resumed)) == 8 and dnas(resumed) == dnas(uninterrupted)
  assert _tree(old) == before  # the previous job is only read
  # Run again (the new job exists): it is the same job, continued, not copied twice.
  resume.prepare(str(old), str(tmp_path / "new"), max_nas_trial=8)
  assert journal_events(tmp_path / "new") == events


def test_a_copy_killed_halfway_leaves_no_job_and_is_made_again(tmp_path, monkeypatch):
  old, new = tmp_path / "old", tmp_path / "new"
  _write_job(old, _run(Controller(SPACE, "random", 1, **CHEAP), 2, []))
  (old / "1").mkdir()
  (old / "1" / "model_analysis.json").write_text('{"reward": 0.5}')
  (old / "1" / "trial_spec.json").write_text(json.dumps({"job_dir": str(old), "trial_id": "1"}))

  def killed(*args):
    raise KeyboardInterrupt  # as a SIGKILL would stop it: after the files, before the journal
  monkeypatch.setattr(resume, "_retarget_trial_specs", killed)
  with pytest.raises(KeyboardInterrupt):
    resume.prepare(str(old), str(new), max_nas_trial=3)
  assert not new.exists()  # nothing that looks like a job
  assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".new.copying-")]
  monkeypatch.undo()
  # The hidden copy of a dead process is removed; the rerun makes the whole job.
  os.rename(next(tmp_path.glob(".new.copying-*")), tmp_path / ".new.copying-999999999")
  resume.prepare(str(old), str(new), max_nas_trial=3)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "old"]
  assert json.loads((new / "1" / "model_analysis.json").read_text()) == {"reward": 0.5}
  assert json.loads((new / "1" / "trial_spec.json").read_text())["job_dir"] == str(new)
  assert json.loads((old / "1" / "trial_spec.json").read_text())["job_dir"] == str(old)
  assert [e["event"] for e in journal_events(new)][-1] == "resumed_from"


def _history(count=12, seed=11):
  """(dna, reward) pairs of an old job: other architectures than a fresh search's first ones."""
  ctl = Controller(SPACE, "random", seed, **CHEAP)
  return [(list(d), reward_of(d)) for d, _ in (ctl.propose_new() for _ in range(count))]


def test_warm_started_tpe_holds_the_old_rewards_and_proposes_otherwise():
  pairs = _history()
  cold = Controller(SPACE, "tpe", 0, **CHEAP)  # Optuna's defaults: 10 random trials first
  warm = Controller(SPACE, "tpe", 0, **CHEAP)
  warm.warm_start(pairs)
  study = warm._algorithm._study  # pylint: disable=protected-access
  assert [t.values for t in study.trials] == [[r] for _, r in pairs]
  assert [tuple(t.params[f"{k}"] for k in ("width", "act", "kernels[0]", "kernels[1]"))
          for t in study.trials] == [tuple(d) for d, _ in pairs]
  cold_dnas = [cold.propose_new()[0] for _ in range(3)]
  warm_dnas = [warm.propose_new()[0] for _ in range(3)]
  assert cold_dnas != warm_dnas
  assert not {tuple(d) for d, _ in pairs} & set(warm_dnas)  # the history is not proposed again
  # Journaled as one event before the first proposal, a rebuild replays the warm start first.
  first = Controller(SPACE, "tpe", 0, **CHEAP)
  first.warm_start(pairs)
  events = _run(first, 3, [{"event": "search_started", "settings": {}},
                           {"event": "warm_start",
                            "history": [{"dna": d, "reward": r} for d, r in pairs]}])
  rebuilt = Controller.rebuild(SPACE, "tpe", 0, events[:2 + 6], **CHEAP)  # 2 trials done
  assert list(rebuilt.propose_new()[0]) == events[-3]["dna"]
  with pytest.raises(controller_lib.ReplayMismatchError):  # without the event: a cold replay
    Controller.rebuild(SPACE, "tpe", 0, events[:1] + events[2:], **CHEAP)


@pytest.mark.parametrize("algorithm,options", [
    ("regularized_evolution", {"population_size": 6, "tournament_size": 3}),
    ("reinforce", {}), ("random", {})])
def test_warm_start_in_pyglove_algorithms(algorithm, options):
  pairs = _history()
  warm = Controller(SPACE, algorithm, 0, **options, **CHEAP)
  warm.warm_start(pairs)
  assert warm.num_feedbacks == len(pairs)
  if algorithm == "regularized_evolution":  # the population: the history's last 6
    population = warm._algorithm.population  # pylint: disable=protected-access
    assert [tuple(d.to_numbers()) for d in population] == [tuple(d) for d, _ in pairs[-6:]]
  cold = Controller(SPACE, algorithm, 0, **options, **CHEAP)
  differs = [cold.propose_new()[0] for _ in range(3)] != [warm.propose_new()[0] for _ in range(3)]
  # Evolution selects among the history at once (it fills the population); REINFORCE moved its
  # policy; random ignores rewards (its proposals differ only where it would repeat the history).
  assert differs == (algorithm != "random")
  with pytest.raises(ValueError, match="before the first proposal"):
    warm.warm_start(pairs)


def test_warm_start_reads_completed_trials_and_refuses_another_space(tmp_path):
  old = tmp_path / "old"
  events = _run(Controller(SPACE, "random", 1, **CHEAP), 3, [])
  events[-1] = {"event": "failed", "trial_id": "3", "status": "failed", "reason": "oom"}
  _write_job(old, events)
  pairs = warm_start.check(str(old), "mnasnet", None, None)
  assert [(p["trial_id"], p["reward"]) for p in pairs] == [
      ("1", events[2]["reward"]), ("2", events[5]["reward"])]
  with pytest.raises(NascliError, match=r"searched another search space \(mnasnet, not"
                     r" spinenet\)"):
    warm_start.check(str(old), "spinenet", None, None)
  with pytest.raises(NascliError, match="optimized the scalar reward, this search"
                     " accuracy:max,latency_ms:min"):
    warm_start.check(str(old), "mnasnet", None, ["accuracy:max", "latency_ms:min"])
  with pytest.raises(NascliError, match="architecture .* does not fit the search space"):
    Controller(SPACE, "tpe", 0, **CHEAP).warm_start([([9, 9, 9, 9], 0.5)])


def test_the_search_journals_the_warm_start_once_before_its_first_proposal(tmp_path):
  from nascli.search import search_loop  # pylint: disable=g-import-not-at-top
  old = tmp_path / "old"
  _write_job(old, _run(Controller(SPACE, "random", 1, **CHEAP), 3, []))
  new = tmp_path / "new"
  args = search_loop.SearchArgs(job_dir=str(new), warm_start_from=str(old))
  assert args.settings()["warm_start_from"] == str(old)  # a setting: a resume must keep it
  assert "warm_start_from" not in search_loop.SearchArgs(job_dir=str(new)).settings()
  # The loop's journaling step alone (its trials' workers are not what is tested here).
  loop = search_loop.SearchLoop.__new__(search_loop.SearchLoop)
  loop.args, loop.space, loop.num_objectives = args, SPACE, 1
  loop.journal = journal_lib.journal_for(new)
  new.mkdir()
  with loop.journal.open_for_writing():
    journal_lib.check_settings(new, args.settings(), False, journal=loop.journal)
    events = warm_start.journal_once(loop, loop.journal.events())
    again = warm_start.journal_once(loop, loop.journal.events())
  assert [e["event"] for e in events] == ["search_started", "warm_start"] and again == events
  old_events = journal_events(old)
  assert [(p["dna"], p["reward"]) for p in events[1]["history"]] == [
      (e["dna"], c["reward"]) for e, c in zip(
          [e for e in old_events if e["event"] == "proposed"],
          [e for e in old_events if e["event"] == "completed"])]
  assert events[1]["fingerprint"] == warm_start.fingerprint(events[1]["history"])
  ctl = Controller.rebuild(SPACE, "tpe", 0, events, **CHEAP)
  study = ctl._algorithm._study  # pylint: disable=protected-access
  assert [t.values[0] for t in study.trials] == [p["reward"] for p in events[1]["history"]]



def test_bad_input_is_refused_in_one_line_before_tensorflow(tmp_path):
  job = tmp_path / "job"
  _write_job(job, _run(Controller(SPACE, "random", 1, **CHEAP), 2, []))
  damaged = tmp_path / "damaged"
  damaged.mkdir()
  (damaged / "journal.jsonl").write_text('{"seq":1,"event":"search_started","settings":{}}\n'
                                         'not json\n{"seq":3,"event":"x"}\n')
  empty = tmp_path / "empty"
  empty.mkdir()
  other = tmp_path / "other"
  _write_job(other, [])
  cases = [
      (["search_resume", "--previous_job_dir", str(tmp_path / "missing"), "--max_nas_trial",
        "4"], f"--previous_job_dir {tmp_path}/missing does not exist"),
      (["search_resume", "--previous_job_dir", str(empty), "--max_nas_trial", "4"],
       f"--previous_job_dir {empty} is not a nascli search job (no journal.jsonl)"),
      (["search_resume", "--previous_job_dir", str(damaged), "--max_nas_trial", "4"],
       f"--previous_job_dir {damaged}: damaged journal: {damaged}/journal.jsonl: line 2 is not"
       " JSON (Expecting value: line 1 column 1 (char 0))"),
      (["search_resume", "--previous_job_dir", str(job), "--max_nas_trial", "2"],
       f"--max_nas_trial 2 adds no trial: {job} has 2 already; give the new total, more"
       " than 2"),
      (["search_resume", "--previous_job_dir", str(job), "--max_nas_trial", "4",
        "--local_output_dir", str(other)],
       f"--local_output_dir {other} holds another search job, not a continuation of {job};"
       " choose another --local_output_dir"),
      (["search_in_local", "--prebuilt_search_space", "spinenet", "--warm_start_from",
        str(job)], f"--warm_start_from {job} searched another search space (mnasnet, not"
       " spinenet): its architectures mean nothing in this one"),
      (["search", "--warm_start_from", str(empty)],
       f"--warm_start_from {empty} is not a nascli search job (no journal.jsonl)"),
  ]
  results = main_in_fresh_interpreter([c for c, _ in cases], cwd=tmp_path,
                                      env={"NASCLI_CACHE_DIR": str(tmp_path / "cache")})
  for (args, message), (code, stderr, tf_loaded) in zip(cases, results):
    assert (code, stderr, tf_loaded) == (1, f"Error: {message}\n", False), args
  assert not (tmp_path / "job-resumed").exists() and not (other / "1").exists()


@pytest.fixture(scope="module")
def old_job(tmp_path_factory):
  """A finished 2-trial search with tiny training, made once."""
  root = tmp_path_factory.mktemp("resume")
  job = root / "old"
  proc = nascli_subprocess("search_in_local", "--local_output_dir", job, "--seed", "3",
                           "--max_nas_trial", "2", "--export_top_k", "0", "--params_override",
                           TINY, "--json", env={"NASCLI_CACHE_DIR": str(root / "cache")})
  assert proc.returncode == 0, proc.stderr[-2000:]
  return job, json.loads(proc.stdout), str(root / "cache")


def test_search_resume_runs_the_new_trials_and_keeps_the_old(old_job):
  job, rows, cache = old_job
  before = _tree(job)
  new = job.parent / "more"
  proc = nascli_subprocess("search_resume", "--previous_job_dir", job, "--max_nas_trial", "3",
                           "--local_output_dir", new, "--json", env={"NASCLI_CACHE_DIR": cache})
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert f"job dir: {new} (continues {job})" in proc.stderr
  listed = json.loads(nascli_subprocess("list_trials", new, "--json").stdout)
  assert sorted(r["trial_id"] for r in listed) == ["1", "2", "3"]
  assert all(r["status"] == "completed" for r in listed)
  old = {r["trial_id"]: r["reward"] for r in rows}
  assert {r["trial_id"]: r["reward"] for r in listed if r["trial_id"] in old} == old
  assert _tree(job) == before  # nothing in the previous job changed
  # Trial 3 is what the old search's controller, rebuilt from its journal, proposes next.
  from tf_vision import search_spaces  # pylint: disable=g-import-not-at-top
  old_events = journal_events(job)
  ctl = controller_lib.Controller.rebuild(search_spaces.get_search_space("mnasnet"), "tpe", 3,
                                          old_events)
  expected, _ = ctl.propose_new(journal_lib.replay(old_events).dnas())
  new_events = journal_events(new)
  assert [e["dna"] for e in new_events if e["event"] == "proposed"][-1] == list(expected)
  # Trials count: the old ones plus one, each trained once; the settings are the old job's.
  assert new_events[0] == old_events[0]
  assert sum(e["event"] == "started" for e in new_events) == 3
  # A rerun of the finished new job only reports it.
  again = nascli_subprocess("search_resume", "--previous_job_dir", job, "--max_nas_trial", "3",
                            "--local_output_dir", new, "--json", env={"NASCLI_CACHE_DIR": cache})
  assert again.returncode == 0 and "is finished (3 trial(s))" in again.stderr
