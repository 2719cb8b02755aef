"""nascli.storage on a real GCS emulator (fake-gcs-server) and on local folders, with one test
body for both where the behaviour must be the same."""

import os
from pathlib import Path

import pytest

from nascli import storage
from nascli.errors import (InputError, StorageAccessError, StorageExistsError,
                           StorageNotFoundError)

ALL_BYTES = bytes(range(256)) * 17


@pytest.fixture(params=["local", "gcs"])
def base(request, tmp_path):
  """A fresh empty folder: a local path or a gs:// prefix on the emulator."""
  if request.param == "local":
    return str(tmp_path / "base")
  return request.getfixturevalue("gcs_prefix")


def test_bytes_written_are_bytes_read(base):
  path = storage.join(base, "sub", "data.bin")
  storage.write_bytes(path, ALL_BYTES)
  assert storage.read_bytes(path) == ALL_BYTES
  storage.write_bytes(path, b"second")  # replaces
  assert storage.read_bytes(path) == b"second"
  storage.write_text(storage.join(base, "t.txt"), "héllo\n")
  assert storage.read_text(storage.join(base, "t.txt")) == "héllo\n"
  assert storage.exists(path) and storage.is_file(path)
  folder = storage.join(base, "sub")
  assert storage.exists(folder) and not storage.is_file(folder)
  assert not storage.exists(storage.join(base, "nothing"))


def test_large_object_goes_up_whole(gcs_prefix):
  """Above 8 MiB google-cloud-storage switches to a resumable upload: still one whole object."""
  data = os.urandom(9 * 1024 * 1024 + 5)
  storage.write_bytes(storage.join(gcs_prefix, "big.bin"), data)
  assert storage.read_bytes(storage.join(gcs_prefix, "big.bin")) == data


def test_list_names(base):
  for name in ("b.txt", "a/1.txt", "a/2/x.txt", "c"):
    storage.write_bytes(storage.join(base, name), name.encode())
  assert storage.list_names(base) == ["a/1.txt", "a/2/x.txt", "b.txt", "c"]
  assert storage.list_names(base, recursive=False) == ["a/", "b.txt", "c"]
  assert storage.list_names(storage.join(base, "a")) == ["1.txt", "2/x.txt"]
  # A prefix is a folder, not a string prefix: "a" does not list "a-other".
  storage.write_bytes(storage.join(base, "a-other"), b"")
  assert storage.list_names(storage.join(base, "a")) == ["1.txt", "2/x.txt"]
  assert storage.list_names(storage.join(base, "missing")) == []


def test_create_only_twice_is_an_error(base):
  path = storage.join(base, "entry-0001.json")
  storage.create_text(path, "first")
  with pytest.raises(StorageExistsError) as e:
    storage.create_text(path, "second")
  assert path in str(e.value) and "\n" not in str(e.value)
  assert storage.read_text(path) == "first"
  assert storage.list_names(base) == ["entry-0001.json"]  # no temporaries left behind


def test_missing_object_is_one_line_error(base):
  path = storage.join(base, "absent.json")
  with pytest.raises(StorageNotFoundError) as e:
    storage.read_bytes(path)
  assert path in str(e.value) and "\n" not in str(e.value)
  with pytest.raises(StorageNotFoundError):
    storage.delete(path)
  storage.delete(path, missing_ok=True)


def test_missing_bucket_is_named(gcs_emulator):
  with pytest.raises(StorageNotFoundError, match="bucket no-such-bucket does not exist"):
    storage.read_bytes("gs://no-such-bucket/x.json")
  with pytest.raises(StorageNotFoundError, match="bucket no-such-bucket does not exist"):
    storage.list_names("gs://no-such-bucket/data")


@pytest.mark.parametrize("url", ["gs://", "gs:/bucket/x", "gs://B/x", "gs://ab/x",
                                 "gs://bucket//x", "gs://bucket/a/../x", "gs://-bucket/x"])
def test_bad_url_is_input_error_naming_it(url):
  with pytest.raises(InputError) as e:
    storage.read_bytes(url)
  assert url in str(e.value) and "\n" not in str(e.value)


def test_join_and_parse():
  assert storage.join("gs://b/p/", "x", "/y/") == "gs://b/p/x/y"
  assert storage.join("gs://bkt", "x") == "gs://bkt/x"
  assert storage.parse_gcs("gs://bkt/a/b") == ("bkt", "a/b")
  assert storage.parse_gcs("gs://bkt") == ("bkt", "")
  assert storage.is_gcs("gs://bkt") and not storage.is_gcs("/tmp/gs")
  # Path("gs://b/x") collapses to gs:/b/x: an error, never a local folder named "gs:".
  with pytest.raises(InputError, match="gs:/bkt/x"):
    storage.write_bytes(Path("gs://bkt/x"), b"")


def test_delete_and_remove_tree(base):
  for name in ("x/1", "x/2/3", "y"):
    storage.write_bytes(storage.join(base, name), b"1")
  storage.delete(storage.join(base, "y"))
  assert storage.list_names(base) == ["x/1", "x/2/3"]
  assert storage.remove_tree(storage.join(base, "x")) == 2
  assert storage.list_names(base) == []


def _fill(folder):
  files = {"train-00000-of-00002.tfrecord": os.urandom(3000),
           "train-00001-of-00002.tfrecord": os.urandom(3001),
           "nested/labels.txt": b"0:zero\n1:one\n", "dataset_info.json": b'{"done": true}'}
  for name, data in files.items():
    os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
      f.write(data)
  return files


def test_upload_dir_download_round_trip(base, tmp_path):
  files = _fill(tmp_path / "src")
  uploaded = storage.upload_dir(tmp_path / "src", base, marker="dataset_info.json")
  assert uploaded[-1] == "dataset_info.json" and sorted(uploaded) == sorted(files)
  assert storage.list_names(base) == sorted(files)
  names = storage.download_dir(base, tmp_path / "back")
  assert names == sorted(files)
  for name, data in files.items():
    assert (tmp_path / "back" / name).read_bytes() == data
  assert storage.list_names(tmp_path / "back") == sorted(files)  # no temporaries left


def test_marker_object_is_written_last(gcs_prefix, tmp_path):
  _fill(tmp_path / "src")
  storage.upload_dir(tmp_path / "src", gcs_prefix, marker="dataset_info.json")
  g = storage.parse_gcs(gcs_prefix)
  blobs = {b.name.rsplit("/", 1)[-1]: b for b in storage.client().list_blobs(
      g.bucket, prefix=g.name + "/")}
  marker = blobs.pop("dataset_info.json")
  assert all(marker.time_created >= b.time_created for b in blobs.values())


def test_download_of_empty_prefix_is_error(gcs_prefix, tmp_path):
  with pytest.raises(StorageNotFoundError, match="no files"):
    storage.download_dir(gcs_prefix, tmp_path / "x")


def test_stage_keeps_a_synced_local_copy(gcs_prefix, tmp_path):
  files = _fill(tmp_path / "src")
  storage.upload_dir(tmp_path / "src", gcs_prefix)
  cache = tmp_path / "cache"
  local = storage.stage(gcs_prefix, cache)
  assert local.startswith(str(cache))
  for name, data in files.items():
    assert open(os.path.join(local, name), "rb").read() == data
  shard = os.path.join(local, "train-00000-of-00002.tfrecord")
  mtime = os.stat(shard).st_mtime_ns
  assert storage.stage(gcs_prefix, cache) == local
  assert os.stat(shard).st_mtime_ns == mtime  # unchanged objects are not fetched again
  storage.write_bytes(storage.join(gcs_prefix, "nested/labels.txt"), b"changed")
  storage.delete(storage.join(gcs_prefix, "train-00001-of-00002.tfrecord"))
  storage.stage(gcs_prefix, cache)
  assert open(os.path.join(local, "nested/labels.txt"), "rb").read() == b"changed"
  assert not os.path.exists(os.path.join(local, "train-00001-of-00002.tfrecord"))
  one = storage.stage(storage.join(gcs_prefix, "dataset_info.json"), cache)
  assert open(one, "rb").read() == files["dataset_info.json"]
  assert storage.stage(str(tmp_path / "src")) == str(tmp_path / "src")  # local: as it is


def test_stage_of_missing_prefix_is_error(gcs_prefix, tmp_path):
  with pytest.raises(StorageNotFoundError) as e:
    storage.stage(gcs_prefix, tmp_path / "cache")
  assert gcs_prefix in str(e.value)


def test_no_credentials_is_one_line_error(monkeypatch, tmp_path):
  """Without the emulator and without credentials (no metadata-server probe: the key file named
  by GOOGLE_APPLICATION_CREDENTIALS is checked first and is missing)."""
  monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
  monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-key.json"))
  monkeypatch.setenv("NO_GCE_CHECK", "True")
  with pytest.raises(StorageAccessError) as e:
    storage.read_bytes("gs://some-bucket/x.json")
  assert "gs://some-bucket/x.json: no Google credentials" in str(e.value)
  assert "\n" not in str(e.value)


def test_local_writes_leave_no_temporaries(tmp_path):
  path = tmp_path / "d" / "f.json"
  for i in range(3):
    storage.write_text(path, str(i))
  storage.create_text(tmp_path / "d" / "g.json", "x")
  assert sorted(os.listdir(tmp_path / "d")) == ["f.json", "g.json"]
  assert path.read_text() == "2"
