"""Moved to nascli.runtime; kept until training.py and search/trial.py import it from there."""

from nascli.runtime import finish, request  # noqa: F401  pylint: disable=unused-import
