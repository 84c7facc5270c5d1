"""Options more than one sub-command takes: one declaration, one help text, one behaviour."""

from __future__ import annotations

import os
from typing import Annotated

import typer

MemoryBudget = Annotated[
    str | None,
    typer.Option(
        "--memory-budget",
        help="Memory a trace load may use (bytes, or e.g. 4G); a trace whose load would "
        "exceed it is streamed (docs/out-of-core.md). Default: half the available memory.",
    ),
]
"""``--memory-budget``: the type of a command parameter taking it."""

PeakDevice = Annotated[
    str | None,
    typer.Option(
        "--device",
        help="Device whose peaks to use when the trace has none (e.g. H100, MI300X).",
    ),
]
"""``--device NAME`` of the commands that read a profile: whose datasheet peaks to use."""


def apply_memory_budget(budget: str | None) -> None:
    """Make ``--memory-budget`` the budget of the loads this process starts (none: unchanged)."""
    if budget is None:
        return
    from opscope.ingest import outofcore

    # An environment setting, so that the rank readers' worker processes see it too.
    os.environ[outofcore.ENV] = str(outofcore.parse_budget(budget))
