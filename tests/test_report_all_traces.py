"""The full report (every analysis, every rule, the doctor, every renderer) on every shared real
trace and on a CPU trace recorded here: no section may fail (``errors`` empty)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SHARED_TRACES
from opscope.analysis import registry
from opscope.analysis.assemble import Report
from opscope.report.base import render
from opscope.report.build import build_report
from opscope.report.html import render_html


def _traces(root: Path) -> list[Path]:
    """Ascend profiler directories and Kineto .json/.json.gz files (caches skipped)."""
    if not root.is_dir():
        return []

    def hidden(p: Path) -> bool:
        return any(part.startswith(".") for part in p.relative_to(root).parts)

    ascend = sorted(p.parent for p in root.rglob("ASCEND_PROFILER_OUTPUT") if not hidden(p))
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.name.endswith((".json", ".json.gz"))
        and not hidden(p)
        and not any(a in p.parents for a in ascend)
    )
    return ascend + files


TRACES = _traces(SHARED_TRACES)


def full_report(path: Path) -> None:
    import opscope

    profile = opscope.load(path, cache=False)
    report = build_report(profile, top=5)
    assert [e.line() for e in report.errors] == []
    # every analysis ran, or said why it does not apply to this profile
    assert set(registry.names()) <= set(report.sections) | set(report.skipped)
    assert "findings" in report.sections
    check_renderers(report, profile)


def check_renderers(report: Report, profile: object) -> None:
    data = json.loads(render(report, "json"))
    assert data["errors"] == []
    md = render(report, "markdown")
    assert md.startswith("# opscope report") and "section(s) failed" not in md
    for full in (False, True):
        text = render(report, "terminal", full=full)
        assert "section(s) failed" not in text and "warning: section" not in text
    page = render_html(report, profile=profile)  # type: ignore[arg-type]
    assert "section(s) failed" not in page


@pytest.mark.skipif(not TRACES, reason=f"shared traces not found at {SHARED_TRACES}")
@pytest.mark.parametrize(
    "path", TRACES, ids=[str(p.relative_to(SHARED_TRACES)) for p in TRACES] or None
)
def test_full_report_on_shared_trace(path: Path) -> None:
    full_report(path)


def test_full_report_on_a_recorded_cpu_trace(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from models._profile import record

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32)

    def step() -> None:
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    full_report(record(step, tmp_path / "cpu.json", steps=3))
