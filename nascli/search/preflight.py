"""The search's config check: the trials' config built once, before the first trial.

A trial config with an unknown key or a broken invariant would fail every trial, each in a
fresh worker (half a minute apiece on a CPU), and leave a job dir of failed trials. So before
anything is journaled the search builds the config of a trial (the space's first point) with
the code `nascli train` builds its config with (`training.plan`: the same checks, the same
one-line errors), and refuses in that line.

Model Garden's config classes import TensorFlow, and the driver must refuse before it loads
TensorFlow itself (a refusal costs the worker's start, not the driver's too). So the check runs
in the first warm worker, which loads TensorFlow anyway: started as `python -m
nascli.search.preflight --check_spec SPEC --check_result RESULT <worker flags>`, it checks,
writes RESULT (`{"train_steps": N}` or `{"error": "..."}`), then serves trials as any warm
worker. Without warm workers (`--trial_isolation process`, Ray) a worker of its own does it.
"""

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from nascli import interrupts
from nascli import runtime
from nascli import storage
from nascli.errors import NascliError

CHECK_ID = "config-check"  # the trial id of the check's spec (its folder is a temp one)


@dataclasses.dataclass
class ConfigCheck:
  """One check: the spec it builds (in a temp folder) and where its result is written."""
  folder: str
  spec_path: str
  result_path: str
  keep: bool = False  # its worker died: the folder keeps the log the error names

  def argv(self) -> list[str]:
    return ["--check_spec", self.spec_path, "--check_result", self.result_path]

  def result(self) -> dict[str, Any] | None:
    try:
      with open(self.result_path, encoding="utf-8") as f:
        return json.load(f)
    except (OSError, ValueError):
      return None

  def remove(self) -> None:
    if not self.keep:
      shutil.rmtree(self.folder, ignore_errors=True)


def prepare(args: Any) -> ConfigCheck:
  """The check of a search's trial settings (`args`: search_loop.SearchArgs), as its first
  trial gets them; the architecture is chosen by the worker (the space's first point)."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import trial as trial_lib
  folder = tempfile.mkdtemp(prefix="nascli-config-check-")
  rung = None
  if args.scheduler.early_stopping:
    rung = trial_lib.RungSpec(rung=0, min_steps=args.scheduler.min_steps,
                              reduction_factor=args.scheduler.reduction_factor)
  spec = trial_lib.TrialSpec(
      job_dir=folder, trial_id=CHECK_ID, search_space=args.search_space, nas_params={},
      trial=args.trial.with_absolute_paths(), search_space_module=args.search_space_module,
      rung=rung)
  check = ConfigCheck(folder, os.path.join(folder, "spec.json"),
                      os.path.join(folder, "result.json"))
  trial_lib.write_spec(check.spec_path, spec)
  return check


def wait(check: ConfigCheck, worker: Any, log: str) -> dict[str, Any]:
  """The check's result once `worker` (warm_workers.Worker) wrote it; a config error, or a
  worker that died first, is refused in one line."""
  while (result := check.result()) is None:
    code = worker.exit_code()
    if code is not None:
      result = check.result()  # it may have written just before it ended
      if result is None:
        check.keep = True
        raise NascliError(f"checking the trials' config: its worker {_died(code)} before it"
                          f" answered; see {log}")
      break
    time.sleep(0.1)
  if "error" in result:
    raise NascliError(result["error"])
  return result


def _died(code: int) -> str:
  from nascli.search import warm_workers  # pylint: disable=g-import-not-at-top
  return warm_workers.died(code)


def run_check(spec_path: str) -> dict[str, Any]:
  """Builds the config of the spec's trial as `nascli train` would; `{"train_steps": N,
  "steps_per_epoch": E, "latency_input_size": S}` (E None when the data does not say; S the
  serving size latency is for), or
  `{"error": the one line train would print}`."""
  # pylint: disable=g-import-not-at-top
  from nascli import training
  from nascli.search import trial as trial_lib
  spec = trial_lib.read_spec(spec_path)
  try:
    if not spec.nas_params:
      import pyglove as pg
      from tf_vision.search_spaces import nas_params as nas_params_lib
      space = spec.space().build()
      spec.nas_params = nas_params_lib.to_nas_params(space, pg.dna_spec(space).first_dna())
    run_plan = training.plan(spec.train_args())
    from tf_vision.serving import export_lib
    return {"train_steps": int(run_plan.params.trainer.train_steps),
            "steps_per_epoch": int(run_plan.steps_per_epoch or 0) or None,
            # The side the trials' latency is for (a --latency_model must be fitted there).
            "latency_input_size": export_lib.serving_size_of(run_plan.params,
                                                             spec.trial.latency_input_size)}
  except NascliError as e:
    return {"error": " ".join(str(e).split())}
  except Exception as e:  # pylint: disable=broad-except
    return {"error": f"the trials' config: {type(e).__name__}: {' '.join(str(e).split())}"[:600]}


def main(argv: list[str]) -> int:
  """A warm worker (nascli/search/worker.py) that first checks the config in --check_spec."""
  # pylint: disable=g-import-not-at-top
  from nascli import frameworks
  from nascli.search import worker
  parser = argparse.ArgumentParser(prog="python -m nascli.search.preflight")
  parser.add_argument("--check_spec", required=True)
  parser.add_argument("--check_result", required=True)
  args, rest = parser.parse_known_args(argv)
  runtime.quiet_libraries()
  with interrupts.handled():
    try:
      frameworks.load()
      result = run_check(args.check_spec)
    except KeyboardInterrupt as e:
      return interrupts.exit_code(e)
  storage.write_text(args.check_result, json.dumps(result))  # whole or not at all
  print(f"config check: {json.dumps(result)}", file=sys.stderr, flush=True)
  return worker.main(rest)


if __name__ == "__main__":
  runtime.request()
  runtime.finish(main(sys.argv[1:]))
