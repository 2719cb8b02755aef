"""The engine behind `nascli run_latency_calculator_local`: trials' latency, measured elsewhere.

Vertex AI NAS measures latency on the target device with a separate latency calculator job that
polls the search and writes each trial's latency into the trial folder, where the trial waits
for it. nascli does the same through the job dir, so the calculator may run on any machine that
sees it (a folder, or gs:// through nascli.storage):

  1. A search with `--latency_calculator external` trains each trial, then writes
     `<job>/<trial>/latency_request.json` (`request`) and waits for the result
     (`wait_for_result`, at most `--latency_timeout_s`), counting its FLOPs meanwhile.
  2. The calculator polls the job dir for requests without a result, in trial order (so one
     started late catches up on the trials that wait), takes those of its share (trial id mod
     `--num_latency_workers` == `--latency_worker_id`: calculators share a job without
     talking to each other), loads the trial's model from what the trial folder already holds
     (params.yaml and its checkpoint: nothing is exported for it), times it on the target
     device type (the registry below) and writes `<trial>/latency_result.json`: whole or not
     at all (a temporary renamed into place; one object on gs://). A result is never measured
     again: a calculator restarted after a kill measures only what has none. A trial whose
     model cannot be measured gets a result with an `error`: it fails at once, with the
     calculator's reason, instead of waiting out its timeout.
  3. The trial computes its reward from the result's `latency_ms` and names the measured
     device (`latency_device`) in its model_analysis.json and the journal.

The calculator ends when the search has ended (its journal says every trial it proposed is
final and --max_nas_trial were proposed, or too many failed, and no search runs in the job dir)
and every request of its share has a result; with `--once` after one pass over what waits; with
`--idle_timeout_s` after that long without a request or a journal event.

TensorFlow-free at import: the command checks its flags first, and a pass with nothing to
measure loads no framework.
"""

import contextlib
import dataclasses
import datetime
import fcntl
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from typing import Any, Callable, Iterator

from nascli import checks
from nascli import storage
from nascli.errors import NascliError
from nascli.latency_source import cpu_model  # noqa: F401  (where a latency was measured)
from nascli.search import search_job

REQUEST_NAME = "latency_request.json"
RESULT_NAME = "latency_result.json"
# --latency_calculator of a search: the trial times itself (in_trial), or waits for
# run_latency_calculator_local (external).
IN_TRIAL = "in_trial"
EXTERNAL = "external"
LATENCY_CALCULATORS = (IN_TRIAL, EXTERNAL)
DEFAULT_TIMEOUT_S = 600.0  # Vertex's trainer waits 10 minutes for model_latency.json
# What the calculator reads of a trial folder to rebuild its model (beside its checkpoint).
MODEL_FILES = ("params.yaml", "nascli_run.json")
_TRIAL_DIR = re.compile(r"^\d+$")


class LatencyTimeout(NascliError):
  """No latency calculator answered a trial's request in time."""


# --------------------------------------------------------------------------- target devices


@dataclasses.dataclass(frozen=True)
class MeasureOptions:
  warmup: int = 5
  runs: int = 20
  num_threads: int = 1  # TFLite interpreter threads


@dataclasses.dataclass(frozen=True)
class TargetDevice:
  """A --target_device_type: how a model is timed there (`measure(options, params, model)`
  returns a report with `latency_ms`), and whether it runs on a GPU (otherwise the calculator
  hides the GPUs from TensorFlow)."""
  name: str
  description: str
  gpu: bool
  measure: Callable[[MeasureOptions, Any, Any], dict[str, Any]]


_TARGETS: dict[str, TargetDevice] = {}


def register_target_device(name: str, description: str, gpu: bool = False):
  """Registers the function that times a model on target device type `name`."""
  def register(fn: Callable[[MeasureOptions, Any, Any], dict[str, Any]]):
    if name in _TARGETS:
      raise KeyError(f"target device type {name!r} is already registered")
    _TARGETS[name] = TargetDevice(name, description, gpu, fn)
    return fn
  return register


def target_device_types() -> list[str]:
  return list(_TARGETS)


def target_device(name: str) -> TargetDevice:
  if name not in _TARGETS:  # exit 1, as search_flags refuses an unknown name
    raise NascliError(f"unknown --target_device_type {name!r}{checks.closest(name, _TARGETS)};"
                      f" known: {', '.join(_TARGETS)}")
  return _TARGETS[name]


@register_target_device("cpu", "the serving function a SavedModel export holds, on this CPU")
def _cpu(options: MeasureOptions, params: Any, model: Any) -> dict[str, Any]:
  from tf_vision.serving import device_latency  # pylint: disable=g-import-not-at-top
  return device_latency.serving_latency(params, model, options.warmup, options.runs)


@register_target_device("gpu", "the serving function a SavedModel export holds, on this GPU",
                        gpu=True)
def _gpu(options: MeasureOptions, params: Any, model: Any) -> dict[str, Any]:
  from tf_vision.serving import device_latency  # pylint: disable=g-import-not-at-top
  if device_latency.gpu_name() is None:
    raise NascliError("--target_device_type gpu: TensorFlow sees no GPU on this machine")
  return device_latency.serving_latency(params, model, options.warmup, options.runs)


@register_target_device("cpu-tflite", "the model converted to TFLite, run by the TFLite"
                        " interpreter on this CPU (--num_threads threads)")
def _cpu_tflite(options: MeasureOptions, params: Any, model: Any) -> dict[str, Any]:
  """Timed as build_latency_model times it (arch_latency's noise control), so a trial's
  calculated latency and a latency model's prediction are the same kind of number."""
  from tf_vision.serving import arch_latency  # pylint: disable=g-import-not-at-top
  return arch_latency.runtime("cpu-tflite").measure(
      params, model, arch_latency.Timing(num_threads=options.num_threads, runs=options.runs))


def device_of(target_device_type: str, gpu_name: str | None, source: str,
              num_threads: int | None = None, input_size: int | None = None
              ) -> dict[str, Any]:
  """The `latency_device` a trial's results name: where its latency was measured."""
  device = gpu_name or cpu_model()
  if num_threads is not None:
    device += f" (TFLite interpreter, {num_threads} thread{'s' if num_threads > 1 else ''})"
  return {"host": socket.gethostname(), "device": device,
          "target_device_type": target_device_type, "source": source,
          **({"num_threads": num_threads} if num_threads is not None else {}),
          **({"input_size": input_size} if input_size is not None else {})}


# --------------------------------------------------------------------------- the trial's side


def _now() -> str:
  return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def read_json(path: str) -> dict[str, Any] | None:
  """A JSON object file, None when absent or unreadable (it is written whole: never torn)."""
  try:
    data = json.loads(storage.read_text(path))
  except (NascliError, OSError, ValueError):
    return None
  return data if isinstance(data, dict) else None


def request(exchange_dir: str, trial_id: str, local_trial_dir: str) -> None:
  """Asks the calculators for the latency of the trial in `local_trial_dir`: writes its
  request into `exchange_dir` (its folder in the job dir). A gs:// job dir first gets the files
  the calculator rebuilds the model from (the checkpoint goes up with the trial's folder at its
  end; the latency does not depend on the weights)."""
  text = json.dumps({"trial_id": trial_id, "requested_at": _now(),
                     "host": socket.gethostname(), "pid": os.getpid()}, indent=2)
  if exchange_dir != local_trial_dir:
    for name in MODEL_FILES:
      path = os.path.join(local_trial_dir, name)
      if os.path.exists(path):
        storage.upload_file(path, storage.join(exchange_dir, name))
    # The staged copy keeps it too: the folder's upload at the trial's end removes the objects
    # the local folder lacks (workspace.upload_trial).
    storage.write_text(os.path.join(local_trial_dir, REQUEST_NAME), text)
  storage.write_text(storage.join(exchange_dir, REQUEST_NAME), text)


def wait_for_result(exchange_dir: str, trial_id: str, timeout_s: float, job_dir: str,
                    poll_s: float | None = None,
                    local_trial_dir: str | None = None) -> dict[str, Any]:
  """The calculator's result for the trial, waited for up to `timeout_s` seconds (copied into
  `local_trial_dir`, the staged folder of a gs:// job dir's trial, when that is another).

  Raises:
    LatencyTimeout: no result in time.
    NascliError: the calculator could not measure the model (its reason).
  """
  path = storage.join(exchange_dir, RESULT_NAME)
  poll = poll_s or (2.0 if storage.is_gcs(path) else 0.5)
  deadline = time.monotonic() + timeout_s
  while True:
    result = read_json(path)
    if result is not None:
      if local_trial_dir and local_trial_dir != exchange_dir:
        storage.write_text(os.path.join(local_trial_dir, RESULT_NAME),
                           json.dumps(result, indent=2))
      return check_result(result, trial_id)
    if time.monotonic() >= deadline:
      raise LatencyTimeout(
          f"no latency for trial {trial_id} from a latency calculator within {timeout_s:g} s"
          f" (--latency_timeout_s): run `nascli run_latency_calculator_local"
          f" --local_output_dir {job_dir}` beside the search (one whose --latency_worker_id"
          f" is {trial_id} mod --num_latency_workers)")
    time.sleep(poll)


def check_result(result: dict[str, Any], trial_id: str) -> dict[str, Any]:
  if result.get("error"):
    raise NascliError(f"the latency calculator ({_worker_name(result)}) could not measure"
                      f" trial {trial_id}: {result['error']}")
  latency = result.get("latency_ms")
  if not isinstance(latency, (int, float)) or not latency > 0:
    raise NascliError(f"trial {trial_id}: {RESULT_NAME} has no positive latency_ms"
                      f" (got {latency!r})")
  return result


def _worker_name(result: dict[str, Any]) -> str:
  worker = result.get("worker") or {}
  return (f"worker {worker.get('latency_worker_id', '?')} of"
          f" {worker.get('num_latency_workers', '?')} on {worker.get('host', '?')}")


# --------------------------------------------------------------------------- the calculator


@dataclasses.dataclass
class CalculatorArgs:
  job_dir: str | None
  target_device_type: str = "cpu"
  latency_worker_id: int = 0
  num_latency_workers: int = 1
  once: bool = False
  poll_interval_s: float = 2.0
  idle_timeout_s: float = 3600.0  # 0: no limit
  warmup: int = 5
  runs: int = 20
  num_threads: int = 1
  as_json: bool = False

  @property
  def worker(self) -> str:
    return f"worker {self.latency_worker_id} of {self.num_latency_workers}"


def check_args(args: CalculatorArgs) -> None:
  """Refuses bad flags in one line, before any framework is imported."""
  if not args.job_dir:
    raise NascliError("give the search's job dir: --local_output_dir JOB_DIR (a folder or"
                      " gs://BUCKET/PREFIX)")
  checks.int_range(args.num_latency_workers, "--num_latency_workers", 1)
  checks.int_range(args.latency_worker_id, "--latency_worker_id", 0,
                   args.num_latency_workers - 1,
                   allowed=f"0 to {args.num_latency_workers - 1} (--num_latency_workers"
                           f" {args.num_latency_workers})")
  target_device(args.target_device_type)
  checks.int_range(args.runs, "--latency_runs", 1)
  checks.int_range(args.warmup, "--warmup_runs", 0)
  checks.int_range(args.num_threads, "--num_threads", 1)
  if not args.poll_interval_s > 0:
    raise NascliError(f"--poll_interval_s must be positive, got {args.poll_interval_s}")
  if not args.idle_timeout_s >= 0:
    raise NascliError(f"--idle_timeout_s must be >= 0 (0: no limit), got {args.idle_timeout_s}")
  search_job.check(args.job_dir, "--local_output_dir", started=False,
                   hint="start the search first (the calculator then waits for its trials)")


def owns(args: CalculatorArgs, trial_id: str) -> bool:
  return int(trial_id) % args.num_latency_workers == args.latency_worker_id


def _trial_files(job_dir: str) -> dict[str, set[str]]:
  """trial id -> which of the request and the result its folder holds."""
  found: dict[str, set[str]] = {}
  if storage.is_gcs(job_dir):
    for name in storage.list_names(job_dir):
      trial, _, leaf = name.partition("/")
      if _TRIAL_DIR.match(trial) and leaf in (REQUEST_NAME, RESULT_NAME):
        found.setdefault(trial, set()).add(leaf)
    return found
  with contextlib.suppress(FileNotFoundError):
    for entry in os.scandir(job_dir):
      if entry.is_dir() and _TRIAL_DIR.match(entry.name):
        found[entry.name] = {n for n in (REQUEST_NAME, RESULT_NAME)
                             if os.path.exists(os.path.join(entry.path, n))}
  return found


def scan(args: CalculatorArgs) -> tuple[list[str], list[str]]:
  """(trials of this worker's share waiting for a latency, in trial order; those measured)."""
  waiting, done = [], []
  for trial, names in _trial_files(args.job_dir).items():
    if not owns(args, trial):
      continue
    if RESULT_NAME in names:
      done.append(trial)
    elif REQUEST_NAME in names:
      waiting.append(trial)
  return sorted(waiting, key=int), sorted(done, key=int)


def _driver_running(job_dir: str) -> bool:
  """A search holds the job dir's writer lock (an flock on JOB/.lock, seen in /proc/locks:
  probing it with a lock of our own could make a starting search think another one runs). A
  gs:// job dir, or a system without /proc/locks: unknown, taken as not running."""
  if storage.is_gcs(job_dir):
    return False
  try:
    st = os.stat(os.path.join(job_dir, ".lock"))
    with open("/proc/locks", encoding="utf-8") as f:
      lines = f.read().splitlines()
  except OSError:
    return False
  for line in lines:
    fields = line.split()
    if "FLOCK" in fields and len(fields) >= 6:
      dev_inode = next((x for x in fields if x.count(":") == 2), "")
      major, minor, inode = (dev_inode.split(":") + ["", "", ""])[:3]
      with contextlib.suppress(ValueError):
        if (int(inode) == st.st_ino and int(major, 16) == os.major(st.st_dev)
            and int(minor, 16) == os.minor(st.st_dev)):
          return True
  return False


def search_state(job_dir: str) -> tuple[bool, int, str]:
  """(the search has ended, the journal's last seq, what it is doing: for the log)."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import journal as journal_lib
  journal = journal_lib.journal_for(job_dir)
  if not journal.exists():
    return False, 0, "no search has started in it yet"
  state = journal_lib.replay(journal.events())
  settings = state.settings or {}
  max_trials = settings.get("max_nas_trial") or 0
  max_failed = settings.get("max_failed_nas_trial")
  max_failed = max_trials if max_failed is None else max_failed
  final = state.trial_ids(*journal_lib.FINAL_STATUSES)
  failed = state.trial_ids(*journal_lib.FAILED_STATUSES)
  busy = state.unfinished() or state.trial_ids(journal_lib.PAUSED)
  what = f"{len(final)} of {max_trials} trials done"
  ended = (not busy and (state.trained_count() >= max_trials or len(failed) > max_failed)
           and not _driver_running(job_dir))
  return ended, state.last_seq, what


@contextlib.contextmanager
def worker_lock(args: CalculatorArgs) -> Iterator[None]:
  """One calculator per worker id and job dir (local job dirs: an flock the kernel releases
  with the process, so a killed calculator leaves none behind)."""
  if storage.is_gcs(args.job_dir):
    yield
    return
  path = os.path.join(args.job_dir, f".latency_calculator-{args.latency_worker_id}-of-"
                      f"{args.num_latency_workers}.lock")
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
      raise NascliError(f"another latency calculator (pid {holder}) is {args.worker} for"
                        f" {args.job_dir}; give this one another --latency_worker_id") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    yield
  finally:
    os.close(fd)


class Calculator:
  """Measures the trials of its share of a job as they ask, until the search has ended."""

  def __init__(self, args: CalculatorArgs, out: Callable[[str], None] | None = None,
               log: Callable[[str], None] | None = None):
    self.args = args
    self.target = target_device(args.target_device_type)
    self.options = MeasureOptions(warmup=args.warmup, runs=args.runs,
                                  num_threads=args.num_threads)
    self.out = out or (lambda line: print(line, flush=True))
    self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    self.measured: list[str] = []
    self.failed: list[str] = []
    self._loaded = False
    self._gpu_name: str | None = None
    self._input_size: int | None = None  # of the last trial timed (its serving size)

  def _load(self) -> None:
    """TensorFlow and Model Garden, on the first trial to measure (GPUs hidden unless the
    target is one: `cpu` means the CPU even on a machine with GPUs)."""
    if self._loaded:
      return
    if not self.target.gpu:
      os.environ["CUDA_VISIBLE_DEVICES"] = ""
    # pylint: disable=g-import-not-at-top
    from nascli import frameworks, runtime
    frameworks.load()
    runtime.request()  # TensorFlow is loaded: end without its teardown
    from tf_vision.serving import device_latency
    self._gpu_name = device_latency.gpu_name() if self.target.gpu else None
    self._loaded = True

  def device(self) -> dict[str, Any]:
    tflite = self.args.num_threads if self.args.target_device_type == "cpu-tflite" else None
    return device_of(self.args.target_device_type, self._gpu_name, "calculator", tflite,
                     input_size=self._input_size)

  def run(self) -> dict[str, Any]:
    args = self.args
    waiting, done = scan(args)
    self.log(f"latency calculator ({args.worker}, {args.target_device_type}) for"
             f" {args.job_dir}: {len(done)} trial(s) of its share already measured,"
             f" {len(waiting)} waiting")
    last_seq, idle_since, said = None, time.monotonic(), None
    while True:
      waiting, _ = scan(args)
      for trial_id in waiting:
        self.measure(trial_id)
      if waiting:
        idle_since = time.monotonic()
        continue  # more may have asked meanwhile
      if args.once:
        return self.summary("--once: nothing else waits")
      ended, seq, what = search_state(args.job_dir)
      if ended:
        return self.summary(f"the search has ended ({what})")
      if seq != last_seq:
        last_seq, idle_since = seq, time.monotonic()
      if what != said:
        self.log(f"waiting for requests: {what}")
        said = what
      if args.idle_timeout_s and time.monotonic() - idle_since > args.idle_timeout_s:
        raise NascliError(
            f"latency calculator ({args.worker}): no request and no search event in"
            f" {args.idle_timeout_s:g} s (--idle_timeout_s) and {args.job_dir} has not ended"
            f" ({what}); run the same command again to go on measuring")
      time.sleep(args.poll_interval_s)

  def summary(self, why: str) -> dict[str, Any]:
    args = self.args
    self.log(f"latency calculator ({args.worker}): measured {len(self.measured)} trial(s)"
             + (f" ({', '.join(self.measured)})" if self.measured else "")
             + (f", {len(self.failed)} could not be measured ({', '.join(self.failed)})"
                if self.failed else "") + f"; {why}")
    return {"job_dir": args.job_dir, "measured": self.measured, "failed": self.failed,
            "latency_worker_id": args.latency_worker_id,
            "num_latency_workers": args.num_latency_workers,
            "target_device_type": args.target_device_type}

  def measure(self, trial_id: str) -> dict[str, Any]:
    """Times one trial and writes its result (or why it could not be timed) atomically."""
    args = self.args
    self._load()
    trial_dir = storage.join(args.job_dir, trial_id)
    start = time.monotonic()
    result: dict[str, Any] = {"trial_id": trial_id,
                              "target_device_type": args.target_device_type}
    try:
      with _model_folder(trial_dir) as folder:
        report = self._time(folder)
      result.update(latency_ms=report["latency_ms"], latency_device=self.device(),
                    report=report)
    except Exception as e:  # pylint: disable=broad-except
      # Charged to the trial (it fails at once with this reason); the calculator goes on.
      result["error"] = " ".join(f"{type(e).__name__}: {e}".split())[:500]
    result.update(measured_at=_now(), seconds=round(time.monotonic() - start, 3), worker={
        "latency_worker_id": args.latency_worker_id,
        "num_latency_workers": args.num_latency_workers, "host": socket.gethostname(),
        "pid": os.getpid()})
    storage.write_text(storage.join(trial_dir, RESULT_NAME), json.dumps(result, indent=2))
    if "error" in result:
      self.failed.append(trial_id)
      self.log(f"trial {trial_id}: could not measure it: {result['error']}")
    else:
      self.measured.append(trial_id)
    if args.as_json:
      self.out(json.dumps(result))
    elif "error" not in result:
      self.out(f"trial {trial_id}: {result['latency_ms']:.4f} ms on"
               f" {args.target_device_type} ({result['latency_device']['device']},"
               f" {result['latency_device']['host']})")
    return result

  def _time(self, folder: str) -> dict[str, Any]:
    # pylint: disable=g-import-not-at-top
    import tf_keras
    from tf_vision.serving import device_latency
    try:
      params, model, restored = device_latency.load_trial_model(folder)
      self._input_size = int(params.task.model.input_size[0])
      report = self.target.measure(self.options, params, model)
    finally:
      tf_keras.backend.clear_session()  # one trial's graph and names are not the next one's
    report["restored_checkpoint"] = restored
    return report


@contextlib.contextmanager
def _model_folder(trial_dir: str) -> Iterator[str]:
  """A local folder with what rebuilds the trial's model: the trial folder itself, or for
  gs:// a temporary copy of its MODEL_FILES (no checkpoint: the latency does not depend on
  the weights)."""
  if not storage.is_gcs(trial_dir):
    yield trial_dir
    return
  local = tempfile.mkdtemp(prefix="nascli-latency-")
  try:
    for name in MODEL_FILES:
      remote = storage.join(trial_dir, name)
      if storage.is_file(remote):
        storage.download_file(remote, os.path.join(local, name))
    yield local
  finally:
    shutil.rmtree(local, ignore_errors=True)
