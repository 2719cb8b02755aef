"""FastNN's hyperparameters as command-line options, generated from the one table that also
parses hparams files, so an option and a file line can never disagree."""

import functools
import inspect
from typing import Annotated, Any, Callable, Optional

import typer

from nascli.commands.options import flag

# Keys that are options of the command itself (they choose data and directories).
OWN_KEYS = frozenset({"dataset_name", "dataset_dir", "train_files", "model_dir"})
PANEL = "FastNN hyperparameters (also accepted in --hparams_file as key=value)"


def with_fastnn_options(fn: Callable) -> Callable:
  """Adds one `--key` option per FastNN key; `fn` receives them as a dict in `fastnn`."""
  from tf_vision.configs import fastnn_keys as fastnn  # pylint: disable=g-import-not-at-top
  sig = inspect.signature(fn)
  params = [p for p in sig.parameters.values() if p.name != "fastnn"]
  keys = [k for k in fastnn.FASTNN_KEYS if k not in OWN_KEYS]
  for key in keys:
    spec = fastnn.FASTNN_KEYS[key]
    hint = f"{spec.type.__name__}, FastNN default {spec.default!r}"
    if spec.choices:
      hint += f"; one of {', '.join(repr(c) for c in spec.choices)}"
    # Values arrive as text and are typed by the same code that reads hparams files, so
    # `--use_fp16 False` works as FastNN users write it.
    annotation = Annotated[Optional[str], typer.Option(
        *flag(key), help=hint, rich_help_panel=PANEL, show_default=False)]
    params.append(inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=None,
                                    annotation=annotation))

  @functools.wraps(fn)
  def wrapper(**kwargs: Any):
    given = {k: kwargs.pop(k) for k in keys if kwargs.get(k) is not None}
    for k in keys:
      kwargs.pop(k, None)
    typed = {}
    for key, raw in given.items():
      try:
        typed[key] = fastnn.coerce_value(key, raw)
      except ValueError as e:
        raise typer.BadParameter(str(e), param_hint=f"--{key}") from None
    return fn(fastnn=typed, **kwargs)

  wrapper.__signature__ = sig.replace(parameters=params)
  wrapper.__annotations__ = {p.name: p.annotation for p in params}
  wrapper.__dict__.pop("__wrapped__", None)
  return wrapper
