"""The latency model file: one JSON object that a search loads with `--latency_model`.

It holds what the predictions are valid for (space and its decisions, runtime and its version,
device, input size, threads, batch), the fitted predictor, its cross-validation errors and its
error on held-out architectures that took no part in fitting or choosing it. A latency model is
valid for one binary, flag set and thread setting (nn-Meter issue 83: another TFLite build was
1.5x slower), so every one of these is recorded and checked against the search's.

Reading refuses anything incomplete with one line naming the file and the field: a search must
not run on a model it cannot trust.
"""

import dataclasses
import datetime
import hashlib
import json
import math
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from nascli import storage
from nascli.errors import InputError
from nascli.errors import NascliError
from nascli.latency_model import encoding
from nascli.latency_model import predictors
from nascli.latency_model.encoding import Decisions
from tf_vision import nas_params_syntax

FORMAT_VERSION = 1
HELDOUT_FIELDS = ('n', 'kendall_tau', 'within_10pct', 'mape', 'max_abs_pct')

Rows = Sequence[tuple[Mapping[str, Any], float]]


@dataclasses.dataclass
class LatencyModel:
  """A fitted latency model and what its predictions are valid for.

  Attributes:
    space: The search space's name (`mnasnet`, or the user's module's).
    decisions: `{decision path: [literal of each candidate]}` in the space's order.
    runtime: The target runtime of the latency calculator's registry (`cpu-tflite`).
    runtime_version: The runtime's package and version (`ai-edge-litert 2.3.0`).
    device: The CPU model or GPU name measured on.
    input_size: Side of the square input, in pixels, measured at (the serving size).
    num_threads: Interpreter threads (None where the runtime has no such setting).
    predictor: `{"kind": <registered kind>, ...its params}`.
    cv: `{kind: cross-validated mean absolute % error}` of every kind compared.
    heldout: On architectures not used for fitting: `n`, `kendall_tau`, `within_10pct` (share,
      0-1, predicted within ±10% of the measured median), `mape` and `max_abs_pct` (percent);
      None when nothing was held out.
    measurements: Number of measured architectures the predictor was fitted on.
    reference: `{"nas_params", "ms", ...}`: the reference architecture timed when the model was
      built, to re-time and compare for drift; None if not timed.
    created: ISO 8601 time of building (UTC).
    batch_size: Batch of the timed calls.
    seed: Seed of the sampling and the CV split.
    format_version: The file format's version.
  """
  space: str
  decisions: Decisions
  runtime: str
  runtime_version: str
  device: str
  input_size: int
  num_threads: int | None
  predictor: dict[str, Any]
  cv: dict[str, float | None]
  heldout: dict[str, Any] | None
  measurements: int
  reference: dict[str, Any] | None
  created: str
  batch_size: int = 1
  seed: int | None = None
  format_version: int = FORMAT_VERSION

  @property
  def kind(self) -> str:
    return self.predictor['kind']

  def _parts(self) -> tuple[encoding.Layout, predictors.Predictor]:
    return (encoding.layout(self.decisions, self.space, self.input_size),
            predictors.PREDICTORS[self.kind])

  def predict(self, nas_params: Any) -> float:
    """Predicted ms of an architecture of the space (the same architecture, the same number).

    Raises:
      NascliError: one line naming the key: an architecture of another space.
    """
    indices = encoding.parse(nas_params, self.decisions, 'nas_params', self.space)
    lay, kind = self._parts()
    return float(kind.predict_one(lay, self.predictor, indices))

  def fastest(self) -> tuple[float, dict[str, str]]:
    """The lowest predicted ms over the whole space and an architecture (nas_params) with it.

    Exact for the one-hot kinds (additive ones: each decision's cheapest candidate; `lookup`:
    each block's cheapest table entry or unseen tuple; `interactions`, `block_pairs`: dynamic
    programming along the blocks), over the product of the decisions' candidates: in a space
    with coupled decisions (spinenet's distinct level permutation) that is a lower bound.
    `cost_features` computes from the architecture as a whole: there it is an upper bound found
    by coordinate descent from many starts (a local minimum no single change improves).
    """
    lay, kind = self._parts()
    ms, indices = kind.fastest(lay, self.predictor)
    return float(ms), self.nas_params(indices)

  def nas_params(self, indices: Sequence[int]) -> dict[str, str]:
    """The Vertex nas_params of an architecture given by its candidate indices."""
    return self._parts()[0].nas_params(indices)

  def describe(self) -> str:
    """One line: what the predictions are of, and how good they were on held-out models."""
    settings = [self.runtime_version] if self.runtime_version else []
    if self.num_threads is not None:
      settings.append(f'{self.num_threads} thread{"s" if self.num_threads != 1 else ""}')
    if self.batch_size != 1:
      settings.append(f'batch {self.batch_size}')
    what = self.runtime + (f' ({", ".join(settings)})' if settings else '')
    line = (f'{what} at {self.input_size}x{self.input_size} on {self.device}: {self.kind} model '
            f'of {self.measurements} measurements, ')
    held = self.heldout or {}
    if not held.get('n'):
      return line + 'no held-out check'
    tau = held.get('kendall_tau')
    within = held.get('within_10pct')
    return line + (f'held-out Kendall tau {"n/a" if tau is None else f"{tau:.2f}"}, '
                   f'{"n/a" if within is None else f"{100 * within:.0f}%"} within ±10% '
                   f'({held["n"]} architectures)')

  def latency_device(self, path: str) -> dict[str, Any]:
    """The `latency_device` label of a prediction (nascli.latency_source's fields)."""
    return {'source': 'latency_model', 'target_device_type': self.runtime,
            'device': self.device, 'input_size': self.input_size,
            'num_threads': self.num_threads, 'model': os.fspath(path)}

  def to_dict(self) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(self), allow_nan=False))

  @classmethod
  def from_dict(cls, data: Any, source: str = 'latency model') -> 'LatencyModel':
    """A checked model; InputError (one line naming `source` and the field) otherwise."""
    return cls(**_check_fields(data, source))

  def fingerprint(self) -> str:
    """sha256 of the canonical JSON: a search journals it and refuses to resume on another."""
    text = json.dumps(self.to_dict(), sort_keys=True, separators=(',', ':'), allow_nan=False,
                      ensure_ascii=True)
    return hashlib.sha256(text.encode('utf-8')).hexdigest()

  def save(self, path: str | os.PathLike) -> None:
    """Writes the file whole or not at all (local: temporary + rename; gs://: one upload)."""
    data = self.to_dict()
    LatencyModel.from_dict(data, os.fspath(path))  # never write what load would refuse
    storage.write_text(path, json.dumps(data, indent=1, allow_nan=False) + '\n')


def load(path: str | os.PathLike) -> LatencyModel:
  """Reads a latency model file.

  Raises:
    NascliError: one line naming the file and the culprit: missing, unreadable, not JSON or
      truncated, another format version, a missing or ill-typed field, an unknown predictor kind.
  """
  source = os.fspath(path)
  try:
    text = storage.read_text(path)
  except NascliError as e:
    raise type(e)(f'latency model {e}') from None
  if not text.strip():
    raise InputError(f'{source}: empty file (not a latency model)')
  try:
    data = json.loads(text)
  except json.JSONDecodeError as e:
    if e.pos >= len(text.rstrip()):
      raise InputError(f'{source}: truncated latency model file (the JSON ends early, at line '
                       f'{e.lineno} column {e.colno})') from None
    raise InputError(f'{source}: not a latency model file (malformed JSON: {e.msg} at line '
                     f'{e.lineno} column {e.colno})') from None
  return LatencyModel.from_dict(data, source)


def check_matches(model: LatencyModel, *, space: str,
                  decisions: Mapping[str, Any] | None, runtime: str | None = None,
                  input_size: int | Sequence[int] | None = None,
                  path: str | os.PathLike = 'latency model') -> None:
  """Refuses a model of another space, runtime or input size than the search's.

  Args:
    model: The loaded model.
    space: The search's space name.
    decisions: The search's space decisions (`decisions_of_space`); None skips that check.
    runtime: The runtime the search asks for; None skips that check.
    input_size: The serving size of the search (int or (h, w)); None skips that check.
    path: The model file, named in the error.

  Raises:
    InputError: one line naming the file and both values.
  """
  path = os.fspath(path)
  if model.space != space:
    raise InputError(f'{path}: latency model of search space {model.space!r}, but the search is '
                     f'over {space!r}')
  if decisions is not None:
    why = _decisions_differ(model.decisions,
                            encoding.normalize_decisions(decisions, 'search space'))
    if why:
      raise InputError(f'{path}: latency model of another {space!r} space than the search\'s: '
                       f'{why}')
  if runtime is not None and model.runtime != runtime:
    raise InputError(f'{path}: latency model of runtime {model.runtime!r}, but the search asks '
                     f'for {runtime!r}')
  if input_size is not None:
    size = _square(input_size)
    if size != model.input_size:
      side = size if isinstance(size, int) else size[0]
      raise InputError(f'{path}: latency model at input size {model.input_size}x'
                       f'{model.input_size}, but the search serves at {_size_text(input_size)}'
                       f' (build one with build_latency_model --latency_input_size {side}, or'
                       f' search with --latency_input_size {model.input_size})')


def evaluate(model_or_predict: LatencyModel | Callable[[Any], float],
             rows: Rows) -> dict[str, Any]:
  """How well predictions match measurements of architectures (held-out ones, to be honest).

  Returns:
    `{"n", "kendall_tau", "within_10pct" (share 0-1 within ±10% of the measured ms), "mape",
    "max_abs_pct" (percent)}`; None where undefined (no rows; tau of fewer than 2 or constant).
  """
  predict = (model_or_predict.predict if isinstance(model_or_predict, LatencyModel)
             else model_or_predict)
  measured, predicted = [], []
  for number, row in enumerate(rows):
    nas_params, ms = row
    if not _finite(ms) or ms <= 0:
      raise InputError(f'held-out measurement #{number}: latency {ms!r} ms is not a positive '
                       'number')
    measured.append(float(ms))
    predicted.append(float(predict(nas_params)))
  if not measured:
    return {'n': 0, 'kendall_tau': None, 'within_10pct': None, 'mape': None,
            'max_abs_pct': None}
  y, p = np.array(measured), np.array(predicted)
  pct = np.abs(p - y) / y * 100.0
  tau = None
  if len(y) >= 2:
    from scipy import stats  # pylint: disable=g-import-not-at-top
    value = float(stats.kendalltau(p, y).statistic)
    tau = value if math.isfinite(value) else None
  return {'n': len(y), 'kendall_tau': tau, 'within_10pct': float(np.mean(pct <= 10.0)),
          'mape': float(pct.mean()), 'max_abs_pct': float(pct.max())}


def build(rows_train: Rows, rows_heldout: Rows, *, space: str,
          decisions: Mapping[str, Any] | None, runtime: str, runtime_version: str, device: str,
          input_size: int, num_threads: int | None, seed: int,
          reference: Mapping[str, Any] | tuple[Mapping[str, Any], float] | None = None,
          batch_size: int = 1, kinds: Sequence[str] | None = None,
          layer_table: Mapping[str, float] | None = None) -> LatencyModel:
  """Fits a latency model on `rows_train` and reports its error on `rows_heldout`.

  The kind is chosen by cross-validation on the training rows only; the held-out rows are only
  predicted, so the reported error is not flattered by the choice.

  Args:
    rows_train: (nas_params, measured ms) pairs to fit on.
    rows_heldout: (nas_params, measured ms) pairs to report on (may be empty).
    space: The space's name.
    decisions: The space's decisions (`decisions_of_space`); None infers them from the rows.
    runtime, runtime_version, device, input_size, num_threads, batch_size: What was measured.
    seed: Seeds the CV split.
    reference: The reference architecture timed at build time: `{"nas_params", "ms", ...}` or
      a (nas_params, ms) pair.
    kinds: The predictor kinds to choose from (default: every registered one).
    layer_table: {layer key: ms} of the space's layers timed alone (`layer_lookup`).

  Returns:
    The model (not saved).
  """
  if decisions is None:
    decisions = encoding.decisions_from_rows([r[0] for r in list(rows_train) + list(rows_heldout)])
  decisions = encoding.normalize_decisions(decisions)
  best = predictors.fit_best(rows_train, seed, decisions=decisions, kinds=kinds, space=space,
                             input_size=int(input_size), layer_table=layer_table)
  if reference is not None and not isinstance(reference, Mapping):
    reference = {'nas_params': reference[0], 'ms': reference[1]}
  model = LatencyModel(
      space=space, decisions=decisions, runtime=runtime, runtime_version=runtime_version,
      device=device, input_size=int(input_size), num_threads=num_threads,
      predictor={'kind': best.kind, **best.params},
      cv={k: (v if math.isfinite(v) else None) for k, v in best.cv.items()},
      heldout=None, measurements=len(rows_train),
      reference=None if reference is None else dict(reference),
      created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
      batch_size=batch_size, seed=seed)
  if rows_heldout:
    model.heldout = evaluate(model, rows_heldout)
  return LatencyModel.from_dict(model.to_dict(), 'built latency model')


# ----- checking a file's fields


def _check_fields(data: Any, source: str) -> dict[str, Any]:
  """The constructor's arguments from a file's object, every field checked."""
  def bad(what: str) -> InputError:
    return InputError(f'{source}: {what}')

  if not isinstance(data, dict):
    raise bad('not a latency model file (expected a JSON object, got'
              f' {nas_params_syntax.json_type(data)})')
  if 'format_version' not in data:
    raise bad('not a latency model file (no format_version)')
  version = data['format_version']
  if version != FORMAT_VERSION or isinstance(version, bool):
    raise bad(f'format_version {version!r}, this nascli reads {FORMAT_VERSION} (rebuild it with '
              'build_latency_model)')
  fields = {f.name: f for f in dataclasses.fields(LatencyModel)}
  for key in data:
    if key not in fields:
      raise bad(f'unknown field {key!r}')
  for name, field in fields.items():
    if name not in data and field.default is dataclasses.MISSING:
      raise bad(f'missing field {name!r}')
  out = dict(data)

  def need(name: str, ok: Callable[[Any], bool], expected: str) -> None:
    if name in out and not ok(out[name]):
      raise bad(f'field {name!r} is {_short(out[name])}, expected {expected}')

  def text(v: Any) -> bool:
    return isinstance(v, str) and bool(v)

  def count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0

  def positive(v: Any) -> bool:
    return count(v) and v > 0

  def number_or_none(v: Any) -> bool:
    return v is None or _finite(v)

  need('space', text, 'the search space name')
  need('runtime', text, 'a runtime name such as "cpu-tflite"')
  need('runtime_version', lambda v: isinstance(v, str), 'a string')
  need('device', text, 'the device name')
  need('created', lambda v: isinstance(v, str), 'an ISO time string')
  need('input_size', positive, 'a positive integer (side of the square input)')
  need('num_threads', lambda v: v is None or positive(v), 'a positive integer or null')
  need('batch_size', positive, 'a positive integer')
  need('seed', lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
       'an integer or null')
  need('measurements', count, 'a count')
  need('cv', lambda v: isinstance(v, dict) and all(isinstance(k, str) and number_or_none(e)
                                                   for k, e in v.items()),
       'an object {kind: percent error}')
  need('heldout', lambda v: v is None or (
      isinstance(v, dict) and set(v) == set(HELDOUT_FIELDS) and count(v['n'])
      and all(number_or_none(v[k]) for k in HELDOUT_FIELDS[1:])),
       f'null or an object with {", ".join(HELDOUT_FIELDS)}')
  out['decisions'] = encoding.normalize_decisions(out['decisions'], f'{source}: decisions')
  lay = encoding.layout(out['decisions'], out['space'], out['input_size'])

  predictor = out['predictor']
  if not isinstance(predictor, dict) or 'kind' not in predictor:
    raise bad(f'field \'predictor\' is {_short(predictor)}, expected an object with a "kind"')
  try:
    kind = predictors.get_predictor(predictor['kind'])
    kind.validate(lay, predictor)
  except ValueError as e:
    raise bad(f'predictor: {e}') from None

  reference = out['reference']
  if reference is not None:
    if (not isinstance(reference, dict) or 'nas_params' not in reference
        or not _finite(reference.get('ms'))
        or reference['ms'] <= 0):
      raise bad(f'field \'reference\' is {_short(reference)}, expected null or an object with '
                '"nas_params" and a positive "ms"')
    if not isinstance(reference['nas_params'], dict):
      raise bad('reference: nas_params is not an object')
    try:
      encoding.parse(reference['nas_params'], out['decisions'], 'reference', out['space'])
    except NascliError as e:
      raise bad(str(e)) from None
  return out


def _decisions_differ(model: Decisions, search: Decisions) -> str | None:
  """Why two decision sets differ (the first difference, naming both values), or None."""
  for key in model:
    if key not in search:
      return f'decision {key!r} is in the model but not in the search\'s space'
  for key in search:
    if key not in model:
      return f'decision {key!r} is in the search\'s space but not in the model'
  for key, literals in model.items():
    theirs = search[key]
    if len(literals) != len(theirs):
      return (f'decision {key!r} has {len(literals)} candidates in the model, {len(theirs)} in '
              'the search\'s space')
    for i, (a, b) in enumerate(zip(literals, theirs)):
      if a is not None and b is not None and a != b:
        return (f'candidate {i} of {key!r} is ({a}) in the model, ({b}) in the search\'s '
                'space')
  if list(model) != list(search):
    return 'the decisions are in another order'
  return None


def _finite(value: Any) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))


def _square(size: int | Sequence[int]) -> int | tuple[int, ...]:
  if isinstance(size, int):
    return size
  size = tuple(int(s) for s in size)
  return size[0] if len(size) == 2 and size[0] == size[1] else size


def _size_text(size: int | Sequence[int]) -> str:
  if isinstance(size, int):
    return f'{size}x{size}'
  return 'x'.join(str(int(s)) for s in size)


def _short(value: Any) -> str:
  text = ' '.join(repr(value).split())
  return text if len(text) <= 60 else text[:57] + '...'
