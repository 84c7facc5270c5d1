"""Recorded runs shared by the store tests (recorded once per test session, in-process)."""

from __future__ import annotations

import sys
from pathlib import Path

from opscope.record.api import RecordSettings
from opscope.record.launcher import record_callable

sys.path.insert(0, str(Path(__file__).parent))
from trend_train import train

STEPS = 40
SETTINGS = RecordSettings(wait=1, warmup=1, active=3, every=10)
_CACHE: dict[str, Path] = {}


def recorded(base: Path, name: str) -> Path:
    """``"steady"``: 40 steady steps; ``"slow"``: the same model, 12 extra matmuls every step."""
    if name not in _CACHE:
        out = base / f"trend_run_{name}"
        slow_from = 0 if name == "slow" else -1
        record_callable(lambda: train(STEPS, slow_from, extra=12), out, SETTINGS)
        _CACHE[name] = out
    return _CACHE[name]
