"""The app in a real browser: Debian's chromium, headless, driven by playwright against
`streamlit run app/main.py` served on localhost, at 1400 px. Runs the default scenario and every
page and checks that the KPIs and charts rendered (the content arrives over a websocket, so
every check waits for its element), and that every chart can be read: each plot area wide
enough (the Planner's at 1280, 1400 and 1920 px), legends outside the data, text labels that
do not overlap, the SLO targets drawn. A screenshot of each page goes to test-output/app/; with
EPSIM_WRITE_DOCS=1 also to docs/img/app_<page>.png (the ones docs/app.md shows)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
OUT = ROOT / "test-output" / "app"
DOCS_IMG = ROOT / "docs" / "img"
CHROMIUM = shutil.which("chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic"]
CHARTS = "[data-testid='stVegaLiteChart'] canvas, [data-testid='stVegaLiteChart'] svg.marks"
WIDTH = 1400                      # the docs' screenshots, and the reading width checked
MIN_PLOT_PX = 400                 # a plot area narrower than this does not show its points apart

# Per chart on the page: its plot area (the box the axis grid lines span), its legends, and
# every text mark the chart draws over the data (point labels), each as [x, y, width, height].
GEOMETRY_JS = """() => [...document.querySelectorAll("[data-testid='stVegaLiteChart'] svg.marks")].map(svg => {
  const box = el => { const r = el.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; };
  const grids = [...svg.querySelectorAll('.role-axis-grid')].map(box).filter(b => b[2] > 0 || b[3] > 0);
  let plot = null;
  if (grids.length) {
    const x0 = Math.min(...grids.map(b => b[0])), y0 = Math.min(...grids.map(b => b[1]));
    const x1 = Math.max(...grids.map(b => b[0] + b[2])), y1 = Math.max(...grids.map(b => b[1] + b[3]));
    plot = [x0, y0, x1 - x0, y1 - y0];
  }
  return {plot, legends: [...svg.querySelectorAll('.role-legend')].map(box),
          labels: [...svg.querySelectorAll('.mark-text.role-mark text')]
                    .filter(t => t.textContent.trim()).map(t => [...box(t), t.textContent]),
          axes: [...svg.querySelectorAll('.role-axis')].map(g => g.getAttribute('aria-label') || '')};
})"""

if CHROMIUM is None:
    pytest.skip("Debian chromium is not installed (apt-get install chromium; .ci/run does it)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def app_url():
    """`streamlit run app/main.py` on a free port, up until its health check answers."""
    port = _free_port()
    OUT.mkdir(parents=True, exist_ok=True)
    log_path = OUT / "streamlit.log"
    log = log_path.open("w")
    env = {**os.environ, "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited ({proc.returncode}): {log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                    if response.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit did not answer on {url} within 90 s: {log_path.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def page(app_url):
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        tab = browser.new_page(viewport={"width": WIDTH, "height": 1000})
        tab.set_default_timeout(180_000)
        tab.goto(app_url)
        yield tab
        browser.close()


def _screenshot(tab, name: str) -> Path:
    """The whole page (streamlit scrolls inside its main block, so grow the viewport to it)."""
    time.sleep(1.0)        # let vega finish drawing
    height = tab.evaluate("document.querySelector('[data-testid=stMain]').scrollHeight")
    tab.set_viewport_size({"width": WIDTH, "height": int(height) + 40})
    time.sleep(1.0)
    path = OUT / f"app_{name}.png"
    tab.screenshot(path=path, full_page=True)
    tab.set_viewport_size({"width": WIDTH, "height": 1000})
    if os.environ.get("EPSIM_WRITE_DOCS") == "1":
        shutil.copy(path, DOCS_IMG / path.name)
    assert path.stat().st_size > 10_000
    return path


def _no_errors(tab) -> None:
    errors = tab.locator("[data-testid='stAlertContentError']")
    assert errors.count() == 0, errors.all_inner_texts()
    assert tab.locator("[data-testid='stException']").count() == 0


def _legend_labels(tab) -> list[str]:
    """Every legend label of every chart on the page, as drawn (the app's charts render SVG, so
    a label vega cut short ends in '…')."""
    labels = tab.locator("[data-testid='stVegaLiteChart'] svg .role-legend-label text")
    return [text.strip() for text in labels.all_text_contents()]


def _legends_whole(tab, expected: list[str]) -> list[str]:
    """No legend label is cut short, and the ones expected are there whole."""
    labels = _legend_labels(tab)
    assert not [label for label in labels if label.endswith("…")], labels
    assert set(expected) <= set(labels), (expected, labels)
    return labels


def _overlap(a, b, slack: float = 1.0) -> bool:
    """Whether two [x, y, width, height] boxes overlap by more than `slack` px each way."""
    return (a[0] + a[2] - slack > b[0] and b[0] + b[2] - slack > a[0]
            and a[1] + a[3] - slack > b[1] and b[1] + b[3] - slack > a[1])


def _metrics_whole(tab) -> None:
    """No KPI value cut short (Streamlit ends a value wider than its column with an ellipsis)."""
    cut = tab.evaluate("""() => [...document.querySelectorAll("[data-testid='stMetricValue'] div")]
        .filter(d => d.scrollWidth > d.clientWidth + 1).map(d => d.textContent)""")
    assert not cut, f"KPI values cut short: {cut}"


def _readable(tab, min_plot_px: float = 0.0) -> list[dict]:
    """Every chart's geometry (`GEOMETRY_JS`), checked: legends outside the plot area, no two
    text labels overlapping, each plot area at least `min_plot_px` wide."""
    time.sleep(1.0)                                   # vega draws after the data arrives
    charts = tab.evaluate(GEOMETRY_JS)
    for i, chart in enumerate(charts):
        plot = chart["plot"]
        if plot is None:
            continue
        for legend in chart["legends"]:
            assert not _overlap(legend, plot), f"chart {i}: legend {legend} over the data {plot}"
        labels = chart["labels"]
        clashes = [(a[4], b[4]) for j, a in enumerate(labels) for b in labels[j + 1:] if _overlap(a, b)]
        assert not clashes, f"chart {i}: labels drawn over each other: {clashes[:5]}"
        assert plot[2] >= min_plot_px, f"chart {i}: plot area {plot[2]:.0f} px wide (< {min_plot_px})"
    return charts


def _go(tab, title: str) -> None:
    tab.locator("[data-testid='stSidebarNav'] a", has_text=title).click()
    tab.get_by_role("heading", name=title).wait_for()


def _wait_charts(tab, num: int) -> None:
    tab.locator(CHARTS).nth(num - 1).wait_for()
    assert tab.locator(CHARTS).count() >= num


def test_default_scenario_runs_and_renders(page):
    page.get_by_role("heading", name="Scenario").wait_for()
    page.get_by_role("button", name="Run simulation").click()
    metrics = page.get_by_test_id("stMetric")
    metrics.nth(12).wait_for()                       # 5 throughput and serving + 4 TTFT + 4 TPOT
    text = " ".join(metrics.all_inner_texts())
    for label in ("throughput / GPU", "served / offered", "finished in the window", "TTFT p50",
                  "TTFT p99", "TPOT p50", "TPOT p99"):
        assert label in text
    assert "tok/s" in text and " ms" in text
    _wait_charts(page, 6)                            # provenance, 2 CDFs, layer breakdown, rank load, step time
    page.get_by_role("button", name="summary.json").wait_for()
    _no_errors(page)
    _metrics_whole(page)
    _legends_whole(page, ["attention", "dispatch", "experts", "combine"])
    charts = _readable(page, min_plot_px=250)
    # the provenance bars name every part on their axis, block ops included, with one x title
    parts = next(a for c in charts for a in c["axes"] if "attention" in a and "block ops" in a)
    assert all(p in parts for p in ("dispatch", "experts", "combine")), parts
    assert not any("p10 µs" in a for c in charts for a in c["axes"]), "a stray field name as a title"
    _screenshot(page, "scenario")


def test_predicted_vs_measured_page(page):
    _go(page, "Predicted vs measured")
    page.get_by_text("upload records and a profile").wait_for()
    if page.get_by_text("shipped profile and records").count() == 0:
        # no measured profile ships yet: upload CPU (gloo) records and their profile
        inputs = page.locator("[data-testid='stFileUploaderDropzoneInput']")
        inputs.nth(0).set_input_files(str(DATA / "gloo_records.jsonl"))
        inputs.nth(1).set_input_files(str(DATA / "gloo_profile.json"))
    # the first load says what it computes while it does (reading, predicting), or is done
    busy = page.get_by_text("Predicted vs measured: ").or_(page.get_by_test_id("stMetric"))
    busy.first.wait_for(timeout=60_000)
    page.get_by_test_id("stMetric").nth(3).wait_for()
    assert "MAPE" in " ".join(page.get_by_test_id("stMetric").all_inner_texts())
    # the extrapolation hold-outs' refits wait to be asked for: the page does not wait on them
    page.get_by_role("button", name="Judge the extrapolation hold-outs").wait_for()
    _wait_charts(page, 2)
    _no_errors(page)
    _metrics_whole(page)
    page.get_by_text("Measured on").first.wait_for()
    labels = _legends_whole(page, ["dispatch", "held out", "fit set"])
    assert any(label.endswith(("bf16", "fp8", "-")) for label in labels), labels   # shape, dtype
    assert "uniform" in labels                                                      # skew
    _readable(page, min_plot_px=250)
    # every legend inside the page's width (the curves' legends sit under their panels)
    main = page.locator("[data-testid=stMain]").bounding_box()
    legends = [b for c in page.evaluate(GEOMETRY_JS) for b in c["legends"]]
    assert all(b[0] + b[2] <= main["x"] + main["width"] + 1 for b in legends), legends
    _screenshot(page, "validation")


def test_eplb_page(page):
    _go(page, "EPLB")
    page.get_by_role("button", name="Run with EPLB").click()
    # the run's metrics follow the resilience columns' metrics on this page: find them by label
    page.get_by_test_id("stMetric").filter(has_text="window balancedness after").wait_for()
    assert page.get_by_test_id("stMetric").filter(has_text="rebalances").count() == 1
    _wait_charts(page, 3)                            # balancedness, step time, heatmap
    page.get_by_label("intervals (forward passes)").fill("25,50,100,200")
    page.get_by_role("button", name="Run interval sweep").click()
    page.get_by_text("best: rebalance every").wait_for()
    _wait_charts(page, 6)
    _no_errors(page)
    _metrics_whole(page)
    _legends_whole(page, ["rebalance"])
    _readable(page, min_plot_px=200)
    assert "-s windows" not in page.inner_text("body")              # "0.67 s windows"
    _screenshot(page, "eplb")


def test_planner_page(page):
    _go(page, "Planner")
    page.get_by_role("button", name="Run sweep").click()
    page.get_by_text("Pareto frontier of").wait_for()
    # the answer: the cheapest configuration, or why none meets the SLO; the rule with it
    answer = page.locator("[data-testid='stAlertContentSuccess'], [data-testid='stAlertContentWarning']")
    answer.filter(has_text="SLO").or_(answer.filter(has_text="constraints")).first.wait_for()
    page.get_by_text("Chosen among the points that keep up").wait_for()
    _wait_charts(page, 3)
    _no_errors(page)
    _metrics_whole(page)
    # the SLO targets drawn (and named in the legend, not written over the data)
    _legends_whole(page, ["Pareto frontier", "meets the SLO", "TPOT p99 target 50", "TTFT p99 target 2000"])
    for width in (1280, 1920, WIDTH):               # the reading widths: every plot wide enough
        page.set_viewport_size({"width": width, "height": 1000})
        time.sleep(2.0)
        charts = _readable(page, min_plot_px=MIN_PLOT_PX)
        assert len([c for c in charts if c["plot"]]) == 3
        assert all(len(c["labels"]) == 4 for c in charts), [len(c["labels"]) for c in charts]  # EP 8..64
    _screenshot(page, "planner")


def test_compare_page(page):
    _go(page, "Compare")
    page.get_by_role("button", name="Compare").click()
    page.get_by_text("Why: MoE layer").wait_for()
    _wait_charts(page, 1)
    _no_errors(page)
    _metrics_whole(page)
    text = page.inner_text("[data-testid=stMain]")
    assert "deployment.moe_a2a_backend" in text and "mooncake → deepep" in text
    assert "keep-up A: " in text and "keep-up B: " in text
    assert page.get_by_test_id("stDataFrame").count() == 2      # metrics, the layer's parts
    _legends_whole(page, ["A", "B"])
    charts = _readable(page, min_plot_px=MIN_PLOT_PX)
    parts = " ".join(a for c in charts for a in c["axes"])
    for label in ("attention", "dispatch", "experts", "combine", "block ops", "MoE layer"):
        assert label in parts, label
    _screenshot(page, "compare")


def test_silicon_page(page):
    _go(page, "Held to silicon")
    page.get_by_test_id("stMetric").nth(3).wait_for(timeout=60_000)
    assert "TPOT MAPE" in " ".join(page.get_by_test_id("stMetric").all_inner_texts())
    _wait_charts(page, 2)                            # TPOT and TTFT, predicted against measured
    _no_errors(page)
    _metrics_whole(page)
    _legends_whole(page, ["epsim", "peer", "predicted"])
    charts = _readable(page, min_plot_px=MIN_PLOT_PX)
    axes = " ".join(a for c in charts for a in c["axes"])
    assert "measured TPOT" in axes and "measured TTFT" in axes, axes
    page.get_by_text("What epsim is known to miss").wait_for()
    _screenshot(page, "silicon")


def test_server_log_has_no_context_warnings(page):
    """After every page and both sweeps: sweep workers did not run the page again (which would
    log 'missing ScriptRunContext' and 'No runtime found')."""
    log = (OUT / "streamlit.log").read_text()
    assert "missing ScriptRunContext" not in log and "No runtime found" not in log, log[-3000:]
