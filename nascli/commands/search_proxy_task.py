"""`nascli search_proxy_task`: Vertex AI NAS's search for the cheapest trustworthy proxy task.

Candidates are the reference recipe of a `select_proxy_task_models` job shortened to
--proxy_train_steps, on --proxy_image_sizes and --proxy_train_data_fractions (every
combination), tried cheapest first. Each trains the selected models with other seeds than their
reference trainings; it succeeds when the lower end of the 90% bootstrap interval of Kendall's
tau of its scores against the reference scores meets --desired_accuracy_correlation (and its
latencies' tau --desired_latency_correlation). The cheapest success is written as proxy_task.yaml,
for `search_in_local --config_file`.
"""

import contextlib
import json
import sys
from typing import Annotated, Optional

import typer
from rich.table import Table

from nascli import console
from nascli import storage
from nascli.commands import ray_flags as r
from nascli.commands import search_flags as f
from nascli.commands.options import flag, given, takes
from nascli.errors import NascliError

# nascli.proxy's defaults (Vertex's), spelled out so that the CLI loads no numpy;
# tests/test_search_proxy_task.py asserts that they agree.
DEFAULT_TRAIN_STEPS = "10%,25%,50%"
DESIRED_CORRELATION = 0.65
TRAINING_TIME_HRS_LIMIT = 3.0

SelectionDir = Annotated[str, typer.Option(
    *flag("proxy_task_model_selection_dir"), help="The select_proxy_task_models job dir: its"
    " models, their reference scores and its recipe (Vertex's"
    " --proxy_task_model_selection_job_id).")]
TrainSteps = Annotated[str, typer.Option(
    *flag("proxy_train_steps"), help="Candidate train steps, comma-separated: counts or shares"
    " of the reference's (the schedule shrinks with them).")]
ImageSizes = Annotated[Optional[str], typer.Option(
    *flag("proxy_image_sizes"), help="Candidate image sizes in pixels, comma-separated"
    " (default: the reference's).")]
DataFractions = Annotated[str, typer.Option(
    *flag("proxy_train_data_fractions"), help="Candidate fractions of the training files,"
    " comma-separated (Vertex's example: 0.25,0.5,0.75,0.95).")]
Correlation = Annotated[Optional[float], typer.Option(
    *flag("desired_accuracy_correlation"), help="Kendall tau a proxy's scores must reach"
    " against the reference's, at the lower end of its 90% bootstrap interval over the"
    " models.")]
LatencyCorrelation = Annotated[Optional[float], typer.Option(
    *flag("desired_latency_correlation"), help="Kendall tau its latencies must reach.")]
DesiredAccuracy = Annotated[Optional[float], typer.Option(
    *flag("desired_accuracy"), help="Or: a median score that makes a proxy good enough.")]
TimeLimit = Annotated[Optional[float], typer.Option(
    *flag("training_time_hrs_limit"), help="A candidate whose model training costs this many"
    " hours (estimated, then measured) fails.")]
EarlyStop = Annotated[bool, typer.Option(
    "--early_stop_proxy_task_if_not_best/--no_early_stop_proxy_task_if_not_best",
    help="Skip a candidate that cannot be cheaper than the best success so far.")]
PreviousDir = Annotated[Optional[str], typer.Option(
    *flag("previous_proxy_task_search_dir"), help="Resume (or add candidates to) this job"
    " (Vertex's flag; the same as --local_output_dir).")]


@takes(f.JOB, "previous_proxy_task_search_dir", f.TRIALS_ON_RAY)
def search_proxy_task(
    proxy_task_model_selection_dir: SelectionDir,
    proxy_train_steps: TrainSteps = DEFAULT_TRAIN_STEPS,
    proxy_image_sizes: ImageSizes = None,
    proxy_train_data_fractions: DataFractions = "1",
    desired_accuracy_correlation: Correlation = DESIRED_CORRELATION,
    desired_latency_correlation: LatencyCorrelation = DESIRED_CORRELATION,
    desired_accuracy: DesiredAccuracy = None,
    training_time_hrs_limit: TimeLimit = TRAINING_TIME_HRS_LIMIT,
    early_stop_proxy_task_if_not_best: EarlyStop = True,
    seed: Annotated[Optional[int], typer.Option(
        *flag("seed"), help="The candidates' trainings' seed (default: each reference model's"
        " seed + 1; never a reference model's own, so that proxy and reference do not share"
        " their noise); it also seeds the bootstrap interval of tau.")] = None,
    previous_proxy_task_search_dir: PreviousDir = None,
    **shared,
) -> None:
  """Find the cheapest proxy task (train steps, image size, data fraction) whose scores rank
  the selected reference models as their reference training does; writes it as a YAML for
  search_in_local --config_file. Journaled and resumable; on Ray with --ray_address."""
  # pylint: disable=g-import-not-at-top
  from nascli.proxy import jobs
  from nascli.proxy import proxy_search
  from nascli.proxy import proxy_search_main as main
  f.previous_job(shared, "previous_proxy_task_search_dir", previous_proxy_task_search_dir)
  proxy_search.parse_train_steps(proxy_train_steps)  # the syntax, before anything runs
  proxy_search.parse_image_sizes(proxy_image_sizes)
  proxy_search.parse_data_fractions(proxy_train_data_fractions)
  for name, value in (("desired_accuracy_correlation", desired_accuracy_correlation),
                      ("desired_latency_correlation", desired_latency_correlation)):
    if value is not None and not -1 <= value <= 1:
      raise NascliError(f"--{name} must be a Kendall tau in [-1, 1], got {value}")
  if training_time_hrs_limit is not None and training_time_hrs_limit <= 0:
    raise NascliError(f"--training_time_hrs_limit must be > 0, got {training_time_hrs_limit}")
  if not storage.exists(proxy_task_model_selection_dir):
    raise NascliError(f"--proxy_task_model_selection_dir {proxy_task_model_selection_dir}"
                      " does not exist")
  space = jobs.job_settings(proxy_task_model_selection_dir, "--proxy_task_model_selection_dir")
  # The engine's shared flags; the recipe, the space and the models come from the selection.
  values = dict(given(locals()), prebuilt_search_space=space.get("search_space", "mnasnet"),
                seed=0 if seed is None else seed,  # the engine's; the proxies': proxy_seeds
                search_space_module=space.get("search_space_module"),
                **f.UNSEARCHED, search_algorithm="random", max_nas_trial=1,
                max_failed_nas_trial=None, search_docker_flags=None,
                experiment=None, config_file=None, params_override=None,
                training_data_path=None, validation_data_path=None, dataset_dir=None)
  f.check(values)  # before Ray, pyglove and TensorFlow are imported
  f.own_job_dir(values, lambda: main.default_job_dir(proxy_task_model_selection_dir),
                "the default beside the model selection")
  env = r.check(values) if values["ray_address"] else None
  settings = main.ProxySearchSettings(
      model_selection_dir=proxy_task_model_selection_dir, train_steps=proxy_train_steps,
      image_sizes=proxy_image_sizes, train_data_fractions=proxy_train_data_fractions,
      targets=proxy_search.Targets(
          desired_accuracy_correlation=desired_accuracy_correlation,
          desired_accuracy=desired_accuracy,
          desired_latency_correlation=desired_latency_correlation,
          training_time_hrs_limit=training_time_hrs_limit,
          early_stop_proxy_task_if_not_best=early_stop_proxy_task_if_not_best),
      seed=seed)
  with f.interrupt_described(values):
    args = f.from_flags(values, max_trial_retries=values["max_trial_retries"])
    make_executor = (lambda: r.executor(values, env)) if values["ray_address"] else None
    with contextlib.redirect_stdout(sys.stderr):  # each candidate's trial table: progress
      result = main.run(args, settings, make_executor,
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
  _print(result, values["as_json"])


def _tau(correlation) -> str:
  if not correlation:
    return "-"
  if correlation["tau"] is None:
    return "n/a"
  interval = correlation.get("interval")
  return f"{correlation['tau']:.3f}" + (
      f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")


def _print(result: dict, as_json: bool) -> None:
  if as_json:
    print(json.dumps(result, indent=2))
    return
  table = Table(title=f"{result['job_dir']}: proxy candidates against"
                f" {result['reference']['models']} reference models")
  for column in ("candidate", "status", "accuracy tau [90% interval]", "latency tau", "median "
                 + result["accuracy_metric"], "cost (min)", "reason"):
    table.add_column(column)
  for c in result["candidates"]:
    cost = "-" if c["cost_hours"] is None else f"{c['cost_hours'] * 60:.2f}"
    median = "-" if c["median_accuracy"] is None else f"{c['median_accuracy']:.4f}"
    table.add_row(c["name"], c["status"], _tau(c["accuracy_correlation"]),
                  _tau(c["latency_correlation"]), median, cost, c["reason"])
  from nascli.search import summary  # pylint: disable=g-import-not-at-top
  table.caption = summary.split_note(result["accuracy_metric"])
  out = console.stdout()
  out.print(table)
  if result["chosen"]:
    rungs = result.get("early_stopping")
    flags = (f" --early_stopping {rungs['early_stopping']} --min_steps {rungs['min_steps']}"
             if rungs else "")
    chosen = next(c for c in result["candidates"] if c["name"] == result["chosen"])
    out.print(f"chosen proxy: {result['chosen']} (accuracy tau"
              f" {_tau(chosen['accuracy_correlation'])}); use it with `nascli search_in_local"
              f" --config_file {result['proxy_task_yaml']}{flags}`", highlight=False)
    if rungs:
      out.print(f"(from step {rungs['min_steps']} on, at every evaluated step, its models rank"
                " as the reference does, the lower end of tau's interval at the target:"
                " early-stopping rungs from there)", highlight=False)
  else:
    out.print("no candidate met the targets: add longer candidates (--proxy_train_steps) or"
              " relax --desired_accuracy_correlation", highlight=False)
    trained = [c for c in result["candidates"] if c.get("proxy_task_yaml")]
    if trained:
      c = trained[0]
      out.print(f"is it the noise? `nascli measure_proxy_task_variance --config_file"
                f" {c['proxy_task_yaml']} --compare_with {c['job_dir']}` measures the run-to-run"
                f" noise of {c['name']} against the differences between its models",
                highlight=False)
  warnings = result["reference"].get("warnings") or []
  if warnings:
    out.print(f"the reference models are a poor reference ({len(warnings)} warning(s) in"
              f" {result['job_dir']}/search_controller_state.json): {warnings[0]}",
              highlight=False)
  if result.get("left_out"):
    print(f"left out, the reference training itself: {', '.join(result['left_out'])}",
          file=sys.stderr)
  print(f"written to {result['job_dir']}/search_controller_state.json and"
        f" proxy_task_search.png", file=sys.stderr)
