"""The timeline page's behaviour in headless Chromium, on a small generated Kineto trace.

One test per viewer fix or feature; each reads what the page drew or shows and checks it against
figures computed here from the raw JSON.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from helpers.browser import chromium_browser

LABEL_W, RULER_H, ROW_H, GROUP_H = 200, 26, 18, 20  # as in viewer.js
T0 = 1_700_000_000_000.0  # µs, as Kineto writes it
N_HIT = 1470  # more matches than one page of search results (1000)
N_KERNELS = 20
N_LOAD = 30
N_FRAMES = 8
FLOW_RGB = (0xC2, 0x18, 0x5B)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _trace() -> list[dict[str, Any]]:
    """A main thread under 8 Python frames issuing 1470 ops (20 launching a kernel each), a
    loader thread, a second process, and names given by ``ph: M`` metadata."""
    ev: list[dict[str, Any]] = []

    def meta(name: str, pid: int, tid: int, value: str) -> None:
        ev.append({"ph": "M", "name": name, "pid": pid, "tid": tid, "args": {"name": value}})

    meta("thread_name", 100, 1, "main thread")
    meta("thread_name", 100, 2, "loader <worker>")
    meta("thread_name", 150, 5, "other process")
    meta("thread_name", 0, 7, "stream 7")
    span = N_HIT * 3.0 + 10
    for k in range(N_FRAMES):
        ev.append(
            {"ph": "X", "cat": "python_function", "name": f"model.py({10 + k}): f{k}", "pid": 100,
             "tid": 1, "ts": T0 + k * 0.1, "dur": span - 2 * k * 0.1}
        )  # fmt: skip
    for i in range(N_HIT):
        ts = T0 + 1 + i * 3.0
        ev.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::hit", "pid": 100, "tid": 1, "ts": ts,
             "dur": 2.0}
        )  # fmt: skip
        if i < N_KERNELS:
            corr = 1000 + i
            ev += [
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100,
                 "tid": 1, "ts": ts + 0.5, "dur": 1.0, "args": {"correlation": corr}},
                {"ph": "X", "cat": "kernel", "name": "void k<float>(int)", "pid": 0, "tid": 7,
                 "ts": ts + 5, "dur": 2.5, "args": {"correlation": corr, "stream": 7}},
                {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 100, "tid": 1,
                 "ts": ts + 0.5},
                {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": corr, "pid": 0, "tid": 7,
                 "ts": ts + 5, "bp": "e"},
            ]  # fmt: skip
    for i in range(N_LOAD):
        ev.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::load", "pid": 100, "tid": 2,
             "ts": T0 + i * 100.0, "dur": 40.0 + i}
        )  # fmt: skip
    for i in range(3):
        ev.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::elsewhere", "pid": 150, "tid": 5,
             "ts": T0 + i * 50.0, "dur": 10.0}
        )  # fmt: skip
    return ev


def _ns(ts_us: float) -> int:
    return round((ts_us - T0) * 1000)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, list[dict[str, Any]]]]:
    import opscope
    from opscope.report.viewer import TimelineIndex, ViewerServer

    raw = _trace()
    path = tmp_path_factory.mktemp("viewer") / "gen.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": raw}))
    prof = opscope.load(path, cache=False)
    ev = prof.events

    def ids(name: str) -> list[int]:
        part = ev.filter(ev.get_column("name") == name).sort("ts_ns")
        return [int(i) for i in part.get_column("id").to_list()]

    def overlays(_: Any) -> list[dict[str, Any]]:
        load0 = ids("aten::load")[0]
        return [
            {"kind": "finding", "rule": "rule-b", "id": ids("aten::load")[5], "label": "b1"},
            {"kind": "anomaly", "id": ids("aten::load")[7], "label": "slow load"},
            {"kind": "finding", "rule": "rule-a", "id": load0, "label": "a1 <b>"},
            {"kind": "finding", "rule": "rule-b", "id": ids("aten::load")[6], "label": "b2"},
        ] + [{"kind": "critical_path", "id": i} for i in ids("aten::hit") + ids(K_NAME)]

    srv = ViewerServer(TimelineIndex(prof, overlays=overlays))
    srv.start_background()
    yield srv, raw
    srv.shutdown()
    srv.server_close()


K_NAME = "void k<float>(int)"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium_browser()


def _open(browser: Any, srv: Any, height: int = 800) -> tuple[Any, Any, list[str]]:
    # bypass_csp: Playwright's wait_for_function evaluates strings, which the page's CSP forbids.
    ctx = browser.new_context(viewport={"width": 1400, "height": height}, bypass_csp=True)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(srv.url)
    page.wait_for_function("window.__opscope && window.__opscope.stats.firstPaintMs !== null")
    page.wait_for_function("window.__opscope.S.layers.length > 0")
    return ctx, page, errors


@pytest.fixture
def page(browser: Any, served: Any) -> Iterator[Any]:
    ctx, pg, errors = _open(browser, served[0])
    yield pg
    assert errors == []
    ctx.close()


def _js(page: Any, expr: str) -> Any:
    return page.evaluate(expr)


def _track(page: Any, name: str) -> int:
    return int(_js(page, f"window.__opscope.S.tracks.find(t => t.name === {json.dumps(name)}).id"))


def _row_top(page: Any, track: int) -> float:
    return float(_js(page, f"window.__opscope.rowTop(window.__opscope.S.byTrack.get({track}))"))


def _canvas_xy(page: Any, x: float, y: float) -> tuple[float, float]:
    box = page.locator("#tl").bounding_box()
    return box["x"] + x, box["y"] + y


def _set_view(page: Any, t0: float, t1: float) -> None:
    _js(page, f"window.__opscope.setView({t0}, {t1})")
    _settle(page)


def _settle(page: Any) -> None:
    """Waits until the tracks on screen hold data for the current view, then for a frame."""
    page.wait_for_timeout(150)
    page.wait_for_function(
        """() => { const o = window.__opscope, S = o.S; return [...S.byTrack.values()].every(L =>
        { const c = S.data.get(L.t.id); return c && c.start <= Math.max(0, S.t0)
        && c.end >= S.t1; }); }"""
    )
    page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


# 1. Fixes ----------------------------------------------------------------------------------------


def test_tooltip_follows_the_view_after_zoom_and_jump(page: Any, served: Any) -> None:
    srv, raw = served
    loads = sorted((e for e in raw if e.get("name") == "aten::load"), key=lambda e: e["ts"])
    plot_mid = LABEL_W + (_js(page, "window.__opscope.S.width") - LABEL_W) / 2
    half = 50_000
    # Centre the view on load #10, and hover the centre of the loader track's row.
    c10 = _ns(loads[10]["ts"]) + 25_000
    _set_view(page, c10 - half, c10 + half)
    y = _row_top(page, _track(page, "loader <worker>")) + 2 + ROW_H / 2
    page.mouse.move(*_canvas_xy(page, plot_mid, y))
    page.wait_for_function("!document.getElementById('tip').hidden")
    assert page.locator("#tip").text_content() == f"aten::load\n{loads[10]['dur']:.2f} µs"
    # Zoom so that the cursor is over the gap after load #10: no tooltip.
    gap = _ns(loads[10]["ts"] + loads[10]["dur"]) + 20_000
    assert gap < _ns(loads[11]["ts"])
    _set_view(page, gap - half, gap + half)
    assert page.locator("#tip").is_hidden()
    # Back on load #10, then jump to the first kernel: the cursor's time is now inside load #0.
    _set_view(page, c10 - half, c10 + half)
    page.mouse.move(*_canvas_xy(page, plot_mid + 1, y))
    page.wait_for_function("!document.getElementById('tip').hidden")
    kernel = srv.index.search(K_NAME, case=True)["matches"][0]
    page.evaluate(f"window.__opscope.jumpTo({json.dumps(kernel)})")
    _settle(page)
    t0, t1, width = _js(
        page, "[window.__opscope.S.t0, window.__opscope.S.t1, window.__opscope.S.width]"
    )
    t_cursor = t0 + (plot_mid + 1 - LABEL_W) * (t1 - t0) / (width - LABEL_W)
    under = [e for e in loads if _ns(e["ts"]) <= t_cursor <= _ns(e["ts"] + e["dur"])]
    assert [e["dur"] for e in under] == [loads[0]["dur"]]
    assert page.locator("#tip").text_content() == f"aten::load\n{loads[0]['dur']:.2f} µs"


@pytest.mark.parametrize(
    ("start", "span"), [(1_234_567, 500), (1_234_567, 60), (1_234_567, 2_000), (999_800, 400)]
)
def test_ruler_labels_are_distinct_below_a_microsecond(page: Any, start: int, span: int) -> None:
    _set_view(page, start, start + span)
    ticks = _js(page, "window.__opscope.stats.ticks")
    assert len(ticks) >= 3
    assert len(set(ticks)) == len(ticks), ticks
    assert len({t.split()[1] for t in ticks}) == 1, ticks  # one unit along the ruler
    # Each label reads back as its tick time, to within the label's last digit.
    t0, t1 = _js(page, "[window.__opscope.S.t0, window.__opscope.S.t1]")
    units = {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}
    values = [float(t.split()[0]) * units[t.split()[1]] for t in ticks]
    assert all(t0 - 1 <= v <= t1 + 1 for v in values)
    steps = {round(b - a, 6) for a, b in itertools.pairwise(values)}
    assert len(steps) == 1 and next(iter(steps)) > 0


def test_reset_also_scrolls_back_to_the_top(browser: Any, served: Any) -> None:
    ctx, page, errors = _open(browser, served[0], height=260)
    try:
        page.mouse.move(*_canvas_xy(page, 600, 150))
        page.keyboard.down("Shift")
        page.mouse.wheel(0, 200)
        page.keyboard.up("Shift")
        page.wait_for_function("window.__opscope.S.scrollY > 0")
        page.click("#reset")
        assert _js(page, "window.__opscope.S.scrollY") == 0
        page.mouse.move(*_canvas_xy(page, 600, 150))
        page.keyboard.down("Shift")
        page.mouse.wheel(0, 200)
        page.keyboard.up("Shift")
        page.wait_for_function("window.__opscope.S.scrollY > 0")
        page.keyboard.press("0")
        assert _js(page, "window.__opscope.S.scrollY") == 0
        assert errors == []
    finally:
        ctx.close()


@pytest.mark.parametrize("box", ["#showflows", "#showov", "#case", "#word"])
def test_keys_still_work_after_clicking_a_checkbox(page: Any, box: str) -> None:
    page.click(box)
    t0, t1 = _js(page, "[window.__opscope.S.t0, window.__opscope.S.t1]")
    page.keyboard.press("w")
    a0, a1 = _js(page, "[window.__opscope.S.t0, window.__opscope.S.t1]")
    assert (a1 - a0) == pytest.approx(0.8 * (t1 - t0), rel=1e-6)
    page.keyboard.press("d")
    b0, _ = _js(page, "[window.__opscope.S.t0, window.__opscope.S.t1]")
    assert b0 - a0 == pytest.approx(0.2 * (a1 - a0), rel=1e-6)


def test_search_count_is_the_true_total_and_steps_past_the_first_page(
    page: Any, served: Any
) -> None:
    _, raw = served
    hits = sorted(e["ts"] for e in raw if e.get("name") == "aten::hit")
    assert len(hits) == N_HIT > 1000
    page.keyboard.press("Control+f")
    page.fill("#search", "aten::hit")
    page.wait_for_function(f"document.getElementById('count').textContent === '0 / {N_HIT}'")
    page.keyboard.press("Enter")
    page.wait_for_function(f"document.getElementById('count').textContent === '1 / {N_HIT}'")
    page.wait_for_function("window.__opscope.S.selected !== null")
    assert _js(page, "window.__opscope.S.selected.ev.ts") == _ns(hits[0])
    # Backwards from the first: the last match, on the second page.
    page.keyboard.press("Shift+Enter")
    page.wait_for_function(f"document.getElementById('count').textContent === '{N_HIT} / {N_HIT}'")
    page.wait_for_function(f"window.__opscope.S.selected.ev.ts === {_ns(hits[-1])}")
    assert page.locator("#mcount").text_content() == f"(1001–{N_HIT} of {N_HIT})"
    assert page.locator("#matches li").count() == N_HIT - 1000
    assert page.locator("#details .name").text_content() == "aten::hit"


# 2. Names, groups, sticky labels -----------------------------------------------------------------


def test_track_names_from_the_trace_groups_and_stream_order(page: Any) -> None:
    groups = _js(page, "window.__opscope.S.groups.map(g => [g.name, g.tracks.map(t => t.name)])")
    # Device groups sort after every process by id; the stream goes under process 100, whose
    # main thread launches its kernels.
    assert groups == [
        ["rank 0 · process 100", ["main thread", "loader <worker>"]],
        ["rank 0 · device 0", ["stream 7"]],
        ["rank 0 · process 150", ["other process"]],
    ]
    labels = [x["text"] for x in _js(page, "window.__opscope.stats.labels")]
    assert labels == ["main thread", "loader <worker>", "stream 7", "other process"]
    lines = _js(page, "window.__opscope.S.tracks.map(t => [t.name, t.launched_by])")
    main = _track(page, "main thread")
    assert [n for n, by in lines if by == main] == ["stream 7"]
    # The name with < and > is text, not markup, wherever it shows.
    assert _js(page, "document.querySelector('worker')") is None
    # Collapse process 100: its two tracks leave, its header stays; then open it again.
    hdr = _js(
        page,
        "(() => { const L = window.__opscope.S.layout.find(L => L.kind === 'group' && "
        "L.g.name === 'rank 0 · process 100'); return window.__opscope.rowTop(L); })()",
    )
    page.mouse.click(*_canvas_xy(page, 600, hdr + GROUP_H / 2))
    page.wait_for_timeout(50)
    page.evaluate("window.__opscope.draw()")
    assert [x["text"] for x in _js(page, "window.__opscope.stats.labels")] == [
        "stream 7",
        "other process",
    ]
    page.mouse.click(*_canvas_xy(page, 20, hdr + GROUP_H / 2))
    page.wait_for_timeout(50)
    page.evaluate("window.__opscope.draw()")
    assert len(_js(page, "window.__opscope.stats.labels")) == 4


def test_track_name_stays_in_view_while_scrolling(browser: Any, served: Any) -> None:
    ctx, page, errors = _open(browser, served[0], height=300)
    try:
        main = _track(page, "main thread")
        top0 = _row_top(page, main)
        # Scroll so the main thread's top is 60 px above the ruler; its rows still show.
        page.evaluate(f"window.__opscope.S.scrollY = {top0 - RULER_H + 60}")
        page.evaluate("window.__opscope.draw()")
        lab = next(x for x in _js(page, "window.__opscope.stats.labels") if x["track"] == main)
        assert lab["top"] < RULER_H
        assert lab["y"] >= RULER_H + GROUP_H  # below the ruler and the pinned group header
        # Panning in time leaves the label column where it is.
        page.keyboard.press("d")
        page.evaluate("window.__opscope.draw()")
        lab2 = next(x for x in _js(page, "window.__opscope.stats.labels") if x["track"] == main)
        assert lab2["y"] == lab["y"]
        assert errors == []
    finally:
        ctx.close()


# 3. Folded Python stacks; drawing clipped to the plot --------------------------------------------


def _loaded_rows(page: Any, track: int) -> list[tuple[int, str]]:
    # the track's rows arrive by their own fetch after the page is drawn: wait for them (a
    # fresh-clone CI run once read them before they came)
    page.wait_for_function(f"(s => !!(s && s.d))(window.__opscope.S.data.get({track}))")
    return [
        (int(d), str(n))
        for d, n in _js(
            page,
            f"(() => {{ const d = window.__opscope.S.data.get({track}).d; "
            "return d.depth.map((x, i) => [x, d.names[d.name[i]]]); })()",
        )
    ]


def test_python_stacks_fold_to_three_frames_and_unfold(page: Any) -> None:
    main = _track(page, "main thread")
    # 8 frames, then the ops, then their launches: depths 0..9; folded, 3 frames stay.
    t = _js(page, f"window.__opscope.S.tracks[{main}]")
    assert (t["max_depth"], t["folded_depth"]) == (N_FRAMES + 1, 3 + 1)
    rows = _loaded_rows(page, main)
    frames = {n for _, n in rows if n.startswith("model.py")}
    assert frames == {f"model.py({10 + k}): f{k}" for k in range(3)}
    assert max(d for d, _ in rows) <= 4
    height = _js(page, f"window.__opscope.S.byTrack.get({main}).h")
    assert height == 5 * ROW_H + 6
    # A click on the track's name shows the whole stack.
    y = _row_top(page, main) + 10
    page.mouse.click(*_canvas_xy(page, 40, y))
    page.wait_for_function(f"window.__opscope.S.data.get({main}).folded === false")
    rows = _loaded_rows(page, main)
    assert {n for _, n in rows if n.startswith("model.py")} == {
        f"model.py({10 + k}): f{k}" for k in range(N_FRAMES)
    }
    assert _js(page, f"window.__opscope.S.byTrack.get({main}).h") == (N_FRAMES + 2) * ROW_H + 6


def _label_column_pixels(page: Any) -> dict[str, int]:
    return dict(
        page.evaluate(
            """() => { const c = document.getElementById('tl'); const dpr = devicePixelRatio;
            const w = Math.floor(198 * dpr); const d = c.getContext('2d')
            .getImageData(0, 0, w, c.height).data; let black = 0, flow = 0, red = 0;
            for (let i = 0; i < d.length; i += 4) { const r = d[i], g = d[i+1], b = d[i+2];
            if (r < 15 && g < 15 && b < 15) black++;
            if (Math.abs(r - 0xc2) < 30 && Math.abs(g - 0x18) < 30 && Math.abs(b - 0x5b) < 30)
            flow++; if (Math.abs(r - 0xd7) < 30 && g < 60 && b < 60) red++; }
            return {black, flow, red}; }"""
        )
    )


def test_outlines_selection_and_flows_stay_inside_the_plot(page: Any, served: Any) -> None:
    srv, _ = served
    # Select the first kernel; its arrow comes from a launch we scroll off to the left.
    kernel = srv.index.search(K_NAME, case=True)["matches"][0]
    page.evaluate(f"window.__opscope.select({kernel['id']})")
    page.wait_for_function("window.__opscope.S.flows.length > 0")
    k0 = kernel["ts"]
    _set_view(page, k0 - 1_000, k0 + 20_000)
    assert _js(page, "window.__opscope.S.flows[0].src.ts") < k0 - 1_000
    assert _js(page, "window.__opscope.stats.lastDrawn") > 0
    assert _label_column_pixels(page)["flow"] == 0
    # A selected slice and an outlined one (load #0, rule-a) starting left of the view.
    load0 = srv.index.search("aten::load", case=True)["matches"][0]
    page.evaluate(f"window.__opscope.select({load0['id']})")
    page.wait_for_function(f"window.__opscope.S.selected.id === {load0['id']}")
    _set_view(page, load0["ts"] + 10_000, load0["ts"] + 60_000)
    assert _js(page, "window.__opscope.stats.outlines") >= 1
    px = _label_column_pixels(page)
    assert px["black"] == 0 and px["red"] == 0


# 4. Overlay layers, critical-path band, flows' other end -----------------------------------------


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def test_overlay_layers_legend_findings_first_and_critical_band(page: Any, served: Any) -> None:
    _, raw = served
    keys = _js(page, "[...document.querySelectorAll('#layers .layer')].map(d => d.dataset.key)")
    # Findings first, one layer per rule (rules in the order given), then anomalies.
    assert keys == ["finding:rule-b", "finding:rule-a", "anomaly", "critical_path"]
    texts = page.locator("#layers .layer > label").all_text_contents()
    assert [t.strip() for t in texts] == [
        "finding: rule-b (2)",
        "finding: rule-a (1)",
        "anomaly (1)",
        f"critical path ({N_HIT + N_KERNELS})",
    ]
    # The critical path comes as merged intervals per track, not one item per node.
    bands = _js(page, "window.__opscope.S.bands")
    got = sorted(len(b["ts"]) for b in bands)
    hits = [(_ns(e["ts"]), _ns(e["ts"] + e["dur"])) for e in raw if e.get("name") == "aten::hit"]
    kern = [(_ns(e["ts"]), _ns(e["ts"] + e["dur"])) for e in raw if e.get("name") == K_NAME]
    assert got == sorted([len(_merged(hits)), len(_merged(kern))])
    assert _js(page, "window.__opscope.S.overlays.length") == 4
    # Zoomed out, 1,490 nodes draw as a few band pieces, and only the 4 items are outlined.
    page.evaluate("window.__opscope.draw()")
    assert 0 < _js(page, "window.__opscope.stats.bandRects") < 200
    assert _js(page, "window.__opscope.stats.outlines") == 4
    # Each layer switches off on its own; keys keep working after the click.
    page.locator("#layers .layer[data-key='finding:rule-b'] input").click()
    page.evaluate("window.__opscope.draw()")
    assert _js(page, "window.__opscope.stats.outlines") == 2
    page.locator("#layers .layer[data-key='critical_path'] input").click()
    page.evaluate("window.__opscope.draw()")
    assert _js(page, "window.__opscope.stats.bandRects") == 0
    before = _js(page, "window.__opscope.S.t1 - window.__opscope.S.t0")
    page.keyboard.press("w")
    assert _js(page, "window.__opscope.S.t1 - window.__opscope.S.t0") == pytest.approx(0.8 * before)
    # A label with markup in it is text.
    page.locator("#layers .layer[data-key='finding:rule-a'] summary").click()
    assert page.locator("#layers a.jump", has_text="a1 <b>").count() == 1


def test_jump_to_the_other_end_of_a_flow(page: Any, served: Any) -> None:
    srv, raw = served
    kernel = srv.index.search(K_NAME, case=True)["matches"][0]
    launch_ts = min(e["ts"] for e in raw if e.get("name") == "cudaLaunchKernel")
    page.evaluate(f"window.__opscope.jumpTo({json.dumps(kernel)})")
    page.wait_for_function("window.__opscope.S.flows.length > 0")
    page.keyboard.press("[")
    page.wait_for_function(f"window.__opscope.S.selected.id !== {kernel['id']}")
    assert page.locator("#details .name").text_content() == "cudaLaunchKernel"
    assert _js(page, "window.__opscope.S.selected.ev.ts") == _ns(launch_ts)
    page.wait_for_function("window.__opscope.S.flows.length > 0")
    page.keyboard.press("]")
    page.wait_for_function(f"window.__opscope.S.selected.id === {kernel['id']}")
    assert page.locator("#details .name").text_content() == K_NAME
    # The flow list's button does the same.
    page.wait_for_selector("#flowlist button.other")
    page.locator("#flowlist button.other").first.click()
    page.wait_for_function(f"window.__opscope.S.selected.id !== {kernel['id']}")
    assert page.locator("#details .name").text_content() == "cudaLaunchKernel"


# 5. Range summary -------------------------------------------------------------------------------


def test_shift_drag_summarises_the_range(page: Any, served: Any) -> None:
    _, raw = served
    _set_view(page, 0, 40_000)
    width = _js(page, "window.__opscope.S.width")
    layout = _js(page, "window.__opscope.S.layout.map(L => [L.kind, L.y, L.h])")
    x_of = lambda t: LABEL_W + t * (width - LABEL_W) / 40_000  # noqa: E731
    y_top = RULER_H + GROUP_H + 2
    y_bottom = RULER_H + layout[-1][1] + layout[-1][2] - 2
    page.keyboard.down("Shift")
    page.mouse.move(*_canvas_xy(page, x_of(2_000), y_top))
    page.mouse.down()
    page.mouse.move(*_canvas_xy(page, x_of(30_000), y_bottom), steps=5)
    page.mouse.up()
    page.keyboard.up("Shift")
    page.wait_for_function("window.__opscope.S.range && window.__opscope.S.range.result")
    a, b = _js(page, "[window.__opscope.S.range.start, window.__opscope.S.range.end]")
    assert a == pytest.approx(2_000, abs=50) and b == pytest.approx(30_000, abs=50)
    kinds = {"cpu_op": "cpu_op", "python_function": "python_function",
             "cuda_runtime": "runtime", "kernel": "kernel"}  # fmt: skip
    inside = [
        (kinds[e["cat"]], e["name"],
         min(b, _ns(e["ts"] + e["dur"])) - max(a, _ns(e["ts"])))
        for e in raw if e.get("ph") == "X"
        and _ns(e["ts"]) < b and _ns(e["ts"] + e["dur"]) > a
    ]  # fmt: skip
    n_ops = sum(1 for k, _, _ in inside if k == "cpu_op")
    n_kernels = sum(1 for k, _, _ in inside if k == "kernel")
    assert n_kernels >= 3 and n_ops >= 8
    figs = page.locator("#range .figs").text_content()
    assert f": {len(inside)} slices, {n_ops} ops, {n_kernels} kernels (" in figs
    per_kind: dict[str, list[int]] = {}
    for k, _, d in inside:
        per_kind.setdefault(k, [0, 0])
        per_kind[k][0] += 1
        per_kind[k][1] += d
    r = _js(page, "window.__opscope.S.range.result")
    assert {x["kind"]: [x["count"], x["total_ns"]] for x in r["by_kind"]} == per_kind
    rows = page.locator("#range table").first.locator("tr").all_text_contents()
    assert len(rows) == 1 + len(per_kind)
    per_name: dict[str, list[int]] = {}
    for _, n, d in inside:
        per_name.setdefault(n, [0, 0])
        per_name[n][0] += 1
        per_name[n][1] += d
    # The 10 names with the most time in the range (ties: more slices, then by name).
    top = sorted(per_name.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0]))[:10]
    assert len(per_name) > 10
    assert [(x["name"], x["count"], x["total_ns"]) for x in r["top"]] == [
        (n, c, t) for n, (c, t) in top
    ]
    shown = page.locator("#range table").nth(1).locator("tr").all_text_contents()
    assert len(shown) == 11 and shown[1].startswith(top[0][0])


def test_call_stack_in_details_is_folded_with_a_show_all_button(page: Any, served: Any) -> None:
    srv, _ = served
    hit = srv.index.search("aten::hit", case=True)["matches"][0]
    page.evaluate(f"window.__opscope.select({hit['id']})")
    page.wait_for_selector("#details ol.stack")
    frames = page.locator("#details ol.stack li")
    # The op sits under all 8 frames, innermost first.
    assert frames.count() == N_FRAMES
    assert frames.first.text_content() == f"model.py:{10 + N_FRAMES - 1} f{N_FRAMES - 1}"
    shown = [frames.nth(i).is_visible() for i in range(N_FRAMES)]
    assert shown[:3] == [True] * 3 and sum(shown) <= 4
    page.click("#details button.unfold")
    assert all(frames.nth(i).is_visible() for i in range(N_FRAMES))
    assert page.locator("#details button.unfold").count() == 0


def test_jumping_into_a_folded_group_or_stack_opens_it(page: Any, served: Any) -> None:
    srv, _ = served
    main = _track(page, "main thread")
    hdr = _js(
        page,
        "(() => { const L = window.__opscope.S.layout.find(L => L.kind === 'group' && "
        "L.g.name === 'rank 0 · process 100'); return window.__opscope.rowTop(L); })()",
    )
    page.mouse.click(*_canvas_xy(page, 600, hdr + GROUP_H / 2))
    page.wait_for_function(f"!window.__opscope.S.byTrack.has({main})")
    # The innermost frame is hidden while folded; jumping to it opens group and stack.
    deep = srv.index.search(f"f{N_FRAMES - 1}", case=True)["matches"][0]
    assert deep["fdepth"] == -1 and deep["depth"] == N_FRAMES - 1
    page.evaluate(f"window.__opscope.jumpTo({json.dumps(deep)})")
    page.wait_for_function(
        f"window.__opscope.S.selected && window.__opscope.S.selected.id === {deep['id']}"
    )
    assert _js(page, f"window.__opscope.S.byTrack.has({main})")
    assert _js(page, f"window.__opscope.S.unfolded.has({main})")
    _settle(page)
    pos = page.evaluate(f"window.__opscope.screenPos({deep['id']})")
    assert pos is not None
    page.evaluate("window.__opscope.S.selected = null")
    page.mouse.click(pos["x"], pos["y"])
    page.wait_for_function(
        f"window.__opscope.S.selected && window.__opscope.S.selected.id === {deep['id']}"
    )
    assert (
        page.locator("#details .name").text_content()
        == f"model.py({10 + N_FRAMES - 1}): f{N_FRAMES - 1}"
    )
