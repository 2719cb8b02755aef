"""`imagefolder` (one sub-folder per class) and `flowers` (TensorFlow's flower_photos archive).

Both index image files in the parent process (sorted relative paths, so the order does not depend
on the filesystem), check that each file decodes in the workers, and store JPEG/PNG bytes as they
are; other formats are re-encoded to PNG because Model Garden's decoders read only JPEG and PNG.

Both write three splits: `train`, `validation` (what the search scores on) and `test` (only
`nascli eval` reads it). imagefolder takes validation and test from --validation_source /
--test_source folders, or carves the missing ones from --source in one stratified split;
flowers carves both by FastNN's shuffle (FLOWERS_RULE).
"""

import dataclasses
import hashlib
import os
from pathlib import Path
import random
import re
import shutil
from typing import Any

from nascli.data import archives, download, images, reasons, splits
from nascli.data.source import (ClassInfo, ConvertOptions, CorruptItemError, MissingItemError,
                                Record, Source, register_source)
from nascli.errors import InputError, NascliError

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"})
DEFAULT_VALIDATION_FRACTION = 0.1
DEFAULT_TEST_FRACTION = 0.1  # 80/10/10 with the validation default
# The held-out parts carved from --source, in the order stratified_split cuts them.
_CARVE_ORDER = (splits.TEST, splits.VALIDATION)
CARVE_RULE = ("nascli.data.splits.stratified_split over the images of --source in relative-path"
              " order, labels = class ids, test cut before validation")
_LABEL_ID = re.compile(r"^\s*(\d+)\s*$", re.ASCII)
_MAX_EXAMPLES = 5

FLOWERS_URL = ("https://storage.googleapis.com/download.tensorflow.org/example_images/"
               "flower_photos.tgz")
FLOWERS_ARCHIVE = "flower_photos.tgz"
FLOWERS_FOLDER = "flower_photos"
FLOWERS_CLASSES = ("daisy", "dandelion", "roses", "sunflowers", "tulips")
FLOWERS_VALIDATION_SIZE = 350  # FastNN's (TF-slim's) _NUM_VALIDATION.
FLOWERS_TEST_SIZE = 350  # nascli's: FastNN has no test split; as many as its validation.
FLOWERS_RULE = ("FastNN: all image paths sorted by relative path, shuffled with"
                " random.Random(seed).shuffle; the first validation_size are validation"
                " (FastNN's split, unchanged), the next test_size are test (nascli's addition:"
                " FastNN has no test split), the rest train (each split then kept in"
                " relative-path order); not stratified")


def _show(text: Any) -> str:
  """Quotes text with control characters so that an error stays one line."""
  text = str(text)
  return text if text.isprintable() else ascii(text)


def _hidden(name: str) -> bool:
  return name.startswith(".")


@dataclasses.dataclass(frozen=True)
class _Item:
  path: str
  rel: str  # relative to its root folder, "/"-separated; the item's name in messages
  label: int
  size: int


@dataclasses.dataclass
class _Folder:
  """One indexed folder: its images in relative-path order and the files it ignored."""
  root: Path
  items: list[_Item]
  ignored: list[str]

  def listing_sha256(self) -> str:
    """Checksum of the listing (relative path and size of each image), not of the contents."""
    h = hashlib.sha256()
    for item in self.items:
      h.update(f"{item.rel}\t{item.size}\n".encode("utf-8"))
    return h.hexdigest()


def read_label_map(path: Path) -> list[ClassInfo]:
  """Parses a FastNN labels.txt (`id:name` lines, ids exactly 0..N-1) into classes in id order."""
  if not path.is_file():
    raise InputError(f"label map {_show(path)} is not a file")
  try:
    text = path.read_text(encoding="utf-8")
  except (OSError, UnicodeDecodeError) as e:
    raise InputError(f"cannot read label map {_show(path)}: {reasons.reason(e)}") from None
  by_id: dict[int, str] = {}
  by_name: dict[str, int] = {}
  for lineno, line in enumerate(text.splitlines(), 1):
    if not line.strip():
      continue
    id_text, sep, name = line.partition(":")
    name = name.strip()
    match = _LABEL_ID.match(id_text)
    if not sep or not name or not match:
      raise InputError(f"label map {_show(path)} line {lineno}: expected 'id:name', got"
                       f" {_show(line[:80])!r}")
    class_id = int(match.group(1))
    if class_id in by_id:
      raise InputError(f"label map {_show(path)} line {lineno}: duplicate id {class_id}")
    if name in by_name:
      raise InputError(f"label map {_show(path)} line {lineno}: duplicate name {_show(name)!r}")
    by_id[class_id] = name
    by_name[name] = class_id
  if not by_id:
    raise InputError(f"label map {_show(path)} holds no 'id:name' lines")
  missing = sorted(set(range(len(by_id))) - set(by_id))
  if missing:
    raise InputError(f"label map {_show(path)}: ids must be 0..{len(by_id) - 1} without gaps;"
                     f" id {missing[0]} is missing")
  return [ClassInfo(i, by_id[i]) for i in range(len(by_id))]


def _class_folders(root: Path, what: str) -> list[str]:
  """Sorted names of the visible sub-folders of root (each one a class)."""
  if not root.exists():
    raise InputError(f"{what} {_show(root)} does not exist")
  if not root.is_dir():
    raise InputError(f"{what} {_show(root)} is not a folder")
  try:
    names = sorted(p.name for p in root.iterdir() if not _hidden(p.name) and p.is_dir())
  except OSError as e:
    raise InputError(f"cannot list {what} {_show(root)}: {e.strerror or e}") from None
  if not names:
    raise InputError(f"{what} {_show(root)} has no class sub-folders (one folder per class)")
  for name in names:
    if not name.isprintable():
      raise InputError(f"class folder {_show(root / name)} has a control character in its name")
  return names


def _walk_error(err: OSError) -> None:
  raise InputError(f"cannot list {_show(err.filename)}: {err.strerror or err}")


def _scan(root: Path, class_ids: dict[str, int], class_names: list[str]) -> _Folder:
  """Every image file under root's class folders (recursively), in relative-path order."""
  items: list[_Item] = []
  # Loose files next to the class folders (flower_photos/LICENSE.txt) belong to no class.
  ignored = [p.name for p in root.iterdir() if not _hidden(p.name) and not p.is_dir()]
  root_prefix = len(str(root)) + 1
  for name in class_names:
    class_dir = root / name
    found = 0
    # Plain strings and os.walk: Path objects per file cost more than the walk itself.
    for dirpath, dirnames, filenames in os.walk(class_dir, onerror=_walk_error):
      dirnames[:] = sorted(d for d in dirnames if not _hidden(d))
      for filename in filenames:
        if _hidden(filename):
          continue
        path = os.path.join(dirpath, filename)
        rel = path[root_prefix:].replace(os.sep, "/")
        try:
          rel.encode("utf-8")
        except UnicodeEncodeError:
          raise InputError(f"file name {ascii(path)} is not valid UTF-8; rename it") from None
        if os.path.splitext(filename)[1].lower() not in IMAGE_EXTENSIONS:
          ignored.append(rel)
          continue
        try:
          size = os.stat(path).st_size
        except OSError:
          size = 0  # Unreadable: check() reports it as a corrupt item.
        items.append(_Item(path=path, rel=rel, label=class_ids[name], size=size))
        found += 1
    if not found:
      raise InputError(f"class folder {_show(class_dir)} holds no image files"
                       f" ({', '.join(sorted(IMAGE_EXTENSIONS))})")
  items.sort(key=lambda item: item.rel)
  ignored.sort()
  return _Folder(root=root, items=items, ignored=ignored)


def _file_sha256(path: Path) -> str:
  return download.file_digest(path, "sha256")


_DEFAULT_FRACTIONS = {splits.VALIDATION: DEFAULT_VALIDATION_FRACTION,
                      splits.TEST: DEFAULT_TEST_FRACTION}


def _refuse_source_and_size(options: ConvertOptions, part: str) -> None:
  if (getattr(options, f"{part}_fraction") is not None
      or getattr(options, f"{part}_size") is not None):
    raise NascliError(f"give --{part}_source or --{part}_fraction/--{part}_size, not both")


@register_source("imagefolder")
class ImageFolderSource(Source):
  """A folder with one sub-folder of images per class (class ids: sorted names, or --label_map)."""

  needs_check = True
  reads = frozenset({"source", "validation_source", "seed", "validation_fraction",
                     "validation_size", "test_source", "test_fraction", "test_size",
                     "label_map"})

  @classmethod
  def check_options(cls, options: ConvertOptions) -> None:
    splits.check_fractions(options)
    for part in splits.HELD_OUT:
      if getattr(options, f"{part}_source", None) is not None:
        _refuse_source_and_size(options, part)
    if options.label_map is not None:
      read_label_map(Path(options.label_map))

  def prepare(self) -> None:
    root = self._resolve_root()
    names = _class_folders(root, "--source")
    if self.options.label_map is not None:
      self._classes = read_label_map(Path(self.options.label_map))
      known = {c.name for c in self._classes}
      for name in names:
        if name not in known:
          raise InputError(f"label map {_show(self.options.label_map)} has no class"
                           f" {_show(name)!r} (class folder {_show(root / name)})")
    else:
      self._classes = [ClassInfo(i, name) for i, name in enumerate(names)]
    self._class_ids = {c.name: c.id for c in self._classes}
    self._train_folder = _scan(root, self._class_ids, names)
    # The held-out parts given as folders (--validation_source, --test_source), by part.
    self._held_folders: dict[str, _Folder] = {}
    for part in splits.HELD_OUT:
      folder = getattr(self.options, f"{part}_source")
      if folder is not None:
        self._held_folders[part] = self._scan_held(Path(folder), part)
    self._carved = [part for part in _CARVE_ORDER if part not in self._held_folders]
    parts = self._split(self._train_folder.items, self._carved)
    for part, folder in self._held_folders.items():
      parts[part] = folder.items
    self._splits = {part: parts[part] for part in (splits.TRAIN, splits.VALIDATION, splits.TEST)}

  # ----- hooks for sub-classes

  def _resolve_root(self) -> Path:
    """The folder whose sub-folders are the classes."""
    if self.options.source is None:
      raise InputError("imagefolder needs --source DIR (a folder with one sub-folder per class)")
    return Path(self.options.source)

  def _split(self, items: list[_Item], carve: list[str]) -> dict[str, list[_Item]]:
    """{"train": ..., part: ...} for each part in `carve`, cut from the whole (sorted) list in
    one stratified split, so it depends only on the listing, the sizes and the seed."""
    if not carve:
      return {splits.TRAIN: list(items)}
    n = len(items)
    if n <= len(carve):
      flags = " and ".join(f"--{part}_source" for part in carve)
      raise InputError(f"--source {_show(self._train_folder.root)} holds {n} image(s); carving"
                       f" {' and '.join(carve)} from it needs at least {len(carve) + 1} (or pass"
                       f" {flags})")
    sizes = {part: splits.held_out_count(n, getattr(self.options, f"{part}_fraction"),
                                         getattr(self.options, f"{part}_size"),
                                         _DEFAULT_FRACTIONS[part], part) for part in carve}
    positions = splits.stratified_split([item.label for item in items], sizes, self.options.seed)
    return {part: [items[i] for i in positions[part]] for part in (splits.TRAIN, *carve)}

  def split_origins(self) -> dict[str, str]:
    origins = {splits.TRAIN: "the --source folder" + (
        f", less the {' and '.join(self._carved)} images carved from it" if self._carved else "")}
    for part in self._held_folders:
      origins[part] = f"the --{part}_source folder"
    origins.update(splits.carved(self._carved, self.options.seed,
                                 "stratified by class (nascli.data.splits.stratified_split)",
                                 of="the --source folder"))
    return origins

  def _split_info(self) -> dict[str, Any]:
    info: dict[str, Any] = {f"{part}_split": (f"--{part}_source" if part in self._held_folders
                                               else "carved from --source")
                            for part in splits.HELD_OUT}
    if self._carved:
      info.update(split_rule=CARVE_RULE, seed=self.options.seed)
    info["split_sizes"] = self.split_sizes()
    return info

  # -----

  def _scan_held(self, root: Path, part: str) -> _Folder:
    """The --{part}_source folder: its classes must be classes of --source."""
    _refuse_source_and_size(self.options, part)
    flag = f"--{part}_source"
    names = _class_folders(root, flag)
    for name in names:
      if name not in self._class_ids:
        raise InputError(f"{part} class folder {_show(root / name)} is not a class of"
                         f" --source {_show(self._train_folder.root)}")
    return _scan(root, self._class_ids, names)

  def source_info(self) -> dict[str, Any]:
    info = self._folder_info(self._train_folder)
    if self._held_folders:
      checksums = [("--source", info["sha256"])]
      for part, folder in self._held_folders.items():
        held = self._folder_info(folder)
        info[f"{part}_source"] = held
        checksums.append((f"--{part}_source", held["sha256"]))
      # The fingerprint reads only the top-level checksum, so it must cover every folder.
      info["sha256"] = hashlib.sha256(
          "".join(f"{flag}\t{sha}\n" for flag, sha in checksums).encode()).hexdigest()
      info["checksum_of"] = "listing of " + " and ".join(flag for flag, _ in checksums)
    if self.options.label_map is not None:
      info["label_map"] = {"path": str(self.options.label_map),
                           "sha256": self._label_map_sha256()}
    info.update(self._split_info())
    return info

  def _folder_info(self, folder: _Folder) -> dict[str, Any]:
    return {"kind": "folder", "path": str(folder.root), "sha256": folder.listing_sha256(),
            "checksum_of": "listing", "num_images": len(folder.items),
            "ignored_files": len(folder.ignored),
            "ignored_examples": folder.ignored[:_MAX_EXAMPLES]}

  def _label_map_sha256(self) -> str | None:
    if self.options.label_map is None:
      return None
    return _file_sha256(Path(self.options.label_map))

  def classes(self) -> list[ClassInfo]:
    return list(self._classes)

  def split_sizes(self) -> dict[str, int]:
    return {k: len(v) for k, v in self._splits.items()}

  def settings(self) -> dict[str, Any]:
    return {"seed": self.options.seed, "validation_fraction": self.options.validation_fraction,
            "validation_size": self.options.validation_size,
            "validation_source": "validation" in self._held_folders,
            "test_fraction": self.options.test_fraction, "test_size": self.options.test_size,
            "test_source": "test" in self._held_folders, "split_rule": "stratified",
            "label_map_sha256": self._label_map_sha256()}

  def estimated_bytes(self, split: str) -> int:
    return sum(item.size for item in self._splits[split])

  def item_name(self, split: str, index: int) -> str:
    return self._splits[split][index].rel

  def _read(self, item: _Item) -> bytes:
    try:
      with open(item.path, "rb") as f:
        return f.read()
    except FileNotFoundError:  # removed since the folder was listed
      raise MissingItemError(item.rel) from None
    except OSError as e:
      raise CorruptItemError(item.rel, f"cannot read: {e.strerror or e}") from None

  def check(self, split: str, index: int) -> images.ImageProbe:
    item = self._splits[split][index]
    try:
      return images.probe(self._read(item))
    except ValueError as e:
      raise CorruptItemError(item.rel, str(e)) from None

  def record(self, split: str, index: int) -> Record:
    item = self._splits[split][index]
    data = self._read(item)
    try:
      encoded, fmt, info = images.to_storable(data, self.checked_probe(split, index))
    except ValueError as e:
      raise CorruptItemError(item.rel, str(e)) from None
    return Record(encoded=encoded, format=fmt, height=info.height, width=info.width,
                  label=item.label, source_id=item.rel, filename=item.rel)


@register_source("flowers")
class FlowersSource(ImageFolderSource):
  """TensorFlow's 3,670 flower photos in 5 classes, split the way FastNN (TF-slim) splits them."""

  reads = frozenset({"source", "seed", "validation_fraction", "validation_size", "test_fraction",
                     "test_size", "label_map"})

  def _resolve_root(self) -> Path:
    source = self.options.source
    self._archive_info: dict[str, Any] | None = None
    if source is None:
      archive = download.fetch(FLOWERS_URL, self.options.download_dir, FLOWERS_ARCHIVE,
                               progress=self.options.progress)
      # Google publishes no checksum for this file: record what was used instead.
      self._archive_info = {"kind": "download", "url": FLOWERS_URL, "path": str(archive),
                            "sha256": _file_sha256(archive), "checksum_of": "archive"}
      return self._find_photos(self._extract(archive))
    source = Path(source)
    if not source.exists():
      raise InputError(f"--source {_show(source)} does not exist")
    if source.is_file():
      self._archive_info = {"kind": "archive", "path": str(source),
                            "sha256": _file_sha256(source), "checksum_of": "archive"}
      return self._find_photos(self._extract(source))
    return self._find_photos(source)

  def _extract(self, archive: Path) -> Path:
    if self.options.work_dir is None:
      raise NascliError("flowers needs a work_dir to extract its archive into")
    dest = Path(self.options.work_dir) / "flowers"
    if dest.exists():
      shutil.rmtree(dest)  # Scratch left by an interrupted conversion.
    return archives.safe_extract(archive, dest)

  def _find_photos(self, folder: Path) -> Path:
    """flower_photos/ itself, or the folder that contains it; checks the five class folders."""
    root = folder / FLOWERS_FOLDER if (folder / FLOWERS_FOLDER).is_dir() else folder
    found = set(_class_folders(root, "flowers folder"))
    for name in FLOWERS_CLASSES:
      if name not in found:
        raise InputError(f"flowers folder {_show(root)} has no class folder {name!r} (expected"
                         f" {', '.join(FLOWERS_CLASSES)})")
    extra = sorted(found - set(FLOWERS_CLASSES))
    if extra:
      raise InputError(f"flowers folder {_show(root)} has an unexpected folder {_show(extra[0])!r}"
                       f" (expected only {', '.join(FLOWERS_CLASSES)})")
    return root

  def _split(self, items: list[_Item], carve: list[str]) -> dict[str, list[_Item]]:
    """FastNN's rule: shuffle every path with the seed, the first ones are validation; the next
    ones are test."""
    n = len(items)
    root = self._train_folder.root
    sizes = {}
    for part, default in ((splits.VALIDATION, FLOWERS_VALIDATION_SIZE),
                          (splits.TEST, FLOWERS_TEST_SIZE)):
      fraction = getattr(self.options, f"{part}_fraction")
      size = getattr(self.options, f"{part}_size")
      if fraction is None and size is None:
        sizes[part] = default
      else:
        sizes[part] = splits.held_out_count(n, fraction, size, _DEFAULT_FRACTIONS[part], part)
    if sizes[splits.VALIDATION] + sizes[splits.TEST] >= n:
      flags = " / ".join(f"--{part}_size" for part in sizes)
      raise InputError(f"flowers folder {_show(root)} holds only {n} images, too few for"
                       f" {sizes[splits.VALIDATION]} validation + {sizes[splits.TEST]} test images"
                       f" (default {FLOWERS_VALIDATION_SIZE} each) and some to train on; pass"
                       f" smaller {flags}")
    order = list(range(n))
    random.Random(self.options.seed).shuffle(order)
    num_validation, num_test = sizes[splits.VALIDATION], sizes[splits.TEST]
    self._sizes = sizes
    cut = {splits.VALIDATION: order[:num_validation],
           splits.TEST: order[num_validation:num_validation + num_test],
           splits.TRAIN: order[num_validation + num_test:]}
    return {part: [items[i] for i in sorted(positions)] for part, positions in cut.items()}

  def _scan_held(self, root: Path, part: str) -> _Folder:
    raise NascliError(f"flowers takes no --{part}_source: its {part} split is drawn from the"
                      " archive")

  def split_origins(self) -> dict[str, str]:
    v, t = self._sizes[splits.VALIDATION], self._sizes[splits.TEST]
    how = ("all image paths in relative-path order shuffled with random.Random(seed).shuffle,"
           " then {} (not stratified)")
    return {
        splits.TRAIN: (f"flower_photos: the images after the first {v + t} of FastNN's shuffled"
                       " order (FLOWERS_RULE)"),
        **splits.carved([splits.VALIDATION], self.options.seed,
                        how.format(f"the first {v} (FastNN's validation split)"),
                        of="flower_photos"),
        **splits.carved([splits.TEST], self.options.seed,
                        how.format(f"the next {t} after the {v} validation images"),
                        of="flower_photos"),
    }

  def _split_info(self) -> dict[str, Any]:
    return {"validation_split": "carved from flower_photos",
            "test_split": "carved from flower_photos", "split_rule": FLOWERS_RULE,
            "seed": self.options.seed,
            "validation_size": self._sizes[splits.VALIDATION],
            "test_size": self._sizes[splits.TEST], "split_sizes": self.split_sizes()}

  def source_info(self) -> dict[str, Any]:
    info = super().source_info()
    if self._archive_info is not None:
      folder = {k: info.pop(k) for k in ("kind", "path", "sha256", "checksum_of")}
      info = {**self._archive_info, "extracted": {**folder, "path": FLOWERS_FOLDER}, **info}
    return info

  def settings(self) -> dict[str, Any]:
    return {**super().settings(), "split_rule": "fastnn, test next"}
