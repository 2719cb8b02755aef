"""Reaching a Ray cluster someone started (`ray start`, `ray up`, KubeRay), or refusing in one line.

`ray.init(address=HOST:PORT)` on a cluster it cannot use retries its GCS for 20 seconds or more,
prints Ray's C++ log lines, and ends in `Failed to connect to Ray cluster`, whatever the cause.
Before it, nascli asks the address itself, in a child process whose log lines it keeps:

- nothing listens there: refused at once (a socket connect);
- something listens but no Ray GCS answers in PROBE_TIMEOUT_S (15 s; the environment variable
  NASCLI_RAY_PROBE_TIMEOUT_S sets another positive number of seconds, as tests do to refuse
  sooner): not a Ray cluster's address;
- the GCS refuses the authentication token: which token nascli had (or that it had none) and
  where to get the cluster's.

Token authentication (Ray 2.60): `ray start --head` turns it on when a token is on the head
(~/.ray/auth_token, RAY_AUTH_TOKEN; a local `ray.init()` generates one there) or with
RAY_AUTH_MODE=token; every node and every client then needs the same token (RAY_AUTH_TOKEN, a
file at RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token) and token mode on. Ray turns token mode on by itself
for `ray.init(address="auto")` when a token is on the machine, not for an explicit address;
nascli does it for every address (`use_token_if_any`), so the token alone is enough.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from nascli import checks
from nascli.errors import NascliError

AUTH_MODE = "RAY_AUTH_MODE"
PROBE_TIMEOUT_S = 15.0
PROBE_TIMEOUT_ENV = "NASCLI_RAY_PROBE_TIMEOUT_S"
_DOCS = "docs/clusters.md#authentication"


def _host_port(address: str) -> tuple[str, int] | None:
  """HOST:PORT of an address nascli can ask itself (`auto`, `local` and ray:// are Ray's)."""
  host, sep, port = address.rpartition(":")
  if not sep or not port.isdigit() or "://" in address:
    return None
  return host.strip("[]"), int(port)


def check_answers(address: str) -> None:
  """A HOST:PORT where nothing listens is refused in one line within seconds."""
  target = _host_port(address)
  if target is None:
    return
  try:
    socket.create_connection(target, timeout=5).close()
  except OSError as e:
    raise NascliError(
        f"--ray_address {address}: cannot connect to Ray: nothing answers there"
        f" ({e.strerror or e}); start a cluster with `ray start --head` (it prints the address"
        f" to give), or use --ray_address local for a private instance") from None


def token_source() -> str | None:
  """Where Ray would read this machine's token from, or None when there is none."""
  if os.environ.get("RAY_AUTH_TOKEN"):
    return "RAY_AUTH_TOKEN"
  path = os.environ.get("RAY_AUTH_TOKEN_PATH")
  if path:
    return f"RAY_AUTH_TOKEN_PATH ({path})" if os.path.isfile(path) else None
  home = os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
  return home if os.path.isfile(home) else None


def use_token_if_any() -> None:
  """Token mode on when a token is at hand and RAY_AUTH_MODE is unset, as Ray does for `auto`.

  A cluster without authentication ignores the token, so this costs nothing there. Set in the
  environment before Ray reads its config, so the driver's core worker sends it too."""
  if os.environ.get(AUTH_MODE) is None and token_source() is not None:
    os.environ[AUTH_MODE] = "token"
    raylet = sys.modules.get("ray._raylet")
    if raylet is not None:  # Ray read its config already: read it again (as Ray's own code does)
      raylet.Config.initialize("")


def probe_timeout_s() -> float:
  """PROBE_TIMEOUT_S, or the positive number of seconds NASCLI_RAY_PROBE_TIMEOUT_S gives."""
  return checks.env_seconds(PROBE_TIMEOUT_ENV, PROBE_TIMEOUT_S)


def probe(address: str) -> None:
  """Asks the GCS at a HOST:PORT for its cluster id; a refusal becomes one line that names the
  cause and the fix."""
  target = _host_port(address)
  if target is None:
    return
  timeout_s = probe_timeout_s()
  try:
    done = subprocess.run([sys.executable, "-m", __name__, address], capture_output=True,
                          text=True, timeout=timeout_s, env=os.environ.copy(),
                          check=False)
  except subprocess.TimeoutExpired:
    raise NascliError(
        f"--ray_address {address}: something listens there, but no Ray cluster answered within"
        f" {timeout_s:g} s; give the address `ray start --head` printed (HEAD_IP:6379 by"
        " default), not the dashboard's or the client server's port") from None
  lines = done.stdout.strip().splitlines()
  answer = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
  kind = answer.get("kind")
  if kind == "ok":
    return
  if kind == "auth":
    raise NascliError(_auth_refusal(address))
  if kind == "error":
    raise NascliError(f"--ray_address {address}: cannot connect to Ray: {answer['message']}")
  tail = " ".join((done.stderr or "").split())[-300:]
  raise NascliError(f"--ray_address {address}: cannot connect to Ray: the probe ended with code"
                    f" {done.returncode} ({tail or 'no output'})")


def _auth_refusal(address: str) -> str:
  source = token_source()
  fix = ("`ray get-auth-token` on the head node prints it; give it to nascli as RAY_AUTH_TOKEN,"
         " or as the file ~/.ray/auth_token or RAY_AUTH_TOKEN_PATH")
  if os.environ.get(AUTH_MODE, "").lower() == "disabled":
    why = "RAY_AUTH_MODE=disabled is set here; unset it and give nascli the cluster's token"
  elif source is None:
    why = "this machine has no token"
  else:
    why = f"it refused the token from {source}: that is not this cluster's token"
  return (f"--ray_address {address}: the Ray cluster there requires token authentication"
          f" and {why} ({fix}; see {_DOCS})")


def _probe_main(address: str) -> None:
  """In the child: one JSON line on stdout; Ray's own log lines go to the parent's pipe."""
  from ray import exceptions  # pylint: disable=g-import-not-at-top
  from ray._raylet import GcsClient  # pylint: disable=g-import-not-at-top
  auth_error = getattr(exceptions, "AuthenticationError", ())  # Rays before token auth: none
  try:
    GcsClient(address=address)
    answer = {"kind": "ok"}
  except auth_error as e:
    answer = {"kind": "auth", "message": " ".join(str(e).split())[:300]}
  except Exception as e:  # pylint: disable=broad-except
    answer = {"kind": "error", "message": " ".join(f"{type(e).__name__}: {e}".split())[:300]}
  print(json.dumps(answer), flush=True)


if __name__ == "__main__":
  _probe_main(sys.argv[1])
