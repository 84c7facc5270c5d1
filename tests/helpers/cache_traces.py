"""Tiny Kineto traces for the trace-cache tests, and what to compare a cached load against."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def cpu_trace(prefix: str, n: int) -> dict[str, Any]:
    """A Kineto trace of ``n`` 4 µs ``cpu_op`` events named ``{prefix}::op{i}``, 10 µs apart."""
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": f"{prefix}::op{i}", "pid": 1, "tid": 1}
        | {"ts": 100.0 + 10 * i, "dur": 4.0}
        for i in range(n)
    ]
    return {"schemaVersion": 1, "traceEvents": ev}


def write_json(p: Path, obj: Any) -> Path:
    """``obj`` written to ``p`` as JSON; returns ``p``."""
    p.write_text(json.dumps(obj))
    return p


def event_names(p: Path) -> set[str]:
    """The event names of the JSON trace at ``p``, read with the standard library."""
    return {e["name"] for e in json.loads(p.read_text())["traceEvents"]}
