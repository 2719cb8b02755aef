"""`nascli select_proxy_task_models`: Vertex AI NAS's reference models for proxy-task design.

Trains --max_nas_trial random architectures (Vertex: 30) with the reference recipe (the
training you ultimately care about: --config_file / --params_override / --search_docker_flags,
as a search takes them), then keeps --final_num_models (10) whose scores spread from the worst
to the best, removing --num_models_to_remove_per_iter (5) per cut. A rank correlation between
a proxy task and the reference means something only on such a spread set.
"""

import json
import sys
from typing import Annotated, Optional

import typer
from rich.table import Table

from nascli import console
from nascli.commands import search_flags as f
from nascli.commands.options import flag, given, takes
from nascli.errors import NascliError

# nascli.proxy.selection's defaults (Vertex's constants), spelled out so that the CLI loads no
# numpy; tests/test_select_proxy_task_models.py asserts that they agree.
START_NUM_MODELS, FINAL_NUM_MODELS, NUM_MODELS_TO_REMOVE_PER_ITER = 30, 10, 5

FinalNumModels = Annotated[int, typer.Option(
    *flag("final_num_models"), help="Models kept (Vertex: 10).")]
RemovePerIter = Annotated[int, typer.Option(
    *flag("num_models_to_remove_per_iter"), help="Models removed per cut (Vertex: 5).")]
AccuracyMetric = Annotated[Optional[str], typer.Option(
    *flag("accuracy_metric_id"), help="The metric the models are selected on: the search"
    " space's (accuracy, AP), which is the default; checked before anything trains.")]
LatencyMetric = Annotated[str, typer.Option(
    *flag("latency_metric_id"), help="Also spread the models' measured latency (latency_ms),"
    " or none; checked before anything trains.")]
PreviousDir = Annotated[Optional[str], typer.Option(
    *flag("previous_model_selection_dir"), help="Resume this model-selection job (Vertex's"
    " flag; the same as running the same command again with its --local_output_dir).")]


@takes(f.SPACE, "seed", "max_nas_trial", "final_num_models", "num_models_to_remove_per_iter",
       "accuracy_metric_id", "latency_metric_id", f.JOB, "previous_model_selection_dir",
       f.DOCKER_RECIPE, f.TRIALS_ON_RAY)
def select_proxy_task_models(
    max_nas_trial: Annotated[int, typer.Option(
        *flag("max_nas_trial"), help="Random architectures trained with the reference recipe"
        " (Vertex: 30).")] = START_NUM_MODELS,
    final_num_models: FinalNumModels = FINAL_NUM_MODELS,
    num_models_to_remove_per_iter: RemovePerIter = NUM_MODELS_TO_REMOVE_PER_ITER,
    accuracy_metric_id: AccuracyMetric = None,
    latency_metric_id: LatencyMetric = "latency_ms",
    previous_model_selection_dir: PreviousDir = None,
    **shared,
) -> None:
  """Train random architectures with the reference recipe and keep a set whose scores spread
  evenly: the models search_proxy_task correlates proxies against. Journaled and resumable as
  a search; on Ray with --ray_address."""
  # pylint: disable=g-import-not-at-top
  from nascli.proxy import model_selection_main as main
  from nascli.proxy import selection
  f.previous_job(shared, "previous_model_selection_dir", previous_model_selection_dir)
  if latency_metric_id not in main.LATENCY_METRICS:
    raise f.unknown("latency_metric_id", latency_metric_id, main.LATENCY_METRICS)
  rules = selection.SelectionRules(start_num_models=max_nas_trial,
                                   final_num_models=final_num_models,
                                   num_models_to_remove_per_iter=num_models_to_remove_per_iter)
  settings = main.SelectionSettings(rules, accuracy_metric_id, latency_metric_id)
  # The search's shared flags: proposals at random, no reward to optimize, nothing exported; it
  # stops where the selection would refuse its failures.
  values = dict(given(locals()), **f.UNSEARCHED, search_algorithm=main.SEARCH_ALGORITHM,
                max_failed_nas_trial=rules.allowed_failures)
  f.check(values)  # before Ray, pyglove and TensorFlow are imported
  _check_accuracy_metric(accuracy_metric_id, values["prebuilt_search_space"],
                         values["search_space_module"])
  f.own_job_dir(values, lambda: main.default_job_dir(f.default_job_dir(values)))
  result = f.run_trials(values, lambda args, executor: main.run(
      args, values["search_docker_flags"], settings, executor))
  _print(result, values["as_json"])


def _check_accuracy_metric(metric_id: str | None, space: str, module: str | None) -> None:
  """--accuracy_metric_id must be the metric the space's trials report (a trial measures one),
  refused before anything trains."""
  if metric_id is None:
    return
  from tf_vision.search_spaces import registry  # pylint: disable=g-import-not-at-top
  entry = registry.resolve_search_space(space, module)
  metric = entry.require_binding().metric
  if metric_id != metric:
    raise NascliError(f"--accuracy_metric_id {metric_id!r}: the trials of search space"
                      f" {entry.name} report {metric}; give {metric} or leave the flag out")


def _print(result: dict, as_json: bool) -> None:
  for warning in result.get("warnings") or []:
    print(f"warning: {warning}", file=sys.stderr)
  if as_json:
    print(json.dumps(result, indent=2))
    return
  table = Table(title=f"{result['job_dir']}: {len(result['models'])} reference models"
                f" ({result['accuracy_metric']})")
  latency = result.get("latency_metric") not in (None, "none")
  columns = ["trial", result["accuracy_metric"] or "accuracy"]
  columns += [result["latency_metric"]] if latency else []
  for column in columns + ["nas_params"]:
    table.add_column(column)
  for m in sorted(result["models"], key=lambda m: -m["accuracy"]):
    cells = [m["trial_id"], f"{m['accuracy']:.4f}"]
    if latency:
      cells.append("-" if m["latency_ms"] is None else f"{m['latency_ms']:.3f}")
    table.add_row(*cells, f"{len(m['nas_params'])} decisions")
  from nascli.search import summary  # pylint: disable=g-import-not-at-top
  table.caption = summary.split_note(result["accuracy_metric"] or "accuracy")
  console.stdout().print(table)
  removed = [t for it in result["iterations"] for t in it["removed"]]
  failed = [t for it in result["iterations"] for t in it["failed"]]
  print(f"removed: {', '.join(removed) or 'none'}; failed: {', '.join(failed) or 'none'};"
        f" written to {result['job_dir']}/proxy_task_models.json", file=sys.stderr)
