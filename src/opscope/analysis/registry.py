"""Analyses by name. An analysis is a pure function ``(Profile, Options) -> Result``.

Register with :func:`analysis`; run with :func:`run`. Results are frozen dataclasses whose fields
are Polars DataFrames (and plain scalars); they never print, plot or read files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

import polars as pl

from opscope.model import Profile


@dataclass(frozen=True)
class Options:
    """Knobs shared by analyses. Each analysis reads only the ones it needs."""

    top: int = 20
    device_name: str | None = None  # override the device used for peaks (roofline)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    """Base of every analysis result: a frozen dataclass of DataFrames and scalars."""

    def tables(self) -> dict[str, pl.DataFrame]:
        """The DataFrame fields by name."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if isinstance(getattr(self, f.name), pl.DataFrame)
        }

    def scalars(self) -> dict[str, Any]:
        """The non-DataFrame fields by name."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if not isinstance(getattr(self, f.name), pl.DataFrame)
        }


R = TypeVar("R", bound=Result)
AnalysisFn = Callable[[Profile, Options], Result]

_REGISTRY: dict[str, AnalysisFn] = {}


def analysis(
    name: str,
) -> Callable[[Callable[[Profile, Options], R]], Callable[[Profile, Options], R]]:
    """Decorator: register ``fn`` as the analysis ``name``."""

    def wrap(fn: Callable[[Profile, Options], R]) -> Callable[[Profile, Options], R]:
        if name in _REGISTRY and _REGISTRY[name] is not fn:
            raise ValueError(f"analysis {name!r} registered twice")
        _REGISTRY[name] = fn
        return fn

    return wrap


def names() -> list[str]:
    """Registered analysis names (importing :mod:`opscope.analysis` registers the built-ins)."""
    return sorted(_REGISTRY)


def run(name: str, profile: Profile, options: Options | None = None) -> Result:
    """Run the analysis ``name`` on ``profile``."""
    return _REGISTRY[name](profile, options or Options())
