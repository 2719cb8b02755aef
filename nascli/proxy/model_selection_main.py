"""`select_proxy_task_models`: reference trainings of random architectures, then the spread set.

The reference trainings are an ordinary search job (random proposals, the user's reference
recipe, no exports), run by the search engine: journaled, resumable after a kill, on this
machine's warm workers or on Ray. The selection is then a pure function of the finished trials
(nascli.proxy.selection), recomputed on every run and written as the job's
`proxy_task_models.json`, which `search_proxy_task` reads.

Unlike Vertex, which retrains the survivors a little further between cuts, every model here
trains its whole reference budget once: the cuts are made on final scores, and the full
validation curves of all START models are kept (the tabular benchmark of issue 26 reads them).
"""

import dataclasses
import json
import math
import os
from typing import Any

from nascli import report, storage
from nascli.errors import NascliError
from nascli.proxy import selection

MODELS_FILE = "proxy_task_models.json"
# Only the reference trainings matter here: the selection compares accuracy and latency, so the
# search proposes at random (no reward to learn from) and exports nothing.
SEARCH_ALGORITHM = "random"
NO_LATENCY = "none"
# --latency_metric_id: the trials' measured latency, or none. FLOPs and parameter counts rank the
# same at any training length, so a proxy's latency tau on them would say nothing.
LATENCY_METRICS = ("latency_ms", NO_LATENCY)


@dataclasses.dataclass(frozen=True)
class SelectionSettings:
  """What the command adds to a search's flags, declared once."""
  rules: selection.SelectionRules
  accuracy_metric_id: str | None = None  # None: the search space's metric (accuracy, AP)
  latency_metric_id: str = "latency_ms"  # NO_LATENCY: select on accuracy alone


def default_job_dir(search_job_dir: str) -> str:
  """nascli_output/proxy_models_<space>[-hash] for the search's default
  nascli_output/search_<space>[-hash]: a selection never shares a search's default folder."""
  head, name = os.path.split(search_job_dir)
  return os.path.join(head, "proxy_models_" + name.removeprefix("search_"))


def _number(value: Any) -> float | None:
  return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def scores(rows: list[dict], settings: SelectionSettings) -> list[selection.TrialScore]:
  """The search's rows as the selection's scores; a trial that did not complete is invalid."""
  out = []
  for row in rows:
    metric = settings.accuracy_metric_id
    if metric is not None and row.get("accuracy_metric") not in (None, metric):
      raise NascliError(f"--accuracy_metric_id {metric}: the trials measured"
                        f" {row['accuracy_metric']} (trial {row['trial_id']})")
    latency = (None if settings.latency_metric_id == NO_LATENCY
               else _number(row.get(settings.latency_metric_id)))
    out.append(selection.TrialScore(row["trial_id"], _number(row.get("accuracy")), latency,
                                    valid=row["status"] == "completed"))
  return out


def num_classes(trial_dir: str) -> int | None:
  """task.model.num_classes of a trial's params.yaml; None without one (a detection model's
  AP has no chance level to compare with)."""
  path = storage.join(trial_dir, "params.yaml")
  if not storage.exists(path):
    return None
  # pylint: disable=g-import-not-at-top
  from tf_vision.configs import yaml_source
  params = yaml_source.load_yaml_source(path, "the reference trial's params.yaml")
  value = ((params.get("task") or {}).get("model") or {}).get("num_classes")
  return value if isinstance(value, int) and not isinstance(value, bool) else None


def quality_warnings(models: list[dict], metric: str | None) -> list[str]:
  """selection.quality_warnings of kept models as proxy_task_models.json lists them."""
  classes = num_classes(models[0]["trial_dir"]) if models else None
  return selection.quality_warnings(
      [selection.TrialScore(m["trial_id"], m["accuracy"]) for m in models],
      metric or "accuracy", classes)


def select(job_dir: str, rows: list[dict], settings: SelectionSettings) -> dict:
  """The selection of a finished reference search, written to JOB_DIR/proxy_task_models.json."""
  iterations = selection.select_models(scores(rows, settings), settings.rules)
  by_id = {row["trial_id"]: row for row in rows}
  kept = iterations[-1].kept
  metric = next((r.get("accuracy_metric") for r in rows if r.get("accuracy_metric")),
                settings.accuracy_metric_id)
  models = [{"trial_id": t.trial_id, "accuracy": t.accuracy, "latency_ms": t.latency,
             "nas_params": by_id[t.trial_id]["nas_params"],
             "trial_dir": by_id[t.trial_id]["trial_dir"]} for t in kept]
  result = {
      "job_dir": job_dir,
      "accuracy_metric": metric,
      "latency_metric": settings.latency_metric_id,
      "rules": dataclasses.asdict(settings.rules),
      "models": models,
      "iterations": [{"num_models": it.num_models, "failed": list(it.failed),
                      "removed": list(it.removed)} for it in iterations],
      "warnings": quality_warnings(models, metric),
  }
  storage.write_text(storage.join(job_dir, MODELS_FILE), json.dumps(result, indent=2) + "\n")
  report.refresh(job_dir)  # the search's page, with the chosen models
  return result


def read(job_dir: str) -> dict:
  """A model-selection job's result, for search_proxy_task; one line if there is none."""
  path = storage.join(job_dir, MODELS_FILE)
  if not storage.exists(path):
    raise NascliError(f"{job_dir} has no {MODELS_FILE}: run `nascli select_proxy_task_models"
                      f" --local_output_dir {job_dir}` to the end first")
  return json.loads(storage.read_text(path))


def run(args, docker_flags: list[str] | None, settings: SelectionSettings,
        executor=None) -> dict:
  """Runs (or resumes, or reads) the reference search, then selects; returns the selection."""
  from nascli.search import local_main  # pylint: disable=g-import-not-at-top
  rows = local_main.run(args, docker_flags, executor)
  return select(args.job_dir, rows, settings)
