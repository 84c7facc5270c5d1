"""report/sections_md.py: the Markdown of analysis results, written in report/ (issue 23). Exact
text on hand-made results (each expected string written out by hand), the lookup by class name,
and the report's fallbacks (a section's own to_markdown, else its tables)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import pytest

from opscope.analysis.registry import Result
from opscope.doctor.checks import Check, Diagnosis
from opscope.report.markdown import section_markdown
from opscope.report.sections_md import (
    diagnosis_md,
    markdown_table,
    renderer,
    to_markdown,
)


def test_markdown_table_cells_by_hand() -> None:
    df = pl.DataFrame(
        {
            "name": ["a|b", None],
            "total_ns": [1_234_567, 2_500],  # -> 1,234.6 µs and 2.5 µs
            "pct": [0.123456, 250.0],
        }
    )
    assert markdown_table(df) == (
        "| name | pct | total_us |\n|---|---|---|\n| a\\|b | 0.123 | 1,234.6 |\n|  | 250.0 | 2.5 |"
    )
    assert markdown_table(df, top=1).count("\n") == 2  # header, rule, one row
    assert markdown_table(pl.DataFrame()) == ""


def test_diagnosis_markdown_by_hand() -> None:
    d = Diagnosis(
        "run/",
        (
            Check("ok.one", "ok", "fine"),
            Check("bad.two", "error", "broken | here", {"n": 3}, "fix\nit"),
        ),
    )
    assert diagnosis_md(d) == (
        "# opscope doctor: run/\n"
        "\n"
        "Overall: **error**\n"
        "\n"
        "| status | check | title |\n"
        "|---|---|---|\n"
        "| ok | `ok.one` | fine |\n"
        "| error | `bad.two` | broken \\| here |\n"
        "\n"
        "## error: broken \\| here (`bad.two`)\n"
        "\n"
        "- n: `3`\n"
        "\n"
        "**What to do:** fix it\n"
    )
    assert to_markdown(d) == diagnosis_md(d)  # the lookup by class finds the same renderer


@dataclass(frozen=True)
class _Plain(Result):
    times: pl.DataFrame


class _Own:
    def to_json(self) -> int:
        return 1

    def to_markdown(self) -> str:
        return "own text"


def test_unknown_classes_fall_back() -> None:
    plain = _Plain(pl.DataFrame({"x_ns": [1500]}))
    assert renderer(plain) is None
    with pytest.raises(TypeError, match="no Markdown renderer for _Plain"):
        to_markdown(plain)
    # in a report: a Result without a renderer is drawn as its tables, a report-level section
    # (the source view, a plug-in) by its own to_markdown
    assert section_markdown("plain", plain) == "## plain\n\n### times\n\n| x_us |\n|---|\n| 1.5 |\n"
    assert section_markdown("own", _Own()) == "own text"
