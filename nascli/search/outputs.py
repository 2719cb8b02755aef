"""Everything a search writes besides its journal: this module imports each module that
registers one of the search's writers (Model Garden's registry_imports), so whoever imports it
has them all; the report page's writer comes with nascli.report, a layer above."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

# pylint: disable=unused-import
from nascli.search import hparams  # noqa: F401  trials' HParams for TensorBoard
from nascli.search import result_files  # noqa: F401  trials.json/csv, progress and Pareto plots
from nascli.search import writers
from nascli.search.journal import JobState


def write_all(job_dir: str, state: JobState,
              decision_domains: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
  """Every registered output of the job from `state`, all written when it returns (a
  finished job's outputs, tests, benchmarks); returns the rows."""
  outputs = writers.Outputs(job_dir, decision_domains)
  rows = outputs.update(state)
  outputs.flush()
  return rows
