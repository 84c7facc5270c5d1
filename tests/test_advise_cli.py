"""``opscope advise``: every finding of the report's one build, filtered by rule, in JSON,
Markdown and the terminal; bad input is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import shared_trace
from opscope.cli.app import main
from opscope.report.build import build_report

TRACE = "gpu/tracelens_h100_bert_small.json.gz"


def test_json_is_every_finding_of_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    path = shared_trace(TRACE)
    assert main(["advise", str(path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = build_report(path).sections["findings"].to_json_full()
    assert got == json.loads(json.dumps(want, default=str))
    assert len(got) > 5  # more than the report's top five
    assert {"id", "rule", "evidence", "saving_method", "saving_limit_us", "fix"} <= set(got[0])


def test_rule_filter_and_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    path = shared_trace(TRACE)
    assert main(["advise", str(path), "--json"]) == 0
    every = json.loads(capsys.readouterr().out)
    rule = every[0]["rule"]
    assert main(["advise", str(path), "--json", "--rule", rule]) == 0
    only = json.loads(capsys.readouterr().out)
    assert [f["id"] for f in only] == [f["id"] for f in every if f["rule"] == rule]
    assert main(["advise", str(path), "--md", "-r", rule]) == 0
    md = capsys.readouterr().out
    assert all(f["title"].split("[")[0].strip()[:20] in md for f in only)


def test_terminal_escapes_trace_strings(capsys: pytest.CaptureFixture[str]) -> None:
    # kernel names and shapes hold brackets: printed as text, never taken as rich markup
    path = shared_trace(TRACE)
    first = build_report(path).sections["findings"].items[0]
    assert main(["advise", str(path)]) == 0
    out = capsys.readouterr().out
    # "[medium]" is a rich style name: shown only when escaped
    assert f"[{first.severity}] " in out
    assert f"{len(build_report(path).sections['findings'].items)} findings" in out


def test_missing_file_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["advise", str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert "nope.json" in err and "Traceback" not in err
