"""``opscope compare BEFORE AFTER``: before/after table, JSON, Markdown, and a CI gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opscope.errors import GateFailed, OpscopeError


def register(app: typer.Typer) -> None:
    """Add the ``compare`` command to ``app``."""

    @app.command("compare")
    def compare_cmd(
        *,
        before: Annotated[
            Path, typer.Argument(help="Profile before the change (trace or directory).")
        ],
        after: Annotated[Path, typer.Argument(help="Profile after the change.")],
        json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
        md: bool = typer.Option(False, "--md", help="Print Markdown for a PR comment."),
        top: int = typer.Option(15, "--top", min=1, help="Rows to show per table."),
        html_out: Annotated[
            Path | None,
            typer.Option(
                "--html", metavar="OUT", help="Also write an offline HTML page with a chart."
            ),
        ] = None,
        device: str | None = typer.Option(
            None, "--device", help="Device name for both sides' peaks (e.g. 'A100 80GB')."
        ),
        device_before: str | None = typer.Option(
            None, "--device-before", help="Device name for BEFORE's peaks (overrides --device)."
        ),
        device_after: str | None = typer.Option(
            None, "--device-after", help="Device name for AFTER's peaks (overrides --device)."
        ),
        steps_per_epoch: int | None = typer.Option(
            None,
            "--steps-per-epoch",
            min=1,
            help="DataLoader length: adds the epoch time (steps × median step).",
        ),
        fail_if_slower: float | None = typer.Option(
            None,
            "--fail-if-slower",
            metavar="PCT",
            min=0.0,
            help="Exit 1 when the median step time is more than PCT percent slower.",
        ),
    ) -> None:
        """Compare two profiles: step time, layers, operators, kernels, modules, source lines."""
        from opscope.analysis.compare import compare
        from opscope.report.compare_render import fmt_us

        if json_out and md:
            raise OpscopeError("--json and --md are exclusive: pick one output")
        comp = compare(
            before,
            after,
            devices=(device_before or device, device_after or device),
            steps_per_epoch=steps_per_epoch,
        )
        if html_out is not None:
            from opscope.report.compare_render import render_html

            try:
                html_out.write_text(render_html(comp, top=top), encoding="utf-8")
            except OSError as e:
                raise OpscopeError(f"cannot write: {e.strerror or e}", html_out) from None
        if json_out:
            from opscope.cli.output import print_json

            print_json(comp.to_json())
        elif md:
            from opscope.report.compare_render import render_markdown

            typer.echo(render_markdown(comp, top=top), nl=False)
        else:
            from opscope.cli.output import console
            from opscope.report.compare_render import print_rich

            print_rich(comp, console, top=top)
        if fail_if_slower is not None and comp.step_regression_pct > fail_if_slower:
            noise = {
                "loss": "beyond step-to-step noise",
                "noise": f"within step-to-step noise (±{fmt_us(comp.step_noise_us)})",
                "untested": "noise not tested (fewer than 3 steps on a side)",
            }.get(comp.step_verdict, comp.step_verdict)
            raise GateFailed(
                f"median step time regressed {comp.step_regression_pct:.1f}% "
                f"({fmt_us(comp.step_before_us)} → {fmt_us(comp.step_after_us)}), "
                f"more than {fail_if_slower:g}%; {noise}"
            )
