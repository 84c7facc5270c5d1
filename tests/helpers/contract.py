"""JSON contracts written in the issues, spelled out once for the tests (independently of the
code's own constants, so a test checks the code against the issue, not against itself)."""

from __future__ import annotations

#: issue 5: `--json` adds "findings": [{...}] with these keys, in this order
FINDING_KEYS = [
    "rule",
    "severity",
    "title",
    "file",
    "line",
    "module",
    "saving_us",
    "saving_pct",
    "fix",
    "verified_speedup",
]
