"""The app in a real browser: Debian's chromium, headless, driven by playwright against
`streamlit run app/main.py` served on localhost. Runs the default scenario and every page and
checks that the KPIs and charts rendered (the content arrives over a websocket, so every check
waits for its element). A screenshot of each page goes to test-output/app/; with
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
        tab = browser.new_page(viewport={"width": 1500, "height": 1000})
        tab.set_default_timeout(180_000)
        tab.goto(app_url)
        yield tab
        browser.close()


def _screenshot(tab, name: str) -> Path:
    """The whole page (streamlit scrolls inside its main block, so grow the viewport to it)."""
    time.sleep(1.0)        # let vega finish drawing
    height = tab.evaluate("document.querySelector('[data-testid=stMain]').scrollHeight")
    tab.set_viewport_size({"width": 1500, "height": int(height) + 40})
    time.sleep(1.0)
    path = OUT / f"app_{name}.png"
    tab.screenshot(path=path, full_page=True)
    tab.set_viewport_size({"width": 1500, "height": 1000})
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
    metrics.nth(11).wait_for()                       # 4 throughput + 4 TTFT + 4 TPOT
    text = " ".join(metrics.all_inner_texts())
    for label in ("throughput / GPU", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99"):
        assert label in text
    assert "tok/s" in text and " ms" in text
    _wait_charts(page, 5)                            # 2 CDFs, layer breakdown, rank load, step time
    page.get_by_role("button", name="summary.json").wait_for()
    _no_errors(page)
    _legends_whole(page, ["attention", "dispatch", "experts", "combine"])
    _screenshot(page, "scenario")


def test_predicted_vs_measured_page(page):
    _go(page, "Predicted vs measured")
    page.get_by_text("upload records and a profile").wait_for()
    if page.get_by_text("shipped profile and records").count() == 0:
        # no measured profile ships yet: upload CPU (gloo) records and their profile
        inputs = page.locator("[data-testid='stFileUploaderDropzoneInput']")
        inputs.nth(0).set_input_files(str(DATA / "gloo_records.jsonl"))
        inputs.nth(1).set_input_files(str(DATA / "gloo_profile.json"))
    page.get_by_test_id("stMetric").nth(3).wait_for()
    assert "MAPE" in " ".join(page.get_by_test_id("stMetric").all_inner_texts())
    _wait_charts(page, 2)
    _no_errors(page)
    page.get_by_text("Measured on").first.wait_for()
    labels = _legends_whole(page, ["dispatch", "held out", "fit set"])
    assert any(label.endswith(("bf16", "fp8", "-")) for label in labels), labels   # shape, dtype
    assert "uniform" in labels                                                      # skew
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
    _legends_whole(page, ["rebalance"])
    assert "-s windows" not in page.inner_text("body")              # "0.67 s windows"
    _screenshot(page, "eplb")


def test_planner_page(page):
    _go(page, "Planner")
    page.get_by_role("button", name="Run sweep").click()
    page.get_by_text("Pareto frontier of").wait_for()
    # the answer: the cheapest configuration, or why none meets the SLO
    answer = page.locator("[data-testid='stAlertContentSuccess'], [data-testid='stAlertContentWarning']")
    answer.filter(has_text="SLO").or_(answer.filter(has_text="constraints")).first.wait_for()
    _wait_charts(page, 2)
    _no_errors(page)
    _legends_whole(page, ["Pareto frontier", "meets the SLO"])
    _screenshot(page, "planner")


def test_server_log_has_no_context_warnings(page):
    """After every page and both sweeps: sweep workers did not run the page again (which would
    log 'missing ScriptRunContext' and 'No runtime found')."""
    log = (OUT / "streamlit.log").read_text()
    assert "missing ScriptRunContext" not in log and "No runtime found" not in log, log[-3000:]
