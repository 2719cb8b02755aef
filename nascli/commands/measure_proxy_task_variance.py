"""`nascli measure_proxy_task_variance`: Vertex AI NAS's variance and smoothness of a proxy task.

Trains one architecture --max_nas_trial times (seeds --seed, --seed + 1, ...) under the proxy
(--config_file / --params_override / --search_docker_flags, as a search takes its recipe), each
run evaluated along its training, and reports the coefficient of variation of the final scores
and the smoothness of the curves. With --compare_with JOB (a search run under the same proxy),
also whether the differences between that job's architectures exceed this run-to-run noise.
"""

import json
import sys
from typing import Annotated, Optional

import typer
from rich.table import Table

from nascli import console
from nascli import storage
from nascli.commands import search_flags as f
from nascli.commands.options import flag, given, takes
from nascli.errors import NascliError

NUM_RUNS = 5  # Vertex's variance job trains its model 5 times

NasParams = Annotated[Optional[str], typer.Option(
    *flag("nas_params_str"), help="The architecture to measure: Vertex's nas_params_str (JSON"
    " text or a .json file, e.g. a trial's nas_params_str.json). Default: the first"
    " architecture random search proposes with --seed.")]
CompareWith = Annotated[Optional[str], typer.Option(
    *flag("compare_with"), help="A search (or select_proxy_task_models) job dir trained with"
    " this proxy: says whether its architectures differ by more than the noise measured here.")]


@takes(f.SPACE, "nas_params_str", "seed", "max_nas_trial", "compare_with", f.JOB,
       f.DOCKER_RECIPE, f.TRIALS_ON_RAY)
def measure_proxy_task_variance(
    nas_params_str: NasParams = None,
    seed: Annotated[int, typer.Option(
        *flag("seed"), help="The first run's seed (the k-th run's: seed + k - 1).")] = 0,
    max_nas_trial: Annotated[int, typer.Option(
        *flag("max_nas_trial"), help="Runs of the architecture (Vertex: 5); more extend a"
        " finished job.")] = NUM_RUNS,
    compare_with: CompareWith = None,
    **shared,
) -> None:
  """Train one architecture with several seeds under a proxy task: the coefficient of variation
  of its score and the smoothness of its validation curves (Vertex's variance measurement).
  Journaled and resumable as a search; on Ray with --ray_address."""
  # pylint: disable=g-import-not-at-top
  from nascli.proxy import variance_main as main
  from tf_vision.nas_params_syntax import load_nas_params
  if max_nas_trial < 2:
    raise NascliError(f"--max_nas_trial must be at least 2 (a variance needs two runs), got"
                      f" {max_nas_trial}")
  nas_params = load_nas_params(nas_params_str)[0] if nas_params_str else None
  if compare_with and not storage.exists(compare_with):
    raise NascliError(f"--compare_with {compare_with} does not exist")
  settings = main.VarianceSettings(nas_params=nas_params, compare_with=compare_with)
  # The search's shared flags: the runs are the trials; no reward to optimize, nothing
  # exported. "random" stands for the internal algorithm in the flag checks.
  values = dict(given(locals()), **f.UNSEARCHED, search_algorithm="random",
                max_failed_nas_trial=max_nas_trial - 2)
  f.check(values)  # before Ray, pyglove and TensorFlow are imported
  f.own_job_dir(values, lambda: main.default_job_dir(f.default_job_dir(values), nas_params))
  result = f.run_trials(values, lambda args, executor: main.run(
      args, values["search_docker_flags"], settings, executor))
  _print(result, values["as_json"])


def _print(result: dict, as_json: bool) -> None:
  if as_json:
    print(json.dumps(result, indent=2))
    return
  metric = result["accuracy_metric"]
  table = Table(title=f"{result['job_dir']}: {len(result['runs'])} runs of one architecture")
  for column in ("trial", "seed", metric, "smoothness", "evaluations"):
    table.add_column(column)
  for run in result["runs"]:
    smooth = "-" if run["smoothness"] is None else f"{run['smoothness']:.3f}"
    table.add_row(run["trial_id"], str(run["seed"]), f"{run['accuracy']:.4f}", smooth,
                  str(run["evaluations"]))
  from nascli.search import summary  # pylint: disable=g-import-not-at-top
  table.caption = summary.split_note(metric)
  out = console.stdout()
  out.print(table)

  def good(flag_value) -> str:
    return "n/a" if flag_value is None else ("good" if flag_value else "NOT good")

  smooth = "n/a" if result["smoothness"] is None else f"{result['smoothness']:.3f}"
  out.print(f"variance (std/mean of {metric}): {result['variance']:.4f}"
            f" ({good(result['variance_good'])}, <= {result['max_variance_to_be_good']});"
            f" run-to-run std {result['run_to_run_std']:.4f} around"
            f" {result['mean_accuracy']:.4f}", highlight=False)
  out.print(f"smoothness: {smooth} ({good(result['smoothness_good'])},"
            f" <= {result['max_smoothness_to_be_good']:g})", highlight=False)
  verdict = result.get("verdict")
  if verdict:
    out.print(f"{verdict['compared_with']} ({verdict['architectures']} architectures):"
              f" {verdict['message']}", highlight=False)
  else:
    print("give --compare_with JOB_DIR (a search trained with this proxy) to compare this noise"
          " with the differences between architectures", file=sys.stderr)
  if result["failed"]:
    print(f"failed runs: {', '.join(result['failed'])}", file=sys.stderr)
  print(f"written to {result['job_dir']}/variance_and_smoothness.json", file=sys.stderr)
