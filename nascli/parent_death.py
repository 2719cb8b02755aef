"""Child processes that die with their parent: Linux's prctl(PR_SET_PDEATHSIG).

A search's trials and workers, and a conversion's pool workers, set their parent-death signal so
that a parent killed by SIGKILL (or ending by os._exit) takes them with it: no orphan goes on
training, writing shards, or racing a retry. Where prctl cannot be had (no glibc, a sandbox that
refuses it), that promise is lost, and the parent says so once on stderr instead of silently.
"""

import functools
import os
import sys
from typing import Any, Callable

PR_SET_PDEATHSIG, PR_GET_PDEATHSIG = 1, 2  # prctl(2) options (linux/prctl.h)


@functools.lru_cache(maxsize=1)
def setter(what: str = "trials and workers") -> Callable[[int], Any] | None:
  """libc's prctl(PR_SET_PDEATHSIG, ...), probed once in this process by setting its own
  parent-death signal to what it already is; None, said once on stderr (naming `what` is left
  unprotected), where that fails. Call it in the parent, before it forks the children."""
  try:
    import ctypes  # pylint: disable=g-import-not-at-top
    prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    current = ctypes.c_int(0)
    if (prctl(PR_GET_PDEATHSIG, ctypes.byref(current)) != 0
        or prctl(PR_SET_PDEATHSIG, current.value) != 0):
      errno = ctypes.get_errno()
      raise OSError(errno, f"prctl: {os.strerror(errno)}")
  except (OSError, AttributeError) as e:
    print(f"warning: cannot set PR_SET_PDEATHSIG ({' '.join(str(e).split())}): {what} will not"
          " die with a killed parent; end any left over yourself", file=sys.stderr, flush=True)
    return None
  return lambda signum: prctl(PR_SET_PDEATHSIG, signum)
