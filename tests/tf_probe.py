"""Runs nascli as its console script does and says, last on stderr, whether TensorFlow was
imported: `python tests/tf_probe.py ARGS...` (tests of what must answer without TensorFlow)."""

import os
import subprocess
import sys

MARK = "tf-probe: tensorflow imported: "


def run(*args, env=None, cwd=None):
  """Runs `nascli ARGS` through this probe; returns (CompletedProcess, whether TF was
  imported), the probe's line taken off stderr."""
  full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
  proc = subprocess.run([sys.executable, __file__, *map(str, args)], capture_output=True,
                        text=True, env=full_env, check=False, cwd=cwd)
  head, sep, tail = proc.stderr.rpartition(MARK)
  assert sep, proc.stderr[-2000:]
  proc.stderr = head
  return proc, tail.strip() == "True"


if __name__ == "__main__":
  from nascli import app  # pylint: disable=g-import-not-at-top
  code = app.main(sys.argv[1:])
  print(f"{MARK}{'tensorflow' in sys.modules}", file=sys.stderr, flush=True)
  sys.exit(code)
