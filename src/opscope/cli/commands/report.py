"""``opscope report PATH``: run every analysis and print the report."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from opscope.cli.output import console

if TYPE_CHECKING:
    from opscope.analysis.report import Analyzer, Report


def build_report(analyzer: Analyzer, top: int = 20) -> Report:
    """Every analysis, the rules' findings and the doctor's warnings: what ``opscope report``
    and ``opscope html`` show.

    Nothing here raises for a bug in one part: an analysis, a rule, the rules as a whole or the
    doctor that fails is a :class:`~opscope.analysis.report.SectionError` in ``Report.errors``.
    """
    from opscope.advise import advise
    from opscope.analysis.report import SectionError, guarded, one_line
    from opscope.doctor import doctor_warnings

    report = analyzer.generate_report(top=top)
    errors: list[SectionError] = []
    findings = guarded("findings", lambda: advise(analyzer.profile, report.sections), errors)
    if findings is not None:
        report = report.with_sections(findings=findings)
        for rid, why in findings.errors.items():
            kind, _, msg = why.partition(": ")
            errors.append(SectionError(f"rule {rid}", kind, one_line(msg)))
    # the doctor's checks head the report: figures from an untrustworthy profile say so first
    warnings = guarded("doctor", lambda: doctor_warnings(analyzer.profile), errors) or []
    return replace(report.with_errors(*errors), summary={**report.summary, "warnings": warnings})


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
        """Hotspots, time per source line, anomalies, roofline, breakdown, memory, findings.

        A section that fails is a warning in the report (and under "errors" in --json), not a
        crash; the exit code stays 0.
        """
        from opscope.analysis import Analyzer
        from opscope.errors import OpscopeError
        from opscope.report.base import render

        analyzer = Analyzer(path, salvage=salvage)
        report = build_report(analyzer, top)
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
