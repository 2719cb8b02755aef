"""Downloads data set files with checksums, progress, and actionable errors.

A download lands in a hidden `.NAME.part` file and is renamed into place only
after its checksum matches, so a file under its real name is always whole.
Downloads do not resume: a failed or interrupted one removes its `.part` file,
and the folders it made for it when they are still empty, so an offline
attempt leaves nothing behind.
Progress goes to stderr so stdout stays clean for machine-readable output.
When the network fails, the error says where to put a hand-fetched copy.
"""

from __future__ import annotations

import hashlib
import http.client
import os
from pathlib import Path
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request

from rich import progress as rich_progress
from rich.console import Console

from nascli import __version__
from nascli.data import log_progress, reasons
from nascli.errors import DownloadError
from nascli.errors import InputError
from nascli.errors import OutputError

_CHUNK = 1 << 20
_HEX_LENGTHS = {"md5": 32, "sha256": 64}


def _show(text: str) -> str:
  """Quotes text with control characters so an error stays one line."""
  return text if text.isprintable() else ascii(text)


def _reason(err: BaseException) -> str:
  return reasons.reason(err)


def file_digest(path: str | Path, algo: str = "sha256") -> str:
  """Returns the hex digest of a file, read in chunks so size does not matter.

  Raises:
    InputError: the file cannot be read.
    ValueError: algo is not a hashlib algorithm.
  """
  path = Path(path)
  hasher = hashlib.new(algo)  # ValueError on an unknown algo: a caller bug.
  try:
    with open(path, "rb") as f:
      for chunk in iter(lambda: f.read(_CHUNK), b""):
        hasher.update(chunk)
  except OSError as err:
    raise InputError(f"cannot read {_show(str(path))}: "
                     f"{_reason(err)}") from None
  return hasher.hexdigest()


def _expected_digests(md5: str | None, sha256: str | None) -> dict[str, str]:
  expected = {}
  for algo, value in (("md5", md5), ("sha256", sha256)):
    if value is None:
      continue
    value = value.strip().lower()
    if len(value) != _HEX_LENGTHS[algo] or any(
        c not in "0123456789abcdef" for c in value):
      raise ValueError(f"{algo} must be {_HEX_LENGTHS[algo]} hex digits, got "
                       f"{value!r}")
    expected[algo] = value
  return expected


def _mismatch(expected: dict[str, str],
              actual: dict[str, str]) -> tuple[str, str, str] | None:
  """Returns (algo, expected, actual) for the first differing digest."""
  for algo, want in expected.items():
    if actual[algo] != want:
      return algo, want, actual[algo]
  return None


def _network_reason(err: BaseException) -> str:
  """A short reason for a failed request, without urllib's wrapping."""
  if isinstance(err, urllib.error.HTTPError):
    return f"HTTP {err.code} {err.reason}"
  if isinstance(err, urllib.error.URLError):
    reason = err.reason
    if isinstance(reason, (TimeoutError, socket.timeout)):
      return "timed out"
    if isinstance(reason, OSError) and reason.strerror:
      return reason.strerror
    return _reason(reason) if isinstance(reason, BaseException) else str(reason)
  if isinstance(err, (TimeoutError, socket.timeout)):
    return "timed out"
  if isinstance(err, http.client.IncompleteRead):
    return (f"connection closed after {len(err.partial)} bytes, "
            f"{err.expected} more expected")
  return _reason(err)


def _progress_bar(enabled: bool) -> rich_progress.Progress:
  console = Console(stderr=True)
  return rich_progress.Progress(
      rich_progress.TextColumn("{task.description}"),
      rich_progress.BarColumn(),
      rich_progress.DownloadColumn(),
      rich_progress.TransferSpeedColumn(),
      rich_progress.TimeRemainingColumn(),
      console=console,
      disable=not enabled or not console.is_terminal,
  )


class _LogLines:
  """Without a terminal: a plain line at a steady pace (log_progress) instead of the bar."""

  def __init__(self, enabled: bool, url: str):
    self.enabled = enabled and not sys.stderr.isatty()
    self.url = url
    self.pacer = log_progress.Pacer()

  def update(self, received: int, total: int | None) -> None:
    if not self.enabled or not self.pacer.due():
      return
    mb = lambda n: f"{n / 1e6:.1f} MB"  # noqa: E731
    rate = received / max(self.pacer.elapsed(), 1e-9)
    of = (f" of {mb(total)} ({100 * received // total}%), ETA {self.pacer.eta(received, total)}"
          if total else "")
    print(f"downloading {_show(self.url)}: {mb(received)}{of}, {mb(rate)}/s", file=sys.stderr,
          flush=True)

  def finished(self, path: Path, size: int) -> None:
    if self.enabled:
      print(f"downloaded {_show(str(path))} ({size / 1e6:.1f} MB in"
            f" {log_progress.clock(self.pacer.elapsed())})", file=sys.stderr, flush=True)


def fetch(url: str, dest_dir: str | Path, filename: str, *,
          md5: str | None = None, sha256: str | None = None,
          progress: bool = True, timeout: float = 30) -> Path:
  """Downloads url to dest_dir/filename unless a verified copy is there.

  With no checksum given, an existing file is trusted as is.

  Args:
    url: an http or https URL.
    dest_dir: folder to save into; created if missing.
    filename: plain file name (no folders) to save as.
    md5: expected hex MD5 of the file, if known.
    sha256: expected hex SHA-256 of the file, if known.
    progress: show a progress bar on stderr.
    timeout: seconds to wait for the connection or for each read.

  Returns:
    the path of the verified file.

  Raises:
    DownloadError: the download failed or its checksum does not match.
    OutputError: dest_dir cannot be written.
    ValueError: filename or a checksum is malformed (a caller bug).
  """
  if not filename or filename in (".", "..") or "/" in filename or (
      os.sep in filename) or "\x00" in filename:
    raise ValueError(f"filename must be a plain file name, got {filename!r}")
  expected = _expected_digests(md5, sha256)
  dest_dir = Path(dest_dir)
  final = dest_dir / filename
  part = dest_dir / f".{filename}.part"
  where = _show(str(final))
  hint = (f"fetch it by hand and save it as {where}, or pass --source PATH")

  if final.is_file():
    actual = {algo: file_digest(final, algo) for algo in expected}
    wrong = _mismatch(expected, actual)
    if wrong is None:
      return final
    # A copy saved where the hint says, but corrupt: saying "save it there" again would not help.
    algo, want, got = wrong
    hint = (f"the file already at {where} fails its {algo} checksum (expected {want}, got"
            f" {got}): replace it with a good copy, or pass --source PATH")

  if urllib.parse.urlsplit(url).scheme.lower() not in ("http", "https"):
    raise DownloadError(f"could not download {_show(url)} (unsupported URL "
                        f"scheme); {hint}")
  made = []  # the folders this call creates, deepest first
  folder = Path(os.path.abspath(dest_dir))
  while not folder.exists() and folder != folder.parent:
    made.append(folder)
    folder = folder.parent
  try:
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = open(part, "wb")
  except OSError as err:
    _remove_empty(made)
    raise OutputError(f"cannot write {_show(str(part))}: "
                      f"{_reason(err)}") from None

  done = False
  try:
    hashers = {algo: hashlib.new(algo) for algo in expected}
    received = 0
    lines = _LogLines(progress, url)
    with out, _progress_bar(progress) as bar:
      try:
        request = urllib.request.Request(
            url, headers={"User-Agent": f"nascli/{__version__}"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
          length = response.headers.get("Content-Length")
          total = int(length) if length and length.isdigit() else None
          task = bar.add_task(filename, total=total)
          while chunk := response.read(_CHUNK):
            received += len(chunk)
            for hasher in hashers.values():
              hasher.update(chunk)
            try:
              out.write(chunk)
            except OSError as err:
              raise OutputError(f"cannot write {_show(str(part))}: "
                                f"{_reason(err)}") from None
            bar.update(task, advance=len(chunk))
            lines.update(received, total)
          if total is not None and received < total:
            raise DownloadError(
                f"could not download {_show(url)} (connection closed after "
                f"{received} of {total} bytes); {hint}")
      except (urllib.error.URLError, http.client.HTTPException,
              OSError, ValueError) as err:
        # OSError covers timeouts and resets while reading; ValueError a
        # malformed URL.
        raise DownloadError(f"could not download {_show(url)} "
                            f"({_network_reason(err)}); {hint}") from None
      out.flush()
      os.fsync(out.fileno())

    actual = {algo: h.hexdigest() for algo, h in hashers.items()}
    wrong = _mismatch(expected, actual)
    if wrong is not None:
      algo, want, got = wrong
      raise DownloadError(
          f"checksum mismatch for {where} downloaded from {_show(url)}: "
          f"expected {algo} {want}, got {got}; the partial file was removed")
    try:
      os.replace(part, final)
    except OSError as err:
      raise OutputError(f"cannot move {_show(str(part))} to {where}: "
                        f"{_reason(err)}") from None
    done = True
    lines.finished(final, received)
  finally:
    if not done:
      part.unlink(missing_ok=True)
      _remove_empty(made)
  return final


def _remove_empty(folders: list[Path]) -> None:
  for folder in folders:
    try:
      folder.rmdir()
    except OSError:
      return  # not empty (or gone): keep it and its parents
