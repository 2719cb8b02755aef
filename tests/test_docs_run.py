"""The docs, executed: every command block of README.md and docs/**/*.md runs, and what it prints
is checked against what the page quotes.

tests/test_docs.py checks that links resolve and options exist; it cannot see a documented
command that fails, runs for an hour or learns nothing. Here each page's blocks run in order in
one session-scoped workspace (README first, then the command pages in workflow order, then the
rest; a command identical to one already run there is not run again, so pages that show the
same flow share its runs), with the embedded data, `nascli` from the venv, NASCLI_CACHE_DIR in a
session temp folder and the repository's `scripts/`, `tf_vision/` and `.venv/` linked in. Each
command must exit 0 and every output line the page quotes must be in what it printed.

The markers that shorten a step, skip a block (a network, a cluster, a GPU) or write a block to
a file are HTML comments right above a fence, `<!-- docs-run: KIND ARGS (why) -->`; the syntax
is in tests/docs_blocks.py's docstring. `python tests/docs_blocks.py` lists every block and what
the run does with it. A page's "about N minutes" is bench/bench_docs.py's job, not this one.
"""

import pathlib

import pytest

import docs_blocks

PAGES = docs_blocks.pages()
_RUN_TIMEOUT_S = 3600  # one page with what it depends on; the suite's 900 s is per test


@pytest.fixture(scope="session")
def docs_workspace(tmp_path_factory):
  return docs_blocks.Workspace(tmp_path_factory.mktemp("docs_run"),
                               tmp_path_factory.mktemp("docs_run_cache"))


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_run_or_marked(page):
  blocks = docs_blocks.page_blocks(docs_blocks.ROOT / page)  # a bad marker raises, naming it
  unmarked = [f"{b.where} ({b.info or 'untagged'}: {b.lines[0][:60]!r})"
              for b in blocks if b.action == "unmarked"]
  assert not unmarked, "blocks neither run nor marked (docs-run: text/file/skip): " + (
      ", ".join(unmarked))


def test_pages_run_in_workflow_order():
  assert PAGES[:3] == ["README.md", "docs/commands/convert-data.md", "docs/commands/train.md"]
  assert len(PAGES) == len(set(PAGES)) == len(docs_blocks.test_docs.DOCS)


def _block(text: str, info: str = "bash", markers=()) -> docs_blocks.Block:
  return docs_blocks.Block("page.md", 10, info, text.strip("\n").splitlines(),
                           [docs_blocks.parse_marker(m, 9) for m in markers])


def test_commands_and_their_quoted_output():
  block = _block("""
nascli eval --model_dir runs/digits \\
  --json   # a comment
# result: {'top_1_accuracy': 0.97} ckpt=runs/digits/ckpt-300
# a plain comment
nascli export --model_dir runs/digits
# stdout: us-central1/nas:latest
#         us-central1/lat:latest
""")
  commands = block.commands()
  assert [(c.text, c.line, c.expected) for c in commands] == [
      ("nascli eval --model_dir runs/digits --json   # a comment", 11,
       ["result: {'top_1_accuracy': 0.97} ckpt=runs/digits/ckpt-300"]),
      ("nascli export --model_dir runs/digits", 15,
       ["us-central1/nas:latest", "us-central1/lat:latest"])]
  console = _block("$ nascli eval --model_dir r\nresult: 1.0 ckpt=r/ckpt-3\n$ nascli x", info="")
  assert console.kind == "commands"
  assert [(c.text, c.expected) for c in console.commands()] == [
      ("nascli eval --model_dir r", ["result: 1.0 ckpt=r/ckpt-3"]), ("nascli x", [])]
  assert _block("a/   a folder", info="").action == "unmarked"


def test_quotes_compare_numbers_within_the_tolerance_and_words_exactly():
  quote = "result: {'top_1_accuracy': 0.9694} ckpt=runs/digits/ckpt-300"
  printed = "noise\nresult: {'top_1_accuracy': 0.9693593382835388} ckpt=runs/digits/ckpt-300\n"
  assert docs_blocks.quote_problem(quote, printed) is None  # at the printed precision
  assert docs_blocks.quote_problem(quote.replace("0.9694", "0.9693"), printed) is not None
  off = printed.replace("0.96935", "0.91935")
  assert "0.9193593382835388" in docs_blocks.quote_problem(quote, off)
  assert docs_blocks.quote_problem(quote, off, tolerance=(0.06, False)) is None
  assert docs_blocks.quote_problem(quote, off, tolerance=(0.01, False)) is not None
  assert docs_blocks.quote_problem(quote, off, tolerance=(6.0, True)) is None
  # Integers (steps, counts in paths) and words never move.
  assert docs_blocks.quote_problem(quote, printed.replace("ckpt-300", "ckpt-250"),
                                   tolerance=(1.0, False)) is not None
  assert "no such line" in docs_blocks.quote_problem(quote, printed.replace("runs/", "run/"))
  latency = "latency batch 1: median 6.51 ms, p90 9.39 ms (CPU)"
  assert docs_blocks.quote_problem(latency, "latency batch 1: median 2.02 ms, p90 3.00 ms (CPU)",
                                   vary=True) is None


def test_markers_need_a_reason_and_known_kinds():
  assert docs_blocks.parse_marker('replace "a b" "c" (shorter)', 1).args == ["a b", "c"]
  assert docs_blocks.parse_marker("tolerance 5%", 1).args == ["5%"]
  for bad in ('skip', 'replace "a" "b"', "frobnicate (x)", 'replace "a" (x)', "tolerance x",
              "after docs/nope.md (x)"):
    with pytest.raises(docs_blocks.MarkerError):
      docs_blocks.parse_marker(bad, 1)


def test_markers_change_the_commands_they_name():
  block = _block("nascli search_in_local --max_nas_trial 20   # many\nnascli list_trials j\n"
                 "gcloud auth login", markers=[
                     'replace "--max_nas_trial 20" "--max_nas_trial 2" (short)',
                     'append "--seed 1" "search_in_local" (fixed)',
                     'skip-line "gcloud" (needs Google Cloud)'])
  got = [docs_blocks.prepared(block, c)[0] for c in block.commands()]
  assert got == ["nascli search_in_local --max_nas_trial 2 --seed 1 # many",
                 "nascli list_trials j", None]
  assert docs_blocks.argv_parts("bash scripts/setup.sh && X=1 .venv/bin/nascli list_trials a") == [
      ({}, ["bash", "scripts/setup.sh"]), ({"X": "1"}, [".venv/bin/nascli", "list_trials", "a"])]
  with pytest.raises(docs_blocks.MarkerError):
    docs_blocks.argv_parts("cat hosts.txt | wc -l")


def test_a_failing_command_and_a_wrong_quote_are_reported(tmp_path):
  ws = docs_blocks.Workspace(tmp_path / "ws", tmp_path / "cache")
  block = _block("python -c \"print('step 300 accuracy 0.97')\"\n# stdout: step 300 accuracy 0.95\n"
                 "python -c \"import sys; sys.exit(3)\"")
  problems = docs_blocks._run_block(ws, block)  # pylint: disable=protected-access
  assert len(problems) == 2, problems
  assert "0.95" in problems[0] and "exited 3, not 0" in problems[1]
  again = docs_blocks._run_block(ws, block)  # pylint: disable=protected-access
  assert again == problems and sum(" reused " in line for line in ws.log) == 2


# Pages that need no other page and run in about a minute; the rest (22 minutes in all) are the
# slow tier: `pytest -m slow`.
_DEFAULT_TIER = ("docs/commands/convert-data.md", "docs/commands/build.md")


@pytest.mark.timeout(_RUN_TIMEOUT_S)
@pytest.mark.parametrize("page", [p if p in _DEFAULT_TIER else pytest.param(p, marks=pytest.mark.slow)
                                  for p in PAGES])
def test_page_runs_as_documented(page, docs_workspace):
  problems = docs_blocks.run_page(docs_workspace, page)
  log = "\n".join(line for line in docs_workspace.log if line.startswith(page))
  print(log)  # shown with -rA / on failure: what ran, what was reused, what was skipped and why
  assert not problems, f"{page}:\n" + "\n".join(problems)


def test_workspace_links_the_repository(docs_workspace):
  for name in ("scripts", "tf_vision", ".venv"):
    assert (docs_workspace.folder / name).resolve().is_dir()
  assert pathlib.Path(docs_workspace.env["PATH"].split(":")[0], "nascli").exists()
