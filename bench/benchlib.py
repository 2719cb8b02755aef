"""What several benches compute or write the same way: a predictor's rank and error scores
against measured numbers, seed lists given on the command line, and the result as JSON.

The benches run as scripts (`python bench/bench_x.py`), so this folder is on sys.path and they
`import benchlib`.
"""

import json
from pathlib import Path

import numpy as np


def tau(a, b) -> float:
  """Kendall's tau of two rankings, to 3 places."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  return round(float(stats.kendalltau(a, b).statistic), 3)


def within(pred, meas, share: float = 0.10) -> float:
  """The share of predictions within `share` (relative) of the measurement, to 3 places."""
  pred, meas = np.asarray(pred, float), np.asarray(meas, float)
  return round(float(np.mean(np.abs(pred - meas) / meas <= share)), 3)


def mape(pred, meas) -> float:
  """Mean absolute percentage error, to 1 place."""
  pred, meas = np.asarray(pred, float), np.asarray(meas, float)
  return round(100.0 * float(np.mean(np.abs(pred - meas) / meas)), 1)


def seeds(text: str) -> list[int]:
  """`--seeds`: "1,5,9" (those), "3-7" (3 to 7) or "20" (0 to 19)."""
  if ',' in text:
    return [int(s) for s in text.split(',')]
  if '-' in text:
    low, high = text.split('-')
    return list(range(int(low), int(high) + 1))
  return list(range(int(text)))


def print_json(result: dict, out: str | Path | None = None) -> None:
  """Prints `result` as indented JSON, and writes the same text to `out` where given."""
  text = json.dumps(result, indent=2)
  if out:
    Path(out).write_text(text + "\n")
  print(text)


def write_json(report: dict, out: Path) -> None:
  """Writes `report` to `out` (its folder made) and says where."""
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(report, indent=2) + "\n")
  print(f"\nwrote {out}")
