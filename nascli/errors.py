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
