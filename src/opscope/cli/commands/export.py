"""``opscope export PATH --perfetto out.json.gz``: the trace with opscope's analysis on it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opscope.cli.output import console
from opscope.errors import OpscopeError


def register(app: typer.Typer) -> None:
    """Add the ``export`` command."""

    @app.command("export")
    def export_cmd(
        path: Annotated[Path, typer.Argument(help="Trace file or profile directory.")],
        perfetto: Annotated[
            Path,
            typer.Option(
                "--perfetto", help="Chrome trace to write (.json.gz) for Perfetto / Insight."
            ),
        ],
        overlays: Annotated[
            bool,
            typer.Option(
                "--overlays/--no-overlays",
                help="Add findings, anomalies and the critical path as extra tracks and flows.",
            ),
        ] = True,
    ) -> None:
        """Export a profile as a Chrome trace with opscope's findings added."""
        from opscope.ingest import load
        from opscope.report.export import export_perfetto
        from opscope.report.viewer.overlays import default_overlays

        if not perfetto.name.endswith((".json.gz", ".json")):
            raise OpscopeError("the output must end in .json.gz (or .json)", perfetto)
        profile = load(path)
        try:
            export_perfetto(profile, perfetto, overlays=default_overlays if overlays else None)
        except OSError as e:
            raise OpscopeError(f"cannot write the trace: {e.strerror}", perfetto) from e
        console.print(f"wrote {perfetto}", highlight=False)
