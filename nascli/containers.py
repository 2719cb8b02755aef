"""The engine behind `nascli build`: image URIs, the docker commands that build and push them.

Commands are argument lists run without a shell, so a path or name can never be read as shell
syntax; every name that lands in one is checked against Docker's reference grammar first, so none
can be read as a docker option either. Docker's own output goes to stderr: stdout is for results.
"""

import dataclasses
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from nascli.errors import NascliError

# The checkout nascli runs from: the build context and the home of the default Dockerfiles.
PROJECT_DIR = Path(__file__).resolve().parents[1]
TRAINER_DOCKERFILE = "tf_vision/nas_multi_trial.Dockerfile"
LATENCY_DOCKERFILE = "tf_vision/latency_computation_using_saved_model.Dockerfile"
DEFAULT_TAG = "latest"

# Docker's reference grammar (distribution/reference): lowercase path components joined by
# separators, an optional registry host[:port] in front, tags of word characters.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_HOST_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_HOST_COMPONENT}(?:\.{_HOST_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_NAME_MAX = 255  # Docker refuses longer repository names.
# Google Cloud: regions (us-central1) and multi-regions (us, europe); project ids, optionally
# domain-scoped (example.com:my-project).
_REGION = r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*"
_PROJECT = r"(?:[a-z0-9][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]"


def _check(value: str, pattern: str, flag: str, what: str) -> str:
  if not re.fullmatch(pattern, value, re.ASCII):  # Docker's \w is ASCII
    raise NascliError(f"{flag} {value!r}: not {what}")
  return value


def check_region(region: str) -> str:
  return _check(region, _REGION, "--region", "a Google Cloud region (lowercase, e.g. us-central1)")


def check_project(project: str) -> str:
  return _check(project, _PROJECT, "--project_id", "a Google Cloud project id (6-30 lowercase"
                " letters, digits and hyphens, starting with a letter)")


def check_docker_id(docker_id: str, flag: str) -> str:
  return _check(docker_id, _REPOSITORY, flag, "a Docker repository name (lowercase letters,"
                " digits and . _ - between them, parts separated by /)")


def check_tag(tag: str) -> str:
  return _check(tag, _TAG, "--tag", "a Docker tag (letters, digits, _ . -, not starting with"
                " . or -, at most 128)")


def check_registry(registry: str) -> str:
  """A registry and repository prefix: `host[:port][/path]`, or a Docker Hub `user[/path]`."""
  return _check(registry, rf"(?:{_HOST}/)?{_REPOSITORY}|{_HOST}", "--registry", "a registry"
                " prefix like us-central1-docker.pkg.dev/PROJECT/nas (lowercase path, no spaces)")


def default_registry(region: str, project: str) -> str:
  """Vertex AI NAS's Artifact Registry repository `nas`; a domain-scoped project (example.com:p)
  is a path of two parts in a Docker name, as Artifact Registry spells it."""
  return f"{region}-docker.pkg.dev/{project.replace(':', '/')}/nas"


def image_uri(registry: str, docker_id: str, tag: str = DEFAULT_TAG) -> str:
  uri = f"{registry}/{docker_id}:{tag}"
  name = uri.rsplit(":", 1)[0]
  if len(name) > _NAME_MAX:
    raise NascliError(f"image name {name} is longer than Docker's {_NAME_MAX} characters")
  return uri


@dataclasses.dataclass(frozen=True)
class Image:
  role: str  # trainer or latency_calculator
  docker_id: str
  dockerfile: str  # absolute
  uri: str


@dataclasses.dataclass
class BuildArgs:
  project_id: str
  region: str
  trainer_docker_id: str | None = None
  latency_calculator_docker_id: str | None = None
  trainer_docker_file: str | None = None
  latency_calculator_docker_file: str | None = None
  use_cache: bool = True
  push: bool = True
  registry: str | None = None
  tag: str = DEFAULT_TAG
  context: str | None = None


def _path(path: str | None, default: str) -> str:
  """Given paths are relative to the working directory, defaults to the nascli checkout; the
  commands get absolute paths, which hold from any directory and cannot start with '-'."""
  return os.path.abspath(path) if path else str(PROJECT_DIR / default)


def plan(args: BuildArgs) -> tuple[list[Image], list[list[str]]]:
  """The images to build and the docker commands, in run order: build then push per image."""
  check_project(args.project_id)
  check_region(args.region)
  check_tag(args.tag)
  registry = (check_registry(args.registry.rstrip("/")) if args.registry is not None
              else default_registry(args.region, args.project_id))
  wanted = [("trainer", "--trainer_docker_id", args.trainer_docker_id,
             "--trainer_docker_file", args.trainer_docker_file, TRAINER_DOCKERFILE),
            ("latency_calculator", "--latency_calculator_docker_id",
             args.latency_calculator_docker_id, "--latency_calculator_docker_file",
             args.latency_calculator_docker_file, LATENCY_DOCKERFILE)]
  images = []
  for role, id_flag, docker_id, file_flag, dockerfile, default_file in wanted:
    if not docker_id:  # Vertex: an empty id means "not this image".
      continue
    check_docker_id(docker_id, id_flag)
    path = _path(dockerfile, default_file)
    if not os.path.isfile(path):
      hint = "" if dockerfile else " (build from a nascli checkout, or pass it)"
      raise NascliError(f"{file_flag}: no such Dockerfile: {path}{hint}")
    images.append(Image(role, docker_id, path, image_uri(registry, docker_id, args.tag)))
  if not images:
    raise NascliError("nothing to build: pass --trainer_docker_id and/or"
                      " --latency_calculator_docker_id")
  context = _path(args.context, ".")
  if not os.path.isdir(context):
    raise NascliError(f"--context: no such directory: {context}")
  commands = []
  for image in images:
    commands.append(["docker", "build", *([] if args.use_cache else ["--no-cache"]),
                     "-f", image.dockerfile, "-t", image.uri, context])
    if args.push:
      commands.append(["docker", "push", image.uri])
  return images, commands


def _stderr_fd() -> int | None:
  """The file descriptor of sys.stderr, if it has one (not under an in-process capture)."""
  try:
    sys.stderr.flush()
    return sys.stderr.fileno()
  except (AttributeError, ValueError, io.UnsupportedOperation):
    return None


def _run(command: list[str], docker: str) -> int:
  """Runs one docker command, its stdout and stderr both shown on our stderr."""
  argv = [docker, *command[1:]]
  fd = _stderr_fd()
  if fd is not None:
    return subprocess.run(argv, stdout=fd, check=False).returncode
  with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        errors="replace") as process:
    for line in process.stdout:
      sys.stderr.write(line)
  return process.returncode


def run(commands: list[list[str]]) -> None:
  """Runs the commands in order; the first failure stops everything after it (a failed build
  pushes nothing)."""
  docker = shutil.which("docker")
  if docker is None:
    raise NascliError(f"docker is not installed or not on PATH; it is needed to run:"
                      f" {shlex.join(commands[0])}")
  for command in commands:
    code = _run(command, docker)
    if code != 0:
      how = f"was killed by signal {-code}" if code < 0 else f"failed with exit code {code}"
      raise NascliError(f"{shlex.join(command)} {how}")
