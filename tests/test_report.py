"""`nascli report` and the report.html a search refreshes: what the page holds, checked on the
figures' data as plotly.js receives it (tests/test_report_browser.py checks that a browser
draws them). Job dirs: tests/report_jobs.py (real journals, curve files, `update_all`)."""

import json
import os

import pytest

import report_jobs
from conftest import main_in_fresh_interpreter
from report_jobs import figures, trace

from nascli import report
from nascli.report import importance
from nascli.search import results


@pytest.fixture(scope="module")
def es_job(tmp_path_factory):
  return report_jobs.early_stopping_job(tmp_path_factory.mktemp("r") / "es")


@pytest.fixture(scope="module")
def mo_job(tmp_path_factory):
  return report_jobs.two_objective_job(tmp_path_factory.mktemp("r") / "mo")


def _ids(t):
  return t["customdata"]


def test_update_all_writes_a_self_contained_page(es_job):
  job_dir, _ = es_job
  page = open(os.path.join(job_dir, "report.html"), encoding="utf-8").read()
  assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
  # plotly.js inline, nothing loaded from elsewhere (no src= or href= to a host).
  from plotly.offline import get_plotlyjs
  plotly_js = get_plotlyjs()
  assert page.count(plotly_js) == 1
  ours = page.replace(plotly_js, "")
  assert "<script src" not in ours and "http://" not in ours and "https://" not in ours
  assert ours.count("<script") == 3  # plotly.js, the figures' JSON, the page's own script
  # No temporary file left beside it.
  assert not [n for n in os.listdir(job_dir) if n.startswith(".report")]


def test_progress_shows_each_trial_by_its_state(es_job):
  job_dir, state = es_job
  figs = figures(os.path.join(job_dir, "report.html"))
  for fig_id in ("progress-trials", "progress-time"):
    fig = figs[fig_id]
    done = trace(fig, "completed")
    assert sorted(_ids(done), key=int) == sorted(report_jobs.ES_COMPLETED, key=int)
    assert done["y"] == [state.rewards[t] for t in _ids(done)]
    assert sorted(_ids(trace(fig, "stopped"))) == sorted(report_jobs.ES_STOPPED)
    assert _ids(trace(fig, "failed")) == list(report_jobs.ES_FAILED)
    best = trace(fig, "best so far")
    assert best["y"] == sorted(best["y"]) and best["y"][-1] == max(done["y"])
  by_trial = figs["progress-trials"]
  assert trace(by_trial, "completed")["x"] == [int(t) for t in _ids(trace(by_trial,
                                                                          "completed"))]
  # Over time: minutes since the search started (trial 1 started at 1.5 min, was promoted at
  # 2.5 and completed 2 minutes later).
  over_time = trace(figs["progress-time"], "completed")
  assert over_time["x"][0] == pytest.approx(4.5)
  hover = trace(by_trial, "completed")["text"][0]
  assert hover.startswith("trial 1 (completed)") and "op=skip, width=8" in hover


def test_tradeoff_marks_the_front_and_the_target(es_job, mo_job):
  job_dir, _ = mo_job
  fig = figures(os.path.join(job_dir, "report.html"))["tradeoff"]
  front = trace(fig, "Pareto front")
  assert sorted(_ids(front)) == sorted(report_jobs.MO_FRONT)
  assert front["x"] == sorted(front["x"])  # joined left to right
  assert len(trace(fig, "trials")["x"]) == len(report_jobs.MO_TRIALS)
  assert fig["layout"]["shapes"][0]["x0"] == report_jobs.TARGET_MS
  # What the latency is (a job whose trials recorded no latency_device: timed in the trial).
  assert fig["layout"]["xaxis"]["title"]["text"] == "latency ms: measured in the trial"
  # The same front as pareto.json, which results computes its own way.
  with open(os.path.join(job_dir, "pareto.json")) as f:
    assert sorted(json.load(f)["front"]) == sorted(_ids(front))
  # A one-objective search: its reward against latency, the front of the two.
  es_dir, _ = es_job
  fig = figures(os.path.join(es_dir, "report.html"))["tradeoff"]
  assert fig["layout"]["yaxis"]["title"]["text"] == "reward"
  assert sorted(_ids(trace(fig, "Pareto front"))) == ["1", "4"]  # 0.85 @ 2.5 ms, 0.859 @ 4 ms


def test_curves_come_from_the_trial_files_and_the_rungs(es_job):
  job_dir, _ = es_job
  figs = figures(os.path.join(job_dir, "report.html"))
  loss = trace(figs["loss"], "trial 1")
  with open(os.path.join(job_dir, "1", "train_metrics.jsonl")) as f:
    written = [json.loads(line) for line in f]
  assert loss["x"] == [w["step"] for w in written] and loss["y"] == [w["loss"] for w in written]
  curves = figs["curves"]
  line = trace(curves, "trial 4")
  assert line["x"] == [30, 60, 90]
  assert line["y"] == [report_jobs.es_accuracy("4", s) for s in (30, 60, 90)]
  stopped = trace(curves, "trial 2 (stopped)")
  assert stopped["line"]["dash"] == "dot" and stopped["x"] == [30]
  marks = {t["customdata"][0]: t for t in curves["data"] if t.get("showlegend") is False}
  assert marks["2"]["marker"]["symbol"] == "x"
  assert marks["2"]["text"][0].endswith("(rung 0: stopped here)")
  assert marks["4"]["marker"]["symbol"] == "circle-open"
  assert marks["4"]["text"][0].endswith("(rung 0: promoted)")
  assert marks["8"]["text"][0].endswith("(rung 0: awaiting decision)")
  assert line["text"][0].endswith("(rung 0: promoted)") and "rung" not in line["text"][1]
  assert "5" not in marks  # failed before its first rung


def test_importance_finds_the_decision_the_reward_depends_on_most(es_job, mo_job):
  fig = figures(os.path.join(es_job[0], "report.html"))["importance"]
  bars = fig["data"][0]
  scores = dict(zip(bars["y"], bars["x"]))
  assert set(scores) == {"op", "width"}  # `label` is no categorical decision
  # op moves the reward 10 times as much per step as width: it explains most of it.
  assert scores["op"] > 0.7 > scores["width"] and sum(scores.values()) == pytest.approx(1.0)
  # Two objectives: one set of bars each.
  fig = figures(os.path.join(mo_job[0], "report.html"))["importance"]
  assert [b["name"] for b in fig["data"]] == ["accuracy:max", "latency_ms:min"]


def test_importance_needs_enough_varied_trials():
  params = [{"a": f"{i % 2}/2", "b": "0/3"} for i in range(4)]
  assert importance.importances(params, [0.1, 0.2, 0.3, 0.4]) is None  # 4 < MIN_TRIALS
  same = [{"a": "1/2"}] * 6
  assert importance.importances(same, [0.1] * 6) is None  # nothing varies
  assert importance.choice("2/5 ('conv')") == (2, 5) and importance.choice("7/5") is None


def test_the_table_lists_every_trial_best_first_with_links_and_escapes_markup(es_job):
  job_dir, state = es_job
  page = open(os.path.join(job_dir, "report.html"), encoding="utf-8").read()
  table = page[page.index('<table class="sortable" id="trials">'):]
  table = table[:table.index("</table>")]
  rows = table.split("<tr>")[2:]
  assert len(rows) == len(state.proposals)
  order = [r.split('href="')[1].split("/")[0] for r in rows]
  assert order == [r["trial_id"] for r in results.sort_by_reward(
      results.trial_rows(job_dir, state))]
  assert order[0] == state.best() == "4"
  # An architecture value that is markup stays text, in the table and in the figures' JSON.
  assert report_jobs.EVIL not in page
  assert "&lt;/script&gt;&lt;script&gt;window.pwned=1&lt;/script&gt;" in table
  hovers = " ".join(t for tr in figures(os.path.join(job_dir, "report.html"))[
      "progress-trials"]["data"] for t in tr.get("text", []))
  assert report_jobs.EVIL in hovers  # decoded back from \u003c-escaped JSON


def test_report_command_writes_pages_and_refuses_what_is_no_job(tmp_path, es_job):
  proxy = report_jobs.proxy_search_job(tmp_path / "proxy")
  copy = tmp_path / "copy"
  os.makedirs(copy)
  for name in ("journal.jsonl",):
    with open(os.path.join(es_job[0], name), "rb") as src, open(copy / name, "wb") as dst:
      dst.write(src.read())
  out = main_in_fresh_interpreter([["report", str(copy)], ["report", proxy],
                                   ["report", str(tmp_path / "missing")],
                                   ["report", str(tmp_path)]])
  (code1, err1, tf1), (code2, _, _), (code3, err3, _), (code4, err4, _) = out
  assert (code1, code2, code3, code4) == (0, 0, 1, 1)
  assert not tf1  # no TensorFlow for a page
  assert "wrote the search report" in err1
  # A job dir copied without its trial folders still gets its page, from the journal alone.
  figs = figures(copy / "report.html")
  assert len(trace(figs["progress-trials"], "completed")["x"]) == len(report_jobs.ES_COMPLETED)
  proxy_figs = figures(os.path.join(proxy, "report.html"))
  points = proxy_figs["proxy-cost"]["data"][0]
  assert points["customdata"] == ["steps10", "steps25"]  # the skipped one was not trained
  assert points["marker"]["symbol"] == ["circle", "star"]  # the chosen proxy
  assert proxy_figs["proxy-cost"]["layout"]["shapes"][0]["y0"] == 0.65
  assert err3.strip() == f"Error: {tmp_path / 'missing'} does not exist"
  assert err4.strip().startswith(f"Error: {tmp_path} is not a search or search_proxy_task job")


def test_list_trials_says_where_the_report_is(es_job, cli, tmp_path):
  code, _, err = cli("list_trials", es_job[0])
  assert code == 0
  assert f"report: {report.path_of(es_job[0])}" in err
  copy = tmp_path / "job"
  os.makedirs(copy)
  with open(os.path.join(es_job[0], "journal.jsonl"), "rb") as f:
    (copy / "journal.jsonl").write_bytes(f.read())
  code, _, err = cli("list_trials", copy)
  assert code == 0 and f"`nascli report {copy}` writes one" in err


def test_a_failing_refresh_warns_and_never_stops_the_search(tmp_path, es_job, caplog):
  job_dir, state = es_job
  rows = results.trial_rows(job_dir, state)
  blocked = tmp_path / "blocked"
  os.makedirs(blocked / "report.html")  # a folder where the page should go
  assert report.write_search(str(blocked), state, rows) is None
  assert "could not refresh" in caplog.text


def test_a_variance_job_leads_with_its_verdict_and_a_selection_with_its_warnings(tmp_path,
                                                                                 es_job):
  """A measure_proxy_task_variance job's page opens on its own verdict (no Pareto front of
  seeds, no latency target); a select_proxy_task_models job's page lists its models and warns."""
  job = tmp_path / "variance_job"
  os.makedirs(job)
  with open(os.path.join(es_job[0], "journal.jsonl"), "rb") as f:
    (job / "journal.jsonl").write_bytes(f.read())
  runs = [{"trial_id": str(n), "seed": n - 1, "accuracy": 0.8 + n / 100, "smoothness": 1.0,
           "evaluations": 3} for n in (1, 2, 3)]
  (job / "variance_and_smoothness.json").write_text(json.dumps({
      "accuracy_metric": "accuracy", "runs": runs, "variance": 0.012, "variance_good": True,
      "smoothness": 1.0, "smoothness_good": True, "mean_accuracy": 0.82,
      "run_to_run_std": 0.01, "max_variance_to_be_good": 0.4, "max_smoothness_to_be_good": 10,
      "verdict": {"message": "differences between architectures do not exceed the run-to-run"
                             " noise: tau ~0.00 (< 0.65)", "compared_with": "runs/search",
                  "architectures": 5}}))
  assert report.write(str(job)) == ("measure_proxy_task_variance", str(job / "report.html"))
  page = (job / "report.html").read_text()
  summary = page.split('<p class="summary">')[1].split("</p>")[0]
  assert summary == (
      "Differences between architectures do not exceed the run-to-run noise: tau ~0.00 (&lt;"
      " 0.65) (runs/search, 5 architectures). 3 runs of one architecture: coefficient of"
      " variation 0.012 (good, &lt;= 0.4), smoothness 1 (good, &lt;= 10).")
  figs = figures(job / "report.html")
  assert figs["variance"]["data"][0]["y"] == [r["accuracy"] for r in runs]
  assert figs["variance"]["data"][0]["x"][0] == "run 1 (seed 0)"
  assert not [k for k in figs if k.startswith(("tradeoff", "progress", "importance"))]
  body = page.split("<body>")[1].split('id="settings"')[0]  # the page less plotly.js
  assert "Pareto" not in body and "target" not in body
  selection = tmp_path / "selection_job"
  os.makedirs(selection)
  with open(os.path.join(es_job[0], "journal.jsonl"), "rb") as f:
    (selection / "journal.jsonl").write_bytes(f.read())
  (selection / "proxy_task_models.json").write_text(json.dumps({"models": [
      {"trial_id": "4", "accuracy": 0.86, "latency_ms": 4.0},
      {"trial_id": "10", "accuracy": 0.46, "latency_ms": 7.0}],
      "warnings": ["trials 4 and 10 tie at accuracy 0.5"]}))
  assert report.write(str(selection)) == ("search", str(selection / "report.html"))
  page = (selection / "report.html").read_text()
  models = page[page.index("Models chosen for the proxy study"):]
  assert "Warning: trials 4 and 10 tie at accuracy 0.5." in models
  models = page[page.index('id="models"'):]
  assert models.count("<tr>") == 3  # header + 2 models


def test_the_proxy_page_leads_with_its_verdict_and_counts_by_status(tmp_path):
  """Chosen or not, the first line says so with the tau; the counts are by status (a trained
  candidate whose scores all tie has no tau, and still counts as trained); the names beside
  the points have room inside the plot."""
  job = report_jobs.proxy_search_job(tmp_path / "proxy")
  state_path = os.path.join(job, "search_controller_state.json")
  with open(state_path) as f:
    state = json.load(f)
  state["candidates"][1]["accuracy_correlation"].update(interval=[0.52, 0.9], level=0.9)
  state["candidates"].append(dict(state["candidates"][0], name="steps5", status="failed",
                                  accuracy_correlation={"tau": None, "reason": "no ranking"}))
  state["left_out"] = ["steps400"]
  state["reference"]["warnings"] = ["5 of 10 reference models score near chance"]
  with open(state_path, "w") as f:
    json.dump(state, f)
  report.write(job)
  page = open(os.path.join(job, "report.html")).read()
  paragraphs = [p.split("</p>")[0] for p in page.split('<p class="summary">')[1:]]
  assert paragraphs[:3] == [
      "Chosen proxy: steps25 (100 steps, image size 32, training data fraction 1.0): accuracy"
      " tau 0.710 (90% interval 0.520 to 0.900) against --desired_accuracy_correlation 0.65.",
      "4 candidate(s): 3 trained (1 succeeded, 2 failed), 1 skipped untrained; left out as the"
      " reference training itself: steps400.",
      "Warning: 5 of 10 reference models score near chance."]
  cost = figures(os.path.join(job, "report.html"))["proxy-cost"]
  assert cost["data"][0]["cliponaxis"] is False
  low, high = cost["layout"]["xaxis"]["range"]
  assert low < min(cost["data"][0]["x"]) and high > max(cost["data"][0]["x"])
  state.update(chosen=None)
  for c in state["candidates"]:
    c["status"] = "failed" if c["status"] == "succeeded" else c["status"]
  with open(state_path, "w") as f:
    json.dump(state, f)
  report.write(job)
  page = open(os.path.join(job, "report.html")).read()
  assert page.split('<p class="summary">')[1].split("</p>")[0] == (
      "No proxy: no candidate met the targets; the best, steps25, has accuracy tau 0.710 (90%"
      " interval 0.520 to 0.900) against --desired_accuracy_correlation 0.65.")


def test_a_running_search_recomputes_importance_only_as_trials_grow(es_job):
  from nascli.report import search_page
  job_dir, state = es_job
  rows = results.trial_rows(job_dir, state)
  cache = {}
  first, _ = search_page.importance_figures(state, rows, cache)
  assert cache["count"] == len(report_jobs.ES_COMPLETED) and first
  again, _ = search_page.importance_figures(state, rows, cache)
  assert again is first  # no new completed trial: reused
  cache["count"] = len(report_jobs.ES_COMPLETED) - 1  # as if one trial completed since
  fresh, _ = search_page.importance_figures(state, rows, cache)
  assert fresh is not first and fresh == first  # computed again, seeded: the same bars
