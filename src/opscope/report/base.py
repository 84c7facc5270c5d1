"""Renderers by name: ``render(report, fmt)`` with ``fmt`` one of :func:`formats`.

A renderer turns a :class:`~opscope.analysis.Report` into text; it never parses a trace.
Register one with :func:`renderer`. Built in: ``"terminal"`` (rich), ``"json"``, ``"markdown"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec

from opscope.analysis.report import Report

RenderFn = Callable[..., str]
_RENDERERS: dict[str, RenderFn] = {}


def renderer(fmt: str) -> Callable[[RenderFn], RenderFn]:
    """Decorator: register ``fn(report, **options) -> str`` as the renderer for ``fmt``."""

    def wrap(fn: RenderFn) -> RenderFn:
        _RENDERERS[fmt] = fn
        return fn

    return wrap


def formats() -> list[str]:
    """Registered format names."""
    _load_builtins()
    return sorted(_RENDERERS)


def render(report: Report, fmt: str, **options: Any) -> str:
    """Render ``report`` as ``fmt``; raises ``KeyError`` naming the known formats otherwise."""
    _load_builtins()
    if fmt not in _RENDERERS:
        raise KeyError(f"unknown report format {fmt!r}; known: {', '.join(sorted(_RENDERERS))}")
    return _RENDERERS[fmt](report, **options)


@renderer("json")
def _json(report: Report, **_: Any) -> str:
    return msgspec.json.encode(_finite(report.to_json())).decode()


@renderer("markdown")
def _markdown(report: Report, **_: Any) -> str:
    return report.to_markdown()


def _finite(obj: Any) -> Any:
    """NaN and infinities become null (JSON has no spelling for them)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def _load_builtins() -> None:
    import opscope.report.terminal  # noqa: F401  (registers "terminal")
