"""``Report.to_json`` is made once per Report (issue 19 item 8: the terminal rendering reads it
and the JSON rendering writes it; each section's rows were made twice per ``opscope report``).

Each call still returns its own outer dict (the HTML page adds keys and replaces ``errors``), a
copy of the report (``with_sections``) makes its own, and the renderings are the same whether
the value was made before or not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import opscope
from opscope.analysis import assemble
from opscope.report.base import render
from opscope.report.build import build_report
from test_report_speed_empty import _kernels_only


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = assemble.section_json

    def spy(result: Any, top: int = 20) -> Any:
        calls.append(type(result).__name__)
        return real(result, top)

    monkeypatch.setattr(assemble, "section_json", spy)
    return calls


def test_sections_are_made_into_json_once_per_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _counting(monkeypatch)
    report = build_report(opscope.load(_kernels_only(tmp_path / "k.json"), cache=False))
    first = report.to_json()
    n = len(calls)
    assert n == len(report.sections) > 5
    second = report.to_json()
    assert len(calls) == n  # not made again
    assert first == second and first is not second
    # what a caller changes at the top is its own: the next call is untouched
    second["errors"].append({"section": "x"})
    second["load"]["events"] = -1
    second["_story"] = "added"
    third = report.to_json()
    assert third == first and "_story" not in third and third["load"]["events"] != -1
    render(report, "terminal")
    render(report, "json")
    assert len(calls) == n  # both renderings read the value made once
    # a copy with another section makes its own value, with that section in it
    more = report.with_sections(extra={"a": 1})
    assert more.to_json()["extra"] == {"a": 1} and "extra" not in report.to_json()


def test_renderings_equal_whether_the_json_was_made_first(tmp_path: Path) -> None:
    path = _kernels_only(tmp_path / "k.json")
    fresh = build_report(opscope.load(path, cache=False))
    made = build_report(opscope.load(path, cache=False))
    made.to_json()
    for fmt in ("json", "terminal", "markdown"):
        a = render(fresh, fmt)
        b = render(made, fmt)
        assert a == b, fmt
