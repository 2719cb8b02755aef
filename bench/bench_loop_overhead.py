"""The search loop's own cost: a default search's wall time against its trials' training and
evaluation, for two commits side by side (issue 48, item 7).

    python bench/bench_loop_overhead.py [--old REV] [--rounds 2] [--out FILE]
                                        [--work_dir /tmp/nascli_bench_loop]

Each run is the real command with no flags, as a user types it:
`python -m nascli search_in_local --prebuilt_search_space=mnasnet` in a fresh folder (its
default job dir, trial count, testing YAML, embedded digits data, exports of the best three at
the end), once with this checkout's code and once with the code of `--old` (extracted with
`git archive` and put first on PYTHONPATH, so the same venv runs both), alternating (old new,
then new old) so the machine's drift falls on both. The embedded data is converted into a
shared cache before anything is timed.

Reported per run, from what the search wrote:
  wall_s        the command's wall time, start to exit;
  work_s        the sum of the trials' `train_total_s` (model_analysis.json `timing`: the
                training phase, model build, tracing and evaluation included);
  ratio         wall_s / work_s, the loop's cost as the issue measures it;
  before_first  command start -> the first trial's `started` event (imports, config check,
                worker start);
  between       the sum of the gaps from one trial's outcome to the next trial's start;
  in_trials     the trials' own time outside training (latency, analysis, start-up);
  after_last    the last trial's outcome -> exit (exports of the best trials, final outputs).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tarfile
import io
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMAND = ["-m", "nascli", "search_in_local", "--prebuilt_search_space=mnasnet"]


def _tree(rev: str, work: Path) -> Path:
  """The code of `rev` in a folder of its own (our own repository's archive)."""
  out = work / f"tree-{rev}"
  if not (out / "nascli").is_dir():
    data = subprocess.run(["git", "archive", rev, "nascli", "tf_vision"], cwd=REPO,
                          check=True, capture_output=True).stdout
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
      tar.extractall(out, filter="data")
  return out


# The venv's editable install of this checkout is found before PYTHONPATH: for the old tree,
# every process of the search (driver, workers) drops that finder as it starts.
_SHIM = """import sys
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in repr(f)]
"""


def _env(tree: Path | None, work: Path) -> dict[str, str]:
  env = dict(os.environ, NASCLI_CACHE_DIR=str(work / "cache"), PYTHONUNBUFFERED="1")
  if tree is not None:
    shim = work / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(_SHIM)
    env["PYTHONPATH"] = os.pathsep.join([str(shim), str(tree)])
  return env


def _time(text: str) -> float:
  return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
      tzinfo=datetime.timezone.utc).timestamp()


def run_once(label: str, tree: Path | None, work: Path, n: int) -> dict:
  folder = work / f"run-{label}-{n}"
  if folder.exists():
    subprocess.run(["rm", "-rf", str(folder)], check=True)
  folder.mkdir(parents=True)
  start_wall = time.time()
  start = time.monotonic()
  done = subprocess.run([sys.executable, *COMMAND], cwd=folder, env=_env(tree, work),
                        capture_output=True, text=True, check=False)
  wall = time.monotonic() - start
  end_wall = start_wall + wall
  if done.returncode != 0:
    raise SystemExit(f"{label} run {n} failed ({done.returncode}): {done.stderr[-2000:]}")
  job = folder / "nascli_output" / "search_mnasnet"
  events = [json.loads(line) for line in (job / "journal.jsonl").read_text().splitlines()]
  trials = sorted({e["trial_id"] for e in events if e.get("event") == "completed"}, key=int)
  timing = {t: json.loads((job / t / "model_analysis.json").read_text())["timing"]
            for t in trials}
  starts = [_time(e["time"]) for e in events if e.get("event") == "started"]
  ends = [_time(e["time"]) for e in events if e.get("event") in ("completed", "failed")]
  work_s = sum(t["train_total_s"] for t in timing.values())
  in_trials = sum(t["total_s"] - t["train_total_s"] for t in timing.values())
  between = sum(max(0.0, s - e) for s, e in zip(starts[1:], ends[:-1]))
  return {"label": label, "run": n, "trials": len(trials), "wall_s": round(wall, 2),
          "work_s": round(work_s, 2), "ratio": round(wall / work_s, 3),
          "before_first_s": round(starts[0] - start_wall, 2),
          "between_s": round(between, 2), "in_trials_s": round(in_trials, 2),
          "after_last_s": round(end_wall - ends[-1], 2)}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--old", default="9d1929b", help="the commit to compare with")
  parser.add_argument("--rounds", type=int, default=2)
  parser.add_argument("--work_dir", default="/tmp/nascli_bench_loop")
  parser.add_argument("--out", default=str(REPO / "bench" / "results" / "loop_overhead.json"))
  args = parser.parse_args()
  work = Path(args.work_dir)
  work.mkdir(parents=True, exist_ok=True)
  old = _tree(args.old, work)
  subprocess.run([sys.executable, "-c", "from nascli.search import local_main;"
                  " local_main.embedded_dataset('mnasnet')"], cwd=work, env=_env(None, work),
                 check=True)
  runs = []
  for r in range(args.rounds):
    order = (("old", old), ("new", None)) if r % 2 == 0 else (("new", None), ("old", old))
    for label, tree in order:
      runs.append(run_once(label, tree, work, r))
      print(json.dumps(runs[-1]), file=sys.stderr)
  summary = {}
  for label in ("old", "new"):
    mine = [x for x in runs if x["label"] == label]
    summary[label] = {k: round(statistics.median(x[k] for x in mine), 3)
                      for k in ("wall_s", "work_s", "ratio", "before_first_s", "between_s",
                                "in_trials_s", "after_last_s")}
  result = {"old": args.old, "new": subprocess.run(
      ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
      check=True).stdout.strip(), "command": " ".join(["python", *COMMAND]),
            "host": os.uname().nodename, "cpus": os.cpu_count(), "runs": runs,
            "median": summary}
  Path(args.out).parent.mkdir(parents=True, exist_ok=True)
  Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
  print(json.dumps(summary, indent=2))


if __name__ == "__main__":
  main()
