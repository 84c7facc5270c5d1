"""``opscope demo``: the seed article's workflow on the built-in model, end to end."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from opscope.cli.output import console, print_json
from opscope.errors import OpscopeError


def register(app: typer.Typer) -> None:
    """Add the ``demo`` command."""

    @app.command("demo")
    def demo_cmd(
        device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or npu.")] = "auto",
        out: Annotated[
            Path | None,
            typer.Option("--out", help="Folder for the two runs and the report (default: temp)."),
        ] = None,
        steps: Annotated[
            int, typer.Option("--steps", min=1, max=50, help="Profiled steps per model.")
        ] = 3,
        json_out: Annotated[
            bool, typer.Option("--json", help="Print the JSON summary instead of the tables.")
        ] = False,
    ) -> None:
        """Record the built-in model, find its slow layer, verify the fixes, compare the fix."""
        try:
            import torch  # noqa: F401
        except ImportError as e:
            raise OpscopeError("the demo records a model and needs torch: pip install torch") from e
        from rich.console import Console

        from opscope.demo.run import DemoConfig, run_demo

        folder = out or Path(tempfile.mkdtemp(prefix="opscope-demo-"))
        shown = Console(stderr=True, highlight=False) if json_out else console
        summary = run_demo(DemoConfig(out=folder, device=device, steps=steps), shown)
        if json_out:
            print_json(summary)
