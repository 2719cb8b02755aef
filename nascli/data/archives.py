"""Reads and extracts untrusted tar and zip archives.

Downloaded data sets are archives from the internet, so every member is
checked before anything is written: a member may not leave the destination
by name (absolute path, `..`) or by link, and may not be a device or fifo.
Extraction goes to a hidden sibling folder that is renamed into place only
when complete, so a failure never leaves a folder that looks finished.
"""

from __future__ import annotations

import lzma
import os
from pathlib import Path
import re
import secrets
import shutil
import stat
import tarfile
from typing import Callable, Iterator
import zipfile
import zlib

from nascli.data import reasons
from nascli.errors import InputError
from nascli.errors import OutputError
from nascli.errors import UnsafeInputError

_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_DRIVE = re.compile(r"^[A-Za-z]:")
# Errors that mean the archive's bytes are bad, not that our disk is.
_CORRUPT_ERRORS = (tarfile.ReadError, tarfile.CompressionError, EOFError,
                   zlib.error, lzma.LZMAError, zipfile.BadZipFile,
                   NotImplementedError)


def _show(text: str) -> str:
  """Quotes text with control characters so an error stays one line."""
  return text if text.isprintable() else ascii(text)


def _reason(err: BaseException) -> str:
  """A short one-line reason for err, without object reprs."""
  return reasons.reason(err)


def _corrupt(archive: Path, err: BaseException) -> InputError:
  reason = _reason(err)
  if err.__cause__ is not None:  # tarfile wraps the decompressor's error.
    reason = f"{reason} ({_reason(err.__cause__)})"
  return InputError(
      f"truncated or corrupt archive {_show(str(archive))}: {reason}")


def _is_corrupt_error(err: BaseException) -> bool:
  """True if err comes from bad archive bytes rather than the filesystem.

  Decompressors (bz2, gzip) raise OSError without an errno on bad data; real
  filesystem errors carry one.
  """
  if isinstance(err, _CORRUPT_ERRORS):
    return True
  return isinstance(err, OSError) and err.errno is None


def _unsafe_path(path: str) -> str | None:
  """Says why a member name or link target could leave the destination."""
  if not path:
    return "empty path"
  if "\x00" in path:
    return "NUL byte in path"
  if path.startswith(("/", "\\")) or _DRIVE.match(path):
    return "absolute path"
  if ".." in re.split(r"[/\\]", path):
    return "'..' component"
  return None


def _refuse(archive: Path, member: str, why: str) -> UnsafeInputError:
  return UnsafeInputError(
      f"refusing archive {_show(str(archive))}: member {_show(member)}: {why}")


def _check_tar_member(archive: Path, info: tarfile.TarInfo) -> None:
  """Raises UnsafeInputError unless info is safe to extract."""
  why = _unsafe_path(info.name)
  if why:
    raise _refuse(archive, info.name, why)
  if info.ischr() or info.isblk() or info.isfifo():
    raise _refuse(archive, info.name, "device or fifo member")
  if info.issym() or info.islnk():
    # Lexical checks cannot see through earlier symlinks ("a -> ." then
    # "b -> a/.."), so link targets may not contain '..' at all; with only
    # downward relative targets no chain of links can leave the destination.
    why = _unsafe_path(info.linkname)
    if why:
      kind = "symlink" if info.issym() else "hard link"
      raise _refuse(archive, info.name,
                    f"{kind} to {_show(info.linkname)} leaves the destination "
                    f"({why})")


def _check_zip_member(archive: Path, zf: zipfile.ZipFile,
                      info: zipfile.ZipInfo) -> None:
  """Raises UnsafeInputError unless info is safe to extract."""
  why = _unsafe_path(info.filename)
  if why:
    raise _refuse(archive, info.filename, why)
  mode = info.external_attr >> 16
  if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or (
      stat.S_ISSOCK(mode)):
    raise _refuse(archive, info.filename, "device or fifo member")
  if stat.S_ISLNK(mode):
    # zipfile writes a link as a plain file holding the target, but refuse
    # escaping targets anyway so tar and zip follow the same rules.
    target = zf.read(info)[:4096].decode("utf-8", "replace")
    why = _unsafe_path(target)
    if why:
      raise _refuse(archive, info.filename,
                    f"symlink to {_show(target)} leaves the destination "
                    f"({why})")


def _require_file(archive: Path) -> None:
  if not archive.exists():
    raise InputError(f"archive not found: {_show(str(archive))}")
  if not archive.is_file():
    raise InputError(f"archive is not a file: {_show(str(archive))}")


def _unreadable(archive: Path, err: OSError) -> InputError:
  return InputError(f"cannot read archive {_show(str(archive))}: "
                    f"{_reason(err)}")


def _sniff(archive: Path) -> str:
  """Names the archive's format from its first bytes: zip, gz, bz2, xz or tar.

  Choosing the tar mode ourselves, rather than tarfile's "r:*", keeps the
  decompressor's own error (truncated, bad CRC) instead of a generic one.
  """
  try:
    with open(archive, "rb") as f:
      head = f.read(6)
  except OSError as err:
    raise _unreadable(archive, err) from None
  if head.startswith(_ZIP_MAGICS):
    return "zip"
  if head.startswith(b"\x1f\x8b"):
    return "gz"
  if head.startswith(b"BZh"):
    return "bz2"
  if head.startswith(b"\xfd7zXZ\x00"):
    return "xz"
  return "tar"


def _open_tar(archive: Path) -> tuple[tarfile.TarFile, list[tarfile.TarInfo]]:
  """Opens a tar, reads every header and checks every member.

  Python's tarfile treats an archive cut at a member boundary as complete, so
  this also requires the end-of-archive zero block after the last member.
  """
  tf = None
  try:
    kind = _sniff(archive)
    try:
      tf = tarfile.open(archive, "r:" if kind == "tar" else f"r:{kind}")
    except tarfile.ReadError as err:
      if kind != "tar":
        raise
      raise InputError(
          f"truncated or corrupt archive {_show(str(archive))}: not a tar, "
          f"tar.gz, tar.bz2, tar.xz or zip archive ({_reason(err)})") from None
    members = tf.getmembers()
    tf.fileobj.seek(tf.offset)
    if tf.fileobj.read(tarfile.BLOCKSIZE) != bytes(tarfile.BLOCKSIZE):
      after = f" after member {_show(members[-1].name)}" if members else ""
      raise InputError(
          f"truncated or corrupt archive {_show(str(archive))}: no valid "
          f"header or end-of-archive marker{after}")
    # Decompress to the end of the stream: gzip and xz check their CRC only
    # there, and tar reading stops at the end-of-archive marker before it.
    while tf.fileobj.read(1 << 20):
      pass
    for info in members:
      _check_tar_member(archive, info)
    return tf, members
  except BaseException as err:
    if tf is not None:
      tf.close()
    if isinstance(err, Exception) and _is_corrupt_error(err):
      raise _corrupt(archive, err) from None
    if isinstance(err, OSError):
      raise _unreadable(archive, err) from None
    raise


def _open_zip(archive: Path) -> zipfile.ZipFile:
  """Opens a zip and checks every member."""
  zf = None
  try:
    zf = zipfile.ZipFile(archive)
    for info in zf.infolist():
      _check_zip_member(archive, zf, info)
    return zf
  except BaseException as err:
    if zf is not None:
      zf.close()
    if isinstance(err, (InputError, KeyboardInterrupt, SystemExit)):
      raise
    if isinstance(err, OSError) and err.errno is not None:
      raise _unreadable(archive, err) from None
    # zipfile reports bad data as BadZipFile, but also as ValueError,
    # RuntimeError (encrypted) or NotImplementedError (unknown compression).
    if isinstance(err, Exception):
      raise _corrupt(archive, err) from None
    raise


def _prepare_dest(dest: Path) -> Path:
  """Checks dest is absent or an empty folder; makes a hidden sibling for it.

  Returns:
    the new, empty staging folder next to dest.
  """
  try:
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
      raise OutputError(
          f"extraction target is not a folder: {_show(str(dest))}")
    if dest.is_dir() and any(dest.iterdir()):
      raise OutputError(
          f"extraction target already contains files: {_show(str(dest))}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    # mkdir (not mkdtemp) so the folder gets the usual umask permissions.
    tmp = dest.parent / f".{dest.name}.partial-{secrets.token_hex(6)}"
    tmp.mkdir()
    return tmp
  except OSError as err:
    raise OutputError(f"cannot extract into {_show(str(dest))}: "
                      f"{_reason(err)}") from None


def safe_extract(archive: str | Path, dest: str | Path) -> Path:
  """Extracts a tar (plain, gz, bz2, xz) or zip archive into dest.

  Every member is checked before anything is written, and dest appears only
  once extraction is complete. Symlinks inside a zip are written as plain
  files holding the link target, as zipfile does.

  Args:
    archive: the archive file; its format is detected from its content.
    dest: the folder to create; it may exist only if empty.

  Returns:
    dest as a Path.

  Raises:
    InputError: the archive is missing, truncated or corrupt.
    UnsafeInputError: a member could escape dest or is a device or fifo.
    OutputError: dest is not usable.
  """
  archive, dest = Path(archive), Path(dest)
  _require_file(archive)
  # Check all members before creating anything.
  is_zip = _sniff(archive) == "zip"
  if is_zip:
    handle, members = _open_zip(archive), None
  else:
    handle, members = _open_tar(archive)
  with handle:
    tmp = _prepare_dest(dest)
    try:
      try:
        if is_zip:
          handle.extractall(tmp)
        else:
          handle.extractall(tmp, members=members, filter="data")
      except tarfile.FilterError as err:
        # Our checks should already have refused this member.
        name = err.tarinfo.name if err.tarinfo is not None else "?"
        raise _refuse(archive, name, _reason(err)) from None
      except Exception as err:  # pylint: disable=broad-except
        if isinstance(err, OSError) and err.errno is not None:
          raise OutputError(f"could not extract {_show(str(archive))} into "
                            f"{_show(str(tmp))}: {_reason(err)}") from None
        if _is_corrupt_error(err) or is_zip:
          raise _corrupt(archive, err) from None
        raise
      try:
        if dest.is_dir():
          dest.rmdir()  # Empty (checked above); rename cannot replace it.
        os.rename(tmp, dest)
      except OSError as err:
        raise OutputError(f"could not move extracted {_show(str(archive))} to "
                          f"{_show(str(dest))}: {_reason(err)}") from None
    except BaseException:
      shutil.rmtree(tmp, ignore_errors=True)
      raise
  return dest


def iter_tar_members(
    archive: str | Path,
    predicate: Callable[[str], bool]) -> Iterator[tuple[str, bytes]]:
  """Yields (name, bytes) of regular files in a tar whose name passes predicate.

  Reads in memory, in archive order. On the first next() the whole archive
  is checked (member names, links, completeness, compression CRC) before
  anything is yielded, so a bad archive fails before its caller has consumed
  part of it. Links are not followed or yielded.

  Args:
    archive: a tar file, plain or gz/bz2/xz compressed.
    predicate: called with each regular file's member name.

  Yields:
    (member name, member contents).

  Raises:
    InputError: the archive is missing, truncated or corrupt.
    UnsafeInputError: a member name or link could escape an extraction folder.
  """
  archive = Path(archive)
  _require_file(archive)
  tf, members = _open_tar(archive)
  with tf:
    for info in members:
      if not info.isreg() or not predicate(info.name):
        continue
      try:
        f = tf.extractfile(info)
        data = f.read() if f is not None else b""
      except Exception as err:  # pylint: disable=broad-except
        if _is_corrupt_error(err):
          raise _corrupt(archive, err) from None
        raise
      if len(data) != info.size:
        raise InputError(
            f"truncated or corrupt archive {_show(str(archive))}: member "
            f"{_show(info.name)} has {len(data)} of {info.size} bytes")
      yield info.name, data
