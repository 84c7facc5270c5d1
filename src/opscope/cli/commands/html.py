"""``opscope html PATH -o out.html``: the self-contained HTML report of a profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
        before: Annotated[
            Path | None,
            typer.Option(
                "--before", help="A baseline profile: add the comparison (baseline -> PATH)."
            ),
        ] = None,
    ) -> None:
        """Write the analysis report as one offline HTML file (no network needed to view it).

        A section that fails is a warning on the page (and listed under "errors"), not a crash.
        """
        from opscope.analysis import Analyzer
        from opscope.cli.commands.report import build_report
        from opscope.report.html import render_html, write_html

        analyzer = Analyzer(path, salvage=salvage)
        report = build_report(analyzer, top)
        data = report.to_json()
        if before is not None:
            from opscope.analysis.compare import compare
            from opscope.analysis.report import SectionError

            try:
                data["comparison"] = compare(before, analyzer.profile).to_json()
            except OpscopeError:
                raise  # a bad baseline is the user's to fix: one line, exit 2
            except Exception as e:
                data["errors"].append(SectionError.of("comparison", e).to_json())
        text = render_html(
            data,
            profile=analyzer.profile,
            title=f"opscope report: {path.name}",
        )
        try:
            write_html(out, text)
        except OSError as e:
            raise OpscopeError(f"cannot write the report: {e.strerror}", out) from e
        n = len(data.get("errors") or [])
        failed = f", {n} section(s) failed: see the warnings on the page" if n else ""
        console.print(f"wrote {out} ({len(text.encode()) / 1e6:.2f} MB{failed})", highlight=False)
