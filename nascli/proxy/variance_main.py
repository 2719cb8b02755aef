"""`measure_proxy_task_variance`: one architecture trained under the proxy with N seeds.

The N trainings are a search job of the internal `fixed` algorithm (the same DNA, run seeds
--seed, --seed + 1, ...), run by the search engine: journaled, resumable after a kill, on this
machine's warm workers or on Ray; --max_nas_trial more runs extend a finished job. Each run
evaluates along its training (the curve Vertex's smoothness needs). The measurement is then a
pure function of the finished runs (nascli.proxy.variance), recomputed on every run of the
command and written as the job's `variance_and_smoothness.json` (Vertex's file name).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

from nascli import report, storage
from nascli.errors import NascliError
from nascli.proxy import jobs
from nascli.proxy import trial_curves
from nascli.proxy import variance

RESULT_FILE = "variance_and_smoothness.json"
# Evaluations along each run: Vertex samples smoothness at 10 points per window of training.
CURVE_POINTS = 10


@dataclasses.dataclass(frozen=True)
class VarianceSettings:
  """What the command adds to a search's flags, declared once."""
  nas_params: Any = None  # the architecture (nas_params_str); None: the first random one
  compare_with: str | None = None  # a job whose trials' scores the noise is compared with
  curve_points: int = CURVE_POINTS


def default_job_dir(search_job_dir: str, nas_params: Any = None) -> str:
  """nascli_output/proxy_variance_<space>[-hash] for a search's nascli_output/search_<space>
  [-hash]; another architecture than the default one adds a hash of its nas_params."""
  head, name = os.path.split(search_job_dir)
  name = "proxy_variance_" + name.removeprefix("search_")
  if nas_params is not None:
    text = json.dumps(nas_params, sort_keys=True)
    name += "-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
  return os.path.join(head, name)


def measure(job_dir: str, rows: list[dict], seeds: dict[str, int | None],
            settings: VarianceSettings) -> dict:
  """The measurement of the finished runs (`seeds`: each run's seed by trial id), written to
  JOB_DIR/variance_and_smoothness.json."""
  done = [r for r in rows if r["status"] == "completed" and r.get("accuracy") is not None]
  failed = [r["trial_id"] for r in rows if r not in done]
  metric = next((r["accuracy_metric"] for r in rows if r.get("accuracy_metric")), "accuracy")
  runs, curves = [], []
  for row in done:
    curve = trial_curves.read_curve(row["trial_dir"], metric)
    smooth = None
    if curve is not None and len(curve[0]) >= 2:
      curves.append(curve)
      smooth = variance.smoothness(*curve)
    runs.append({"trial_id": row["trial_id"], "seed": seeds.get(row["trial_id"]),
                 "accuracy": row["accuracy"], "smoothness": smooth,
                 "evaluations": 0 if curve is None else len(curve[0])})
  if len(done) < 2:
    raise NascliError(f"{job_dir}: {len(done)} run(s) finished with a score"
                      f" ({len(failed)} failed: {', '.join(failed) or 'none'}); the variance"
                      " needs at least 2: run with a larger --max_nas_trial")
  scores = [r["accuracy"] for r in done]
  cv = variance.coefficient_of_variation(scores)
  std = variance.run_to_run_std(scores)
  smooth = variance.mean_smoothness(curves) if curves else None
  result = {
      "job_dir": job_dir,
      "accuracy_metric": metric,
      "nas_params": done[0]["nas_params"],
      "runs": runs,
      "failed": failed,
      "mean_accuracy": sum(scores) / len(scores),
      "run_to_run_std": std,
      "variance": cv,
      "variance_good": cv <= variance.MAX_VARIANCE_TO_BE_GOOD,
      "smoothness": smooth,
      "smoothness_good": None if smooth is None else smooth <= variance.MAX_SMOOTHNESS_TO_BE_GOOD,
      "max_variance_to_be_good": variance.MAX_VARIANCE_TO_BE_GOOD,
      "max_smoothness_to_be_good": variance.MAX_SMOOTHNESS_TO_BE_GOOD,
      "verdict": None,
  }
  if settings.compare_with:
    others = [r["accuracy"] for r in jobs.job_rows(settings.compare_with, "--compare_with")[0]
              if r["status"] == "completed" and r.get("accuracy") is not None]
    verdict = variance.noise_verdict(others, std)
    result["verdict"] = dict(dataclasses.asdict(verdict), compared_with=settings.compare_with,
                             architectures=len(others),
                             distinguishable=verdict.distinguishable,
                             message=verdict.message())
  storage.write_text(storage.join(job_dir, RESULT_FILE), json.dumps(result, indent=2) + "\n")
  report.refresh(job_dir)  # the search's page, with the variance section
  return result


def run(args, docker_flags: list[str] | None, settings: VarianceSettings,
        executor=None) -> dict:
  """Runs (or resumes, or reads) the N trainings, then measures; returns the measurement."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import controller
  from nascli.search import local_main
  if settings.nas_params is None:
    dna = jobs.first_random_dna(args.search_space, args.search_space_module, args.seed)
  else:
    dna = jobs.architecture_dnas(args.search_space, args.search_space_module,
                                 [settings.nas_params])[0]
  args.search_algorithm = controller.FIXED
  args.algorithm_options = {"dnas": [dna], "repeat": True}
  args.trial.validation_curve_points = settings.curve_points
  local_main.run(args, docker_flags, executor)
  rows, state = jobs.job_rows(args.job_dir, "--local_output_dir")
  seeds = {t: args.seed if p.seed is None else p.seed for t, p in state.proposals.items()}
  return measure(args.job_dir, rows, seeds, settings)
