"""Ctrl-C and SIGTERM: one line saying what was interrupted and how to continue; exit 130 / 143.

The first SIGINT or SIGTERM raises `Interrupted` (a KeyboardInterrupt, so code that already
cleans up on Ctrl-C does so for SIGTERM too) in the main thread. Each command catches it where it
knows what was going on, leaves its files in a resumable state (a checkpoint, `interrupted` in
job_status.json, a journal event) and re-raises it with `Interrupted.of(e, what, resume)`;
`nascli.app.main` prints the line. A second signal while that cleanup runs ends the process at
once, as users expect of a second Ctrl-C.

Python runs a signal handler only in the main thread, between bytecodes: not while that thread
waits in a graph call such as a whole training loop. `acted_on_at_once` has a thread act on the
signal as it arrives (see there).
"""

import contextlib
import os
import signal
import threading
from typing import Callable

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []
# Whether the first signal's "stopping" line is already on stderr (said by acted_on_at_once).
_announced: list[bool] = []
# Set by `relayed`: a repeated signal is the same interrupt, not a second one.
_relayed: list[bool] = []


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


def _name(signum: int) -> str:
  return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def _stop_now(signum: int) -> None:
  os.write(2, b"\nInterrupted again: stopping at once.\n")
  os._exit(128 + signum)  # pylint: disable=protected-access


def relayed() -> None:
  """Signals reach this process twice: a search's trial worker gets a Ctrl-C from the terminal
  (its process group) and again from its driver, which passes each interrupt on. The repeat is
  not taken for a second Ctrl-C, which would end the trial before it records `interrupted` at
  its checkpoint; a user's second Ctrl-C ends the driver at once, and its workers with it."""
  if not _relayed:
    _relayed.append(True)


def _handle(signum, frame):  # pylint: disable=unused-argument
  if _received:
    if _relayed:
      return  # the same interrupt, passed on: the first is being acted on
    _stop_now(signum)
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
        if not _announced:
          name = _name(signum)
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
  _announced.clear()
  previous = {signum: signal.signal(signum, _handle) for signum in _SIGNALS}
  try:
    yield
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)


@contextlib.contextmanager
def acted_on_at_once(on_first: Callable[[int], str]):
  """Inside the block, a SIGINT or SIGTERM is acted on as it arrives, even while the main thread
  waits in a graph call (where Python's handler would run only when the call returns: after a
  training loop of thousands of steps, minutes later).

  A thread reads the signal from `signal.set_wakeup_fd`'s pipe, written by Python's C-level
  handler at once. On the first, it calls `on_first(signum)` (e.g. to make the train loop end at
  its next step), which returns what is being done ("stopping at the next step"), and says so on
  stderr; a second one ends the process at once. nascli's handler (`handled`) still raises
  `Interrupted` in the main thread as usual, where the command cleans up. Only under `handled`,
  in the main thread; elsewhere the block runs as it is.
  """
  if (threading.current_thread() is not threading.main_thread()
      or signal.getsignal(signal.SIGINT) is not _handle):
    yield
    return
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)  # set_wakeup_fd's requirement
  previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
  seen = len(_received)  # one already handled: the next one is the second

  def watch():
    nonlocal seen
    while True:
      data = os.read(read_fd, 64)
      if previous != -1:  # whoever had the wakeup fd before gets its bytes too
        try:
          os.write(previous, data)
        except OSError:
          pass
      for signum in data:
        if signum == 0:  # the end of the block
          return
        if signum not in _SIGNALS:
          continue
        seen += 1
        if seen > 1:
          if _relayed:
            continue
          _stop_now(signum)
        try:
          doing = on_first(signum)
        except Exception as e:  # pylint: disable=broad-except
          doing = f"stopping ({type(e).__name__}: {e})"
        _announced.append(True)
        name = _name(signum)
        os.write(2, f"\n{name}: {doing}; {name} again stops at once\n".encode())

  watcher = threading.Thread(target=watch, name="nascli-signal-watcher", daemon=True)
  watcher.start()
  try:
    yield
  finally:
    signal.set_wakeup_fd(previous)
    os.write(write_fd, b"\0")
    watcher.join(timeout=5)
    os.close(write_fd)
    if not watcher.is_alive():
      os.close(read_fd)
