"""``opscope html PATH -o out.html``: the self-contained HTML report of a profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opscope.cli.options import PeakDevice
from opscope.cli.output import console
from opscope.errors import OpscopeError


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
        device: PeakDevice = None,
        before: Annotated[
            Path | None,
            typer.Option(
                "--before", help="A baseline profile: add the comparison (baseline -> PATH)."
            ),
        ] = None,
    ) -> None:
        """Write the analysis report as one offline HTML file (no network needed to view it).

        The same report as ``opscope report PATH --html``; a section that fails is a warning on
        the page (and listed under "errors"), not a crash.
        """
        from opscope.report.build import build_report
        from opscope.report.html import render_html, write_html

        report = build_report(path, top=top, salvage=salvage, before=before, device=device)
        text = render_html(report)
        try:
            write_html(out, text)
        except OSError as e:
            raise OpscopeError(f"cannot write the report: {e.strerror}", out) from e
        n = len(report.errors)
        failed = f", {n} section(s) failed: see the warnings on the page" if n else ""
        console.print(f"wrote {out} ({len(text.encode()) / 1e6:.2f} MB{failed})", highlight=False)
