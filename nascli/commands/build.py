"""`nascli build`: build (and push) the trainer and latency-calculator images, as Vertex's build.

For each docker id given: `docker build [--no-cache] -f DOCKERFILE -t URI CONTEXT`, then
`docker push URI`, with URI = `{region}-docker.pkg.dev/{project}/nas/{docker_id}:latest` unless
--registry / --tag say otherwise. The image URIs are the result (stdout); docker talks on stderr.
"""

import json
import shlex
from typing import Annotated, Optional

import typer

from nascli import containers
from nascli.commands.options import flag


def build(
    project_id: Annotated[str, typer.Option(
        *flag("project_id"), help="Google Cloud project of the Artifact Registry repository.",
        show_default=False)],
    region: Annotated[str, typer.Option(
        *flag("region"), help="Its region (us-central1, europe-west4, ...).",
        show_default=False)],
    trainer_docker_id: Annotated[Optional[str], typer.Option(
        *flag("trainer_docker_id"), help="Image name of the trainer (trial runner).")] = None,
    latency_calculator_docker_id: Annotated[Optional[str], typer.Option(
        *flag("latency_calculator_docker_id"), help="Image name of the latency calculator.")]
    = None,
    trainer_docker_file: Annotated[Optional[str], typer.Option(
        *flag("trainer_docker_file"), help=f"Default: {containers.TRAINER_DOCKERFILE} of this"
        " checkout.")] = None,
    latency_calculator_docker_file: Annotated[Optional[str], typer.Option(
        *flag("latency_calculator_docker_file"), help="Default:"
        f" {containers.LATENCY_DOCKERFILE} of this checkout.")] = None,
    use_cache: Annotated[bool, typer.Option(
        "--use_cache/--no_use_cache",
        help="Reuse docker's layer cache (off: docker build --no-cache).")] = True,
    push: Annotated[bool, typer.Option(
        "--push/--no_push", help="Push each image after building it.")] = True,
    registry: Annotated[Optional[str], typer.Option(
        *flag("registry"), help="Where the images go (default:"
        " REGION-docker.pkg.dev/PROJECT/nas).")] = None,
    tag: Annotated[str, typer.Option(*flag("tag"), help="Image tag.")] = containers.DEFAULT_TAG,
    context: Annotated[Optional[str], typer.Option(
        *flag("context"), help="Build context (default: this nascli checkout).")] = None,
    dry_run: Annotated[bool, typer.Option(
        *flag("dry_run"), help="Print the docker commands, one per line; run nothing.")]
    = False,
    as_json: Annotated[bool, typer.Option(
        *flag("json"), help="Print the images and commands as JSON.")] = False,
) -> None:
  """Build the trainer and latency-calculator container images and push them."""
  images, commands = containers.plan(containers.BuildArgs(
      project_id=project_id, region=region, trainer_docker_id=trainer_docker_id,
      latency_calculator_docker_id=latency_calculator_docker_id,
      trainer_docker_file=trainer_docker_file,
      latency_calculator_docker_file=latency_calculator_docker_file, use_cache=use_cache,
      push=push, registry=registry, tag=tag, context=context))
  if not dry_run:
    containers.run(commands)
  if as_json:
    print(json.dumps({
        "dry_run": dry_run,
        "images": [{"role": i.role, "docker_id": i.docker_id, "dockerfile": i.dockerfile,
                    "uri": i.uri, "pushed": push and not dry_run} for i in images],
        "commands": commands}, indent=2))
  elif dry_run:
    for command in commands:
      print(shlex.join(command))
  else:
    for image in images:
      print(image.uri)
