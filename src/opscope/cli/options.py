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


# Environment variables a command set for its own run, with the values they had before:
# restored by main() when the command ends, so that a later command in the same process (main()
# called again, a test runner) does not inherit them.
_SET_FOR_COMMAND: dict[str, str | None] = {}


def set_for_command(name: str, value: str) -> None:
    """Set an environment variable for this command's run (and the worker processes it starts,
    which is why it is the environment); :func:`restore_environment` undoes it."""
    _SET_FOR_COMMAND.setdefault(name, os.environ.get(name))
    os.environ[name] = value


def restore_environment() -> None:
    """Put back every variable :func:`set_for_command` changed."""
    while _SET_FOR_COMMAND:
        name, before = _SET_FOR_COMMAND.popitem()
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def apply_memory_budget(budget: str | None) -> None:
    """Make ``--memory-budget`` the budget of the loads this command starts (none: unchanged)."""
    if budget is None:
        return
    from opscope.ingest import outofcore

    set_for_command(outofcore.ENV, str(outofcore.parse_budget(budget)))
