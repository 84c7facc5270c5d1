"""Spies that count what a shortcut saves (the calls are let through unchanged)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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


def count_queries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch the engine's collect, which every eager frame operation and collected plan goes
    through (a ``head`` or a Series comparison does not); the list returned gets a 1 per query."""
    from polars.lazyframe import engine

    ran: list[int] = []
    real = engine._LocalEngine.collect

    def spy(self: Any, lf: Any, **kw: Any) -> Any:
        ran.append(1)
        return real(self, lf, **kw)

    monkeypatch.setattr(engine._LocalEngine, "collect", spy)
    return ran


@contextmanager
def cells_drawn_by_rich() -> Iterator[list[object]]:
    """Within the block, each cell rich draws itself (the renderable of the Padding a table
    draws a cell in) is appended to the list yielded: a cell a fast path draws from its string
    is not."""
    from rich.console import Console
    from rich.padding import Padding

    drawn: list[object] = []
    real = Console.render_lines

    def spy(self: Console, renderable: Any, *a: Any, **k: Any) -> Any:
        if isinstance(renderable, Padding):
            drawn.append(renderable.renderable)
        return real(self, renderable, *a, **k)

    Console.render_lines = spy  # type: ignore[method-assign]
    try:
        yield drawn
    finally:
        Console.render_lines = real  # type: ignore[method-assign]
