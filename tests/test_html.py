"""HTML report: escaping, size cap, memory curve, and the page in Chromium with no network."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from helpers.browser import chromium_browser
from opscope.model import Profile
from opscope.report.html import MAX_BYTES, memory_curves, render_html

PAYLOAD = "</script><script>alert(1)</script>"
EVIL = f"void k<{PAYLOAD}>&\"q'\u2028x"
BERT = "gpu/tracelens_h100_bert_small.json.gz"


def _data(html: str) -> Any:
    m = re.search(r'<script type="application/json" id="opscope-data">(.*?)</script>', html, re.S)
    assert m is not None
    return json.loads(m.group(1))


def _report(n_kernels: int = 3) -> dict[str, Any]:
    kernels = [{"name": EVIL if i == 0 else f"k{i}", "calls": i + 1, "total_us": 10.0 * (i + 1)}
               for i in range(n_kernels)]  # fmt: skip
    return {
        "format": "kineto",
        "events": 10,
        "hotspots": {
            "ops": [{"name": "aten::mm", "calls": 2, "total_us": 5.0}],
            "kernels": kernels,
        },
        "anomalies": [],
        "findings": [{"rule": "r1", "severity": "high", "title": EVIL, "saving_us": 1.5}],
        "roofline": [
            {
                "name": "aten::mm",
                "intensity": 50.0,
                "achieved_tflops": 10.0,
                "achieved_gbps": 200.0,
                "pct_of_peak": 50.0,
                "bound": "compute",
                "time_us": 5.0,
                "calls": 2,
            },
            {
                "name": "aten::add",
                "intensity": 0.1,
                "achieved_tflops": 0.05,
                "achieved_gbps": 500.0,
                "pct_of_peak": 25.0,
                "bound": "memory",
                "time_us": 2.0,
                "calls": 4,
            },
        ],
        "comparison": {
            "total_before_us": 9.0,
            "ops": [{"name": "aten::mm", "before_us": 5.0, "after_us": 3.0}],
        },
        "breakdown": {
            "steps": [{"step": 1, "dur_us": 9.0, "compute_us": 5.0, "device_idle_us": 4.0}]
        },
    }


def test_trace_strings_cannot_close_the_script() -> None:
    html = render_html(_report())
    body = html.split('id="opscope-data">', 1)[1].split("</script>", 1)[0]
    for bad in ("<", ">", "&", "\u2028"):
        assert bad not in body
    assert PAYLOAD not in html
    data = _data(html)
    assert data["hotspots"]["kernels"][0]["name"] == EVIL
    assert data["findings"][0]["title"] == EVIL
    # The one inline script is allowed by hash and nothing may be fetched.
    assert "connect-src 'none'" in html and "default-src 'none'" in html
    rest = html.replace("http://www.w3.org/2000/svg", "")  # the SVG namespace, never fetched
    assert "http://" not in rest and "https://" not in rest


def test_size_cap_cuts_rows_and_says_so() -> None:
    big = _report(60_000)
    html = render_html(big)
    assert len(html.encode()) <= MAX_BYTES
    data = _data(html)
    assert 0 < len(data["hotspots"]["kernels"]) < 60_000
    assert any("of 60000 rows" in n for n in data["_notes"])
    small = _data(render_html(_report(5)))
    assert "_notes" not in small and len(small["hotspots"]["kernels"]) == 5


def _memory_profile(n: int = 9000) -> tuple[Profile, list[int]]:
    total = [(i * 7919) % 100_003 for i in range(n)]
    mem = pl.DataFrame(
        {"rank": [0] * n, "ts_ns": [5_000 + 1000 * i for i in range(n)], "bytes": [1] * n,
         "total_allocated": total, "device_type": [1] * n, "device": [0] * n}
    )  # fmt: skip
    return Profile.from_tables(memory=mem), total


def test_memory_curve_is_downsampled_with_the_exact_peak() -> None:
    prof, total = _memory_profile()
    (curve,) = memory_curves(prof, points=500)
    assert curve["downsampled"] and curve["points"] == len(total)
    assert len(curve["bytes"]) <= 500
    assert max(curve["bytes"]) == max(total)
    peak_i = total.index(max(total))
    assert curve["ts_us"][curve["bytes"].index(max(total))] == pytest.approx(peak_i * 1.0)


# Browser ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium_browser()


def _open_offline(browser: Any, path: Path) -> tuple[Any, Any, list[str], list[str]]:
    ctx = browser.new_context(viewport={"width": 1300, "height": 900})
    attempted: list[str] = []
    dialogs: list[str] = []

    def route(r: Any) -> None:
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            attempted.append(r.request.url)
            r.abort()

    ctx.route("**/*", route)
    page = ctx.new_page()
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    assert errors == []
    return ctx, page, attempted, dialogs


@pytest.mark.browser
def test_injection_stays_text_offline(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    prof, total = _memory_profile(3000)
    out.write_text(render_html(_report(), profile=prof))
    ctx, page, attempted, dialogs = _open_offline(browser, out)
    cells = page.locator("td", has_text=PAYLOAD)
    assert cells.count() == 2  # the kernel row and the finding row
    assert cells.first.text_content() == EVIL.replace("\u2028", "\u2028")
    assert cells.first.is_visible()
    assert page.locator("script").count() == 2  # the data and the page's own script, no more
    page.wait_for_timeout(200)
    assert dialogs == [] and attempted == []
    # Memory: the peak marker sits at the true peak, and says so on hover.
    peak = page.locator("#memory circle.peak")
    peak.hover()
    tip = page.locator("#tip").text_content()
    assert f"({max(total):,} bytes)" in tip
    # The comparison has its own section with its table.
    assert page.locator("#comparison tbody tr").count() == 1
    assert page.locator("#comparison tbody td").first.text_content() == "aten::mm"
    # Roofline hover shows the group.
    page.locator("#roofline circle").first.hover()
    assert "aten::mm" in page.locator("#tip").text_content()
    ctx.close()


@pytest.mark.browser
@pytest.mark.slow
def test_real_profile_report_sections_and_sorting(browser: Any, tmp_path: Path) -> None:
    from opscope.cli.app import main

    out = tmp_path / "report.html"
    assert main(["html", str(shared_trace(BERT)), "-o", str(out)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temp file left behind
    html = out.read_text()
    data = _data(html)
    ctx, page, attempted, dialogs = _open_offline(browser, out)
    titles = page.locator("section h2").all_text_contents()
    for want in ["Step breakdown", "Hotspots", "Time per source line", "Roofline", "Memory",
                 "All findings"]:  # fmt: skip
        assert want in titles
    # the headline and the top findings come first; no section is empty (BERT has no anomaly)
    assert titles[0].startswith("Step time ") and titles[1].startswith("Top findings")
    assert "Anomalies" not in titles and data["anomalies"] == []
    for sec in page.locator("main section").all():
        assert sec.locator("table, svg, p, ol, dl").count() > 0
    # the page's title names the trace; no cell holds raw JSON
    assert page.title() == f"opscope report: {Path(BERT).name}"
    cells = page.locator("td").all_text_contents()
    assert cells and not [c for c in cells if c.startswith(("{", "[{"))]
    # the one step's start is an offset, not an absolute timestamp
    assert "ts_us" not in data["breakdown"]["steps"][0]
    assert data["breakdown"]["steps"][0]["start_us"] == 0
    # Sort the operator table by total_us, ascending then descending.
    table = page.locator("#hotspots table").first
    headers = [h.get_attribute("data-col") for h in table.locator("th").all()]
    col = headers.index("total_us")
    assert table.locator("th").nth(col).text_content() == "total"
    table.locator("th").nth(col).click()
    cells = table.locator(f"tbody tr td:nth-child({col + 1})")
    got = [float(c.get_attribute("data-v") or "nan") for c in cells.all()]
    # shown in human units: "1.156 ms", "826.00 µs"
    assert all(t.endswith((" ms", " µs", " s")) for t in cells.all_text_contents())
    want = sorted((r["total_us"] for r in data["hotspots"]["ops"]), reverse=True)
    assert got == pytest.approx(want, rel=1e-3)
    table.locator("th").nth(col).click()
    got2 = [float(c.get_attribute("data-v") or "nan") for c in cells.all()]
    assert got2 == pytest.approx(sorted(want), rel=1e-3)
    # One bar per step in the breakdown chart, each with its step time on hover.
    steps = data["breakdown"]["steps"]
    assert page.locator("#breakdown svg line[stroke-width='2']").count() == len(steps)
    assert attempted == [] and dialogs == []
    ctx.close()


def _top_finding_box(browser: Any, path: Path) -> dict[str, float]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=10_000)
    box = page.locator("#finding-1").bounding_box()
    text = page.locator("#finding-1").text_content() or ""
    ctx.close()
    assert box is not None
    return {**box, "text": text}  # type: ignore[dict-item]


@pytest.mark.browser
def test_top_finding_is_above_the_fold(browser: Any, tmp_path: Path) -> None:
    """The finding with the largest saving is inside the first 1280x800 screen."""
    data = _report()
    data["findings"] = [
        {"rule": f"r{i}", "severity": "low", "title": f"finding {i}", "file": "m.py", "line": i,
         "saving_us": 100.0 - i, "saving_pct": 1.0, "fix": "x = y\nz"}
        for i in range(12)
    ]  # fmt: skip
    out = tmp_path / "r.html"
    out.write_text(render_html(data))
    box = _top_finding_box(browser, out)
    assert box["y"] >= 0 and box["y"] + box["height"] <= 800
    assert "finding 0" in str(box["text"]) and "m.py:0" in str(box["text"])


@pytest.mark.browser
@pytest.mark.slow
def test_top_finding_is_above_the_fold_on_a_real_trace(browser: Any, tmp_path: Path) -> None:
    from opscope.cli.app import main

    out = tmp_path / "report.html"
    assert main(["html", str(shared_trace(BERT)), "-o", str(out)]) == 0
    top = _data(out.read_text())["findings"][0]
    box = _top_finding_box(browser, out)
    assert box["y"] + box["height"] <= 800
    assert top["title"] in str(box["text"])


@pytest.mark.browser
def test_trend_chart_draws_each_point_and_change_point(browser: Any, tmp_path: Path) -> None:
    steps = list(range(10, 40))
    values: list[float | None] = [1000.0 if s < 25 else 2400.0 for s in steps]
    values[3] = None  # a missing step is skipped, not drawn at 0
    trend = {
        "steps": 40,
        "series": {
            "step_time": {"unit": "us", "steps": steps, "values": values},
            "samples_per_s": {"unit": "1/s", "steps": steps, "values": [5.0] * len(steps)},
        },
        "change_points": [
            {"step": 25, "metric": "step_time", "before": 1000.0, "after": 2400.0, "ratio": 2.4}
        ],
    }
    out = tmp_path / "t.html"
    out.write_text(render_html({"format": "kineto", "trend": trend}))
    ctx, page, attempted, _ = _open_offline(browser, out)
    charts = page.locator("svg.trend-chart")
    assert charts.count() == 2
    assert charts.nth(0).locator("circle").count() == len(steps) - 1
    marks = charts.nth(0).locator("line.change-point")
    assert marks.count() == 1 and charts.nth(1).locator("line.change-point").count() == 0
    # the marker sits at step 25, between the points of steps 24 and 26
    x = float(marks.first.get_attribute("x1") or "nan")
    xs = [float(c.get_attribute("cx") or "nan") for c in charts.nth(0).locator("circle").all()]
    drawn = [s for i, s in enumerate(steps) if i != 3]
    assert xs[drawn.index(24)] < x < xs[drawn.index(26)]
    assert attempted == []
    ctx.close()


@pytest.mark.browser
def test_source_view_shows_code_and_times_as_text(browser: Any, tmp_path: Path) -> None:
    data = _report()
    code = f"    y = k({PAYLOAD!r})  # <b>not bold</b>"
    data["source_blocks"] = [
        {"file": "model.py", "path": "/x/model.py", "basis": "device", "total_us": 3.0,
         "truncated": False, "lines": [
             {"line": 9, "text": "def f(x):", "fwd_us": 0.0, "bwd_us": 0.0, "calls": 0},
             {"line": 10, "text": code, "fwd_us": 1500.0, "bwd_us": 2.5, "calls": 2}]}
    ]  # fmt: skip
    out = tmp_path / "s.html"
    out.write_text(render_html(data))
    ctx, page, attempted, dialogs = _open_offline(browser, out)
    rows = page.locator("#source table.source tr.hot")
    assert rows.count() == 1
    cells = rows.first.locator("td").all_text_contents()
    assert cells == ["10", code, "1.500 ms", "2.50 µs"]
    assert page.locator("#source b").count() == 0 and dialogs == [] and attempted == []
    # the source view comes right after the headline and the findings
    titles = page.locator("section h2").all_text_contents()
    assert titles[2].startswith("Source (device time per line")
    ctx.close()
