"""Records the validation curves of random architectures trained to a full budget: the tabular
benchmark bench_schedulers.py replays (issue 26).

    python bench/bench_record_curves.py [--space mnasnet] [--trials 30] [--steps 810]
        [--points 27] [--seed 0] [--dataset_dir DIR] [--config_file YAML] [--name NAME]
        [--job_dir bench/results/NAME] [--out bench/results/NAME.json]

A plain nascli search (random search: its proposals do not depend on rewards, so the set is
the first --trials architectures of --seed; no early stopping) on the space's embedded data,
every trial trained --steps steps with the testing YAML's recipe stretched to them (cosine
decay over all the steps) and evaluated --points times along its training besides the end
(`TrialSettings.validation_curve_points`: each trial's validation_curve.jsonl). The job is
journaled and resumable: run the same command again after a kill. Then writes the curves JSON
(`bench_schedulers.py --curves`), with the seconds per training step and the machine.

`--run_seed S` trains the same architectures (the first --trials random search proposes with
--seed) with run seed S instead (the internal `fixed` algorithm): a second recording of the
same pool, for the seed-to-seed spread and as the curves of repeats (bench_schedulers.py pairs
curves by architecture). Every curves file also records each curve's architecture (its DNA)
and the trials' fixed costs (`overheads`: seconds to start a trial, per evaluation).
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import bench_schedulers  # pylint: disable=g-import-not-at-top,wrong-import-position
import host  # pylint: disable=g-import-not-at-top,wrong-import-position


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--space", default="mnasnet")
  p.add_argument("--trials", type=int, default=30)
  p.add_argument("--steps", type=int, default=810)
  p.add_argument("--points", type=int, default=27)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--run_seed", type=int, help="train --seed's architectures with this run"
                 " seed (default: --seed)")
  p.add_argument("--dataset_dir", help="a convert-data folder (default: the space's embedded"
                 " data set)")
  p.add_argument("--config_file", help="the recipe (default: the space's testing YAML); its"
                 " schedule is stretched to --steps where it is a cosine decay")
  p.add_argument("--name", help="names the job dir and the curves file (default:"
                 " curves_SPACE_STEPS)")
  p.add_argument("--job_dir")
  p.add_argument("--out")
  a = p.parse_args()
  name = a.name or f"curves_{a.space}_{a.steps}" + (
      "" if a.run_seed is None else f"_seed{a.run_seed}")
  job_dir = a.job_dir or os.path.join(HERE, "results", name)
  out = a.out or os.path.join(HERE, "results", f"{name}.json")
  # pylint: disable=g-import-not-at-top
  from nascli.search import local_main
  from nascli.search import search_loop
  loop = max(1, a.steps // a.points)
  override = (f"trainer.train_steps={a.steps},trainer.steps_per_loop={loop},"
              f"trainer.summary_interval={loop},"
              f"trainer.checkpoint_interval={a.steps},trainer.validation_interval={a.steps}")
  recipe = {}
  if a.config_file:
    import yaml  # pylint: disable=g-import-not-at-top
    with open(a.config_file, encoding="utf-8") as f:
      recipe = yaml.safe_load(f) or {}
  rate = recipe.get("trainer", {}).get("optimizer_config", {}).get("learning_rate", {})
  if rate.get("type", "cosine") == "cosine":
    override += f",trainer.optimizer_config.learning_rate.cosine.decay_steps={a.steps}"
  args = search_loop.SearchArgs(job_dir=job_dir, search_space=a.space,
                                search_algorithm="random", max_nas_trial=a.trials,
                                export_top_k=0)
  args.trial.run.seed = a.seed
  if a.run_seed is not None:
    from nascli.search import controller  # the same proposals random search makes
    from tf_vision.search_spaces import registry
    proposer = controller.Controller(registry.resolve_search_space(a.space, None).build(),
                                     "random", a.seed)
    dnas = [list(proposer.propose_new(set())[0]) for _ in range(a.trials)]
    args.search_algorithm = controller.FIXED
    args.algorithm_options = {"dnas": dnas, "seeds": [a.run_seed] * len(dnas)}
  args.trial.validation_curve_points = a.points
  if a.dataset_dir:
    args.trial.run.data.dataset_dir = a.dataset_dir
  if a.config_file:
    args.trial.run.config_files = [os.path.abspath(a.config_file)]
  started = time.monotonic()
  local_main.run(args, [f"params_override={override}"])
  curves = bench_schedulers.curves_from_jobs([job_dir])
  data = {"task": f"{a.space} on {a.dataset_dir or 'its embedded data'}, random architectures"
                  f" (seed {a.seed}),"
                  f" {a.steps} steps, {a.config_file or 'the testing YAML'}'s recipe",
          "steps": curves.steps, "curves": curves.curves,
          "seconds_per_step": curves.seconds_per_step, "machine": host.machine(),
          "wall_s": round(time.monotonic() - started, 1), "params_override": override,
          "architectures": curves.architectures, "overheads": curves.overheads}
  with open(out, "w", encoding="utf-8") as f:
    json.dump(data, f, indent=1)
  print(f"{len(curves.curves)} curves of {len(curves.steps)} points -> {out}")


if __name__ == "__main__":
  main()
