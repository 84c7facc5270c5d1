"""``opscope verify PATH``: find the issues, then measure each fix on the present device."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opscope.errors import OpscopeError


def register(app: typer.Typer) -> None:
    """Add the ``verify`` command to ``app``."""

    @app.command("verify")
    def verify_cmd(
        *,
        path: Annotated[Path, typer.Argument(help="Trace, Ascend directory or run directory.")],
        finding: Annotated[
            list[str] | None,
            typer.Option("--finding", "-f", help="Only this finding id (or id prefix)."),
        ] = None,
        device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or npu."),
        target: str | None = typer.Option(
            None, "--target", help="Device the advice is for (cpu, nvidia, amd, ascend)."
        ),
        budget: float = typer.Option(
            10.0, "--budget", min=0.1, help="Seconds of benchmarking, shared by the findings."
        ),
        json_out: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
    ) -> None:
        """Micro-benchmark each finding's operator at its real shape and dtype, and its fix."""
        import opscope
        from opscope.advise import advise
        from opscope.advise.verify import verify

        profile = opscope.load(path)
        try:
            found = advise(profile, target=target)
        except ValueError as e:
            raise OpscopeError(str(e), path) from None
        if finding:
            missing = [f for f in finding if found.get(f) is None]
            if missing:
                raise OpscopeError(f"no finding with id {', '.join(missing)}", path)
        result = verify(profile, found, device=device, budget_s=budget, only=finding)
        shown = [f for f in result if not finding or any(f.id.startswith(x) for x in finding)]
        if json_out:
            from opscope.cli.output import print_json

            print_json({"findings": [f.to_json() for f in shown]})
            return
        from rich.table import Table

        from opscope.cli.output import console

        table = Table(title=f"Findings verified on {device}", show_lines=False)
        cols = ("id", "severity", "finding", "where", "estimated/step", "measured/step", "how")
        for col in cols:
            table.add_column(col, overflow="fold")
        for f in shown:
            saving = f"{f.saving_us:.1f} µs ({f.saving_pct:.1f}%)" if f.saving_us else "—"
            ver = f.verification or {}
            meas = ver.get("measured_saving_us")
            measured = "—" if meas is None else f"{meas:.1f} µs"
            table.add_row(
                f.id, f.severity, f.title, f.location, saving, measured, ver.get("summary", "—")
            )
        console.print(table)
