"""The flags of the commands that read a model dir `nascli train` wrote (`eval`, `export`),
declared once as `Annotated` aliases (search_flags.py's way; each command keeps its default:
`export` requires --model_dir)."""

from typing import Annotated, Optional

import typer

from nascli.commands.options import flag

ModelDir = Annotated[Optional[str], typer.Option(
    *flag("model_dir"), help="A model dir written by `nascli train`.")]
CheckpointPath = Annotated[Optional[str], typer.Option(
    *flag("checkpoint_path"), help="A checkpoint prefix (default: the latest in --model_dir).")]
Experiment = Annotated[Optional[str], typer.Option(
    *flag("experiment"), help="Only for model dirs not written by nascli.")]
