"""A warm trial worker: TensorFlow and Model Garden imported once, then trial after trial.

`python -m nascli.search.worker --reply_fd FD [--max_requests K]` reads requests from stdin,
one JSON object a line, runs each in this process with its output in the request's log file,
and answers on FD (a pipe the driver holds): `{"event": "ready"}` once the imports are done,
then per request `{"event": "accepted", "id": N}` as it takes the request, before it runs any of
it, and `{"event": "done", "id": N, "returncode": C}` at its end. A worker that dies before
`accepted` ran none of the request: the driver gives it to a fresh worker at no cost to the
trial (warm_workers.Attempt); one that dies after it fails the trial. The exit code of a request
is the one a one-trial process (`python -m nascli.search.trial`) would have exited with, so the
search loop treats both alike.

It ends when stdin closes (the driver is done with it, or died), after a request that failed
(whatever state a failure left behind goes with the process: the driver starts a fresh worker),
after K requests (so that memory cannot creep), or on SIGINT / SIGTERM (the trial in progress
stops training at its next step and records `interrupted` at a checkpoint there first; the
repeat of a Ctrl-C the driver passes on is the same interrupt, see `interrupts.relayed`).
Between requests, Keras's global state is cleared. A driver killed outright takes its workers
with it (PR_SET_PDEATHSIG, set by the driver as it starts them; see warm_workers.py).
"""

import argparse
import contextlib
import gc
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Iterator

from nascli import interrupts
from nascli import runtime

# kind -> what a request of that kind runs; returns the request's exit code.
_HANDLERS: dict[str, Callable[[dict[str, Any]], int]] = {}


def handler(kind: str):
  """Registers the function that serves requests of `kind`."""
  def register(fn: Callable[[dict[str, Any]], int]) -> Callable[[dict[str, Any]], int]:
    _HANDLERS[kind] = fn
    return fn
  return register


@handler("trial")
def _trial(request: dict[str, Any]) -> int:
  from nascli.search import trial  # pylint: disable=g-import-not-at-top
  return trial.attempt(request["spec"])


@handler("export")
def _export(request: dict[str, Any]) -> int:
  """SavedModels of finished trials (the search's best, at its end): `trial_dirs` (folders or
  gs:// URLs) each into its `export/`; one that fails is reported and the others go on."""
  # pylint: disable=g-import-not-at-top
  from nascli import exporting, storage
  failed = 0
  for trial_dir in request["trial_dirs"]:
    export_dir = storage.join(trial_dir, "export")
    try:
      exporting.export(exporting.ExportArgs(model_dir=trial_dir, export_dir=export_dir,
                                            overwrite=True))
      print(f"exported {trial_dir} to {export_dir}", file=sys.stderr, flush=True)
      if request.get("measure"):  # the predicted latency, checked on the device runtime
        from nascli.search import measured  # pylint: disable=g-import-not-at-top
        measured.measure_trial(trial_dir, request["measure"])
    except Exception as e:  # pylint: disable=broad-except
      failed += 1
      print(f"Error: exporting {trial_dir}: {' '.join(str(e).split())[:300]}", file=sys.stderr,
            flush=True)
  return 1 if failed else 0


@contextlib.contextmanager
def _output_to(log_path: str) -> Iterator[None]:
  """This process's stdout and stderr (file descriptors 1 and 2, so that TensorFlow's C++ logs
  follow) go to `log_path` for the request, and back afterwards."""
  for stream in (sys.stdout, sys.stderr):
    stream.flush()
  saved = [os.dup(1), os.dup(2)]
  log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  try:
    os.dup2(log, 1)
    os.dup2(log, 2)
    yield
  finally:
    for stream in (sys.stdout, sys.stderr):
      try:
        stream.flush()
      except (OSError, ValueError):
        pass
    os.dup2(saved[0], 1)
    os.dup2(saved[1], 2)
    for fd in (log, *saved):
      os.close(fd)


def _reset() -> None:
  """What one trial leaves in the process that the next must not see (Keras's graph, layer
  names and seeds), and the temp files autograph wrote for it.

  The trial's garbage is collected in a thread of its own: destroying its training input
  iterator waits for tf.data's autotuning thread, which sleeps up to 60 s between rounds
  (nascli/runtime.py), with the GIL released; collected on the worker's main thread (as Python's
  automatic collection would, at any moment of the next trial), that wait lands in the next
  trial (measured: 10-15 s added to its start or its FLOPs count). The automatic collector is
  off in a worker: a trial's own cycles wait for the end of the trial.
  """
  tf_keras = sys.modules.get("tf_keras")  # none imported (a worker of other requests): no state
  if tf_keras is not None:
    tf_keras.backend.clear_session()
  runtime.cleanup_temp_files()
  threading.Thread(target=gc.collect, name="nascli-trial-garbage", daemon=True).start()


def _answer(reply, event: dict[str, Any]) -> None:
  reply.write(json.dumps(event) + "\n")
  reply.flush()


def serve(requests, reply, max_requests: int) -> int:
  """Answers `requests` (a text stream) on `reply` until one of the ends in the docstring."""
  served = 0
  gc.disable()  # see _reset
  while True:
    line = requests.readline()
    if not line:
      return 0  # the driver closed the channel
    request = json.loads(line)
    _answer(reply, {"event": "accepted", "id": request["id"]})
    with _output_to(request["log"]):
      code = _HANDLERS[request["kind"]](request)
    _answer(reply, {"event": "done", "id": request["id"], "returncode": code})
    served += 1
    if code != 0:
      return code if code in (130, 143) else 0
    if served >= max_requests:
      return 0
    _reset()


def load_trial_code() -> None:
  """What a trial worker imports before it says it is ready: TensorFlow, Model Garden (see
  nascli/frameworks.py) and the trial code."""
  from nascli import frameworks  # pylint: disable=g-import-not-at-top
  frameworks.load()
  from nascli.search import trial  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import


def main(argv: list[str], load: Callable[[], None] = load_trial_code) -> int:
  """A worker that serves the requests of _HANDLERS once `load` has imported what they need
  (a worker program with handlers of its own passes its own)."""
  parser = argparse.ArgumentParser(prog="python -m nascli.search.worker")
  parser.add_argument("--reply_fd", type=int, required=True)
  parser.add_argument("--max_requests", type=int, default=10)
  args = parser.parse_args(argv)
  reply = os.fdopen(args.reply_fd, "w", encoding="utf-8")
  runtime.quiet_libraries()
  start = time.monotonic()
  interrupts.relayed()  # the driver passes on each Ctrl-C this process also gets from its group
  with interrupts.handled():
    try:
      load()
      _answer(reply, {"event": "ready", "pid": os.getpid(),
                      "start_s": round(time.monotonic() - start, 3)})
      return serve(sys.stdin, reply, args.max_requests)
    except KeyboardInterrupt as e:  # between requests: nothing to record
      return interrupts.exit_code(e)
    except BrokenPipeError:  # the driver is gone
      return 0


if __name__ == "__main__":
  runtime.request()  # a worker that served nothing exits fast as well
  runtime.finish(main(sys.argv[1:]))
