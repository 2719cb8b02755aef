"""Latency predictors: how measured architectures become a function architecture -> ms.

Each kind is registered by name (`@register_predictor('linear')`, like Model Garden's
registries) and keeps its fitted state in a JSON-serializable params dict, keyed by decision
path so that a model file reads on its own. A prediction is a `math.fsum` of the active terms
(exactly rounded, whatever the order), so the same architecture gets the same number in every
process, batch or not: the search's resume and early stopping depend on it.

`fit_best` picks the kind by k-fold cross-validated mean absolute percentage error, keeping a
kind other than `linear` only when it beats `linear` by `MARGIN`: with ~100 measurements a richer
model that is slightly better in CV is as likely to be fitting noise.
"""

import abc
import dataclasses
import heapq
import itertools
import math
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from nascli.errors import InputError
from nascli.errors import NascliError
from nascli.latency_model import encoding
from nascli.latency_model.encoding import Layout

# A kind other than `linear` must have a CV error at least this much lower (relative) to be kept.
MARGIN = 0.10
FOLDS = 5
# Fewer measurements than this cannot be fitted and cross-validated with 5 folds meaningfully.
MIN_ROWS = 10
# Predictions are clamped at this share of the fastest measured architecture (see Predictor).
FLOOR_SHARE = 0.5
# Ridge penalties tried, relative to the largest squared singular value of the design.
_LAMBDAS = tuple(10.0 ** e for e in np.arange(-7.0, 0.5, 0.5))

Rows = Sequence[tuple[Mapping[str, Any], float]]
Params = dict[str, Any]


class BestFit(NamedTuple):
  """What `fit_best` chose: the kind, its params refitted on every row, each kind's CV error."""
  kind: str
  params: Params
  cv: dict[str, float]  # kind -> CV mean absolute percentage error (percent)


class Predictor(abc.ABC):
  """One kind of latency predictor; stateless, its fitted state is the params dict.

  Every prediction is clamped from below at the params' `floor` (FLOOR_SHARE of the fastest
  measured architecture): far from the measured architectures an additive model can
  extrapolate to a latency near or under zero, which no reward can use.
  """
  name: str = ''

  @abc.abstractmethod
  def fit(self, lay: Layout, x: np.ndarray, y: np.ndarray, seed: int) -> Params:
    """Params fitted on (n, decisions) candidate indices `x` and latencies `y` (ms)."""

  @abc.abstractmethod
  def raw(self, lay: Layout, params: Params, indices: Sequence[int]) -> float:
    """The model's value for one architecture (its candidate indices), before the floor."""

  @abc.abstractmethod
  def argmin(self, lay: Layout, params: Params) -> tuple[int, ...]:
    """An architecture of the whole space with the lowest `raw` value (exact)."""

  @abc.abstractmethod
  def check(self, lay: Layout, params: Params) -> None:
    """Raises ValueError (one line naming the field) for params this kind cannot use."""

  def unavailable(self, lay: Layout) -> str | None:
    """Why this kind cannot model this space (None: it can); `fit_best` then leaves it out."""
    del lay
    return None

  def fitted(self, lay: Layout, x: np.ndarray, y: np.ndarray, seed: int) -> Params:
    """`fit` with the floor set."""
    return {**self.fit(lay, x, y, seed), 'floor': FLOOR_SHARE * float(np.min(y))}

  def predict_one(self, lay: Layout, params: Params, indices: Sequence[int]) -> float:
    """The predicted ms of one architecture (its candidate indices)."""
    return max(self.raw(lay, params, indices), params['floor'])

  def predict(self, lay: Layout, params: Params, x: np.ndarray) -> np.ndarray:
    """`predict_one` for each row of `x`."""
    return np.array([self.predict_one(lay, params, row) for row in np.asarray(x).tolist()])

  def fastest(self, lay: Layout, params: Params) -> tuple[float, tuple[int, ...]]:
    """(lowest predicted ms over the space, an architecture's indices achieving it): the floor
    is monotone, so the raw minimum's architecture is a minimum of the predictions."""
    best = self.argmin(lay, params)
    return self.predict_one(lay, params, best), best

  def validate(self, lay: Layout, params: Params) -> None:
    """`check` and the floor: ValueError naming the field."""
    floor = params.get('floor')
    if not _finite(floor) or floor <= 0:
      raise ValueError(f'floor is {floor!r}, expected a positive number of ms')
    self.check(lay, params)


PREDICTORS: dict[str, Predictor] = {}


def register_predictor(name: str) -> Callable[[type[Predictor]], type[Predictor]]:
  """Registers a Predictor subclass under `name` (an instance is what PREDICTORS holds)."""
  def decorator(cls: type[Predictor]) -> type[Predictor]:
    if name in PREDICTORS:
      raise KeyError(f'latency predictor {name!r} is already registered')
    cls.name = name
    PREDICTORS[name] = cls()
    return cls
  return decorator


def get_predictor(kind: Any) -> Predictor:
  """The registered kind; ValueError (one line, listing the known kinds) otherwise."""
  if not isinstance(kind, str) or kind not in PREDICTORS:
    raise ValueError(f'unknown predictor kind {kind!r} (known: {", ".join(PREDICTORS)})')
  return PREDICTORS[kind]


# ----- fitting helpers


def _ridge(a: np.ndarray, y: np.ndarray, w: np.ndarray,
           loo_error: Callable[[np.ndarray, np.ndarray], float]
           ) -> tuple[float, np.ndarray, float, float]:
  """Weighted ridge with an unpenalized intercept; the penalty by exact leave-one-out.

  Leave-one-out residuals of ridge are closed-form (r_i / (1 - h_ii)), so choosing the penalty
  costs one SVD and no refits.

  Returns:
    (intercept, coefficients, penalty, leave-one-out error of that penalty).
  """
  sw = w / w.sum()
  am, ym = sw @ a, float(sw @ y)
  root = np.sqrt(w)
  design = (a - am) * root[:, None]
  target = (y - ym) * root
  if design.shape[1] == 0:
    resid = y - ym
    return ym, np.zeros(0), 0.0, loo_error(y - resid / (1 - sw), y)
  u, s, vt = np.linalg.svd(design, full_matrices=False)
  ut = u.T @ target
  s2 = s * s
  scale = float(s2.max()) or 1.0
  best = None
  for rel in _LAMBDAS:
    lam = rel * scale
    shrink = s2 / (s2 + lam)
    resid = (target - u @ (shrink * ut)) / root
    leverage = (u * u) @ shrink + sw
    loo = y - resid / np.maximum(1.0 - leverage, 1e-12)
    err = loo_error(loo, y)
    if best is None or err < best[1] - 1e-12:
      best = (lam, err)
  lam, err = best
  coef = vt.T @ (s / (s2 + lam) * ut)
  return ym - float(am @ coef), coef, lam, err


def _mape(pred: np.ndarray, y: np.ndarray) -> float:
  return float(np.mean(np.abs(pred - y) / y))


def _log_mape(pred_log: np.ndarray, y_log: np.ndarray) -> float:
  return float(np.mean(np.abs(np.expm1(np.clip(pred_log - y_log, -50, 50)))))


def _terms(lay: Layout, coef: np.ndarray) -> dict[str, list[float]]:
  """Per-decision weights, candidate 0 (the baseline) first with 0."""
  return {key: [0.0] + [float(v) for v in coef[off:off + n - 1]]
          for key, off, n in zip(lay.keys, lay.offsets, lay.counts)}


def _term_lists(lay: Layout, params: Params) -> list[list[float]]:
  terms = params['terms']
  return [terms[key] for key in lay.keys]


def _finite(value: Any) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))


def _check_terms(lay: Layout, params: Params) -> None:
  """The fields every kind shares: a finite intercept and one weight per candidate."""
  if not _finite(params.get('intercept')):
    raise ValueError(f'intercept is {params.get("intercept")!r}, expected a finite number')
  terms = params.get('terms')
  if not isinstance(terms, Mapping):
    raise ValueError('terms: expected an object {decision: [weight per candidate]}')
  for key in terms:
    if key not in lay.keys:
      raise ValueError(f'terms: {key!r} is not a decision of the space')
  for key, n in zip(lay.keys, lay.counts):
    weights = terms.get(key)
    if weights is None:
      raise ValueError(f'terms: no weights for decision {key!r}')
    if not isinstance(weights, list) or len(weights) != n or not all(map(_finite, weights)):
      raise ValueError(f'terms: {key!r} needs {n} finite weights, got {_short(weights)}')


def _short(value: Any) -> str:
  text = ' '.join(repr(value).split())
  return text if len(text) <= 60 else text[:57] + '...'


def _relative_weights(y: np.ndarray) -> np.ndarray:
  """1/y^2: least squares on relative error, the error that matters for a latency target."""
  return 1.0 / (y * y)


def _folds(n: int, k: int, seed: int) -> np.ndarray:
  """Fold number of each row: a seeded permutation dealt round-robin (sizes differ by <= 1)."""
  order = np.random.default_rng(seed).permutation(n)
  fold = np.empty(n, dtype=np.int64)
  fold[order] = np.arange(n) % k
  return fold


# ----- the kinds


@register_predictor('linear')
class Linear(Predictor):
  """TuNAS's cost model: a weight per (decision, candidate) over a fitted constant.

  Ridge on the one-hot decisions with a small penalty chosen by leave-one-out, least squares on
  relative error. The latency of a network is a sum over its layers, and a layer's choices shift
  it by roughly the same amount whatever the others are: this is the baseline every richer kind
  must beat.
  """

  def fit(self, lay: Layout, x: np.ndarray, y: np.ndarray, seed: int) -> Params:
    intercept, coef, lam, _ = _ridge(lay.one_hot(x), y, _relative_weights(y), _mape)
    return {'intercept': float(intercept), 'terms': _terms(lay, coef), 'lambda': float(lam)}

  def raw(self, lay: Layout, params: Params, indices: Sequence[int]) -> float:
    terms = _term_lists(lay, params)
    return math.fsum([params['intercept']] + [t[i] for t, i in zip(terms, indices)])

  def argmin(self, lay: Layout, params: Params) -> tuple[int, ...]:
    return tuple(int(np.argmin(t)) for t in _term_lists(lay, params))

  def check(self, lay: Layout, params: Params) -> None:
    _check_terms(lay, params)


@register_predictor('log_linear')
class LogLinear(Linear):
  """The linear model on log(ms): each choice multiplies the latency by a factor.

  Right where a choice scales the rest of the network (a wider early block makes every later
  layer costlier), wrong where blocks simply add up: a cheap, global stand-in for interactions.
  """

  def fit(self, lay: Layout, x: np.ndarray, y: np.ndarray, seed: int) -> Params:
    log_y = np.log(y)
    intercept, coef, lam, _ = _ridge(lay.one_hot(x), log_y, np.ones_like(y), _log_mape)
    return {'intercept': float(intercept), 'terms': _terms(lay, coef), 'lambda': float(lam)}

  def raw(self, lay: Layout, params: Params, indices: Sequence[int]) -> float:
    return math.exp(super().raw(lay, params, indices))


@register_predictor('lookup')
class Lookup(Predictor):
  """ProxylessNAS/Once-for-All's lookup table: a cost per (block, tuple of its choices), summed
  over blocks with a fitted constant; a tuple not in the table backs off to the linear
  per-decision terms.

  What it is here: ProxylessNAS and OFA time each block alone; nascli times whole networks whose
  blocks are sampled at random. Then a block's tuple (216 in mnasnet) is seen about n/216 times
  (mostly once or never at n ~ 100), so the table is the linear model plus, per seen tuple, the
  mean residual of the networks containing it (backfitted block by block, shrunk toward 0 with a
  strength chosen by inner CV). That residual mixes the other blocks' errors and the timing noise.
  It beats `linear` only when the measurements repeat tuples (many measurements, small blocks);
  `fit_best` keeps it only where cross-validation says so.
  """

  SHRINKAGE = (1.0, 4.0, 16.0)  # pseudo-counts pulling a tuple's correction toward 0
  SWEEPS = 8

  def fit(self, lay: Layout, x: np.ndarray, y: np.ndarray, seed: int) -> Params:
    x = np.asarray(x, dtype=np.int64)
    kappa = self.SHRINKAGE[-1]
    linear = PREDICTORS['linear']
    if len(y) >= 2 * FOLDS:
      fold = _folds(len(y), FOLDS, seed + 1)
      pred = np.empty((len(self.SHRINKAGE), len(y)))
      for k in range(FOLDS):
        train, test = fold != k, fold == k
        base = linear.fit(lay, x[train], y[train], seed)
        for i, shrinkage in enumerate(self.SHRINKAGE):
          fitted = self._backfit(lay, x[train], y[train], base, shrinkage)
          pred[i, test] = self._predict_fitted(fitted, x[test])
      kappa = self.SHRINKAGE[int(np.argmin([_mape(p, y) for p in pred]))]
    base, _, groups = self._backfit(lay, x, y, linear.fit(lay, x, y, seed), kappa)
    tables = {group.name: {_tuple_key(t): float(v) for t, v in zip(tuples.tolist(), entries)}
              for group, (_, tuples, entries) in zip(lay.groups, groups)}
    return {'intercept': base['intercept'], 'terms': base['terms'], 'lambda': base['lambda'],
            'shrinkage': kappa, 'tables': tables}

  def _backfit(self, lay: Layout, x: np.ndarray, y: np.ndarray, base: Params, kappa: float
               ) -> tuple[Params, list[list[float]], list[tuple[list[int], np.ndarray,
                                                                np.ndarray]]]:
    """(linear params, its terms, per block (decisions, seen tuples, their table entries))."""
    terms = _term_lists(lay, base)
    w = _relative_weights(y)
    prior = kappa * float(w.mean())
    pred = np.full(len(y), base['intercept'])
    state = []
    for group in lay.groups:
      cols = list(group.members)
      tuples, code = np.unique(x[:, cols], axis=0, return_inverse=True)
      code = code.reshape(-1)
      backoff = sum(np.asarray(terms[j])[tuples[:, c]] for c, j in enumerate(cols))
      pred += backoff[code]
      state.append((cols, tuples, code, backoff, np.zeros(len(tuples))))
    for _ in range(self.SWEEPS):
      for _, tuples, code, _, delta in state:
        resid = y - pred + delta[code]
        new = (np.bincount(code, w * resid, len(tuples))
               / (np.bincount(code, w, len(tuples)) + prior))
        pred += new[code] - delta[code]
        delta[:] = new
    return base, terms, [(cols, tuples, backoff + delta)
                         for cols, tuples, _, backoff, delta in state]

  def _predict_fitted(self, fitted: tuple[Params, list[list[float]], list[Any]],
                      x: np.ndarray) -> np.ndarray:
    """Predictions straight from `_backfit`'s arrays (the inner CV needs no params dict)."""
    base, terms, groups = fitted
    out = np.full(len(x), base['intercept'])
    for cols, tuples, entries in groups:
      # Mixed radix, first decision most significant: np.unique sorted the tuples in that order,
      # so their codes increase.
      radix = np.cumprod([1] + [len(terms[j]) for j in cols[:0:-1]])[::-1]
      seen = tuples @ radix
      codes = x[:, cols] @ radix
      at = np.minimum(np.searchsorted(seen, codes), len(seen) - 1)
      hit = seen[at] == codes
      backoff = sum(np.asarray(terms[j])[x[:, j]] for j in cols)
      out += np.where(hit, entries[at], backoff)
    return out

  def raw(self, lay: Layout, params: Params, indices: Sequence[int]) -> float:
    terms = _term_lists(lay, params)
    tables = params['tables']
    parts = [params['intercept']]
    for group in lay.groups:
      chosen = [indices[j] for j in group.members]
      entry = tables.get(group.name, {}).get(_tuple_key(chosen))
      if entry is None:
        parts.extend(terms[j][i] for j, i in zip(group.members, chosen))
      else:
        parts.append(entry)
    return math.fsum(parts)

  def argmin(self, lay: Layout, params: Params) -> tuple[int, ...]:
    """Exact: blocks add up, so each block's cheapest tuple, seen (its table entry) or unseen
    (its back-off cost)."""
    terms = _term_lists(lay, params)
    best = [0] * len(lay.keys)
    for group in lay.groups:
      table = params['tables'].get(group.name, {})
      options = []
      unseen = _cheapest_unseen([terms[j] for j in group.members], table)
      if unseen is not None:
        options.append(unseen)
      if table:
        key, cost = min(table.items(), key=lambda kv: (kv[1], kv[0]))
        options.append((cost, tuple(int(i) for i in key.split(','))))
      for j, i in zip(group.members, min(options)[1]):
        best[j] = i
    return tuple(best)

  def check(self, lay: Layout, params: Params) -> None:
    _check_terms(lay, params)
    tables = params.get('tables')
    if not isinstance(tables, Mapping):
      raise ValueError('tables: expected an object {block: {"i,j,...": ms}}')
    groups = {g.name: g for g in lay.groups}
    for name, table in tables.items():
      if name not in groups:
        raise ValueError(f'tables: {name!r} is not a block of the space')
      if not isinstance(table, Mapping):
        raise ValueError(f'tables: {name!r}: expected an object {{"i,j,...": ms}}')
      counts = [lay.counts[j] for j in groups[name].members]
      for key, value in table.items():
        parts = key.split(',') if isinstance(key, str) else []
        if (len(parts) != len(counts) or not all(p.isdigit() for p in parts)
            or any(int(p) >= n for p, n in zip(parts, counts))):
          raise ValueError(f'tables: {name!r}: entry {key!r} is not a tuple of candidate '
                           f'indices of its {len(counts)} decisions')
        if not _finite(value):
          raise ValueError(f'tables: {name!r}: entry {key!r} is {value!r}, expected a number')


def _tuple_key(indices: Iterable[int]) -> str:
  return ','.join(str(int(i)) for i in indices)


def _cheapest_unseen(costs: Sequence[Sequence[float]],
                     table: Mapping[str, Any]) -> tuple[float, tuple[int, ...]] | None:
  """The cheapest tuple by its back-off cost that the table lacks (best-first enumeration: at
  most len(table) + 1 tuples are visited); None when the table holds every tuple."""
  orders = [sorted(range(len(c)), key=lambda i, c=c: (c[i], i)) for c in costs]

  def cost_of(ranks: tuple[int, ...]) -> float:
    return math.fsum(c[o[r]] for c, o, r in zip(costs, orders, ranks))

  start = tuple(0 for _ in costs)
  heap, seen = [(cost_of(start), start)], {start}
  while heap:
    cost, ranks = heapq.heappop(heap)
    chosen = tuple(o[r] for o, r in zip(orders, ranks))
    if _tuple_key(chosen) not in table:
      return cost, chosen
    for j in range(len(ranks)):
      if ranks[j] + 1 < len(orders[j]):
        nxt = ranks[:j] + (ranks[j] + 1,) + ranks[j + 1:]
        if nxt not in seen:
          seen.add(nxt)
          heapq.heappush(heap, (cost_of(nxt), nxt))
  return None


class Pairwise(Predictor):
  """The linear model plus a weight per (candidate, candidate) of chosen pairs of decisions.

  Every pair joins a decision of a block (first) with another decision of the same block or the
  previous block's filters decision (second), so the model stays a chain over blocks: its
  minimum is exact by dynamic programming with a block's filters as the state. Ridge with the
  penalty chosen by leave-one-out, the products penalized more than the main terms by a scale
  chosen the same way (a product is believed only where the data ask for it).
  """

  PAIR_SCALES = (1.0, 0.5, 0.25)
  # `argmin` enumerates a block's tuples where two of its decisions other than its filters are
  # paired: a subclass pairs those only in blocks with at most this many tuples.
  MAX_BLOCK_TUPLES = 200_000

  @abc.abstractmethod
  def pairs(self, lay: Layout) -> list[tuple[int, int]]:
    """(decision, decision) positions whose products are fitted."""

  def fit(self, lay: Layout, x: np.ndarray, y: np.ndarray, seed: int) -> Params:
    x = np.asarray(x, dtype=np.int64)
    pairs = self.pairs(lay)
    columns = [(x[:, a] == i) & (x[:, b] == j) for a, b in pairs
               for i in range(1, lay.counts[a]) for j in range(1, lay.counts[b])]
    main = lay.one_hot(x)
    product = np.stack(columns, axis=1).astype(float) if columns else np.zeros((len(y), 0))
    w = _relative_weights(y)
    best = None
    for scale in self.PAIR_SCALES if columns else (1.0,):
      fitted = _ridge(np.hstack([main, product * scale]), y, w, _mape)
      if best is None or fitted[3] < best[1][3] - 1e-12:
        best = (scale, fitted)
    scale, (intercept, coef, lam, _) = best
    out_pairs, col = [], lay.width
    for a, b in pairs:
      weights = [[0.0] * lay.counts[b] for _ in range(lay.counts[a])]
      for i in range(1, lay.counts[a]):
        for j in range(1, lay.counts[b]):
          weights[i][j] = float(coef[col] * scale)
          col += 1
      out_pairs.append({'a': lay.keys[a], 'b': lay.keys[b], 'weights': weights})
    return {'intercept': float(intercept), 'terms': _terms(lay, coef[:lay.width]),
            'pairs': out_pairs, 'lambda': float(lam), 'pair_scale': scale}

  def raw(self, lay: Layout, params: Params, indices: Sequence[int]) -> float:
    terms = _term_lists(lay, params)
    position = _positions(lay)
    parts = [params['intercept']] + [t[i] for t, i in zip(terms, indices)]
    for pair in params['pairs']:
      parts.append(pair['weights'][indices[position[pair['a']]]][indices[position[pair['b']]]])
    return math.fsum(parts)

  def argmin(self, lay: Layout, params: Params) -> tuple[int, ...]:
    """Exact: dynamic programming along each list of blocks, the state a block's filters."""
    terms = [np.asarray(t, dtype=float) for t in _term_lists(lay, params)]
    position = _positions(lay)
    group_of = {j: g for g, group in enumerate(lay.groups) for j in group.members}
    by_group: dict[int, list[tuple[int, int, np.ndarray]]] = {}
    for p in params['pairs']:
      a, b = position[p['a']], position[p['b']]
      by_group.setdefault(group_of[a], []).append((a, b, np.asarray(p['weights'], dtype=float)))
    best = [0] * len(lay.keys)

    def states(g: int) -> list[int | None]:
      f = lay.groups[g].filters
      return [None] if f is None else list(range(lay.counts[f]))

    def local(g: int, prev_state: int | None, state: int | None) -> tuple[float, dict[int, int]]:
      group = lay.groups[g]
      return _block_min(lay, group, _prev_filters(lay, group), terms, by_group.get(g, []),
                        prev_state, state)

    nexts = {g.prev: i for i, g in enumerate(lay.groups) if g.prev is not None}
    for start, group in enumerate(lay.groups):
      if group.prev is not None:
        continue
      chain = [start]
      while chain[-1] in nexts:
        chain.append(nexts[chain[-1]])
      # state -> (cheapest cost of the chain so far ending in it, the states along the way)
      value = {s: (local(start, None, s)[0], [s]) for s in states(start)}
      for g in chain[1:]:
        value = {s: min(((v + local(g, ps, s)[0], path + [s])
                         for ps, (v, path) in value.items()), key=lambda item: item[0])
                 for s in states(g)}
      _, path = min(value.values(), key=lambda item: item[0])
      for i, g in enumerate(chain):
        f = lay.groups[g].filters
        if f is not None:
          best[f] = path[i]
        for d, c in local(g, path[i - 1] if i else None, path[i])[1].items():
          best[d] = c
    return tuple(best)

  def check(self, lay: Layout, params: Params) -> None:
    _check_terms(lay, params)
    pairs = params.get('pairs')
    if not isinstance(pairs, list):
      raise ValueError('pairs: expected a list of {"a", "b", "weights"}')
    allowed = {(lay.keys[a], lay.keys[b]) for a, b in self.pairs(lay)}
    position = _positions(lay)
    seen = set()
    for pair in pairs:
      key = (pair.get('a'), pair.get('b')) if isinstance(pair, Mapping) else pair
      if key not in allowed:
        raise ValueError(f'pairs: {_short(key)} is not a pair this kind fits in this space')
      if key in seen:
        raise ValueError(f'pairs: {key!r} appears twice')
      seen.add(key)
      rows, cols = lay.counts[position[key[0]]], lay.counts[position[key[1]]]
      weights = pair.get('weights')
      if (not isinstance(weights, list) or len(weights) != rows
          or not all(isinstance(r, list) and len(r) == cols and all(map(_finite, r))
                     for r in weights)):
        raise ValueError(f'pairs: {key!r}: weights must be {rows}x{cols} finite numbers')


def _positions(lay: Layout) -> dict[str, int]:
  return {key: j for j, key in enumerate(lay.keys)}


def _prev_filters(lay: Layout, group: encoding.Group) -> int | None:
  return None if group.prev is None else lay.groups[group.prev].filters


def _block_min(lay: Layout, group: encoding.Group, prev_filters: int | None,
               terms: Sequence[np.ndarray], pairs: Sequence[tuple[int, int, np.ndarray]],
               prev_state: int | None, state: int | None) -> tuple[float, dict[int, int]]:
  """A block's cheapest cost, and its choices, given its input and output filters' candidates.

  Decisions no pair joins to another free one are minimized one by one; otherwise the block's
  tuples are enumerated (at most Pairwise.MAX_BLOCK_TUPLES).
  """
  fixed = {}
  if group.filters is not None:
    fixed[group.filters] = state
  if prev_filters is not None:
    fixed[prev_filters] = prev_state
  free = [d for d in group.members if d not in fixed]
  if not any(a in free and b in free for a, b, _ in pairs):
    total = float(terms[group.filters][state]) if group.filters is not None else 0.0
    total += sum(float(w[fixed[a], fixed[b]]) for a, b, w in pairs
                 if a in fixed and b in fixed)
    choice = {}
    for d in free:
      costs = terms[d].copy()
      for a, b, w in pairs:
        if a == d and b in fixed:
          costs += w[:, fixed[b]]
        elif b == d and a in fixed:
          costs += w[fixed[a], :]
      choice[d] = int(np.argmin(costs))
      total += float(costs[choice[d]])
    return total, choice
  grid = np.array(list(itertools.product(*[range(lay.counts[d]) for d in free])),
                  dtype=np.int64).reshape(-1, len(free))
  column = {d: grid[:, k] for k, d in enumerate(free)}

  def values(d: int) -> np.ndarray:
    return column[d] if d in column else np.full(len(grid), fixed[d])

  cost = np.zeros(len(grid))
  for d in group.members:
    cost += terms[d][values(d)]
  for a, b, w in pairs:
    cost += w[values(a), values(b)]
  k = int(np.argmin(cost))
  return float(cost[k]), {d: int(grid[k, j]) for j, d in enumerate(free)}


@register_predictor('interactions')
class Interactions(Pairwise):
  """The linear model plus products of a block's choices with its input channels.

  A convolution costs about in_channels x out_channels x kernel area, and a block's input
  channels are the previous block's output filters (mnasnet: `blocks[i-1].output_filters` x
  `blocks[i].*`): a linear model cannot see that a wide block after a wide block costs more
  than the sum of each. Where a space has no decision named `*filters*`, there are no products
  and this is `linear`.
  """

  def pairs(self, lay: Layout) -> list[tuple[int, int]]:
    out = []
    for group in lay.groups:
      prev_filters = _prev_filters(lay, group)
      if prev_filters is not None:
        out.extend((d, prev_filters) for d in group.members)
    return [(a, b) for a, b in out if lay.counts[a] > 1 and lay.counts[b] > 1]


@register_predictor('block_pairs')
class BlockPairs(Pairwise):
  """Every pair of a block's decisions, its input filters (the previous block's) included.

  A block's cost is a product of its choices (repeats x expansion x kernel area x channels,
  and a plain conv ignores the expansion an inverted bottleneck multiplies by): second-order
  terms within the block catch most of it, where additive and between-block terms cannot. It
  has the most weights (about 50 per mnasnet block): kept only where CV shows enough
  measurements to fit them. A block with more than MAX_BLOCK_TUPLES tuples only gets the
  `interactions` pairs.
  """

  def pairs(self, lay: Layout) -> list[tuple[int, int]]:
    out = []
    for group in lay.groups:
      prev_filters = _prev_filters(lay, group)
      members = list(group.members)
      if math.prod(lay.counts[d] for d in members) <= self.MAX_BLOCK_TUPLES:
        out.extend((a, b) for i, a in enumerate(members) for b in members[i + 1:])
      if prev_filters is not None:
        out.extend((d, prev_filters) for d in members)
    return [(a, b) for a, b in out if lay.counts[a] > 1 and lay.counts[b] > 1]


@register_predictor('cost_features')
class CostFeatures(Predictor):
  """Per-device costs of the space's own arithmetic: ms = c + sum_k w_k x feature_k.

  A space that knows how its blocks compute registers `cost_features(nas_params, input_size)`
  (tf_vision/search_spaces/cost_features.py: multiply-adds by operation kind, activation sizes,
  operation counts); this kind fits what each costs on the measured device, by non-negative
  least squares on relative error (a multiply-add never saves time, and a non-negative model
  cannot extrapolate below its constant). That is nn-Meter's and HELP's lesson: FLOPs rank
  latency well, and their parts weighted per device rank it better; one-hot models cannot see
  that a block's cost is the product of its choices and its input's channels.

  The features are a black box, so `argmin` is an upper bound of the minimum: coordinate
  descent (one decision at a time, to its best candidate, until nothing improves) from the
  all-baseline architecture and ARGMIN_STARTS seeded random ones.
  """

  ARGMIN_STARTS = 16

  def unavailable(self, lay: Layout) -> str | None:
    if lay.space is None or lay.input_size is None:
      return 'the space name and input size are not known'
    if _features_fn(lay.space) is None:
      return f'search space {lay.space!r} registers no cost features'
    if any(literal is None for literals in lay.literals for literal in literals):
      return 'the literals of some candidates are not known'
    return None

  def fit(self, lay: Layout, x: np.ndarray, y: np.ndarray, seed: int) -> Params:
    from scipy import optimize  # pylint: disable=g-import-not-at-top
    rows = [self._features(lay, row) for row in np.asarray(x).tolist()]
    names = sorted(rows[0])
    features = np.array([[f[n] for n in names] for f in rows], dtype=float)
    scale = np.abs(features).max(axis=0)
    scale[scale == 0] = 1.0
    design = np.hstack([np.ones((len(y), 1)), features / scale]) / y[:, None]
    coef, _ = optimize.nnls(design, np.ones(len(y)))
    return {'intercept': float(coef[0]),
            'weights': {n: float(w / s) for n, w, s in zip(names, coef[1:], scale)}}

  def raw(self, lay: Layout, params: Params, indices: Sequence[int]) -> float:
    features = self._features(lay, indices)
    weights = params['weights']
    missing = sorted(set(weights) - set(features))
    if missing:
      raise NascliError(f'latency model of kind cost_features: search space {lay.space!r} no '
                        f'longer computes the cost feature {missing[0]!r}')
    return math.fsum([params['intercept']] + [weights[n] * features[n] for n in sorted(weights)])

  def argmin(self, lay: Layout, params: Params) -> tuple[int, ...]:
    return _descend(lay, lambda arch: self.raw(lay, params, arch), self.ARGMIN_STARTS)

  def check(self, lay: Layout, params: Params) -> None:
    if not _finite(params.get('intercept')):
      raise ValueError(f'intercept is {params.get("intercept")!r}, expected a finite number')
    weights = params.get('weights')
    if (not isinstance(weights, Mapping) or not weights
        or not all(isinstance(k, str) and _finite(v) for k, v in weights.items())):
      raise ValueError(f'weights: expected an object {{feature: ms per unit}}, got '
                       f'{_short(weights)}')

  def _features(self, lay: Layout, indices: Sequence[int]) -> dict[str, float]:
    fn = _features_fn(lay.space) if lay.space is not None else None
    if fn is None or lay.input_size is None:
      raise NascliError(f'latency model of kind cost_features: search space {lay.space!r} '
                        'registers no cost features here (import the module that defines it)')
    return fn(lay.nas_params(indices), lay.input_size)


def _descend(lay: Layout, cost: Callable[[Sequence[int]], float], starts: int) -> tuple[int, ...]:
  """An architecture of low `cost` (a black box): coordinate descent, one decision at a time to
  its best candidate until nothing improves, from the all-baseline architecture and `starts`
  seeded random ones; the best end."""
  rng = np.random.default_rng(0)
  begins = [[0] * len(lay.counts)] + [[int(rng.integers(n)) for n in lay.counts]
                                      for _ in range(starts)]
  best = None
  for arch in begins:
    value = cost(arch)
    improved = True
    while improved:
      improved = False
      for d, n in enumerate(lay.counts):
        for c in range(n):
          if c != arch[d]:
            trial = arch[:d] + [c] + arch[d + 1:]
            trial_value = cost(trial)
            if trial_value < value:
              arch, value, improved = trial, trial_value, True
    if best is None or value < best[0]:
      best = (value, tuple(arch))
  return best[1]


@register_predictor('layer_lookup')
class LayerLookup(Predictor):
  """The sum of the architecture's layers, each timed alone: ms = c + sum_g a_g x T_g.

  `build_latency_model --measure_layers` times every distinct layer of the space on the device
  (about a thousand for mnasnet: a layer depends on its block's choices and its input's
  channels only), and T_g is the sum of the table's ms over the architecture's layers of
  block kind g (the key's first word: `conv`, `mbconv`). What timing alone misses (the stem
  and head, the interpreter's per-call overhead, caches warm from the previous layer) is
  fitted on the whole measured architectures: the constant c and one scale a_g per kind, by
  non-negative least squares on relative error. That is nn-Meter's and ProxylessNAS's
  predictor: a table the size of the layer space, where a model over whole architectures
  has a hundred rows to fit from. `argmin` is coordinate descent (an upper bound).
  """

  ARGMIN_STARTS = 16

  def unavailable(self, lay: Layout) -> str | None:
    if lay.space is None or lay.input_size is None:
      return 'the space name and input size are not known'
    if _layers_fn(lay.space) is None:
      return f'search space {lay.space!r} registers no layers'
    if not lay.layer_table:
      return 'no layers were timed alone (build_latency_model --measure_layers)'
    if any(literal is None for literals in lay.literals for literal in literals):
      return 'the literals of some candidates are not known'
    return None

  def fit(self, lay: Layout, x: np.ndarray, y: np.ndarray, seed: int) -> Params:
    from scipy import optimize  # pylint: disable=g-import-not-at-top
    table = {str(k): float(v) for k, v in (lay.layer_table or {}).items()}
    sums = [self._sums(lay, table, row) for row in np.asarray(x).tolist()]
    kinds = sorted({k for s in sums for k in s})
    features = np.array([[s.get(k, 0.0) for k in kinds] for s in sums], dtype=float)
    design = np.hstack([np.ones((len(y), 1)), features]) / y[:, None]
    coef, _ = optimize.nnls(design, np.ones(len(y)))
    return {'intercept': float(coef[0]),
            'scales': {k: float(a) for k, a in zip(kinds, coef[1:])},
            'table': dict(sorted(table.items()))}

  def raw(self, lay: Layout, params: Params, indices: Sequence[int]) -> float:
    scales = params['scales']
    terms = [params['intercept']]
    for kind, total in sorted(self._sums(lay, params['table'], indices).items()):
      if kind not in scales:
        raise NascliError(f'latency model of kind layer_lookup: no scale for {kind!r} layers '
                          '(the model was fitted on architectures without them)')
      terms.append(scales[kind] * total)
    return math.fsum(terms)

  def argmin(self, lay: Layout, params: Params) -> tuple[int, ...]:
    return _descend(lay, lambda arch: self.raw(lay, params, arch), self.ARGMIN_STARTS)

  def check(self, lay: Layout, params: Params) -> None:
    if not _finite(params.get('intercept')):
      raise ValueError(f'intercept is {params.get("intercept")!r}, expected a finite number')
    for field, positive in (('scales', False), ('table', True)):
      value = params.get(field)
      if (not isinstance(value, Mapping) or not value
          or not all(isinstance(k, str) and _finite(v) and (v > 0 if positive else v >= 0)
                     for k, v in value.items())):
        raise ValueError(f'{field}: expected an object {{name: {"ms > 0" if positive else "scale >= 0"}}}'
                         f', got {_short(value)}')

  def _keys(self, lay: Layout, indices: Sequence[int]) -> list[str]:
    fn = _layers_fn(lay.space) if lay.space is not None else None
    if fn is None or lay.input_size is None:
      raise NascliError(f'latency model of kind layer_lookup: search space {lay.space!r} '
                        'registers no layers here (import the module that defines it)')
    return fn(lay.nas_params(indices), lay.input_size)

  def _sums(self, lay: Layout, table: Mapping[str, float], indices: Sequence[int]
            ) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in self._keys(lay, indices):
      if key not in table:
        raise NascliError(f'latency model of kind layer_lookup: layer {key!r} was not timed '
                          '(the space has changed since the model was built)')
      kind = key.split(' ', 1)[0]
      out[kind] = out.get(kind, 0.0) + table[key]
    return out


def _layers_fn(space: str) -> Callable[[Mapping[str, Any], int], list[str]] | None:
  """The space's registered layer keys (importing the prebuilt spaces: no pyglove)."""
  # pylint: disable=g-import-not-at-top
  import tf_vision.search_spaces  # noqa: F401  (registers mnasnet's)
  from tf_vision.search_spaces import cost_features
  return cost_features.layers(space)


def _features_fn(space: str) -> Callable[[Mapping[str, Any], int], dict[str, float]] | None:
  """The space's registered cost features (importing the prebuilt spaces: no pyglove)."""
  # pylint: disable=g-import-not-at-top
  import tf_vision.search_spaces  # noqa: F401  (registers mnasnet's and spinenet's)
  from tf_vision.search_spaces import cost_features
  return cost_features.cost_features(space)


# ----- choosing a kind


def rows_to_arrays(rows: Rows, decisions: Mapping[str, Sequence[str | None]],
                   space: str | None = None) -> tuple[np.ndarray, np.ndarray]:
  """(candidate indices, latencies) of measured rows, each checked; errors name the row."""
  x, y = [], []
  for number, row in enumerate(rows):
    try:
      nas_params, ms = row
    except (TypeError, ValueError):
      raise InputError(f'measurement #{number}: expected (nas_params, latency_ms), got '
                       f'{_short(row)}') from None
    if not _finite(ms) or ms <= 0:
      raise InputError(f'measurement #{number}: latency {ms!r} ms is not a positive number')
    x.append(encoding.parse(nas_params, decisions, f'measurement #{number}', space))
    y.append(float(ms))
  return (np.array(x, dtype=np.int64).reshape(len(x), len(decisions)),
          np.array(y, dtype=float))


def fit_best(rows: Rows, seed: int, *, decisions: Mapping[str, Any] | None = None,
             kinds: Sequence[str] | None = None, folds: int = FOLDS,
             margin: float = MARGIN, space: str | None = None,
             input_size: int | None = None,
             layer_table: Mapping[str, float] | None = None) -> BestFit:
  """Chooses a predictor kind by k-fold CV and refits it on every row.

  Args:
    rows: (nas_params, measured ms) pairs: the training rows only (the held-out rows that the
      model file reports on must not take part in choosing).
    seed: Seeds the fold split (and any kind's inner splits).
    decisions: The space's decisions (`decisions_of_space`); inferred from the rows if None.
    kinds: Kinds to compare (default: every registered kind that can model the space);
      `linear` is always included.
    folds: Number of CV folds.
    margin: A kind other than `linear` is kept only if its CV error is below
      `(1 - margin) x linear's`.
    space, input_size: The space's name and the input size measured at, for kinds that
      compute from the architecture itself (`Layout.space`, `Layout.input_size`).
    layer_table: {layer key: ms} of the space's layers timed alone, for `layer_lookup`.

  Returns:
    BestFit(kind, params refitted on all rows, {kind: CV mean absolute percentage error, %}).

  Raises:
    NascliError: too few rows, a row of another space, a latency that is not a positive number.
  """
  if len(rows) < MIN_ROWS:
    raise NascliError(f'{len(rows)} measurements: a latency model needs at least {MIN_ROWS} to '
                      'be fitted and cross-validated')
  decisions = (encoding.decisions_from_rows(r[0] for r in rows) if decisions is None
               else encoding.normalize_decisions(decisions))
  lay = encoding.layout(decisions, space, input_size)
  if layer_table:
    lay = dataclasses.replace(lay, layer_table=dict(layer_table))
  if kinds is None:
    kinds = [kind for kind, p in PREDICTORS.items() if p.unavailable(lay) is None]
  kinds = list(dict.fromkeys(kinds))
  for kind in kinds:
    if kind not in PREDICTORS:
      raise NascliError(f'unknown latency predictor kind {kind!r} (known: '
                        f'{", ".join(PREDICTORS)})')
    why = PREDICTORS[kind].unavailable(lay)
    if why:
      raise NascliError(f'latency predictor kind {kind!r} cannot model this space: {why}')
  if 'linear' not in kinds:
    kinds.insert(0, 'linear')
  x, y = rows_to_arrays(rows, decisions, space)
  folds = max(2, min(folds, len(y)))
  fold = _folds(len(y), folds, seed)
  cv = {}
  for kind in kinds:
    predictor = PREDICTORS[kind]
    pred = np.empty(len(y))
    for k in range(folds):
      train, test = fold != k, fold == k
      params = predictor.fitted(lay, x[train], y[train], seed)
      pred[test] = predictor.predict(lay, params, x[test])
    error = 100.0 * _mape(pred, y)
    cv[kind] = error if math.isfinite(error) else math.inf
  chosen = 'linear'
  for kind in sorted(kinds, key=lambda k: (cv[k], k)):
    if kind != 'linear' and cv[kind] <= (1.0 - margin) * cv['linear'] and cv[kind] < cv[chosen]:
      chosen = kind
  return BestFit(chosen, PREDICTORS[chosen].fitted(lay, x, y, seed), cv)
