"""`nascli search`: the same search as `search_in_local`, trials scheduled on a Ray cluster."""

import contextlib
import sys

from nascli.commands import ray_flags as r
from nascli.commands import search_flags as f
from nascli.commands.options import takes
from nascli.errors import NascliError


@takes(f.RAY, f.SEARCH, ray_address="auto", max_parallel_nas_trial=2)
def search(**shared) -> None:
  """Search architectures with trials on a Ray cluster (a warm worker per slot in a Ray actor,
  or a Ray task per trial): same journal, trials and outputs as search_in_local; a local job
  dir must be on storage every node reaches."""
  values = shared
  f.check(values)  # before Ray, pyglove and TensorFlow are imported
  early_stopping = values["early_stopping"]
  on_gcs = (values["local_output_dir"] or "").startswith("gs://")
  if early_stopping == "auto" and on_gcs:
    values["early_stopping"] = "none"  # rungs need a checkpoint every node reaches (below)
  elif early_stopping != "none" and on_gcs:
    # Each attempt then runs in a fresh folder of the node Ray picks: no checkpoint to go on from.
    raise NascliError(f"--early_stopping {early_stopping} with a gs:// --local_output_dir on Ray:"
                      " a promoted trial could not continue from its checkpoint; use a job dir"
                      " on storage every node reaches")
  env = r.check(values)
  with f.interrupt_described(values):
    local_main = f.local_search()
    args = f.from_flags(values, max_trial_retries=values["max_trial_retries"])
    executor = r.executor(values, env)
    # Ray's driver prints worker and raylet messages with print(): they are logs, not results.
    with contextlib.redirect_stdout(sys.stderr):
      rows = local_main.run(args, values["search_docker_flags"], executor)
  f.print_rows(rows, values["as_json"])
