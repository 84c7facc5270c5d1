"""The viewer takes what it shows from build_report, and the HTML report's findings link into it.

- the viewer's findings, anomalies and critical path are build_report's (same rules with every
  analysis in their context, same order), computed from the loaded profile without a second load;
- the link scheme ``#sel=<id>&t=<start_ns>,<end_ns>&src=<name>`` (hand arithmetic);
- each finding's link opens the longest of the events its evidence names (reference: a plain
  Python max over the events' rows), the slowest step for a finding without events.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import shared_trace
from helpers.synth import training
from opscope.report.viewer.links import DEFAULT_PORT, Target, finding_targets, view_command

BERT = "gpu/tracelens_h100_bert_small.json.gz"


def test_url_scheme_by_hand() -> None:
    t = Target(event_id=5, start_ns=1000, end_ns=3000, why="its event")
    # half the 2000 ns span of margin each side (at least 1 µs): 1000-1000 .. 3000+1000
    assert t.url("a b.json") == "http://127.0.0.1:8642/#sel=5&t=0,4000&src=a%20b.json"
    long = Target(event_id=7, start_ns=10_000, end_ns=50_000, why="x")
    assert long.url(None, port=9000) == "http://127.0.0.1:9000/#sel=7&t=-10000,70000"
    assert view_command("my trace.json") == "opscope view 'my trace.json'"
    assert view_command(None, port=1234) == "opscope view TRACE --port 1234"
    assert DEFAULT_PORT == 8642


def _finding(ids: list[int]) -> Any:
    return SimpleNamespace(evidence={"event_ids": ids})


def test_a_finding_opens_its_longest_event_else_the_slowest_step() -> None:
    prof = training(steps=3, layers=2, slow_at=(1, 1), slow_factor=20).profile
    rows = prof.events.select("id", "ts_ns", "dur_ns", "kind", "name").to_dicts()
    kernels = [r for r in rows if r["kind"] == "kernel"]
    steps = [r for r in rows if r["kind"] == "step"]
    assert len(kernels) >= 6 and len(steps) == 3
    some = [r["id"] for r in kernels[:6]]
    want = max((r for r in kernels[:6]), key=lambda r: (r["dur_ns"], -r["id"]))
    slow_step = max(steps, key=lambda r: (r["dur_ns"], -r["id"]))
    got = finding_targets(
        [_finding(some), _finding([some[0]]), _finding([]), _finding([10**9])], prof
    )
    a, one, whole, missing = got
    assert a is not None and a.event_id == want["id"] and a.why == "the longest of its 6 events"
    assert (a.start_ns, a.end_ns) == (want["ts_ns"], want["ts_ns"] + want["dur_ns"])
    assert one is not None and one.event_id == some[0] and one.why == "its event"
    assert (
        whole is not None and whole.event_id == slow_step["id"] and whole.why == "the slowest step"
    )
    assert missing is None  # an id the profile lacks is not linked to something else


def _page_data(page: str) -> dict[str, Any]:
    m = re.search(r'id="opscope-data">(.*?)</script>', page, re.S)
    assert m is not None
    return dict(json.loads(m.group(1)))


def test_html_findings_carry_links_to_their_worst_event() -> None:
    from opscope.report.build import build_report
    from opscope.report.html import render_html

    plan = training(steps=4, layers=3, slow_at=(2, 0), slow_factor=30)
    rep = build_report(plan.profile)
    found = list(rep.sections["findings"])
    assert found, "the planted slow kernel makes at least one finding"
    data = _page_data(render_html(rep))
    viewer = data["_viewer"]
    assert viewer["port"] == DEFAULT_PORT and viewer["command"].startswith("opscope view ")
    assert len(viewer["links"]) == len(found)
    dur = dict(plan.profile.events.select("id", "dur_ns").iter_rows())
    steps = [r for r in plan.profile.events.to_dicts() if r["kind"] == "step"]
    linked = 0
    for f, link in zip(found, viewer["links"], strict=True):
        ids = [int(i) for i in (f.evidence or {}).get("event_ids") or []]
        if ids:
            assert link is not None
            assert link["event_id"] == max(ids, key=lambda i: (dur[i] or 0, -i))
        else:
            slow = max(steps, key=lambda r: (r["dur_ns"], -r["id"]))
            assert link is not None and link["event_id"] == slow["id"]
        assert link["url"].startswith(f"http://127.0.0.1:{DEFAULT_PORT}/#sel={link['event_id']}&t=")
        linked += 1
    assert linked == len(found)


def test_the_comparison_section_of_the_page_is_text() -> None:
    from opscope.report.build import build_report
    from opscope.report.html import render_html

    a = training(steps=4, layers=2).profile
    b = training(steps=4, layers=2, slow_at=(1, 0), slow_factor=5).profile
    data = _page_data(render_html(build_report(b, before=a)))
    rows = data["comparison"]["summary"]
    assert rows[0]["metric"].startswith("step time")
    assert set(rows[0]) == {"metric", "before", "after", "change"}
    assert all(isinstance(r["before"], str) for r in rows)
    explain = data["comparison"]["explain"]
    assert [set(r) for r in explain] == [{"row", "delta_us"}] * len(explain)
    assert explain[-1]["row"].startswith("not in any row")


# The viewer on build_report ------------------------------------------------------------------


def test_viewer_overlays_are_build_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    import opscope
    import opscope.ingest
    from opscope.report.build import build_report
    from opscope.report.viewer import TimelineIndex, default_overlays

    prof = opscope.load(shared_trace(BERT))
    rep = build_report(prof)

    def no_second_load(*_: Any, **__: Any) -> None:
        raise AssertionError("the viewer loaded the trace again")

    monkeypatch.setattr(opscope.ingest, "load", no_second_load)
    idx = TimelineIndex(prof, overlays=default_overlays)
    got = idx.overlays()
    errors = [o for o in got["overlays"] if o.get("kind") == "error"]
    assert errors == []

    # findings: the report's, in its order (largest saving first), each with its event ids
    want: list[tuple[str, int | None]] = []
    for f in rep.sections["findings"]:
        ids = [int(i) for i in (f.evidence or {}).get("event_ids") or []][:20]
        want += [(f.rule, i) for i in ids] or [(f.rule, None)]
    shown = [(o["rule"], o["id"]) for o in got["overlays"] if o["kind"] == "finding"]
    assert sorted(shown, key=str) == sorted(want, key=str)
    rules = list(dict.fromkeys(f.rule for f in rep.sections["findings"]))
    legend = [la["title"] for la in got["layers"] if la["kind"] == "finding"]
    assert legend == rules  # grouped by rule, in the report's order
    assert len(rep.sections["findings"]) == 17  # the BERT trace's findings (report prints 17)

    # critical path: the report's nodes, merged per track into the bands
    path_ids = [int(i) for i in rep.sections["critical_path"].path.get_column("id").drop_nulls()]
    assert len(path_ids) > 100
    layer = next(la for la in got["layers"] if la["kind"] == "critical_path")
    assert layer["count"] == len(path_ids)
    per_track: dict[int, list[tuple[int, int]]] = {}
    for i in set(path_ids):
        ev = idx.event(i)
        assert ev is not None
        per_track.setdefault(int(ev["track"]), []).append((ev["ts"], ev["ts"] + ev["dur"]))
    for band in got["bands"]:
        spans = sorted(per_track.pop(band["track"]))
        merged: list[list[int]] = []
        for s, e in spans:
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        assert band["ts"] == [m[0] for m in merged] and band["end"] == [m[1] for m in merged]
    assert per_track == {}


def test_event_details_carry_the_folded_row() -> None:
    # a selection made from /api/event is drawn on the row the slice is drawn on: with the Python
    # stack folded that is fdepth, not depth (it was missing, and the outline sat on row 0)
    import opscope
    from opscope.report.viewer import TimelineIndex

    idx = TimelineIndex(opscope.load(shared_trace(BERT)))
    folded = idx._id_track.filter(idx._id_track["fdepth"] != idx._id_track["depth"])
    assert folded.height > 100
    for r in folded.head(50).iter_rows(named=True):
        ev = idx.event(int(r["id"]))
        assert ev is not None
        assert (ev["depth"], ev["fdepth"]) == (r["depth"], r["fdepth"])


def test_the_viewer_passes_the_device_to_build_report() -> None:
    from opscope.report.build import build_report
    from opscope.report.viewer import default_overlays

    prof = training(steps=4, layers=3, slow_at=(2, 0), slow_factor=30).profile
    rep = build_report(prof, device="MI300X")
    want = [(f.rule, f.severity) for f in rep.sections["findings"]]
    got = [
        (o["rule"], o["severity"])
        for o in default_overlays(prof, device="MI300X")
        if o["kind"] == "finding"
    ]
    assert list(dict.fromkeys(got)) == list(dict.fromkeys(want))
