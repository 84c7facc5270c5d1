"""``opscope report PATH``: the report's story in the terminal (or JSON, Markdown, HTML)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from opscope.cli.options import MemoryBudget, PeakDevice, apply_memory_budget
from opscope.cli.output import console


def register(app: typer.Typer) -> None:
    """Add the ``report`` command."""

    @app.command("report")
    def report_cmd(
        path: Annotated[Path, typer.Argument(help="Trace file or profile directory.")],
        json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
        md: Annotated[bool, typer.Option("--md", help="Print the report as Markdown.")] = False,
        full: Annotated[
            bool, typer.Option("--full", help="Every table, not only those that say something.")
        ] = False,
        top: Annotated[int, typer.Option("--top", min=1, help="Rows per table in JSON.")] = 20,
        salvage: Annotated[
            bool, typer.Option("--salvage", help="Recover the events of a truncated trace.")
        ] = False,
        device: PeakDevice = None,
        html: Annotated[
            Path | None, typer.Option("--html", help="Also write the offline HTML report here.")
        ] = None,
        memory_budget: MemoryBudget = None,
        sections: Annotated[
            str | None,
            typer.Option(
                "--sections",
                help="Run only these analyses, comma-separated (e.g. hotspots,breakdown): no "
                "findings, doctor checks or source view. An out-of-core profile runs "
                "hotspots,breakdown by default.",
            ),
        ] = None,
    ) -> None:
        """Step time and where it goes, the top findings, operators, kernels and source lines.

        A section that fails is a warning in the report (and under "errors" in --json), not a
        crash; the exit code stays 0.
        """
        from opscope.errors import OpscopeError
        from opscope.report.base import render
        from opscope.report.build import build_report
        from opscope.report.lazy_sections import parse_sections

        try:
            only = parse_sections(sections)
        except ValueError as e:
            raise OpscopeError(f"--sections: {e}") from e
        apply_memory_budget(memory_budget)
        report = build_report(path, top=top, salvage=salvage, device=device, sections=only)
        if html is not None:
            from opscope.report.html import render_html, write_html

            try:
                write_html(html, render_html(report))
            except OSError as e:
                raise OpscopeError(f"cannot write the report: {e.strerror}", html) from e
        if json_out:
            sys.stdout.write(render(report, "json") + "\n")
        elif md:
            sys.stdout.write(render(report, "markdown"))
        else:
            render(report, "terminal", console=console, full=full)
