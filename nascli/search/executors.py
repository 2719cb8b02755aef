"""The executors of --trial_isolation by name: a process a trial, or warm workers.

Each local executor registers itself by its --trial_isolation name (`register_local_executor`,
in trial_processes.py, which holds the Executor interface and the process executor);
this module imports every one of them, so `known_isolations` is complete and `local_executor`
builds the one a flag names. The names callers know from here are re-exported.
"""

from nascli.errors import NascliError
from nascli.search import warm_workers  # registers "worker"  # pylint: disable=unused-import
# The executors' public names, re-exported from the module that holds them.
# pylint: disable=unused-import
from nascli.search.trial_processes import _LOCAL_EXECUTORS
from nascli.search.trial_processes import INTERRUPT_GRACE_S
from nascli.search.trial_processes import TRIAL_LOG
from nascli.search.trial_processes import Executor
from nascli.search.trial_processes import LocalExecutor
from nascli.search.trial_processes import Outcome
from nascli.search.trial_processes import child_setup
from nascli.search.trial_processes import die_with_parent
from nascli.search.trial_processes import kill_group
from nascli.search.trial_processes import local_gpus
from nascli.search.trial_processes import past
from nascli.search.trial_processes import register_local_executor
from nascli.search.trial_processes import start_trial_process
from nascli.search.trial_processes import stop_processes
from nascli.search.trial_processes import timed_out
from nascli.search.trial_processes import timeout_reason
from nascli.search.trial_processes import trial_command
# pylint: enable=unused-import


def known_isolations() -> list[str]:
  """The --trial_isolation values (in registration order)."""
  return list(_LOCAL_EXECUTORS)


def local_executor(isolation: str, **kwargs) -> Executor:
  """The executor of `search_in_local` for a --trial_isolation value."""
  cls = _LOCAL_EXECUTORS.get(isolation)
  if cls is None:
    raise NascliError(f"unknown --trial_isolation {isolation!r}; known:"
                      f" {', '.join(sorted(_LOCAL_EXECUTORS))}")
  return cls(**kwargs)
