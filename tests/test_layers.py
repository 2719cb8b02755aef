"""The import layers of pyproject.toml ([tool.importlinter]) hold, and the check fails when one climbs.

import-linter counts imports inside functions too, so a circle hidden in a function fails as
well. The second test copies the packages to a scratch dir, adds one import from a shared
module at the bottom to the search loop above it, and expects exactly the layers contract to
break, naming that import.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Runs import-linter without its cache (a cache dir in the checkout, or a stale answer).
LINT = ("import sys\n"
        "from importlinter.cli import lint_imports\n"
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))\n")
CONTRACTS = ("nascli layers", "schedulers and the journal import no framework",
             "the search algorithms know only their registry",
             "the controller, schedulers, executors and journal never import the loop")


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
  assert "Contracts: 4 kept, 0 broken." in result.stdout
  assert set(_verdicts(result.stdout).values()) == {"KEPT"}


def test_a_lower_layer_importing_a_higher_one_breaks_the_layers_contract(tmp_path):
  for package in ("nascli", "tf_vision"):
    shutil.copytree(ROOT / package, tmp_path / package,
                    ignore=lambda d, names: [n for n in names if n == "__pycache__" or (
                        not n.endswith(".py") and not os.path.isdir(os.path.join(d, n)))])
  shutil.copy(ROOT / "pyproject.toml", tmp_path)
  # nascli.containers (the shared modules) climbs to the search loop, inside a function.
  low = tmp_path / "nascli" / "containers.py"
  line = len(low.read_text(encoding="utf-8").splitlines()) + 4
  with open(low, "a", encoding="utf-8") as f:
    f.write("\n\ndef _climbs():\n  from nascli.search import search_loop  # noqa: F401\n")
  result = _lint(tmp_path)
  assert result.returncode == 1, result.stdout + result.stderr
  assert "Contracts: 3 kept, 1 broken." in result.stdout
  assert _verdicts(result.stdout) == {CONTRACTS[0]: "BROKEN", CONTRACTS[1]: "KEPT",
                                      CONTRACTS[2]: "KEPT", CONTRACTS[3]: "KEPT"}
  assert f"nascli.containers -> nascli.search.search_loop (l.{line})" in result.stdout
