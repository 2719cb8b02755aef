"""The import contracts of pyproject.toml ([tool.importlinter]) hold, and fail when one is broken.

import-linter counts imports inside functions too, so a circle hidden in a function fails as
well. The second test copies the packages to a scratch dir, adds one import inside a function
(a shared module at the bottom importing the search loop; the rung ladder importing the
scheduler that imports it) and expects exactly the contract it breaks to fail.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Runs import-linter without its cache (a cache dir in the checkout, or a stale answer).
LINT = ("import sys\n"
        "from importlinter.cli import lint_imports\n"
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))\n")
CONTRACTS = ("nascli layers", "schedulers and the journal import no framework",
             "the search algorithms know only their registry",
             "the controller, schedulers, executors and journal never import the loop",
             "no circles among the modules")


def _lint(cwd: Path) -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONPATH": str(cwd)}  # the packages under `cwd`, not the install
  return subprocess.run([sys.executable, "-c", LINT], cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=120, check=False)


def _verdicts(output: str) -> dict[str, str]:
  """{contract name prefix: KEPT or BROKEN} from lint-imports' summary (names may wrap)."""
  flat = " ".join(output.split())
  out = {}
  for name in CONTRACTS:
    at = flat.index(name)
    kept, broken = flat.find("KEPT", at), flat.find("BROKEN", at)
    out[name] = "BROKEN" if broken != -1 and (kept == -1 or broken < kept) else "KEPT"
  return out


def test_the_repository_keeps_every_import_contract():
  result = _lint(ROOT)
  assert result.returncode == 0, result.stdout + result.stderr
  assert "Contracts: 5 kept, 0 broken." in result.stdout
  assert set(_verdicts(result.stdout).values()) == {"KEPT"}


@pytest.mark.parametrize("module, imported, broken, says", [
    # The shared modules at the bottom climb to the search loop.
    ("containers", "nascli.search.search_loop", CONTRACTS[0],
     "nascli.containers -> nascli.search.search_loop (l.{line})"),
    # A circle hidden in a function: the ladder imports the scheduler, which imports it.
    ("search/rungs", "nascli.search.scheduler", CONTRACTS[4],
     "No cycles are allowed in nascli.search."),
])
def test_one_bad_import_breaks_exactly_its_contract(tmp_path, module, imported, broken, says):
  for package in ("nascli", "tf_vision"):
    shutil.copytree(ROOT / package, tmp_path / package,
                    ignore=lambda d, names: [n for n in names if n == "__pycache__" or (
                        not n.endswith(".py") and not os.path.isdir(os.path.join(d, n)))])
  shutil.copy(ROOT / "pyproject.toml", tmp_path)
  path = tmp_path / "nascli" / f"{module}.py"
  line = len(path.read_text(encoding="utf-8").splitlines()) + 4
  package, name = imported.rsplit(".", 1)
  with open(path, "a", encoding="utf-8") as f:
    f.write(f"\n\ndef _bad():\n  from {package} import {name}  # noqa: F401\n")
  result = _lint(tmp_path)
  assert result.returncode == 1, result.stdout + result.stderr
  assert "Contracts: 4 kept, 1 broken." in result.stdout
  assert _verdicts(result.stdout) == {c: "BROKEN" if c == broken else "KEPT" for c in CONTRACTS}
  assert says.format(line=line) in result.stdout
