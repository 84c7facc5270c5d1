"""Loading a trace larger than the memory budget (issue 24; design: docs/out-of-core.md).

A trace whose estimated in-memory load peak exceeds the budget has its text read through a
bounded sliding window (:func:`opscope.ingest.fastscan.scan_stream`; a ``.json.gz`` is inflated
on the fly by :class:`opscope.ingest.gz.Stream`) and each window's slices spilled to Parquet
(:mod:`opscope.ingest.spill`), so neither the text nor the decoded frame is ever whole in
memory. The windows are then linked segment by segment straight into a Profile folder (the
cache entry), opened lazily (:mod:`opscope.ingest.window_link`): the events table is never
whole in memory either.

The budget: ``memory_budget`` (bytes) passed to the loader, else ``OPSCOPE_MEMORY_BUDGET`` in the
environment (what ``--memory-budget`` sets, so rank worker processes see it too), else
:data:`DEFAULT_FRACTION` of the memory available when the load starts.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from opscope.errors import OpscopeError
from opscope.ingest import gz

DEFAULT_FRACTION = 0.5
"""Share of the available memory a load may use when no budget is given."""

PEAK_PER_TEXT_BYTE = 2.2
"""The in-memory load's peak per byte of trace text (measured: benchmarks/load_speed.py); an
inflated ``.json.gz`` adds its text once more (held whole while scanned)."""

GZ_RATIO_GUESS = 10
"""Inflated bytes per compressed byte assumed for a ``.json.gz`` (Kineto traces: 8-15) when its
trailer's size field cannot be trusted (it holds the size modulo 4 GiB)."""

ENV = "OPSCOPE_MEMORY_BUDGET"

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class BudgetError(OpscopeError):
    """A memory budget that is not a size."""


def parse_budget(text: str) -> int:
    """``"4G"``, ``"512M"``, ``"1.5g"``, ``"123456"`` (bytes) -> bytes; :class:`BudgetError`
    otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if m is None or float(m.group(1)) <= 0:
        raise BudgetError(
            f"memory budget {text!r} is not a size (bytes, or a number with K, M, G or T)"
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def available_memory() -> int:
    """Bytes of memory available now (``MemAvailable``; the physical size where unknown)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 8 << 30


def budget(memory_budget: int | None = None) -> int:
    """The budget in bytes: the argument, else ``$OPSCOPE_MEMORY_BUDGET``, else the default."""
    if memory_budget is not None:
        if memory_budget <= 0:
            raise BudgetError(f"memory budget must be positive, got {memory_budget}")
        return memory_budget
    env = os.environ.get(ENV)
    if env:
        return parse_budget(env)
    return int(available_memory() * DEFAULT_FRACTION)


def text_size(path: Path) -> int:
    """The trace's text size in bytes: the file's, or for gzip an estimate of the inflated size
    (the larger of the trailer's size field and :data:`GZ_RATIO_GUESS` times the file)."""
    size = path.stat().st_size
    if not gz.is_gzip(path):
        return size
    with open(path, "rb") as f:
        if size >= 18:
            f.seek(-4, os.SEEK_END)
            isize = int.from_bytes(f.read(4), "little")
        else:
            isize = 0
    return max(isize, size * GZ_RATIO_GUESS)


def estimated_peak(path: Path) -> int:
    """What loading ``path`` in memory is expected to peak at (bytes)."""
    text = text_size(path)
    return int(text * (PEAK_PER_TEXT_BYTE + (1.0 if gz.is_gzip(path) else 0.0)))


def over_budget(path: str | os.PathLike[str], memory_budget: int | None = None) -> bool:
    """True when loading ``path`` in memory would exceed the budget: it is then streamed."""
    try:
        return estimated_peak(Path(path)) > budget(memory_budget)
    except OSError:  # unreadable: the reader reports it
        return False
