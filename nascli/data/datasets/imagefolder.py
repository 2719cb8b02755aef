"""`imagefolder` (one sub-folder per class) and `flowers` (TensorFlow's flower_photos archive).

Both index image files in the parent process (sorted relative paths, so the order does not depend
on the filesystem), check that each file decodes in the workers, and store JPEG/PNG bytes as they
are; other formats are re-encoded to PNG because Model Garden's decoders read only JPEG and PNG.
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
_LABEL_ID = re.compile(r"^\s*(\d+)\s*$", re.ASCII)
_MAX_EXAMPLES = 5

FLOWERS_URL = ("https://storage.googleapis.com/download.tensorflow.org/example_images/"
               "flower_photos.tgz")
FLOWERS_ARCHIVE = "flower_photos.tgz"
FLOWERS_FOLDER = "flower_photos"
FLOWERS_CLASSES = ("daisy", "dandelion", "roses", "sunflowers", "tulips")
FLOWERS_VALIDATION_SIZE = 350  # FastNN's (TF-slim's) _NUM_VALIDATION.
FLOWERS_RULE = ("FastNN: all image paths sorted by relative path, shuffled with"
                " random.Random(seed).shuffle; the first validation_size are validation, the rest"
                " train (each split then kept in relative-path order)")


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


@register_source("imagefolder")
class ImageFolderSource(Source):
  """A folder with one sub-folder of images per class (class ids: sorted names, or --label_map)."""

  needs_check = True
  reads = frozenset({"source", "validation_source", "seed", "validation_fraction",
                     "validation_size", "label_map"})

  @classmethod
  def check_options(cls, options: ConvertOptions) -> None:
    if options.validation_fraction is not None and not 0.0 < options.validation_fraction < 1.0:
      raise NascliError(f"--validation_fraction {options.validation_fraction} must be between 0"
                        " and 1")
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
    self._validation_folder = None
    if self.options.validation_source is not None:
      self._splits = {"train": self._train_folder.items,
                      "validation": self._scan_validation(Path(self.options.validation_source))}
    else:
      self._splits = self._split(self._train_folder.items)

  # ----- hooks for sub-classes

  def _resolve_root(self) -> Path:
    """The folder whose sub-folders are the classes."""
    if self.options.source is None:
      raise InputError("imagefolder needs --source DIR (a folder with one sub-folder per class)")
    return Path(self.options.source)

  def _split(self, items: list[_Item]) -> dict[str, list[_Item]]:
    """A seeded split of the whole (sorted) list, so it depends only on the listing and seed."""
    n = len(items)
    if n < 2:
      raise InputError(f"--source {_show(self._train_folder.root)} holds {n} image(s); a"
                       " train/validation split needs at least 2 (or pass --validation_source)")
    num_validation = splits.validation_count(n, self.options.validation_fraction,
                                             self.options.validation_size,
                                             DEFAULT_VALIDATION_FRACTION)
    train, validation = splits.seeded_split(n, num_validation, self.options.seed)
    return {"train": [items[i] for i in train], "validation": [items[i] for i in validation]}

  def _split_info(self) -> dict[str, Any]:
    if self._validation_folder is not None:
      return {"validation_split": "validation_source"}
    return {"validation_split": "seeded: nascli.data.splits.seeded_split over the items in"
                                " relative-path order"}

  # -----

  def _scan_validation(self, root: Path) -> list[_Item]:
    if self.options.validation_fraction is not None or self.options.validation_size is not None:
      raise NascliError("give --validation_source or --validation_fraction/--validation_size,"
                        " not both")
    names = _class_folders(root, "--validation_source")
    for name in names:
      if name not in self._class_ids:
        raise InputError(f"validation class folder {_show(root / name)} is not a class of"
                         f" --source {_show(self._train_folder.root)}")
    self._validation_folder = _scan(root, self._class_ids, names)
    return self._validation_folder.items

  def source_info(self) -> dict[str, Any]:
    info = self._folder_info(self._train_folder)
    if self._validation_folder is not None:
      validation = self._folder_info(self._validation_folder)
      info["validation_source"] = validation
      # The fingerprint reads only the top-level checksum, so it must cover both folders.
      info["sha256"] = hashlib.sha256(
          f"{info['sha256']}\n{validation['sha256']}\n".encode()).hexdigest()
      info["checksum_of"] = "listing of --source and --validation_source"
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
            "validation_source": self._validation_folder is not None,
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

  reads = frozenset({"source", "seed", "validation_fraction", "validation_size", "label_map"})

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

  def _split(self, items: list[_Item]) -> dict[str, list[_Item]]:
    """FastNN's rule: shuffle every path with the seed, the first ones are validation."""
    n = len(items)
    if self.options.validation_fraction is None and self.options.validation_size is None:
      if n <= FLOWERS_VALIDATION_SIZE:
        raise InputError(f"flowers folder {_show(self._train_folder.root)} holds only {n} images,"
                         f" too few for the default {FLOWERS_VALIDATION_SIZE} validation images;"
                         " pass --validation_size")
      num_validation = FLOWERS_VALIDATION_SIZE
    else:
      num_validation = splits.validation_count(n, self.options.validation_fraction,
                                               self.options.validation_size,
                                               DEFAULT_VALIDATION_FRACTION)
    order = list(range(n))
    random.Random(self.options.seed).shuffle(order)
    self._num_validation = num_validation
    return {"train": [items[i] for i in sorted(order[num_validation:])],
            "validation": [items[i] for i in sorted(order[:num_validation])]}

  def _scan_validation(self, root: Path) -> list[_Item]:
    raise NascliError("flowers takes no --validation_source: its validation split is drawn from"
                      " the archive")

  def _split_info(self) -> dict[str, Any]:
    return {"validation_split": FLOWERS_RULE, "validation_size": self._num_validation,
            "seed": self.options.seed}

  def source_info(self) -> dict[str, Any]:
    info = super().source_info()
    if self._archive_info is not None:
      folder = {k: info.pop(k) for k in ("kind", "path", "sha256", "checksum_of")}
      info = {**self._archive_info, "extracted": {**folder, "path": FLOWERS_FOLDER}, **info}
    return info

  def settings(self) -> dict[str, Any]:
    return {**super().settings(), "validation_rule": "fastnn"}
