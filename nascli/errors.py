"""Errors the user can act on: main() prints them as one `Error: ...` line and exits 1."""


class NascliError(Exception):
  """A failure caused by input, configuration or environment, not by a bug in nascli."""


class InputError(NascliError):
  """Bad input data: a corrupt image, a truncated archive, a malformed file."""


class UnsafeInputError(InputError):
  """Input that tries to escape its sandbox (archive path traversal, pickle code execution)."""


class OutputError(NascliError):
  """The output location cannot be used as asked (a file where a folder is needed, foreign data)."""


class DownloadError(NascliError):
  """A data set could not be fetched; the message says which file to fetch by hand and where."""


class StorageError(NascliError):
  """A read or write of a local path or gs:// object failed; the message names the path."""


class StorageNotFoundError(StorageError):
  """The file, object, prefix or bucket does not exist."""


class StorageExistsError(StorageError):
  """A create-only write found the file or object already there."""


class StorageAccessError(StorageError):
  """No credentials, or the credentials lack permission for the bucket or object."""
