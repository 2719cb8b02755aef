"""The consoles commands print through: results on stdout, progress and logs on stderr.

Rich fits a table to 80 columns when stdout is not a terminal, cutting paths to `…`; a script
that reads a piped table needs it whole, so off a terminal the result console has no width limit.
"""

from rich.console import Console

_UNLIMITED = 100_000


def stdout() -> Console:
  console = Console()
  return console if console.is_terminal else Console(width=_UNLIMITED)


def stderr() -> Console:
  return Console(stderr=True)
