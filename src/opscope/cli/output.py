"""Shared output helpers for commands: consoles, JSON printing."""

from __future__ import annotations

import math
import sys
from typing import Any

import msgspec
from rich.console import Console

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON on stdout (NaN/inf become null), with a trailing newline."""
    sys.stdout.write(msgspec.json.encode(_finite(obj)).decode())
    sys.stdout.write("\n")
    sys.stdout.flush()


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj
