"""Renderers by name: ``render(report, fmt)`` with ``fmt`` one of :func:`formats`.

A renderer turns a :class:`~opscope.analysis.Report` into text; it never parses a trace.
Register one with :func:`renderer`. Built in: ``"terminal"`` (rich), ``"json"``, ``"markdown"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opscope.analysis.assemble import Report
from opscope.jsonsafe import encode as _encode

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
    # to_json() isolates each section; jsonsafe makes any value encodable
    return _encode(report.to_json()).decode()


@renderer("markdown")
def _markdown(report: Report, **_: Any) -> str:
    from opscope.report.markdown import render as render_markdown

    return render_markdown(report)


def _load_builtins() -> None:
    import opscope.report.terminal  # noqa: F401  (registers "terminal")
