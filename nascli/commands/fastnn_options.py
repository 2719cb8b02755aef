"""FastNN's hyperparameters as command-line options, generated from the one table that also
parses hparams files (`tf_vision.configs.fastnn_keys.FASTNN_KEYS`), so an option and a file line
can never disagree: each option's value goes through the same `coerce_value`.

Help shows each option's type and what an unset option means in nascli. An unset option is
`None`, "not given": the experiment's config keeps its value (FastNN's own defaults apply only
where a file or an option selects a group, e.g. an optimizer's parameters after `--optimizer`).
Boolean keys are flags (`--use_fp16`; `--no_use_fp16` turns one off); FastNN's spelling with a
value (`--use_fp16 False`, `--use_fp16=false`) still works (`bool_values_as_flags`).
"""

import functools
import inspect
from typing import Annotated, Any, Callable, Optional, Sequence

import typer

from nascli.commands.help_layout import rewrite_flags
from nascli.commands.options import flag
from tf_vision.configs import fastnn_keys as fastnn

# Keys that are options of the command itself (they choose data and directories).
OWN_KEYS = frozenset({"dataset_name", "dataset_dir", "train_files", "model_dir"})
PANEL = "FastNN hyperparameters (also accepted in --hparams_file as key=value)"
COMPAT_PANEL = "FastNN options accepted without effect (TF2 and Model Garden replace them)"

_CONFIG = "Unset: the config's value."
_WITH_OPTIMIZER = "Unset: with --optimizer, FastNN's {default!r}; else the config's value."
_WITH_SCHEDULE = ("Unset: the config's schedule; once any learning-rate option is given, FastNN's"
                  " {default!r}.")
_WITH_WARMUP = "Unset: the config's warmup; with the other warmup option, FastNN's {default!r}."

# key -> (what it does, what an unset option means). Keys in `NO_EFFECT` have only the first.
HELP: dict[str, tuple[str, ...]] = {
    "num_sample_per_epoch": ("Training images per epoch, for --num_epochs.",
                             "Unset: the data set's (dataset_info.json)."),
    "num_classes": ("Classes of the classifier (task.model.num_classes).",
                    "Unset: the data set's (dataset_info.json), else the config's."),
    "eval_files": ("Comma list of validation files in --dataset_dir.",
                   "Unset: the data set's validation split."),
    "shuffle_buffer_size": ("Training examples in the shuffle buffer.", _CONFIG),
    "prefetch_buffer_size": ("Batches prefetched.", _CONFIG),
    "datasets_use_caching": ("Cache decoded training examples (random augmentation is then"
                             " fixed after the first epoch).", _CONFIG),
    "labels_offset": ("Must be 0: labels are read as stored (convert-data writes them from 0).",
                      "Unset: 0."),
    "task_type": ("finetune starts from --ckpt_file_name.", "Unset: pretrain."),
    "model_name": ("FastNN's network name as a Model Garden backbone: resnet_v1_50 (also 101,"
                   " 152, 200), mobilenet_v1, mobilenet_v2, mnasnet_a1, ...",
                   "Unset: the experiment's backbone."),
    "num_epochs": ("Training length in epochs (--stop_at_step wins).",
                   "Unset: the config's trainer.train_steps."),
    "weight_decay": ("L2 weight decay (task.losses.l2_weight_decay).", _CONFIG),
    "max_gradient_norm": ("Clip gradients to this global norm.",
                          "Unset: the config's (no clipping unless it sets some)."),
    "batch_size": ("Batch size per replica (times replicas: the global batch).",
                   "Unset: the config's global_batch_size."),
    "ckpt_file_name": ("Checkpoint in --model_dir that --task_type finetune starts from.",
                       "Unset: none."),
    "warmup_steps": ("Steps of t2t warmup (from 1% of the rate up to --learning_rate).",
                     _WITH_WARMUP),
    "warmup_scheme": ("t2t; any other value means no warmup.", _WITH_WARMUP),
    "decay_scheme": ("When decay starts and how often: luong234, 4 decays in the last third;"
                     " luong5, luong10: 5 or 10 in the second half; '': none.", _WITH_SCHEDULE),
    "learning_rate_decay_factor": ("Factor of each exponential decay.", _WITH_SCHEDULE),
    "learning_rate_decay_type": ("FastNN's schedule.",
                                 _WITH_SCHEDULE),
    "learning_rate": ("Initial learning rate (FastNN's schedule).", _WITH_SCHEDULE),
    "end_learning_rate": ("Final rate of polynomial decay.", _WITH_SCHEDULE),
    "optimizer": ("FastNN's optimizer; its parameters are the options below.",
                  "Unset: the config's optimizer."),
    "adadelta_rho": ("adadelta's rho.", _WITH_OPTIMIZER),
    "adagrad_initial_accumulator_value": ("adagrad's initial accumulator.", _WITH_OPTIMIZER),
    "adam_beta1": ("adam's and adamweightdecay's beta_1.", _WITH_OPTIMIZER),
    "adam_beta2": ("adam's and adamweightdecay's beta_2.", _WITH_OPTIMIZER),
    "opt_epsilon": ("epsilon of adadelta, adam, adamweightdecay and rmsprop.", _WITH_OPTIMIZER),
    "ftrl_learning_rate_power": ("ftrl's learning-rate power.", _WITH_OPTIMIZER),
    "ftrl_initial_accumulator_value": ("ftrl's initial accumulator.", _WITH_OPTIMIZER),
    "ftrl_l1": ("ftrl's L1 strength.", _WITH_OPTIMIZER),
    "ftrl_l2": ("ftrl's L2 strength.", _WITH_OPTIMIZER),
    "momentum": ("momentum's momentum.", _WITH_OPTIMIZER),
    "rmsprop_momentum": ("rmsprop's momentum.", _WITH_OPTIMIZER),
    "rmsprop_decay": ("rmsprop's decay (rho).", _WITH_OPTIMIZER),
    "stop_at_step": ("Training steps (trainer.train_steps).", _CONFIG),
    "log_loss_every_n_iters": ("Steps between log lines and summaries"
                               " (trainer.steps_per_loop).", _CONFIG),
    "save_checkpoints_steps": ("Steps between checkpoints (rounded up to a multiple of"
                               " steps_per_loop).", _CONFIG),
    "use_fp16": ("float16 mixed precision on a GPU (on a CPU: float32 and a note).",
                 "Unset: the config's runtime.mixed_precision_dtype."),
    "loss_scale": ("Fixed loss scale for float16 training.",
                   "Unset: the config's (dynamic scaling)."),
    "task_index": ("This worker's index among --worker_hosts.",
                   "Unset: the config's (or TF_CONFIG's)."),
    "worker_hosts": ("Comma list of HOST:PORT; more than one: multi_worker_mirrored.", _CONFIG),
    # Accepted so FastNN command lines run; each gives a note.
    "preprocessing_name": ("Preprocessing is the Model Garden task's parser"
                           " (task.train_data aug_* fields).",),
    "num_parallel_batches": ("tf.data AUTOTUNE sizes the input pipeline.",),
    "num_preprocessing_threads": ("tf.data AUTOTUNE sizes the input pipeline.",),
    "profile_every_n_iters": ("Use TensorBoard's profiler.",),
    "profile_at_task": ("Use TensorBoard's profiler.",),
    "log_device_placement": ("Use tf.debugging.set_log_device_placement.",),
    "print_model_statistics": ("The TF2 trainer prints no per-variable statistics.",),
    "log_trainable_vars_statistics": ("The TF2 trainer prints no per-variable statistics.",),
    "hooks": ("TF2 distribution strategies and Model Garden's trainer replace it.",),
    "enable_paisoar": ("TF2 distribution strategies and Model Garden's trainer replace it.",),
    "protocol": ("TF2 distribution strategies and Model Garden's trainer replace it.",),
    "job_name": ("TF2 distribution strategies and Model Garden's trainer replace it.",),
}
NO_EFFECT = frozenset(k for k, v in HELP.items() if len(v) == 1)
OPTION_KEYS = tuple(k for k in fastnn.FASTNN_KEYS if k not in OWN_KEYS)
BOOL_KEYS = frozenset(k for k in OPTION_KEYS if fastnn.FASTNN_KEYS[k].type is bool)
_METAVARS = {int: "<int>", float: "<float>", str: "<str>"}


def _metavar(spec: fastnn.HparamSpec) -> str:
  # A list of choices in the type column would squeeze the help column: they go in the help.
  return "<choice>" if spec.choices else _METAVARS[spec.type]


def _help(key: str) -> str:
  spec = fastnn.FASTNN_KEYS[key]
  what, *unset = HELP[key]
  if spec.choices:
    what += " One of: " + ", ".join(c or "''" for c in spec.choices) + "."
  if spec.type is bool and key not in NO_EFFECT:
    what += f" Off: --no_{key}."
  return " ".join([what, *unset]).format(default=spec.default)


def _converter(key: str) -> Callable[[Optional[str]], Any]:
  """Parses a value as a hparams file line is parsed; a bad one is a usage error (exit 2)."""
  def convert(value: Optional[str]) -> Any:
    if value is None:
      return None
    try:
      return fastnn.coerce_value(key, value)
    except ValueError as e:
      raise typer.BadParameter(str(e)) from None
  return convert


def _option(key: str) -> Any:
  spec = fastnn.FASTNN_KEYS[key]
  panel = COMPAT_PANEL if key in NO_EFFECT else PANEL
  text = _help(key)
  if spec.type is bool:
    return Annotated[Optional[bool], typer.Option(
        *flag(key), help=text, rich_help_panel=panel, show_default=False)]
  # The value stays text up to the converter: it is typed exactly as in a hparams file.
  return Annotated[Optional[str], typer.Option(
      *flag(key), help=text, metavar=_metavar(spec), callback=_converter(key),
      rich_help_panel=panel, show_default=False)]


def _negative(key: str) -> Any:
  return Annotated[bool, typer.Option(*flag(f"no_{key}"), hidden=True)]


def with_fastnn_options(fn: Callable) -> Callable:
  """Adds one `--key` option per FastNN key; `fn` receives the given ones as a dict in `fastnn`.

  The returned function carries `args_hook` (`bool_values_as_flags`), which the command runs on
  its arguments before Click parses them.
  """
  sig = inspect.signature(fn)
  params = [p for p in sig.parameters.values() if p.name != "fastnn"]
  for key in OPTION_KEYS:
    params.append(inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=None,
                                    annotation=_option(key)))
  for key in sorted(BOOL_KEYS):
    params.append(inspect.Parameter(f"no_{key}", inspect.Parameter.KEYWORD_ONLY, default=False,
                                    annotation=_negative(key)))

  @functools.wraps(fn)
  def wrapper(**kwargs: Any):
    given = {}
    for key in OPTION_KEYS:
      value = kwargs.pop(key, None)
      if key in BOOL_KEYS and kwargs.pop(f"no_{key}", False):
        if value:
          raise typer.BadParameter(f"give --{key} or --no_{key}, not both",
                                   param_hint=f"--{key}")
        value = False
      if value is not None:
        given[key] = value
    return fn(fastnn=given, **kwargs)

  wrapper.__signature__ = sig.replace(parameters=params)
  wrapper.__annotations__ = {p.name: p.annotation for p in params}
  wrapper.__dict__.pop("__wrapped__", None)
  wrapper.args_hook = bool_values_as_flags
  return wrapper


def bool_values_as_flags(args: Sequence[str], takes_value: frozenset[str] = frozenset()
                         ) -> list[str]:
  """FastNN's `--use_fp16 False` / `--use_fp16=false` as the flags `--no_use_fp16`/`--use_fp16`.

  Args:
    args: the command's arguments, before Click parses them.
    takes_value: options (underscore spelling) whose next argument is their value, so a value
      that happens to look like a FastNN flag is left alone.

  Returns:
    The arguments with each FastNN boolean given a value rewritten as its flag; nothing after
    `--` is touched.
  """

  def rewrite(key: str, token: str, value: Optional[str]) -> list[str]:
    if value is None:
      return [token]
    try:
      on = fastnn.coerce_value(key, value)
    except ValueError as e:
      raise typer.BadParameter(str(e), param_hint=f"'--{key}'") from None
    return [f"--{key}" if on else f"--no_{key}"]

  return rewrite_flags(list(args), takes_value,
                       {f"--{key}": functools.partial(rewrite, key) for key in BOOL_KEYS})
