"""`nascli convert-data NAME`: a data set to evenly sharded TFRecords (or `--verify DIR`)."""

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from nascli import storage
from nascli.commands.options import flag
from nascli.errors import NascliError

DATA_HELP = "Data set: cifar10, mnist, flowers, imagefolder, coco, digits (embedded), shapes."


def convert_data(
    name: Annotated[Optional[str], typer.Argument(help=DATA_HELP, show_default=False)] = None,
    source: Annotated[Optional[Path], typer.Option(
        *flag("source"), help="Local archive or folder (default: download the official file).")] = None,
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
        *flag("processes"), help="Encoding processes (default: all cores).")] = 0,
    seed: Annotated[int, typer.Option(*flag("seed"), help="Seed of validation splits.")] = 0,
    validation_fraction: Annotated[Optional[float], typer.Option(
        *flag("validation_fraction"), help="Fraction held out when the source has no"
        " validation split.")] = None,
    validation_size: Annotated[Optional[int], typer.Option(
        *flag("validation_size"), help="Number of images held out (flowers default: 350).")]
    = None,
    validation_source: Annotated[Optional[Path], typer.Option(
        *flag("validation_source"), help="imagefolder: a separate validation folder.")] = None,
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
        *flag("download_dir"), help="Where downloads are kept (default: ~/.cache/nascli).")]
    = None,
    skip_corrupt: Annotated[bool, typer.Option(
        *flag("skip_corrupt"), help="Skip undecodable images and list them in"
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
  out = Console()
  if verify is None and name is None:
    raise typer.BadParameter("give a data set NAME, or --verify DIR", param_hint="NAME")
  # pylint: disable=g-import-not-at-top
  from nascli import frameworks
  frameworks.load(("tensorflow",))  # also: forked workers' collections leave those pages shared
  if verify is not None:
    from nascli.data import verify as verify_lib
    report = verify_lib.verify_output(Path(storage.stage(verify)))
    if as_json:
      print(json.dumps(report.as_dict(), indent=2))
    else:
      out.print(verify_lib.report_table(report))
    if not report.ok:
      raise NascliError(report.first_problem())
    return

  from nascli.data.convert import ShardingOptions, convert
  from nascli.data.source import ConvertOptions
  options = ConvertOptions(
      source=source, validation_source=validation_source, seed=seed,
      validation_fraction=validation_fraction, validation_size=validation_size,
      image_size=image_size, channels=channels, num_samples=num_samples, label_map=label_map,
      skip_corrupt=skip_corrupt)
  if download_dir is not None:
    options.download_dir = download_dir
  sharding = ShardingOptions(
      num_shards=num_shards, num_workers=num_workers, drop_remainder=drop_remainder,
      processes=processes or len(os.sched_getaffinity(0)), overwrite=overwrite)
  output_dir = output_dir or str(Path("nascli_data") / name)
  info, stats = convert(name, output_dir, options, sharding)
  if as_json:
    print(json.dumps({"output_dir": str(output_dir), "status": info["status"], **stats,
                      "splits": {k: {"num_records": v["num_records"], "num_shards": v["num_shards"],
                                     "shard_records": [s["num_records"] for s in v["shards"]],
                                     "dropped": len(v["dropped"]),
                                     "skipped_corrupt": len(v["skipped_corrupt"])}
                                 for k, v in info["splits"].items()}}, indent=2))
    return
  out.print(_summary_table(info, output_dir))
  verb = "verified existing" if info["status"] == "verified" else "wrote"
  rate = f" ({stats['images_per_second']:.0f} images/s)" if stats["images_per_second"] else ""
  out.print(f"{verb} {info['dataset']} in {output_dir}{rate}")


def _summary_table(info: dict, output_dir: str) -> Table:
  table = Table(title=f"{info['dataset']}: {info['num_classes']} classes, {info['task']}")
  for col in ("split", "records", "shards", "records/shard", "dropped", "skipped", "files"):
    table.add_column(col)
  for split, s in info["splits"].items():
    counts = [sh["num_records"] for sh in s["shards"]]
    per = str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
    table.add_row(split, str(s["num_records"]), str(s["num_shards"]), per, str(len(s["dropped"])),
                  str(len(s["skipped_corrupt"])), storage.join(output_dir, s["file_pattern"]))
  return table
