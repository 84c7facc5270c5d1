"""Report API and `opscope report`: keys, figures equal to the analyses', renderers, errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import shared_trace
from helpers.synth import training
from opscope.analysis import Analyzer, Report
from opscope.cli.app import main
from opscope.report.base import formats, render

TRACE = "gpu/tracelens_h100_bert_small.json.gz"


def test_report_from_profile_has_every_section_and_json_keys() -> None:
    plan = training(steps=3, layers=2, slow_at=(1, 0), slow_factor=20)
    rep = Analyzer(plan.profile).generate_report(top=5)
    assert isinstance(rep, Report)
    for name in ("hotspots", "attribution", "anomalies", "breakdown", "memory"):
        assert name in rep.sections
    js = rep.to_json()
    for k in (
        "format",
        "ranks",
        "events",
        "ops",
        "kernels",
        "steps",
        "fwd_bwd_links",
        "op_kernel_links",
        "span_us",
        "hotspots",
        "sources",
        "anomalies",
        "breakdown",
        "memory",
    ):
        assert k in js, k
    assert js["events"] == plan.profile.events.height
    assert {"file", "line", "function", "module", "fwd_us", "bwd_us", "total_us"} <= set(
        js["sources"][0]
    )
    # the planted slow kernel (step 1) is in the anomalies list with its figures
    (a,) = [x for x in js["anomalies"] if x.get("kind") != "efficiency"]
    assert a["name"] == "gemm_fwd" and a["steps"] == [1] and a["outlier_calls"] == 1
    assert a["outlier_median_us"] == plan.slow[0][1]
    assert {
        "name",
        "input_shapes",
        "calls",
        "outlier_calls",
        "median_us",
        "outlier_median_us",
        "steps",
    } <= set(a)
    assert "hotspots.ops" in rep.tables()
    md = render(rep, "markdown")
    assert "## Hotspots" in md and "gemm_fwd" in md
    assert set(formats()) >= {"terminal", "json", "markdown"}
    text = render(rep, "terminal")
    assert "Top operators" in text and "model.py" in text
    assert json.loads(render(rep, "json"))["events"] == js["events"]


def test_cli_report_json_on_real_trace(capsys: pytest.CaptureFixture[str]) -> None:
    path = shared_trace(TRACE)
    assert main(["report", str(path), "--json", "--top", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    with gzip.open(path, "rt") as f:
        raw = json.load(f)["traceEvents"]
    kernels = [
        e
        for e in raw
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    assert out["kernels"] == len(kernels)
    assert len(out["hotspots"]["kernels"]) == 3
    top = max(
        {e["name"] for e in kernels},
        key=lambda n: sum(e["dur"] for e in kernels if e["name"] == n),
    )
    assert out["hotspots"]["kernels"][0]["name"] == top
    assert out["hotspots"]["kernels"][0]["total_us"] == pytest.approx(
        sum(e["dur"] for e in kernels if e["name"] == top)
    )
    assert "roofline" in out and isinstance(out["roofline"], list)


def test_cli_report_markdown_and_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    path = shared_trace(TRACE)
    assert main(["report", str(path), "--md", "--top", "2"]) == 0
    assert capsys.readouterr().out.startswith("# opscope report")
    assert main(["report", str(path), "--top", "2"]) == 0
    assert "Top kernels" in capsys.readouterr().out


def test_cli_report_full_shows_every_table(capsys: pytest.CaptureFixture[str]) -> None:
    path = shared_trace(TRACE)
    assert main(["report", str(path)]) == 0
    short = capsys.readouterr().out
    assert "Not shown (--full shows every table)" in short and "Roofline" in short
    assert "\nRoofline" not in short and "Top findings" in short
    assert main(["report", str(path), "--full"]) == 0
    full = capsys.readouterr().out
    assert "Not shown" not in full
    for title in ("Roofline", "Memory: peaks", "Critical path per step", "Top findings"):
        assert f"\n{title}" in full, title


def test_cli_report_bad_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2},')
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.json" in err and "\n" not in err and "Traceback" not in err
    assert main(["report", str(bad), "--salvage", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["events"] == 1


def test_report_json_starts_with_the_doctor_warnings(tmp_path: Path) -> None:
    """A trace recorded without stacks or memory says so at the top of the report."""
    import contextlib
    import io
    import json

    from opscope.cli.app import main

    trace = tmp_path / "t.json"
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"External id": 2}},
    ]  # fmt: skip
    trace.write_text(json.dumps({"traceEvents": events}))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["report", str(trace), "--json"]) == 0
    warnings = json.loads(buf.getvalue())["warnings"]
    assert any("with_stack" in w for w in warnings)
    assert any("profile_memory" in w for w in warnings)


def test_report_markdown_heads_with_the_doctor_warnings(tmp_path: Path) -> None:
    """The Markdown report carries the same warnings as the JSON one, before the sections."""
    import contextlib
    import io
    import json

    from opscope.cli.app import main

    trace = tmp_path / "t.json"
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5,
         "args": {"External id": 1}},
    ]  # fmt: skip
    trace.write_text(json.dumps({"traceEvents": events}))
    outs = []
    for flag in ("--json", "--md"):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["report", str(trace), flag]) == 0
        outs.append(buf.getvalue())
    warnings = json.loads(outs[0])["warnings"]
    assert warnings
    md = outs[1]
    quoted = [ln.removeprefix("> **Warning:** ") for ln in md.splitlines() if ln.startswith("> ")]
    assert quoted == [" ".join(w.split()) for w in warnings]
    assert md.index("> **Warning:**") < md.index("\n## ")
