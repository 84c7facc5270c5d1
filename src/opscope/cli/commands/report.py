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
    ) -> None:
        """Hotspots, time per source line, anomalies, roofline, step breakdown and memory."""
        from opscope.analysis import Analyzer
        from opscope.report.base import render

        report = Analyzer(path, salvage=salvage).generate_report(top=top)
        if json_out:
            sys.stdout.write(render(report, "json") + "\n")
        elif md:
            sys.stdout.write(render(report, "markdown"))
        else:
            render(report, "terminal", console=console)
