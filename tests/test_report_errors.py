"""A failing analysis, rule or section renderer costs the report only that section: it becomes a
warning (section, exception type, one-line message), counted under "errors", in every format, and
``opscope report`` / ``opscope html`` still exit 0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers.synth import kineto_trace, training
from opscope.advise.rule import rules
from opscope.analysis import Analyzer, registry
from opscope.analysis.registry import Options
from opscope.cli.app import main
from opscope.model import Profile
from opscope.report.base import render


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(kineto_trace(steps=4)))
    return p


@pytest.fixture
def broken_hotspots(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(profile: Profile, options: Options) -> Any:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setitem(registry._REGISTRY, "hotspots", boom)


WANT = {"section": "hotspots", "type": "RuntimeError", "message": "boom"}


@pytest.mark.usefixtures("broken_hotspots")
def test_failing_analysis_json(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(trace), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["errors"] == [WANT]
    assert "hotspots" not in out
    # the other sections are all there
    for key in ("sources", "anomalies", "breakdown", "memory", "findings"):
        assert key in out, key
    assert out["sources"]  # the kernels were charged to lines


@pytest.mark.usefixtures("broken_hotspots")
def test_failing_analysis_markdown_and_terminal(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(trace), "--md"]) == 0
    md = capsys.readouterr().out
    assert "**Warning: 1 report section(s) failed.**" in md
    assert "- section hotspots failed: RuntimeError: boom" in md
    assert "## Time per source line" in md and "## Hotspots" not in md
    assert main(["report", str(trace)]) == 0
    cap = capsys.readouterr()
    assert "section hotspots failed: RuntimeError: boom" in cap.out
    assert "1 report section(s) failed" in cap.out
    assert "Top source lines" in cap.out and "Top operators" not in cap.out
    assert "Traceback" not in cap.out + cap.err


@pytest.mark.usefixtures("broken_hotspots")
def test_failing_analysis_html(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "r.html"
    assert main(["html", str(trace), "-o", str(page)]) == 0
    assert "1 section(s) failed" in capsys.readouterr().out
    text = page.read_text()
    data = json.loads(
        text.split('id="opscope-data">', 1)[1].split("</script>", 1)[0].replace("\\u0026", "&")
    )
    assert data["errors"] == [WANT]
    assert data["_notes"][:2] == [
        "Warning: 1 report section(s) failed; the others are complete.",
        "section hotspots failed: RuntimeError: boom",
    ]
    assert data["sources"] and "hotspots" not in data
    # report --html writes the same warning
    page2 = tmp_path / "r2.html"
    assert main(["report", str(trace), "--json", "--html", str(page2)]) == 0
    assert "section hotspots failed: RuntimeError: boom" in page2.read_text()


def test_failing_rule_is_one_error_and_the_other_findings_stay(
    trace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(trace), "--json"]) == 0
    before = json.loads(capsys.readouterr().out)
    assert before["errors"] == []
    victim = next(iter(rules().values()))

    def overflow(profile: Profile, results: Any) -> list[Any]:
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(victim, "match", overflow)
    assert main(["report", str(trace), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["errors"] == [
        {
            "section": f"rule {victim.id}",
            "type": "OverflowError",
            "message": "int too large to convert to float",
        }
    ]
    kept = [f for f in before["findings"] if f["rule"] != victim.id]
    assert out["findings"] == kept


class BadSection:
    """A section whose renderers raise (to_json only when it has no value)."""

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def to_json(self) -> Any:
        if self.value is None:
            raise KeyError("no such column")
        return self.value

    def to_markdown(self) -> str:
        raise ZeroDivisionError("division by zero")


def test_failing_section_renderers_are_warnings() -> None:
    plan = training(steps=3, layers=2)
    rep = Analyzer(plan.profile).generate_report(top=5)
    assert rep.errors == ()
    bad = rep.with_sections(bad=BadSection(), odd=BadSection({"x": {1, 2}}))
    js = json.loads(render(bad, "json"))
    assert js["errors"] == [{"section": "bad", "type": "KeyError", "message": "'no such column'"}]
    assert "bad" not in js and js["hotspots"]["ops"]
    assert js["odd"] == {"x": "{1, 2}"}  # a value JSON has no spelling for is its str
    md = render(bad, "markdown")
    assert "**Warning: 2 report section(s) failed.**" in md
    assert "section bad failed: ZeroDivisionError: division by zero" in md
    assert "## Hotspots" in md
    # the terminal draws sections from their JSON values: there, only "bad" fails
    text = render(bad, "terminal", full=True)
    assert "section bad failed: KeyError: 'no such column'" in text
    assert "1 report section(s) failed" in text and "Top operators" in text
