"""``opscope doctor PATH``: can this profile be trusted? Incomplete, missing and unstable data.

Exit 0 whatever the checks find (warnings and errors are findings about the data, not failures
of the command); exit 2 when the input cannot be read at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from opscope.cli.output import console, print_json
from opscope.doctor import Diagnosis, doctor_warnings
from opscope.model import Profile

__all__ = ["doctor_warnings", "print_env", "register", "report_warnings"]

_STYLE = {"ok": "green", "warning": "yellow", "error": "bold red"}


def report_warnings(profile: Profile) -> list[str]:
    """The lines ``opscope report`` shows at its top (same as :func:`doctor_warnings`)."""
    return doctor_warnings(profile)


def register(app: typer.Typer) -> None:
    """Add the ``doctor`` command."""

    @app.command("doctor")
    def doctor_cmd(
        path: Annotated[Path, typer.Argument(help="Trace file, profile or run directory.")],
        json_out: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
        markdown: Annotated[
            bool, typer.Option("--markdown", help="Print the checks as Markdown.")
        ] = False,
        show_env: Annotated[
            bool,
            typer.Option(
                "--show-env", help="Show the trace's environment variables, secrets included."
            ),
        ] = False,
    ) -> None:
        """Check a profile for incomplete, missing or unstable data, and say what to do."""
        from opscope.doctor import diagnose
        from opscope.doctor.env import trace_env

        diag = diagnose(path)
        if json_out:
            out = diag.to_json()
            if show_env:
                out["env"] = trace_env(path, show_env=True)
            print_json(out)
            return
        if markdown:
            from opscope.report.sections_md import diagnosis_md

            console.print(diagnosis_md(diag), markup=False, highlight=False, soft_wrap=True)
        else:
            _table(diag)
        if show_env:
            print_env(trace_env(path, show_env=True))


def _table(diag: Diagnosis) -> None:
    from rich.table import Table

    t = Table(title=f"opscope doctor: {diag.source or ''}", show_lines=False)
    t.add_column("status")
    t.add_column("check", style="dim")
    t.add_column("finding")
    t.add_column("what to do")
    for c in diag.checks:
        style = _STYLE[c.status]
        t.add_row(f"[{style}]{c.status}[/]", c.id, c.title, c.action if c.status != "ok" else "")
    console.print(t)
    console.print(f"overall: [{_STYLE[diag.status]}]{diag.status}[/]")


def print_env(env: dict[str, dict[str, object]]) -> None:
    """Print ``{source: {block: {name: value}}}`` (from :func:`opscope.doctor.env.trace_env`)."""
    from rich.table import Table

    for src, blocks in env.items():
        for key, block in blocks.items():
            t = Table(title=f"{src}: {key}", show_header=False, box=None)
            t.add_column("name", style="bold")
            t.add_column("value", overflow="fold")
            if isinstance(block, dict):
                for k, v in block.items():
                    t.add_row(str(k), str(v))
            elif isinstance(block, list):
                for i, v in enumerate(block):
                    t.add_row(str(i), str(v))
            console.print(t)
