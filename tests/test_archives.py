"""Tests for nascli.data.archives: safe extraction of untrusted archives."""

import io
from pathlib import Path
import tarfile
import zipfile

import pytest

from nascli.data import archives
from nascli.errors import InputError
from nascli.errors import OutputError
from nascli.errors import UnsafeInputError

FILES = {
    "top.txt": b"hello\n",
    "sub/data.bin": bytes(range(256)) * 40,
    "sub/deeper/empty": b"",
}


def _add_file(tf: tarfile.TarFile, name: str, data: bytes) -> None:
  info = tarfile.TarInfo(name)
  info.size = len(data)
  tf.addfile(info, io.BytesIO(data))


def _add_link(tf: tarfile.TarFile, name: str, target: str,
              kind: bytes = tarfile.SYMTYPE) -> None:
  info = tarfile.TarInfo(name)
  info.type = kind
  info.linkname = target
  tf.addfile(info)


def _make_tar(path: Path, files: dict[str, bytes], mode: str = "w:gz",
              extra=None) -> Path:
  with tarfile.open(path, mode) as tf:
    for name, data in files.items():
      _add_file(tf, name, data)
    if extra is not None:
      extra(tf)
  return path


def _tree(root: Path) -> dict[str, bytes]:
  return {p.relative_to(root).as_posix(): p.read_bytes()
          for p in root.rglob("*") if p.is_file()}


def _assert_nothing_extracted(tmp_path: Path, dest: Path) -> None:
  assert not dest.exists()
  leftovers = [p.name for p in tmp_path.iterdir() if ".partial-" in p.name]
  assert leftovers == []


@pytest.mark.parametrize("suffix,mode", [(".tar", "w"), (".tar.gz", "w:gz"),
                                         (".tgz", "w:gz"),
                                         (".tar.bz2", "w:bz2"),
                                         (".tar.xz", "w:xz")])
def test_tar_round_trip(tmp_path, suffix, mode):
  archive = _make_tar(tmp_path / f"a{suffix}", FILES, mode)
  dest = tmp_path / "out"
  assert archives.safe_extract(archive, dest) == dest
  assert _tree(dest) == FILES
  assert [p.name for p in tmp_path.iterdir() if ".partial-" in p.name] == []


def test_zip_round_trip_into_existing_empty_dest(tmp_path):
  archive = tmp_path / "a.zip"
  with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
    for name, data in FILES.items():
      zf.writestr(name, data)
  dest = tmp_path / "out"
  dest.mkdir()
  archives.safe_extract(str(archive), str(dest))
  assert _tree(dest) == FILES


def test_internal_symlink_is_allowed(tmp_path):
  archive = _make_tar(tmp_path / "a.tar.gz", {"sub/real.txt": b"r"},
                      extra=lambda tf: _add_link(tf, "sub/alias.txt",
                                                 "real.txt"))
  dest = archives.safe_extract(archive, tmp_path / "out")
  assert (dest / "sub/alias.txt").is_symlink()
  assert (dest / "sub/alias.txt").read_bytes() == b"r"


@pytest.mark.parametrize("evil_name,why", [
    ("../evil", "'..' component"),
    ("sub/../../evil", "'..' component"),
    ("/tmp/evil-absolute", "absolute path"),
])
def test_tar_bad_names_are_refused(tmp_path, evil_name, why):
  archive = _make_tar(tmp_path / "a.tar.gz", {"good.txt": b"g",
                                              evil_name: b"pwned"})
  dest = tmp_path / "out"
  with pytest.raises(UnsafeInputError) as exc:
    archives.safe_extract(archive, dest)
  msg = str(exc.value)
  assert evil_name in msg and str(archive) in msg and why in msg
  assert "\n" not in msg
  _assert_nothing_extracted(tmp_path, dest)
  assert not (tmp_path / "evil").exists()


def test_symlink_to_etc_passwd_is_refused(tmp_path):
  archive = _make_tar(
      tmp_path / "a.tar.gz", {"good.txt": b"g"},
      extra=lambda tf: _add_link(tf, "passwd", "/etc/passwd"))
  dest = tmp_path / "out"
  with pytest.raises(UnsafeInputError, match=r"member passwd: symlink to "
                     r"/etc/passwd leaves the destination"):
    archives.safe_extract(archive, dest)
  _assert_nothing_extracted(tmp_path, dest)


@pytest.mark.parametrize("target", ["../outside", "a/../.."])
def test_symlink_with_dotdot_target_is_refused(tmp_path, target):
  # "a -> ." then "b -> a/.." would resolve to dest's parent on disk.
  def extra(tf):
    _add_link(tf, "a", ".")
    _add_link(tf, "b", target)
  archive = _make_tar(tmp_path / "a.tar.gz", {}, extra=extra)
  with pytest.raises(UnsafeInputError, match="member b: symlink"):
    archives.safe_extract(archive, tmp_path / "out")


def test_hardlink_outside_is_refused(tmp_path):
  archive = _make_tar(
      tmp_path / "a.tar", {"x": b"x"}, "w",
      extra=lambda tf: _add_link(tf, "h", "/etc/passwd", tarfile.LNKTYPE))
  with pytest.raises(UnsafeInputError, match="member h: hard link"):
    archives.safe_extract(archive, tmp_path / "out")
  _assert_nothing_extracted(tmp_path, tmp_path / "out")


def test_fifo_is_refused(tmp_path):
  def extra(tf):
    info = tarfile.TarInfo("pipe")
    info.type = tarfile.FIFOTYPE
    tf.addfile(info)
  archive = _make_tar(tmp_path / "a.tar.gz", {}, extra=extra)
  with pytest.raises(UnsafeInputError, match="member pipe: device or fifo"):
    archives.safe_extract(archive, tmp_path / "out")


def test_zip_traversal_is_refused(tmp_path):
  archive = tmp_path / "a.zip"
  with zipfile.ZipFile(archive, "w") as zf:
    zf.writestr("ok.txt", b"ok")
    zf.writestr("../zip-evil", b"pwned")
  dest = tmp_path / "out"
  with pytest.raises(UnsafeInputError, match=r"member \.\./zip-evil"):
    archives.safe_extract(archive, dest)
  _assert_nothing_extracted(tmp_path, dest)
  assert not (tmp_path / "zip-evil").exists()


def test_member_name_with_newline_keeps_message_one_line(tmp_path):
  archive = _make_tar(tmp_path / "a.tar.gz", {"../x\ny": b""})
  with pytest.raises(UnsafeInputError) as exc:
    archives.safe_extract(archive, tmp_path / "out")
  assert "\n" not in str(exc.value)
  assert r"'../x\ny'" in str(exc.value)


def test_truncated_tar_gz(tmp_path):
  full = _make_tar(tmp_path / "full.tar.gz",
                   {"big.bin": bytes(range(256)) * 4000, "b": b"b"})
  cut = tmp_path / "cut.tar.gz"
  cut.write_bytes(full.read_bytes()[:full.stat().st_size // 2])
  dest = tmp_path / "out"
  with pytest.raises(InputError,
                     match=r"^truncated or corrupt archive .*cut\.tar\.gz: "):
    archives.safe_extract(cut, dest)
  _assert_nothing_extracted(tmp_path, dest)
  with pytest.raises(InputError, match=r"cut\.tar\.gz"):
    list(archives.iter_tar_members(cut, lambda name: True))


def test_plain_tar_cut_at_member_boundary(tmp_path):
  # tarfile itself accepts this as a complete one-member archive.
  full = _make_tar(tmp_path / "full.tar", {"a": b"a" * 512, "b": b"b"}, "w")
  cut = tmp_path / "cut.tar"
  cut.write_bytes(full.read_bytes()[:1024])
  with pytest.raises(InputError, match=r"cut\.tar: .*after member a"):
    archives.safe_extract(cut, tmp_path / "out")


def test_truncated_zip(tmp_path):
  archive = tmp_path / "a.zip"
  with zipfile.ZipFile(archive, "w") as zf:
    zf.writestr("a", b"a" * 1000)
  archive.write_bytes(archive.read_bytes()[:200])
  with pytest.raises(InputError,
                     match=r"truncated or corrupt archive .*a\.zip"):
    archives.safe_extract(archive, tmp_path / "out")


def test_not_an_archive(tmp_path):
  junk = tmp_path / "junk.tar.gz"
  junk.write_bytes(b"this is not an archive" * 50)
  with pytest.raises(InputError,
                     match=r"junk\.tar\.gz: not a tar, .* or zip archive"):
    archives.safe_extract(junk, tmp_path / "out")


def test_missing_archive(tmp_path):
  with pytest.raises(InputError, match=r"archive not found: .*nope\.tgz"):
    archives.safe_extract(tmp_path / "nope.tgz", tmp_path / "out")
  with pytest.raises(InputError, match=r"nope\.tgz"):
    next(archives.iter_tar_members(tmp_path / "nope.tgz", bool))


def test_dest_with_files_is_refused(tmp_path):
  archive = _make_tar(tmp_path / "a.tar.gz", FILES)
  dest = tmp_path / "out"
  dest.mkdir()
  (dest / "old").write_bytes(b"old")
  with pytest.raises(OutputError, match="already contains files"):
    archives.safe_extract(archive, dest)
  assert _tree(dest) == {"old": b"old"}


def test_iter_tar_members_yields_exact_bytes_in_order(tmp_path):
  archive = _make_tar(
      tmp_path / "a.tar.gz",
      {"cifar/data_batch_1": b"one", "cifar/readme.html": b"<html>",
       "cifar/data_batch_2": bytes(range(256)), "cifar/test_batch": b"t"},
      extra=lambda tf: _add_link(tf, "cifar/data_batch_link", "data_batch_1"))
  got = list(archives.iter_tar_members(archive,
                                       lambda name: "_batch" in name))
  assert got == [("cifar/data_batch_1", b"one"),
                 ("cifar/data_batch_2", bytes(range(256))),
                 ("cifar/test_batch", b"t")]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar.gz"]


def test_iter_tar_members_checks_whole_archive_first(tmp_path):
  archive = _make_tar(tmp_path / "a.tar.gz",
                      {"data_batch_1": b"one", "../evil": b"x"})
  members = archives.iter_tar_members(archive, lambda name: True)
  with pytest.raises(UnsafeInputError, match=r"member \.\./evil"):
    next(members)


def test_flipped_byte_in_tar_gz_is_caught(tmp_path):
  # Tar reading stops at the end-of-archive marker, before gzip's CRC.
  full = _make_tar(tmp_path / "full.tar.gz", {"big.bin": bytes(range(256)) *
                                               4000})
  data = bytearray(full.read_bytes())
  data[len(data) // 2] ^= 0xFF
  bad = tmp_path / "bad.tar.gz"
  bad.write_bytes(bytes(data))
  with pytest.raises(InputError, match=r"bad\.tar\.gz: "):
    archives.safe_extract(bad, tmp_path / "out")
  _assert_nothing_extracted(tmp_path, tmp_path / "out")
