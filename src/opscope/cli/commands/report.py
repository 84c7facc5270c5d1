"""``opscope report PATH``: run every analysis and print the report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from opscope.cli.output import console


def register(app: typer.Typer) -> None:
    """Add the ``report`` command."""

    @app.command("report")
    def report_cmd(
        path: Annotated[Path, typer.Argument(help="Trace file or profile directory.")],
        json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
        md: Annotated[bool, typer.Option("--md", help="Print the report as Markdown.")] = False,
        top: Annotated[int, typer.Option("--top", min=1, help="Rows per table.")] = 20,
        salvage: Annotated[
            bool, typer.Option("--salvage", help="Recover the events of a truncated trace.")
        ] = False,
        html: Annotated[
            Path | None, typer.Option("--html", help="Also write the offline HTML report here.")
        ] = None,
    ) -> None:
        """Hotspots, time per source line, anomalies, roofline, breakdown, memory, findings."""
        from opscope.advise import advise
        from opscope.analysis import Analyzer
        from opscope.errors import OpscopeError
        from opscope.report.base import render

        analyzer = Analyzer(path, salvage=salvage)
        report = analyzer.generate_report(top=top)
        report = report.with_sections(findings=advise(analyzer.profile, report.sections))
        from dataclasses import replace

        from opscope.doctor import doctor_warnings

        # the doctor's checks head the report: figures from an untrustworthy profile say so first
        warnings = doctor_warnings(analyzer.profile)
        report = replace(report, summary={**report.summary, "warnings": warnings})
        if html is not None:
            from opscope.report.html import write_html

            try:
                write_html(html, report.to_html(profile=analyzer.profile))
            except OSError as e:
                raise OpscopeError(f"cannot write the report: {e.strerror}", html) from e
        if json_out:
            sys.stdout.write(render(report, "json") + "\n")
        elif md:
            sys.stdout.write(render(report, "markdown"))
        else:
            render(report, "terminal", console=console)
