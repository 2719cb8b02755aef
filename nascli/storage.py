"""Where bytes live: one set of functions for local paths and `gs://bucket/prefix` URLs alike.

Writes are atomic on both: a local file is written under a hidden temporary name, fsynced and
renamed; a gs:// object is sent in one complete upload (GCS makes an object visible only when its
upload is finalized), so no half-written file or object ever sits under its final name.

The client comes from the standard Google environment (application-default credentials). With
`STORAGE_EMULATOR_HOST` set it talks to that emulator with anonymous credentials. Errors from
google-cloud-storage or the file system become nascli.errors.Storage* errors: one line naming the
path.
"""

import contextlib
import errno
import fcntl
import glob as _glob
import json
import os
import re
import secrets
import shutil
import sys
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

from nascli.errors import (InputError, StorageAccessError, StorageError, StorageExistsError,
                           StorageNotFoundError)

SCHEME = "gs://"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
EMULATOR_PROJECT = "nascli-emulator"
STAGE_MANIFEST = ".nascli-stage.json"

PathLike = str | os.PathLike

# Bucket names: lowercase letters, digits, '-', '_', '.', starting and ending with a letter or
# digit; 3-63 characters (up to 222 when dotted, each dotted part at most 63).
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9._-]*[a-z0-9]")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class GcsPath(NamedTuple):
  bucket: str
  name: str  # object name or prefix inside the bucket; "" for the bucket's root

  @property
  def url(self) -> str:
    return f"{SCHEME}{self.bucket}/{self.name}" if self.name else f"{SCHEME}{self.bucket}"


# ----- paths


def is_gcs(path: PathLike) -> bool:
  """True for `gs:` URLs, including malformed ones (`gs:/b`, as Path() collapses `gs://b`), so
  that they reach parse_gcs and its error instead of becoming a local folder named `gs:`."""
  return isinstance(path, (str, os.PathLike)) and os.fspath(path).startswith("gs:")


def parse_gcs(url: PathLike) -> GcsPath:
  """Splits `gs://bucket/prefix`; a malformed URL is an InputError naming it."""
  url = os.fspath(url)
  def bad(why: str) -> InputError:
    return InputError(f"bad gs:// URL {url!r}: {why}")

  if not url.startswith(SCHEME):
    raise bad("expected gs://BUCKET/PATH")
  rest = url[len(SCHEME):]
  bucket, _, name = rest.partition("/")
  if not bucket:
    raise bad("no bucket name")
  if (not _BUCKET_RE.fullmatch(bucket) or len(bucket) < 3 or ".." in bucket
      or (len(bucket) > 63 and ("." not in bucket or len(bucket) > 222))
      or any(len(part) > 63 for part in bucket.split("."))):
    raise bad(f"{bucket!r} is not a valid bucket name (3-63 lowercase letters, digits, '-', '_',"
              " '.')")
  if _CONTROL_RE.search(name):
    raise bad("control character in the object name")
  parts = name.rstrip("/").split("/") if name.rstrip("/") else []
  if any(p == "" for p in parts):
    raise bad("empty path segment ('//')")
  if any(p in (".", "..") for p in parts):
    raise bad("'.' or '..' path segment")
  if len(name.encode("utf-8")) > 1024:
    raise bad("object name longer than 1024 bytes")
  return GcsPath(bucket, name)


def join(base: PathLike, *parts: str) -> str:
  """`base/part/...` for a local path or a gs:// URL (one '/' between parts)."""
  if is_gcs(base):
    out = str(base).rstrip("/")
    for part in parts:
      part = str(part).strip("/")
      if part:
        out = f"{out}/{part}"
    return out
  return os.path.join(os.fspath(base), *map(str, parts))


def _prefix(g: GcsPath) -> str:
  """The object-name prefix of everything "inside" `g`, as a folder."""
  return g.name if not g.name or g.name.endswith("/") else g.name + "/"


# ----- client and error mapping


_clients: dict[tuple, object] = {}


def _client():
  """The cached client; google-auth's errors propagate (callers map them with the path)."""
  emulator = os.environ.get(EMULATOR_ENV)
  key = (os.getpid(), emulator)
  if key in _clients:
    return _clients[key]
  from google.cloud import storage as gcs  # pylint: disable=g-import-not-at-top
  project = os.environ.get("GOOGLE_CLOUD_PROJECT")
  if emulator:
    from google.auth.credentials import AnonymousCredentials  # pylint: disable=g-import-not-at-top
    c = gcs.Client(project=project or EMULATOR_PROJECT, credentials=AnonymousCredentials())
  else:
    try:
      c = gcs.Client(project=project) if project else gcs.Client()
    except OSError:  # credentials found, no project in the environment
      c = gcs.Client(project=None)
  _clients[key] = c
  return c


def client():
  """A google.cloud.storage Client for this process (one per pid: clients must not cross fork).

  With STORAGE_EMULATOR_HOST set: anonymous credentials and project GOOGLE_CLOUD_PROJECT (or
  "nascli-emulator"). Otherwise application-default credentials; the project is only needed to
  create buckets, so a missing one is not an error. No credentials: StorageAccessError.
  """
  from google.auth import exceptions as auth_exceptions  # pylint: disable=g-import-not-at-top
  try:
    return _client()
  except auth_exceptions.DefaultCredentialsError:
    raise StorageAccessError(
        "no Google credentials for gs://: run `gcloud auth application-default login`, set"
        " GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or set"
        f" {EMULATOR_ENV} to use an emulator") from None


def _blob(url: str):
  g = parse_gcs(url)
  if not g.name or g.name.endswith("/"):
    raise InputError(f"bad gs:// URL {url!r}: names a folder, not an object")
  with _gcs_errors(url, "connect"):
    return _client().bucket(g.bucket).blob(g.name)


def _first_line(e: BaseException) -> str:
  text = getattr(e, "message", None) or str(e)
  return " ".join(str(text).split())[:200]


def _missing(url: str) -> StorageNotFoundError:
  """Not found: says whether the bucket itself is missing (one extra request, on errors only)."""
  g = parse_gcs(url)
  try:
    bucket_exists = _client().bucket(g.bucket).exists()
  except Exception:  # pylint: disable=broad-except
    bucket_exists = True
  if not bucket_exists:
    return StorageNotFoundError(f"{url}: bucket {g.bucket} does not exist")
  return StorageNotFoundError(f"{url}: no such object")


@contextlib.contextmanager
def _gcs_errors(url: str, action: str) -> Iterator[None]:
  """Maps google-cloud-storage and google-auth exceptions to one-line nascli errors."""
  # pylint: disable=g-import-not-at-top
  import requests
  from google.api_core import exceptions as api
  from google.auth import exceptions as auth_exceptions
  try:
    yield
  except api.NotFound:
    raise _missing(url) from None
  except api.PreconditionFailed:
    raise StorageExistsError(f"{url}: already exists (not overwritten)") from None
  except (api.Forbidden, api.Unauthorized) as e:
    raise StorageAccessError(f"{url}: permission denied to {action} ({_first_line(e)})") from None
  except auth_exceptions.DefaultCredentialsError:
    raise StorageAccessError(
        f"{url}: no Google credentials: run `gcloud auth application-default login`, set"
        f" GOOGLE_APPLICATION_CREDENTIALS, or set {EMULATOR_ENV} to use an emulator") from None
  except auth_exceptions.GoogleAuthError as e:
    raise StorageAccessError(f"{url}: credentials rejected ({_first_line(e)})") from None
  except (api.RetryError, requests.exceptions.ConnectionError, requests.exceptions.Timeout) as e:
    where = os.environ.get(EMULATOR_ENV) or "storage.googleapis.com"
    raise StorageError(f"{url}: cannot reach {where} to {action} ({_first_line(e)})") from None
  except api.GoogleAPICallError as e:
    raise StorageError(f"{url}: cannot {action} ({_first_line(e)})") from None


@contextlib.contextmanager
def _local_errors(path: PathLike, action: str) -> Iterator[None]:
  try:
    yield
  except FileNotFoundError:
    raise StorageNotFoundError(f"{os.fspath(path)}: no such file or folder") from None
  except FileExistsError:
    raise StorageExistsError(f"{os.fspath(path)}: already exists (not overwritten)") from None
  except PermissionError:
    raise StorageAccessError(f"{os.fspath(path)}: permission denied to {action}") from None
  except OSError as e:
    raise StorageError(f"{os.fspath(path)}: cannot {action} ({e.strerror or e})") from None


# ----- single files / objects


def read_bytes(path: PathLike) -> bytes:
  """The whole content of a file or object."""
  if is_gcs(path):
    blob = _blob(path)
    with _gcs_errors(path, "read"):
      return blob.download_as_bytes()
  with _local_errors(path, "read"), open(path, "rb") as f:
    return f.read()


def read_text(path: PathLike) -> str:
  data = read_bytes(path)
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise InputError(f"{os.fspath(path)}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _fsync_dir(path: str) -> None:
  try:
    fd = os.open(path, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def _write_temp(path: str, data: bytes) -> str:
  """Writes `data` to a fresh hidden temporary beside `path`, fsynced; returns its name."""
  folder = os.path.dirname(path) or "."
  os.makedirs(folder, exist_ok=True)
  tmp = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(4)}.tmp")
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
  except BaseException:
    with contextlib.suppress(OSError):
      os.unlink(tmp)
    raise
  return tmp


@contextlib.contextmanager
def _temp_beside(path: str, data: bytes) -> Iterator[str]:
  """A fsynced temporary copy of `data` next to `path`, for a rename or link to publish; it is
  gone afterwards whether that happened or failed."""
  tmp = _write_temp(path, data)
  try:
    yield tmp
  finally:
    with contextlib.suppress(OSError):
      os.unlink(tmp)


def write_bytes(path: PathLike, data: bytes, content_type: str = "application/octet-stream"
                ) -> None:
  """Replaces the file or object with `data`: readers see the old content or the new, whole."""
  if is_gcs(path):
    from google.cloud.storage.retry import DEFAULT_RETRY  # pylint: disable=g-import-not-at-top
    blob = _blob(path)
    with _gcs_errors(path, "write"):
      # Retrying is safe: every attempt uploads the same complete bytes.
      blob.upload_from_string(bytes(data), content_type=content_type, retry=DEFAULT_RETRY)
    return
  path = os.fspath(path)
  with _local_errors(path, "write"):
    with _temp_beside(path, bytes(data)) as tmp:
      os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")


def write_text(path: PathLike, text: str) -> None:
  write_bytes(path, text.encode("utf-8"), content_type="text/plain; charset=utf-8")


def create_bytes(path: PathLike, data: bytes) -> None:
  """Writes `data` only if nothing is there yet (StorageExistsError otherwise), atomically.

  gs://: an upload with ifGenerationMatch=0, which GCS refuses (412) when the object exists.
  Local: a fsynced temporary hard-linked to the final name (link(2) fails if the name exists),
  or O_EXCL where the file system has no hard links.
  """
  if is_gcs(path):
    blob = _blob(path)
    with _gcs_errors(path, "create"):
      blob.upload_from_string(bytes(data), content_type="application/octet-stream",
                              if_generation_match=0)
    return
  path = os.fspath(path)
  with _local_errors(path, "create"):
    with _temp_beside(path, bytes(data)) as tmp:
      try:
        os.link(tmp, path)
      except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV,
                           errno.EMLINK):
          raise
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
          f.write(bytes(data))
          f.flush()
          os.fsync(f.fileno())
    _fsync_dir(os.path.dirname(path) or ".")


def create_text(path: PathLike, text: str) -> None:
  create_bytes(path, text.encode("utf-8"))


def exists(path: PathLike) -> bool:
  """A file, object or folder is there (a gs:// folder: any object under `path/`)."""
  if not is_gcs(path):
    return os.path.exists(path)
  g = parse_gcs(path)
  with _gcs_errors(path, "look up"):
    c = _client()
    if g.name and not g.name.endswith("/") and c.bucket(g.bucket).blob(g.name).exists():
      return True
    return any(True for _ in c.list_blobs(g.bucket, prefix=_prefix(g), max_results=1))


def is_file(path: PathLike) -> bool:
  """A file or object (not a folder) is at `path`."""
  if not is_gcs(path):
    return os.path.isfile(path)
  g = parse_gcs(path)
  if not g.name or g.name.endswith("/"):
    return False
  with _gcs_errors(path, "look up"):
    return _client().bucket(g.bucket).blob(g.name).exists()


def delete(path: PathLike, missing_ok: bool = False) -> None:
  """Removes one file or object."""
  if is_gcs(path):
    blob = _blob(path)
    try:
      with _gcs_errors(path, "delete"):
        blob.delete()
    except StorageNotFoundError:
      if not missing_ok:
        raise
    return
  try:
    with _local_errors(path, "delete"):
      os.unlink(path)
  except StorageNotFoundError:
    if not missing_ok:
      raise


def remove_tree(path: PathLike) -> int:
  """Removes a folder (local) or every object under a prefix (gs://); returns the files removed."""
  if is_gcs(path):
    g = parse_gcs(path)
    if not g.name:
      raise InputError(f"refusing to remove every object of bucket {g.bucket} ({path})")
    names = list_names(path)
    for name in names:
      delete(join(path, name), missing_ok=True)
    return len(names)
  if not os.path.exists(path):
    return 0
  names = list_names(path)
  with _local_errors(path, "remove"):
    shutil.rmtree(path)
  return len(names)


def ensure_dir(path: PathLike) -> None:
  """Creates a local folder (and parents); nothing to do for gs:// where folders are prefixes."""
  if is_gcs(path):
    parse_gcs(path)
    return
  with _local_errors(path, "create folder"):
    os.makedirs(path, exist_ok=True)


# ----- folders / prefixes


def list_names(path: PathLike, recursive: bool = True) -> list[str]:
  """Names under a folder or prefix, relative to it, sorted, '/'-separated.

  Recursive: every file. Not recursive: the direct entries, sub-folders with a trailing '/'.
  A folder or prefix that does not exist is empty; a missing bucket is StorageNotFoundError.
  """
  if is_gcs(path):
    g = parse_gcs(path)
    prefix = _prefix(g)
    names = set()
    with _gcs_errors(path, "list"):
      blobs = _client().list_blobs(g.bucket, prefix=prefix, delimiter=None if recursive else "/")
      for page in blobs.pages:
        for blob in page:
          rel = blob.name[len(prefix):]
          if rel and not rel.endswith("/"):  # skip console-made folder placeholders
            names.add(rel)
        if not recursive:
          names.update(p[len(prefix):] for p in page.prefixes)
    return sorted(names)
  root = os.fspath(path)
  if not os.path.exists(root):
    return []
  with _local_errors(root, "list"):
    if not os.path.isdir(root):
      raise NotADirectoryError(errno.ENOTDIR, "not a folder", root)
    if not recursive:
      return sorted(e.name + "/" if e.is_dir() else e.name for e in os.scandir(root))
    out = []
    for folder, _, files in os.walk(root):
      rel = os.path.relpath(folder, root)
      for f in files:
        out.append(f if rel == "." else f"{rel.replace(os.sep, '/')}/{f}")
    return sorted(out)


def _glob_regex(pattern: str) -> re.Pattern:
  """A shell glob as a regex where '*' and '?' do not cross '/' (as glob.glob and tf.io.gfile)."""
  out, i = [], 0
  while i < len(pattern):
    c = pattern[i]
    if c == "*":
      out.append("[^/]*")
    elif c == "?":
      out.append("[^/]")
    elif c == "[" and pattern.find("]", i + 2) > 0:  # a class: [abc], [!abc], []a]
      end = pattern.find("]", i + 2)
      body = pattern[i + 1:end]
      body = "^" + body[1:] if body.startswith("!") else body
      out.append("[" + body.replace("\\", "\\\\") + "]")
      i = end
    else:
      out.append(re.escape(c))
    i += 1
  return re.compile("".join(out))


def glob(pattern: PathLike) -> list[str]:
  """Files matching a shell pattern (`*`, `?`, `[...]`), local or gs://, sorted."""
  if not is_gcs(pattern):
    return sorted(_glob.glob(os.fspath(pattern)))
  g = parse_gcs(pattern)
  first = min((g.name.find(c) for c in "*?[" if c in g.name), default=-1)
  if first < 0:
    return [os.fspath(pattern)] if is_file(pattern) else []
  base = g.name[:g.name.rfind("/", 0, first) + 1]
  regex = _glob_regex(g.name[len(base):])
  names = list_names(f"{SCHEME}{g.bucket}/{base}")
  return [f"{SCHEME}{g.bucket}/{base}{n}" for n in names if regex.fullmatch(n)]


def list_sizes(path: PathLike) -> dict[str, int]:
  """Like list_names (recursive), with each file's size in bytes: {relative name: size}."""
  if is_gcs(path):
    g = parse_gcs(path)
    prefix = _prefix(g)
    with _gcs_errors(path, "list"):
      return {b.name[len(prefix):]: int(b.size or 0)
              for b in _client().list_blobs(g.bucket, prefix=prefix)
              if b.name != prefix and not b.name.endswith("/")}
  with _local_errors(path, "list"):
    return {name: os.path.getsize(os.path.join(path, *name.split("/")))
            for name in list_names(path)}


def upload_file(local_path: PathLike, dest: PathLike) -> None:
  """Copies a local file to `dest` (gs:// object or local path), atomically."""
  if is_gcs(dest):
    from google.cloud.storage.retry import DEFAULT_RETRY  # pylint: disable=g-import-not-at-top
    blob = _blob(dest)
    with _local_errors(local_path, "read"), _gcs_errors(dest, "upload"):
      # Large files go up as one resumable upload: the object appears only when it is complete.
      blob.upload_from_filename(os.fspath(local_path), content_type="application/octet-stream",
                                retry=DEFAULT_RETRY)
    return
  with _local_errors(local_path, "read"), open(local_path, "rb") as f:
    data = f.read()
  write_bytes(dest, data)


def download_file(src: PathLike, local_path: PathLike) -> None:
  """Copies a file or object to a local path, atomically (temporary + rename)."""
  if not is_gcs(src):
    write_bytes(local_path, read_bytes(src))
    return
  blob = _blob(src)
  local_path = os.fspath(local_path)
  with _local_errors(local_path, "write"):
    tmp = _write_temp(local_path, b"")
  try:
    with _gcs_errors(src, "download"):
      blob.download_to_filename(tmp)
    with _local_errors(local_path, "write"):
      os.replace(tmp, local_path)
  finally:
    with contextlib.suppress(OSError):
      os.unlink(tmp)


def upload_dir(local_dir: PathLike, dest: PathLike, marker: str | None = None,
               names: Iterable[str] | None = None) -> list[str]:
  """Copies a local folder's files (or only `names`) under `dest`, one by one.

  `marker`, a name in the folder, is copied last: a reader that sees it sees everything else.
  Returns the names copied, in order.
  """
  names = sorted(set(names) if names is not None else list_names(local_dir))
  if marker is not None:
    if not os.path.isfile(os.path.join(local_dir, marker)):
      raise StorageNotFoundError(f"{os.path.join(local_dir, marker)}: marker file missing")
    names = [n for n in names if n != marker] + [marker]
  for name in names:
    upload_file(os.path.join(local_dir, name), join(dest, name))
  return names


def download_dir(src: PathLike, local_dir: PathLike) -> list[str]:
  """Copies every file under a gs:// prefix (or local folder) into `local_dir`; returns names."""
  names = list_names(src)
  if not names:
    raise StorageNotFoundError(f"{os.fspath(src)}: no files there")
  for name in names:
    download_file(join(src, name), os.path.join(local_dir, *name.split("/")))
  return names


def default_cache_root() -> Path:
  return Path(os.environ.get("NASCLI_CACHE_DIR", Path.home() / ".cache" / "nascli")) / "gcs"


def stage_with_member(folder: str, member: str | None, folder_flag: str,
                      member_flag: str) -> tuple[str, str | None]:
  """A gs:// folder staged locally (stage), and a gs:// path inside it (a checkpoint in a model
  dir) mapped into that copy; local folders and paths come back as they are."""
  if not is_gcs(folder):
    return folder, member
  remote = folder.rstrip("/")
  local = stage(remote)
  if member and is_gcs(member):
    if not member.startswith(remote + "/"):
      raise InputError(f"{member_flag} {member} is not inside {folder_flag} {remote}")
    member = os.path.join(local, member[len(remote) + 1:])
  return local, member


def stage(path: PathLike, cache_root: PathLike | None = None) -> str:
  """A local path with the content of `path`: local paths as they are; a gs:// object or prefix
  is downloaded into the cache (`$NASCLI_CACHE_DIR/gcs/BUCKET/NAME`) and kept in sync with it.

  Only objects whose generation changed since the last stage are downloaded again; local files no
  longer under the prefix are removed. A lock file serializes processes staging the same prefix.
  """
  if not is_gcs(path):
    return os.fspath(path)
  g = parse_gcs(path)
  root = Path(cache_root) if cache_root is not None else default_cache_root()
  target = root / g.bucket / Path(*g.name.rstrip("/").split("/")) if g.name else root / g.bucket
  if is_file(path):
    with _gcs_errors(path, "look up"):
      blob = _client().bucket(g.bucket).get_blob(g.name)
    folder = target.parent / f".{target.name}.nascli-object"
    with _stage_lock(folder):
      local = folder / target.name
      manifest = _read_manifest(folder)
      if manifest.get(target.name) != blob.generation or not local.exists():
        download_file(path, local)
        write_text(folder / STAGE_MANIFEST, json.dumps({target.name: blob.generation}))
    return str(local)
  prefix = _prefix(g)
  with _gcs_errors(path, "list"):
    blobs = {b.name[len(prefix):]: b.generation
             for b in _client().list_blobs(g.bucket, prefix=prefix)
             if b.name != prefix and not b.name.endswith("/")}
  if not blobs:
    raise _missing(path) if not exists(path) else StorageNotFoundError(f"{path}: no files there")
  with _stage_lock(target):
    manifest = _read_manifest(target)
    for name, generation in sorted(blobs.items()):
      local = target.joinpath(*name.split("/"))
      if manifest.get(name) != generation or not local.exists():
        download_file(join(path, name), local)
    for name in list_names(target):
      base = name.rsplit("/", 1)[-1]
      if name not in blobs and base not in (STAGE_MANIFEST, ".nascli-stage.lock"):
        os.unlink(target.joinpath(*name.split("/")))
    write_text(target / STAGE_MANIFEST, json.dumps(blobs, sort_keys=True))
  return str(target)


def _read_manifest(folder: Path) -> dict:
  try:
    return json.loads((folder / STAGE_MANIFEST).read_text(encoding="utf-8"))
  except (OSError, ValueError):
    return {}


@contextlib.contextmanager
def _stage_lock(folder: Path) -> Iterator[None]:
  with _local_errors(folder, "create folder"):
    folder.mkdir(parents=True, exist_ok=True)
  with open(folder / ".nascli-stage.lock", "a", encoding="utf-8") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)


# ----- gs:// data for TensorFlow's own readers

DATA_MODE_ENV = "NASCLI_GCS_DATA"


def tf_data_mode() -> str:
  """How TensorFlow's readers get gs:// data: "stream" (TF's own GCS filesystem reads the
  objects) or "stage" (nascli downloads them into the cache and TF reads the local copy).

  TF's filesystem has its endpoints compiled in (www.googleapis.com, storage.googleapis.com) and
  ignores STORAGE_EMULATOR_HOST, so with an emulator the default is "stage": streaming would read
  the real GCS, not the emulator. NASCLI_GCS_DATA=stream|stage overrides.
  """
  mode = os.environ.get(DATA_MODE_ENV) or ("stage" if os.environ.get(EMULATOR_ENV) else "stream")
  if mode not in ("stream", "stage"):
    raise InputError(f"{DATA_MODE_ENV}={mode!r}: expected stream or stage")
  return mode


_staged_notes: set[str] = set()


def for_tensorflow(patterns: str | None) -> str | None:
  """Comma-separated file patterns as TensorFlow should read them: gs:// parts unchanged when
  streaming, or pointing into the staged local copy of their folder (see tf_data_mode)."""
  if not patterns or tf_data_mode() == "stream":
    return patterns
  out = []
  for part in (p.strip() for p in patterns.split(",")):
    if not is_gcs(part):
      out.append(part)
      continue
    folder, _, base = part.rpartition("/")
    local = stage(folder)
    if folder not in _staged_notes:
      _staged_notes.add(folder)
      why = (f"{DATA_MODE_ENV}=stage" if os.environ.get(DATA_MODE_ENV) else
             f"TensorFlow's gs:// reader ignores {EMULATOR_ENV}")
      print(f"note: {why}: reading {folder} from its local copy {local}", file=sys.stderr)
    out.append(os.path.join(local, base))
  return ",".join(out)
