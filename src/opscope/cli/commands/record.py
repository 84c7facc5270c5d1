"""``opscope record``: profile a training script with no code change."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from opscope.errors import RecordError


def register(app: typer.Typer) -> None:
    """Add the ``record`` command."""

    @app.command(
        "record",
        context_settings={"allow_interspersed_args": False},
    )
    def record(
        command: list[str] = typer.Argument(  # noqa: B008
            None, help="The command after --: python train.py ARGS, python -m pkg ARGS."
        ),
        wait: int = typer.Option(1, help="Steps skipped at the start of each cycle."),
        warmup: int = typer.Option(1, help="Steps profiled but discarded before recording."),
        active: int | None = typer.Option(None, help="Steps recorded per cycle (default 3)."),
        repeat: int = typer.Option(1, help="Cycles (0: until the script ends)."),
        skip_first: int = typer.Option(0, "--skip-first", help="Steps skipped before cycle 1."),
        steps: int | None = typer.Option(None, help="Shorthand for --active N."),
        every: int | None = typer.Option(None, help="Periodic: a sample every N steps."),
        every_epochs: int | None = typer.Option(
            None, "--every-epochs", help="Periodic: a sample every N DataLoader epochs."
        ),
        out: Path | None = typer.Option(None, "--out", "-o", help="Run directory."),  # noqa: B008
        lines: bool = typer.Option(
            False,
            "--lines",
            help="Charge each op to the exact line that called it (costs extra while recording).",
        ),
    ) -> None:
        """Record a run directory: opscope record [options] -- python train.py ARGS."""
        from opscope.record.api import RecordSettings
        from opscope.record.launcher import (
            default_out_dir,
            parse_command,
            run_target,
            validate_target,
        )

        if steps is not None and active is not None:
            raise RecordError("use --steps or --active, not both")
        settings = RecordSettings(
            wait=wait,
            warmup=warmup,
            active=steps if steps is not None else (active if active is not None else 3),
            repeat=repeat,
            skip_first=skip_first,
            every=every,
            every_epochs=every_epochs,
            lines=lines,
        )
        settings.validate()
        target = parse_command(list(command or []))
        validate_target(target)
        out_dir = out if out is not None else default_out_dir(target)
        result = run_target(target, out_dir, settings)
        sys.stdout.flush()
        print(
            f"opscope: {result.status}, {result.steps} steps, "
            f"{len(result.profiled_steps)} profiled, {len(result.traces)} trace(s) -> {out_dir}",
            file=sys.stderr,
        )
        if result.exit_code:
            raise typer.Exit(result.exit_code)
