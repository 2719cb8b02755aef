"""The kinds of job a report page is written for, registered by decorator (report/kinds.py
registers them; report/__init__.py picks the first that recognizes a job dir)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class PageKind:
  name: str
  recognizes: Callable[[str], bool]
  build: Callable[[str], Any]  # job_dir -> page.Page


KINDS: list[PageKind] = []


def page_kind(name: str, recognizes: Callable[[str], bool]):
  """Registers a builder `job_dir -> Page` for the job dirs `recognizes` accepts (first wins,
  in registration order: the more specific kinds register first)."""
  def register(build: Callable[[str], Any]) -> Callable[[str], Any]:
    if any(k.name == name for k in KINDS):
      raise KeyError(f'report page kind {name!r} is registered twice')
    KINDS.append(PageKind(name, recognizes, build))
    return build
  return register
