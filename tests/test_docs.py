"""The README and docs/: links that resolve inside the repository, commands as users type them.

Docs rot silently: a renamed file, a heading reworded, an option renamed by a later change. These
tests read README.md and docs/**/*.md as GitHub renders them (fenced code and code spans are not
markdown) and check what a reader would follow or copy.
"""

import pathlib
import re
import shlex
import shutil
import subprocess

import pytest
import typer

from nascli import app as app_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted([README, *(ROOT / "docs").rglob("*.md")])
MAX_README_LINES = 200
# The README's two fresh-machine commands: the main job, and the test suite (.ci/run's command).
MAIN_JOB = ("bash scripts/setup.sh && .venv/bin/nascli convert-data digits_clutter --output_dir"
            " data/digits_clutter && .venv/bin/nascli search_in_local"
            " --prebuilt_search_space=mnasnet --dataset_dir data/digits_clutter --config_file"
            " tf_vision/configs/experiments/digits_clutter_mnasnet_search_cpu.yaml"
            " --local_output_dir nascli_output/search_digits_clutter")
TEST_SUITE = "bash scripts/setup.sh --test && .venv/bin/python -m pytest -q"
TEST_SUITE_SENTENCE = "Set up and run the test suite (what `.ci/run` runs):"
# The product card's commands, exactly as users type them (the launchers with `sh`).
CARD_COMMANDS = (
    "nascli search_in_local --prebuilt_search_space=spinenet",
    "nascli convert-data cifar10",
    "sh scripts/run_distribute_train_gpu.sh DATA 8",
    "sh scripts/run_eval_gpu.sh DATA CKPT",
)

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# [text](target "title") and ![alt](target); text may hold code spans or brackets one deep.
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+[\"'(][^)]*)?\)")
_REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(\S+)", re.M)
_AUTOLINK = re.compile(r"<((?:https?|ftp)://[^>]*)>", re.I)
_URL = re.compile(r"\b(?:https?|ftp)://", re.I)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def fences(text: str) -> list[tuple[int, str, list[str]]]:
  """Each fenced code block: (the index of its opening fence line, the fence's info string,
  e.g. `bash`, and the block's lines). tests/test_docs_run.py runs them."""
  out, open_at = [], None
  lines = text.splitlines()
  for i, line in enumerate(lines):
    if _FENCE.match(line):
      if open_at is None:
        open_at = i
      else:
        info = _FENCE.sub("", lines[open_at], count=1).strip()
        out.append((open_at, info, lines[open_at + 1:i]))
        open_at = None
  assert open_at is None, "a fenced code block is never closed"
  return out


def _split(text: str) -> tuple[list[str], list[list[str]]]:
  """(prose lines with fenced code blanked, the fenced blocks' lines)."""
  prose = text.splitlines()
  blocks = fences(text)
  for start, _, block in blocks:
    prose[start:start + len(block) + 2] = [""] * (len(block) + 2)
  return prose, [block for _, _, block in blocks]


def _prose_without_code(text: str) -> str:
  """The markdown GitHub parses for links: fenced blocks and code spans removed."""
  prose, _ = _split(text)
  return _CODE_SPAN.sub(" ", "\n".join(prose))


def _links(text: str) -> list[str]:
  prose = _prose_without_code(text)
  targets = [m.group(1).strip("<>") for m in _INLINE_LINK.finditer(prose)]
  targets += _REFERENCE_DEF.findall(prose)
  targets += _AUTOLINK.findall(prose)
  return targets


def slug(heading: str) -> str:
  """GitHub's anchor of a heading: links and code marks dropped, lowercased, punctuation other
  than `-` and `_` removed, spaces to dashes."""
  text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
  text = text.replace("`", "").strip().lower()
  text = re.sub(r"[^\w\- ]", "", text)
  return text.replace(" ", "-")


def anchors(path: pathlib.Path) -> set[str]:
  prose, _ = _split(path.read_text(encoding="utf-8"))
  seen: dict[str, int] = {}
  out = set()
  for line in prose:
    match = _HEADING.match(line)
    if not match:
      continue
    base = slug(match.group(2))
    n = seen.get(base, 0)
    seen[base] = n + 1
    out.add(base if n == 0 else f"{base}-{n}")
  return out


def _doc_id(path: pathlib.Path) -> str:
  return str(path.relative_to(ROOT))


def _ignored(path: pathlib.Path) -> bool:
  """Whether git ignores `path` (a venv, build output): not part of a fresh clone."""
  if not (ROOT / ".git").exists() or shutil.which("git") is None:
    return False
  result = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", str(path)],
                          check=False, capture_output=True)
  return result.returncode == 0


def link_problems(doc: pathlib.Path, targets: list[str]) -> list[str]:
  """What is wrong with each link target of `doc` (nothing, for a file of the repository)."""
  problems = []
  for target in targets:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("//"):
      problems.append(f"{target}: absolute link (only files of this repository)")
      continue
    path_part, _, fragment = target.partition("#")
    dest = (doc.parent / path_part).resolve() if path_part else doc
    if not dest.is_relative_to(ROOT):
      problems.append(f"{target}: outside the repository")
      continue
    rel = dest.relative_to(ROOT)
    if rel.parts[:1] == ("shared",):
      problems.append(f"{target}: shared/ is not part of the repository")
    elif not dest.exists():
      problems.append(f"{target}: {rel} does not exist")
    elif _ignored(dest):
      problems.append(f"{target}: {rel} is ignored by git, so not in a fresh clone")
    elif fragment and dest.suffix != ".md":
      problems.append(f"{target}: an anchor into a file that has no headings")
    elif fragment and fragment not in anchors(dest):
      problems.append(f"{target}: no heading #{fragment} in {rel}")
  return problems


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_links_resolve_inside_the_repository(doc):
  problems = link_problems(doc, _links(doc.read_text(encoding="utf-8")))
  assert not problems, f"{_doc_id(doc)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_no_web_addresses_outside_code(doc):
  prose = _prose_without_code(doc.read_text(encoding="utf-8"))
  lines = [line for line in prose.splitlines() if _URL.search(line)]
  assert not lines, f"{_doc_id(doc)} links outside the repository: {lines}"


def test_docs_are_found():
  names = {_doc_id(p) for p in DOCS}
  for name in ("README.md", "docs/README.md", "docs/concepts.md", "docs/gcs.md",
               "docs/clusters.md", "docs/thor.md", "docs/performance.md"):
    assert name in names
  for command in ("convert-data", "train", "eval", "export", "search_in_local", "search",
                  "list_trials", "build"):
    assert f"docs/commands/{command}.md" in names


def test_every_doc_page_is_reachable_from_the_index():
  index = ROOT / "docs" / "README.md"
  linked = {(index.parent / t.partition("#")[0]).resolve()
            for t in _links(index.read_text(encoding="utf-8")) if t.partition("#")[0]}
  pages = {p.resolve() for p in DOCS if p.parent != ROOT and p != index}
  assert not pages - linked, sorted(str(p.relative_to(ROOT)) for p in pages - linked)


def test_readme_is_short():
  lines = README.read_text(encoding="utf-8").splitlines()
  assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def _ci_command() -> str:
  """The command .ci/run runs: its last line that is not a comment, `set` or `cd`."""
  lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
  commands = [line for line in lines
              if line and not line.startswith(("#", "set ", "cd "))]
  return commands[-1]


def test_readme_fresh_machine_commands_are_exact():
  assert _ci_command() == TEST_SUITE
  text = README.read_text(encoding="utf-8")
  _, blocks = _split(text)
  block_lines = [line for block in blocks for line in block]
  commands = [" ".join(c.split()) for c in "\n".join(block_lines).replace("\\\n", " ")
              .splitlines()]  # continuation lines joined
  assert MAIN_JOB in commands
  assert TEST_SUITE in block_lines
  # The sentence that says which is which sits right above the test suite's block.
  lines = text.splitlines()
  at = lines.index(TEST_SUITE)
  assert lines[at - 1].startswith("```") and lines[at - 3] == TEST_SUITE_SENTENCE
  assert text.index(MAIN_JOB.split(" && ")[1]) < text.index(TEST_SUITE)


def _code_lines() -> list[tuple[pathlib.Path, str]]:
  """Every line of fenced code and every code span, with its file."""
  out = []
  for doc in DOCS:
    text = doc.read_text(encoding="utf-8")
    prose, blocks = _split(text)
    out += [(doc, line) for block in blocks for line in block]
    out += [(doc, " ".join(m.group(2).split())) for m in _CODE_SPAN.finditer("\n".join(prose))]
  return out


@pytest.mark.parametrize("command", CARD_COMMANDS)
def test_product_card_commands_appear_as_typed(command):
  assert any(command in line for _, line in _code_lines()), command


def test_launchers_are_shown_with_sh():
  bash_launches = [f"{_doc_id(doc)}: {line}" for doc, line in _code_lines()
                   if re.search(r"\bbash\s+scripts/run_", line)]
  assert not bash_launches


def _normalized(option: str) -> str:
  """`--flag-name` -> `--flag_name`: help's spelling, which the CLI also accepts dashed."""
  return "--" + option[2:].replace("-", "_") if option.startswith("--") else option


def _commands() -> dict[str, set[str]]:
  """Each command's option names as help shows them (underscores), plus --help."""
  root = typer.main.get_command(app_lib.app)
  out = {}
  for name, command in root.commands.items():
    opts = {"--help", "-h"}
    for param in command.params:
      opts.update(_normalized(o) for o in [*param.opts, *param.secondary_opts])
    out[name] = opts
  return out


def _nascli_invocations() -> list[tuple[pathlib.Path, str, list[str]]]:
  """(file, command, its tokens) for every `nascli COMMAND ...` in fenced code or code spans;
  a fenced line ending in a backslash continues on the next."""
  found = []
  for doc in DOCS:
    text = doc.read_text(encoding="utf-8")
    prose, blocks = _split(text)
    pieces = []
    for block in blocks:
      joined = "\n".join(block).replace("\\\n", " ")
      pieces += joined.splitlines()
    pieces += [m.group(2) for m in _CODE_SPAN.finditer("\n".join(prose))]
    for piece in pieces:
      piece = piece.split(" #")[0]
      try:
        tokens = shlex.split(piece)
      except ValueError:
        tokens = piece.split()
      for i, token in enumerate(tokens[:-1]):
        if token.rsplit("/", 1)[-1] == "nascli" and (i == 0 or tokens[i - 1] != "-m"):
          rest = []
          for t in tokens[i + 2:]:
            if t in ("|", "&&", ";", ">", "2>"):
              break
            rest.append(t)
          found.append((doc, tokens[i + 1], rest))
  return found


def test_documented_invocations_use_real_options():
  commands = _commands()
  problems = []
  invocations = _nascli_invocations()
  assert len(invocations) > 50  # the parser finds the docs' commands
  for doc, name, tokens in invocations:
    if not re.fullmatch(r"[a-z][a-z_-]*", name):
      continue  # `nascli --version`, `nascli COMMAND --help`, `nascli ...`
    if name not in commands:
      problems.append(f"{_doc_id(doc)}: nascli {name}: no such command")
      continue
    for token in tokens:
      if token.startswith("--"):
        option = _normalized(token.split("=", 1)[0])
        if option not in commands[name]:
          problems.append(f"{_doc_id(doc)}: nascli {name} {token}: no such option")
  assert not problems, "\n".join(problems)


def _options_table_flags(page: pathlib.Path) -> list[str]:
  """The `--options` named in the first column of the page's "Options" table(s)."""
  flags, in_options = [], False
  prose, _ = _split(page.read_text(encoding="utf-8"))
  for line in prose:
    heading = _HEADING.match(line)
    if heading:
      in_options = heading.group(2).startswith("Options")
      continue
    if in_options and line.startswith("|"):
      first = line.split("|")[1]
      flags += re.findall(r"`(--[a-z][a-z0-9_-]*)", first)
  return flags


@pytest.mark.parametrize("command", ["convert-data", "train", "eval", "export",
                                     "search_in_local", "search", "list_trials", "build"])
def test_command_page_options_exist(command):
  page = ROOT / "docs" / "commands" / f"{command}.md"
  flags = _options_table_flags(page)
  assert len(flags) >= 3, f"{page.name} has no Options table"
  known = _commands()[command]
  missing = sorted({f for f in flags if _normalized(f) not in known})
  assert not missing, f"{page.name} documents options {command} does not have: {missing}"


def test_slug_matches_github():
  assert slug("Quick start 1: convert, train, evaluate, export, serve") == (
      "quick-start-1-convert-train-evaluate-export-serve")
  assert slug("`nascli search`: the same search on a Ray cluster") == (
      "nascli-search-the-same-search-on-a-ray-cluster")
  assert slug("Architectures: nas_params_str") == "architectures-nas_params_str"
  assert slug("Exit: no wait for tf.data's teardown") == "exit-no-wait-for-tfdatas-teardown"


def test_link_checker_catches_bad_links():
  text = ("[a](https://example.com) [b](../shared/DESIGN.md) [c](concepts.md#no-such-heading) "
          "`[d](nowhere.md)` [e](concepts.md#rewards-and-latency) [f](../.venv/bin/nascli) "
          "[g](missing.md) ![h](thor.md#the-math) <http://example.org>")
  targets = _links(text)
  assert targets == ["https://example.com", "../shared/DESIGN.md",
                     "concepts.md#no-such-heading", "concepts.md#rewards-and-latency",
                     "../.venv/bin/nascli", "missing.md", "thor.md#the-math",
                     "http://example.org"]
  problems = link_problems(ROOT / "docs" / "x.md", targets)
  assert [p.split(":")[0] for p in problems] == [
      "https", "../shared/DESIGN.md", "concepts.md#no-such-heading", "../.venv/bin/nascli",
      "missing.md", "http"]
  assert link_problems(README, ["../shared/DESIGN.md"]) == [
      "../shared/DESIGN.md: outside the repository"]
  assert _prose_without_code("see https://x.org and `http://127.0.0.1:4443`").count("http") == 1
