"""``opscope advise PATH``: every finding, with its evidence, saving, method and fix."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from opscope.cli.options import MemoryBudget, PeakDevice, apply_memory_budget
from opscope.cli.output import console


def register(app: typer.Typer) -> None:
    """Add the ``advise`` command."""

    @app.command("advise")
    def advise_cmd(
        path: Annotated[Path, typer.Argument(help="Trace file or profile directory.")],
        json_out: Annotated[
            bool, typer.Option("--json", help="Every field of every finding, as JSON.")
        ] = False,
        md: Annotated[bool, typer.Option("--md", help="The findings as Markdown.")] = False,
        rule: Annotated[
            list[str] | None,
            typer.Option("--rule", "-r", help="Only findings of this rule id (or id prefix)."),
        ] = None,
        salvage: Annotated[
            bool, typer.Option("--salvage", help="Recover the events of a truncated trace.")
        ] = False,
        device: PeakDevice = None,
        memory_budget: MemoryBudget = None,
    ) -> None:
        """Every finding of the rules (the report shows the top five): what was seen, where,
        the saving per step with how it was estimated and its bound, and the fix.

        Findings come from the same analyses as ``opscope report`` (one build); ``verify``
        measures them. Exit 0 with or without findings.
        """
        from opscope.advise.rule import Findings
        from opscope.report.build import build_report
        from opscope.report.sections_md import findings_md

        apply_memory_budget(memory_budget)
        report = build_report(path, salvage=salvage, device=device)
        found = report.sections.get("findings")
        items = list(found.items) if isinstance(found, Findings) else []
        if rule:
            items = [f for f in items if any(f.rule.startswith(r) for r in rule)]
        chosen = (
            found.replace_items(items) if isinstance(found, Findings) else Findings(tuple(items))
        )
        for e in report.errors:
            print(f"warning: {e.section} failed: {e.type}: {e.message}", file=sys.stderr)
        if json_out:
            sys.stdout.write(json.dumps(chosen.to_json_full(), indent=1, default=str) + "\n")
            return
        if md:
            sys.stdout.write(findings_md(chosen) + "\n")
            return
        _print_terminal(chosen, str(report.summary.get("source") or path.name))


def _print_terminal(found: object, source: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    from opscope.advise.rule import Findings
    from opscope.report import fmt

    assert isinstance(found, Findings)
    if not found.items:
        console.print(f"opscope advise · {source}: no findings")
        return
    table = Table(title=f"opscope advise · {source} · {len(found.items)} findings", expand=False)
    for col in ("#", "finding", "where", "saves / step", "how"):
        table.add_column(col, overflow="fold")
    for i, f in enumerate(found.items, 1):
        saving = f"{fmt.us(f.saving_us)} ({f.saving_pct:.2g}%)" if f.saving_us else "not estimated"
        how = f.saving_method or ""
        if f.saving_limit_us is not None:
            how = f"{how}, ≤ {fmt.us(f.saving_limit_us)}".lstrip(", ")
        fix = f.fix.splitlines()[0] if f.fix else ""
        # trace strings (kernel names, shapes) hold brackets: never read as rich markup
        title = (
            f"{escape(f'[{f.severity}] {f.title}')}\n[dim]{escape(f'{f.rule} · fix: {fix}')}[/dim]"
        )
        table.add_row(str(i), title, escape(f.location), saving, how)
    console.print(table)
