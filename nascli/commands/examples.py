"""The examples at the end of each command's help, and usage lines Click cannot derive.

Kept out of the command modules so that help text and command code change independently.
Every example is a real command: tests/test_help.py parses each one with its command's options,
and the flows are the README's (convert -> train -> eval -> export; search -> list_trials ->
stage 2). A long command is shown continued with `\`, broken before an option, so that no line
wraps at 80 columns.
"""

# Command name -> (what it does, the command line), in the order shown.
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "nascli": (
        ("Convert data, train, evaluate, export:",
         "nascli convert-data digits --output_dir data/digits"),
        ("", "nascli train --dataset_dir data/digits --model_dir runs/digits"),
        ("", "nascli eval --model_dir runs/digits"),
        ("", "nascli export --model_dir runs/digits --input_type image_bytes"),
        ("Search on the embedded digits, list the trials, retrain trial 3:",
         "nascli search_in_local --prebuilt_search_space=mnasnet"),
        ("", "nascli list_trials nascli_output/search_mnasnet"),
        ("", "nascli train --search_job_dir nascli_output/search_mnasnet"
             " --train_nas_trial_numbers 3 --dataset_dir data/digits --model_dir runs/stage2"),
    ),
    "convert-data": (
        ("The embedded digits (no network) as sharded TFRecords:",
         "nascli convert-data digits --output_dir data/digits"),
        ("A folder with one sub-folder per class, 20% held out for validation:",
         "nascli convert-data imagefolder --source photos/ --validation_fraction 0.2"),
        ("Detection data as labelling tools export it: a COCO JSON and an image folder:",
         "nascli convert-data coco --object_annotations_file labels.json --image_dir images/"),
        ("Decode every record of a finished conversion and check its shards:",
         "nascli convert-data --verify data/digits"),
    ),
    "train": (
        ("Train the default classifier on a convert-data folder:",
         "nascli train --dataset_dir data/digits --model_dir runs/digits"),
        ("The same with FastNN hyperparameters:",
         "nascli train --dataset_dir data/digits --model_dir runs/sgd --optimizer"
         " momentum --learning_rate 0.1 --batch_size 32"),
        ("Stage 2: retrain trial 3 of a search (into runs/stage2/3):",
         "nascli train --search_job_dir nascli_output/search_mnasnet"
         " --train_nas_trial_numbers 3 --dataset_dir data/digits --model_dir runs/stage2"),
    ),
    "eval": (
        ("Top-1/top-5 (or COCO AP) of the latest checkpoint:",
         "nascli eval --model_dir runs/digits"),
        ("A retrained search trial, as JSON:",
         "nascli eval --model_dir runs/stage2/3 --json"),
    ),
    "export": (
        ("A SavedModel that takes encoded images, timed on this device:",
         "nascli export --model_dir runs/digits --input_type image_bytes --measure_latency"),
        ("A retrained search trial, into a folder of your choice:",
         "nascli export --model_dir runs/stage2/3 --export_dir exported/trial3"),
    ),
    "search_in_local": (
        ("Search the mnasnet space on the embedded digits (4 trials):",
         "nascli search_in_local --prebuilt_search_space=mnasnet"),
        ("Eight trials, two at a time, under a 2 ms latency target:",
         "nascli search_in_local --prebuilt_search_space=mnasnet --max_nas_trial 8"
         " --max_parallel_nas_trial 2 --target_device_latency_ms 2"),
        ("A new search on other data, its controller seeded with an old job's results:",
         "nascli search_in_local --dataset_dir data/digits --warm_start_from"
         " nascli_output/search_mnasnet --local_output_dir runs/warm"),
    ),
    "search": (
        ("The same search on a private Ray instance of this machine:",
         "nascli search --ray_address local --ray_num_cpus 2 --max_parallel_nas_trial 2"),
        ("On a running Ray cluster, one GPU per trial, the job dir on shared storage:",
         "nascli search --ray_address auto --num_gpus_per_trial 1 --local_output_dir"
         " /shared/runs/search"),
    ),
    "search_resume": (
        ("Continue a finished 4-trial search to 8 trials, in a new job beside it:",
         "nascli search_resume --previous_job_dir nascli_output/search_mnasnet"
         " --max_nas_trial 8"),
        ("The same into a folder of your choice, two trials at a time:",
         "nascli search_resume --previous_job_dir runs/search --max_nas_trial 8"
         " --local_output_dir runs/search_more --max_parallel_nas_trial 2"),
    ),
    "select_proxy_task_models": (
        ("Reference models for proxy-task design: 30 random architectures trained with the"
         " reference recipe, 10 kept:",
         "nascli select_proxy_task_models --prebuilt_search_space=mnasnet --params_override"
         " trainer.train_steps=1500 --local_output_dir runs/proxy_models"),
        ("A small study: 8 models trained, 4 kept, on a private Ray instance:",
         "nascli select_proxy_task_models --max_nas_trial 8 --final_num_models 4"
         " --num_models_to_remove_per_iter 2 --ray_address local"),
    ),
    "search_proxy_task": (
        ("The cheapest of 10/25/50 % of the reference steps whose scores rank the selected"
         " models as the reference does (Kendall tau >= 0.65):",
         "nascli search_proxy_task --proxy_task_model_selection_dir runs/proxy_models"),
        ("Steps, image sizes and data fractions, every combination, cheapest first:",
         "nascli search_proxy_task --proxy_task_model_selection_dir runs/proxy_models"
         " --proxy_train_steps 100,300 --proxy_image_sizes 24,32"
         " --proxy_train_data_fractions 0.5,1"),
    ),
    "measure_proxy_task_variance": (
        ("One architecture trained 5 times (seeds 0-4) under the proxy, its noise compared"
         " with a search's spread:",
         "nascli measure_proxy_task_variance --config_file"
         " runs/proxy_search/proxy_task.yaml --compare_with nascli_output/search_mnasnet"),
        ("A given architecture, 3 runs:",
         "nascli measure_proxy_task_variance --nas_params_str runs/search/1/nas_params_str.json"
         " --max_nas_trial 3"),
    ),
    "list_trials": (
        ("The trials of a search, best reward first:",
         "nascli list_trials nascli_output/search_mnasnet"),
        ("The three best completed trials, as JSON:",
         "nascli list_trials nascli_output/search_mnasnet --max_trials 3 --status completed"
         " --json"),
    ),
    "report": (
        ("The search as one page (progress, front, curves, importance, trials):",
         "nascli report nascli_output/search_mnasnet"),
        ("A search_proxy_task job: each candidate's correlation against its cost:",
         "nascli report runs/proxy_search"),
    ),
    "run_latency_calculator_local": (
        ("Beside a search with --latency_calculator external: time its trials as TFLite"
         " models on this machine, until the search ends:",
         "nascli run_latency_calculator_local --local_output_dir runs/search"
         " --target_device_type cpu-tflite"),
        ("Two calculators share the work (the second runs --latency_worker_id 1):",
         "nascli run_latency_calculator_local --local_output_dir runs/search"
         " --num_latency_workers 2 --latency_worker_id 0"),
        ("Measure what waits now, then exit:",
         "nascli run_latency_calculator_local --local_output_dir runs/search --once"),
    ),
    "build_latency_model": (
        ("A latency model of mnasnet on this CPU: TFLite, 1 thread, 224x224 (130 models):",
         "nascli build_latency_model --prebuilt_search_space=mnasnet --pin_cpus 0"),
        ("The same timed on a node of a Ray cluster, 2 interpreter threads on CPUs 2-3:",
         "nascli build_latency_model --ray_address auto --ray_node_ip 10.0.0.5"
         " --num_threads 2 --pin_cpus 2,3"),
    ),
    "build": (
        ("Print the docker commands that build and push the trainer image:",
         "nascli build --project_id my-proj --region us-central1 --trainer_docker_id"
         " nas-trainer --dry_run"),
    ),
}

# Command name -> its usage lines (after `Usage: nascli NAME`), where Click's would mislead:
# convert-data's NAME is optional to Click only because --verify DIR replaces it.
USAGE: dict[str, tuple[str, ...]] = {
    "convert-data": ("[OPTIONS] NAME", "--verify DIR [--json]"),
}

_WIDTH = 76  # 80 columns less Rich's padding and the indent.


def _escape(text: str) -> str:
  return text.replace("[", r"\[")  # Rich markup: the help is rendered in markup mode


def command_lines(command: str) -> list[str]:
  """A long command as shell lines continued with `\\`, broken only before an option."""
  units: list[str] = []
  for word in command.split(" "):
    if units and not word.startswith("--"):
      units[-1] += " " + word  # an option's value stays with it
    else:
      units.append(word)
  lines, line = [], ""
  for unit in units:
    if line and len(line) + 1 + len(unit) > _WIDTH - 4:
      lines.append(line + " \\")
      line = "  " + unit
    else:
      line = f"{line} {unit}" if line else unit
  return lines + [line]


def epilog(name: str) -> str | None:
  """The "Examples" section of a command's help, in Rich markup; None for a command without."""
  examples = EXAMPLES.get(name)
  if not examples:
    return None
  parts = ["[bold]Examples[/bold]"]
  for what, command in examples:
    lines = ([_escape(what)] if what else []) + ["  " + _escape(l) for l in command_lines(command)]
    if what or len(parts) == 1:
      parts.append("\n".join(lines))
    else:  # the next step of the same flow: no blank line before it
      parts[-1] += "\n" + "\n".join(lines)
  return "\n\n".join(parts)
