"""`nascli report JOB_DIR`: write JOB_DIR/report.html, the job as one page a browser opens offline.

A search refreshes its own page after every trial; this command writes it for a job that ran
before reports existed, a copy of a job dir, a running search (read-only on the journal) and a
search_proxy_task job. JOB_DIR may be a gs:// URL. No framework is loaded: a second or two.
"""

from typing import Annotated

import typer

from nascli import console


def report(
    # str, not Path: pathlib would turn gs://bucket/job into gs:/bucket/job.
    job_dir: Annotated[str, typer.Argument(
        metavar="JOB_DIR", help="A search job dir (search_in_local's --local_output_dir), a"
        " search_proxy_task or measure_proxy_task_variance job; a folder or gs://BUCKET/PREFIX.",
        show_default=False)],
) -> None:
  """Write JOB_DIR/report.html: progress, trade-off, curves, decision importance, trials."""
  from nascli import report as report_lib  # pylint: disable=g-import-not-at-top
  kind, path = report_lib.write(job_dir)
  console.stderr().print(f"wrote the {kind} report; open it in a browser (it works offline):",
                         highlight=False)
  print(path)
