"""The consoles commands print through: results on stdout, progress and logs on stderr.

Rich fits a table to 80 columns when stdout is not a terminal, cutting paths to `…`; a script
that reads a piped table needs it whole, so off a terminal the result console has no width limit.
"""

import math
import os

from rich.console import Console

_UNLIMITED = 100_000
# Off a terminal, long commands (convert-data, search_in_local, search) print a progress line on
# stderr this often; NASCLI_PROGRESS_SECONDS sets another pace (tests set it low).
PROGRESS_SECONDS = 30.0
PROGRESS_ENV = "NASCLI_PROGRESS_SECONDS"


def whole(console: Console) -> Console:
  """`console` on a terminal; off one, a console on the same stream with no width limit."""
  if console.is_terminal:
    return console
  return Console(stderr=console.stderr, width=_UNLIMITED)


def stdout() -> Console:
  return whole(Console())


def stderr() -> Console:
  return Console(stderr=True)


def progress_seconds() -> float:
  """PROGRESS_SECONDS, or the positive number of seconds NASCLI_PROGRESS_SECONDS gives."""
  try:
    value = float(os.environ.get(PROGRESS_ENV, PROGRESS_SECONDS))
  except ValueError:
    return PROGRESS_SECONDS
  return value if value > 0 and math.isfinite(value) else PROGRESS_SECONDS
