"""Shared output helpers for commands: consoles, JSON printing."""

from __future__ import annotations

import sys
from typing import Any

import msgspec
from rich.console import Console

from opscope.jsonsafe import finite as _finite

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON on stdout (NaN/inf become null), with a trailing newline."""
    sys.stdout.write(msgspec.json.encode(_finite(obj)).decode())
    sys.stdout.write("\n")
    sys.stdout.flush()
