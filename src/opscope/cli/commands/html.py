"""``opscope html PATH -o out.html``: the self-contained HTML report of a profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from opscope.cli.output import console
from opscope.errors import OpscopeError


def report_data(profile: Any, report: Any) -> dict[str, Any]:
    """The report's JSON, with the advise rules' findings added when the report has none."""
    data: dict[str, Any] = report.to_json()
    if "findings" not in data:
        try:
            from opscope.advise import advise
        except ImportError:
            return data
        data["findings"] = advise(profile, getattr(report, "sections", None)).to_json()
    return data


def register(app: typer.Typer) -> None:
    """Add the ``html`` command."""

    @app.command("html")
    def html_cmd(
        path: Annotated[Path, typer.Argument(help="Trace file or profile directory.")],
        out: Annotated[Path, typer.Option("-o", "--output", help="The HTML file to write.")],
        top: Annotated[int, typer.Option("--top", help="Rows per table.")] = 50,
        salvage: Annotated[
            bool, typer.Option("--salvage", help="Recover the events of a truncated trace.")
        ] = False,
        before: Annotated[
            Path | None,
            typer.Option(
                "--before", help="A baseline profile: add the comparison (baseline -> PATH)."
            ),
        ] = None,
    ) -> None:
        """Write the analysis report as one offline HTML file (no network needed to view it)."""
        from opscope.analysis import Analyzer
        from opscope.report.html import render_html, write_html

        analyzer = Analyzer(path, salvage=salvage)
        report = analyzer.generate_report(top=top)
        data = report_data(analyzer.profile, report)
        if before is not None:
            from opscope.analysis.compare import compare

            data["comparison"] = compare(before, analyzer.profile).to_json()
        text = render_html(
            data,
            profile=analyzer.profile,
            title=f"opscope report: {path.name}",
        )
        try:
            write_html(out, text)
        except OSError as e:
            raise OpscopeError(f"cannot write the report: {e.strerror}", out) from e
        console.print(f"wrote {out} ({len(text.encode()) / 1e6:.2f} MB)", highlight=False)
