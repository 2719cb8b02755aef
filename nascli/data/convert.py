"""Converts a Source into evenly sharded TFRecords with labels.txt and dataset_info.json.

Crash safety: shards are written under hidden temporary names and renamed when complete; a state
file lists the completed shards, so a killed conversion resumes where it stopped; dataset_info.json
is written last and is the mark of a finished output. A run that fails or is interrupted before
any shard is finished leaves nothing behind (not even the folder, when it made it): a re-run,
with any settings, starts afresh, as there is nothing to lose.

Nothing here imports TensorFlow (records are serialized by `tfexample`, framed by
`tfrecord_io`), so a conversion starts in about a second and its workers stay small.
"""

import collections
import dataclasses
import hashlib
import json
import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

import nascli
from nascli import interrupts, storage
from nascli.data import log_progress, parallel, reasons, sharding, tfexample
from nascli.data import splits as data_splits
from nascli.data.parallel import Workers
from nascli.data.datasets import source_for
from nascli.data.source import (CLASSIFICATION, ConvertOptions, CorruptItemError, MissingItemError,
                                Source)
from nascli.data.tfrecord_io import TFRecordFileWriter
from nascli.errors import OutputError

INFO_FILE = "dataset_info.json"
LABELS_FILE = "labels.txt"
STATE_FILE = ".nascli-convert-state.json"
WORK_DIR = ".nascli-work"
FORMAT_VERSION = 2  # 2: a test split beside validation, and each split's origin
CHUNK_SIZE = 32
CHECK_CHUNK_SIZE = 128
# Below this many (estimated) bytes of output a conversion runs in one process: forking a pool
# costs more than it saves.
SMALL_JOB_BYTES = 4 * 1024 * 1024
# Fingerprint keys of earlier versions that do not change the shards: --skip_corrupt only decides
# whether a corrupt image stops the run; a finished run either had none or lists what it skipped.
_NOT_IN_FINGERPRINT = ("skip_corrupt",)

# Messages are plain text: no markup (paths may hold brackets), no wrapping at 80 columns in logs.
stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def say(message: str) -> None:
  stderr.print(message, markup=False)


@dataclasses.dataclass
class ShardingOptions:
  num_shards: int | None = None
  num_workers: int = 1
  drop_remainder: bool = False
  processes: int = len(os.sched_getaffinity(0))
  overwrite: bool = False


def atomic_write_text(path: Path, text: str) -> None:
  """Writes a file so that it is either absent, old, or complete."""
  storage.write_text(path, text)


def file_sha256(path: Path) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def _canonical(obj: Any) -> str:
  return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def _labels_text(source: Source) -> str:
  return "".join(f"{c.id}:{c.name}\n" for c in source.classes())


def _comparable(fingerprint: Any) -> Any:
  if not isinstance(fingerprint, dict):
    return fingerprint
  return {k: v for k, v in fingerprint.items() if k not in _NOT_IN_FINGERPRINT}


def _same_settings(old: Any, new: dict) -> bool:
  return _comparable(old) == _comparable(new)


class _PlainProgress:
  """Progress for logs: a line every console.PROGRESS_SECONDS naming the split, count and ETA."""

  def __init__(self, stage: str, splits: list[tuple[str, int]]):
    self.stage, self.splits = stage, splits
    self.total = sum(n for _, n in splits)
    self.pacer = log_progress.Pacer()

  def _split_at(self, done: int) -> str:
    """The split being worked on: items go split by split, in this order."""
    for split, n in self.splits:
      if done < n:
        return split
      done -= n
    return self.splits[-1][0] if self.splits else ""

  def update(self, done: int) -> None:
    if not self.total or not self.pacer.due():
      return
    elapsed = self.pacer.elapsed()
    say(f"{self.stage}: {self._split_at(done)}, {done}/{self.total} images"
        f" ({100 * done // self.total}%), {done / max(elapsed, 1e-9):.0f} images/s, elapsed"
        f" {log_progress.clock(elapsed)}, ETA {self.pacer.eta(done, self.total)}")


@contextlib.contextmanager
def _progress(stage: str, splits: list[tuple[str, int]], enabled: bool
              ) -> Iterator[Callable[[int], None]]:
  """A function taking the number of items done: a Rich bar on a terminal, lines in a log."""
  if not enabled:
    yield lambda done: None
  elif stderr.is_terminal:
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[rate]:>8} img/s"), TimeElapsedColumn(),
                  TextColumn("ETA"), TimeRemainingColumn(), console=stderr,
                  transient=False) as progress:
      bar = progress.add_task(stage, total=sum(n for _, n in splits), rate="")
      start = time.monotonic()
      yield lambda done: progress.update(
          bar, completed=done, rate=f"{done / max(time.monotonic() - start, 1e-9):.0f}")
  else:
    yield _PlainProgress(stage, splits).update


def _temporaries(output_dir: Path) -> list[Path]:
  """Half-written files of a conversion: shards and state/labels/info being written."""
  found = list(output_dir.glob(".*.tfrecord.tmp"))
  for name in (INFO_FILE, LABELS_FILE, STATE_FILE):
    found += output_dir.glob(f".{name}.*.tmp")
  return sorted(found)


def _our_files(output_dir: Path, splits: list[str]) -> list[Path]:
  """Files a conversion of these splits may have left: shards, temporaries, labels, info, state."""
  found = []
  for p in output_dir.iterdir():
    m = sharding.SHARD_PATTERN.match(p.name.lstrip(".").removesuffix(".tmp"))
    if m and m.group("prefix") in splits:
      found.append(p)
  for name in (INFO_FILE, LABELS_FILE, STATE_FILE):
    if (output_dir / name).exists():
      found.append(output_dir / name)
    # Temporaries of storage.write_text: `.NAME.<random>.tmp`.
    found += sorted(output_dir.glob(f".{name}.*.tmp"))
  return found


class Converter:
  """One conversion of one Source into one output folder."""

  def __init__(self, source: Source, output_dir: Path, opts: ShardingOptions):
    self.source = source
    self.output_dir = output_dir
    self.opts = opts
    self.skipped: dict[str, list[dict]] = collections.defaultdict(list)
    self.state: dict | None = None
    self.elapsed, self.written = 0.0, 0

  @property
  def where(self) -> str:
    """The output as the user named it, for messages."""
    return str(self.output_dir)

  def _finished_shards(self) -> int:
    """Shards finished and kept, by this run or an earlier one of the same conversion."""
    if self.state is not None:
      return len(self.state["completed"])
    try:  # stopped before this run read the state
      return len(json.loads((self.output_dir / STATE_FILE).read_text("utf-8"))["completed"])
    except (OSError, ValueError, KeyError, TypeError):
      return 0

  # ----- planning

  def _check_items(self, sizes: dict[str, int]) -> None:
    """Decodes every item once before planning, so corrupt ones cannot unbalance the shards.

    What check() returns is kept on the source, so the writing workers (forked afterwards) do not
    decode the items a second time.
    """
    progress = _progress("checking", list(sizes.items()), self.source.options.progress)
    with progress as update, Workers(self.source, self._processes(), self.output_dir) as w:
      tick = lambda: update(w.done)  # noqa: E731
      for split, n in sizes.items():
        kept = self.source.checked.setdefault(split, {})
        tasks = parallel.chunks(split, range(n), CHECK_CHUNK_SIZE)
        for results in w.imap(parallel.check_chunk, tasks, tick):
          for index, error, probe in results:
            if error is None:
              kept[index] = probe
              continue
            error = error.named(self.source.item_name(split, index))
            if not self.source.options.skip_corrupt:
              raise error
            self.skipped[split].append(
                {"item": error.item, "index": index, "reason": error.reason})
    for split, items in self.skipped.items():
      say(f"skipped {len(items)} corrupt or missing image(s) in {split}: "
          + ", ".join(i["item"] for i in items[:5]) + (" ..." if len(items) > 5 else ""))

  def _processes(self) -> int:
    """Worker count: one process for jobs too small to repay forking a pool."""
    total = sum(self.source.estimated_bytes(s) for s in self.source.split_sizes())
    return 1 if total < SMALL_JOB_BYTES else self.opts.processes

  def _plans(self, sizes: dict[str, int]) -> dict[str, sharding.ShardPlan]:
    plans = {}
    for split, n in sizes.items():
      bad = {s["index"] for s in self.skipped.get(split, [])}
      items = [i for i in range(n) if i not in bad]
      num_shards, note = sharding.resolve_num_shards(
          self.opts.num_shards, self.opts.num_workers, len(items),
          self.source.estimated_bytes(split))
      if note:
        say(f"{split}: {note}")
      plans[split] = sharding.plan_shards(items, num_shards, self.opts.drop_remainder)
      if plans[split].dropped:
        say(f"{split}: dropped {len(plans[split].dropped)} record(s) so that all"
            f" {num_shards} shards hold {plans[split].counts[0]} (--drop_remainder)")
    return plans

  @staticmethod
  def _plan_digest(plans: dict[str, sharding.ShardPlan]) -> str:
    """Which item goes to which shard: completed shards are reused only under the same plan."""
    plan = {split: [p.shards, p.dropped] for split, p in plans.items()}
    return hashlib.sha256(_canonical(plan).encode()).hexdigest()

  def fingerprint(self) -> dict[str, Any]:
    return {
        "dataset": self.source.name,
        "source_checksum": self.source.source_info().get("sha256"),
        "settings": self.source.settings(),
        "sharding": {"num_shards": self.opts.num_shards, "num_workers": self.opts.num_workers,
                     "drop_remainder": self.opts.drop_remainder},
        "format_version": FORMAT_VERSION,
    }

  # ----- existing output

  def _existing(self, fingerprint: dict, splits: list[str]) -> dict | None:
    """The verified info of a finished identical conversion, or None to (re)write; may refuse."""
    info_path = self.output_dir / INFO_FILE
    state_path = self.output_dir / STATE_FILE
    ours = _our_files(self.output_dir, splits)
    if self.opts.overwrite:
      for p in ours:
        p.unlink()
      return None
    if info_path.exists():
      info = _read_json(info_path)
      if not _same_settings(info.get("fingerprint"), fingerprint):
        raise OutputError(
            f"{self.output_dir} already holds a different conversion"
            f" ({_difference(info.get('fingerprint'), fingerprint)}); pass --overwrite or choose"
            " another --output_dir")
      self._refuse_skipped_unless_asked(info)
      verify_checksums(self.output_dir, info)
      return info
    if state_path.exists():
      state = _read_json(state_path)
      if not _same_settings(state.get("fingerprint"), fingerprint):
        shards = [p for p in ours if sharding.SHARD_PATTERN.match(p.name)]
        if state.get("completed") or shards:
          raise OutputError(
              f"{self.output_dir} holds an unfinished conversion with other settings"
              f" ({_difference(state.get('fingerprint'), fingerprint)}) and"
              f" {max(len(state.get('completed') or ()), len(shards))} finished shard(s); run"
              " it again with its settings to finish it, pass --overwrite, or choose another"
              " --output_dir")
        # A run that finished no shard (it failed or was stopped early) leaves nothing to lose.
        say(f"starting afresh: the unfinished conversion in {self.output_dir} had other settings"
            f" ({_difference(state.get('fingerprint'), fingerprint)}) and no finished shard")
        for p in ours:
          p.unlink()
      return None
    finals = [p for p in ours if not p.name.startswith(".")]
    if finals:
      raise OutputError(
          f"{self.output_dir} already contains {finals[0].name} not written by this conversion;"
          " pass --overwrite or choose another --output_dir")
    return None

  def _refuse_skipped_unless_asked(self, info: dict) -> None:
    """A finished conversion that skipped images answers a run without --skip_corrupt as a fresh
    run would: with the first image it skipped."""
    if self.source.options.skip_corrupt:
      return
    for split in info.get("splits", {}).values():
      for skipped in split.get("skipped_corrupt") or ():
        error = MissingItemError if skipped["reason"] == "missing file" else CorruptItemError
        raise error(skipped["item"], skipped["reason"])

  # ----- writing

  def _load_state(self, fingerprint: dict) -> dict:
    state_path = self.output_dir / STATE_FILE
    if state_path.exists():
      state = _read_json(state_path)
      if _same_settings(state.get("fingerprint"), fingerprint):
        return dict(state, fingerprint=fingerprint)
    return {"fingerprint": fingerprint, "completed": {}}

  def _use_plan(self, plans: dict[str, sharding.ShardPlan]) -> None:
    """Records the plan in the state; shards completed under another plan are not reused."""
    digest = self._plan_digest(plans)
    state = self.state
    if state.get("plan") not in (None, digest) and state["completed"]:
      say(f"the images to convert changed since the interrupted run (other images skipped as"
          f" corrupt or missing); rewriting its {len(state['completed'])} finished shard(s)")
      state["completed"] = {}
    state["plan"] = digest
    atomic_write_text(self.output_dir / STATE_FILE, _canonical(state))

  def _write_shards(self, plans: dict[str, sharding.ShardPlan], state: dict) -> dict:
    """Writes every shard not already complete; returns the completed shards' entries."""
    completed = state["completed"]
    # Shards finished by an earlier, killed run are kept when their bytes still match.
    for name, entry in list(completed.items()):
      path = self.output_dir / name
      if not path.exists() or file_sha256(path) != entry["sha256"]:
        del completed[name]
    for p in self.output_dir.glob(".*.tfrecord.tmp"):
      p.unlink()
    todo = []
    for split, plan in plans.items():
      for s, items in enumerate(plan.shards):
        name = sharding.shard_name(split, s, plan.num_shards)
        if name not in completed:
          todo.append((split, name, items))
    total = sum(len(items) for _, _, items in todo)
    resumed = sum(len(p.shards) for p in plans.values()) - len(todo)
    if resumed:
      say(f"resuming: {resumed} shard(s) already complete, {len(todo)} to write")
    processes = self._processes()
    # Whole shards per worker unless that would leave workers idle at the end.
    whole_shards = processes == 1 or len(todo) % processes == 0 or len(todo) >= 4 * processes
    start = time.monotonic()
    per_split = collections.Counter()
    for split, _, items in todo:
      per_split[split] += len(items)
    progress = _progress("writing", list(per_split.items()), self.source.options.progress)
    with progress as update, Workers(self.source, processes, self.output_dir) as w:
      tick = lambda: update(w.done)  # noqa: E731
      shards = (w.imap(parallel.write_shard, todo, tick) if whole_shards
                else self._write_from_chunks(w, todo, tick))
      for shard in shards:
        final = self.output_dir / shard.name
        os.replace(self.output_dir / parallel.temp_name(shard.name), final)
        completed[shard.name] = {"split": shard.name.rsplit("-", 3)[0],
                                 "num_records": len(shard.metas), "sha256": shard.sha256,
                                 "bytes": shard.size, "summary": _summarize(shard.metas)}
        atomic_write_text(self.output_dir / STATE_FILE, _canonical(state))
    self.elapsed = time.monotonic() - start
    self.written = total
    return completed

  def _write_from_chunks(self, w: Workers, todo: list, tick) -> Iterator[parallel.WrittenShard]:
    """Workers encode runs of items, this process writes them: for fewer shards than workers."""
    tasks = (chunk for split, _, items in todo
             for chunk in parallel.chunks(split, items, CHUNK_SIZE))
    results = w.imap(parallel.encode_chunk, tasks, tick)
    for _, name, items in todo:
      metas = []
      with TFRecordFileWriter(self.output_dir / parallel.temp_name(name)) as writer:
        while len(metas) < len(items):
          for data, meta in next(results):
            writer.write(data)
            metas.append(meta)
      yield parallel.WrittenShard(name, writer.sha256, writer.size, metas)

  def run(self) -> dict:
    """Converts, or verifies a finished identical conversion; cleans up after a failure."""
    if self.output_dir.exists() and not self.output_dir.is_dir():
      raise OutputError(f"output dir {self.output_dir} is a file")
    made = _missing_folders(self.output_dir)
    try:
      return self._run()
    except KeyboardInterrupt as e:
      self._save_state()
      self._clean_up(made)
      finished = self._finished_shards()
      kept = (f"{finished} finished shard(s) kept" if finished else "no shard finished yet")
      raise interrupts.Interrupted.of(
          e, what=f"converting {self.source.name} into {self.where} ({kept})",
          resume="run the same command again to continue") from None
    except BaseException:
      self._clean_up(made)
      raise

  def _save_state(self) -> None:
    """Records what is finished: a signal may land between a shard's rename and its record."""
    if self.state is not None and self.output_dir.is_dir():
      atomic_write_text(self.output_dir / STATE_FILE, _canonical(self.state))

  def _clean_up(self, made: list[Path]) -> None:
    """After a failure: half-written files go; without a finished shard everything of this
    conversion goes, and the folders this run made (nothing there is worth resuming)."""
    if not self.output_dir.is_dir():
      return
    for p in _temporaries(self.output_dir):
      p.unlink(missing_ok=True)
    shutil.rmtree(self.output_dir / WORK_DIR, ignore_errors=True)
    if self.state is not None and not self.state["completed"]:
      unrecorded = [p for p in self.output_dir.glob("*.tfrecord")
                    if sharding.SHARD_PATTERN.match(p.name)]
      if not unrecorded:  # a shard renamed in place, its state not yet written, is kept
        (self.output_dir / STATE_FILE).unlink(missing_ok=True)
    for folder in made:  # deepest first
      try:
        folder.rmdir()
      except OSError:
        break  # not empty: it holds something worth keeping

  def _run(self) -> dict:
    source = self.source
    self.output_dir.mkdir(parents=True, exist_ok=True)
    source.options.work_dir = self.output_dir / WORK_DIR
    source.prepare()
    sizes = source.split_sizes()
    fingerprint = self.fingerprint()
    existing = self._existing(fingerprint, list(sizes))
    if existing is not None:
      return dict(existing, status="verified")
    state = self.state = self._load_state(fingerprint)
    atomic_write_text(self.output_dir / STATE_FILE, _canonical(state))
    if source.needs_check:
      self._check_items(sizes)
    plans = self._plans(sizes)
    self._use_plan(plans)
    completed = self._write_shards(plans, state)
    info = self._info(fingerprint, plans, completed)
    atomic_write_text(self.output_dir / LABELS_FILE, _labels_text(source))
    atomic_write_text(self.output_dir / INFO_FILE, json.dumps(info, indent=2, sort_keys=False))
    (self.output_dir / STATE_FILE).unlink()
    shutil.rmtree(self.output_dir / WORK_DIR, ignore_errors=True)
    return dict(info, status="written")

  def _info(self, fingerprint: dict, plans: dict, completed: dict) -> dict:
    source = self.source
    classes = source.classes()
    splits = {}
    origins = source.split_origins()
    for split, plan in plans.items():
      names = [sharding.shard_name(split, s, plan.num_shards) for s in range(plan.num_shards)]
      entries = [completed[n] for n in names]
      splits[split] = {
          "num_records": sum(e["num_records"] for e in entries),
          "num_shards": plan.num_shards,
          "file_pattern": f"{split}-*-of-{plan.num_shards:05d}.tfrecord",
          "origin": origins[split],
          "role": data_splits.ROLES[split],
          "shards": [{"file": n, "num_records": e["num_records"], "bytes": e["bytes"],
                      "sha256": e["sha256"]} for n, e in zip(names, entries)],
          **_merge_summaries([e["summary"] for e in entries]),
          "dropped": [source.item_name(split, i) for i in plan.dropped],
          "skipped_corrupt": [{"item": s["item"], "reason": s["reason"]}
                              for s in self.skipped.get(split, [])],
      }
    num_classes = (len(classes) if source.task == CLASSIFICATION
                   else max((c.id for c in classes), default=0) + 1)
    return {
        "format_version": FORMAT_VERSION,
        "created_by": f"nascli {nascli.__version__}",
        "dataset": source.name,
        "task": source.task,
        "source": source.source_info(),
        "settings": {**source.settings(), "num_workers": self.opts.num_workers,
                     "drop_remainder": self.opts.drop_remainder},
        "fingerprint": fingerprint,
        "num_classes": num_classes,
        "classes": [{"id": c.id, "name": c.name} for c in classes],
        "feature_keys": list(tfexample.CLASSIFICATION_KEYS if source.task == CLASSIFICATION
                             else tfexample.DETECTION_KEYS),
        "splits": splits,
    }


def _summarize(metas: list[dict]) -> dict:
  heights = [m["height"] for m in metas]
  widths = [m["width"] for m in metas]
  sizes = collections.Counter(f"{m['height']}x{m['width']}" for m in metas)
  out = {"min_height": min(heights), "max_height": max(heights), "min_width": min(widths),
         "max_width": max(widths), "sizes": dict(sizes) if len(sizes) <= 64 else {}}
  if metas and "label" in metas[0]:
    out["class_counts"] = dict(collections.Counter(str(m["label"]) for m in metas))
  if metas and "classes" in metas[0]:
    out["class_counts"] = dict(collections.Counter(str(c) for m in metas for c in m["classes"]))
    out["num_objects"] = sum(len(m["classes"]) for m in metas)
  return out


def _merge_summaries(summaries: list[dict]) -> dict:
  sizes = collections.Counter()
  counts = collections.Counter()
  for s in summaries:
    sizes.update(s["sizes"])
    counts.update(s.get("class_counts", {}))
  merged = {"image_sizes": {
      "min_height": min(s["min_height"] for s in summaries),
      "max_height": max(s["max_height"] for s in summaries),
      "min_width": min(s["min_width"] for s in summaries),
      "max_width": max(s["max_width"] for s in summaries),
      "distinct": dict(sorted(sizes.items())) if len(sizes) <= 64 else None}}
  merged["class_counts"] = dict(sorted(counts.items(), key=lambda kv: int(kv[0])))
  if any("num_objects" in s for s in summaries):
    merged["num_objects"] = sum(s.get("num_objects", 0) for s in summaries)
  return merged


def _missing_folders(path: Path) -> list[Path]:
  """`path` and those of its parents that do not exist yet, deepest first."""
  missing = []
  path = Path(os.path.abspath(path))
  while not path.exists() and path != path.parent:
    missing.append(path)
    path = path.parent
  return missing


def _read_json(path: Path) -> dict:
  try:
    return json.loads(path.read_text(encoding="utf-8"))
  except (OSError, ValueError) as e:
    raise OutputError(f"cannot read {path}: {reasons.reason(e)}") from None


def _difference(old: dict | None, new: dict) -> str:
  if not isinstance(old, dict):
    return "no settings recorded"
  old, new = _comparable(old), _comparable(new)
  diffs = []
  for key in sorted(set(old) | set(new)):
    if old.get(key) != new.get(key):
      diffs.append(f"{key}: {_canonical(old.get(key))} -> {_canonical(new.get(key))}")
  return "; ".join(diffs)[:300] or "unknown difference"


def verify_checksums(output_dir: Path, info: dict) -> None:
  """Fast check of a finished output: every shard present with its recorded bytes."""
  for split in info.get("splits", {}).values():
    for shard in split["shards"]:
      path = output_dir / shard["file"]
      if not path.exists():
        raise OutputError(f"shard {path} listed in {INFO_FILE} is missing; pass --overwrite to"
                          " rewrite the conversion")
      if file_sha256(path) != shard["sha256"]:
        raise OutputError(f"shard {path} does not match the checksum in {INFO_FILE}; pass"
                          " --overwrite to rewrite the conversion")


class GcsConverter(Converter):
  """A conversion whose output is a gs:// prefix: written by the local writer into a staging
  folder, then uploaded shard by shard with dataset_info.json last (its presence marks the data
  set complete, as locally). The staging folder is kept until the upload is done, so a conversion
  or upload cut short resumes; the local rules on existing output apply to the prefix's objects.
  """

  def __init__(self, source: Source, url: str, opts: ShardingOptions):
    super().__init__(source, staging_dir(url), opts)
    self.url = url
    self.remote_verified = False

  @property
  def where(self) -> str:
    return self.url

  def _existing(self, fingerprint: dict, splits: list[str]) -> dict | None:
    sizes = {n: b for n, b in storage.list_sizes(self.url).items() if "/" not in n}
    ours = sorted(n for n in sizes if n in (INFO_FILE, LABELS_FILE) or (
        (m := sharding.SHARD_PATTERN.match(n)) and m.group("prefix") in splits))
    if self.opts.overwrite:
      for n in ours:
        storage.delete(storage.join(self.url, n), missing_ok=True)
      return super()._existing(fingerprint, splits)
    if INFO_FILE in sizes:
      info = json.loads(storage.read_text(storage.join(self.url, INFO_FILE)))
      if not _same_settings(info.get("fingerprint"), fingerprint):
        raise OutputError(
            f"{self.url} already holds a different conversion"
            f" ({_difference(info.get('fingerprint'), fingerprint)}); pass --overwrite or choose"
            " another --output_dir")
      for split in info.get("splits", {}).values():
        for shard in split["shards"]:
          if sizes.get(shard["file"]) != shard["bytes"]:
            raise OutputError(
                f"shard {storage.join(self.url, shard['file'])} listed in {INFO_FILE} is missing"
                " or has another size; pass --overwrite to rewrite the conversion")
      self._refuse_skipped_unless_asked(info)
      self.remote_verified = True
      return info
    staged = next((_read_json(self.output_dir / f) for f in (INFO_FILE, STATE_FILE)
                   if (self.output_dir / f).exists()), None)
    if ours and (staged is None or not _same_settings(staged.get("fingerprint"), fingerprint)):
      raise OutputError(
          f"{self.url} already contains {ours[0]} not written by this conversion; pass"
          " --overwrite or choose another --output_dir")
    # Objects of ours without dataset_info.json: an upload of this very conversion was cut short.
    return super()._existing(fingerprint, splits)

  def upload(self, info: dict) -> None:
    shards = [s["file"] for split in info["splits"].values() for s in split["shards"]]
    say(f"uploading {len(shards)} shard(s) to {self.url}")
    storage.upload_dir(self.output_dir, self.url, marker=INFO_FILE,
                       names=[*shards, LABELS_FILE, INFO_FILE])
    shutil.rmtree(self.output_dir, ignore_errors=True)


def staging_dir(url: str) -> Path:
  """Where a gs:// conversion is written before upload: fixed per URL, so that it resumes."""
  g = storage.parse_gcs(url)
  name = Path(*(g.name.strip("/") or "_root").split("/"))
  return storage.default_cache_root().parent / "convert-staging" / g.bucket / name


def convert(name: str, output_dir: Path | str, options: ConvertOptions,
            opts: ShardingOptions) -> tuple[dict, dict]:
  """Runs a conversion; returns dataset_info and run statistics (records written, seconds).

  `output_dir` may be a gs:// URL (see GcsConverter).
  """
  source = source_for(name, options)
  if storage.is_gcs(output_dir):
    converter = GcsConverter(source, str(output_dir), opts)
    fresh = not converter.output_dir.exists()
    try:
      info = converter.run()
    except OutputError:
      if fresh:  # refused: leave no empty staging folder behind
        shutil.rmtree(converter.output_dir, ignore_errors=True)
      raise
    if converter.remote_verified:  # the bucket holds it all: nothing to keep locally
      shutil.rmtree(converter.output_dir, ignore_errors=True)
    else:
      try:
        converter.upload(info)
      except KeyboardInterrupt as e:
        raise interrupts.Interrupted.of(
            e, what=f"uploading {name} to {output_dir} (the finished conversion stays staged in"
            f" {converter.output_dir})", resume="run the same command again to finish the upload"
        ) from None
      info = dict(info, status="written")
  else:
    converter = Converter(source, Path(output_dir), opts)
    info = converter.run()
  stats = {"records_written": converter.written, "seconds": round(converter.elapsed, 3),
           "images_per_second": round(converter.written / converter.elapsed, 1)
                                if converter.elapsed else None}
  return info, stats
