"""A finding: what to change, where in the user's code, what it saves, and whether it was proven.

Findings are frozen values. Verification never mutates one; it returns a new Finding (via
:func:`dataclasses.replace`) with ``verified_speedup`` and ``verification`` filled in.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["high", "medium", "low"]
SEVERITIES: tuple[Severity, ...] = ("high", "medium", "low")

# Keys of one finding in ``opscope report --json`` ("findings": [...]); the order is the output's.
REPORT_KEYS: tuple[str, ...] = (
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
)


def finding_id(rule: str, file: str | None, line: int | None, module: str | None, key: str) -> str:
    """A stable id: the same rule at the same place for the same key always gets the same id."""
    raw = json.dumps([rule, file, line, module, key], separators=(",", ":"))
    return hashlib.sha1(raw.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Finding:
    """One piece of advice.

    ``evidence`` holds what the rule saw: ``operators`` (names), ``shapes``, ``dtypes``,
    ``calls``, ``figures`` (numbers behind the saving), ``event_ids`` (a few ids to look at), and
    for findings a micro-benchmark can check, ``bench`` (the spec :mod:`opscope.advise.verify`
    runs). ``saving_us`` is per step; ``saving_how`` says how it was estimated — a rule that
    cannot estimate a saving leaves it at 0.0 and says so there. ``saving_method`` is the
    estimate's kind in one word: ``"bound-gap"`` (measured minus the performance model's lower
    bound), ``"device-idle"`` (device idle the fix removes), ``"peer-rate"`` (the rate of
    similar work in the same profile), ``"peak-ratio"`` (the time scaled by the ratio of two
    peaks), ``"removed-time"`` (the time of work the fix removes) or ``"unknown"``.
    ``saving_limit_us`` is the most the fix could remove (the op's own time for op fixes, the
    device idle for host-side fixes, the step for anything): the saving is never above it.
    """

    id: str
    rule: str
    severity: Severity
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)
    file: str | None = None
    line: int | None = None
    module: str | None = None
    saving_us: float = 0.0
    saving_pct: float = 0.0
    saving_how: str = ""
    saving_method: str = ""
    saving_limit_us: float | None = None
    fix: str = ""
    verified_speedup: float | None = None
    verification: dict[str, Any] | None = None

    @property
    def location(self) -> str:
        """``file:line`` (or the module path, or ``"?"``) for display."""
        if self.file:
            return f"{self.file}:{self.line}" if self.line is not None else self.file
        return self.module or "?"

    def to_report_json(self) -> dict[str, Any]:
        """The compact form used in ``opscope report --json`` (keys :data:`REPORT_KEYS`)."""
        return {k: getattr(self, k) for k in REPORT_KEYS}

    def to_json(self) -> dict[str, Any]:
        """Every field, JSON-ready."""
        return {
            "id": self.id,
            **self.to_report_json(),
            "saving_how": self.saving_how,
            "saving_method": self.saving_method,
            "saving_limit_us": self.saving_limit_us,
            "evidence": self.evidence,
            "verification": self.verification,
        }
