"""The consoles commands print through: results on stdout, progress and logs on stderr.

Rich fits a table to 80 columns when stdout is not a terminal, cutting paths to `…`; a script
that reads a piped table needs it whole, so off a terminal the result console has no width limit.
Likewise Rich breaks a message at 80 columns in a log file (`... (step 30, reward` / `0.06685)`),
which spoils grep: off a terminal, the log console writes one message as one line.
"""

from rich.console import Console, ConsoleDimensions

from nascli import checks

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


class _LogConsole(Console):
  """A console whose width is the terminal's on one, unlimited off one. Decided at each print,
  not when the console is made: a module-level console may be made before stderr is redirected
  (and a test swaps sys.stderr)."""

  def _size(self) -> ConsoleDimensions:
    size = Console.size.fget(self)
    return size if self.is_terminal else ConsoleDimensions(_UNLIMITED, size.height)

  size = property(_size, Console.size.fset)


def stderr() -> Console:
  """The console for progress and log lines: wrapped to a terminal, one line per message off
  one."""
  return _LogConsole(stderr=True)


def progress_seconds() -> float:
  """PROGRESS_SECONDS, or the positive number of seconds NASCLI_PROGRESS_SECONDS gives."""
  return checks.env_seconds(PROGRESS_ENV, PROGRESS_SECONDS)
