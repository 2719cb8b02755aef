"""Errors the user can act on: main() prints them as one `Error: ...` line and exits 1."""


class NascliError(Exception):
  """A failure caused by input, configuration or environment, not by a bug in nascli."""


class InputError(NascliError):
  """Bad input data: a corrupt image, a truncated archive, a malformed file."""


class UnsafeInputError(InputError):
  """Input that tries to escape its sandbox (archive path traversal, pickle code execution)."""


class OutputError(NascliError):
  """The output location cannot be used as asked (a file where a folder is needed, foreign data)."""


class TrialsFailedError(NascliError):
  """A search stopped because its trials failed: more than --max_failed_nas_trial, or every one.

  Its own class so that a caller running a search as a part (search_proxy_task's candidates)
  can tell this outcome from every other error of the search (other settings, a lock, a
  damaged journal), which it must not mistake for failed trainings.
  """


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


class ConfigValueError(NascliError):
  """A config field holds a value the run would reject later, after writing to the model dir.

  It carries the field's dotted path so that each config on the way up can prefix its own
  field name (`under`), and the one-line message names the full path from the experiment.
  """

  def __init__(self, path: str, value: object, allowed: str):
    super().__init__(f"invalid config: {path} is {value!r}; allowed: {allowed}")
    self.path, self.value, self.allowed = path, value, allowed

  def under(self, prefix: str) -> "ConfigValueError":
    """The same error seen from the config holding this one as its field `prefix`."""
    return ConfigValueError(f"{prefix}.{self.path}", self.value, self.allowed)
