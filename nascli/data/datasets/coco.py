"""`coco`: detection data in the COCO layout (instances JSON + image folders), from local files.

`--source DIR` reads `DIR/annotations/instances_<name>.json` with the images in `DIR/<name>/`:
train* is the training data and val* (val2017, COCO's own evaluation set) becomes "test", the
split only `nascli eval` reads; "validation", on which the search scores trials, is carved from the
train* images (`--validation_fraction`/`--validation_size`, default 10%, `--seed`). A folder
without val* has "test" carved the same way (`--test_fraction`/`--test_size`).

`--source FILE.json` (or, in Model Garden's create_coco_tf_record spelling,
`--object_annotations_file FILE.json`) reads one instances file as the training data;
`--validation_source FILE.json` and `--test_source FILE.json` give those splits, and whichever is
not given is carved from the training file's images (one seeded draw for both). The images are in
`--image_dir DIR` (what labelling tools export: one JSON and a folder of images), or else found
beside each JSON. Category ids keep their COCO values, gaps included, as Model Garden's COCO
tooling does.

A carved split is a seeded random draw over the training file's images in image-id order
(`nascli.data.splits.random_split`), each image with all its annotations. COCO evaluation builds
its ground truth from a split's records (tf_vision.evaluation.coco_groundtruth), so a carved split
needs no annotation file of its own; `source.validation_annotations` / `source.test_annotations`
in dataset_info.json name the original file only where the split is that whole file.
"""

import dataclasses
import hashlib
import json
import math
import os
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from nascli.data import images, splits
from nascli.data.source import (DETECTION, ClassInfo, ConvertOptions, CorruptItemError,
                                MissingItemError, Record, Source, register_source)
from nascli.errors import InputError, NascliError, UnsafeInputError

ANNOTATIONS_DIR = "annotations"
INSTANCES_PREFIX = "instances_"
REQUIRED_KEYS = ("images", "annotations", "categories")
DOWNLOAD_PAGE = "https://cocodataset.org/#download"
DEFAULT_VALIDATION_FRACTION = 0.1
DEFAULT_TEST_FRACTION = 0.1
CARVED_HOW = "random by image id"
# The flag that gives each held-out split as its own annotation file.
SOURCE_FLAG = {splits.VALIDATION: "--validation_source", splits.TEST: "--test_source"}


@dataclasses.dataclass
class _Image:
  """One image of a split and its annotations, in COCO pixel boxes [x, y, w, h]."""
  image_id: int
  file_name: str
  path: Path
  size: int  # bytes on disk; -1 when the file is missing
  boxes: np.ndarray  # float64 [K, 4]
  classes: np.ndarray  # int64 [K]
  areas: np.ndarray  # float32 [K]
  is_crowd: np.ndarray  # int64 [K]
  skipped: int = 0  # its degenerate annotations, left out


@dataclasses.dataclass
class _Split:
  """The images of one instances file, or (`carved`) a seeded part of them."""
  original_name: str
  annotations: Path
  annotations_sha256: str
  image_dir: Path
  images: list[_Image]
  carved: bool = False

  @property
  def num_annotations(self) -> int:
    return sum(len(i.classes) for i in self.images)

  @property
  def skipped_annotations(self) -> int:
    return sum(i.skipped for i in self.images)

  def part(self, positions: list[int]) -> "_Split":
    return dataclasses.replace(self, images=[self.images[p] for p in positions],
                               carved=len(positions) < len(self.images))


def _read_instances(path: Path) -> tuple[dict, str]:
  """The parsed instances JSON and the sha256 of its bytes; InputError naming the file."""
  try:
    data = path.read_bytes()
  except OSError as e:
    raise InputError(f"cannot read {path}: {e.strerror or e}") from None
  try:
    doc = json.loads(data)
  except UnicodeDecodeError:
    raise InputError(f"{path} is not valid JSON: not UTF-8 text") from None
  except json.JSONDecodeError as e:
    raise InputError(f"{path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
                     ) from None
  if not isinstance(doc, dict):
    raise InputError(f"{path} is not a COCO instances file: the top level is not an object")
  for key in REQUIRED_KEYS:
    if key not in doc:
      raise InputError(f"{path} is not a COCO instances file: it has no {key!r} key")
    if not isinstance(doc[key], list):
      raise InputError(f"{path}: {key!r} is not a list")
  return doc, hashlib.sha256(data).hexdigest()


def _is_int(value: Any) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _parse_categories(path: Path, doc: dict) -> dict[int, str]:
  categories = {}
  for cat in doc["categories"]:
    if not isinstance(cat, dict) or not _is_int(cat.get("id")) or not isinstance(
        cat.get("name"), str):
      raise InputError(f"{path}: category {str(cat)[:80]} needs an integer 'id' and a 'name'")
    cid, name = cat["id"], cat["name"]
    if cid < 1:  # 0 is the background class in Model Garden.
      raise InputError(f"{path}: category {name!r} has id {cid}; ids must be 1 or more")
    if "\n" in name or "\r" in name:
      raise InputError(f"{path}: category {cid} has a line break in its name")
    if cid in categories and categories[cid] != name:
      raise InputError(f"{path}: category id {cid} is given twice ({categories[cid]!r},"
                       f" {name!r})")
    categories[cid] = name
  if not categories:
    raise InputError(f"{path} lists no categories")
  return categories


def _image_path(path: Path, image_dir: Path, image: dict) -> Path:
  file_name = image["file_name"]
  rel = PurePosixPath(file_name)
  if not file_name or rel.is_absolute() or ".." in rel.parts or "\\" in file_name:
    raise UnsafeInputError(f"{path}: image {image['id']} has file_name {file_name!r} outside"
                           " the image folder")
  return image_dir / rel


def _parse_split(original_name: str, path: Path, image_dir: Path | None,
                 categories: dict[int, str], doc: dict, digest: str) -> _Split:
  """Indexes one instances file: images sorted by id, each with its kept annotations."""
  entries = {}
  for image in doc["images"]:
    if not isinstance(image, dict) or not _is_int(image.get("id")) or not isinstance(
        image.get("file_name"), str):
      raise InputError(f"{path}: image {str(image)[:80]} needs an integer 'id' (Model Garden"
                       " reads source ids as numbers) and a 'file_name'")
    if image["id"] in entries:
      raise InputError(f"{path}: image id {image['id']} is listed twice")
    entries[image["id"]] = image
  if not entries:
    raise InputError(f"{path} lists no images")
  given = image_dir is not None
  if not given:
    image_dir = _find_image_dir(path, original_name, entries[min(entries)]["file_name"])

  per_image: dict[int, list] = {i: [] for i in entries}
  skipped = {i: 0 for i in entries}
  for ann in doc["annotations"]:
    if not isinstance(ann, dict):
      raise InputError(f"{path}: annotation {str(ann)[:80]} is not an object")
    ann_name = f"annotation {ann.get('id', '?')}"
    image_id, cid, bbox = ann.get("image_id"), ann.get("category_id"), ann.get("bbox")
    if image_id not in per_image:
      raise InputError(f"{path}: {ann_name} refers to unknown image_id {image_id!r}")
    if cid not in categories:
      raise InputError(f"{path}: {ann_name} has unknown category_id {cid!r}")
    if (not isinstance(bbox, list) or len(bbox) != 4
        or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in bbox)):
      raise InputError(f"{path}: {ann_name} has bbox {str(bbox)[:60]}; expected [x, y, w, h]")
    x, y, w, h = (float(v) for v in bbox)
    if w <= 0 or h <= 0:
      skipped[image_id] += 1  # Degenerate boxes teach nothing and break box encoders.
      continue
    area = ann.get("area", w * h)
    if not isinstance(area, (int, float)):
      raise InputError(f"{path}: {ann_name} has area {area!r}; expected a number")
    per_image[image_id].append((x, y, w, h, cid, float(area), 1 if ann.get("iscrowd") else 0))

  split_images = []
  for image_id in sorted(entries):
    anns = per_image[image_id]
    image_path = _image_path(path, image_dir, entries[image_id])
    try:
      size = image_path.stat().st_size
    except OSError:
      size = -1  # check() reports it as a missing file.
    split_images.append(_Image(
        image_id=image_id, file_name=entries[image_id]["file_name"], path=image_path, size=size,
        boxes=np.asarray([a[:4] for a in anns], np.float64).reshape(-1, 4),
        classes=np.asarray([a[4] for a in anns], np.int64),
        areas=np.asarray([a[5] for a in anns], np.float32),
        is_crowd=np.asarray([a[6] for a in anns], np.int64), skipped=skipped[image_id]))
  if all(i.size < 0 for i in split_images):
    first = split_images[0].file_name
    where = "check --image_dir" if given else "give their folder with --image_dir"
    raise InputError(f"none of the {len(split_images)} images listed in {path} is in {image_dir}"
                     f" (the first: {first}); {where}")
  return _Split(original_name=original_name, annotations=path, annotations_sha256=digest,
                image_dir=image_dir, images=split_images)


def _find_image_dir(path: Path, name: str, first_file: str) -> Path:
  """For a lone JSON: a folder named after it beside it or beside its folder, else its folder."""
  candidates = [path.parent / name, path.parent.parent / name, path.parent]
  for d in candidates:
    if (d / first_file).is_file():
      return d
  return next((d for d in candidates if d.is_dir()), path.parent)


def _split_name(original: str) -> str | None:
  """The split a COCO folder's instances file becomes: val* is the official evaluation set, so
  it is `test`; `validation` is carved from train*."""
  if original.startswith("train"):
    return splits.TRAIN
  if original.startswith("val"):
    return splits.TEST
  return None


def _layout_has_test(root: Path) -> bool:
  ann_dir = root / ANNOTATIONS_DIR
  return ann_dir.is_dir() and any(
      _split_name(p.stem.removeprefix(INSTANCES_PREFIX)) == splits.TEST
      for p in ann_dir.glob(f"{INSTANCES_PREFIX}*.json"))


@register_source("coco")
class CocoSource(Source):
  """COCO instances annotations with their JPEG/PNG images, stored as the original bytes."""

  task = DETECTION
  needs_check = True
  reads = frozenset({"source", "validation_source", "test_source", "image_dir", "seed",
                     "validation_fraction", "validation_size", "test_fraction", "test_size"})

  @classmethod
  def check_options(cls, options: ConvertOptions) -> None:
    cls._check_paths(options)

  @staticmethod
  def _check_paths(options: ConvertOptions) -> tuple[Path, Path | None]:
    """The annotation source and image folder, refused when they cannot go together (and the
    split flags that do not apply to them); reads no annotation file."""
    if options.source is None:
      raise NascliError(
          "coco needs --source: a folder in the COCO layout (annotations/instances_train2017.json,"
          " train2017/, ...), or one instances JSON file (--source or --object_annotations_file)"
          f" with its images in --image_dir; get COCO from {DOWNLOAD_PAGE}")
    source = Path(options.source)
    if not source.exists():
      raise InputError(f"--source {source} does not exist")
    image_dir = None if options.image_dir is None else Path(options.image_dir)
    splits.check_fractions(options)
    if source.is_dir():
      if options.validation_source is not None:
        raise NascliError("--validation_source applies only when --source is one instances"
                          " JSON file; in the COCO folder layout validation is carved from the"
                          " train* images (--validation_fraction, --validation_size)")
      if options.test_source is not None:
        raise NascliError("--test_source applies only when --source is one instances JSON file;"
                          " in the COCO folder layout the val* split is the test set")
      if image_dir is not None:
        raise NascliError(f"--image_dir applies to one annotation JSON (--source FILE.json or"
                          f" --object_annotations_file); the COCO folder layout {source} keeps"
                          " each split's images in its own folder")
      given = [f"--test_{what}" for what in ("fraction", "size")
               if getattr(options, f"test_{what}") is not None]
      if given and _layout_has_test(source):
        raise NascliError(f"{given[0]} applies only to a carved test split; the val* split of"
                          f" {source} is the test set")
    else:
      for part in splits.HELD_OUT:
        flag = SOURCE_FLAG[part]
        given = [f"--{part}_{what}" for what in ("fraction", "size")
                 if getattr(options, f"{part}_{what}") is not None]
        if getattr(options, f"{part}_source") is not None and given:
          raise NascliError(f"{flag} gives the {part} split; {given[0]} sizes only a {part}"
                            " split carved from --source, give one or the other")
      if (options.validation_source is not None and options.test_source is not None
          and options.seed):
        raise NascliError("--seed applies only to a carved split; --validation_source and"
                          " --test_source give both held-out splits")
    if image_dir is not None and not image_dir.is_dir():
      what = "does not exist" if not image_dir.exists() else "is not a folder"
      raise InputError(f"--image_dir {image_dir} {what}")
    for part, flag in SOURCE_FLAG.items():
      given = getattr(options, f"{part}_source")
      if given is not None and not Path(given).is_file():
        raise InputError(f"{flag} {given} is not a file")
    return source, image_dir

  def prepare(self) -> None:
    source, image_dir = self._check_paths(self.options)
    self._ignored: list[str] = []
    if source.is_dir():
      files = self._layout_files(source)
      self._root = source
    else:
      # --image_dir holds the images of every annotation JSON given (train, validation, test).
      files = {splits.TRAIN: (self._json_name(source), source, image_dir)}
      for part in splits.HELD_OUT:
        given = getattr(self.options, f"{part}_source")
        if given is not None:
          files[part] = (self._json_name(Path(given)), Path(given), image_dir)
      self._root = source.parent
    self._kind = "folder" if source.is_dir() else "file"
    self._source = source

    # One _Split per annotation file read; self._splits: the output splits, carved or whole.
    self._files: dict[str, _Split] = {}
    self._categories: dict[int, str] = {}
    for split, (original, path, image_dir) in files.items():
      doc, digest = _read_instances(path)
      categories = _parse_categories(path, doc)
      for cid, name in categories.items():
        if self._categories.get(cid, name) != name:
          raise InputError(f"{path}: category {cid} is {name!r} but {self._categories[cid]!r}"
                           " in the other split")
        self._categories[cid] = name
      self._files[split] = _parse_split(original, path, image_dir, categories, doc, digest)
      del doc  # The COCO train JSON is large; keep only the compact index.
    self._check_disjoint()
    self._splits = self._carve()
    self._info = self._make_source_info()

  def _check_disjoint(self) -> None:
    """No image file in two splits: the test set must be unseen by training and the search."""
    owner: dict[Path, _Split] = {}
    for s in self._files.values():
      for image in s.images:
        other = owner.setdefault(image.path, s)
        if other is not s:
          raise InputError(f"{s.annotations} and {other.annotations} both list the image"
                           f" {image.path}; the splits must not share images")

  def _carve(self) -> dict[str, _Split]:
    """Train, validation and test: a held-out split without a file of its own is a seeded random
    part of the training file's images (in image-id order), each with all its annotations."""
    train = self._files[splits.TRAIN]
    n, o = len(train.images), self.options
    self._carved = [part for part in splits.HELD_OUT if part not in self._files]
    sizes = {}
    for part in self._carved:
      default = DEFAULT_VALIDATION_FRACTION if part == splits.VALIDATION else DEFAULT_TEST_FRACTION
      if n <= len(self._carved):
        how = " or give them as files" if self._kind == "file" else ""
        raise InputError(f"{train.annotations} lists {n} image(s): too few to carve"
                         f" {' and '.join(self._carved)} from and keep one to train on; add"
                         f" images{how}")
      sizes[part] = splits.held_out_count(n, getattr(o, f"{part}_fraction"),
                                          getattr(o, f"{part}_size"), default, part)
    positions = (splits.random_split(n, sizes, o.seed) if sizes
                 else {splits.TRAIN: list(range(n))})
    return {split: train.part(positions[split]) if split in positions else self._files[split]
            for split in (splits.TRAIN, *splits.HELD_OUT)}

  @staticmethod
  def _json_name(path: Path) -> str:
    return path.stem.removeprefix(INSTANCES_PREFIX)

  def _layout_files(self, root: Path) -> dict[str, tuple[str, Path, Path]]:
    """{split: (original name, instances JSON, image folder)} of a COCO folder."""
    ann_dir = root / ANNOTATIONS_DIR
    found = sorted(ann_dir.glob(f"{INSTANCES_PREFIX}*.json")) if ann_dir.is_dir() else []
    if not found:
      raise InputError(f"--source {root} has no {ANNOTATIONS_DIR}/{INSTANCES_PREFIX}<name>.json"
                       " (the COCO layout, e.g. annotations/instances_train2017.json)")
    files: dict[str, tuple[str, Path, Path]] = {}
    for path in found:
      original = self._json_name(path)
      split = _split_name(original)
      if split is None:
        self._ignored.append(path.name)
        continue
      if split in files:
        raise InputError(f"{root}: both {files[split][1].name} and {path.name} would be the"
                         f" {split} split; keep one")
      image_dir = root / original
      if not image_dir.is_dir():
        raise InputError(f"image folder {image_dir} for {path} not found")
      files[split] = (original, path, image_dir)
    if splits.TRAIN not in files:
      raise InputError(f"--source {root}: no train* instances file in {ann_dir} (found "
                       + ", ".join(p.name for p in found) + ")")
    return files

  def _make_source_info(self) -> dict[str, Any]:
    # Checksum of the listing: each annotation file with its content digest, each image with its
    # size (hashing every COCO image would take longer than converting them).
    lines = []
    for s in self._files.values():
      rel = os.path.relpath(s.annotations, self._root)
      lines.append(f"{rel}\t{s.annotations.stat().st_size}\t{s.annotations_sha256}\n")
      lines.extend(f"{os.path.relpath(i.path, self._root)}\t{i.size}\n" for i in s.images)
    digest = hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()
    info = {
        "kind": self._kind, "format": "coco", "path": str(self._source),
        "image_dir": None if self.options.image_dir is None else str(self.options.image_dir),
        "checksum_of": "listing", "sha256": digest,
        "skipped_annotations": sum(s.skipped_annotations for s in self._files.values()),
        # The original file that is exactly this split's ground truth; None for a carved split
        # (COCO evaluation builds it from the split's records).
        **{f"{part}_annotations": None if self._splits[part].carved
           else str(self._splits[part].annotations) for part in splits.HELD_OUT},
        "seed": self.options.seed if self._carved else None,
        "splits": {
            split: {"original_name": s.original_name, "annotations": str(s.annotations),
                    "annotations_sha256": s.annotations_sha256, "images": str(s.image_dir),
                    "carved": s.carved,
                    "num_images": len(s.images), "num_annotations": s.num_annotations,
                    "skipped_annotations": s.skipped_annotations,
                    "missing_files": sum(i.size < 0 for i in s.images)}
            for split, s in self._splits.items()},
    }
    if self._ignored:
      info["ignored_annotation_files"] = self._ignored
    return info

  def split_origins(self) -> dict[str, str]:
    train = self._files[splits.TRAIN]
    of = f"the {train.original_name} images ({train.annotations.name})"
    origins = {splits.TRAIN: of + (f", less the {' and '.join(self._carved)} images carved"
                                       " from them" if self._carved else "")}
    origins.update(splits.carved(self._carved, self.options.seed, CARVED_HOW, of=of))
    for part in splits.HELD_OUT:
      if part in self._carved:
        continue
      s = self._splits[part]
      origins[part] = (f"the folder's own {s.original_name} split ({s.annotations.name}), the"
                       " source's evaluation set" if self._kind == "folder"
                       else f"{SOURCE_FLAG[part]} {s.annotations}")
    return origins

  def settings(self) -> dict[str, Any]:
    # Which file is which split (the listing checksum does not say), and how the rest is carved.
    return {"split_files": {split: os.path.relpath(s.annotations, self._root)
                            for split, s in self._files.items()},
            "seed": self.options.seed,
            **{f"{part}_{what}": getattr(self.options, f"{part}_{what}")
               for part in splits.HELD_OUT for what in ("fraction", "size")}}

  def source_info(self) -> dict[str, Any]:
    return self._info

  def classes(self) -> list[ClassInfo]:
    return [ClassInfo(cid, name) for cid, name in sorted(self._categories.items())]

  def split_sizes(self) -> dict[str, int]:
    return {split: len(s.images) for split, s in self._splits.items()}

  def estimated_bytes(self, split: str) -> int:
    return sum(max(i.size, 0) for i in self._splits[split].images)

  def item_name(self, split: str, index: int) -> str:
    return str(self._splits[split].images[index].path)

  def _read(self, split: str, index: int) -> bytes:
    path = self._splits[split].images[index].path
    try:
      return path.read_bytes()
    except FileNotFoundError:
      raise MissingItemError(str(path)) from None
    except OSError as e:
      raise CorruptItemError(str(path), f"cannot read: {e.strerror or e}") from None

  def check(self, split: str, index: int) -> images.ImageProbe:
    try:
      return images.probe(self._read(split, index))
    except ValueError as e:
      raise CorruptItemError(self.item_name(split, index), str(e)) from None

  def record(self, split: str, index: int) -> Record:
    image = self._splits[split].images[index]
    try:
      encoded, fmt, probe = images.to_storable(self._read(split, index),
                                               self.checked_probe(split, index))
    except ValueError as e:
      raise CorruptItemError(str(image.path), str(e)) from None
    # Boxes are normalized by the decoded size, which is what the decoder will see.
    height, width = probe.height, probe.width
    x, y, w, h = image.boxes.T
    boxes = np.stack([y / height, x / width, (y + h) / height, (x + w) / width], axis=-1)
    return Record(
        encoded=encoded, format=fmt, height=height, width=width,
        source_id=str(image.image_id), filename=image.file_name,
        boxes=np.clip(boxes, 0.0, 1.0).astype(np.float32).reshape(-1, 4), classes=image.classes,
        areas=image.areas, is_crowd=image.is_crowd)
