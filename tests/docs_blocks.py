"""The docs' code blocks as steps to run: what tests/test_docs_run.py executes, and how.

A page's fenced blocks (found by tests/test_docs.py's parser) become units: commands of a
`bash`/`sh`/`console` block (or an untagged block of `$ ...` lines), a `python` block as one
script, or a block written to a file. The output a page quotes is parsed with them: a `# result:
...`, `# evaluated on: ...`, `# exported ...`, `# trained ...`, `# latency ...` or `# stdout:
...` comment right after a command (and `#` lines indented under it), or the lines after a
`$ command` of a console block.

Markers: HTML comments on the lines right before the fence (invisible on GitHub), one per line,
`<!-- docs-run: KIND ARGS (REASON) -->`; ARGS are bare words or "double-quoted" strings; a
REASON in parentheses is required where marked *:

  text (why)*                  not commands: a folder layout, math, quoted output
  file PATH                    write the block to PATH in the workspace (for a later command)
  skip (why)*                  do not run the block (a network, a cluster, a GPU, docker, ...)
  skip-line "S" (why)*         do not run the block's commands that contain S
  replace "OLD" "NEW" (why)*   replace text in every command of the block before it runs
  append "ARGS" ["S"] (why)*   append ARGS to the block's commands containing S (default: nascli;
                               "S$": the commands that end with S)
  tolerance X[%]               floats the block quotes match within X (or X percent); without it,
                               at the precision the page prints them; integers always exactly
  vary "S" (why)*              in quoted lines containing S only the words are compared (timings)
  exit N "S" (why)*            the commands containing S exit with N instead of 0
  after PAGE (why)*            run PAGE's blocks first (this block uses what they made)

Every command block runs unless marked `skip`; every other block needs `text`, `file` or `skip`.
One block is skipped without a marker: the README's test-suite command (it is this suite; the
sentence test_docs.py checks sits right above its fence).
Commands run without a shell: argv from shlex.split, `A && B` as A then B, leading `VAR=value`
words as environment; pipes and redirections are refused (mark such a line).
"""

import dataclasses
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time

import test_docs

ROOT = test_docs.ROOT
# The order pages run in: the README, the command pages in workflow order, then the rest.
WORKFLOW = ("README.md", "docs/commands/convert-data.md", "docs/commands/train.md",
            "docs/commands/eval.md", "docs/commands/export.md",
            "docs/commands/search_in_local.md", "docs/commands/list_trials.md",
            "docs/commands/search.md", "docs/commands/build.md")
COMMAND_TAGS = ("bash", "sh", "shell", "console")
# A comment right after a command that starts with one of these quotes the command's output.
OUTPUT_WORDS = ("result:", "evaluated on:", "exported ", "trained ", "latency ", "stdout:")
NEEDS_REASON = ("text", "skip", "skip-line", "replace", "append", "vary", "exit", "after")
KINDS = NEEDS_REASON + ("file", "tolerance")
SUITE_SKIP = "the README's test-suite command is this suite: .ci/run runs it"
COMMAND_TIMEOUT_S = 900  # a documented command that runs longer is a finding, not a wait
_MARKER = re.compile(r"^\s*<!--\s*docs-run:\s*(.*?)\s*-->\s*$")
_NUMBER = r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")
_SHELL = ("|", "||", ";", ">", ">>", "<", "2>", "2>&1", "&", "&>")


class MarkerError(ValueError):
  pass


@dataclasses.dataclass
class Marker:
  kind: str
  args: list[str]
  reason: str
  line: int  # 1-based line of the page


@dataclasses.dataclass
class Command:
  text: str  # as the page has it, continuations joined
  line: int
  expected: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Block:
  page: str
  line: int  # 1-based line of the opening fence
  info: str
  lines: list[str]
  markers: list[Marker]

  @property
  def where(self) -> str:
    return f"{self.page}:{self.line}"

  def marked(self, kind: str) -> list[Marker]:
    return [m for m in self.markers if m.kind == kind]

  @property
  def kind(self) -> str:
    """commands, python, or text (a block that is neither)."""
    if self.info in COMMAND_TAGS:
      return "commands"
    if self.info == "python":
      return "python"
    if not self.info and any(line.startswith("$ ") for line in self.lines):
      return "commands"
    return "text"

  @property
  def action(self) -> str:
    """What the run does with it: run, skip, text, file, or unmarked (a test failure)."""
    if self.page == "README.md" and self.lines == [test_docs.TEST_SUITE]:
      return "skip"  # test_docs.py wants its sentence right above the fence: no marker there
    for kind in ("skip", "text", "file"):
      if self.marked(kind):
        return kind
    return "run" if self.kind in ("commands", "python") else "unmarked"

  def commands(self) -> list[Command]:
    """The block's commands, each with the output lines the page quotes for it."""
    if self.kind == "python":
      return [Command("\n".join(self.lines), self.line + 1)]
    console = any(line.startswith("$ ") for line in self.lines)
    out: list[Command] = []
    quoting = False  # the last line was a command or its quoted output
    lines = list(enumerate(self.lines, start=self.line + 1))
    while lines:
      number, line = lines.pop(0)
      while line.rstrip().endswith("\\") and lines:
        line = line.rstrip()[:-1].rstrip() + " " + lines.pop(0)[1].strip()
      stripped = line.strip()
      if console:
        if stripped.startswith("$ "):
          out.append(Command(stripped[2:], number))
        elif stripped and out:
          out[-1].expected.append(stripped)
        continue
      if not stripped:
        quoting = False
      elif stripped.startswith("#"):
        comment = stripped[1:]
        words = comment.strip()
        if out and quoting and words.startswith(OUTPUT_WORDS):
          out[-1].expected.append(words.removeprefix("stdout:").strip())
        elif out and quoting and out[-1].expected and comment.startswith("  "):
          out[-1].expected.append(words)  # an indented continuation of the quote
        else:
          quoting = False
      else:
        out.append(Command(stripped, number))
        quoting = True
    return out


def parse_marker(text: str, line: int) -> Marker:
  body, reason = text, ""
  match = re.search(r"\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*$", body)
  if match:
    body, reason = body[:match.start()].strip(), match.group(1).strip()
  try:
    words = shlex.split(body)
  except ValueError as e:
    raise MarkerError(f"line {line}: {text!r}: {e}") from None
  if not words or words[0] not in KINDS:
    raise MarkerError(f"line {line}: {text!r}: the kind is one of {', '.join(KINDS)}")
  kind, args = words[0], words[1:]
  if kind in NEEDS_REASON and not reason:
    raise MarkerError(f"line {line}: {text!r}: a `{kind}` marker says why, in parentheses")
  wanted = {"text": (0, 0), "skip": (0, 0), "skip-line": (1, 1), "replace": (2, 2),
            "append": (1, 2), "tolerance": (1, 1), "vary": (1, 1), "exit": (1, 2),
            "after": (1, 1), "file": (1, 1)}[kind]
  if not wanted[0] <= len(args) <= wanted[1]:
    raise MarkerError(f"line {line}: {text!r}: `{kind}` takes {wanted[0]}-{wanted[1]} arguments")
  if kind == "tolerance" and not re.fullmatch(r"\d+(\.\d+)?%?", args[0]):
    raise MarkerError(f"line {line}: {text!r}: a tolerance is a number, or a percentage")
  if kind == "exit" and not args[0].isdigit():
    raise MarkerError(f"line {line}: {text!r}: an exit code is a number")
  if kind == "after" and not (ROOT / args[0]).is_file():
    raise MarkerError(f"line {line}: {text!r}: no page {args[0]}")
  return Marker(kind, args, reason, line)


def page_blocks(path: pathlib.Path) -> list[Block]:
  """The fenced blocks of a page, each with the markers on the lines right above its fence."""
  text = path.read_text(encoding="utf-8")
  lines = text.splitlines()
  page = str(path.relative_to(ROOT))
  blocks = []
  for start, info, block_lines in test_docs.fences(text):
    markers = []
    at = start - 1
    while at >= 0 and _MARKER.match(lines[at]):
      markers.insert(0, parse_marker(_MARKER.match(lines[at]).group(1), at + 1))
      at -= 1
    blocks.append(Block(page, start + 1, info.split()[0] if info else "", block_lines, markers))
  return blocks


def pages() -> list[str]:
  """Every doc page, in the order they run."""
  found = [test_docs._doc_id(p) for p in test_docs.DOCS]  # pylint: disable=protected-access
  return [p for p in WORKFLOW if p in found] + [p for p in found if p not in WORKFLOW]


# ---- comparing what ran with what the page quotes


def _tolerance(block: Block):
  marks = block.marked("tolerance")
  if not marks:
    return None
  value = marks[-1].args[0]
  return (float(value[:-1]) / 100, True) if value.endswith("%") else (float(value), False)


def number_matches(expected: str, actual: str, tolerance) -> bool:
  """An integer exactly; a float within the tolerance, else at the precision printed."""
  e, a = float(expected), float(actual)
  if not re.search(r"[.eE]", expected):
    return e == a
  if tolerance is None:
    decimals = len(expected.partition(".")[2]) if "." in expected else 0
    return round(a, decimals) == round(e, decimals)
  limit, relative = tolerance
  return abs(a - e) <= (limit * abs(e) if relative else limit) + 1e-12


def quote_problem(expected: str, output: str, tolerance=None, vary: bool = False) -> str | None:
  """None if some line of `output` says `expected` (words and paths exactly, numbers as
  number_matches says); else what differs."""
  pieces = re.split(f"({_NUMBER})", expected.strip())
  pattern = "".join(
      f"({_NUMBER})" if i % 2 else r"\s+".join(map(re.escape, piece.split(" ")))
      for i, piece in enumerate(pieces))
  pattern = re.sub(r"(\\s\+)+", r"\\s+", pattern)
  lines = _ANSI.sub("\n", output).splitlines()
  near = []
  for line in lines:
    match = re.search(pattern, line)
    if not match:
      continue
    wanted, got = pieces[1::2], match.groups()
    if vary or all(number_matches(w, g, tolerance) for w, g in zip(wanted, got)):
      return None
    near.append(line.strip())
  if near:
    return f"the page says {expected!r}, the command printed {near[-1]!r}"
  tail = "\n    ".join(line for line in lines[-8:] if line.strip())
  return f"the page says {expected!r}; no such line in the output, which ends:\n    {tail}"


# ---- running


def argv_parts(text: str) -> list[tuple[dict, list[str]]]:
  """[(environment, argv)] for `A && B`, each with its leading VAR=value words."""
  tokens = shlex.split(text, comments=True)
  bad = [t for t in tokens if t in _SHELL]
  if bad:
    raise MarkerError(f"shell syntax {bad[0]!r} in {text!r}: mark the line (skip-line)")
  parts, part = [], []
  for token in tokens + ["&&"]:
    if token != "&&":
      part.append(token)
      continue
    env = {}
    while part and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", part[0]):
      name, _, value = part.pop(0).partition("=")
      env[name] = value
    if part:
      parts.append((env, part))
    part = []
  return parts


@dataclasses.dataclass
class Ran:
  code: int
  output: str
  where: str  # the first page line that ran it
  seconds: float = 0.0


class Workspace:
  """One folder all pages run in (session-scoped), so a flow that several pages show runs once:
  a command identical to one already run here is not run again; its recorded result is used."""

  def __init__(self, folder: pathlib.Path, cache: pathlib.Path):
    self.folder = folder
    folder.mkdir(parents=True, exist_ok=True)
    venv = ROOT / ".venv" if (ROOT / ".venv" / "bin").is_dir() else pathlib.Path(sys.prefix)
    for name, target in (("scripts", ROOT / "scripts"), ("tf_vision", ROOT / "tf_vision"),
                         (".venv", venv)):
      if not (folder / name).exists():
        (folder / name).symlink_to(target)
    self.env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
                    NASCLI_CACHE_DIR=str(cache), TF_CPP_MIN_LOG_LEVEL="3")
    self.env.pop("PYTHONPATH", None)
    self.ran: dict[tuple, Ran] = {}
    self.pages: dict[str, list[str]] = {}  # page -> its problems, once run
    self.log: list[str] = []  # page:line  ran|reused|skipped  command  (why)

  def _key(self, env: dict, argv: list[str]) -> tuple:
    program = "nascli" if os.path.basename(argv[0]) == "nascli" else argv[0]
    return (tuple(sorted(env.items())), program, *argv[1:])

  def run_argv(self, env: dict, argv: list[str], where: str) -> tuple[Ran, bool]:
    """(the result, whether it was reused)."""
    key = self._key(env, argv)
    if key in self.ran:
      return self.ran[key], True
    start = time.monotonic()
    try:
      proc = subprocess.run(argv, cwd=self.folder, env=dict(self.env, **env), check=False,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
      ran = Ran(proc.returncode, proc.stdout, where)
    except subprocess.TimeoutExpired as e:
      out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
      ran = Ran(-1, out + f"\n(still running after {COMMAND_TIMEOUT_S} s: stopped)", where)
    except OSError as e:
      ran = Ran(127, str(e), where)
    ran.seconds = time.monotonic() - start
    self.ran[key] = ran
    return ran, False


def prepared(block: Block, command: Command) -> tuple[str | None, str]:
  """(the command text to run, or None when a marker skips it; the reasons applied)."""
  text, why = command.text, []
  for m in block.marked("skip-line"):
    if m.args[0] in text:
      return None, m.reason
  for m in block.marked("replace"):
    if m.args[0] in text:
      text = text.replace(m.args[0], m.args[1])
      why.append(m.reason)
  for m in block.marked("append"):
    match = m.args[1] if len(m.args) > 1 else "nascli"
    body, hash_, comment = text.partition(" #")
    if match.endswith("$") and body.rstrip().endswith(match[:-1]) or match in text:
      text = f"{body.rstrip()} {m.args[0]}" + (f" {hash_.strip()}{comment}" if hash_ else "")
      why.append(m.reason)
  return text, "; ".join(why)


def run_page(ws: Workspace, page: str) -> list[str]:
  """Runs a page's blocks in order in the workspace (first the pages its `after` markers
  name); returns its problems (empty: every command exited as expected, every quote held)."""
  if page in ws.pages:
    return ws.pages[page]
  ws.pages[page] = problems = []
  blocks = page_blocks(ROOT / page)
  for block in blocks:
    for m in block.marked("after"):
      if m.args[0] != page and run_page(ws, m.args[0]):
        problems.append(f"{block.where}: runs after {m.args[0]}, which has problems")
  for block in blocks:
    action = block.action
    if action == "unmarked":
      problems.append(f"{block.where}: a {block.info or 'untagged'} block that is neither run "
                      "nor marked (docs-run: text/file/skip; see tests/docs_blocks.py)")
      continue
    if action == "file":
      target = ws.folder / block.marked("file")[0].args[0]
      target.parent.mkdir(parents=True, exist_ok=True)
      target.write_text("\n".join(block.lines) + "\n", encoding="utf-8")
      ws.log.append(f"{block.where}  file  {target.name}")
      continue
    if action in ("skip", "text"):
      why = block.marked(action)[0].reason if block.marked(action) else SUITE_SKIP
      ws.log.append(f"{block.where}  {action}  ({why})")
      continue
    problems += _run_block(ws, block)
  return problems


def _run_block(ws: Workspace, block: Block) -> list[str]:
  problems = []
  tolerance = _tolerance(block)
  for command in block.commands():
    where = f"{block.page}:{command.line}"
    if block.kind == "python":
      script = ws.folder / "_docs_run" / f"{block.page.replace('/', '_')}_{block.line}.py"
      script.parent.mkdir(exist_ok=True)
      script.write_text(command.text + "\n", encoding="utf-8")
      text, why = "python " + str(script.relative_to(ws.folder)), ""
      parts = [({}, ["python", str(script.relative_to(ws.folder))])]
    else:
      text, why = prepared(block, command)
      if text is None:
        ws.log.append(f"{where}  skipped  {command.text}  ({why})")
        continue
      try:
        parts = argv_parts(text)
      except MarkerError as e:
        problems.append(f"{where}: {e}")
        continue
    expected_code = 0
    for m in block.marked("exit"):
      if len(m.args) == 1 or m.args[1] in text:
        expected_code = int(m.args[0])
    output = ""
    for env, argv in parts:
      ran, reused = ws.run_argv(env, argv, where)
      output += ran.output
      label = f"reused ({ran.where})" if reused else f"ran {ran.seconds:.0f} s"
      ws.log.append(f"{where}  {label}  {shlex.join(argv)}" + (f"  ({why})" if why else ""))
      want = expected_code if (env, argv) == parts[-1] else 0
      if ran.code != want:
        tail = "\n    ".join(ran.output.strip().splitlines()[-6:])
        problems.append(f"{where}: `{shlex.join(argv)}` exited {ran.code}, not {want}:\n    "
                        f"{tail}")
        break
    else:
      for expected in command.expected:
        vary = any(m.args[0] in expected for m in block.marked("vary"))
        problem = quote_problem(expected, output, tolerance, vary)
        if problem:
          problems.append(f"{where}: {problem}")
  return problems


def main() -> None:
  """`python tests/docs_blocks.py`: every block of every page, what the run does with it."""
  for page in pages():
    for block in page_blocks(ROOT / page):
      marks = "; ".join(f"{m.kind} {' '.join(map(repr, m.args))} ({m.reason})".replace(" ()", "")
                        for m in block.markers)
      print(f"{block.where:45} {block.kind:9} {block.action:9} {marks}")


if __name__ == "__main__":
  sys.path.insert(0, str(ROOT / "tests"))
  main()
