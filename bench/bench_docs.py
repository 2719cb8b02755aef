"""Wall time of the README's timed promises: the main job ("a few minutes on a 2-core CPU") and
quick start 1 ("all four commands together took about 3 minutes on a busy 2-core CPU").

    python bench/bench_docs.py [--out result.json] [--only main_job|quick_start_1]

Why: tests/test_docs_run.py runs every documented command, but shortened (2 trials, fewer
steps) and with a time limit, never a timing assertion. Here the two blocks run as the README
has them, unshortened (only `bash scripts/setup.sh && ` is dropped: this runs in the venv it
made), each in a fresh folder with a fresh NASCLI_CACHE_DIR (the main job's first use converts
the embedded digits, as on a fresh machine), the same way the test runs them (tests/docs_blocks.py:
argv from the page, `nascli` from the venv). Reported: each command's wall time and exit code,
the block's total, what the README promises, and the machine with how busy it was (other
processes' CPUs during the run; on a shared machine that inflates the times).
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench")]

import docs_blocks  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import host  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

# name -> (the first line of the README block, the README's promise, the promise in seconds)
BLOCKS = {
    "main_job": ("bash scripts/setup.sh && .venv/bin/nascli convert-data digits_clutter",
                 "about 6 minutes on a 2-core CPU", 6 * 60),
    "quick_start_1": ("nascli convert-data digits --output_dir data/digits      # 1,438",
                      "about 3 minutes on a busy 2-core CPU", 3 * 60),
}


def readme_block(first: str) -> docs_blocks.Block:
  blocks = [b for b in docs_blocks.page_blocks(ROOT / "README.md")
            if b.lines and b.lines[0].startswith(first)]
  assert len(blocks) == 1, f"README.md has {len(blocks)} blocks starting {first!r}"
  return blocks[0]


def run_block(name: str) -> dict:
  first, promise, promised_s = BLOCKS[name]
  block = readme_block(first)
  with tempfile.TemporaryDirectory(prefix=f"bench_docs_{name}_") as tmp:
    ws = docs_blocks.Workspace(Path(tmp) / "ws", Path(tmp) / "cache")
    steps, total = [], 0.0
    busy0, own0 = host.machine_busy(), sum(os.times()[:4])
    for command in block.commands():
      text = command.text.replace("bash scripts/setup.sh && ", "")  # the venv is made
      for env, argv in docs_blocks.argv_parts(text):
        start = time.perf_counter()
        ran, _ = ws.run_argv(env, argv, f"README.md:{command.line}")
        seconds = time.perf_counter() - start
        total += seconds
        steps.append({"command": " ".join(argv), "exit_code": ran.code,
                      "wall_s": round(seconds, 1)})
        print(f"{name}: {seconds:7.1f} s  exit {ran.code}  {' '.join(argv)}", file=sys.stderr)
    own = sum(os.times()[:4]) - own0
    foreign = max(0.0, (host.machine_busy() - busy0) - own) / max(total, 1e-9)
  return {"block": f"README.md:{block.line}", "promise": promise, "promised_s": promised_s,
          "wall_s": round(total, 1), "within_promise": total <= promised_s,
          "other_processes_cpus": round(foreign, 2), "commands": steps}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", help="also write the result as JSON here")
  parser.add_argument("--only", choices=sorted(BLOCKS), action="append")
  args = parser.parse_args()
  result = {"machine": host.machine(), "runs": {}}
  for name in args.only or BLOCKS:
    result["runs"][name] = run_block(name)
  text = json.dumps(result, indent=2)
  print(text)
  if args.out:
    Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
  main()
