"""Serving latency of a SavedModel on this device, from the command line (the latency image's
entry point): `python -m tf_vision.serving.latency_main --saved_model_dir DIR`.

The timing is `latency.measure_latency`, the one a NAS trial and `nascli export
--measure_latency` use, so a number from the container compares with theirs. The report is JSON
on stdout (and in --output_file); errors are one `Error: ...` line and exit code 1.
"""

import argparse
import json
import os
import sys
from typing import Sequence

from nascli import runtime
from nascli.errors import NascliError


def _ints(text: str) -> list[int]:
  try:
    return [int(v) for v in text.replace('x', ',').split(',') if v.strip()]
  except ValueError:
    raise argparse.ArgumentTypeError(f'expected comma-separated integers, got {text!r}') from None


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog='python -m tf_vision.serving.latency_main',
      description='Time serving_default of a SavedModel on this device; JSON on stdout.')

  def add(name: str, **kwargs) -> None:  # Both spellings, as every nascli option.
    names = dict.fromkeys([f'--{name}', f'--{name.replace("_", "-")}'])
    parser.add_argument(*names, dest=name, **kwargs)

  add('saved_model_dir', required=True,
      help='The SavedModel folder, or an export folder holding it in saved_model/.')
  add('input_type', default='image_tensor',
      help='How it was exported: image_tensor, image_bytes or tf_example.')
  add('batch_sizes', type=_ints, default=[1], help='Comma-separated batch sizes (default: 1).')
  add('warmup', type=int, default=5, help='Untimed calls per batch size.')
  add('runs', type=int, default=30, help='Timed calls per batch size.')
  add('image_size', type=_ints, default=None,
      help='HEIGHT,WIDTH (default: task.model.input_size of params.yaml beside the model).')
  add('image_format', default='jpeg', help='jpeg or png, for image_bytes and tf_example.')
  add('output_file', default=None, help='Also write the report here (JSON).')
  return parser


def _write_atomically(path: str, text: str) -> None:
  """A reader never sees half a report: written beside, then renamed into place."""
  tmp = f'{path}.tmp-{os.getpid()}'
  with open(tmp, 'w', encoding='utf-8') as f:
    f.write(text)
  os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
  args = _parser().parse_args(argv)
  runtime.quiet_libraries()
  try:
    from tf_vision.serving import latency  # pylint: disable=g-import-not-at-top
    runtime.request()  # TensorFlow is loaded: end as nascli does, without its teardown
    report = latency.measure_latency(
        args.saved_model_dir, input_type=args.input_type, batch_sizes=args.batch_sizes,
        warmup=args.warmup, runs=args.runs, image_size=args.image_size,
        image_format=args.image_format)
    text = json.dumps(report, indent=2)
    if args.output_file:
      _write_atomically(args.output_file, text + '\n')
  except (NascliError, OSError) as e:
    print(f'Error: {" ".join(str(e).split())}', file=sys.stderr)
    return 1
  print(text)
  return 0


if __name__ == '__main__':
  runtime.finish(main())
