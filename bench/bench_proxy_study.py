"""The proxy study (issue 26): do short trainings rank architectures as a longer one does?

    python bench/bench_proxy_study.py [--models 10] [--reference_steps 400]
        [--budgets 25,50,100,200] [--variance_runs 5] [--space mnasnet] [--steps_per_loop 20]
        [--work_dir bench/results/proxy_study] [--out bench/results/proxy_study.json]

Runs the three proxy-task commands as a user would, on the space's embedded data and testing
YAML (mnasnet: digits; every score on its validation split, the test split untouched): `select_proxy_task_models` trains --models random architectures for
--reference_steps (the cosine schedule stretched to them), `search_proxy_task` trains every one
of them again at each budget (the reference schedule shortened; --no_early_stop so that every
budget is measured), and `measure_proxy_task_variance` trains the first model --variance_runs
times under the testing YAML as it is, compared with the reference models' spread. Prints a
markdown table: Kendall tau against the reference per budget, the variance, and the proxy
search_proxy_task chose. Job dirs stay in --work_dir, so a rerun continues or only reports.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import host  # noqa: E402  pylint: disable=wrong-import-position

TESTING_YAML = {"mnasnet": "tf_vision/test_files/fast_nas_classification_search_for_testing.yaml",
                "spinenet": "tf_vision/test_files/fast_nas_detection_spinenet_search_for_testing.yaml"}


def nascli(*args: str) -> dict:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  start = time.monotonic()
  proc = subprocess.run([sys.executable, "-m", "nascli", *args, "--json"], capture_output=True,
                        text=True, env=env, check=False)
  if proc.returncode != 0:
    sys.exit(f"nascli {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
  print(f"{args[0]}: {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
  return json.loads(proc.stdout)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--space", default="mnasnet", choices=sorted(TESTING_YAML))
  p.add_argument("--models", type=int, default=10)
  p.add_argument("--reference_steps", type=int, default=400)
  p.add_argument("--budgets", default="25,50,100,200")
  p.add_argument("--variance_runs", type=int, default=5)
  p.add_argument("--steps_per_loop", type=int, default=20, help="of the reference training")
  p.add_argument("--work_dir", default=os.path.join(HERE, "results", "proxy_study"))
  p.add_argument("--out", default=os.path.join(HERE, "results", "proxy_study.json"))
  a = p.parse_args()
  steps = a.reference_steps
  reference = (f"trainer.train_steps={steps},trainer.steps_per_loop={a.steps_per_loop},"
               f"trainer.summary_interval={a.steps_per_loop},"
               f"trainer.checkpoint_interval={steps},trainer.validation_interval={steps},"
               f"trainer.optimizer_config.learning_rate.cosine.decay_steps={steps}")
  space = a.space
  selection_dir = os.path.join(a.work_dir, f"proxy_models_{space}")
  started = time.monotonic()
  selection = nascli("select_proxy_task_models", "--prebuilt_search_space", space,
                     "--max_nas_trial", str(a.models), "--final_num_models", str(a.models),
                     "--latency_metric_id", "none", "--params_override", reference,
                     "--local_output_dir", selection_dir)
  search = nascli("search_proxy_task", "--proxy_task_model_selection_dir", selection_dir,
                  "--proxy_train_steps", a.budgets, "--no_early_stop_proxy_task_if_not_best",
                  "--local_output_dir", os.path.join(a.work_dir, f"proxy_search_{space}"))
  # The testing YAML's noise, against the spread of the candidate that trains as it does (as
  # many steps) when there is one, else of the reference models.
  import yaml  # pylint: disable=g-import-not-at-top
  with open(TESTING_YAML[space], encoding="utf-8") as f:
    testing_steps = yaml.safe_load(f)["trainer"]["train_steps"]
  same = [c for c in search["candidates"] if c["train_steps"] == testing_steps and c["job_dir"]
          and os.path.exists(c["job_dir"])]
  compare = same[0]["job_dir"] if same else selection_dir
  variance = nascli("measure_proxy_task_variance", "--prebuilt_search_space", space,
                    "--max_nas_trial", str(a.variance_runs), "--nas_params_str",
                    json.dumps(selection["models"][0]["nas_params"]), "--compare_with",
                    compare, "--local_output_dir",
                    os.path.join(a.work_dir, f"proxy_variance_{space}"))
  scores = sorted(m["accuracy"] for m in selection["models"])
  result = {"machine": host.machine(),
            "space": space, "models": a.models, "reference_steps": steps,
            "reference_scores": scores, "candidates": search["candidates"],
            "chosen": search["chosen"], "variance": variance,
            "seconds": round(time.monotonic() - started)}
  os.makedirs(os.path.dirname(a.out), exist_ok=True)
  with open(a.out, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=2)
  print(f"reference: {a.models} models x {steps} steps, {a.space}; scores"
        f" {scores[0]:.3f}-{scores[-1]:.3f}\n")
  print("| proxy | steps | Kendall tau vs reference [90% interval] | p | median accuracy"
        " | status |")
  print("|---|---|---|---|---|---|")
  for c in search["candidates"]:
    corr = c["accuracy_correlation"] or {}
    interval = corr.get("interval")
    tau = "n/a" if corr.get("tau") is None else f"{corr['tau']:.3f}" + (
        f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")
    pv = "n/a" if corr.get("p_value") is None else f"{corr['p_value']:.3f}"
    med = "-" if c["median_accuracy"] is None else f"{c['median_accuracy']:.4f}"
    print(f"| {c['name']} | {c['train_steps']} | {tau} | {pv} | {med} | {c['status']} |")
  v = variance
  print(f"\nvariance of the testing YAML ({a.variance_runs} seeds, model"
        f" {selection['models'][0]['trial_id']}): CV {v['variance']:.4f}, run-to-run std"
        f" {v['run_to_run_std']:.4f} around {v['mean_accuracy']:.4f}; smoothness"
        f" {v['smoothness'] if v['smoothness'] is None else round(v['smoothness'], 3)}")
  if v.get("verdict"):
    print(f"against {v['verdict']['compared_with']}: {v['verdict']['message']}")
  print(f"chosen proxy: {search['chosen']}; {result['seconds']} s in all")


if __name__ == "__main__":
  main()
