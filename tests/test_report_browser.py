"""report.html in a real browser: headless Chromium (Debian's, which `scripts/setup.sh --test`
installs) driven by Playwright. Every plot is drawn with one SVG point per trial, hovering a
point names its trial, a header click sorts the table, and the page asks nothing of the
network. Screenshots land in the test's temp folder."""

import os
import shutil

import pytest

import report_jobs
from report_jobs import figures

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def _chromium() -> str | None:
  for candidate in (os.environ.get("NASCLI_CHROMIUM"), "/usr/bin/chromium",
                    shutil.which("chromium"), shutil.which("chromium-headless-shell")):
    if candidate and os.path.exists(candidate):
      return candidate
  return None


@pytest.fixture(scope="module")
def browser():
  if os.environ.get("NASCLI_SKIP_BROWSER") == "1":
    pytest.skip("NASCLI_SKIP_BROWSER=1")
  executable = _chromium()
  if executable is None:
    pytest.fail("no Chromium: `bash scripts/setup.sh --test` installs Debian's chromium"
                " (or set NASCLI_CHROMIUM, or NASCLI_SKIP_BROWSER=1 to skip these tests)")
  from playwright.sync_api import sync_playwright  # pylint: disable=g-import-not-at-top
  with sync_playwright() as p:
    b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
    yield b
    b.close()


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
  root = tmp_path_factory.mktemp("reports")
  from nascli import report  # pylint: disable=g-import-not-at-top
  es_dir, _ = report_jobs.early_stopping_job(root / "es")
  mo_dir, _ = report_jobs.two_objective_job(root / "mo")
  proxy_dir = report_jobs.proxy_search_job(root / "proxy")
  report.write(proxy_dir)
  return {"es": es_dir, "mo": mo_dir, "proxy": proxy_dir}


class Opened:
  """A page loaded from disk, with every request, error and console error it caused."""

  def __init__(self, browser, path, shot):
    self.requests, self.errors = [], []
    self.page = browser.new_page(viewport={"width": 1280, "height": 900})
    self.page.on("request", lambda r: self.requests.append(r.url))
    self.page.on("pageerror", lambda e: self.errors.append(str(e)))
    self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
    self.page.goto(f"file://{path}")
    self.page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length =="
                                " document.querySelectorAll('div.plot').length")
    self.page.screenshot(path=shot, full_page=True)

  def drawn(self, fig_id):
    """Per trace of a figure: how many points (scatter markers or bars) the SVG holds."""
    return self.page.evaluate(
        """id => Array.from(document.getElementById(id).querySelectorAll(
             '.scatterlayer .trace, .barlayer .trace')).map(t =>
             t.querySelectorAll('.point').length)""", fig_id)

  def hover(self, fig_id, trace_index, point_index):
    point = self.page.locator(f"#{fig_id} .scatterlayer .trace").nth(trace_index).locator(
        "path.point").nth(point_index)
    point.scroll_into_view_if_needed()
    box = point.bounding_box()
    self.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    label = self.page.locator(f"#{fig_id} .hoverlayer .hovertext")
    label.first.wait_for(timeout=5000)
    return label.first.text_content()

  def column(self, table_id, index):
    return self.page.eval_on_selector_all(
        f"#{table_id} tbody tr", f"rows => rows.map(r => r.cells[{index}].textContent)")

  def close(self):
    self.page.close()


def _expected_points(trace):
  if trace["type"] == "bar":
    return len(trace["x"])
  return len(trace["x"]) if "markers" in trace.get("mode", "") else 0


def _check_every_plot(opened, report_path):
  embedded = figures(report_path)
  assert embedded
  for fig_id, fig in embedded.items():
    drawn = opened.drawn(fig_id)
    expected = [_expected_points(t) for t in fig["data"]]
    assert drawn == expected, (fig_id, drawn, expected)


def test_search_page_draws_hovers_sorts_and_stays_offline(browser, jobs, tmp_path):
  path = os.path.join(jobs["es"], "report.html")
  opened = Opened(browser, path, str(tmp_path / "search.png"))
  try:
    _check_every_plot(opened, path)
    assert opened.drawn("progress-trials")[0] == len(report_jobs.ES_COMPLETED)
    # Hover the best trial's point: the label names it and its architecture.
    done = figures(path)["progress-trials"]["data"][0]
    at = done["customdata"].index("4")
    text = opened.hover("progress-trials", 0, at)
    assert text.startswith("trial 4 (completed)") and "op=skip" in text
    # A stopped trial's rung mark on the curves: where the scheduler stopped it.
    curves = figures(path)["curves"]["data"]
    mark = next(i for i, t in enumerate(curves)
                if t.get("showlegend") is False and t["customdata"] == ["2"])
    assert opened.hover("curves", mark, 0).endswith(
        f"trial 2, step 30: accuracy {report_jobs.es_accuracy('2', 30):.4g} (rung 0: stopped here)")
    # Sorting: reward ascending, then descending; trials without a reward stay last.
    headers = opened.page.locator("#trials th")
    names = headers.all_text_contents()
    reward = names.index("reward")
    headers.nth(reward).click()
    assert headers.nth(reward).get_attribute("aria-sort") == "ascending"
    values = opened.column("trials", reward)
    scored = [float(v) for v in values if v != "-"]
    assert scored == sorted(scored) and values[len(scored):] == ["-"] * (len(values) - len(scored))
    headers.nth(reward).click()
    values = opened.column("trials", reward)
    scored = [float(v) for v in values if v != "-"]
    assert scored == sorted(scored, reverse=True) and values[-1] == "-"
    # Sorting by status is textual.
    headers.nth(names.index("status")).click()
    statuses = opened.column("trials", names.index("status"))
    assert statuses == sorted(statuses)
    # Trial links open the trial's folder next to the page.
    href = opened.page.locator("#trials tbody tr td a").first.get_attribute("href")
    assert os.path.isdir(os.path.join(jobs["es"], href))
    # The architecture with markup in it is text on the page, never run.
    assert opened.page.evaluate("window.pwned === undefined")
    assert report_jobs.EVIL in opened.page.locator("#trials").inner_text()
    assert [u for u in opened.requests if not u.startswith("file://")] == []
    assert opened.errors == []
  finally:
    opened.close()
  assert os.path.getsize(tmp_path / "search.png") > 50_000


def test_two_objective_page_draws_the_front_and_the_target(browser, jobs, tmp_path):
  path = os.path.join(jobs["mo"], "report.html")
  opened = Opened(browser, path, str(tmp_path / "two_objectives.png"))
  try:
    _check_every_plot(opened, path)
    assert opened.drawn("tradeoff") == [len(report_jobs.MO_TRIALS), len(report_jobs.MO_FRONT)]
    # The latency target: one dashed line drawn in the plot's shape layer.
    assert opened.page.locator("#tradeoff .shapelayer path").count() == 1
    front = figures(path)["tradeoff"]["data"][1]
    text = opened.hover("tradeoff", 1, front["customdata"].index("6"))
    assert text.startswith("trial 6 (completed)")
    assert opened.drawn("importance") == [2, 2]
    assert [u for u in opened.requests if not u.startswith("file://")] == []
    assert opened.errors == []
  finally:
    opened.close()


def test_proxy_search_page_draws_each_candidate(browser, jobs, tmp_path):
  path = os.path.join(jobs["proxy"], "report.html")
  opened = Opened(browser, path, str(tmp_path / "proxy.png"))
  try:
    _check_every_plot(opened, path)
    assert "steps25: accuracy tau 0.710" in opened.hover("proxy-cost", 0, 1)
    assert opened.column("trials", 0) == [c[0] for c in report_jobs.PROXY_CANDIDATES]
    assert [u for u in opened.requests if not u.startswith("file://")] == []
    assert opened.errors == []
  finally:
    opened.close()
