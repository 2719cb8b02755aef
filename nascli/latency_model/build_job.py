"""The job behind `nascli build_latency_model`: sample, measure (journaled), fit, write one file.

A latency model is only as good as its measurements, and measuring 130 architectures at the
serving size takes from minutes (mnasnet, 224x224, TFLite) to hours (spinenet at 640x640), so
the job is built like every other nascli job: the job dir holds an append-only journal,
`measurements.jsonl`, one fsynced JSON line per event, and a rerun continues from it.

  {"event": "job", "settings": {...}, "fingerprint": "<sha256>"}       the first line
  {"event": "session", "session": K, "device", "runtime_version", "host", "pinned_cpus",
   "ray", "loadavg", "reference": {...timing report}}                    each session's start
  {"event": "measured", "index": I, "split": "train" | "heldout", "nas_params", "latency_ms",
   "report": {...}, "session": K}                                        one per architecture
  {"event": "failed", "index": I, "split", "nas_params", "error", "session": K}
  {"event": "layer", "key": "mbconv k5 e6 se0 in24 out40 s2 @56", "latency_ms", "report",
   "session": K}                                  --measure_layers: one per layer of the space
  {"event": "layer_failed", "key", "error", "session": K}

- The architectures are a pure function of the settings: the first `num_architectures` that
  random search proposes with `--seed` (`controller.random_architectures`), then
  `num_heldout` from a stream of their own (seed + HELDOUT_SEED_OFFSET) that are none of them.
  The held-out ones are measured interleaved with the others (so drift during a session
  touches both alike) and are only predicted: the model is fitted on the others.
- A rerun with other settings (the first line's fingerprint) is refused in one line and
  nothing is written; `--overwrite` starts over. A session on another device or runtime
  version than the first is refused too: the model is of one device.
- With `--measure_layers`, every distinct layer of the space (`cost_features.all_layers`:
  938 for mnasnet) is also timed alone, interleaved with the architectures, for the
  `layer_lookup` predictor: the sum of an architecture's layers, calibrated on the measured
  architectures (nn-Meter's kernels, ProxylessNAS's lookup table).
- Every session starts by timing the reference architecture (the space's first candidate of
  every decision), so drift between sessions shows in the journal and on screen.
- A line cut by SIGKILL is dropped when the journal is next opened for writing (and skipped by
  readers): the architecture it was about is measured again, nothing else is.
- With `--ray_address`, one Ray actor on the named node (default: the head) builds and times
  every architecture; this process, the driver, journals and fits. Neither the driver of a Ray
  job nor a rerun of a finished job imports TensorFlow.
"""

import contextlib
import dataclasses
import datetime
import errno
import fcntl
import hashlib
import json
import os
import socket
import sys
import tempfile
from typing import Any, Callable, Iterator, Mapping, Sequence

from nascli import interrupts
from nascli import storage
from nascli.errors import InputError
from nascli.errors import NascliError
from nascli.errors import OutputError
from tf_vision.serving import arch_latency

JOURNAL_NAME = 'measurements.jsonl'
LOCK_NAME = '.lock'
MODEL_NAME = 'latency_model.json'
# The held-out architectures come from a random stream of their own: seed + this.
HELDOUT_SEED_OFFSET = 1_000_003
# --measure_layers times about a thousand layers: one progress line per this many.
LAYER_PROGRESS_EVERY = 50
# A session stops after this many architectures in a row that could not be measured: the
# cause is then the setup (a runtime that cannot run here), not one architecture.
MAX_FAILURES_IN_A_ROW = 3
# A reference this much slower or faster than when the job began is called out.
DRIFT_WARNING = 0.10
TRAIN, HELDOUT = 'train', 'heldout'


@dataclasses.dataclass(frozen=True)
class BuildArgs:
  """What `nascli build_latency_model` was asked (checked by the command)."""
  job_dir: str
  search_space: str = 'mnasnet'
  search_space_module: str | None = None
  config_files: tuple[str, ...] = ()
  runtime: str = 'cpu-tflite'
  input_size: int = 224
  num_architectures: int = 100
  num_heldout: int = 30
  seed: int = 0
  num_threads: int = 1
  runs: int = 50
  pin_cpus: tuple[int, ...] | None = None
  output: str | None = None
  overwrite: bool = False
  ray_address: str | None = None
  ray_node_ip: str | None = None
  ray_num_cpus: int | None = None
  ray_temp_dir: str | None = None
  measure_layers: bool = False

  @property
  def output_path(self) -> str:
    return self.output or os.path.join(self.job_dir, MODEL_NAME)

  @property
  def timing(self) -> arch_latency.Timing:
    return arch_latency.Timing(num_threads=self.num_threads, runs=self.runs,
                               cpus=self.pin_cpus)

  def settings(self) -> dict[str, Any]:
    """What the measurements depend on; a rerun must give the same (`--pin_cpus`, the Ray
    flags and `--output` may change between sessions, and `--measure_layers` may be added to
    a job: its layers are measured then, or left out of a refit)."""
    return {'search_space': self.search_space, 'search_space_module': self.search_space_module,
            'config_files': [_file_setting(p) for p in self.config_files],
            'runtime': self.runtime, 'input_size': self.input_size,
            'num_threads': self.num_threads, 'runs': self.runs, 'seed': self.seed,
            'num_architectures': self.num_architectures, 'num_heldout': self.num_heldout,
            # The rest of how a model is timed (warm-up, spread limit, retries): another nascli
            # may time otherwise, and its measurements are not these.
            'timing': {k: v for k, v in dataclasses.asdict(self.timing).items()
                       if k not in ('num_threads', 'runs', 'cpus')}}


def _file_setting(path: str) -> dict[str, str]:
  """A config file as a setting: where it is and what it says (an edited file is another
  setting, as the same path)."""
  data = storage.read_bytes(path)
  return {'path': path if storage.is_gcs(path) else os.path.abspath(path),
          'sha256': hashlib.sha256(data).hexdigest()}


def fingerprint(settings: Mapping[str, Any]) -> str:
  text = json.dumps(settings, sort_keys=True, separators=(',', ':'))
  return hashlib.sha256(text.encode('utf-8')).hexdigest()


def default_job_dir(space: str, module: str | None, runtime: str, input_size: int,
                    num_threads: int) -> str:
  """nascli_output/latency_<space>_<runtime>_<size>[_<n>threads]: one folder per target."""
  name = module.rsplit('.', 1)[-1] if module else space
  threads = f'_{num_threads}threads' if num_threads != 1 else ''
  return os.path.join('nascli_output', f'latency_{name}_{runtime}_{input_size}{threads}')


# --------------------------------------------------------------------------- the journal


def _now() -> str:
  return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='milliseconds')


class Journal:
  """`JOB_DIR/measurements.jsonl`: one writer (an flock on JOB_DIR/.lock that dies with its
  process), whole fsynced lines, a torn last line dropped."""

  def __init__(self, job_dir: str):
    self.job_dir = job_dir
    self.path = os.path.join(job_dir, JOURNAL_NAME)
    self._lock_fd: int | None = None

  def events(self) -> list[dict[str, Any]]:
    """Every whole line; a last line cut by a kill is skipped.

    Raises:
      InputError: a damaged line before the last (one line naming it).
    """
    try:
      with open(self.path, 'rb') as f:
        data = f.read()
    except FileNotFoundError:
      return []
    lines = data.split(b'\n')
    out = []
    for number, line in enumerate(lines, start=1):
      if not line.strip():
        continue
      try:
        event = json.loads(line)
      except ValueError:
        event = None
      if not isinstance(event, dict) or not isinstance(event.get('event'), str):
        if number == len(lines):  # no newline after it: cut by a kill
          continue
        raise InputError(f'{self.path}:{number}: not a measurement line (the journal is'
                         ' damaged); --overwrite starts the job over')
      out.append(event)
    return out

  @contextlib.contextmanager
  def writing(self) -> Iterator['Journal']:
    """Holds the job's lock and drops a torn last line.

    Raises:
      OutputError: another process measures in this job dir.
    """
    os.makedirs(self.job_dir, exist_ok=True)
    fd = os.open(os.path.join(self.job_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      holder = os.pread(fd, 32, 0).decode(errors='replace').strip() or '?'
      os.close(fd)
      if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
        raise
      raise OutputError(f'another build_latency_model (pid {holder}) is measuring in'
                        f' {self.job_dir}; wait for it, or use another --local_output_dir'
                        ) from None
    try:
      os.ftruncate(fd, 0)
      os.pwrite(fd, f'{os.getpid()}\n'.encode(), 0)
      self._lock_fd = fd
      self._drop_torn_line()
      yield self
    finally:
      self._lock_fd = None
      with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
      fcntl.flock(fd, fcntl.LOCK_UN)
      os.close(fd)

  def _drop_torn_line(self) -> None:
    try:
      with open(self.path, 'rb+') as f:
        data = f.read()
        if data and not data.endswith(b'\n'):
          f.truncate(data.rfind(b'\n') + 1)
          f.flush()
          os.fsync(f.fileno())
    except FileNotFoundError:
      pass

  def append(self, event: Mapping[str, Any]) -> None:
    """Writes one whole line and fsyncs it (and, for a new journal, its folder entry)."""
    if self._lock_fd is None:
      raise RuntimeError('Journal.append outside Journal.writing()')
    new = not os.path.exists(self.path)
    line = json.dumps({**event, 'time': _now()}, allow_nan=False) + '\n'
    with open(self.path, 'ab') as f:
      f.write(line.encode('utf-8'))
      f.flush()
      os.fsync(f.fileno())
    if new:
      fd = os.open(self.job_dir, os.O_RDONLY)
      try:
        os.fsync(fd)
      finally:
        os.close(fd)

  def remove(self) -> None:
    with contextlib.suppress(FileNotFoundError):
      os.remove(self.path)


def check_settings(args: BuildArgs) -> list[dict[str, Any]]:
  """The journal's events when the job dir is new, empty or of these settings (TF-free: the
  command calls it before any framework loads, and `run` again under the lock).

  Raises:
    NascliError: the job dir holds a job of other settings (naming what differs).
  """
  if args.overwrite:
    return []
  events = Journal(args.job_dir).events()
  if not events:
    return events
  first = events[0]
  if first.get('event') != 'job' or not isinstance(first.get('settings'), dict):
    raise InputError(f'{os.path.join(args.job_dir, JOURNAL_NAME)}: no job line first (not a'
                     ' build_latency_model journal); --overwrite starts over')
  settings = args.settings()
  if first.get('fingerprint') != fingerprint(settings):
    old = first['settings']
    differ = []
    for key in sorted(set(old) | set(settings)):
      a, b = old.get(key), settings.get(key)
      if a == b:
        continue
      if isinstance(a, dict) and isinstance(b, dict):  # name only what differs inside
        a, b = ({k: d.get(k) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
                for d in (a, b))
      differ.append(f'{_flag(key)} {_show(key, a)} -> {_show(key, b)}')
    raise NascliError(f'{args.job_dir} holds measurements of other settings'
                      f' ({"; ".join(differ) or "another format"}): rerun with those to'
                      ' continue, --overwrite to start over, or another --local_output_dir')
  return events


def _flag(key: str) -> str:
  return {'runtime': '--target_device_type', 'input_size': '--latency_input_size',
          'search_space': '--prebuilt_search_space', 'config_files': '--config_file',
          'timing': 'the timing protocol (another nascli)'}.get(key, f'--{key}')


def _show(key: str, value: Any) -> str:
  if key == 'config_files' and isinstance(value, list):
    return '[' + ', '.join(f'{os.path.basename(str(c.get("path")))} ({str(c.get("sha256"))[:8]})'
                           for c in value if isinstance(c, dict)) + ']'
  return json.dumps(value)


# --------------------------------------------------------------------------- architectures


@dataclasses.dataclass(frozen=True)
class Arch:
  index: int
  split: str
  nas_params: dict[str, str]


def space_entry(args: BuildArgs) -> Any:
  """The registry entry of the space (imports a --search_space_module: pyglove, no TF)."""
  from tf_vision import search_spaces  # pylint: disable=g-import-not-at-top
  return search_spaces.resolve_search_space(args.search_space, args.search_space_module)


def architectures(space_name: str, args: BuildArgs) -> list[Arch]:
  """The job's architectures in index order: training ones, then held-out ones."""
  # pylint: disable=g-import-not-at-top
  from nascli.search import controller
  from tf_vision.search_spaces import nas_params as nas_params_lib
  from tf_vision.search_spaces import registry
  space = registry.get_search_space(space_name)
  try:
    train = controller.random_architectures(space, args.num_architectures, args.seed)
  except TypeError:  # the controller ran out of new architectures (None)
    raise NascliError(f'search space {space_name} has fewer than --num_architectures'
                      f' {args.num_architectures} distinct architectures') from None
  taken = [controller.dna_key(nas_params_lib.from_nas_params(space_name, p)) for p in train]
  ctl = controller.Controller.rebuild(space, 'random', args.seed + HELDOUT_SEED_OFFSET, [])
  heldout = []
  while len(heldout) < args.num_heldout:
    got = ctl.propose_new(taken)
    if got is None:
      raise NascliError(f'search space {space_name} has fewer than --num_architectures +'
                        f' --num_heldout ({args.num_architectures + args.num_heldout})'
                        ' distinct architectures')
    taken.append(got[0])
    heldout.append(got[1])
  return ([Arch(i, TRAIN, p) for i, p in enumerate(train)]
          + [Arch(len(train) + i, HELDOUT, p) for i, p in enumerate(heldout)])


def layer_keys(space_name: str, args: BuildArgs) -> list[str]:
  """Every distinct layer of the space at the input size (`--measure_layers`), stable order."""
  # pylint: disable=g-import-not-at-top
  from nascli.latency_model import encoding
  from tf_vision.search_spaces import cost_features
  from tf_vision.serving import layer_latency
  why = layer_latency.available(space_name, args.runtime)
  if why:
    raise NascliError(f'--measure_layers: {why}')
  enumerate_all = cost_features.all_layers(space_name)
  return enumerate_all(encoding.decisions_of_space(space_name), args.input_size)


def _spread(first: Sequence[Any], second: Sequence[Any]) -> list[Any]:
  """Both lists merged, each spread evenly over the whole, in their own order."""
  placed = [((i + 0.5) / len(first), 0, x) for i, x in enumerate(first)]
  placed += [((i + 0.5) / len(second), 1, x) for i, x in enumerate(second)]
  return [x for _, _, x in sorted(placed, key=lambda p: (p[0], p[1]))]


def measuring_order(archs: Sequence[Arch]) -> list[Arch]:
  """Held-out architectures spread evenly among the others, so that whatever drifts during a
  session (heat, other load) falls on both alike."""
  counts = {TRAIN: 0, HELDOUT: 0}
  for a in archs:
    counts[a.split] += 1
  place = {}
  seen = {TRAIN: 0, HELDOUT: 0}
  for a in archs:
    place[a.index] = (seen[a.split] + 0.5) / counts[a.split]
    seen[a.split] += 1
  return sorted(archs, key=lambda a: (place[a.index], a.split == HELDOUT))


def reference_architecture(space_name: str) -> dict[str, str]:
  """The space's first candidate of every decision (pyglove's first DNA: valid under the
  space's constraints), the same in every session and every job of the space."""
  # pylint: disable=g-import-not-at-top
  from tf_vision.search_spaces import nas_params as nas_params_lib
  from tf_vision.search_spaces import registry
  return nas_params_lib.to_nas_params(space_name, registry.get_dna_spec(space_name).first_dna())


# --------------------------------------------------------------------------- measuring


@dataclasses.dataclass(frozen=True)
class MeasureSpec:
  """What a measurer needs, picklable for a Ray actor (the config files travel as text)."""
  search_space: str
  search_space_module: str | None
  config_texts: tuple[tuple[str, str], ...]  # (file name, text)
  runtime: str
  input_size: int
  timing: arch_latency.Timing
  cwd: str


def measure_spec(args: BuildArgs) -> MeasureSpec:
  texts = tuple((os.path.basename(p), storage.read_text(p)) for p in args.config_files)
  return MeasureSpec(args.search_space, args.search_space_module, texts, args.runtime,
                     args.input_size, args.timing, os.getcwd())


class LocalMeasurer:
  """Builds and times architectures in this process (pinned to --pin_cpus)."""

  def __init__(self, spec: MeasureSpec):
    self.spec = spec
    self._files: list[str] = []
    self._tmp: tempfile.TemporaryDirectory | None = None
    self._params: Any = None

  def start(self) -> dict[str, Any]:
    """Pins, loads TensorFlow and Model Garden, and says where it measures."""
    spec = self.spec
    pinned = arch_latency.pin(spec.timing.cpus)
    target = arch_latency.runtime(spec.runtime)
    if not target.gpu and 'tensorflow' not in sys.modules:
      os.environ['CUDA_VISIBLE_DEVICES'] = ''  # a CPU runtime: TF must not place ops on a GPU
    if os.path.isdir(spec.cwd) and spec.cwd != os.getcwd():
      os.chdir(spec.cwd)  # a --search_space_module is imported from there
    self._tmp = tempfile.TemporaryDirectory(prefix='nascli_latency_')
    for number, (name, text) in enumerate(spec.config_texts):
      path = os.path.join(self._tmp.name, f'{number}_{name}')
      with open(path, 'w', encoding='utf-8') as f:
        f.write(text)
      self._files.append(path)
    from nascli import frameworks  # pylint: disable=g-import-not-at-top
    frameworks.load()
    where = {'host': socket.gethostname(), 'pid': os.getpid(), 'device': target.device(),
             'runtime_version': target.version(), 'pinned_cpus': pinned}
    if target.prepare is not None:
      where.update(target.prepare(spec.timing))
    from tf_vision import search_spaces  # pylint: disable=g-import-not-at-top
    search_spaces.resolve_search_space(spec.search_space, spec.search_space_module)
    return where

  def measure(self, nas_params: Mapping[str, str]) -> dict[str, Any]:
    spec = self.spec
    return arch_latency.measure_architecture(
        spec.search_space, dict(nas_params), spec.input_size, spec.runtime, spec.timing,
        self._files, spec.search_space_module)

  def measure_layer(self, key: str) -> dict[str, Any]:
    from tf_vision.serving import layer_latency  # pylint: disable=g-import-not-at-top
    spec = self.spec
    if self._params is None:
      self._params = arch_latency.experiment_params(spec.search_space, self._files,
                                                    spec.search_space_module)
    return layer_latency.measure_layer(self._params, spec.search_space, key, spec.runtime,
                                       spec.timing)

  def close(self) -> None:
    if self._tmp is not None:
      self._tmp.cleanup()
      self._tmp = None


class MeasurerActor:
  """The Ray actor: a LocalMeasurer on its node; errors come back as one line, not a remote
  traceback."""

  def __init__(self, spec: MeasureSpec):
    self.measurer = LocalMeasurer(spec)

  def start(self) -> dict[str, Any]:
    try:
      return self.measurer.start()
    except Exception as e:  # pylint: disable=broad-except
      return {'error': _one_line(e)}

  def measure(self, nas_params: Mapping[str, str]) -> dict[str, Any]:
    try:
      return self.measurer.measure(nas_params)
    except Exception as e:  # pylint: disable=broad-except
      return {'error': _one_line(e), 'error_type': type(e).__name__}

  def measure_layer(self, key: str) -> dict[str, Any]:
    try:
      return self.measurer.measure_layer(key)
    except Exception as e:  # pylint: disable=broad-except
      return {'error': _one_line(e), 'error_type': type(e).__name__}


class RayMeasurer:
  """One MeasurerActor on the named node of a Ray cluster (the driver keeps the journal)."""

  def __init__(self, spec: MeasureSpec, args: BuildArgs):
    # pylint: disable=g-import-not-at-top
    from nascli.search import ray_connect
    try:
      import ray
      from ray.util import scheduling_strategies
    except ImportError as e:
      raise NascliError("--ray_address: Ray is not installed: pip install 'nascli[ray]'"
                        " (or: pip install 'ray[default]')") from e
    self._ray = ray
    address = args.ray_address
    init: dict[str, Any] = {'log_to_driver': False, 'include_dashboard': False,
                            'configure_logging': False}
    if address == 'local':
      init['num_cpus'] = args.ray_num_cpus or os.cpu_count()
      if args.ray_temp_dir:
        init['_temp_dir'] = os.path.abspath(args.ray_temp_dir)
    else:
      ray_connect.use_token_if_any()
      ray_connect.check_answers(address)
      ray_connect.probe(address)
      init['address'] = address
    import signal  # pylint: disable=g-import-not-at-top
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init replaces nascli's handler
    try:
      ray.init(**init)
    except (ConnectionError, RuntimeError, ValueError) as e:
      raise NascliError(f'--ray_address {address}: cannot connect to Ray:'
                        f' {_one_line(e)[:300]}') from e
    finally:
      if sigterm is not None:
        signal.signal(signal.SIGTERM, sigterm)
    node = self._node(args)
    gpu = arch_latency.runtime(args.runtime).gpu
    cpus = float(len(args.pin_cpus) if args.pin_cpus else args.num_threads)
    have = node.get('Resources', {})
    if have.get('CPU', 0) < cpus or (gpu and have.get('GPU', 0) < 1):
      self.close()
      raise NascliError(f'--ray_node_ip {node["NodeManagerAddress"]}: the node has'
                        f' {have.get("CPU", 0):g} CPUs and {have.get("GPU", 0):g} GPUs; measuring'
                        f' needs {cpus:g} CPUs' + (' and a GPU' if gpu else ''))
    self.node_ip = node['NodeManagerAddress']
    strategy = scheduling_strategies.NodeAffinitySchedulingStrategy(node['NodeID'], soft=False)
    actor = ray.remote(num_cpus=cpus, num_gpus=1 if gpu else 0, max_restarts=0,
                       max_task_retries=0)(MeasurerActor)
    self._actor = actor.options(scheduling_strategy=strategy).remote(spec)

  def _node(self, args: BuildArgs) -> dict[str, Any]:
    nodes = [n for n in self._ray.nodes() if n.get('Alive')]
    if args.ray_node_ip:
      found = [n for n in nodes if n.get('NodeManagerAddress') == args.ray_node_ip]
      if not found:
        self.close()
        raise NascliError(f'--ray_node_ip {args.ray_node_ip}: no live node of the Ray cluster'
                          f' has it; its nodes: '
                          f'{", ".join(sorted(n["NodeManagerAddress"] for n in nodes))}')
      return found[0]
    heads = [n for n in nodes if 'node:__internal_head__' in n.get('Resources', {})]
    return (heads or nodes)[0]

  def _get(self, ref: Any) -> dict[str, Any]:
    try:
      return self._ray.get(ref)
    except self._ray.exceptions.RayActorError as e:
      raise NascliError(f'the measuring Ray actor on {self.node_ip} died ({_one_line(e)[:200]});'
                        ' run the same command again to continue') from None

  def start(self) -> dict[str, Any]:
    where = self._get(self._actor.start.remote())
    if 'error' in where:
      raise NascliError(f'the measuring Ray actor on {self.node_ip}: {where["error"]}')
    return {**where, 'ray': {'node_ip': self.node_ip}}

  def measure(self, nas_params: Mapping[str, str]) -> dict[str, Any]:
    report = self._get(self._actor.measure.remote(dict(nas_params)))
    if 'error' in report:
      raise MeasureError(report['error'], report.get('error_type'))
    return report

  def measure_layer(self, key: str) -> dict[str, Any]:
    report = self._get(self._actor.measure_layer.remote(key))
    if 'error' in report:
      raise MeasureError(report['error'], report.get('error_type'))
    return report

  def close(self) -> None:
    if self._ray.is_initialized():
      with contextlib.suppress(Exception):
        self._ray.kill(self._actor)
      self._ray.shutdown()


class MeasureError(NascliError):
  """An architecture the runtime could not build or time (a remote one's message)."""

  def __init__(self, message: str, error_type: str | None = None):
    super().__init__(message)
    self.error_type = error_type


def _one_line(error: BaseException) -> str:
  return ' '.join(f'{error}'.split()) or type(error).__name__


# --------------------------------------------------------------------------- the job


@dataclasses.dataclass
class _State:
  """What the journal says so far."""
  sessions: list[dict[str, Any]]
  measured: dict[int, dict[str, Any]]
  failed: dict[int, dict[str, Any]]
  layers: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
  layers_failed: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


def _state(events: Sequence[Mapping[str, Any]]) -> _State:
  state = _State([], {}, {})
  for event in events:
    kind = event.get('event')
    if kind == 'session':
      state.sessions.append(dict(event))
    elif kind == 'measured':
      state.measured[event['index']] = dict(event)
      state.failed.pop(event['index'], None)
    elif kind == 'failed':
      state.failed[event['index']] = dict(event)
    elif kind == 'layer':
      state.layers[event['key']] = dict(event)
      state.layers_failed.pop(event['key'], None)
    elif kind == 'layer_failed':
      state.layers_failed[event['key']] = dict(event)
  return state


def _say(progress: Callable[[str], None] | None, line: str) -> None:
  if progress is not None:
    progress(line)


def _check_archs(archs: Sequence[Arch], state: _State, journal: str) -> None:
  """The journal's architectures are the ones these settings sample (a pyglove or nascli
  upgrade could change the random streams: the job would mix two sets)."""
  by_index = {a.index: a for a in archs}
  for index, event in list(state.measured.items()) + list(state.failed.items()):
    arch = by_index.get(index)
    if arch is None or arch.nas_params != event.get('nas_params'):
      raise InputError(f'{journal}: architecture {index} is not the one these settings sample'
                       ' now (another nascli or pyglove version?); --overwrite starts over')


def _check_session(where: Mapping[str, Any], first: Mapping[str, Any] | None, job: str) -> None:
  """A later session measures on the device and runtime build of the first."""
  if first is None:
    return
  for key, what in (('device', 'device'), ('runtime_version', 'runtime version')):
    if where.get(key) != first.get(key):
      raise NascliError(f'{job} was measured on {what} {first.get(key)!r}; this session would'
                        f' measure on {where.get(key)!r}: one latency model is of one device'
                        ' and runtime build (run it there, or --overwrite / another'
                        ' --local_output_dir to start a job here)')


def _drift_line(now_ms: float, first_ms: float | None) -> str:
  if first_ms is None:
    return (f'reference: {now_ms:.3g} ms (the space\'s first architecture, re-timed at the start'
            ' of every session)')
  change = now_ms / first_ms - 1.0
  line = f'reference: {now_ms:.3g} ms now, {first_ms:.3g} ms when the job began ({change:+.0%})'
  if abs(change) > DRIFT_WARNING:
    line += ('; the machine is not as it was (load, clock, another binary): this session\'s'
             ' measurements are not comparable with the earlier ones')
  return line


def _progress_line(done: int, total: int, report: Mapping[str, Any]) -> str:
  drift = f', halves {report["drift"]:.0%} apart' if 'drift' in report else ''
  line = (f'measured {done}/{total}: {report["latency_ms"]:.4g} ms (single calls spread'
          f' {report["spread"]:.0%}{drift})')
  if report.get('noisy'):
    line += f', noisy after {report.get("rounds", 1)} rounds: kept, marked'
  elif report.get('rounds', 1) > 1:
    line += f', re-measured ({report["rounds"]} rounds)'
  return line


def _where_event(where: Mapping[str, Any], args: BuildArgs, session: int,
                 reference: Mapping[str, Any]) -> dict[str, Any]:
  return {'event': 'session', 'session': session, **where,
          'ray': where.get('ray') if args.ray_address else None,
          'loadavg': list(os.getloadavg()) if hasattr(os, 'getloadavg') else None,
          'reference': dict(reference)}


def _measure_pending(args: BuildArgs, journal: Journal, archs: Sequence[Arch],
                     layers: Sequence[str], state: _State, space_name: str,
                     progress: Callable[[str], None] | None) -> None:
  """One session: start a measurer, re-time the reference, measure what the journal lacks
  (the architectures, and with --measure_layers the layers, spread among each other)."""
  pending = [a for a in measuring_order(archs) if a.index not in state.measured]
  pending_layers = [k for k in layers if k not in state.layers]
  total = len(archs)
  spec = measure_spec(args)
  where_to = f'on Ray ({args.ray_address})' if args.ray_address else 'here'
  also = (f' and {len(pending_layers)} of {len(layers)} layers alone' if layers else '')
  _say(progress, f'{len(pending)} of {total} architectures{also} to measure ({args.runtime} at'
       f' {args.input_size}x{args.input_size}, {args.num_threads} thread'
       f'{"s" if args.num_threads != 1 else ""}) {where_to}; loading TensorFlow')
  measurer = RayMeasurer(spec, args) if args.ray_address else LocalMeasurer(spec)
  session = len(state.sessions) + 1
  done, layers_done = len(state.measured), len(state.layers)
  try:
    where = measurer.start()
    _check_session(where, state.sessions[0] if state.sessions else None, args.job_dir)
    reference = {'nas_params': reference_architecture(space_name)}
    reference.update(_summary(measurer.measure(reference['nas_params'])))
    journal.append(_where_event(where, args, session, reference))
    first = state.sessions[0]['reference']['latency_ms'] if state.sessions else None
    _say(progress, _drift_line(reference['latency_ms'], first))
    failures = 0
    for item in _spread(pending, pending_layers):
      try:
        if isinstance(item, Arch):
          report = measurer.measure(item.nas_params)
        else:
          report = measurer.measure_layer(item)
      except Exception as e:  # pylint: disable=broad-except
        if interrupts.received():  # a signal that came back as TensorFlow's own error
          raise interrupts.Interrupted(interrupts.received()) from e
        why = _one_line(e) if isinstance(e, NascliError) else (
            f'{type(e).__name__}: {_one_line(e)}')
        failures += 1
        if isinstance(item, Arch):
          journal.append({'event': 'failed', 'index': item.index, 'split': item.split,
                          'nas_params': item.nas_params, 'error': why, 'session': session})
          _say(progress, f'architecture {item.index} could not be measured: {why}')
        else:
          journal.append({'event': 'layer_failed', 'key': item, 'error': why,
                          'session': session})
          _say(progress, f'layer {item!r} could not be measured: {why}')
        if failures >= MAX_FAILURES_IN_A_ROW:
          raise NascliError(f'{failures} in a row could not be measured, the last: {why}'
                            ) from None
        continue
      failures = 0
      if isinstance(item, Arch):
        done += 1
        journal.append({'event': 'measured', 'index': item.index, 'split': item.split,
                        'nas_params': item.nas_params, 'latency_ms': report['latency_ms'],
                        'report': _summary(report), 'session': session})
        _say(progress, _progress_line(done, total, report))
      else:
        layers_done += 1
        journal.append({'event': 'layer', 'key': item, 'latency_ms': report['latency_ms'],
                        'report': _summary(report), 'session': session})
        if layers_done % LAYER_PROGRESS_EVERY == 0 or layers_done == len(layers):
          _say(progress, f'layers {layers_done}/{len(layers)} timed alone (the last:'
                         f' {item}, {report["latency_ms"]:.4g} ms)')
  except KeyboardInterrupt as e:
    layers_part = f' and {layers_done} of {len(layers)} layers' if layers else ''
    raise interrupts.Interrupted.of(
        e, f'latency measurements in {args.job_dir} after {done} of {total} architectures'
        f'{layers_part}',
        'run the same command again to continue: what is measured is kept') from None
  finally:
    measurer.close()


# What a measurement line keeps of a runtime's report.
_REPORT_KEYS = ('latency_ms', 'median_ms', 'p10_ms', 'p90_ms', 'min_ms', 'spread', 'drift',
                'runs', 'warmup_runs', 'rounds', 'noisy', 'build_s', 'convert_s', 'tflite_bytes',
                'seconds')


def _summary(report: Mapping[str, Any]) -> dict[str, Any]:
  return {k: report[k] for k in _REPORT_KEYS if k in report}


def _fit(args: BuildArgs, archs: Sequence[Arch], state: _State, space_name: str) -> Any:
  """The latency model of the journal's measurements (TF-free)."""
  from nascli import latency_model  # pylint: disable=g-import-not-at-top
  rows = {TRAIN: [], HELDOUT: []}
  for arch in archs:
    event = state.measured.get(arch.index)
    if event is not None:
      rows[arch.split].append((arch.nas_params, float(event['latency_ms'])))
  first = state.sessions[0]
  reference = {'nas_params': first['reference']['nas_params'],
               'ms': first['reference']['latency_ms'],
               'sessions': [s['reference']['latency_ms'] for s in state.sessions]}
  table = None
  if args.measure_layers and state.layers:
    table = {key: float(e['latency_ms']) for key, e in state.layers.items()}
  return latency_model.build(
      rows[TRAIN], rows[HELDOUT], space=space_name,
      decisions=latency_model.decisions_of_space(space_name), runtime=args.runtime,
      runtime_version=first['runtime_version'], device=first['device'],
      input_size=args.input_size, num_threads=args.num_threads, seed=args.seed,
      reference=reference, layer_table=table)


def run(args: BuildArgs, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
  """Measures what the job dir lacks, fits the latency model and writes it to args.output_path.

  Returns:
    `{"model": path, "latency_model": the model's dict, "describe", "measured", "failed",
    "noisy", "sessions", "reference_ms"}`.

  Raises:
    NascliError: settings that differ from the job dir's, another device, a runtime that
      cannot measure here, too few measurements to fit (one line each).
    interrupts.Interrupted: Ctrl-C or SIGTERM while measuring (what is measured is kept).
  """
  if storage.is_gcs(args.job_dir):
    raise NascliError(f'--local_output_dir {args.job_dir}: the measurement journal needs a'
                      ' local folder (--output may be gs://)')
  journal = Journal(args.job_dir)
  with journal.writing():
    if args.overwrite:
      journal.remove()
      with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(args.job_dir, MODEL_NAME))
    events = check_settings(dataclasses.replace(args, overwrite=False))
    entry = space_entry(args)
    archs = architectures(entry.name, args)
    if not events:
      settings = args.settings()
      journal.append({'event': 'job', 'settings': settings,
                      'fingerprint': fingerprint(settings)})
    state = _state(events)
    _check_archs(archs, state, journal.path)
    layers = layer_keys(entry.name, args) if args.measure_layers else []
    if len(state.measured) < len(archs) or any(k not in state.layers for k in layers):
      _measure_pending(args, journal, archs, layers, state, entry.name, progress)
      state = _state(journal.events())
    else:
      _say(progress, f'all {len(archs)} architectures are measured ({journal.path}): fitting')
    missing = [k for k in layers if k not in state.layers]
    if missing:
      raise NascliError(f'{len(missing)} of {len(layers)} layers could not be timed alone (the'
                        f' first: {missing[0]!r}, {state.layers_failed.get(missing[0], {}).get("error", "?")});'
                        ' run the same command again to retry them, or leave --measure_layers'
                        ' out')
    model = _fit(args, archs, state, entry.name)
    model.save(args.output_path)
  sessions = [s['reference']['latency_ms'] for s in state.sessions]
  return {'model': args.output_path, 'journal': journal.path, 'describe': model.describe(),
          'latency_model': model.to_dict(), 'measured': len(state.measured),
          'failed': sorted(state.failed),
          'noisy': sorted(i for i, e in state.measured.items() if e['report'].get('noisy')),
          'layers': len(state.layers),
          'sessions': len(state.sessions), 'reference_ms': sessions}
