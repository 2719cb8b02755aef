"""Ctrl-C and SIGTERM: one line saying what was interrupted and how to continue; exit 130 / 143.

The first SIGINT or SIGTERM raises `Interrupted` (a KeyboardInterrupt, so code that already
cleans up on Ctrl-C does so for SIGTERM too) in the main thread. Each command catches it where it
knows what was going on, leaves its files in a resumable state (a checkpoint, `interrupted` in
job_status.json, a journal event) and re-raises it with `Interrupted.of(e, what, resume)`;
`nascli.app.main` prints the line. A second signal while that cleanup runs ends the process at
once, as users expect of a second Ctrl-C.
"""

import contextlib
import os
import signal
import threading

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []


class Interrupted(KeyboardInterrupt):
  """A signal stopped the command; `what` and `resume` make the one line main() prints."""

  def __init__(self, signum: int = signal.SIGINT, what: str | None = None,
               resume: str | None = None):
    super().__init__(what or "interrupted")
    self.signum, self.what, self.resume = signum, what, resume

  @property
  def exit_code(self) -> int:
    return 128 + self.signum

  @classmethod
  def of(cls, error: BaseException, what: str, resume: str | None = None) -> "Interrupted":
    """`error` (a KeyboardInterrupt) described: `what` was interrupted, `resume` continues it."""
    return cls(signal_of(error), what, resume)

  def message(self) -> str:
    name = "SIGTERM" if self.signum == signal.SIGTERM else "Ctrl-C"
    text = f"Interrupted ({name})" + (f": {self.what}" if self.what else "")
    return text + (f"; {self.resume}" if self.resume else "")


def signal_of(error: BaseException) -> int:
  """The signal behind a KeyboardInterrupt (SIGINT for one raised by Python's own handler)."""
  return getattr(error, "signum", None) or received() or signal.SIGINT


def exit_code(error: BaseException) -> int:
  return 128 + signal_of(error)


def message(error: BaseException) -> str:
  if isinstance(error, Interrupted):
    return error.message()
  return Interrupted(signal_of(error)).message()


def caused(error: BaseException) -> bool:
  """Whether a signal is behind `error`: a KeyboardInterrupt, or any error raised once a signal
  arrived (one that lands while TensorFlow's C++ code runs Python can come back as
  TensorFlow's own error)."""
  return isinstance(error, KeyboardInterrupt) or bool(_received)


def received() -> int | None:
  """The first signal this process received, or None: lets loops stop at a clean point."""
  return _received[0] if _received else None


def _handle(signum, frame):  # pylint: disable=unused-argument
  if _received:
    os.write(2, b"\nInterrupted again: stopping at once.\n")
    os._exit(128 + signum)  # pylint: disable=protected-access
  _received.append(signum)
  raise Interrupted(signum)


@contextlib.contextmanager
def deferred(doing: str):
  """A SIGINT or SIGTERM that nascli turns into `Interrupted` waits for the end of the block.

  A Python signal handler runs only between bytecodes, so the signal of a Ctrl-C during a train
  loop (one graph call) is raised as the call returns: before the loop's log line, metrics and
  summaries are written. Held back to the end of the block, it stops the run where a checkpoint
  of that step goes with a whole log. A second signal still ends the process at once (the
  handler it reaches says so). Signals with Python's own default handler are not held back.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  handlers = {}
  for signum in (signal.SIGINT, signal.SIGTERM):
    handler = signal.getsignal(signum)
    if callable(handler) and handler is not signal.default_int_handler:
      handlers[signum] = handler
  pending: list[KeyboardInterrupt] = []

  def defer(signum, frame):
    try:
      handlers[signum](signum, frame)
    except KeyboardInterrupt as e:
      if not pending:
        pending.append(e)
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        os.write(2, f"\n{name}: stopping after {doing}; {name} again stops at once\n".encode())

  for signum in handlers:
    signal.signal(signum, defer)
  try:
    yield
  finally:
    for signum, handler in handlers.items():
      signal.signal(signum, handler)
  if pending:
    raise pending[0]


@contextlib.contextmanager
def handled():
  """SIGINT and SIGTERM raise `Interrupted` inside the block (main thread only; elsewhere the
  block runs as it is); the previous handlers are back afterwards."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  _received.clear()
  previous = {signum: signal.signal(signum, _handle) for signum in _SIGNALS}
  try:
    yield
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)
