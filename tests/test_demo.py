"""`opscope demo` end to end on CPU: the JSON summary's structure and what it points at."""

from __future__ import annotations

import gzip
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from helpers.contract import FINDING_KEYS
from opscope.cli.app import main
from opscope.demo import model as demo_model


def _lines_of(fn: Any) -> tuple[int, int]:
    src, start = inspect.getsourcelines(fn)
    return start, start + len(src) - 1


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("demo")
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["demo", "--device", "cpu", "--steps", "2", "--out", str(out), "--json"])
    assert code == 0
    summary: dict[str, Any] = json.loads(buf.getvalue())
    summary["_out"] = str(out)
    return summary


def _in(file: Any, line: Any, span: tuple[int, int]) -> bool:
    return isinstance(file, str) and file.endswith("demo/model.py") and span[0] <= line <= span[1]


@pytest.mark.slow
def test_linear_11_line_is_in_the_attribution(demo: dict[str, Any]) -> None:
    span = _lines_of(demo_model.SeedLinear.forward)
    rows = demo["linear_11"]["source_rows"]
    assert rows, "linear_11's line must be charged"
    assert all(_in(r["file"], r["line"], span) for r in rows)
    assert sum(r["total_us"] for r in rows) > 0
    # forward and backward both charged to the forward layer
    assert demo["linear_11"]["fwd_us"] > 0 and demo["linear_11"]["bwd_us"] > 0
    ops = {(o["op"], o["is_backward"]) for o in demo["linear_11"]["ops"]}
    assert ("aten::matmul", False) in ops
    assert any(bwd and "MmBackward0" in name for name, bwd in ops)


@pytest.mark.slow
def test_linear_11_named_by_its_exact_lines_and_code(demo: dict[str, Any]) -> None:
    src = Path(inspect.getsourcefile(demo_model) or "").read_text().splitlines()
    charged = demo["linear_11"]["charged_lines"]
    want = sorted({o["line"] for o in demo["linear_11"]["ops"]})
    assert charged == want and len(charged) >= 1
    assert any("torch.matmul" in src[n - 1] for n in charged)
    for n in charged:
        assert f"{n} `{src[n - 1].strip()}`" in demo["linear_11"]["where"]
    # the HTML report (built by build_report) carries the same lines in its source view
    m = re.search(r'id="opscope-data">(.*?)</script>', Path(demo["report_html"]).read_text(), re.S)
    assert m is not None
    blocks = json.loads(m.group(1))["source_blocks"]
    shown = {(b["file"], ln["line"]): ln for b in blocks for ln in b["lines"]}
    for n in charged:
        ln = next(v for (f, line), v in shown.items() if f.endswith("demo/model.py") and line == n)
        assert ln["text"] == src[n - 1] and ln["fwd_us"] + ln["bwd_us"] > 0


@pytest.mark.slow
def test_backward_ops_charged_to_linear_11_exist_in_the_raw_trace(demo: dict[str, Any]) -> None:
    traces = sorted(Path(demo["runs"]["original"]).glob("rank0/*.pt.trace.json.gz"))
    assert traces
    raw = json.loads(gzip.decompress(traces[0].read_bytes()))
    names = {e.get("name") for e in raw["traceEvents"] if e.get("cat") == "cpu_op"}
    charged = {o["op"] for o in demo["linear_11"]["ops"]}
    assert charged <= names
    # every profiled step ran linear_11's matmul once
    steps = {
        e["name"] for e in raw["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")
    }
    matmul = next(o for o in demo["linear_11"]["ops"] if o["op"] == "aten::matmul")
    assert matmul["calls"] == len(steps) == 2


@pytest.mark.slow
def test_findings_point_at_the_demo_model(demo: dict[str, Any]) -> None:
    seed = _lines_of(demo_model.SeedLinear.forward)
    vision = _lines_of(demo_model.VisionModel.forward)
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for f in demo["findings"]:
        by_rule.setdefault(f["rule"], []).append(f)
    layout = [f for r, fs in by_rule.items() if r.startswith("layout") for f in fs]
    assert any(_in(f["file"], f["line"], seed) for f in layout)
    assert any(_in(f["file"], f["line"], seed) for f in by_rule.get("fusion-bias-add", []))
    align = by_rule.get("shape-alignment", [])
    assert any(_in(f["file"], f["line"], vision) and "1000" in f["title"] for f in align)
    for f in demo["findings"]:
        assert set(f) >= set(FINDING_KEYS)


@pytest.mark.slow
def test_comparison_has_both_sides_measured(demo: dict[str, Any]) -> None:
    st = demo["comparison"]["step_time"]
    assert st["before_us"] > 0 and st["after_us"] > 0
    assert st["speedup"] == pytest.approx(st["before_us"] / st["after_us"], rel=1e-6)
    assert demo["comparison"]["rows"], "matched rows"
    assert Path(demo["report_html"]).is_file()
    html = Path(demo["report_html"]).read_text()
    assert "<script src=" not in html
    assert 'src="http' not in html and 'href="http' not in html  # nothing from the network
    assert demo["basis"] == "host"
    assert any("CPU" in n for n in demo["notes"])
