"""Tests for nascli.data.download against a loopback-only HTTP server."""

import hashlib
import http.server
import threading

import pytest

from conftest import nascli_subprocess

from nascli.data import download
from nascli.errors import DownloadError

PAYLOAD = bytes(range(256)) * 3000  # 768000 bytes: several read chunks.
SHA256 = hashlib.sha256(PAYLOAD).hexdigest()
MD5 = hashlib.md5(PAYLOAD).hexdigest()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
  # urllib honours *_proxy variables; the test server is on loopback only.
  for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
    monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def server():
  """Serves PAYLOAD on 127.0.0.1; counts requests per path."""
  hits: dict[str, int] = {}
  release = threading.Event()

  class Handler(http.server.BaseHTTPRequestHandler):

    def do_GET(self):  # pylint: disable=invalid-name
      hits[self.path] = hits.get(self.path, 0) + 1
      if self.path == "/data.bin":
        self._send(200, PAYLOAD)
      elif self.path == "/short":
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAYLOAD)))
        self.end_headers()
        self.wfile.write(PAYLOAD[:1000])
        self.close_connection = True
      elif self.path == "/hang":
        release.wait(5)
      else:
        self._send(404, b"not found")

    def _send(self, code, body):
      self.send_response(code)
      self.send_header("Content-Length", str(len(body)))
      self.end_headers()
      self.wfile.write(body)

    def log_message(self, *args):  # Keep test output clean.
      pass

  httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
  httpd.daemon_threads = True
  thread = threading.Thread(target=httpd.serve_forever,
                            kwargs={"poll_interval": 0.05}, daemon=True)
  thread.start()
  try:
    yield f"http://127.0.0.1:{httpd.server_address[1]}", hits
  finally:
    release.set()
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def _listing(folder):
  return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_download_and_verify(server, tmp_path, capsys):
  base, hits = server
  dest = tmp_path / "cache" / "cifar"
  got = download.fetch(f"{base}/data.bin", dest, "data.bin", sha256=SHA256,
                       md5=MD5.upper(), timeout=5)
  assert got == dest / "data.bin"
  assert got.read_bytes() == PAYLOAD
  assert _listing(dest) == ["data.bin"]
  assert hits == {"/data.bin": 1}
  out, err = capsys.readouterr()
  assert out == ""
  assert "data.bin" in err  # The progress bar went to stderr.


def test_no_progress_prints_nothing(server, tmp_path, capsys):
  base, _ = server
  download.fetch(f"{base}/data.bin", tmp_path, "d", progress=False, timeout=5)
  assert capsys.readouterr() == ("", "")
  assert (tmp_path / "d").read_bytes() == PAYLOAD


def test_wrong_checksum_raises_and_leaves_no_file(server, tmp_path):
  base, _ = server
  wrong = "0" * 64
  with pytest.raises(DownloadError) as exc:
    download.fetch(f"{base}/data.bin", tmp_path, "data.bin", sha256=wrong,
                   progress=False, timeout=5)
  msg = str(exc.value)
  assert str(tmp_path / "data.bin") in msg
  assert f"expected sha256 {wrong}, got {SHA256}" in msg
  assert _listing(tmp_path) == []


def test_existing_good_file_is_not_downloaded_again(server, tmp_path):
  base, hits = server
  (tmp_path / "data.bin").write_bytes(PAYLOAD)
  got = download.fetch(f"{base}/data.bin", tmp_path, "data.bin",
                       sha256=SHA256, progress=False, timeout=5)
  assert got == tmp_path / "data.bin"
  assert hits == {}


def test_existing_bad_file_is_replaced(server, tmp_path):
  base, hits = server
  (tmp_path / "data.bin").write_bytes(b"stale")
  download.fetch(f"{base}/data.bin", tmp_path, "data.bin", md5=MD5,
                 progress=False, timeout=5)
  assert (tmp_path / "data.bin").read_bytes() == PAYLOAD
  assert hits == {"/data.bin": 1}
  assert _listing(tmp_path) == ["data.bin"]


def test_unreachable_url_names_destination(tmp_path):
  with pytest.raises(DownloadError) as exc:
    download.fetch("http://127.0.0.1:9/x", tmp_path, "x.tar.gz",
                   progress=False, timeout=2)
  msg = str(exc.value)
  assert msg.startswith("could not download http://127.0.0.1:9/x (")
  assert (f"fetch it by hand and save it as {tmp_path / 'x.tar.gz'}, "
          "or pass --source PATH") in msg
  assert "\n" not in msg
  assert _listing(tmp_path) == []


@pytest.mark.parametrize("path,filename,timeout,message", [
    ("missing", "m", 5, r"/missing \(HTTP 404 Not Found\)"),  # an HTTP error
    ("short", "s", 5, r"/short \(.*1000.*\); fetch it"),  # the connection closed early
    ("hang", "h", 0.3, r"/hang \(timed out\)"),  # a timeout
])
def test_server_failure_is_named_and_leaves_nothing(server, tmp_path, path, filename, timeout,
                                                    message):
  base, _ = server
  with pytest.raises(DownloadError, match=message):
    download.fetch(f"{base}/{path}", tmp_path, filename, progress=False, timeout=timeout)
  assert _listing(tmp_path) == []


def test_bad_arguments(tmp_path):
  with pytest.raises(ValueError):
    download.fetch("http://127.0.0.1:9/x", tmp_path, "../x")
  with pytest.raises(ValueError):
    download.fetch("http://127.0.0.1:9/x", tmp_path, "x", sha256="abc")
  with pytest.raises(DownloadError, match="unsupported URL scheme"):
    download.fetch("file:///etc/passwd", tmp_path, "x", progress=False)


def test_file_digest(tmp_path):
  path = tmp_path / "f"
  path.write_bytes(PAYLOAD)
  assert download.file_digest(path) == SHA256
  assert download.file_digest(str(path), "md5") == MD5


def test_a_corrupt_copy_already_saved_is_named_not_asked_for_again(tmp_path):
  """The hint "save it as PATH" when PATH is already there: say it fails its checksum."""
  saved = tmp_path / "x.tar.gz"
  saved.write_bytes(b"not the archive")
  with pytest.raises(DownloadError) as exc:
    download.fetch("http://127.0.0.1:9/x", tmp_path, "x.tar.gz", md5=MD5, progress=False,
                   timeout=2)
  msg = str(exc.value)
  assert msg.startswith("could not download http://127.0.0.1:9/x (")
  assert msg.endswith(f"; the file already at {saved} fails its md5 checksum (expected {MD5},"
                      f" got {download.file_digest(saved, 'md5')}): replace it with a good"
                      " copy, or pass --source PATH")
  assert "save it as" not in msg
  assert saved.read_bytes() == b"not the archive"  # a failed download loses nothing


def test_failed_download_removes_the_folders_it_made(tmp_path):
  dest = tmp_path / "cache" / "nascli" / "downloads"
  with pytest.raises(DownloadError):
    download.fetch("http://127.0.0.1:9/x", dest, "x.tar.gz", progress=False, timeout=2)
  assert _listing(tmp_path) == []  # no .part (downloads do not resume), no empty folders


@pytest.mark.parametrize("name,url,filename", [
    ("cifar10", "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
     "cifar-10-python.tar.gz"),
    ("mnist", "https://storage.googleapis.com/cvdf-datasets/mnist/train-images-idx3-ubyte.gz",
     "train-images-idx3-ubyte.gz"),
    ("flowers", "https://storage.googleapis.com/download.tensorflow.org/example_images/"
     "flower_photos.tgz", "flower_photos.tgz"),
])
def test_offline_convert_data_says_what_to_fetch_and_leaves_no_folder(tmp_path, name, url,
                                                                      filename):
  # Offline, for real and in a fresh process: every request goes to a proxy on a closed
  # loopback port, so nothing can reach the internet.
  closed = "http://127.0.0.1:9"
  downloads = tmp_path / "cache" / "downloads"
  proc = nascli_subprocess("convert-data", name, "--download_dir", downloads, cwd=tmp_path,
                           env={"https_proxy": closed, "http_proxy": closed, "no_proxy": "",
                                "HTTPS_PROXY": closed, "HTTP_PROXY": closed, "NO_PROXY": ""})
  assert proc.returncode == 1
  assert proc.stdout == ""
  assert proc.stderr == (f"Error: could not download {url} (Connection refused); fetch it by hand"
                         f" and save it as {downloads / filename}, or pass --source PATH\n")
  assert _listing(tmp_path) == []  # neither nascli_data/NAME nor the download folder
