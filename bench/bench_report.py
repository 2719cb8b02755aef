"""What refreshing report.html adds to a search's bookkeeping after each trial.

    python bench/bench_report.py [--trials 25,100,400] [--decisions 20] [--repeats 5]

A search already rewrites trials.json/csv, search_progress.png and the HParams runs after
every event (nascli/search/writers.py; since issue 48 the plots, HParams and the page on a
background thread); the page is refreshed there too. Its decision importance
(fANOVA) is computed again only when the completed trials have grown by a tenth, so both kinds
of refresh are timed. For a job of N completed
trials (a real journal written with nascli's `Journal`, each trial folder with a
train_metrics.jsonl of 50 lines, `--decisions` categorical decisions of 4 candidates, rewards
depending on two of them), this times, side by side in one process, the refresh a search does
after a trial: the outputs it wrote before reports (every writer but the page's) and the page
alone (`report.write_search`, warm: the curves of finished trials cached, as the search loop
keeps them), median of `--repeats`; plus the first refresh of a process (imports: plotly's
bundle read, Optuna's fANOVA and scikit-learn) and the page's size. No TensorFlow.
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import host  # bench/host.py  # pylint: disable=g-bad-import-order,wrong-import-position
from nascli import report  # pylint: disable=wrong-import-position
from nascli.search import journal as journal_lib  # pylint: disable=wrong-import-position
from nascli.search import hparams  # pylint: disable=wrong-import-position
from nascli.search import result_files  # pylint: disable=wrong-import-position
from nascli.search import results  # pylint: disable=wrong-import-position
from nascli.search.journal import Journal  # pylint: disable=wrong-import-position


def make_job(job_dir: str, trials: int, decisions: int, seed: int = 0):
  rng = random.Random(seed)
  j = Journal.in_dir(job_dir)
  keys = [f'blocks[{i}].choice' for i in range(decisions)]
  with j.open_for_writing():
    j.append({'event': 'search_started', 'fingerprint': 'f',
              'settings': {'search_space': 'mnasnet', 'search_algorithm': 'tpe',
                           'trial': {'target_device_latency_ms': 5.0}}})
    for t in range(1, trials + 1):
      dna = [rng.randrange(4) for _ in keys]
      j.append({'event': 'proposed', 'trial_id': str(t), 'dna': dna,
                'nas_params': {k: f'{v}/4 ({v})' for k, v in zip(keys, dna)}})
    for t in range(1, trials + 1):
      trial_id = str(t)
      os.makedirs(os.path.join(job_dir, trial_id), exist_ok=True)
      with open(os.path.join(job_dir, trial_id, 'train_metrics.jsonl'), 'w') as f:
        for step in range(1, 51):
          f.write(json.dumps({'step': step * 20, 'loss': 2.0 / step ** 0.3 + rng.random() * 0.05})
                  + '\n')
      accuracy = 0.5 + 0.4 * rng.random()
      latency = 2.0 + 8.0 * rng.random()
      j.append({'event': 'started', 'trial_id': trial_id, 'attempt': 1})
      j.append({'event': 'completed', 'trial_id': trial_id, 'reward': accuracy,
                'metrics': {'accuracy': accuracy, 'latency_ms': latency, 'flops': 10 ** 7,
                            'params': 10 ** 5, 'seconds': 30.0, 'wall_s': 35.0,
                            'accuracy_metric': 'accuracy', 'step': 1000}})
  return journal_lib.replay(j.events()), {k: list(range(4)) for k in keys}


def outputs_without_page(job_dir, state, domains, written):
  rows = results.trial_rows(job_dir, state)
  result_files.write_tables(job_dir, rows)
  result_files.write_progress_plot(job_dir, rows)
  result_files.write_pareto(job_dir, state, rows)
  hparams.write_hparams(job_dir, rows, domains, written)
  return rows


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--trials', default='25,100,400')
  parser.add_argument('--decisions', type=int, default=20)
  parser.add_argument('--repeats', type=int, default=5)
  args = parser.parse_args()
  print(json.dumps(host.machine(("plotly", "optuna", "scikit-learn", "numpy"))), file=sys.stderr)
  first = True
  print('| trials | outputs before reports (s) | page, importance computed (s) | page,'
        ' importance reused (s) | first page of a process (s) | page size (MB) |')
  print('|---:|---:|---:|---:|---:|---:|')
  for count in [int(n) for n in args.trials.split(',')]:
    with tempfile.TemporaryDirectory() as tmp:
      job_dir = os.path.join(tmp, 'job')
      state, domains = make_job(job_dir, count, args.decisions)
      written: set[str] = set()
      rows = outputs_without_page(job_dir, state, domains, written)  # HParams runs once
      cache: dict = {}
      start = time.perf_counter()
      report.write_search(job_dir, state, rows, cache)
      cold = time.perf_counter() - start
      before, page, reused = [], [], []
      for _ in range(args.repeats):  # alternated, so drift hits all alike
        start = time.perf_counter()
        rows = outputs_without_page(job_dir, state, domains, written)
        before.append(time.perf_counter() - start)
        cache.pop('importance', None)  # a refresh after the trials grew by a tenth: fANOVA again
        start = time.perf_counter()
        report.write_search(job_dir, state, rows, cache)
        page.append(time.perf_counter() - start)
        start = time.perf_counter()  # the refreshes in between reuse the importance
        report.write_search(job_dir, state, rows, cache)
        reused.append(time.perf_counter() - start)
      size = os.path.getsize(report.path_of(job_dir)) / 1e6
      b, p, r = (statistics.median(before), statistics.median(page),
                 statistics.median(reused))
      print(f'| {count} | {b:.3f} | {p:.3f} ({p / b:.2f}x) | {r:.3f} ({r / b:.2f}x) |'
            f' {cold:.2f}{" (imports)" if first else ""} | {size:.2f} |', flush=True)
      first = False
  return 0


if __name__ == '__main__':
  sys.exit(main())
