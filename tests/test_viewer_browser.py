"""The timeline viewer in headless Chromium: draw, zoom, pan, search, click, call stack, flows."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import shared_trace
from helpers.browser import chromium_browser

MI300 = "gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium_browser()


@pytest.fixture(scope="module")
def viewer(browser: Any) -> Iterator[tuple[Any, Any, list[dict[str, Any]]]]:
    import opscope
    from opscope.report.viewer import make_server

    path = shared_trace(MI300)
    with gzip.open(path) as f:
        raw = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    srv = make_server(opscope.load(path, cache=False), overlays=False)
    srv.start_background()
    # bypass_csp: Playwright's wait_for_function evaluates strings, which the page's CSP forbids.
    ctx = browser.new_context(viewport={"width": 1400, "height": 800}, bypass_csp=True)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(srv.url)
    page.wait_for_function("window.__opscope && window.__opscope.stats.firstPaintMs !== null")
    yield page, srv, raw
    assert errors == []
    ctx.close()
    srv.shutdown()
    srv.server_close()


def _view(page: Any) -> tuple[float, float]:
    v = page.evaluate("[window.__opscope.S.t0, window.__opscope.S.t1]")
    return float(v[0]), float(v[1])


def _coloured_pixels(page: Any) -> int:
    """Pixels of the slice area (right of the labels, below the ruler) that are not background,
    read back from the canvas (what a screenshot of it shows, without an image library)."""
    return int(
        page.evaluate(
            """() => { const c = document.getElementById('tl'); const d = c.getContext('2d')
            .getImageData(0, 0, c.width, c.height).data; const dpr = window.devicePixelRatio;
            let n = 0; for (let y = Math.ceil(30 * dpr); y < c.height; y++)
            for (let x = Math.ceil(205 * dpr); x < c.width; x++) { const i = (y * c.width + x) * 4;
            if (d[i] < 235 || d[i+1] < 235 || d[i+2] < 235) n++; } return n; }"""
        )
    )


def test_canvas_draws_slices_and_tracks(viewer: Any) -> None:
    page, srv, _ = viewer
    tracks = srv.index.tracks_json()["tracks"]
    drawn = page.evaluate("window.__opscope.stats.lastDrawn")
    assert drawn > 100
    assert _coloured_pixels(page) > 20_000
    # Scrolled past every track, nothing but background is left to draw.
    page.evaluate("window.__opscope.S.scrollY = 1e7; window.__opscope.draw()")
    assert _coloured_pixels(page) == 0
    page.evaluate("window.__opscope.S.scrollY = 0; window.__opscope.draw()")
    assert page.evaluate("window.__opscope.S.tracks.length") == len(tracks)


def test_zoom_with_wheel_and_keys_and_pan_by_drag(viewer: Any) -> None:
    page, _, _ = viewer
    box = page.locator("#tl").bounding_box()
    cx, cy = box["x"] + 200 + (box["width"] - 200) / 2, box["y"] + 60
    t0, t1 = _view(page)
    page.mouse.move(cx, cy)
    page.mouse.wheel(0, -400)  # zoom in at the cursor
    page.wait_for_timeout(100)
    a0, a1 = _view(page)
    assert (a1 - a0) < 0.7 * (t1 - t0)
    # The time under the cursor stays under the cursor.
    mid_before = t0 + (t1 - t0) * 0.5
    mid_after = a0 + (a1 - a0) * 0.5
    assert abs(mid_after - mid_before) < 0.01 * (t1 - t0)
    page.keyboard.press("w")
    b0, b1 = _view(page)
    assert (b1 - b0) == pytest.approx(0.8 * (a1 - a0), rel=1e-6)
    page.keyboard.press("d")
    c0, c1 = _view(page)
    assert c0 - b0 == pytest.approx(0.2 * (b1 - b0), rel=1e-6)
    page.mouse.move(cx, cy)
    page.mouse.down()
    page.mouse.move(cx - 300, cy, steps=5)
    page.mouse.up()
    d0, _ = _view(page)
    plot_w = box["width"] - 200
    assert d0 - c0 == pytest.approx(300 * (c1 - c0) / plot_w, rel=0.02)
    # Shift+drag selects a range; Z zooms to it.
    page.keyboard.down("Shift")
    page.mouse.move(cx - 100, cy)
    page.mouse.down()
    page.mouse.move(cx + 100, cy, steps=4)
    page.mouse.up()
    page.keyboard.up("Shift")
    e0, e1 = _view(page)
    page.keyboard.press("z")
    f0, f1 = _view(page)
    assert (f1 - f0) == pytest.approx(200 * (e1 - e0) / plot_w, rel=0.02)
    page.keyboard.press("0")


def _enclosing_frames(raw: list[dict[str, Any]], op: dict[str, Any]) -> set[str]:
    return {
        e["name"] for e in raw
        if e.get("cat") == "python_function" and e["tid"] == op["tid"]
        and e["ts"] <= op["ts"] + 1e-3 and e["ts"] + e["dur"] >= op["ts"] + op["dur"] - 1e-3
    }  # fmt: skip


def test_search_click_call_stack_and_source_line(viewer: Any) -> None:
    page, srv, raw = viewer
    expected = sum(1 for e in raw if re.search(r"\baten::conv2d\b", e["name"]))
    page.keyboard.press("Control+f")
    page.check("#word")
    page.fill("#search", "aten::conv2d")
    page.wait_for_function(f"window.__opscope.S.matches.length === {expected}")
    assert page.locator("#matches li").count() == expected
    page.keyboard.press("Enter")
    page.wait_for_function("window.__opscope.S.selected && window.__opscope.S.cur === 0")
    first = page.evaluate("window.__opscope.S.matches[0]")
    # Click the slice itself on the canvas, where the page drew it.
    page.wait_for_timeout(200)
    page.evaluate("window.__opscope.S.selected = null")
    pos = page.evaluate(f"window.__opscope.screenPos({first['id']})")
    assert pos is not None
    page.mouse.click(pos["x"], pos["y"])
    page.wait_for_function(
        f"window.__opscope.S.selected && window.__opscope.S.selected.id === {first['id']}"
    )
    assert page.locator("#details .name").text_content() == "aten::conv2d"
    # The call stack and source line, checked against the raw trace's enclosing frames.
    op = next(
        e for e in raw
        if e["name"] == "aten::conv2d"
        and abs(round(e["ts"] * 1000) - (first["ts"] + srv.index.origin_ns)) <= 1
    )  # fmt: skip
    frames = _enclosing_frames(raw, op)
    src = page.locator("#details .src").text_content()
    m = re.match(r"^(.+):(\d+) \((.+)\)$", src)
    assert m is not None
    assert f"{m.group(1)}({m.group(2)}): {m.group(3)}" in frames
    assert "site-packages" not in m.group(1) and not m.group(1).startswith("torch/")
    stack = page.locator("#details ol.stack li").all_text_contents()
    assert len(stack) >= 3
    user = page.locator("#details ol.stack li.user").all_text_contents()
    assert f"{m.group(1)}:{m.group(2)} {m.group(3)}" in user


def test_follow_a_kernel_flow_to_its_launch(viewer: Any) -> None:
    page, srv, raw = viewer
    runtimes: dict[int, list[dict[str, Any]]] = {}
    for e in raw:
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {}):
            runtimes.setdefault(e["args"]["correlation"], []).append(e)
    kernel = next(
        e for e in raw
        if e.get("cat") == "kernel" and len(runtimes.get(e["args"]["correlation"], [])) == 1
        and "miopen" not in e["name"]
    )  # fmt: skip
    launch = runtimes[kernel["args"]["correlation"]][0]
    kid = next(
        m["id"] for m in srv.index.search(kernel["name"], case=True)["matches"]
        if abs(m["ts"] + srv.index.origin_ns - round(kernel["ts"] * 1000)) <= 1
    )  # fmt: skip
    page.evaluate("window.__opscope.jumpTo(window.__opscope.S.matches[0])")
    page.evaluate(f"window.__opscope.select({kid})")
    page.wait_for_function("document.querySelector('#flowlist li') !== null")
    text = page.locator("#flowlist li").first.text_content()
    assert text.startswith("ac2g: ")
    assert launch["name"] in text and kernel["name"] in text
    n_flows = page.evaluate("window.__opscope.S.flows.length")
    assert n_flows >= 1
    # Follow it: the link to the launch selects the launch.
    page.locator("#flowlist li a").first.click()
    page.wait_for_function(
        f"window.__opscope.S.selected && window.__opscope.S.selected.id !== {kid}"
    )
    assert page.locator("#details .name").text_content() == launch["name"]


@pytest.mark.torch
def test_recorded_cpu_run_shows_this_files_source_line(browser: Any, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import opscope
    from opscope.report.viewer import make_server

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    acts = [torch.profiler.ProfilerActivity.CPU]
    with_line = _lineno() + 1
    with torch.profiler.profile(activities=acts, with_stack=True, record_shapes=True) as prof:
        model(x).sum().backward()
    trace = tmp_path / "cpu.pt.trace.json"
    prof.export_chrome_trace(str(trace))
    raw = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    linear = sorted((e for e in raw if e["name"] == "aten::linear"), key=lambda e: e["ts"])
    assert len(linear) == 2
    # This file's frame enclosing the first linear, as the raw trace records it (torch names a
    # frame already running when profiling starts by the line it was at then: the `with`).
    mine = [
        e["name"] for e in raw
        if e.get("cat") == "python_function" and e["name"].startswith(Path(__file__).name + "(")
        and e["ts"] <= linear[0]["ts"] and e["ts"] + e["dur"] >= linear[0]["ts"] + linear[0]["dur"]
    ]  # fmt: skip
    assert len(mine) == 1
    expected_line = int(mine[0].split("(", 1)[1].split(")", 1)[0])
    assert expected_line == with_line
    srv = make_server(opscope.load(trace, cache=False), overlays=False)
    srv.start_background()
    ctx = browser.new_context(viewport={"width": 1300, "height": 800}, bypass_csp=True)
    try:
        page = ctx.new_page()
        page.goto(srv.url)
        page.wait_for_function("window.__opscope && window.__opscope.stats.firstPaintMs !== null")
        page.keyboard.press("Control+f")
        page.check("#word")
        page.check("#case")
        page.fill("#search", "aten::linear")
        page.wait_for_function("window.__opscope.S.matches.length === 2")
        page.keyboard.press("Enter")
        page.wait_for_function("window.__opscope.S.selected && window.__opscope.S.cur === 0")
        page.wait_for_selector("#details .src")
        src = page.locator("#details .src").text_content()
        assert src.startswith(f"{Path(__file__).name}:{expected_line} ("), src
        assert page.locator("#details dd", has_text="[[8,16],[32,16],[32]]").count() == 1
    finally:
        ctx.close()
        srv.shutdown()
        srv.server_close()


def _lineno() -> int:
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno
