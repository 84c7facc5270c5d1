"""The report's story on data (what is selected, with which figures), then its rendering at 80
and 120 columns with the top finding on the first screen."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from conftest import shared_trace
from opscope.report import fmt
from opscope.report.story import build_story, story_of

BERT = "gpu/tracelens_h100_bert_small.json.gz"


def _step(step: int, dur: float, compute: float, busy: float, host_bound: float) -> dict[str, Any]:
    return {
        "rank": 0, "step": step, "ts_us": 1e12 + step * 1e4, "dur_us": dur,
        "compute_us": compute, "communication_us": 0.0, "communication_not_overlapped_us": 0.0,
        "memcpy_us": busy - compute, "memset_us": 0.0, "device_busy_us": busy,
        "device_idle_us": dur - busy, "host_bound_us": host_bound, "data_loading_us": 50.0,
        "host_ops_us": 400.0,
    }  # fmt: skip


def _data(ranks: int = 1, findings: int = 7) -> dict[str, Any]:
    steps = [_step(1, 1000.0, 300.0, 320.0, 600.0), _step(2, 1200.0, 200.0, 210.0, 900.0)]
    return {
        "format": "kineto", "ranks": list(range(ranks)), "steps": 2, "source": "t.json",
        "span_us": 2500.0,
        "breakdown": {
            "steps": steps,
            "stats": [{"rank": None, "steps": 2, "mean_us": 1100.0, "std_us": 141.4,
                       "p10_us": 1020.0, "p90_us": 1180.0}],
        },
        "hotspots": {
            "ops": [{"name": f"op{i}", "calls": 1, "total_us": 100.0 - i, "self_us": 1.0,
                     "device_us": 0.0, "pct": 4.5} for i in range(12)],
            "kernels": [{"name": "void k<float>", "calls": 2, "total_us": 300.0, "mean_us": 150.0},
                        {"name": "k2", "calls": 1, "total_us": 100.0, "mean_us": 100.0}],
        },
        "sources": [{"file": "model.py", "line": 40, "function": "forward", "module": "M",
                     "fwd_us": 30.0, "bwd_us": 70.0, "total_us": 100.0, "kernels": 3}],
        "source_blocks": [{"file": "model.py", "basis": "device", "lines": [
            {"line": 40, "text": "    x = torch.matmul(x, w)", "fwd_us": 30.0, "bwd_us": 70.0}]}],
        "anomalies": [],
        "findings": [{"rule": f"r{i}", "severity": "low", "title": f"finding {i}",
                      "file": "model.py", "line": 40 + i, "module": None, "saving_us": 50.0 - i,
                      "saving_pct": 2.0, "fix": "# why\ny = F.linear(x, w)\n"}
                     for i in range(findings)],
        "critical_path": {"steps": [{
            "rank": 0, "step": 1, "path_us": 900.0, "host_us": 800.0, "device_us": 100.0,
            "ops": [{"name": "aten::mm", "share": 0.5}]}]},
        "cluster": {"ranks": [{"rank": r, "step_us": 1100.0} for r in range(ranks)]},
        "memory": {"peaks": [{"rank": 0, "device_type": 1, "device": 0,
                              "peak_allocated": 3 * 2**30, "reserved": 4 * 2**30}]},
    }  # fmt: skip


def test_headline_parts_partition_the_steps_with_idle_by_cause() -> None:
    h = build_story(_data()).headline
    total = 1000.0 + 1200.0
    assert h.total_us == total and h.steps == 2 and h.step_us == 1100.0
    got = {p.label: p.us for p in h.parts}
    assert got["compute (device kernels)"] == 500.0
    assert got["copies and fills, not hidden by compute"] == pytest.approx(30.0)
    assert got["device idle"] == (1000 - 320) + (1200 - 210)
    assert sum(p.pct for p in h.parts) == pytest.approx(100.0)
    (idle,) = [p for p in h.parts if p.label == "device idle"]
    causes = {d.label: d.us for d in idle.detail}
    # data loading is at most the loading time (50 per step); the rest of the idle is "other"
    assert causes == {"waiting for the host": 1500.0, "data loading": 100.0, "other": 70.0}
    assert sum(causes.values()) == idle.us
    assert h.basis == "of the summed step time, 2.2 ms = 2 steps"
    assert h.step_text() == "1.1 ms ± 141 µs over 2 steps"
    assert any(n.startswith("peak memory 3 GiB allocated on device 0 (4 GiB") for n in h.notes)


def test_headline_uses_the_breakdowns_own_idle_split() -> None:
    d = _data()
    for r in d["breakdown"]["steps"]:
        r["idle_host_wait_us"], r["idle_kernel_wait_us"] = 100.0, 20.0
    (idle,) = [p for p in build_story(d).headline.parts if p.label == "device idle"]
    assert {p.label: p.us for p in idle.detail} == {
        "waiting for the host to launch": 200.0,
        "launched, waiting on a dependency": 40.0,
    }


def test_selection_top_findings_tables_and_what_is_left_out() -> None:
    s = build_story(_data())
    assert [f.title for f in s.findings] == [f"finding {i}" for i in range(5)]
    assert s.more_findings == 2
    assert s.findings[0].where == "model.py:40" and s.findings[0].fix == "why; y = F.linear(x, w)"
    assert [t.id for t in s.tables] == ["ops", "kernels", "lines"]  # no anomaly, one rank
    ops = s.table("ops")
    assert ops is not None and len(ops.rows) == 8 and ops.more == 4
    lines = s.table("lines")
    assert lines is not None and lines.rows[0]["code"] == "x = torch.matmul(x, w)"
    # device time: a share of all the device time charged to lines (not of the host's step,
    # which a device running behind the host outlasts)
    dev_total = sum(r["total_us"] for r in _data()["sources"])
    assert lines.rows[0]["share"] == pytest.approx(100 * 100.0 / dev_total)
    assert not any("Ranks" in h for h in s.hidden)  # one rank: not even mentioned
    assert "Critical path per step" in s.hidden
    kernels = s.table("kernels")
    assert kernels is not None and kernels.rows[0]["name"] == "k<float>"
    assert "top 2 kernels" in kernels.basis  # without the total, the basis says so
    k = build_story(_data(), kernel_total_us=800.0).table("kernels")
    assert (
        k is not None and k.rows[0]["share"] == pytest.approx(300 / 8) and "all kernel" in k.basis
    )


def test_full_and_many_ranks_show_more_tables() -> None:
    d = _data(ranks=2)
    d["breakdown"]["steps"] += [{**r, "rank": 1} for r in d["breakdown"]["steps"]]
    h = build_story(d).headline
    assert h.basis == "of the summed step time, 4.4 ms = 2 steps × 2 ranks"
    assert h.step_text().endswith("over 2 steps × 2 ranks")
    many = build_story(_data(ranks=4))
    assert "cluster.ranks" in [t.id for t in many.tables]
    full = build_story(_data(), full=True)
    ids = [t.id for t in full.tables]
    assert {"critical_path", "memory.peaks", "breakdown.steps"} <= set(ids)
    ops = full.table("ops")
    assert ops is not None and len(ops.rows) == 12 and ops.more == 0
    cp = full.table("critical_path")
    assert cp is not None and cp.rows[0]["top"] == "aten::mm 50%"
    d = _data()
    d["anomalies"] = [{"name": "aten::mm", "calls": 9, "outlier_calls": 1, "median_us": 1.0}]
    assert build_story(d).table("anomalies") is not None


def _render(report: Any, width: int, full: bool = False) -> list[str]:
    from opscope.report.terminal import render_terminal

    con = Console(width=width, file=StringIO(), record=True)
    render_terminal(report, con, full=full)
    return con.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 120])
def test_terminal_fits_and_shows_the_top_finding_first(width: int) -> None:
    from opscope.report.build import build_report

    report = build_report(shared_trace(BERT))
    story = story_of(report)
    for full in (False, True):
        lines = _render(report, width, full)
        assert [ln for ln in lines if len(ln) > width] == []
    lines = _render(report, width)
    top = story.findings[0]
    at = next(i for i, ln in enumerate(lines) if top.title in ln)
    assert at < 24  # on the first screen of a 24-line terminal
    # the main tables' figures are whole: every operator's time and share is printed as is
    ops = story.table("ops")
    assert ops is not None
    for row in ops.rows:
        shown = next(ln for ln in lines if ln.startswith(str(row["name"])[:20]))
        assert fmt.us(row["total_us"]) in shown and shown.rstrip().endswith(fmt.pct(row["pct"]))


def test_terminal_from_path_names_the_trace() -> None:
    from opscope.report.build import build_report

    path = shared_trace(BERT)
    lines = _render(build_report(path), 80)
    assert lines[0].startswith(f"opscope report · {Path(path).name}")
    assert lines[1].startswith("Step time ")


def test_lines_are_summed_per_file_line_over_modules() -> None:
    d = _data()
    row = d["sources"][0]
    d["sources"] = [row, {**row, "module": "M2", "fwd_us": 5.0, "bwd_us": 1.0, "total_us": 6.0},
                    {**row, "line": 41, "total_us": 50.0}]  # fmt: skip
    lines = build_story(d).table("lines")
    assert lines is not None
    assert [r["where"] for r in lines.rows] == ["model.py:40", "model.py:41"]
    top = lines.rows[0]
    assert (top["fwd_us"], top["bwd_us"], top["total_us"]) == (35.0, 71.0, 106.0)
    assert top["code"] == "x = torch.matmul(x, w) (2 modules)"


def test_story_of_a_report_sums_every_attribution_row() -> None:
    """From a Report, the per-line sums use every attribution row, not only the JSON's top."""
    from helpers.synth import training
    from opscope.analysis import Analyzer

    rep = Analyzer(training(steps=3, layers=4).profile).generate_report(top=1)
    df = rep["attribution"].lines
    want: dict[tuple[Any, Any], float] = {}
    for r in df.iter_rows(named=True):
        key = (r["file"], r["line"] if r["file"] else None)
        want[key] = want.get(key, 0.0) + r["total_ns"] / 1000
    lines = story_of(rep).table("lines")
    assert lines is not None
    got = {(r["file"], r["line"] if r["file"] else None): r["total_us"] for r in lines.rows}
    assert got == pytest.approx(dict(sorted(want.items(), key=lambda kv: -kv[1])[:8]))
