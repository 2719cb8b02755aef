"""The journal backend of a job dir, picked by its scheme: a local folder or a gs:// prefix."""

from __future__ import annotations

import os
from typing import Callable

from nascli import storage
from nascli.errors import InputError
from nascli.search.journal_file import Journal
from nascli.search.journal_gcs import GcsJournal

# Journal backends by the job dir's scheme ("file" for local paths).
_BACKENDS: dict[str, Callable[[str], Journal | GcsJournal]] = {
    'file': Journal.in_dir, 'gs': GcsJournal.in_dir}


def scheme(job_dir: str | os.PathLike[str]) -> str:
  """"gs" for gs:// URLs, "file" for local paths; other URLs are refused (one line)."""
  text = os.fspath(job_dir)
  if storage.is_gcs(text):
    return 'gs'
  if '://' in text:
    raise InputError(f'{text}: a search job dir is a local folder or a gs://BUCKET/PREFIX URL')
  return 'file'


def journal_for(job_dir: str | os.PathLike[str]) -> Journal | GcsJournal:
  """The journal of the search job in `job_dir`, local or gs://."""
  return _BACKENDS[scheme(job_dir)](os.fspath(job_dir))
