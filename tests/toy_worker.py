"""A warm worker of toy trials, for tests of the executors' failure paths (test_executor_failures).

It is nascli's own worker (nascli/search/worker.py: its `main`, request loop and protocol, ready /
accepted / done) with the "trial" request served by a toy instead of nascli.search.trial, and no
TensorFlow loaded: a worker starts in a fraction of a second, so a test can kill workers at
chosen points and watch the driver's side (warm_workers.Attempt) replace them.

A toy trial spec is JSON `{"toy": "complete" | "hang" | "die"}`; the trial first writes
`ran.json` (`{"pid": the worker's pid}`) in its folder, then: `complete` writes a completed
job_status.json and answers 0; `hang` sleeps until it is killed; `die` SIGKILLs its own worker
(a death after the worker accepted the trial). An "export" request writes `exported.json`
(`{"pid": ..., "trial_dirs": [...]}`) in each of its trial folders. With TOY_WORKER_DIES_AT_START=1 in its
environment a worker kills itself before it is ready (before it could accept anything).
"""

import json
import os
import signal
import sys
import time

from nascli.search import worker
from tf_vision import job_status


@worker.handler("trial")
def _toy_trial(request):
  with open(request["spec"], encoding="utf-8") as f:
    action = json.load(f)["toy"]
  trial_dir = os.path.dirname(request["spec"])
  with open(os.path.join(trial_dir, "ran.json"), "w", encoding="utf-8") as f:
    json.dump({"pid": os.getpid()}, f)
  if action == "die":
    os.kill(os.getpid(), signal.SIGKILL)
  while action == "hang":
    time.sleep(0.1)
  job_status.write(trial_dir, job_status.COMPLETED)
  return 0


@worker.handler("export")
def _toy_export(request):
  """Writes `exported.json` (`{"pid": ..., "trial_dirs": [...]}`) in each trial folder."""
  for trial_dir in request["trial_dirs"]:
    with open(os.path.join(trial_dir, "exported.json"), "w", encoding="utf-8") as f:
      json.dump({"pid": os.getpid(), "trial_dirs": request["trial_dirs"]}, f)
  return 0


def _load():
  if os.environ.get("TOY_WORKER_DIES_AT_START") == "1":
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
  sys.exit(worker.main(sys.argv[1:], load=_load))
