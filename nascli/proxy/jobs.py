"""The search jobs the proxy-task commands run and read: architectures as DNAs for the internal
`fixed` algorithm, and a finished job's rows and settings from its journal."""

from __future__ import annotations

from typing import Any, Sequence

from nascli.errors import NascliError


def architecture_dnas(space_name: str, space_module: str | None,
                      nas_params: Sequence[Any]) -> list[list[int | float]]:
  """The DNA numbers of each architecture given as Vertex nas_params."""
  # pylint: disable=g-import-not-at-top
  from tf_vision.search_spaces import nas_params as nas_params_lib
  from tf_vision.search_spaces import registry
  space = registry.resolve_search_space(space_name, space_module).build()
  return [list(nas_params_lib.from_nas_params(space, p).to_numbers()) for p in nas_params]


def first_random_dna(space_name: str, space_module: str | None,
                     seed: int) -> list[int | float]:
  """The first architecture random search proposes with `seed` (repeatable, in the space)."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import controller
  from tf_vision.search_spaces import registry
  space = registry.resolve_search_space(space_name, space_module).build()
  return list(controller.Controller(space, "random", seed).propose_new(set())[0])


def _events(job_dir: str, flag: str) -> list[dict]:
  from nascli.search import journal as journal_lib  # pylint: disable=g-import-not-at-top
  events = journal_lib.journal_for(job_dir).events()
  if not events:
    raise NascliError(f"{flag} {job_dir}: no search journal there (a search or proxy-task"
                      " job dir)")
  return events


def job_rows(job_dir: str, flag: str) -> tuple[list[dict], Any]:
  """(trial rows, journal state) of a nascli job dir; one line naming `flag` if it is none."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import journal as journal_lib
  from nascli.search import results
  state = journal_lib.replay(_events(job_dir, flag))
  return results.trial_rows(job_dir, state), state


def job_settings(job_dir: str, flag: str) -> dict:
  """The settings a job's journal began with (SearchArgs.settings())."""
  return dict(_events(job_dir, flag)[0].get("settings") or {})
