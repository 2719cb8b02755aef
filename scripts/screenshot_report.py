"""Screenshot a job's report.html in headless Chromium, as the docs' pictures are made.

    .venv/bin/python scripts/screenshot_report.py JOB_DIR OUT.png [--height 1800]

Writes (or refreshes) JOB_DIR/report.html with `nascli report`, opens it in Debian's Chromium
through Playwright (as tests/test_report_browser.py does) and saves the top `--height` pixels
at 1200 pixels wide.
"""

import argparse
import importlib.util
import os
import subprocess
import sys

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("job_dir")
  parser.add_argument("out")
  parser.add_argument("--height", type=int, default=1800)
  parser.add_argument("--chromium", default=os.environ.get("NASCLI_CHROMIUM", "/usr/bin/chromium"))
  args = parser.parse_args()
  if importlib.util.find_spec("playwright") is None:  # not in the main setup: --test adds it
    sys.stderr.write("Error: scripts/screenshot_report.py needs Playwright, which the test setup"
                     " installs: bash scripts/setup.sh --test\n")
    return 1
  done = subprocess.run([sys.executable, "-m", "nascli", "report", args.job_dir],
                        capture_output=True, text=True, check=False)
  if done.returncode:
    sys.stderr.write(done.stderr)
    return 1
  path = os.path.abspath(done.stdout.strip())
  from playwright.sync_api import sync_playwright  # pylint: disable=g-import-not-at-top
  with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=args.chromium, args=ARGS)
    page = browser.new_page(viewport={"width": 1200, "height": args.height})
    page.goto(f"file://{path}")
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length =="
                           " document.querySelectorAll('div.plot').length")
    page.screenshot(path=args.out)
    browser.close()
  print(args.out)
  return 0


if __name__ == "__main__":
  sys.exit(main())
