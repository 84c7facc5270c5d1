"""Human units for every renderer: times (ns/µs/ms/s), bytes (KiB/MiB/GiB), rates, shares.

Analyses hand over plain numbers (``*_us`` in JSON, ``*_ns`` in tables, bytes as integers); only
the renderers turn them into text, with these helpers, so the terminal and the HTML page agree.
"""

from __future__ import annotations

import math
from typing import Any


def _bad(v: Any) -> bool:
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def us(v: float | None) -> str:
    """A duration in µs as ``850 ns``, ``12.3 µs``, ``4.43 ms`` or ``1.20 s`` ("" for none)."""
    if _bad(v):
        return ""
    assert v is not None
    a = abs(v)
    if a == 0:
        return "0"
    if a < 1:
        return f"{v * 1000:.0f} ns"
    if a < 1000:
        return f"{v:.3g} µs" if a < 100 else f"{v:.0f} µs"
    if a < 1_000_000:
        return f"{v / 1000:.3g} ms" if a < 100_000 else f"{v / 1000:.0f} ms"
    return f"{v / 1e6:.3g} s"


def ns(v: float | None) -> str:
    """A duration in ns, as :func:`us` writes it."""
    return "" if _bad(v) else us(float(v) / 1000)  # type: ignore[arg-type]


def nbytes(v: float | None) -> str:
    """Bytes as ``512 B``, ``3.0 KiB``, ``96.6 MiB``, ``1.50 GiB`` (binary units)."""
    if _bad(v):
        return ""
    assert v is not None
    a = abs(v)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if a >= size:
            x = v / size
            return f"{x:.3g} {unit}" if abs(x) < 100 else f"{x:.0f} {unit}"
    return f"{v:.0f} B"


def pct(v: float | None) -> str:
    """A share in percent: ``81%``, ``2.2%``, ``0.05%``, ``<0.01%``."""
    if _bad(v):
        return ""
    assert v is not None
    a = abs(v)
    if a == 0:
        return "0%"
    if a < 0.01:
        return "<0.01%"
    return f"{v:.0f}%" if a >= 10 else f"{v:.2g}%" if a < 1 else f"{v:.1f}%"


def gbps(v: float | None) -> str:
    """A bandwidth in GB/s."""
    return "" if _bad(v) else f"{v:.3g} GB/s"


def tflops(v: float | None) -> str:
    """A compute rate in TFLOP/s."""
    return "" if _bad(v) else f"{v:.3g} TFLOP/s"


def num(v: Any) -> str:
    """Any other cell: integers with separators, floats to 3 significant digits, lists joined,
    mappings as ``k=v`` pairs (never a JSON dump)."""
    if _bad(v):
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={num(x)}" for k, x in v.items())
    if isinstance(v, list | tuple):
        return ", ".join(num(x) if not isinstance(x, list) else f"[{num(x)}]" for x in v)
    return str(v)


def by_column(name: str, v: Any) -> str:
    """``v`` formatted by what its column name says it holds."""
    n = name.lower()
    if isinstance(v, int | float) and not isinstance(v, bool):
        if n.endswith("_us"):
            return us(v)
        if n.endswith("_ns"):
            return ns(v)
        if n in ("pct", "pct_span", "pct_of_peak", "saving_pct") or n.endswith("_pct"):
            return pct(v)
        if n == "bytes" or n.endswith(("_bytes", "allocated", "reserved", "fragmentation")):
            return nbytes(v)
        if n.endswith("gbps"):
            return gbps(v)
        if n.endswith("tflops"):
            return tflops(v)
    return num(v)


def header(name: str) -> str:
    """A column name without its unit suffix (the cells carry their units)."""
    for suffix in ("_us", "_ns", "_bytes"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name.replace("_", " ")


def clip_left(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters from the left (``…odels/bert/modeling.py:786``):
    the end of a path is the part that says where."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters with an ellipsis."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"
