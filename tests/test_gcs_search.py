"""Search job dirs on gs://, against the GCS emulator: search_in_local with its job dir in a
bucket (journal objects, trial folders, results), list_trials and stage-2 train from it, resume
after SIGKILL, the create-only journal that stops a second driver, and settings refused."""

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import FINISHED_TRIAL_FILES, journal_events, nascli_subprocess
from conftest import retrain_best_trial, trial_files
from nascli import storage
from nascli.errors import InputError, OutputError
from nascli.search import journal as journal_lib
from nascli.search import journal_file
from nascli.search import results, workspace
from nascli.search.journal import GcsJournal

SHORT = "trainer.train_steps=20,trainer.steps_per_loop=10,trainer.checkpoint_interval=10"
# Fields of an event that differ between two runs of the same search.
VOLATILE = ("time", "reward", "metrics")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  return str(tmp_path_factory.mktemp("nascli_cache"))


# What the tests that stand in for LocalExecutor.start run on (a process per trial).
PROCESS = ("--trial_isolation", "process")


def _search_args(job, *extra, seed=7, export=False):
  """export: the end-of-search export to gs:// (the `searched` job has it; the others need
  none, and each export costs a TensorFlow process and seconds per trial)."""
  return ["search_in_local", "--prebuilt_search_space", "mnasnet", "--local_output_dir", str(job),
          "--seed", str(seed), "--target_device_latency_ms", "2", "--params_override", SHORT,
          *([] if export else ["--export_top_k", "0"]), *extra]


def _entries(job):
  return storage.list_names(storage.join(job, "journal"))


def _stable(event):
  return {k: v for k, v in event.items() if k not in VOLATILE}


def _trial_layout(names, trial_id):
  """The kinds of files a trial folder holds, from names relative to the job dir."""
  return trial_files(n[len(trial_id) + 1:] for n in names if n.startswith(f"{trial_id}/"))


def _generations(prefix):
  """{name: (generation, md5)} of every object under a prefix: any rewrite changes it."""
  g = storage.parse_gcs(prefix)
  return {b.name: (b.generation, b.md5_hash)
          for b in storage.client().list_blobs(g.bucket, prefix=g.name + "/")}


@dataclasses.dataclass
class KilledRun:
  """A gs:// search SIGKILLed while trial 2 trains, what its bucket and staging held then, and
  the same command run again to the end."""
  job: str
  before: list  # the journal the killed driver left
  trial_2_in_bucket: list  # object names under JOB/2 after the kill
  trial_2_staged: bool  # its staging folder was there
  resumed: subprocess.CompletedProcess


@pytest.fixture(scope="module")
def killed_and_resumed(gcs_emulator, cache):
  """The module's one real gs:// search (2 trials, the end-of-search export): the other tests
  read the job it finished, so the kill and the resume cost no search of their own."""
  job = f"gs://{gcs_emulator.bucket}/search-{os.urandom(4).hex()}/job"
  args = [sys.executable, "-m", "nascli", *_search_args(job, "--max_nas_trial", "2",
                                                         export=True)]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", NASCLI_CACHE_DIR=cache)
  with pytest.MonkeyPatch.context() as mp:
    mp.setenv("NASCLI_CACHE_DIR", cache)
    staging = journal_lib.staging_dir(job)
  driver = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
  # Killed once trial 2 is journaled `started` and its staging folder is there: it is running
  # (a trial takes far longer than this loop's 0.2 s between looks, so it cannot end unseen).
  deadline = time.monotonic() + 600
  while time.monotonic() < deadline and driver.poll() is None:
    # search_started, early_stopping, 3 events of trial 1, proposed 2, started 2
    if len(_entries(job)) >= 7 and os.path.isdir(os.path.join(staging, "2")):
      break
    time.sleep(0.2)
  driver.send_signal(signal.SIGKILL)
  driver.wait()
  before = GcsJournal(job).events()
  in_bucket = storage.list_names(storage.join(job, "2"))
  staged = os.path.isdir(os.path.join(staging, "2"))
  resumed = subprocess.run(args + ["--json"], capture_output=True, text=True, env=env,
                           timeout=900, check=False)
  return KilledRun(job, before, in_bucket, staged, resumed)


@pytest.fixture(scope="module")
def searched(killed_and_resumed):
  """The finished gs:// job of `killed_and_resumed` and its rows."""
  run = killed_and_resumed
  assert run.resumed.returncode == 0, run.resumed.stderr[-3000:]
  return run.job, json.loads(run.resumed.stdout)


def test_search_journals_one_object_per_event(searched, cli, failing_trials, tmp_path):
  job, _ = searched
  events = GcsJournal(job).events()
  assert _entries(job) == [f"{seq:010d}.json" for seq in range(1, len(events) + 1)]
  assert [e["seq"] for e in events] == list(range(1, 10))
  for seq, event in enumerate(events, 1):  # each object holds exactly its event
    assert json.loads(storage.read_text(GcsJournal(job).entry(seq))) == event
  # Trial 2 started twice: the search was killed while it trained (killed_and_resumed); what
  # --early_stopping auto chose is journaled once, by the first run.
  assert [(e["event"], e.get("trial_id")) for e in events] == [
      ("search_started", None), ("early_stopping", None), ("proposed", "1"), ("started", "1"), ("completed", "1"),
      ("proposed", "2"), ("started", "2"), ("started", "2"), ("completed", "2")]
  # A local job of the same flags journals the same search: the same settings (and so the same
  # fingerprint), the same first proposal. Its trial fails at once (failing_trials): only its
  # first events count here.
  local = tmp_path / "local"
  code, _, stderr = cli(*_search_args(local, "--max_nas_trial", "1", *PROCESS, export=True))
  assert code == 1 and "every trial of" in stderr, stderr
  local_events = journal_events(local)
  assert [_stable(e) for e in events[2:4]] == [_stable(e) for e in local_events[2:4]]
  # 3-step trials: no rung could rank. The gs:// job's config check counted its records (0.068
  # epochs); the local one skipped that check (no_config_check), so it knows no epoch.
  assert events[1]["name"] == local_events[1]["name"] == "none"
  assert "3 steps, 0.091 epochs, under 2 epochs" in events[1]["why"]
  assert "3 steps; the training data does not say its size" in local_events[1]["why"]
  started, local_started = events[0], local_events[0]
  assert started["fingerprint"] == local_started["fingerprint"]  # mutable settings aside
  assert started["settings"] == {**local_started["settings"], "max_nas_trial": 2,
                                 "trial_isolation": "worker"}


def test_trial_folders_are_uploaded_whole(searched, cache, monkeypatch):
  job, rows = searched
  names = storage.list_names(job)
  for trial_id in ("1", "2"):
    # Every file a local trial folder holds, nothing else (no temporary files).
    assert _trial_layout(names, trial_id) == FINISHED_TRIAL_FILES
    status = json.loads(storage.read_text(storage.join(job, trial_id, "job_status.json")))
    assert status["status"] == "completed"
  analysis = json.loads(storage.read_text(storage.join(job, "1", "model_analysis.json")))
  assert analysis["reward"] == rows[0]["reward"] and analysis["trial_id"] == "1"
  assert json.loads(storage.read_text(storage.join(job, "1", "nas_params_str.json"))) == (
      rows[0]["nas_params"])
  # The staging copy is emptied as trials are recorded.
  monkeypatch.setenv("NASCLI_CACHE_DIR", cache)
  staging = journal_lib.staging_dir(job)
  assert os.path.isdir(staging) and not [n for n in os.listdir(staging) if n.isdigit()]
  assert staging.startswith(cache)


def test_results_and_list_trials_read_from_gcs(searched):
  job, rows = searched
  table = json.loads(storage.read_text(storage.join(job, "trials.json")))
  assert table == rows and [r["trial_id"] for r in rows] == ["1", "2"]
  assert all(r["status"] == "completed" and r["trial_dir"] == f"{job}/{r['trial_id']}"
             for r in rows)
  csv_lines = storage.read_text(storage.join(job, "trials.csv")).splitlines()
  assert csv_lines[0].startswith("trial_id,status,reward") and len(csv_lines) == 3
  png = storage.read_bytes(storage.join(job, "search_progress.png"))
  assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
  names = storage.list_names(storage.join(job, "hparams"))
  assert [n.split("/")[0] for n in names if "/" in n] == ["trial-0001", "trial-0002"]
  assert len([n for n in names if "/" not in n]) == 1  # the experiment config, once
  listed = nascli_subprocess("list_trials", job, "--json")
  assert listed.returncode == 0, listed.stderr
  assert json.loads(listed.stdout) == results.sort_by_reward(table)
  shown = nascli_subprocess("list_trials", job)
  assert shown.returncode == 0 and shown.stdout.startswith(f"{job}: 2 completed")
  ids = [line.split()[1] for line in shown.stdout.splitlines() if line.startswith("│")]
  assert ids == [r["trial_id"] for r in results.sort_by_reward(table)]


def test_stage2_retrains_a_trial_of_the_gcs_job(searched, cache, tmp_path):
  job, rows = searched
  best, retrain = retrain_best_trial(job, rows, cache, tmp_path / "stage2",
                                     env={"NASCLI_CACHE_DIR": cache})
  assert retrain.returncode == 0, retrain.stderr[-2000:]
  assert json.loads(retrain.stdout)[0]["step"] == 10
  saved = (tmp_path / "stage2" / best / "params.yaml").read_text()
  assert re.search(rf"init_checkpoint: \S+/{best}/ckpt-20\n", saved), saved
  chosen = json.loads(storage.read_text(storage.join(job, best, "nas_params_str.json")))
  assert chosen == rows[int(best) - 1]["nas_params"]
  # The architecture trained is the trial's.
  from tf_vision.params import load_yaml_source  # pylint: disable=g-import-not-at-top
  model = load_yaml_source(str(tmp_path / "stage2" / best / "params.yaml"), "params.yaml")[
      "task"]["model"]
  specs = json.loads(model["backbone"]["tunable_mnasnet"]["block_specs_json"])
  assert f"({specs[0]['output_filters']})" in chosen["blocks[0].output_filters"]
  assert f"({specs[6]['num_repeats']})" in chosen["blocks[6].num_repeats"]


def test_job_of_other_settings_is_refused_and_untouched(searched, cli, cache, monkeypatch):
  job, _ = searched
  before = _generations(job)
  monkeypatch.setenv("NASCLI_CACHE_DIR", cache)
  code, stdout, stderr = cli(*_search_args(job, "--max_nas_trial", "2", seed=8, export=True))
  lines = stderr.strip().splitlines()
  assert code == 1 and len(lines) == 1 and stdout == "", stderr
  assert "other settings" in lines[0] and "seed 7 -> 8" in lines[0] and "--overwrite" in lines[0]
  assert _generations(job) == before


def test_killed_search_resumes_from_the_gcs_journal(killed_and_resumed, searched):
  run = killed_and_resumed
  job, rows = searched
  before = run.before
  assert [(e["event"], e.get("trial_id")) for e in before[-3:]] == [
      ("completed", "1"), ("proposed", "2"), ("started", "2")]
  # Nothing of the interrupted trial was in the bucket: it is uploaded only once it ends.
  assert run.trial_2_in_bucket == [] and run.trial_2_staged
  interrupted_dna = before[-2]["dna"]
  assert "re-running interrupted trial(s) 2" in run.resumed.stderr
  assert [r["trial_id"] for r in rows] == ["1", "2"]
  events = GcsJournal(job).events()
  assert events[:len(before)] == before  # the killed driver's entries, untouched
  assert _entries(job) == [f"{seq:010d}.json" for seq in range(1, len(events) + 1)]
  proposed = [e for e in events if e["event"] == "proposed"]
  assert [e["trial_id"] for e in proposed] == ["1", "2"]  # no duplicate ids
  assert proposed[1]["dna"] == interrupted_dna
  assert [e["trial_id"] for e in events if e["event"] == "completed"] == ["1", "2"]
  assert [e["attempt"] for e in events
          if e["event"] == "started" and e["trial_id"] == "2"] == [1, 2]
  # No partial or leftover object: both trial folders alike and complete, every JSON whole.
  names = storage.list_names(job)
  assert not [n for n in names if n.endswith(".tmp")]
  assert _trial_layout(names, "1") == _trial_layout(names, "2")
  for name in names:
    if name.endswith(".json"):
      json.loads(storage.read_text(storage.join(job, name)))
  assert len(json.loads(storage.read_text(storage.join(job, "trials.json")))) == 2


RIVAL = {"seq": 3, "time": "2026-01-01T00:00:00.000Z", "event": "note", "by": "another driver"}


def test_second_driver_is_stopped_by_the_create_only_journal(cli, gcs_prefix, cache,
                                                             monkeypatch, no_config_check):
  """Another driver appends entry 4 while this one starts its first trial (after
  search_started, what --early_stopping auto chose, and the proposal): this one's append of
  entry 4 fails, with one line, and overwrites nothing."""
  from nascli.search import executors  # pylint: disable=g-import-not-at-top
  job = storage.join(gcs_prefix, "job")
  rival = json.dumps({**RIVAL, "seq": 4})

  def rival_appends_first(self, spec_path, trial_dir, slot, publish_to=None):
    del self, spec_path, trial_dir, slot, publish_to
    storage.create_text(GcsJournal(job).entry(4), rival)

  monkeypatch.setattr(executors.LocalExecutor, "start", rival_appends_first)
  monkeypatch.setenv("NASCLI_CACHE_DIR", cache)
  code, stdout, stderr = cli(*_search_args(job, "--max_nas_trial", "1", *PROCESS))
  lines = stderr.strip().splitlines()
  assert code == 1 and len(lines) == 3 and stdout == "", stderr
  assert lines[0].startswith("early stopping (auto): none")
  # A target without a latency model: the search says what latency it optimizes.
  assert lines[1].startswith("note: the latency target applies to each trial's own timing")
  assert lines[2] == (f"Error: {job}/journal/0000000004.json already exists: another search"
                      f" appended to {job} after this one read its journal; this one stops"
                      " (nothing overwritten)")
  assert storage.read_text(GcsJournal(job).entry(4)) == rival
  assert [e["event"] for e in GcsJournal(job).events()] == ["search_started", "early_stopping",
                                                            "proposed", "note"]
  assert storage.list_names(job, recursive=False) == ["journal/"]  # no trial, no results


@pytest.fixture
def no_config_check(monkeypatch):
  """The trials' config taken as checked (20 steps) without the TensorFlow worker that checks
  it (20-30 s a run): for the runs whose trials are simulated anyway. The check itself is
  tested in test_search_local.py (test_a_bad_trial_config_is_refused_before_any_trial)."""
  from nascli.search import preflight, warm_workers  # pylint: disable=g-import-not-at-top

  class NoWorker:
    log_path = "no config-check worker"

    def close(self):
      pass

  monkeypatch.setattr(warm_workers, "start_config_check", lambda *a: NoWorker())
  monkeypatch.setattr(preflight, "wait", lambda check, worker, log: {"train_steps": 20})


@pytest.fixture
def failing_trials(monkeypatch, cache, no_config_check):
  """Trial processes that fail at once: the executor writes what a failed trial leaves (its
  log and job_status.json) instead of starting one; the loop, journal and storage are real."""
  from nascli.search import executors  # pylint: disable=g-import-not-at-top

  def fail_at_once(self, spec_path, trial_dir, slot, publish_to=None):
    del self, spec_path, slot, publish_to
    storage.write_text(os.path.join(trial_dir, "trial.log"), "Error: simulated\n")
    storage.write_text(os.path.join(trial_dir, "job_status.json"),
                       json.dumps({"status": "failed", "reason": "simulated"}))
    return "handle"

  monkeypatch.setattr(executors.LocalExecutor, "start", fail_at_once)
  monkeypatch.setattr(executors.LocalExecutor, "poll", lambda self, h: executors.Outcome(1))
  monkeypatch.setenv("NASCLI_CACHE_DIR", cache)


def test_outcome_is_journaled_after_the_trial_folder_is_up(cli, gcs_prefix, failing_trials,
                                                          monkeypatch):
  """The trial folder is in the bucket, marker last, before the journal says `failed`; the
  local copy is gone after."""
  job = storage.join(gcs_prefix, "job")
  journal_at_upload = {}
  real_upload = storage.upload_file

  def upload(src, dest):
    journal_at_upload[dest.rsplit("/", 1)[1]] = [
        e["event"] for e in GcsJournal(job).events()]
    real_upload(src, dest)

  monkeypatch.setattr(storage, "upload_file", upload)
  code, stdout, stderr = cli(*_search_args(job, "--max_nas_trial", "1", "--json", *PROCESS))
  assert code == 1 and "every trial of" in stderr, stderr  # its only trial failed
  assert stdout == "" and GcsJournal(job).events()[-1]["trial_id"] == "1"
  assert list(journal_at_upload)[-1] == "job_status.json"  # the marker last
  assert journal_at_upload["job_status.json"] == ["search_started", "early_stopping",
                                                  "proposed", "started"]
  assert GcsJournal(job).events()[-1]["reason"] == "simulated"
  assert storage.list_names(storage.join(job, "1")) == [
      "job_status.json", "trial.log", "trial_spec.json"]
  assert not os.path.exists(os.path.join(journal_lib.staging_dir(job), "1"))


def test_overwrite_starts_a_gcs_job_over(cli, gcs_prefix, failing_trials):
  job = storage.join(gcs_prefix, "job")
  assert cli(*_search_args(job, "--max_nas_trial", "1", *PROCESS))[0] == 1  # all failed
  storage.write_text(storage.join(job, "1", "left-by-the-old-search.txt"), "x")
  storage.write_text(storage.join(job, "notes.txt"), "mine")
  code, _, stderr = cli(*_search_args(job, "--max_nas_trial", "1", "--overwrite", *PROCESS,
                                      seed=8))
  assert code == 1, stderr  # its trial fails again (failing_trials)
  events = GcsJournal(job).events()
  assert events[0]["settings"]["trial"]["run"]["seed"] == 8
  assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
  assert storage.list_names(job, recursive=False) == [
      "1/", "hparams/", "journal/", "notes.txt", "report.html", "search_progress.png",
      "trials.csv", "trials.json"]
  assert storage.list_names(storage.join(job, "1")) == [
      "job_status.json", "trial.log", "trial_spec.json"]


def test_gcs_journal_is_create_only_and_checks_its_entries(gcs_prefix, monkeypatch):
  job = storage.join(gcs_prefix, "job")
  j = GcsJournal(job)
  with j.open_for_writing():
    assert j.append({"event": "search_started", "settings": {}})["seq"] == 1
    # A retried upload whose first attempt landed finds its own bytes: not a rival.
    monkeypatch.setattr(journal_file, "_now", lambda: "2026-01-01T00:00:00.000Z")
    storage.create_text(j.entry(2), '{"seq":2,"time":"2026-01-01T00:00:00.000Z","event":"a"}\n')
    assert j.append({"event": "a"})["seq"] == 2
    j.check_writer()  # nobody else wrote
    storage.create_text(j.entry(3), json.dumps(RIVAL))
    with pytest.raises(OutputError, match="0000000003.json already exists"):
      j.check_writer()
    with pytest.raises(OutputError, match="0000000003.json already exists"):
      j.append({"event": "b"})
  assert [e["event"] for e in GcsJournal(job).events()] == ["search_started", "a", "note"]
  with pytest.raises(OutputError, match="another search is running"):
    with j.open_for_writing(), GcsJournal(job).open_for_writing():
      pass
  # A gap, or an object that is not an event, is named in one line.
  storage.delete(j.entry(2))
  with pytest.raises(InputError, match=r"journal/0000000002\.json is missing"):
    GcsJournal(job).events()
  storage.write_text(j.entry(2), "{not json")
  with pytest.raises(InputError, match=r"journal/0000000002\.json is not JSON"):
    GcsJournal(job).events()
  storage.write_text(j.entry(2), '{"seq": 5, "event": "a"}')
  with pytest.raises(InputError, match=r"0000000002\.json has seq 5 where 2 was expected"):
    GcsJournal(job).events()
  # --overwrite deletes every entry, even of a damaged journal.
  with j.open_for_writing():
    j.delete()
    assert j.append({"event": "search_started", "settings": {}})["seq"] == 1
  assert _entries(job) == ["0000000001.json"]


def test_list_trials_names_a_damaged_gcs_journal(cli, gcs_prefix):
  job = storage.join(gcs_prefix, "job")
  code, _, stderr = cli("list_trials", job)
  assert code == 1 and stderr == f"Error: {job} does not exist\n"  # as `report` says
  storage.write_text(storage.join(job, "notes.txt"), "x")
  code, _, stderr = cli("list_trials", job)
  assert code == 1 and stderr == f"Error: {job} is not a nascli search job (no journal/)\n"
  storage.write_text(GcsJournal(job).entry(1), '{"seq": 1, "event": "search_started"}')
  storage.write_text(GcsJournal(job).entry(3), '{"seq": 3, "event": "note"}')
  code, _, stderr = cli("list_trials", job)
  assert code == 1 and stderr.count("\n") == 1 and "journal/0000000002.json is missing" in stderr


def test_publish_uploads_the_marker_last_and_drops_stale_objects(gcs_prefix, tmp_path,
                                                                 monkeypatch):
  monkeypatch.setenv("NASCLI_CACHE_DIR", str(tmp_path / "cache"))
  job = storage.join(gcs_prefix, "job")
  ws = workspace.for_job_dir(job)
  local = os.path.join(ws.work_dir, "4")
  files = {"job_status.json": "{}", "model_analysis.json": "{}", "checkpoint": "ckpt-2",
           "ckpt-2.index": "i", "zz.txt": "z", "train/events.out.tfevents.1.x": "e",
           ".params.yaml.1a2b.tmp": "half"}
  for name, text in files.items():
    storage.write_text(os.path.join(local, name), text)
  # An earlier attempt's objects: its marker goes when the attempt starts, the rest on publish.
  storage.write_text(storage.join(job, "4", "job_status.json"), '{"status": "completed"}')
  storage.write_text(storage.join(job, "4", "ckpt-1.index"), "old")
  ws.attempt_starting("4")
  assert storage.list_names(storage.join(job, "4")) == ["ckpt-1.index"]
  uploaded = []
  real_upload = storage.upload_file
  monkeypatch.setattr(storage, "upload_file",
                      lambda src, dest: uploaded.append(dest) or real_upload(src, dest))
  ws.publish("4")
  assert [u.rsplit("/4/", 1)[1] for u in uploaded[-3:]] == [
      "checkpoint", "model_analysis.json", "job_status.json"]
  assert storage.list_names(storage.join(job, "4")) == sorted(
      n for n in files if not n.endswith(".tmp"))
  ws.recorded("4")
  assert not os.path.exists(local)


def test_staging_of_another_search_is_not_resumed(gcs_prefix, tmp_path, monkeypatch):
  monkeypatch.setenv("NASCLI_CACHE_DIR", str(tmp_path / "cache"))
  ws = workspace.for_job_dir(storage.join(gcs_prefix, "job"))
  first = [{"seq": 1, "event": "search_started", "time": "t1", "fingerprint": "f"}]
  os.makedirs(os.path.join(ws.work_dir, "2"))
  ws.prepare(first)  # no record of which search it was: cleared
  assert not os.path.exists(os.path.join(ws.work_dir, "2"))
  os.makedirs(os.path.join(ws.work_dir, "2"))
  ws.prepare(first)  # the same search: an interrupted trial's checkpoints are kept
  assert os.path.isdir(os.path.join(ws.work_dir, "2"))
  ws.prepare([{**first[0], "time": "t2"}])  # started over (--overwrite): cleared
  assert not os.path.exists(os.path.join(ws.work_dir, "2"))


def test_unsupported_job_dir_scheme_is_one_line(cli):
  code, _, stderr = cli("list_trials", "s3://bucket/job")
  assert code == 1 and stderr == (
      "Error: s3://bucket/job: a search job dir is a local folder or a gs://BUCKET/PREFIX URL\n")


# Slow tier: Ray trials on GCS. The default tier checks the upload itself
# (test_publish_uploads_the_marker_last_and_drops_stale_objects) and Ray trials
# (tests/test_search_ray.py).
@pytest.mark.slow
def test_ray_trials_run_on_their_node_and_upload_their_own_folders(searched, cache, tmp_path):
  """`nascli search` with a gs:// job dir: each Ray task carries its spec and config files,
  runs the trial in a temporary folder of its node and uploads the folder itself, so a cluster
  shares nothing with the driver but the bucket."""
  pytest.importorskip("ray")
  job = storage.join(searched[0].rsplit("/", 1)[0] + "-ray", "job")
  ray_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's unix sockets live there
  try:
    proc = nascli_subprocess(
        "search", "--ray_address", "local", "--ray_num_cpus", "2", "--ray_temp_dir", ray_dir,
        *_search_args(job, "--max_nas_trial", "2", "--max_parallel_nas_trial", "2",
                      "--json", export=True)[1:], env={"NASCLI_CACHE_DIR": cache})
  finally:
    shutil.rmtree(ray_dir, ignore_errors=True)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = json.loads(proc.stdout)
  assert [(r["trial_id"], r["status"]) for r in rows] == [("1", "completed"), ("2", "completed")]
  names = storage.list_names(job)
  staging = journal_lib.staging_dir(job)
  for trial_id in ("1", "2"):
    # The same files as a trial of a local search, checkpoints and marker included.
    assert _trial_layout(names, trial_id) == FINISHED_TRIAL_FILES
    spec = json.loads(storage.read_text(storage.join(job, trial_id, "trial_spec.json")))
    # It ran in the node's temporary folder, from the config files the task carried.
    assert os.path.basename(spec["job_dir"]).startswith("nascli-trial-")
    assert not spec["job_dir"].startswith(staging)
    configs = spec["trial"]["run"]["config_files"]
    assert configs and all(c.startswith(os.path.join(spec["job_dir"], "configs", ""))
                           for c in configs)
    assert not os.path.exists(spec["job_dir"])  # and the node cleaned up after it
  events = GcsJournal(job).events()
  assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
  assert sorted(e["trial_id"] for e in events if e["event"] == "completed") == ["1", "2"]
  listed = nascli_subprocess("list_trials", job, "--json")
  assert sorted(r["reward"] for r in json.loads(listed.stdout)) == sorted(
      r["reward"] for r in rows)


# Slow tier (2 minutes here: a trial more, in a fresh process); the default tier has the copy
# itself (tests/test_resume_gcs.py) and the local search_resume (tests/test_search_resume.py).
@pytest.mark.slow
def test_search_resume_into_a_gcs_job_dir_after_a_killed_copy(searched, cache):
  """search_resume --local_output_dir gs://...: a copy killed on the way (its claim left, one
  journal entry up) is made again whole, then the search runs its one more trial; a copy under
  way in a live process on this machine is refused (nascli/search/resume_gcs.py)."""
  job, rows = searched
  new = job + "-resumed"
  claim = storage.join(new, ".resume-copy.json")
  dead = subprocess.Popen(["true"])  # a pid that no process has any more
  dead.wait()
  storage.create_bytes(claim, json.dumps({"previous": job, "host": os.uname().nodename,
                                          "pid": dead.pid}).encode())
  first = GcsJournal(job).entry(1)
  storage.create_bytes(GcsJournal(new).entry(1), storage.read_bytes(first))
  storage.write_text(storage.join(new, "1", "half-written.tmp"), "x")
  env = {"NASCLI_CACHE_DIR": cache}
  live = subprocess.Popen(["sleep", "60"])
  try:
    storage.write_text(claim, json.dumps({"previous": job, "host": os.uname().nodename,
                                          "pid": live.pid}))
    refused = nascli_subprocess("search_resume", "--previous_job_dir", job,
                                "--local_output_dir", new, "--max_nas_trial", "3", env=env)
  finally:
    live.kill()
    live.wait()
  assert refused.returncode == 1, refused.stderr
  assert refused.stderr == (f"Error: another search_resume (pid {live.pid}) is making {new};"
                            " wait for it\n")
  resumed = nascli_subprocess("search_resume", "--previous_job_dir", job, "--local_output_dir",
                              new, "--max_nas_trial", "3", "--json", env=env, timeout=900)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  got = json.loads(resumed.stdout)
  assert [(r["trial_id"], r["status"]) for r in got] == [
      ("1", "completed"), ("2", "completed"), ("3", "completed")]
  assert all(r["trial_dir"] == f"{new}/{r['trial_id']}" for r in got)
  assert {r["trial_id"]: r["reward"] for r in got if r["trial_id"] != "3"} == {
      r["trial_id"]: r["reward"] for r in rows}
  assert not storage.exists(claim)
  previous = GcsJournal(job).events()
  events = GcsJournal(new).events()
  assert events[:len(previous)] == previous
  assert events[len(previous)]["event"] == "resumed_from"
  assert events[len(previous)]["previous_job_dir"] == job
  assert [e["trial_id"] for e in events[len(previous):] if e["event"] == "completed"] == ["3"]
  names = storage.list_names(new)
  assert "1/half-written.tmp" not in names
  assert _trial_layout(names, "1") == _trial_layout(storage.list_names(job), "1")
  listed = nascli_subprocess("list_trials", new, "--json")
  assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 3, listed.stderr
