"""`search_proxy_task`: candidate proxies, each a search job over the selected reference models.

Each candidate is a job of its own under JOB_DIR/candidates/<name>: the internal `fixed`
algorithm trains the selected models' architectures (one trial each, with a seed other than the
one its reference training had: `proxy_seeds`) with the
selection job's reference recipe changed by the candidate (run_spec.ProxySettings), every trial
evaluating along its training. The engine makes it journaled and resumable, on warm workers or
Ray. The decisions (order, skips, success) are nascli.proxy.proxy_search's pure functions, so a
rerun after a kill trains nothing already trained and decides the same; it then writes:

- JOB_DIR/search_controller_state.json (Vertex's SEARCH_CONTROLLER_STATE.json): every
  candidate with its taus, cost, status and reason, and the chosen one;
- JOB_DIR/proxy_task.yaml: the chosen candidate's training config (the first trial's
  params.yaml less the architecture and, unless the candidate took a part of it, the data),
  which `search_in_local --config_file` takes as it is;
- JOB_DIR/proxy_task_search.png: each candidate's tau against its cost.

The job's own settings (the selection, its models, the proxies' seed) are fingerprinted in
JOB_DIR/proxy_search_settings.json before anything trains, as a search's are in its journal
(nascli.search.job_settings): a rerun with other settings is refused in one line and changes
nothing; the grid and the targets may change (new candidates, decided again). `--overwrite`
deletes this job (its candidates too) once, before it starts again; the candidates' own search
jobs never get it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
from typing import Any, Callable

import yaml

from nascli import report, storage
from nascli.errors import NascliError
from nascli.errors import OutputError
from nascli.errors import TrialsFailedError
from nascli.proxy import jobs
from nascli.proxy import model_selection_main
from nascli.proxy import proxy_search
from nascli.proxy import trial_curves
from nascli.run_spec import ProxySettings, TrialSettings, from_dict
from tf_vision.configs import yaml_source

STATE_FILE = "search_controller_state.json"
PROXY_YAML = "proxy_task.yaml"
PLOT_FILE = "proxy_task_search.png"
CANDIDATES_DIR = "candidates"
SETTINGS_FILE = "proxy_search_settings.json"
# What `--overwrite` deletes in JOB_DIR: the job's settings and everything derived from them.
JOB_OUTPUTS = (SETTINGS_FILE, STATE_FILE, PROXY_YAML, PLOT_FILE, report.REPORT_FILE,
               CANDIDATES_DIR)
# Settings a rerun may change: more grid values are more candidates, other targets are decided
# again from the trainings already made (neither changes a training that was made).
MUTABLE = ("train_steps", "image_sizes", "train_data_fractions", "targets")
CURVE_POINTS = 10  # evaluations along each candidate's trainings (the per-step taus)
# The architecture's keys: the search sets them per trial from nas_params.
_ARCHITECTURE_KEY = "block_specs_json"
_TRAIN_PATH = ("task", "train_data", "input_path")
_DATA_PATHS = (_TRAIN_PATH, ("task", "validation_data", "input_path"))


@dataclasses.dataclass(frozen=True)
class ProxySearchSettings:
  """What the command adds to the engine's flags, declared once."""
  model_selection_dir: str
  train_steps: str = proxy_search.DEFAULT_TRAIN_STEPS
  image_sizes: str | None = None  # None: the reference's
  train_data_fractions: str = "1"
  targets: proxy_search.Targets = proxy_search.Targets()
  seed: int | None = None  # the proxies' trainings' (None: each reference model's seed + 1)


def default_job_dir(model_selection_dir: str) -> str:
  """runs/proxy_search_<x> beside a selection job runs/proxy_models_<x>."""
  head, name = os.path.split(os.path.normpath(model_selection_dir))
  return os.path.join(head, "proxy_search_" + name.removeprefix("proxy_models_"))


@dataclasses.dataclass(frozen=True)
class Reference:
  """The selection job: its models, its recipe and what it cost."""
  models: list[dict]
  accuracy_metric: str
  search_space: str
  search_space_module: str | None
  trial: TrialSettings
  train_steps: int
  image_size: int
  seconds_per_step: float | None  # the median reference model's
  # What makes the models a poor reference (near chance, ties): selection.quality_warnings.
  warnings: tuple[str, ...] = ()
  # Each model's reference training's seed, as its trial recorded it (trial_spec.json).
  seeds: tuple[int | None, ...] = ()


def read_reference(selection_dir: str) -> Reference:
  flag = "--proxy_task_model_selection_dir"
  if not storage.exists(selection_dir):
    raise NascliError(f"{flag} {selection_dir} does not exist")
  selection = model_selection_main.read(selection_dir)
  settings = jobs.job_settings(selection_dir, flag)
  models = selection["models"]
  params_path = storage.join(models[0]["trial_dir"], "params.yaml")
  if not storage.exists(params_path):
    raise NascliError(f"{flag} {selection_dir}: trial {models[0]['trial_id']} has no"
                      " params.yaml (was the job dir moved?)")
  params = yaml_source.load_yaml_source(params_path, "the reference trial's params.yaml")
  speeds = [trial_curves.seconds_per_step(m["trial_dir"]) for m in models]
  middle = proxy_search.median_model([m["accuracy"] for m in models])
  return Reference(
      models=models, accuracy_metric=selection["accuracy_metric"] or "accuracy",
      search_space=settings["search_space"],
      search_space_module=settings.get("search_space_module"),
      trial=from_dict(TrialSettings, settings["trial"], "the selection job's trial settings"),
      train_steps=int(params["trainer"]["train_steps"]),
      image_size=int(params["task"]["model"]["input_size"][0]),
      seconds_per_step=None if middle is None else speeds[middle],
      warnings=tuple(model_selection_main.quality_warnings(models, selection["accuracy_metric"])),
      seeds=tuple(_trained_seed(m["trial_dir"], settings) for m in models))


def _trained_seed(trial_dir: str, selection_settings: dict) -> int | None:
  """The seed a reference model trained with: its trial_spec.json's run seed (the seed that
  trial ran with), else the selection job's --seed."""
  path = storage.join(trial_dir, "trial_spec.json")
  seed = None
  if storage.exists(path):
    try:
      seed = json.loads(storage.read_text(path))["trial"]["run"]["seed"]
    except (ValueError, KeyError, TypeError):
      seed = None
  if seed is None:
    seed = ((selection_settings.get("trial") or {}).get("run") or {}).get("seed")
  return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def proxy_seeds(reference: Reference, seed: int | None) -> list[int]:
  """The seed each model's proxy trainings use: `seed` (--seed) for all, or by default its
  reference training's seed + 1. Never a model's reference seed: the proxy's scores would share
  that training's noise (its initialization, its data order), which inflates their tau exactly
  where the noise is as large as the differences between the models."""
  own = [0 if s is None else s for s in reference.seeds] or [0] * len(reference.models)
  if seed is None:
    return [s + 1 for s in own]
  if seed in own:
    raise NascliError(f"--seed {seed} is the seed the reference models trained with: proxy and"
                      " reference would share their training noise; give another, or leave"
                      " --seed out (each reference model's seed + 1)")
  return [seed] * len(own)


def _absolute(path: str) -> str:
  return path if storage.is_gcs(path) else os.path.abspath(path)


def job_settings(settings: ProxySearchSettings, reference: Reference, seeds: list[int]) -> dict:
  """What defines a proxy job (JOB_DIR/proxy_search_settings.json): the reference it is
  measured against, the proxies' seeds (one number when they are one) and, mutable, the grid
  and the targets."""
  return {
      "model_selection_dir": _absolute(settings.model_selection_dir),
      "reference_models": [m["trial_id"] for m in reference.models],
      "seed": seeds[0] if len(set(seeds)) == 1 else list(seeds),
      "train_steps": settings.train_steps,
      "image_sizes": settings.image_sizes,
      "train_data_fractions": settings.train_data_fractions,
      "targets": dataclasses.asdict(settings.targets),
  }


def _job_outputs(job_dir: str) -> list[str]:
  if not storage.exists(job_dir):
    return []
  names = {n.rstrip("/") for n in storage.list_names(job_dir, recursive=False)}
  return [n for n in JOB_OUTPUTS if n in names]


def check_job(job_dir: str, settings: dict, overwrite: bool) -> None:
  """Starts a proxy job in `job_dir`, or agrees to resume the one there, before anything trains.

  - Nothing there: writes SETTINGS_FILE.
  - A job with the same settings (MUTABLE aside): resumes; SETTINGS_FILE is rewritten only when
    a mutable setting changed (it records the latest).
  - A job with other settings, or proxy outputs without SETTINGS_FILE (an earlier nascli's):
    refused in one line naming what differs; nothing is touched.
  With `overwrite`, the old job (JOB_OUTPUTS, candidates included) is deleted first, once.

  Raises:
    OutputError: other settings; a search job's dir; outputs without settings.
  """
  # pylint: disable=g-import-not-at-top
  from nascli.search import job_settings as job_settings_lib
  if storage.exists(storage.join(job_dir, "journal.jsonl")):
    raise OutputError(f"{job_dir} is a search job (it has a journal.jsonl), not a"
                      " search_proxy_task job: give another --local_output_dir")
  path = storage.join(job_dir, SETTINGS_FILE)
  if overwrite:
    for name in _job_outputs(job_dir):
      target = storage.join(job_dir, name)
      if storage.is_file(target):
        storage.delete(target)
      else:
        storage.remove_tree(target)
  fingerprint = job_settings_lib.fingerprint(settings, MUTABLE)
  record = {"settings": settings, "fingerprint": fingerprint}
  if not storage.exists(path):
    outputs = _job_outputs(job_dir)
    if outputs:
      raise OutputError(
          f"{job_dir} holds search_proxy_task outputs ({', '.join(outputs)}) but no"
          f" {SETTINGS_FILE} (an earlier nascli's job): pass --overwrite to delete them and"
          " start over, or use another --local_output_dir")
    storage.write_text(path, json.dumps(record, indent=2) + "\n")
    return
  try:
    old = json.loads(storage.read_text(path))["settings"]
  except (ValueError, KeyError, TypeError):
    raise OutputError(f"{path} is damaged: pass --overwrite to start over") from None
  if job_settings_lib.fingerprint(old, MUTABLE) != fingerprint:
    diff = job_settings_lib.settings_diff(old, settings, MUTABLE) or ["fingerprint"]
    shown = "; ".join(diff[:3]) + (f"; and {len(diff) - 3} more" if len(diff) > 3 else "")
    raise OutputError(f"{job_dir} was started with other settings (differs in: {shown}); pass"
                      " --overwrite to delete it and start over, or use another"
                      " --local_output_dir")
  if job_settings_lib.settings_diff(old, settings):
    storage.write_text(path, json.dumps(record, indent=2) + "\n")


def candidate_args(base, job_dir: str, reference: Reference, candidate: proxy_search.Candidate,
                   dnas: list[list[int | float]], seeds: list[int] | None = None):
  """The search job of one candidate: the reference models under its proxy, model i trained
  with seeds[i] (proxy_seeds)."""
  n = len(dnas)
  seeds = list(seeds) if seeds is not None else [base.seed] * n
  run = dataclasses.replace(reference.trial.run, seed=seeds[0], proxy=ProxySettings(
      train_steps=candidate.train_steps, image_size=candidate.image_size,
      train_data_fraction=candidate.train_data_fraction))
  trial = dataclasses.replace(reference.trial, run=run, validation_curve_points=CURVE_POINTS,
                              export_every_trial=False)
  return dataclasses.replace(
      base, job_dir=storage.join(job_dir, CANDIDATES_DIR, candidate.name),
      search_space=reference.search_space, search_space_module=reference.search_space_module,
      search_algorithm="fixed", algorithm_options={"dnas": dnas, "seeds": seeds},
      max_nas_trial=n, overwrite=False,  # --overwrite deleted the whole job once (check_job)
      # Past this many failures no tau can be computed (a 0.7 valid ratio).
      max_failed_nas_trial=n - math.ceil(0.7 * n), export_top_k=0, objectives=None,
      trial=trial)


def evaluate_candidate(rows: list[dict], state: Any, reference: Reference,
                       candidate: proxy_search.Candidate, targets: proxy_search.Targets,
                       seed: int = 0) -> dict:
  """The candidate's trials, in the models' order, against the reference (`seed`: the
  bootstrap's)."""
  by_trial = {r["trial_id"]: r for r in rows}
  ordered = [by_trial.get(t) for t in sorted(state.proposals, key=int)]
  ordered += [None] * (len(reference.models) - len(ordered))

  def value(row, key):
    ok = row is not None and row["status"] == "completed"
    number = row.get(key) if ok else None
    return float(number) if isinstance(number, (int, float)) and math.isfinite(number) else None

  metric = reference.accuracy_metric
  return proxy_search.evaluate(
      proxy_scores=[value(r, "accuracy") for r in ordered],
      reference_scores=[m["accuracy"] for m in reference.models],
      proxy_latencies=[value(r, "latency_ms") for r in ordered],
      reference_latencies=[m.get("latency_ms") for m in reference.models],
      curves=[None if r is None else trial_curves.read_curve(r["trial_dir"], metric)
              for r in ordered],
      seconds_per_step=[None if r is None else trial_curves.seconds_per_step(r["trial_dir"])
                        for r in ordered],
      train_steps=candidate.train_steps, targets=targets, seed=seed)


def proxy_yaml(trial_dir: str, candidate: proxy_search.Candidate) -> str:
  """The candidate's training config as a --config_file: its trial's params.yaml without the
  architecture (the search sets it) and without the data paths (the search's data flags set
  them), except the training files a data fraction chose."""
  params = _lists(yaml_source.load_yaml_source(storage.join(trial_dir, "params.yaml"),
                                               "the candidate trial's params.yaml"))
  backbone = params["task"]["model"]["backbone"]
  backbone[backbone["type"]].pop(_ARCHITECTURE_KEY, None)
  for path in _DATA_PATHS:
    if path == _TRAIN_PATH and candidate.train_data_fraction < 1:
      continue
    node = params
    for key in path[:-1]:
      node = node[key]
    node.pop(path[-1], None)
  header = (f"# nascli search_proxy_task: proxy {candidate.name} (the reference recipe at"
            f" {candidate.train_steps} steps, {candidate.image_size}px, training data"
            f" fraction {candidate.train_data_fraction:g}).\n"
            "# nascli search_in_local --config_file THIS_FILE\n")
  return header + yaml.safe_dump(params, sort_keys=True)


def _lists(value: Any) -> Any:
  """Model Garden's tuples as YAML lists (safe_dump writes no tuples)."""
  if isinstance(value, dict):
    return {k: _lists(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_lists(v) for v in value]
  return value


def _plot(results: list[dict], targets: proxy_search.Targets, path: str) -> None:
  # pylint: disable=g-import-not-at-top
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure
  trained = [r for r in results if r["status"] in ("succeeded", "failed")
             and r["accuracy_correlation"]["tau"] is not None]
  fig = Figure(figsize=(6.4, 4.2))
  FigureCanvasAgg(fig)
  ax = fig.add_subplot()
  hours = all(r["cost_hours"] is not None for r in trained)
  for r in trained:
    x = r["cost_hours"] * 60 if hours else r["relative_cost"]
    ax.scatter([x], [r["accuracy_correlation"]["tau"]],
               color="tab:green" if r["status"] == "succeeded" else "tab:red")
    ax.annotate(r["name"], (x, r["accuracy_correlation"]["tau"]), fontsize=7,
                textcoords="offset points", xytext=(4, 4))
  if targets.desired_accuracy_correlation is not None:
    ax.axhline(targets.desired_accuracy_correlation, color="grey", linestyle="--",
               label="desired correlation")
    ax.legend(loc="lower right")
  ax.set_xlabel("cost (minutes, the median model)" if hours else "cost (reference steps)")
  ax.set_ylabel("Kendall tau vs the reference")
  ax.set_ylim(-1.05, 1.05)
  ax.set_title("search_proxy_task: correlation against cost per candidate")
  ax.margins(x=0.2)  # room for the candidates' names beside their points
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", bbox_inches="tight")  # no label cut at the edge
  storage.write_bytes(path, buffer.getvalue())


def run(base, settings: ProxySearchSettings,
        make_executor: Callable[[], Any] | None = None,
        progress: Callable[[str], None] = lambda line: None) -> dict:
  """Runs (or resumes, or reads) the candidates cheapest first; returns the state."""
  from nascli.search import local_main  # pylint: disable=g-import-not-at-top
  reference = read_reference(settings.model_selection_dir)
  steps = proxy_search.parse_train_steps(settings.train_steps, reference.train_steps)
  sizes = proxy_search.parse_image_sizes(settings.image_sizes) or [reference.image_size]
  fractions = proxy_search.parse_data_fractions(settings.train_data_fractions)
  candidates, left_out = proxy_search.without_reference(
      proxy_search.candidates(steps, sizes, fractions, reference.image_size),
      reference.train_steps, reference.image_size)
  seeds = proxy_seeds(reference, settings.seed)
  check_job(base.job_dir, job_settings(settings, reference, seeds), base.overwrite)
  names_left_out = tuple(c.name for c in left_out)
  for name in names_left_out:
    progress(f"candidate {name} left out: it is the reference training itself, not a proxy")
  for warning in reference.warnings:
    progress(f"warning: {warning}")
  dnas = jobs.architecture_dnas(reference.search_space, reference.search_space_module,
                                [m["nas_params"] for m in reference.models])
  targets = settings.targets
  results, best = [], None
  for number, candidate in enumerate(candidates, 1):
    relative = candidate.relative_cost(reference.image_size)
    estimate = proxy_search.estimated_hours(candidate, reference.image_size,
                                            reference.seconds_per_step)
    entry = {"name": candidate.name, **dataclasses.asdict(candidate), "relative_cost": relative,
             "estimated_cost_hours": estimate,
             "job_dir": storage.join(base.job_dir, CANDIDATES_DIR, candidate.name)}
    skip = proxy_search.skip_reason(relative, None if best is None else best["relative_cost"],
                                    targets, estimate)
    if skip:
      results.append(dict(entry, status="skipped", reason=skip, accuracy_correlation=None,
                          latency_correlation=None, median_accuracy=None, cost_hours=None,
                          over_steps=[], correlation_holds_from_step=None))
      progress(f"candidate {number}/{len(candidates)} {candidate.name}: skipped ({skip})")
      continue
    progress(f"candidate {number}/{len(candidates)} {candidate.name}: training"
             f" {len(dnas)} reference models")
    args = candidate_args(base, base.job_dir, reference, candidate, dnas, seeds)
    try:
      local_main.run(args, None, make_executor() if make_executor else None)
      stopped = None
    except TrialsFailedError as e:  # the candidate fails, the search goes on; any other error
      stopped = f"its trainings failed ({e})"  # of its search job is the command's
    rows, state = jobs.job_rows(args.job_dir, "--local_output_dir")
    result = dict(entry, **evaluate_candidate(rows, state, reference, candidate, targets,
                                              seed=seeds[0]))
    if stopped:
      result.update(status="failed", reason=f"{stopped}; {result['reason']}"
                    if result["status"] == "failed" else stopped)
    trial_dir = storage.join(args.job_dir, "1")
    if storage.exists(storage.join(trial_dir, "params.yaml")):
      # Every trained candidate's recipe, chosen or not: measure_proxy_task_variance
      # --config_file takes it to tell a candidate's noise from its ranking.
      path = storage.join(args.job_dir, PROXY_YAML)
      storage.write_text(path, proxy_yaml(trial_dir, candidate))
      result["proxy_task_yaml"] = path
    results.append(result)
    progress(f"candidate {candidate.name}: {result['status']} ({result['reason']})")
    if result["status"] == "succeeded" and (best is None
                                            or relative < best["relative_cost"]):
      best = result
    _write_state(base.job_dir, settings, reference, results, best, left_out=names_left_out,
                 seeds=seeds)
  return _write_state(base.job_dir, settings, reference, results, best, final=True,
                      left_out=names_left_out, seeds=seeds)


def rungs_from(candidate: dict) -> dict | None:
  """Early stopping the chosen proxy's curves support: from `correlation_holds_from_step`, an
  evaluated step, on to the end, its models rank as the reference does (tau's lower end at the
  target at every evaluated step), so rungs from there rank as well as the whole proxy; None
  when only its end does."""
  step = candidate.get("correlation_holds_from_step")
  if step is None or step >= candidate["train_steps"]:
    return None
  return {"early_stopping": "asha_promotions", "min_steps": int(step)}


def _write_state(job_dir: str, settings: ProxySearchSettings, reference: Reference,
                 results: list[dict], best: dict | None, final: bool = False,
                 left_out: tuple[str, ...] = (), seeds: list[int] | None = None) -> dict:
  state = {
      "job_dir": job_dir,
      "model_selection_dir": settings.model_selection_dir,
      "accuracy_metric": reference.accuracy_metric,
      "reference": {"train_steps": reference.train_steps, "image_size": reference.image_size,
                    "seconds_per_step": reference.seconds_per_step,
                    "models": len(reference.models), "warnings": list(reference.warnings),
                    "seeds": list(reference.seeds)},
      # Each model's proxy trainings' seed (never its reference seed); the bootstrap's is the
      # first.
      "proxy_seeds": seeds,
      "targets": dataclasses.asdict(settings.targets),
      "candidates": results,
      # Grid points that are the reference training itself: not proxies, never trained.
      "left_out": list(left_out),
      "chosen": None if best is None else best["name"],
      "proxy_task_yaml": None,
      "early_stopping": None if best is None else rungs_from(best),
      "finished": final,
  }
  if final and best is not None:
    candidate = proxy_search.Candidate(best["train_steps"], best["image_size"],
                                       best["train_data_fraction"])
    trial_dir = storage.join(best["job_dir"], "1")
    path = storage.join(job_dir, PROXY_YAML)
    storage.write_text(path, proxy_yaml(trial_dir, candidate))
    state["proxy_task_yaml"] = path
  if final:
    _plot(results, settings.targets, storage.join(job_dir, PLOT_FILE))
  storage.write_text(storage.join(job_dir, STATE_FILE), json.dumps(state, indent=2) + "\n")
  report.refresh(job_dir)
  return state
