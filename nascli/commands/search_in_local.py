"""`nascli search_in_local`: a real multi-trial architecture search on this machine."""

from nascli.commands import search_flags as f
from nascli.commands.options import takes


@takes(f.SEARCH)
def search_in_local(**shared) -> None:
  """Search architectures on this machine: trials in parallel (one GPU each when there are
  GPUs), journaled, resumable."""
  values = shared
  f.check(values)  # before the 15-40 s of imports below
  with f.interrupt_described(values):
    args = f.from_flags(values)
    rows = f.local_search().run(args, values["search_docker_flags"])
  f.print_rows(rows, values["as_json"])
