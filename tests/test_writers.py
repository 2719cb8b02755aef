"""The search's outputs as writers (nascli/search/writers.py): registered once, called with one
snapshot per event, the slow ones off the loop's path, a failing one a warning."""

import threading

import pytest

from nascli.search import journal as journal_lib
from nascli.search import outputs
from nascli.search import writers

ARCH = {'blocks[0].kernel_size': '0/2 (3)'}


def _state(n):
  events = [{'seq': 0, 'event': 'search_started', 'settings': {}, 'fingerprint': 'f'}]
  for i in range(1, n + 1):
    events += [{'event': 'proposed', 'trial_id': str(i), 'dna': [0], 'nas_params': ARCH},
               {'event': 'completed', 'trial_id': str(i), 'reward': i / 10,
                'metrics': {'accuracy': i / 10}}]
  return journal_lib.replay(events)


@pytest.fixture
def registry(monkeypatch):
  """The registry with the test's writers alone (the real ones are restored after)."""
  monkeypatch.setattr(writers, '_REGISTRY', {})
  return writers._REGISTRY  # pylint: disable=protected-access


def test_the_search_and_the_report_register_their_writers():
  import nascli.report  # pylint: disable=g-import-not-at-top,unused-import
  names = writers.registered()
  assert sorted(names) == ['hparams', 'pareto', 'progress_plot', 'report', 'tables']
  with pytest.raises(KeyError, match="'tables' is registered twice"):
    writers.register('tables')(writers.Writer)


def test_a_slow_writer_does_not_hold_the_loop_and_gets_the_latest_state(registry, tmp_path):
  release, seen = threading.Event(), []

  @writers.register('slow')
  class Slow(writers.Writer):  # pylint: disable=unused-variable
    slow = True

    def write(self, snapshot):
      release.wait(timeout=30)
      seen.append(dict(snapshot.state.rewards))

  @writers.register('fast')
  class Fast(writers.Writer):  # pylint: disable=unused-variable
    def write(self, snapshot):
      seen.append(('fast', len(snapshot.rows)))

  out = writers.Outputs(str(tmp_path), {})
  state = _state(1)
  rows = out.update(state)  # returns while the slow writer waits
  assert [r['trial_id'] for r in rows] == ['1'] and seen == [('fast', 1)]
  last = _state(3)
  out.update(_state(2))  # more events while it is busy: it writes the latest one next
  out.update(last)
  last.rewards['1'] = 99.0  # the loop goes on changing its state: the writer has a copy
  release.set()
  out.flush()
  assert seen[:3] == [('fast', 1), ('fast', 2), ('fast', 3)]
  slow = seen[3:]
  assert 1 <= len(slow) <= 2  # the first snapshot (if it started on it) and the latest only
  assert slow[-1] == {'1': 0.1, '2': 0.2, '3': 0.3}


def test_a_failing_slow_writer_is_a_warning_and_the_next_event_writes_again(registry, tmp_path,
                                                                           caplog):
  calls = []

  @writers.register('flaky')
  class Flaky(writers.Writer):  # pylint: disable=unused-variable
    slow = True

    def write(self, snapshot):
      calls.append(len(snapshot.rows))
      if len(calls) == 1:
        raise OSError('disk full')

  out = writers.Outputs(str(tmp_path), {})
  out.update(_state(1))
  out.flush()
  out.update(_state(2))
  out.flush()
  assert calls == [1, 2]
  assert any('could not write Flaky: disk full' in r.getMessage() for r in caplog.records)


def test_write_all_writes_every_registered_output_before_it_returns(tmp_path):
  import nascli.report  # pylint: disable=g-import-not-at-top,unused-import
  rows = outputs.write_all(str(tmp_path), _state(2), {'blocks[0].kernel_size': ['3', '5']})
  assert [r['reward'] for r in rows] == [0.1, 0.2]
  names = sorted(p.name for p in tmp_path.iterdir())
  assert {'trials.json', 'trials.csv', 'search_progress.png', 'hparams',
          'report.html'} <= set(names)
  assert not [n for n in names if n.endswith('.tmp')]  # nothing half-written left behind
  assert '</html>' in (tmp_path / 'report.html').read_text()  # the whole page
