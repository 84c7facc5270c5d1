"""The device-idle figure (:func:`opscope.advise.rules.overhead._idle_ns`) of a few kernels, in
Python over the columns' lists: its NumPy path's arrays, sorts and group scans were ~0.15 ms of
fixed cost on a profile of 15 kernels (tests/test_overhead_idle_numpy.py holds both paths to the
same reference)."""

from __future__ import annotations

from typing import Any

import polars as pl

#: Kernel tables of at most this many rows take the Python path (faster below it).
IDLE_PY_MAX_ROWS = 64


def idle_py(kern: pl.DataFrame, steps: pl.DataFrame) -> float:
    """The first rank's timed kernels (every timed one when no rank is known), per device (and
    step, when any of them has one: those without one dropped) in time order; before each but
    a group's first, the gap from the latest end so far (none right after a kernel of no end)
    to its start, clipped to its step's window (that step's first row of the rank); summed per
    device, the largest."""
    ts, rank, step, dur, device = (
        kern.get_column(c).to_list() for c in ("ts_ns", "rank", "step", "dur_ns", "device")
    )
    timed = [i for i, t in enumerate(ts) if t is not None]
    ranks = [rank[i] for i in timed if rank[i] is not None]
    r0 = min(ranks) if ranks else None
    mine = [i for i in timed if r0 is None or rank[i] == r0]
    stepped = any(step[i] is not None for i in mine)
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i in mine:
        if stepped and step[i] is None:
            continue
        dev = 0 if device[i] is None else device[i]
        groups.setdefault((dev, step[i]) if stepped else (dev,), []).append(i)
    windows = _windows(steps, r0) if stepped else {}
    per_device: dict[Any, int] = {}
    for key, rows in groups.items():
        rows.sort(key=ts.__getitem__)  # (stable: ties in row order)
        latest: int | None = None
        after_end = False
        idle = 0
        for i in rows:
            if after_end and latest is not None:
                lo, hi = latest, ts[i]
                w0, w1 = windows.get(step[i], (None, None))
                lo = lo if w0 is None else max(lo, w0)
                hi = hi if w1 is None else min(hi, w1)
                idle += max(hi - lo, 0)
            after_end = dur[i] is not None
            if after_end:
                end = ts[i] + dur[i]
                latest = end if latest is None else max(latest, end)
        per_device[key[0]] = per_device.get(key[0], 0) + idle
    return float(max(per_device.values())) if per_device else 0.0


def _windows(steps: pl.DataFrame, r0: Any) -> dict[Any, tuple[Any, Any]]:
    """Each step's window on rank ``r0`` (every rank when None), its first row's: (start, end),
    either None where unknown."""
    out: dict[Any, tuple[Any, Any]] = {}
    cols = (steps.get_column(c).to_list() for c in ("rank", "step", "ts_ns", "dur_ns"))
    for r, s, t, d in zip(*cols, strict=True):
        if (r0 is None or r == r0) and s is not None and s not in out:
            out[s] = (t, None if t is None or d is None else t + d)
    return out
