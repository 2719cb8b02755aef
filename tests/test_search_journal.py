"""The search journal: durable appends, crash tolerance, one writer, replay, settings checks."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from nascli.errors import InputError
from nascli.errors import OutputError
from nascli.search import journal as journal_lib
from nascli.search.journal import Journal

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write(job_dir, *events):
  j = Journal.in_dir(job_dir)
  with j.open_for_writing():
    return j, [j.append(e) for e in events]


def _lines(path):
  with open(path, 'rb') as f:
    return f.read().split(b'\n')


def test_append_writes_fsynced_lines_with_increasing_seq(tmp_path, monkeypatch):
  synced = []
  real_fsync = os.fsync

  def spy(fd):
    synced.append(os.readlink(f'/proc/self/fd/{fd}'))
    real_fsync(fd)

  monkeypatch.setattr(os, 'fsync', spy)
  j = Journal.in_dir(tmp_path)
  with j.open_for_writing():
    first = j.append({'event': 'search_started', 'settings': {'seed': 1}, 'fingerprint': 'f'})
    second = j.append({'event': 'proposed', 'trial_id': '1', 'dna': [0, 2], 'nas_params': {}})
    journal_syncs = synced.count(j.path)
  assert (first['seq'], second['seq']) == (1, 2)
  assert first['time'].endswith('Z') and first['time'][:2] == '20'
  assert journal_syncs == 2  # One fsync per line, before append returns.
  lines = _lines(j.path)
  assert lines[-1] == b''  # Every line, the last included, is newline-terminated.
  assert [json.loads(x) for x in lines[:-1]] == [first, second]
  assert json.loads(lines[1])['dna'] == [0, 2]
  # Appending again later continues the sequence.
  with j.open_for_writing():
    assert j.append({'event': 'started', 'trial_id': '1', 'attempt': 1})['seq'] == 3
  assert [e['seq'] for e in Journal.in_dir(tmp_path).events()] == [1, 2, 3]


def test_append_needs_the_writer_lock_and_an_event_name(tmp_path):
  j = Journal.in_dir(tmp_path)
  with pytest.raises(RuntimeError, match='open_for_writing'):
    j.append({'event': 'x'})
  with j.open_for_writing():
    with pytest.raises(ValueError, match='"event" name'):
      j.append({'trial_id': '1'})
    with pytest.raises(ValueError, match='seq'):
      j.append({'event': 'x', 'seq': 9})
  assert not os.path.exists(j.path)


def test_torn_last_line_is_ignored_then_truncated_by_the_next_writer(tmp_path):
  j, written = _write(tmp_path, {'event': 'search_started', 'settings': {}},
                      {'event': 'proposed', 'trial_id': '1', 'dna': [1], 'nas_params': {}})
  good_size = os.path.getsize(j.path)
  torn = b'{"seq":3,"time":"2024-01-01T00:00:00Z","event":"compl'
  with open(j.path, 'ab') as f:
    f.write(torn)
  # Readers skip it and leave the file alone.
  assert Journal.in_dir(tmp_path).events() == written
  assert os.path.getsize(j.path) == good_size + len(torn)
  # A complete JSON object without its newline is torn too: append never returned for it.
  writer = Journal.in_dir(tmp_path)
  with writer.open_for_writing():
    assert writer.repaired_bytes == len(torn)
    assert os.path.getsize(j.path) == good_size
    assert writer.append({'event': 'started', 'trial_id': '1', 'attempt': 1})['seq'] == 3
  events = Journal.in_dir(tmp_path).events()
  assert [e['event'] for e in events] == ['search_started', 'proposed', 'started']
  assert _lines(j.path)[-1] == b''


def test_corrupt_middle_line_is_an_error_naming_the_line(tmp_path):
  j, _ = _write(tmp_path, *({'event': 'note', 'n': n} for n in range(4)))
  lines = _lines(j.path)
  lines[2] = b'{"seq":3,"event":"note","n":2' + b'\x00' * 5  # Damaged in place.
  with open(j.path, 'wb') as f:
    f.write(b'\n'.join(lines))
  with pytest.raises(InputError, match=r'journal\.jsonl: line 3 is not JSON'):
    Journal.in_dir(tmp_path).events()
  # The writer cannot add to it either (but can still open it, so --overwrite works).
  writer = Journal.in_dir(tmp_path)
  with writer.open_for_writing():
    with pytest.raises(InputError, match='line 3'):
      writer.append({'event': 'note'})


def test_lost_line_is_an_error_naming_the_line(tmp_path):
  j, _ = _write(tmp_path, *({'event': 'note', 'n': n} for n in range(3)))
  lines = _lines(j.path)
  del lines[1]
  with open(j.path, 'wb') as f:
    f.write(b'\n'.join(lines))
  with pytest.raises(InputError, match='line 2 has seq 3 where 2 was expected'):
    Journal.in_dir(tmp_path).events()


def test_second_writer_in_this_process_is_refused_with_the_pid(tmp_path):
  first = Journal.in_dir(tmp_path)
  with first.open_for_writing():
    with open(first.lock_path) as f:
      assert f.read().strip() == str(os.getpid())
    with pytest.raises(OutputError) as e:
      with Journal.in_dir(tmp_path).open_for_writing():
        pass
    assert str(e.value).startswith(
        f'another search is running in {tmp_path} (pid {os.getpid()})')
  # Released on exit: the next writer gets in.
  with Journal.in_dir(tmp_path).open_for_writing() as second:
    assert second.writing


def test_second_writer_in_another_process_is_refused(tmp_path):
  script = textwrap.dedent(f"""
      import sys
      sys.path.insert(0, {REPO!r})
      from nascli.errors import OutputError
      from nascli.search.journal import Journal
      try:
        with Journal.in_dir({str(tmp_path)!r}).open_for_writing() as j:
          j.append({{'event': 'note'}})
      except OutputError as e:
        print(e)
        sys.exit(3)
      """)
  holder = Journal.in_dir(tmp_path)
  with holder.open_for_writing():
    out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 3, out.stderr
    assert f'another search is running in {tmp_path} (pid {os.getpid()})' in out.stdout
  assert not os.path.exists(holder.path)  # The refused process wrote nothing.
  out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                       timeout=60, check=False)
  assert out.returncode == 0, out.stdout + out.stderr
  assert [e['event'] for e in holder.events()] == ['note']


EVENTS = [
    {'seq': 1, 'time': 't1', 'event': 'search_started', 'settings': {'search_space': 'mnasnet'},
     'fingerprint': 'abc'},
    {'seq': 2, 'event': 'proposed', 'trial_id': '1', 'dna': [0, 1], 'nas_params': {'a': '0/2 (3)'}},
    {'seq': 3, 'event': 'proposed', 'trial_id': '2', 'dna': [1, 1], 'nas_params': {'a': '1/2 (5)'}},
    {'seq': 4, 'event': 'proposed', 'trial_id': '3', 'dna': [1, 0], 'nas_params': {}},
    {'seq': 5, 'event': 'proposed', 'trial_id': '4', 'dna': [0, 0], 'nas_params': {}},
    {'seq': 6, 'event': 'proposed', 'trial_id': '5', 'dna': [2, 0], 'nas_params': {}},
    {'seq': 7, 'time': 't7', 'event': 'started', 'trial_id': '1', 'attempt': 1},
    {'seq': 8, 'event': 'started', 'trial_id': '2', 'attempt': 1},
    {'seq': 9, 'event': 'started', 'trial_id': '3', 'attempt': 1},
    {'seq': 10, 'event': 'started', 'trial_id': '5', 'attempt': 1},
    {'seq': 11, 'time': 't11', 'event': 'completed', 'trial_id': '2', 'reward': 0.5,
     'metrics': {'accuracy': 0.6, 'latency_ms': 1.5}},
    {'seq': 12, 'event': 'failed', 'trial_id': '3', 'status': 'failed_with_nan',
     'reason': 'loss is NaN at step 7'},
    {'seq': 13, 'event': 'search_resumed'},  # Unknown kinds are ignored.
    {'seq': 14, 'event': 'failed', 'trial_id': '5', 'status': 'failed', 'reason': 'OOM'},
    {'seq': 15, 'time': 't15', 'event': 'started', 'trial_id': '5', 'attempt': 2},
    {'seq': 16, 'event': 'completed', 'trial_id': '5', 'reward': 0.75, 'metrics': {}},
    {'seq': 17, 'event': 'failed', 'trial_id': '4', 'status': 'infeasible', 'reason': 'too big'},
]


def test_replay_reduces_events_to_job_state():
  state = journal_lib.replay(EVENTS)
  assert state.settings == {'search_space': 'mnasnet'}
  assert state.fingerprint == 'abc'
  assert list(state.proposals) == ['1', '2', '3', '4', '5']
  assert state.proposals['2'].dna == (1, 1)
  assert state.proposals['2'].nas_params == {'a': '1/2 (5)'}
  assert state.status == {'1': 'running', '2': 'completed', '3': 'failed_with_nan',
                          '4': 'infeasible', '5': 'completed'}
  assert state.rewards == {'2': 0.5, '5': 0.75}
  assert state.metrics['2'] == {'accuracy': 0.6, 'latency_ms': 1.5}
  assert state.attempts == {'1': 1, '2': 1, '3': 1, '4': 0, '5': 2}
  assert state.reasons == {'3': 'loss is NaN at step 7', '4': 'too big'}  # 5 recovered.
  assert state.completion_order == ['2', '3', '5', '4']
  assert state.started_time['1'] == 't7' and state.started_time['5'] == 't15'
  assert state.finished_time['2'] == 't11'
  assert state.unfinished() == ['1']
  assert state.trial_ids('completed') == ['2', '5']
  assert state.dnas() == {(0, 1), (1, 1), (1, 0), (0, 0), (2, 0)}
  assert state.next_trial_id() == '6'
  assert state.best() == '5'
  assert state.last_seq == 17


def test_replay_of_a_pending_trial_and_an_empty_journal():
  state = journal_lib.replay(EVENTS[:3])
  assert state.status == {'1': 'pending', '2': 'pending'}
  assert state.unfinished() == ['1', '2'] and state.best() is None
  empty = journal_lib.replay([])
  assert empty.settings is None and empty.next_trial_id() == '1'


def test_a_lost_attempt_makes_the_trial_pending_again():
  lost = EVENTS[:11] + [
      {'seq': 12, 'event': 'lost', 'trial_id': '1', 'attempt': 1, 'reason': 'worker died'}]
  state = journal_lib.replay(lost)
  assert state.status['1'] == 'pending' and state.losses == {'1': 1}
  assert state.unfinished() == ['1', '3', '4', '5'] and state.reasons['1'] == 'worker died'
  again = journal_lib.replay(lost + [
      {'seq': 13, 'event': 'started', 'trial_id': '1', 'attempt': 2},
      {'seq': 14, 'event': 'completed', 'trial_id': '1', 'reward': 0.9, 'metrics': {}}])
  assert again.status['1'] == 'completed' and again.attempts['1'] == 2
  assert again.losses == {'1': 1} and '1' not in again.reasons


def test_an_interrupted_attempt_runs_again_first_on_resume():
  interrupted = EVENTS[:11] + [
      {'seq': 12, 'time': 't12', 'event': 'interrupted', 'trial_id': '1', 'attempt': 1,
       'signal': 'SIGINT'}]
  state = journal_lib.replay(interrupted)
  assert state.status['1'] == 'interrupted' and state.finished_time['1'] == 't12'
  assert state.unfinished() == ['1', '3', '4', '5']  # first, in proposal order
  assert state.losses == {} and state.attempts['1'] == 1 and '1' not in state.completion_order
  again = journal_lib.replay(interrupted + [
      {'seq': 13, 'event': 'started', 'trial_id': '1', 'attempt': 2},
      {'seq': 14, 'event': 'completed', 'trial_id': '1', 'reward': 0.9, 'metrics': {}}])
  assert again.status['1'] == 'completed' and again.attempts['1'] == 2


@pytest.mark.parametrize('event, message', [
    ({'event': 'lost', 'trial_id': '4'}, 'loses trial 4, which is not running'),
    ({'event': 'interrupted', 'trial_id': '4'}, 'interrupts trial 4, which is not running'),
    ({'event': 'started', 'trial_id': '9'}, r'seq 99 \(started\) names trial 9, which was never'),
    ({'event': 'proposed', 'trial_id': '1', 'dna': [0]}, 'proposes trial 1 a second time'),
    ({'event': 'failed', 'trial_id': '2', 'status': 'failed'}, 'trial 2, which already completed'),
    ({'event': 'failed', 'trial_id': '1', 'status': 'crashed'}, "status 'crashed'"),
    ({'event': 'completed', 'trial_id': '1', 'reward': None}, 'no numeric reward'),
    ({'event': 'failed', 'trial_id': '4', 'status': 'failed', 'lost': {'attempt': 1}},
     'loses trial 4, which is not running'),
])
def test_replay_refuses_illegal_events(event, message):
  with pytest.raises(InputError, match=message):
    journal_lib.replay(EVENTS[:11] + [{'seq': 99, **event}])


def test_a_failed_event_that_carries_the_last_loss_counts_it():
  """The loss that spends a trial's retries is journaled in its `failed` event (one write)."""
  state = journal_lib.replay(EVENTS[:11] + [
      {'seq': 12, 'event': 'lost', 'trial_id': '1', 'attempt': 1, 'reason': 'worker died'},
      {'seq': 13, 'event': 'started', 'trial_id': '1', 'attempt': 2},
      {'seq': 14, 'event': 'failed', 'trial_id': '1', 'status': 'failed',
       'reason': 'lost 2 attempts', 'lost': {'attempt': 2, 'reason': 'worker died'}}])
  assert state.status['1'] == 'failed' and state.losses == {'1': 2}
  assert state.reasons['1'] == 'lost 2 attempts' and state.unfinished() == ['3', '4', '5']


def test_applying_events_one_by_one_equals_replay():
  """What the search loop does (replay what is there, then apply each event it appends) ends
  in the state a reader's replay of the whole journal gives, from any point."""
  events = EVENTS + [
      {'seq': 18, 'time': 't18', 'event': 'lost', 'trial_id': '1', 'attempt': 1,
       'reason': 'node died'},
      {'seq': 19, 'event': 'started', 'trial_id': '1', 'attempt': 2},
      {'seq': 20, 'time': 't20', 'event': 'interrupted', 'trial_id': '1', 'attempt': 2,
       'signal': 'SIGTERM'},
      {'seq': 21, 'event': 'started', 'trial_id': '1', 'attempt': 3},
      {'seq': 22, 'time': 't22', 'event': 'failed', 'trial_id': '1', 'status': 'failed',
       'reason': 'lost 2 attempts', 'lost': {'attempt': 3, 'reason': 'node died'}}]
  whole = journal_lib.replay(events)
  assert whole.losses == {'1': 2} and whole.completion_order[-1] == '1'
  for k in range(len(events) + 1):
    state = journal_lib.replay(events[:k])
    for event in events[k:]:
      state.apply(event)
    assert state == whole, f'applied from event {k + 1} on'


SETTINGS = {'search_space': 'mnasnet', 'algorithm': 'random', 'seed': 1,
            'reward': {'target_latency_ms': 2.0, 'w': 0.07}, 'max_trials': 10,
            'input_size': [32, 32]}


def test_check_settings_starts_then_resumes(tmp_path):
  job = tmp_path / 'job'
  state = journal_lib.check_settings(job, SETTINGS, overwrite=False)
  assert state.settings == SETTINGS and state.fingerprint == journal_lib.fingerprint(SETTINGS)
  (started,) = Journal.in_dir(job).events()
  assert started['event'] == 'search_started' and started['seq'] == 1
  # Same settings (key order and tuples vs lists do not matter): resume, write nothing.
  same = dict(reversed(list(SETTINGS.items())), input_size=(32, 32))
  state = journal_lib.check_settings(job, same, overwrite=False)
  assert state.settings == SETTINGS
  assert len(Journal.in_dir(job).events()) == 1


def test_check_settings_refuses_other_settings_naming_the_difference(tmp_path):
  journal_lib.check_settings(tmp_path, SETTINGS, overwrite=False)
  other = {**SETTINGS, 'search_space': 'spinenet'}
  with pytest.raises(OutputError) as e:
    journal_lib.check_settings(tmp_path, other, overwrite=False)
  assert str(e.value) == (
      f"{tmp_path} was started with other settings (differs in: search_space 'mnasnet' -> "
      f"'spinenet'); pass --overwrite or use another --local_output_dir")
  nested = {**SETTINGS, 'reward': {'target_latency_ms': 3.0}, 'extra': True}
  with pytest.raises(OutputError, match=r'differs in: extra \(unset\) -> True; '
                     r'reward\.target_latency_ms 2\.0 -> 3\.0; reward\.w 0\.07 -> \(unset\)\)'):
    journal_lib.check_settings(tmp_path, nested, overwrite=False)


def test_mutable_keys_may_change_on_resume(tmp_path):
  journal_lib.check_settings(tmp_path, SETTINGS, overwrite=False, mutable_keys=['max_trials'])
  state = journal_lib.check_settings(tmp_path, {**SETTINGS, 'max_trials': 50}, overwrite=False,
                                     mutable_keys=['max_trials'])
  assert state.settings['max_trials'] == 10  # As started; the caller uses its current value.
  with pytest.raises(OutputError, match=r'reward\.w 0\.07 -> 0\.1'):
    journal_lib.check_settings(tmp_path, {**SETTINGS, 'reward': {'target_latency_ms': 2.0,
                                                                  'w': 0.1}},
                               overwrite=False, mutable_keys=['max_trials'])


def test_overwrite_deletes_the_old_search_and_nothing_else(tmp_path):
  journal_lib.check_settings(tmp_path, SETTINGS, overwrite=False)
  for name in ('1', '2', 'hparams'):
    (tmp_path / name).mkdir()
    (tmp_path / name / 'f.txt').write_text('x')
  (tmp_path / 'trials.json').write_text('[]')
  (tmp_path / 'notes.txt').write_text('mine')
  (tmp_path / 'data').mkdir()
  other = {**SETTINGS, 'search_space': 'spinenet'}
  state = journal_lib.check_settings(tmp_path, other, overwrite=True)
  assert state.settings['search_space'] == 'spinenet' and not state.proposals
  assert sorted(os.listdir(tmp_path)) == ['.lock', 'data', 'journal.jsonl', 'notes.txt']
  assert [e['seq'] for e in Journal.in_dir(tmp_path).events()] == [1]


def test_overwrite_works_on_a_damaged_journal(tmp_path):
  (tmp_path / 'journal.jsonl').write_text('garbage\n{"seq": 2, "event": "x"}\n')
  with pytest.raises(InputError, match='line 1 is not JSON'):
    journal_lib.check_settings(tmp_path, SETTINGS, overwrite=False)
  state = journal_lib.check_settings(tmp_path, SETTINGS, overwrite=True)
  assert state.settings == SETTINGS


def test_outputs_without_a_journal_are_not_touched_without_overwrite(tmp_path):
  (tmp_path / '3').mkdir()
  (tmp_path / 'trials.csv').write_text('trial_id\n')
  with pytest.raises(OutputError, match=r'holds search outputs \(trials\.csv, 3/\) but no '
                     r'journal\.jsonl'):
    journal_lib.check_settings(tmp_path, SETTINGS, overwrite=False)
  assert (tmp_path / '3').is_dir() and not (tmp_path / 'journal.jsonl').exists()


def test_check_settings_uses_the_callers_open_journal(tmp_path):
  j = Journal.in_dir(tmp_path)
  with j.open_for_writing():
    journal_lib.check_settings(tmp_path, SETTINGS, overwrite=False, journal=j)
    assert j.append({'event': 'note'})['seq'] == 2
    with pytest.raises(OutputError, match='another search is running'):
      journal_lib.check_settings(tmp_path, SETTINGS, overwrite=False)


def test_job_dir_that_is_a_file_is_refused(tmp_path):
  (tmp_path / 'job').write_text('x')
  with pytest.raises(OutputError, match='is a file'):
    journal_lib.check_settings(tmp_path / 'job', SETTINGS, overwrite=False)


def test_a_failed_append_leaves_no_partial_line(tmp_path, monkeypatch):
  j = Journal.in_dir(tmp_path)
  with j.open_for_writing():
    j.append({'event': 'note', 'n': 1})
    size = os.path.getsize(j.path)
    real_write = os.write

    def short_then_full_disk(fd, data):
      monkeypatch.setattr(os, 'write', lambda fd, data: (_ for _ in ()).throw(
          OSError(28, 'No space left on device')))
      return real_write(fd, bytes(data[:10]))

    monkeypatch.setattr(os, 'write', short_then_full_disk)
    with pytest.raises(OSError, match='No space left'):
      j.append({'event': 'note', 'n': 2})
    monkeypatch.setattr(os, 'write', real_write)
    assert os.path.getsize(j.path) == size
    assert j.append({'event': 'note', 'n': 3})['seq'] == 2
  assert [e['n'] for e in j.events()] == [1, 3]
