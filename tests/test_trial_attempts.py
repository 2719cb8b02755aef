"""One trial attempt's outcome, as the driver reads it from the trial dir: an earlier rung's
analysis is not the attempt's result, and a bug in nascli's own code around a trial stops the
search instead of failing an architecture. Unit level: trial dirs written by hand, attempts run
in this process up to a fault injected into one bookkeeping function (no TensorFlow)."""

import json

import pytest

from nascli import app
from nascli.search import executors
from nascli.search import attempts
from nascli.search import search_loop
from nascli.search import trial
from nascli.search.journal import Journal
from tf_vision import job_status


def _write(trial_dir, analysis=None, **status):
  trial_dir.mkdir(parents=True, exist_ok=True)
  if analysis is not None:
    (trial_dir / trial.ANALYSIS).write_text(json.dumps({'trial_id': '1', **analysis}))
  job_status.write(str(trial_dir), **status)


def test_an_earlier_rungs_analysis_is_not_the_attempts_outcome(tmp_path):
  """Rung 0's model_analysis.json (step 10) is still there when the last rung's attempt is
  killed after training wrote `completed` (step 20) and before its own analysis: the attempt
  did not end with its outcome written (it runs again), it is not completed with rung 0's
  metrics."""
  d = tmp_path / '1'
  rung0 = {'step': 10, 'rung': 0, 'reward': 0.25, 'final': False}
  _write(d, rung0, status='completed', step=20, eval_metrics={'accuracy': 0.5})
  assert not trial.completed(str(d)) and not trial.reported(str(d))
  # A rung report fetched beside an older analysis: the same.
  _write(d, rung0, status='paused', step=30, rung=1, reward=0.3)
  assert not trial.reported(str(d))
  # The attempt's own outcome: its analysis, then its status, for the same step and rung.
  _write(d, {'step': 20, 'rung': 1, 'reward': 0.5, 'final': True}, status='completed',
         step=20, rung=1, reward=0.5, final=True)
  assert trial.completed(str(d)) and trial.reported(str(d))
  _write(d, {'step': 30, 'rung': 1, 'reward': 0.3}, status='paused', step=30, rung=1,
         reward=0.3)
  assert trial.reported(str(d)) and not trial.completed(str(d))
  # Without early stopping: no rung on either side.
  _write(d, {'step': 20, 'reward': 0.5}, status='completed', step=20)
  assert trial.completed(str(d))


def _spec(tmp_path, **fields):
  spec = trial.TrialSpec(job_dir=str(tmp_path / 'job'), trial_id='1', search_space='mnasnet',
                         nas_params={'blocks[0].kernel_size': '0/2 (3)'}, **fields)
  path = tmp_path / 'trial_spec.json'
  trial.write_spec(str(path), spec)
  return str(path), tmp_path / 'job' / '1'


def test_a_bug_in_the_bookkeeping_around_a_trial_stops_the_search_not_the_trial(
    tmp_path, monkeypatch, capsys):
  """A TypeError in nascli's own code around the trial (its files' writer, here) is recorded
  as nascli's error, not as the trial's failure; the driver then stops the search with one
  line saying it is a bug in nascli, and charges the trial nothing."""
  spec_path, trial_dir = _spec(tmp_path)

  def broken_write_json(path, data):
    del path, data
    raise TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'")

  monkeypatch.setattr(trial, '_write_json', broken_write_json)
  assert trial.attempt(spec_path) == 1
  status = job_status.read(str(trial_dir))
  assert status['status'] == trial.NASCLI_ERROR != 'failed' and status['bug'] is True
  reason = "TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'"
  assert status['reason'] == reason
  assert 'broken_write_json' in status['traceback']
  assert capsys.readouterr().err == f'Error: a bug in nascli around the trial, {reason}\n'

  # The driver, reading the attempt's outcome, stops instead of journaling a failed trial.
  job = tmp_path / 'job'
  # pylint: disable=protected-access
  loop = search_loop.SearchLoop.__new__(search_loop.SearchLoop)  # no frameworks, no workers
  loop.work_dir, loop.journal = str(job), Journal.in_dir(job)
  running = attempts.Running('1', None, None, 0.0, journaled=True)
  with pytest.raises(trial.NascliBug) as raised:
    loop._finish(running, executors.Outcome(returncode=1), None, None)
  assert not (job / 'journal.jsonl').exists()
  # main() prints it as one line; NASCLI_DEBUG=1 adds the trial's traceback.
  assert app._report_error(raised.value, debug=False) == 1
  line = capsys.readouterr().err
  assert line == (f"Error: unexpected NascliBug: trial 1: {reason}, in nascli's own code around"
                  " the trial: a bug in nascli, not the architecture's failure (the search"
                  " stops; trial 1 runs again when the search resumes) (set NASCLI_DEBUG=1 for"
                  " the traceback)\n")
  app._report_error(raised.value, debug=True)
  assert "in broken_write_json" in capsys.readouterr().err


def test_an_environment_error_around_a_trial_stops_the_search_without_calling_it_a_bug(
    tmp_path, monkeypatch, capsys):
  spec_path, trial_dir = _spec(tmp_path)

  def full_disk(path, data):
    del data
    raise OSError(28, 'No space left on device', path)

  monkeypatch.setattr(trial, '_write_json', full_disk)
  assert trial.attempt(spec_path) == 1
  status = job_status.read(str(trial_dir))
  assert (status['status'], status['bug']) == (trial.NASCLI_ERROR, False)
  capsys.readouterr()
  with pytest.raises(trial.NascliError, match=r"^trial 1: OSError: \[Errno 28\] No space left"
                     r" on device: '.*nas_params_str.json' \(not the trial's failure: the"
                     r" search stops; trial 1 runs again when the search resumes\)$"):
    trial.check_attempt('1', status)


def test_the_trials_own_failure_is_failed_and_the_search_goes_on(tmp_path, capsys):
  """A user's search space module that does not load (the trial's own config) fails the trial,
  as training errors, out-of-memory and NaN losses do; the driver's check lets it be
  journaled `failed`."""
  spec_path, trial_dir = _spec(tmp_path, search_space_module='no_such_module')
  assert trial.attempt(spec_path) == 1
  status = job_status.read(str(trial_dir))
  assert status['status'] == 'failed'
  assert status['reason'].startswith("NascliError: search space module 'no_such_module'")
  assert capsys.readouterr().err.startswith("Error: NascliError: search space module")
  trial.check_attempt('1', status)  # not nascli's: no error
