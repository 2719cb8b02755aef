"""`nascli build_latency_model`: a per-device latency model of a search space.

Samples architectures of the space, times each on the target runtime at the size the model will
serve (nascli/latency_model/build_job.py journals it, resumably) and fits the latency model a
search loads with `--latency_model`. Every flag is checked here before TensorFlow, Model Garden
or pyglove is imported: a bad value costs a second, not the 20-40 s of those imports.
"""

import json
import math
import os
import sys
from typing import Annotated, Any, Optional

import typer

from nascli import storage
from nascli.commands import search_flags as f
from nascli.commands.options import flag, given, takes
from nascli.errors import NascliError
from tf_vision.search_spaces import registry as space_registry
from tf_vision.serving import arch_latency

InputSize = Annotated[Optional[int], typer.Option(
    *flag("latency_input_size"), help="Side of the square input the models are timed at: the"
    " size they will serve (default: the space's deployment size, 224 for mnasnet, 640 for"
    " spinenet).", show_default=False)]
NumArchitectures = Annotated[int, typer.Option(
    *flag("num_architectures"), help="Random architectures measured to fit the model.")]
NumHeldout = Annotated[int, typer.Option(
    *flag("num_heldout"), help="Further architectures measured only to report the model's"
    " error on architectures it was not fitted on.")]
NumThreads = Annotated[int, typer.Option(
    *flag("num_threads"), help="Interpreter threads (cpu-tflite), TensorFlow's op threads"
    " (cpu): as the deployed model will run.")]
PinCpus = Annotated[Optional[str], typer.Option(
    *flag("pin_cpus"), help="Pin the measuring process to these CPUs, e.g. 0 or 2,3 or 0-3"
    " (default: not pinned).", show_default=False)]
Runs = Annotated[int, typer.Option(
    *flag("runs"), help="Timed calls per architecture after warm-up (at least; a fast model"
    " gets half a second of calls); the latency is their median.")]
OutputDir = Annotated[Optional[str], typer.Option(
    *flag("local_output_dir"), help="The job dir: the measurement journal (a rerun continues"
    " it) and the model (default: nascli_output/latency_<space>_<runtime>_<size>).",
    show_default=False)]
Output = Annotated[Optional[str], typer.Option(
    *flag("output"), help="The latency model file (default: JOB_DIR/latency_model.json; may be"
    " gs://).", show_default=False)]
RayNodeIp = Annotated[Optional[str], typer.Option(
    *flag("ray_node_ip"), help="With --ray_address: the node to measure on, by its IP (default:"
    " the head node).", show_default=False)]
MeasureLayers = Annotated[bool, typer.Option(
    *flag("measure_layers"), help="Also time every distinct layer of the space alone (938 for"
    " mnasnet, about 1 s each) and offer the layer_lookup predictor: the sum of an"
    " architecture's layers, calibrated on the measured architectures. The most accurate kind"
    " where the space registers its layers (mnasnet); chosen only if it wins the"
    " cross-validation.")]
AsJson = Annotated[bool, typer.Option(
    *flag("json"), help="Print the result as JSON: the model file, its contents and the job's"
    " counts.")]


@takes(f.SPACE, "config_file", "target_device_type", "latency_input_size", "num_architectures",
       "num_heldout", "seed", "num_threads", "pin_cpus", "runs", "local_output_dir", "output",
       "overwrite", "ray_address", "ray_node_ip", f.LOCAL, "measure_layers", "as_json")
def build_latency_model(
    latency_input_size: InputSize = None,
    num_architectures: NumArchitectures = 100,
    num_heldout: NumHeldout = 30,
    num_threads: NumThreads = 1,
    pin_cpus: PinCpus = None,
    runs: Runs = 50,
    local_output_dir: OutputDir = None,
    output: Output = None,
    ray_node_ip: RayNodeIp = None,
    measure_layers: MeasureLayers = False,
    as_json: AsJson = False,
    **shared,
) -> None:
  """Time random architectures of a search space on a target runtime at the serving size and
  fit a latency model (one file) that a search loads with --latency_model."""
  args = _args(given(locals()))
  # numpy and the job come with this command, not with every nascli command's start-up.
  from nascli.latency_model import build_job  # pylint: disable=g-import-not-at-top
  build_job.check_settings(args)  # another job in the dir: refused before TF or pyglove
  result = build_job.run(args, progress=_progress)
  _print(result, as_json)


def _progress(line: str) -> None:
  print(line, file=sys.stderr, flush=True)


def _check_count(name: str, value: int, low: int) -> None:
  if value < low:
    raise NascliError(f"--{name} must be at least {low}, got {value}")


def _cpus(text: str | None, local: bool) -> tuple[int, ...] | None:
  """--pin_cpus `0`, `2,3`, `0-3` (on this machine: CPUs it may run on)."""
  if text is None:
    return None
  cpus: set[int] = set()
  try:
    for part in filter(None, (p.strip() for p in text.split(","))):
      low, _, high = part.partition("-")
      first, last = int(low), int(high or low)
      if first < 0 or last < first:
        raise ValueError(part)
      cpus.update(range(first, last + 1))
  except ValueError:
    raise NascliError(f"--pin_cpus {text!r}: expected CPU numbers such as 0, 2,3 or 0-3"
                      ) from None
  if not cpus:
    raise NascliError(f"--pin_cpus {text!r}: expected CPU numbers such as 0, 2,3 or 0-3")
  if local and hasattr(os, "sched_getaffinity"):
    allowed = os.sched_getaffinity(0)
    if not cpus <= allowed:
      raise NascliError(f"--pin_cpus {text}: CPU {min(cpus - allowed)} is not one this process"
                        f" may run on ({_ranges(sorted(allowed))})")
  return tuple(sorted(cpus))


def _ranges(cpus: list[int]) -> str:
  return ",".join(str(c) for c in cpus) if len(cpus) < 8 else f"{cpus[0]}-{cpus[-1]}"


def _args(values: dict[str, Any]) -> Any:
  """The job's BuildArgs, every flag checked in one line naming it (no framework imported)."""
  from nascli.latency_model import build_job  # pylint: disable=g-import-not-at-top
  f.check_space(values)  # --prebuilt_search_space, --search_space_module: as the searches do
  space, module = values["prebuilt_search_space"], values["search_space_module"]
  runtime = values["target_device_type"]
  if runtime not in arch_latency.RUNTIMES:
    raise f.unknown("target_device_type", runtime, list(arch_latency.RUNTIMES))
  size = values["latency_input_size"]
  if size is None:
    size = arch_latency.serving_size(space).default
  arch_latency.check_input_size(space, size)
  from nascli.latency_model import predictors  # pylint: disable=g-import-not-at-top
  _check_count("num_architectures", values["num_architectures"], predictors.MIN_ROWS)
  _check_count("num_heldout", values["num_heldout"], 0)
  _check_count("num_threads", values["num_threads"], 1)
  _check_count("runs", values["runs"], 3)
  if not 0 <= values["seed"] < 2**31:
    raise NascliError(f"--seed {values['seed']} is out of range; allowed: 0 to 2**31 - 1")
  ray_address = values["ray_address"]
  for name in ("ray_node_ip", "ray_num_cpus", "ray_temp_dir"):
    if values[name] is not None and not ray_address:
      raise NascliError(f"--{name} is an option of --ray_address")
  if values["ray_num_cpus"] is not None and ray_address != "local":
    raise NascliError("--ray_num_cpus is an option of --ray_address local")
  cpus = _cpus(values["pin_cpus"], local=not ray_address)
  if cpus and len(cpus) < values["num_threads"]:
    raise NascliError(f"--num_threads {values['num_threads']} on {len(cpus)} pinned CPU(s)"
                      f" (--pin_cpus {values['pin_cpus']}): the threads would share them; pin"
                      " as many CPUs as threads")
  if values["measure_layers"] and not module:  # a module's space is known once imported
    from tf_vision.serving import layer_latency  # pylint: disable=g-import-not-at-top
    why = layer_latency.available(space, runtime)
    if why:
      raise NascliError(f"--measure_layers: {why}")
  configs = list(values["config_file"] or [])
  for path in configs:
    if not storage.is_gcs(path) and not os.path.isfile(path):
      raise NascliError(f"--config_file {path}: no such file")
    from tf_vision.configs import yaml_source  # pylint: disable=g-import-not-at-top
    yaml_source.check(path, "--config_file")
  if not configs:  # only the architecture and the input size matter: the space's testing YAML
    defaults = space_registry.get_entry(space).defaults
    configs = [defaults.config_path()] if defaults else []
  job_dir = values["local_output_dir"] or build_job.default_job_dir(
      space, module, runtime, size, values["num_threads"])
  if os.path.exists(job_dir) and not os.path.isdir(job_dir):
    raise NascliError(f"--local_output_dir {job_dir} is a file; the job needs a folder there")
  output = values["output"]
  if output and not storage.is_gcs(output):
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
      raise NascliError(f"--output {output}: folder {parent} does not exist")
  if not values["local_output_dir"]:
    _progress(f"job dir: {job_dir} (the default for this space, runtime, size and threads;"
              " --local_output_dir to choose)")
  return build_job.BuildArgs(
      job_dir=job_dir, search_space=space, search_space_module=module,
      config_files=tuple(configs), runtime=runtime, input_size=size,
      num_architectures=values["num_architectures"], num_heldout=values["num_heldout"],
      seed=values["seed"], num_threads=values["num_threads"], runs=values["runs"],
      pin_cpus=cpus, output=output, overwrite=values["overwrite"], ray_address=ray_address,
      ray_node_ip=values["ray_node_ip"], ray_num_cpus=values["ray_num_cpus"],
      ray_temp_dir=values["ray_temp_dir"], measure_layers=values["measure_layers"])


def _pct(value: float | None, scale: float = 1.0) -> str:
  return "n/a" if value is None or not math.isfinite(value) else f"{value * scale:.1f}%"


def _print(result: dict[str, Any], as_json: bool) -> None:
  if as_json:
    print(json.dumps(result, indent=2))
    return
  model = result["latency_model"]
  print(f"latency model: {result['model']}")
  print(result["describe"])
  held = model.get("heldout") or {}
  if held.get("n"):
    tau = held["kendall_tau"]
    print(f"held-out architectures ({held['n']}, not fitted on):")
    print(f"  Kendall tau       {'n/a' if tau is None else f'{tau:.3f}'}")
    print(f"  within ±10%       {_pct(held['within_10pct'], 100)}")
    print(f"  MAPE              {_pct(held['mape'])}")
    print(f"  worst error       {_pct(held['max_abs_pct'])}")
  else:
    print("held-out architectures: none (--num_heldout 0): the model's error is not checked")
  cv = ", ".join(f"{kind} {_pct(err)}" for kind, err in (model.get("cv") or {}).items())
  print(f"cross-validated MAPE by kind: {cv} (kept: {model['predictor']['kind']})")
  refs = result["reference_ms"]
  drift = f"; reference {refs[-1]:.3g} ms, {refs[0]:.3g} ms when the job began" if refs else ""
  layers = f", {result['layers']} layers timed alone" if result.get("layers") else ""
  print(f"measurements: {result['measured']}{layers} in {result['sessions']} session(s),"
        f" {len(result['noisy'])} noisy, {len(result['failed'])} failed{drift}"
        f" ({result['journal']})")
