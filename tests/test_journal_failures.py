"""The journal's counter and the file agree whatever is raised around an append (issue 25, item
1): a line on disk is counted, a line not on disk is not, and a resume reads the journal and
goes on. Also journals that older versions left with a repeated seq, which must resume."""

import fcntl
import json
import os

import pytest

from nascli import interrupts
from nascli import storage
from nascli.errors import InputError
from nascli.search import journal as journal_lib
from nascli.search import journal_file
from nascli.search.journal import GcsJournal
from nascli.search.journal import Journal

SETTINGS = {'search_space': 'mnasnet', 'seed': 1}


def _raw_seqs(path):
  """The seqs as written in the file (events() would renumber a repeat)."""
  with open(path, 'rb') as f:
    return [json.loads(line)['seq'] for line in f.read().splitlines()]


def _note(n):
  return {'event': 'note', 'n': n}


class _Once:
  """Wraps `real`: the first call that `when(*args)` picks runs `real` (if `after`), then
  raises Interrupted, as the signal handler does when a signal lands right there."""

  def __init__(self, real, when=lambda *args: True, after=True):
    self.real, self.when, self.after, self.fired = real, when, after, False

  def __call__(self, *args):
    if self.fired or not self.when(*args):
      return self.real(*args)
    self.fired = True
    if self.after:
      self.real(*args)
    raise interrupts.Interrupted()


# (target, attribute, when, whether the line stays on disk): every step of an append from its
# write up to the counter's increment and after it.
POINTS = {
    'fsync': (os, 'fsync', lambda fd: True, True),  # returned, then the signal: line removed
    'unlock': (fcntl, 'flock', lambda fd, op: op == fcntl.LOCK_UN, True),
    'close': (os, 'close', lambda fd: True, True),
}


@pytest.mark.parametrize('point', sorted(POINTS))
def test_an_exception_after_the_write_leaves_counter_and_file_in_step(point, tmp_path,
                                                                       monkeypatch):
  target, name, when, _ = POINTS[point]
  j = Journal.in_dir(tmp_path)
  journal_lib.check_settings(tmp_path, SETTINGS, overwrite=False)
  with j.open_for_writing():
    j.append(_note(1))
    injected = _Once(getattr(target, name), when)
    monkeypatch.setattr(target, name, injected)
    with pytest.raises(interrupts.Interrupted):
      j.append(_note(2))
    monkeypatch.undo()
    assert injected.fired
    on_disk = [e.get('n') for e in j.events()]
    # An fsync cut short by the signal drops its line; after the fsync the line stays.
    assert on_disk == ([None, 1] if point == 'fsync' else [None, 1, 2])
    # What the interrupt path does next: journal one more event, with the next seq.
    assert j.append({'event': 'interrupted_note'})['seq'] == len(on_disk) + 1
  assert _raw_seqs(j.path) == list(range(1, len(on_disk) + 2))
  # The resume: reads the journal (settings agree), and goes on.
  state = journal_lib.check_settings(tmp_path, SETTINGS, overwrite=False)
  assert state.last_seq == len(on_disk) + 1
  again = Journal.in_dir(tmp_path)
  with again.open_for_writing():
    assert again.renumbered_lines == 0 and again.repaired_bytes == 0
    assert again.append(_note(3))['seq'] == len(on_disk) + 2
  assert _raw_seqs(j.path) == list(range(1, len(on_disk) + 3))


def test_an_exception_in_the_folders_fsync_counts_the_line_and_syncs_the_folder_later(
    tmp_path, monkeypatch):
  """The first append creates the journal and fsyncs the folder; an exception there (after the
  line is on disk) leaves the line counted, and the next append makes the folder durable."""
  synced = []
  real = journal_file._fsync_dir  # pylint: disable=protected-access

  def fsync_dir(path):
    synced.append(path)
    real(path)

  monkeypatch.setattr(journal_file, '_fsync_dir', _Once(fsync_dir))
  j = Journal.in_dir(tmp_path)
  with j.open_for_writing():
    with pytest.raises(interrupts.Interrupted):
      j.append(_note(1))
    assert synced == [j.job_dir]
    assert j.append(_note(2))['seq'] == 2
    assert synced == [j.job_dir] * 2  # the folder's entry was not known durable: synced now
    assert j.append(_note(3))['seq'] == 3
    assert len(synced) == 2
  assert _raw_seqs(j.path) == [1, 2, 3]


def test_an_exception_between_the_write_and_the_count_never_repeats_a_seq(tmp_path):
  """The last word: whatever the in-memory counter says, a stale one is caught under the lock
  by the file's length (here the counter is set back by hand, as the old code left it)."""
  j = Journal.in_dir(tmp_path)
  with j.open_for_writing():
    j.append(_note(1))
    j.append(_note(2))
    j._next_seq, j._size = 2, 0  # pylint: disable=protected-access
    assert j.append(_note(3))['seq'] == 3
  assert _raw_seqs(j.path) == [1, 2, 3]


def test_gcs_append_cut_short_after_its_upload_is_counted(gcs_prefix, tmp_path, monkeypatch):
  """An upload that landed while the call raised (a signal as it returns) is this driver's
  entry: the next append follows it (no "another search appended"), check_writer agrees, and a
  resume reads every entry and goes on. One that did not land leaves its seq free."""
  monkeypatch.setenv('NASCLI_CACHE_DIR', str(tmp_path / 'cache'))
  job = storage.join(gcs_prefix, 'job')
  j = GcsJournal(job)
  with j.open_for_writing():
    j.append({'event': 'search_started', 'settings': SETTINGS})
    monkeypatch.setattr(storage, 'create_bytes', _Once(storage.create_bytes))
    with pytest.raises(interrupts.Interrupted):
      j.append(_note(2))  # landed
    j.check_writer()  # its own entry is no rival's
    monkeypatch.setattr(storage, 'create_bytes', _Once(storage.create_bytes, after=False))
    with pytest.raises(interrupts.Interrupted):
      j.append(_note(3))  # never sent
    assert j.append(_note(4))['seq'] == 3
  assert [(e['seq'], e.get('n')) for e in GcsJournal(job).events()] == [
      (1, None), (2, 2), (3, 4)]
  resumed = GcsJournal(job)
  with resumed.open_for_writing():
    assert resumed.append(_note(5))['seq'] == 4
  assert [e['seq'] for e in GcsJournal(job).events()] == [1, 2, 3, 4]


def _write_lines(path, seqs):
  """A journal as the old writer left it: these events with the given seqs, one per line."""
  events = [{'event': 'search_started', 'settings': SETTINGS,
             'fingerprint': journal_lib.fingerprint(SETTINGS)},
            {'event': 'proposed', 'trial_id': '1', 'dna': [0], 'nas_params': {}},
            {'event': 'started', 'trial_id': '1', 'attempt': 1},
            {'event': 'interrupted', 'trial_id': '1', 'attempt': 1, 'signal': 'SIGINT'},
            {'event': 'note', 'n': 5}]
  events = [{'seq': seq, 'time': 't', **e} for seq, e in zip(seqs, events)]
  with open(path, 'w', encoding='utf-8') as f:
    f.writelines(json.dumps(e, separators=(',', ':')) + '\n' for e in events)
  return events


@pytest.mark.parametrize('seqs', [
    [1, 2, 3, 3],  # the old interrupt path's `interrupted` took the seq before it
    [1, 2, 2, 3, 4],  # and the lines after it followed on from there
], ids=['last', 'middle'])
def test_a_journal_with_a_repeated_seq_is_read_and_resumed(seqs, tmp_path):
  path = tmp_path / 'journal.jsonl'
  written = _write_lines(path, seqs)
  renumbered = sum(1 for n, s in enumerate(seqs, 1) if s != n)
  # Readers (list_trials, a finished job's report) read it as seqs 1..N.
  events = Journal.in_dir(tmp_path).events()
  assert [e['seq'] for e in events] == list(range(1, len(seqs) + 1))
  assert [e['event'] for e in events] == [e['event'] for e in written]
  assert _raw_seqs(path) == seqs  # reading changes nothing
  # The resume renumbers the file (whole, atomically) and goes on after it.
  j = Journal.in_dir(tmp_path)
  with j.open_for_writing():
    assert j.renumbered_lines == renumbered
    assert _raw_seqs(path) == list(range(1, len(seqs) + 1))
    state = journal_lib.check_settings(tmp_path, SETTINGS, overwrite=False, journal=j)
    assert state.status['1'] == 'interrupted' and state.unfinished() == ['1']
    assert j.append({'event': 'started', 'trial_id': '1', 'attempt': 2})['seq'] == len(seqs) + 1
  assert _raw_seqs(path) == list(range(1, len(seqs) + 2))
  assert sorted(os.listdir(tmp_path)) == ['.lock', 'journal.jsonl']  # no temporary left
  assert journal_lib.replay(Journal.in_dir(tmp_path).events()).status['1'] == 'running'


def test_a_line_copied_twice_is_still_damage(tmp_path):
  """Only a different event may repeat the previous seq: a line written twice is refused."""
  path = tmp_path / 'journal.jsonl'
  _write_lines(path, [1, 2, 3])
  with open(path, 'rb') as f:
    lines = f.read().splitlines(keepends=True)
  with open(path, 'wb') as f:
    f.writelines(lines + lines[-1:])
  with pytest.raises(InputError, match='line 4 has seq 3 where 4 was expected'):
    Journal.in_dir(tmp_path).events()
