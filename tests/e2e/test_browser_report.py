"""The HTML report in a real browser: headless Chromium (Debian's package) opens the report of a Run
with doctor, bench, profile and estimate sections; no console errors, every chart drawn with its
series, screenshots taken. Skipped when no Chromium is installed (`.ci/run` installs it).

Screenshots go to the test's temporary directory, or to $PERFSTACK_SCREENSHOTS when set
(docs/screenshots/ holds the ones committed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from synthetic import full_run

from perfstack.compare import diff_runs
from perfstack.report import html
from perfstack.report.views import build

pytestmark = pytest.mark.browser

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-quic", "--disable-dev-shm-usage"]
EXPECTED = {  # chart -> series it must draw
    "peak-bars": {"gemm.bf16.best", "hbm.copy", "h2d.pinned.best"},
    "curve-transfer": {"h2d.pinned", "h2d.pageable", "d2h.pinned", "d2h.pageable"},
    "roofline": {"ceiling bf16/fp16", "GEMM bf16", "profile kernel classes"},
    "profile-steps": {"gemm", "idle"},
    "recoverable": {"dataloader-stall"},
    "memory": {"weights"},
    "latency": set(),
}


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


BROWSER = chromium()
needs_chromium = pytest.mark.skipif(BROWSER is None, reason="no Chromium installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("html")
    out = {}
    for name in ("h100", "h200x2"):  # the 2-GPU Run adds the collectives
        out[name] = d / f"{name}.html"
        out[name].write_text(html.render_run(build(full_run(name))), encoding="utf-8")
    out["diff"] = d / "diff.html"
    out["diff"].write_text(html.render_diff(diff_runs(full_run("h100", recorded=False),
                                                      full_run("h100", seed=2, scale=0.95, recorded=False),
                                                      "before.json", "after.json")), encoding="utf-8")
    return out


def shots_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("PERFSTACK_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


# Every chart: its drawn size and, per series, how many of its elements have a non-empty box.
CHARTS_JS = """() => Array.from(document.querySelectorAll('figure.chart')).map(f => {
  const svg = f.querySelector('svg'); const box = svg.getBoundingClientRect();
  const series = {};
  f.querySelectorAll('[data-series]').forEach(el => {
    const b = el.getBBox ? el.getBBox() : {width: 0, height: 0};
    const name = el.getAttribute('data-series');
    series[name] = (series[name] || 0) + ((b.width > 0 || b.height > 0) ? 1 : 0);
  });
  return {kind: f.dataset.chart, width: box.width, height: box.height, series: series};
})"""


@needs_chromium
def test_report_in_chromium_with_playwright(pages, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    out = shots_dir(tmp_path)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=BROWSER, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("requestfailed", lambda r: errors.append(f"request {r.url}"))
            page.goto(pages["h200x2"].as_uri())
            page.wait_for_load_state("load")
            coll = {c["kind"]: c for c in page.evaluate(CHARTS_JS)}["curve-collective"]
            assert coll["width"] > 300 and coll["series"].get("all_reduce") and coll["series"].get("all_gather")
            page.goto(pages["h100"].as_uri())
            page.wait_for_load_state("load")
            charts = page.evaluate(CHARTS_JS)
            assert errors == []
            assert page.evaluate("document.documentElement.dataset.charts") == str(len(charts))  # the script ran
            drawn = {c["kind"]: c for c in charts}
            assert set(EXPECTED) <= set(drawn)
            for kind, series in EXPECTED.items():
                c = drawn[kind]
                assert c["width"] > 300 and c["height"] > 80, c
                assert any(n > 0 for n in c["series"].values()), f"{kind} drew nothing"
                missing = {s for s in series if not c["series"].get(s)}
                assert not missing, f"{kind}: series not drawn: {missing}"
            page.click("text=expand all")  # the one script on the page works
            assert page.evaluate("Array.from(document.querySelectorAll('details')).every(d => d.open)")
            page.screenshot(path=str(out / "report-top.png"))
            page.locator('#bench figure[data-chart="peak-bars"]').screenshot(path=str(out / "report-peak.png"))
            page.locator('#bench figure[data-chart="curve-transfer"]').screenshot(path=str(out / "report-curves.png"))
            page.locator("#roofline figure").screenshot(path=str(out / "report-roofline.png"))
            page.locator("#profile").screenshot(path=str(out / "report-profile.png"))
            page.locator("#estimates figure").first.screenshot(path=str(out / "report-memory.png"))

            page.goto(pages["diff"].as_uri())
            page.wait_for_load_state("load")
            assert errors == []
            kinds = {c["kind"]: c for c in page.evaluate(CHARTS_JS)}
            assert kinds["deltas"]["series"].get("hbm.copy") and kinds["profile-diff"]["width"] > 300
            page.locator("#bench").screenshot(path=str(out / "diff-bench.png"))
        finally:
            browser.close()
    for png in out.glob("*.png"):
        assert png.stat().st_size > 2000


@needs_chromium
def test_report_in_chromium_headless_cli(pages, tmp_path):
    """Without Playwright: chromium's own --dump-dom (after the script ran) and --screenshot."""
    env = {**os.environ, "HOME": str(tmp_path)}
    dom = subprocess.run([BROWSER, *ARGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          pages["h100"].as_uri()], capture_output=True, text=True, timeout=120, env=env)
    assert dom.returncode == 0, dom.stderr[-2000:]
    n = dom.stdout.count('<figure class="chart"')
    assert n >= len(EXPECTED)
    assert f'data-charts="{n}"' in dom.stdout  # set by the page's script: it ran to the end
    shot = tmp_path / "shot.png"
    r = subprocess.run([BROWSER, *ARGS, f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                        "--window-size=1100,2400", "--hide-scrollbars", pages["h100"].as_uri()],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
