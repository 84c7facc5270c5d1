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
EXTRA = 60
"""Matmuls per step of the slow run: ~25 ms on a ~6 ms step (5x). The store flags the slow run
against the steady one, recorded separately: at 12 (1.8x) a machine twice as loaded during the
steady recording could hide the difference."""
_CACHE: dict[str, Path] = {}


def recorded(base: Path, name: str) -> Path:
    """``"steady"``: 40 steady steps; ``"slow"``: the same model, ``EXTRA`` matmuls every step."""
    if name not in _CACHE:
        out = base / f"trend_run_{name}"
        slow_from = 0 if name == "slow" else -1
        record_callable(lambda: train(STEPS, slow_from, extra=EXTRA), out, SETTINGS)
        _CACHE[name] = out
    return _CACHE[name]
