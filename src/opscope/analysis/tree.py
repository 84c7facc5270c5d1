"""The event tree as arrays, and per-profile memoisation of the intermediates analyses share.

:class:`Forest` answers the nesting questions of the core analyses (nearest ancestor or
descendant with a value, sums over descendants, "has an op above it") in vectorised NumPy, one
step up the parent links per pass: the cost is events × depth machine operations, not a
Polars join and sort of every (event, ancestor) pair, which dominated a report's time on real
traces (200k events: 1.8 s per attribution before, 0.1 s now). Like
:func:`opscope.analysis.hotspots.ancestor_pairs`, a walk stops after
:data:`~opscope.analysis.hotspots.MAX_DEPTH` steps, so a cycle in the parent links ends there.

:func:`per_profile` memoises a pure function of a Profile for as long as that Profile lives, so
the attribution that hotspots, attribution and memory all need is computed once per report.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from opscope.model import Profile

#: Walks up the parent links stop after this many steps (as ``hotspots.MAX_DEPTH``).
MAX_DEPTH = 256

#: Whether the analyses take their shortcuts on empty inputs (a profile without host ops: the
#: small Ascend exports hold only kernels): the empty tables they would compute, built from
#: their schemas without the queries (a fixed cost each, most of a small trace's report).
#: tests/test_report_speed_empty.py switches them off and checks every output is the same.
SHORTCUTS = True


def _eager_flags() -> pl.QueryOptFlags:
    flags = pl.QueryOptFlags.none()
    flags.simplify_expression = True
    return flags


#: The optimisations Polars' eager calls run with (none but expression simplification).
EAGER_FLAGS = _eager_flags()


def collect(plan: pl.LazyFrame) -> pl.DataFrame:
    """``plan`` run as the eager calls it replaces would run: the in-memory engine (the default
    streaming engine divides differently), the eager calls' optimisations only (the
    optimiser's passes over a plan of a dozen steps were ~20% of a small trace's query time).

    For plans over tables already cut to the columns and rows they read: without projection or
    predicate pushdown, a plan over the whole events table would copy every column."""
    return plan.collect(engine="in-memory", optimizations=EAGER_FLAGS)


def no_ops(profile: Profile) -> bool:
    """Whether ``profile`` has no host op (and the shortcuts are on)."""
    return SHORTCUTS and profile.ops.height == 0


IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Forest:
    """The parent links of a set of events, by position in that set.

    ``ids[i]`` is the event at position ``i``; ``parent[i]`` the position of its parent, or -1
    when it has none in the set (a parent outside the set ends the walk, as in
    :func:`~opscope.analysis.hotspots.ancestor_pairs`).
    """

    ids: IntArray
    parent: IntArray

    @classmethod
    def of(cls, events: pl.DataFrame) -> Forest:
        """The forest of ``events`` (columns ``id`` and ``parent_id``)."""
        ids = events.get_column("id").to_numpy().astype(np.int64, copy=False)
        par = events.get_column("parent_id")
        return cls(ids, _positions(ids, par.fill_null(-1).to_numpy(), par.is_null().to_numpy()))

    def __len__(self) -> int:
        return len(self.ids)

    def positions(self, ids: pl.Series) -> IntArray:
        """The position of each id in this forest (-1 for a null id or one not in it)."""
        if ids.null_count() == 0:
            # no nulls (a count Polars keeps: no query): the two Series queries below are a
            # fixed cost that showed on small traces, where this runs dozens of times a report
            return _positions(self.ids, ids.to_numpy(), np.zeros(len(ids), dtype=bool))
        return _positions(self.ids, ids.fill_null(-1).to_numpy(), ids.is_null().to_numpy())

    def nearest_up(
        self, has: BoolArray, *, include_self: bool = True, max_depth: int = MAX_DEPTH
    ) -> IntArray:
        """For each event, the position of its nearest ancestor (or itself, with
        ``include_self``) where ``has`` is true; -1 when none is within ``max_depth`` steps."""
        n = len(self)
        out = np.full(n, -1, dtype=np.int64)
        if include_self:
            out[has] = np.flatnonzero(has)
            todo = np.flatnonzero(~has)
        else:
            todo = np.arange(n, dtype=np.int64)
        cur = self.parent[todo]
        for _ in range(max_depth):
            live = cur >= 0
            todo, cur = todo[live], cur[live]
            if not len(todo):
                break
            hit = has[cur]
            out[todo[hit]] = cur[hit]
            todo, cur = todo[~hit], self.parent[cur[~hit]]
        return out

    def nearest_down(self, has: BoolArray, *, include_self: bool = True) -> IntArray:
        """For each event, the position of its nearest descendant (or itself, with
        ``include_self``) where ``has`` is true; among descendants equally near, the first in
        the set; -1 when none is within :data:`MAX_DEPTH`."""
        n = len(self)
        out = np.full(n, -1, dtype=np.int64)
        src = np.flatnonzero(has)
        if include_self:
            out[src] = src
        cur = self.parent[src]
        for _ in range(MAX_DEPTH):
            live = cur >= 0
            src, cur = src[live], cur[live]
            if not len(src):
                break
            # src is ascending, so np.unique's first index is the first descendant in the set
            first = np.unique(cur, return_index=True)[1]
            cand, at = src[first], cur[first]
            free = out[at] < 0
            out[at[free]] = cand[free]
            cur = self.parent[cur]
        return out

    def descendant_sum(self, values: IntArray) -> IntArray:
        """For each event, the sum of ``values`` over its descendants (not itself)."""
        n = len(self)
        out = np.zeros(n, dtype=np.int64)
        src = np.flatnonzero(values)
        w = values[src]
        cur = self.parent[src]
        for _ in range(MAX_DEPTH):
            live = cur >= 0
            w, cur = w[live], cur[live]
            if not len(cur):
                break
            np.add.at(out, cur, w)
            cur = self.parent[cur]
        return out

    def ancestor_pairs(
        self, start: IntArray, *, max_depth: int = MAX_DEPTH
    ) -> tuple[IntArray, IntArray, IntArray]:
        """(``start`` index, ancestor position, hops) for each of the positions ``start`` and
        each of its ancestors up to ``max_depth`` hops (itself not included)."""
        idx = np.arange(len(start), dtype=np.int64)
        cur = np.where(start >= 0, self.parent[np.maximum(start, 0)], -1) if len(self) else start
        parts: list[tuple[IntArray, IntArray, IntArray]] = []
        for hop in range(1, max_depth + 1):
            live = cur >= 0
            idx, cur = idx[live], cur[live]
            if not len(idx):
                break
            parts.append((idx, cur, np.full(len(idx), hop, dtype=np.int64)))
            cur = self.parent[cur]
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        return (
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]),
        )

    def has_ancestor(self, mask: BoolArray) -> BoolArray:
        """For each event, whether any ancestor (not itself) within :data:`MAX_DEPTH` has
        ``mask``."""
        return self.nearest_up(mask, include_self=False) >= 0


def _positions(ids: IntArray, wanted: Any, null: Any) -> IntArray:
    """The position in ``ids`` of each wanted id (-1 where absent or null)."""
    order = np.argsort(ids, kind="stable")
    keys = ids[order]
    want = np.asarray(wanted, dtype=np.int64)
    at = np.searchsorted(keys, want)
    at_c = np.minimum(at, max(len(keys) - 1, 0))
    found = (
        (at < len(keys)) & (keys[at_c] == want) & ~np.asarray(null, dtype=bool)
        if len(keys)
        else np.zeros(len(want), dtype=bool)
    )
    out = np.full(len(want), -1, dtype=np.int64)
    out[found] = order[at_c[found]]
    return out


def gather(series: pl.Series, at: IntArray) -> pl.Series:
    """``series[at]``, null where ``at`` is -1."""
    if not len(series):
        return pl.Series(series.name, [None] * len(at), dtype=series.dtype)
    ok = at >= 0
    if bool(ok.all()):
        return series.gather(pl.Series(at, dtype=pl.Int64))  # nothing to null
    # a null index gathers a null: the index masked where -1 (a gather, not a gather and then
    # a query to null those rows: a fixed cost that showed on small traces)
    idx = np.ma.masked_array(np.where(ok, at, 0), mask=~ok)
    return series.gather(pl.Series(idx, dtype=pl.Int64))


# Per-profile memoisation -------------------------------------------------------------------------

R = TypeVar("R")
P = ParamSpec("P")

_MEMO: dict[tuple[Any, ...], tuple[weakref.ref[Profile], Any]] = {}
_MEMO_MAX = 32


def per_profile(fn: Callable[[Profile], R]) -> Callable[[Profile], R]:
    """Memoise ``fn(profile)`` while that Profile object lives (Profiles are immutable, so the
    result cannot go stale; a copy with other tables is another object and computes afresh)."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(profile: Profile) -> R:
        return _memoised((name, id(profile)), profile, lambda: fn(profile))

    return wrapper


def per_profile_args(
    fn: Callable[Concatenate[Profile, P], R],
) -> Callable[Concatenate[Profile, P], R]:
    """:func:`per_profile` for a function of a Profile and more arguments, which must be
    hashable: one result per Profile and arguments (roofline per device name)."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(profile: Profile, /, *args: P.args, **kwargs: P.kwargs) -> R:
        key = (name, id(profile), args, tuple(sorted(kwargs.items())))
        return _memoised(key, profile, lambda: fn(profile, *args, **kwargs))

    return wrapper


def _memoised(key: tuple[Any, ...], profile: Profile, compute: Callable[[], R]) -> R:
    hit = _MEMO.get(key)
    if hit is not None and hit[0]() is profile:
        val: R = hit[1]
        return val
    val = compute()
    for k in [k for k, (ref, _) in _MEMO.items() if ref() is None]:
        del _MEMO[k]
    while len(_MEMO) >= _MEMO_MAX:
        _MEMO.pop(next(iter(_MEMO)))
    _MEMO[key] = (weakref.ref(profile), val)
    return val
