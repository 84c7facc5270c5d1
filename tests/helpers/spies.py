"""Spies that count what a shortcut saves (the calls are let through unchanged)."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest


def count_collect_all(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch ``pl.collect_all``; the list returned gets each call's number of plans."""
    calls: list[int] = []
    real = pl.collect_all

    def spy(plans: Any, **kw: Any) -> Any:
        calls.append(len(plans))
        return real(plans, **kw)

    monkeypatch.setattr(pl, "collect_all", spy)
    return calls
