"""A finding's link in the HTML report opens its slice in the viewer (headless Chromium).

The report and the viewer are built from the same shared trace; the link's event is checked
against the profile's own row (name, span), the selection against the viewer's state, and "in
view" by hit-testing the pixel at the slice's drawn position.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from conftest import shared_trace
from helpers.browser import chromium_browser

BERT = "gpu/tracelens_h100_bert_small.json.gz"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium_browser()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    import opscope
    from opscope.report.build import build_report
    from opscope.report.html import render_html
    from opscope.report.viewer import make_server

    path = shared_trace(BERT)
    prof = opscope.load(path)
    page = render_html(build_report(path))
    out = tmp_path_factory.mktemp("links") / "report.html"
    out.write_text(page, encoding="utf-8")
    # port None: the default port the report's links point at, when it is free
    srv = make_server(prof, None, overlays=False)
    srv.start_background()
    yield {"profile": prof, "report": out, "server": srv, "page": page}
    srv.shutdown()
    srv.server_close()


def _links(page: str) -> list[dict[str, Any]]:
    import json

    m = re.search(r'id="opscope-data">(.*?)</script>', page, re.S)
    assert m is not None
    return list(json.loads(m.group(1))["_viewer"]["links"])


def _wait_link(page: Any, fragment: str) -> None:
    page.wait_for_function(
        "(f) => window.__opscope && window.__opscope.stats.linkApplied === f", arg=fragment
    )


def _open_viewer(browser: Any, srv: Any, fragment: str) -> tuple[Any, Any, list[str]]:
    ctx = browser.new_context(viewport={"width": 1400, "height": 800}, bypass_csp=True)
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(srv.url + fragment)
    _wait_link(page, fragment)
    return ctx, page, errors


def _assert_selected_in_view(page: Any, srv: Any, prof: Any, event_id: int) -> None:
    row = prof.events.filter(prof.events["id"] == event_id).row(0, named=True)
    st = page.evaluate("window.__opscope.S.selected && window.__opscope.S.selected.summary")
    assert st is not None and st["id"] == event_id
    assert page.locator("#details .name").inner_text() == row["name"]
    # the slice's span (relative to the viewer's origin) lies inside the visible window
    ts = int(row["ts_ns"]) - srv.index.origin_ns
    assert st["ts"] == ts and st["dur"] == int(row["dur_ns"])
    t0, t1 = page.evaluate("[window.__opscope.S.t0, window.__opscope.S.t1]")
    assert t0 <= ts and ts + int(row["dur_ns"]) <= t1
    # ...and on screen: the pixel at its drawn position hit-tests to it
    page.wait_for_function(
        "(id) => window.__opscope.screenPos(id) !== null", arg=event_id, timeout=10_000
    )
    pos = page.evaluate("(id) => window.__opscope.screenPos(id)", event_id)
    box = page.locator("#tl").bounding_box()
    assert box["x"] <= pos["x"] <= box["x"] + box["width"]
    assert box["y"] <= pos["y"] <= box["y"] + box["height"]
    # (once the window's slices have arrived from the server)
    page.wait_for_function(
        "([x, y, id]) => { const h = window.__opscope.hit(x, y); return h && h.id === id; }",
        arg=[pos["x"] - box["x"], pos["y"] - box["y"], event_id],
        timeout=10_000,
    )


def test_report_link_selects_the_findings_slice(browser: Any, setup: dict[str, Any]) -> None:
    from opscope.report.viewer import DEFAULT_PORT

    srv, prof = setup["server"], setup["profile"]
    links = _links(setup["page"])
    # the first finding whose link names an event of its own (not the slowest-step fallback)
    i, link = next((i, x) for i, x in enumerate(links) if x and x["why"] != "the slowest step")
    ctx = browser.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True)
    rep = ctx.new_page()
    rep.goto(setup["report"].as_uri())
    rep.wait_for_selector("body[data-ready='1']")
    anchor = rep.locator(f"#finding-{i + 1} a.viewer")
    assert anchor.get_attribute("href") == link["url"]
    assert anchor.get_attribute("target") == "opscope-viewer"
    # the same link in the All findings table, on the finding's row
    cells = rep.locator("#findings table tbody tr").nth(i).locator("a.viewer")
    assert cells.get_attribute("href") == link["url"]
    hrefs = rep.locator("#findings a.viewer").evaluate_all("(a) => a.map((x) => x.href)")
    assert len(hrefs) == sum(1 for x in links if x)
    assert (
        "opscope view tracelens_h100_bert_small.json.gz"
        in rep.locator("#viewer-command").inner_text()
    )
    fragment = "#" + urlsplit(link["url"]).fragment
    if srv.port == DEFAULT_PORT:  # the real click, into the real viewer tab
        with ctx.expect_page() as new:
            anchor.click()
        page = new.value
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        _wait_link(page, fragment)
    else:  # the default port is busy here: same fragment, this test's port
        ctx.close()
        ctx, page, errors = _open_viewer(browser, srv, fragment)
    _assert_selected_in_view(page, srv, prof, link["event_id"])
    assert page.locator("#linknote").is_hidden()

    # another finding's link in the same tab: only the fragment changes, the viewer follows
    other = next(
        x
        for j, x in enumerate(links)
        if x and j != i and x["event_id"] != link["event_id"] and x["why"] != "the slowest step"
    )
    frag2 = "#" + urlsplit(other["url"]).fragment
    page.evaluate("(f) => { location.hash = f; }", frag2)
    _wait_link(page, frag2)
    _assert_selected_in_view(page, srv, prof, other["event_id"])
    assert errors == []
    ctx.close()


def test_step_link_and_wrong_links_say_so(browser: Any, setup: dict[str, Any]) -> None:
    srv, prof = setup["server"], setup["profile"]
    links = _links(setup["page"])
    step = next(x for x in links if x and x["why"] == "the slowest step")
    ctx, page, errors = _open_viewer(browser, srv, "#" + urlsplit(step["url"]).fragment)
    _assert_selected_in_view(page, srv, prof, step["event_id"])
    assert page.locator("#linknote").is_hidden()
    # a link made for another trace, and an id this trace does not have
    bad = f"#sel={10**9}&src=other.json"
    page.evaluate("(f) => { location.hash = f; }", bad)
    _wait_link(page, bad)
    note = page.locator("#linknote").inner_text()
    assert "made for other.json" in note and "tracelens_h100_bert_small.json.gz" in note
    assert f"Event {10**9} is not in this trace." in note
    assert errors == []
    ctx.close()


def test_the_link_keeps_exact_absolute_times(tmp_path: Path) -> None:
    # the fragment's times are the profile's own integers (no float round trip)
    import opscope
    from opscope.report.viewer.links import finding_targets

    prof = opscope.load(shared_trace(BERT))
    ev = prof.events.filter(prof.events["kind"] == "kernel").row(0, named=True)
    (t,) = finding_targets([type("F", (), {"evidence": {"event_ids": [ev["id"]]}})()], prof)
    assert t is not None
    pad = max(int(ev["dur_ns"]) // 2, 1000)
    a, b = int(ev["ts_ns"]) - pad, int(ev["ts_ns"]) + int(ev["dur_ns"]) + pad
    assert t.url() == f"http://127.0.0.1:8642/#sel={ev['id']}&t={a},{b}"
