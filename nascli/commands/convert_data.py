"""`nascli convert-data NAME`: a data set to evenly sharded TFRecords (or `--verify DIR`).

Every flag is checked before anything is read, downloaded or imported, so a mistake is refused
in about a second. A conversion never imports TensorFlow at all (records are serialized in
Python); only `--verify` does, to decode every record.
"""

import json
import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from nascli import console, interrupts, storage
from nascli.commands.options import flag
from nascli.errors import InputError, NascliError, OutputError

DATA_HELP = "Data set: cifar10, mnist, flowers, imagefolder, coco, digits (embedded), shapes."


def convert_data(
    name: Annotated[Optional[str], typer.Argument(help=DATA_HELP, show_default=False)] = None,
    source: Annotated[Optional[Path], typer.Option(
        *flag("source"), help="Local archive or folder (default: download the official file);"
        " coco: a COCO folder or one annotation JSON.")] = None,
    object_annotations_file: Annotated[Optional[Path], typer.Option(
        *flag("object_annotations_file"), help="coco: the annotation JSON (Model Garden's"
        " create_coco_tf_record name for --source FILE.json).")] = None,
    image_dir: Annotated[Optional[Path], typer.Option(
        *flag("image_dir"), help="coco: the folder of the images the annotation JSON names"
        " (default: beside the JSON).")] = None,
    output_dir: Annotated[Optional[str], typer.Option(
        *flag("output_dir"), help="Where shards go, a folder or gs://BUCKET/PREFIX (default:"
        " nascli_data/NAME).")] = None,
    num_shards: Annotated[Optional[int], typer.Option(
        *flag("num_shards"), help="Shards per split (default: from the data size).")] = None,
    num_workers: Annotated[int, typer.Option(
        *flag("num_workers"), help="Readers that will share the shards: shard count becomes a"
        " multiple of it.")] = 1,
    drop_remainder: Annotated[bool, typer.Option(
        *flag("drop_remainder"), help="Make all shards exactly equal by dropping the remainder.")]
    = False,
    processes: Annotated[int, typer.Option(
        *flag("processes"), help="Encoding processes (0: all cores).")] = 0,
    seed: Annotated[Optional[int], typer.Option(
        *flag("seed"), help="Seed of the carved validation and test splits (default: 0).",
        show_default=False)] = None,
    validation_fraction: Annotated[Optional[float], typer.Option(
        *flag("validation_fraction"), help="Fraction of the training items held out as the"
        " validation split the search scores on.")] = None,
    validation_size: Annotated[Optional[int], typer.Option(
        *flag("validation_size"), help="Number of images held out as validation (flowers"
        " default: 350).")] = None,
    validation_source: Annotated[Optional[Path], typer.Option(
        *flag("validation_source"), help="imagefolder: a separate validation folder; coco: a"
        " validation annotation JSON.")] = None,
    test_fraction: Annotated[Optional[float], typer.Option(
        *flag("test_fraction"), help="Fraction held out as the test split `eval` reports, where"
        " the source has no test set of its own.")] = None,
    test_size: Annotated[Optional[int], typer.Option(
        *flag("test_size"), help="Number of images held out as the test split (flowers default:"
        " 350).")] = None,
    test_source: Annotated[Optional[Path], typer.Option(
        *flag("test_source"), help="imagefolder: a separate test folder; coco: a test"
        " annotation JSON.")] = None,
    image_size: Annotated[Optional[int], typer.Option(
        *flag("image_size"), help="digits/shapes: output image side in pixels.")] = None,
    channels: Annotated[Optional[int], typer.Option(
        *flag("channels"), help="digits/mnist: 1 or 3 channels.")] = None,
    num_samples: Annotated[Optional[int], typer.Option(
        *flag("num_samples"), help="shapes: number of training images.")] = None,
    label_map: Annotated[Optional[Path], typer.Option(
        *flag("label_map"), help="imagefolder: labels.txt (id:name lines) fixing class ids.")]
    = None,
    download_dir: Annotated[Optional[Path], typer.Option(
        *flag("download_dir"), help="Where downloads are kept (default:"
        " ~/.cache/nascli/downloads).")]
    = None,
    skip_corrupt: Annotated[bool, typer.Option(
        *flag("skip_corrupt"), help="Skip undecodable or missing images and list them in"
        " dataset_info.json.")] = False,
    overwrite: Annotated[bool, typer.Option(
        *flag("overwrite"), help="Rewrite an existing conversion in OUTPUT_DIR.")] = False,
    verify: Annotated[Optional[str], typer.Option(
        *flag("verify"), help="Check a converted folder (or gs:// prefix) record by record"
        " instead of converting.")] = None,
    as_json: Annotated[bool, typer.Option(*flag("json"), help="Print the result as JSON.")]
    = False,
) -> None:
  """Convert a data set into evenly sharded TFRecords with labels.txt and dataset_info.json."""
  settings = dict(locals())
  try:
    _convert_data(**settings)
  except KeyboardInterrupt as e:
    if isinstance(e, interrupts.Interrupted) and e.what:
      raise  # the conversion said what it had done
    what = f"verifying {verify}" if verify is not None else f"convert-data {name}"
    raise interrupts.Interrupted.of(e, what=what, resume="run the same command again") from None


def _convert_data(name: str | None, source: Path | None, object_annotations_file: Path | None,
                  image_dir: Path | None, output_dir: str | None, num_shards: int | None,
                  num_workers: int, drop_remainder: bool, processes: int, seed: int | None,
                  validation_fraction: float | None, validation_size: int | None,
                  validation_source: Path | None, test_fraction: float | None,
                  test_size: int | None, test_source: Path | None, image_size: int | None, channels: int | None,
                  num_samples: int | None, label_map: Path | None, download_dir: Path | None,
                  skip_corrupt: bool, overwrite: bool, verify: str | None, as_json: bool) -> None:
  """The command: flags checked first, then the conversion (or the verification)."""
  # pylint: disable=g-import-not-at-top
  if object_annotations_file is not None:
    if source is not None:
      raise NascliError("give the annotation JSON once: --source or --object_annotations_file")
    source = object_annotations_file
  given = {"source": source, "validation_source": validation_source, "seed": seed,
           "validation_fraction": validation_fraction, "validation_size": validation_size,
           "test_source": test_source, "test_fraction": test_fraction, "test_size": test_size,
           "image_size": image_size, "channels": channels, "num_samples": num_samples,
           "label_map": label_map, "image_dir": image_dir}
  given = {k: v for k, v in given.items() if v is not None}
  if verify is not None:
    others = [f for f, v in (("NAME", name), ("--output_dir", output_dir),
                             ("--num_shards", num_shards), ("--overwrite", overwrite or None))
              if v is not None] + [_flag_of(k) for k in given]
    if others:
      raise NascliError(f"--verify checks a converted folder and takes no conversion settings"
                        f" (got {', '.join(others)})")
    _verify(verify, as_json)
    return
  if name is None:
    raise typer.BadParameter("give a data set NAME, or --verify DIR", param_hint="NAME")

  from nascli.data import source as source_lib
  from nascli.data import datasets  # pylint: disable=g-import-not-at-top
  sources = datasets.registered_sources()
  source_cls = source_lib.lookup_source(name)
  _check_values(num_shards=num_shards, num_workers=num_workers, processes=processes,
                validation_fraction=validation_fraction, validation_size=validation_size,
                test_fraction=test_fraction, test_size=test_size, image_size=image_size, channels=channels, num_samples=num_samples)
  _check_applies(name, source_cls, given, sources)
  if object_annotations_file is not None and name != "coco":
    raise NascliError(f"--object_annotations_file does not apply to {name} (only to coco)")
  output_dir = output_dir or str(Path("nascli_data") / name)
  _check_paths(source=source, validation_source=validation_source, test_source=test_source,
               download_dir=download_dir, output_dir=output_dir)
  options = source_lib.ConvertOptions(
      source=source, validation_source=validation_source, seed=seed or 0,
      validation_fraction=validation_fraction, validation_size=validation_size,
      test_source=test_source, test_fraction=test_fraction, test_size=test_size,
      image_size=image_size, channels=channels, num_samples=num_samples, label_map=label_map,
      image_dir=image_dir, skip_corrupt=skip_corrupt)
  if download_dir is not None:
    options.download_dir = download_dir
  source_cls.check_options(options)

  from nascli.data.convert import ShardingOptions, convert
  sharding = ShardingOptions(
      num_shards=num_shards, num_workers=num_workers, drop_remainder=drop_remainder,
      processes=processes or len(os.sched_getaffinity(0)), overwrite=overwrite)
  info, stats = convert(name, output_dir, options, sharding)
  _print_result(info, stats, output_dir, as_json)


def _print_result(info: dict, stats: dict, output_dir: str, as_json: bool) -> None:
  if as_json:
    print(json.dumps({"output_dir": str(output_dir), "status": info["status"], **stats,
                      "splits": {k: {"num_records": v["num_records"], "num_shards": v["num_shards"],
                                     "shard_records": [s["num_records"] for s in v["shards"]],
                                     "dropped": len(v["dropped"]),
                                     "skipped_corrupt": len(v["skipped_corrupt"])}
                                 for k, v in info["splits"].items()}}, indent=2))
    return
  out = console.stdout()
  out.print(_summary_table(info, output_dir))
  verb = "verified existing" if info["status"] == "verified" else "wrote"
  rate = f" ({stats['images_per_second']:.0f} images/s)" if stats["images_per_second"] else ""
  out.print(f"{verb} {info['dataset']} in {output_dir}{rate}", markup=False, highlight=False)


def _verify(where: str, as_json: bool) -> None:
  # pylint: disable=g-import-not-at-top
  from nascli.data import verify as verify_lib
  if not storage.is_gcs(where):
    if not os.path.exists(where):
      raise InputError(f"--verify {where} does not exist")
    verify_lib.read_info(Path(where))  # a wrong folder is refused before TensorFlow loads
  local = Path(storage.stage(where))
  from nascli import frameworks
  frameworks.load(("tensorflow",))
  report = verify_lib.verify_output(local)
  if as_json:
    print(json.dumps(report.as_dict(), indent=2))
  else:
    console.stdout().print(verify_lib.report_table(report))
  if not report.ok:
    raise NascliError(report.first_problem())


def _flag_of(field: str) -> str:
  return f"--{field}"


def _check_values(**values: Any) -> None:
  """Flag values no data set can use."""
  from nascli.data import splits  # pylint: disable=g-import-not-at-top
  at_least_one = ("num_shards", "num_workers", "validation_size", "test_size", "image_size",
                  "num_samples")
  for key in at_least_one:
    if values[key] is not None and values[key] < 1:
      raise NascliError(f"{_flag_of(key)} must be at least 1, got {values[key]}")
  if values["processes"] < 0:
    raise NascliError(f"--processes must be 0 (all cores) or more, got {values['processes']}")
  for part in ("validation", "test"):
    fraction = values[f"{part}_fraction"]
    splits.check_fraction(fraction, part)
    if fraction is not None and values[f"{part}_size"] is not None:
      raise NascliError(f"give --{part}_size or --{part}_fraction, not both")
  fractions = [values[f"{part}_fraction"] or 0.0 for part in ("validation", "test")]
  if sum(fractions) >= 1.0:
    raise NascliError(f"--validation_fraction {fractions[0]} and --test_fraction {fractions[1]}"
                      " hold out everything; their sum must be below 1")
  if values["channels"] not in (None, 1, 3):
    raise NascliError(f"--channels must be 1 or 3, got {values['channels']}")


def _check_applies(name: str, source_cls: type, given: dict[str, Any],
                   sources: dict[str, type]) -> None:
  """A flag the data set would ignore is refused: the user expects it to do something."""
  for key in given:
    if key not in source_cls.reads:
      readers = sorted(n for n, cls in sources.items() if key in cls.reads)
      raise NascliError(f"{_flag_of(key)} does not apply to {name} (only to"
                        f" {', '.join(readers)})")


def _check_paths(source: Path | None, validation_source: Path | None, test_source: Path | None,
                 download_dir: Path | None, output_dir: str) -> None:
  if source is not None and not source.exists():
    raise InputError(f"--source {source} does not exist")
  if validation_source is not None and not validation_source.exists():
    raise InputError(f"--validation_source {validation_source} does not exist")
  if test_source is not None and not test_source.exists():
    raise InputError(f"--test_source {test_source} does not exist")
  if download_dir is not None and download_dir.exists() and not download_dir.is_dir():
    raise InputError(f"--download_dir {download_dir} is not a folder")
  if not storage.is_gcs(output_dir) and os.path.exists(output_dir) and not os.path.isdir(
      output_dir):
    raise OutputError(f"output dir {output_dir} is a file")


def _summary_table(info: dict, output_dir: str) -> Table:
  table = Table(title=Text(f"{info['dataset']}: {info['num_classes']} classes, {info['task']}"))
  for col in ("split", "records", "shards", "records/shard", "dropped", "skipped", "files"):
    table.add_column(col)
  for split, s in info["splits"].items():
    counts = [sh["num_records"] for sh in s["shards"]]
    per = str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
    table.add_row(split, str(s["num_records"]), str(s["num_shards"]), per, str(len(s["dropped"])),
                  str(len(s["skipped_corrupt"])), Text(storage.join(output_dir, s["file_pattern"])))
  return table
