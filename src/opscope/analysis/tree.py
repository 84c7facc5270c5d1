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

import contextlib
import functools
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from opscope.model import Profile, kinds

#: Walks up the parent links stop after this many steps (as ``hotspots.MAX_DEPTH``).
MAX_DEPTH = 256

#: Whether the analyses take their shortcuts on empty inputs (a profile without host ops: the
#: small Ascend exports hold only kernels): the empty tables they would compute, built from
#: their schemas without the queries (a fixed cost each, most of a small trace's report).
#: tests/test_report_speed_empty.py switches them off and checks every output is the same.
SHORTCUTS = True

SchemaKey = tuple[tuple[str, Any], ...]
"""A table's schema as a hashable key: ``tuple(schema.items())``."""


def schema_key(schema: Any) -> SchemaKey:
    """``schema`` (a mapping of column names to dtypes) as a :data:`SchemaKey`."""
    return tuple(schema.items())


def empty_frame(schema: SchemaKey) -> pl.DataFrame:
    """An empty frame of ``schema``: a copy of one made once per process (a frame from a
    schema is ~70 µs of Python each time, a fixed cost of every report on small traces)."""
    return _empty_frame(schema).clone()


@functools.cache
def _empty_frame(schema: SchemaKey) -> pl.DataFrame:
    return pl.DataFrame(schema=dict(schema))


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
        jumped = self._jump_up(has, include_self, max_depth)
        if jumped is not None:
            return jumped
        return self._walk_up(has, include_self=include_self, max_depth=max_depth)

    def _jump_up(self, has: BoolArray, include_self: bool, max_depth: int) -> IntArray | None:
        """:meth:`nearest_up` by pointer doubling: each round a gather of the whole forest that
        doubles the steps every event has gone (toward the root, stopping at an event with
        ``has``), so ``log2(depth)`` rounds, not one per level (3-4x faster on a 75k-event
        trace's host forest, 60 levels deep). None when some walk is not over within the
        largest power of two of steps inside ``max_depth`` (a deeper forest or a cycle): then
        the caller walks it, whose cut at ``max_depth`` this does not reproduce."""
        n = len(self)
        # from each event: itself where it has, else its parent; n stands for "left the set"
        # (a root's parent), where every walk that reaches it stays
        idx = np.arange(n, dtype=np.int64)
        jump = np.where(has, idx, np.where(self.parent >= 0, self.parent, n))
        jump = np.append(jump, n)
        mark = np.append(has, False)
        # without itself: its parent's answer, one step more
        cap = max_depth if include_self else max_depth - 1
        if cap < 1:
            return None
        steps = 1  # the steps every event has gone: the jumps cover this many
        while True:
            at = jump[:n]
            if bool(((at == n) | mark[at]).all()):
                break
            if 2 * steps > cap:
                return None
            jump = jump[jump]
            steps *= 2
        found = np.where(at == n, -1, at)
        if include_self:
            return found
        par = self.parent
        return np.where(par >= 0, found[np.maximum(par, 0)], -1) if n else found

    def _walk_up(
        self, has: BoolArray, *, include_self: bool = True, max_depth: int = MAX_DEPTH
    ) -> IntArray:
        """:meth:`nearest_up` one step up per pass, for every event not found yet."""
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
    """The position in ``ids`` of each wanted id (-1 where absent or null; the first position
    where ``ids`` repeats it)."""
    want = np.asarray(wanted, dtype=np.int64)
    n = len(ids)
    if n and len(want):
        lo = int(ids.min())
        span = int(ids.max()) - lo + 1
        # a table indexed by id when the ids are dense enough, as event ids are (row numbers:
        # any subset of them): a gather instead of a sort of every id and a binary search per
        # wanted one (~3 ms per forest on a 75k-event trace)
        if lo >= 0 and span <= 8 * (n + len(want)) + 4096:
            table = np.full(span, -1, dtype=np.int64)
            at = np.arange(n, dtype=np.int64)
            table[ids - lo] = at
            if (table[ids - lo] == at).all():  # no repeated id (else: the sort below)
                off = want - lo
                inside = (off >= 0) & (off < span) & ~np.asarray(null, dtype=bool)
                return np.where(inside, table[np.where(inside, off, 0)], -1)
    return _positions_sorted(ids, want, null)


def _positions_sorted(ids: IntArray, want: IntArray, null: Any) -> IntArray:
    """:func:`_positions` by a stable sort of ``ids`` and a binary search of each wanted id."""
    order = np.argsort(ids, kind="stable")
    keys = ids[order]
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
    """``series[at]``, null where ``at`` is -1, without a query (a Series' gather is one, of
    fixed cost; indexing by a NumPy array is none): a null appended and indexed for the -1s."""
    if len(at) and not bool((at >= 0).all()):
        series = pl.concat([series, pl.Series(series.name, [None], dtype=series.dtype)])
        at = np.where(at >= 0, at, len(series) - 1)
    return series[at]


def not_null(s: pl.Series) -> BoolArray:
    """Where a numeric column is not null, without a query (``is_not_null`` is one): from the
    float copy NumPy gets of a column with nulls (NaN there)."""
    if s.null_count() == 0:  # (a count Polars keeps: no query)
        return np.ones(len(s), dtype=bool)
    valid: BoolArray = ~np.isnan(s.to_numpy())
    return valid


def int_values(s: pl.Series) -> tuple[IntArray, BoolArray]:
    """(values as int64 with nulls read as 0, valid) of an integer column, without a query
    (``fill_null`` and ``is_not_null`` are each one, of fixed cost): the valid rows from
    :func:`not_null`, their exact values by a filter."""
    nulls = s.null_count()
    if nulls == 0:
        return s.to_numpy().astype(np.int64, copy=False), np.ones(len(s), dtype=bool)
    if nulls == len(s):  # (a column of no value: stream, launch on Ascend; nothing to read)
        return np.zeros(len(s), dtype=np.int64), np.zeros(len(s), dtype=bool)
    valid = not_null(s)
    out = np.zeros(len(s), dtype=np.int64)
    out[valid] = s.filter(pl.Series(valid)).to_numpy()
    return out, valid


def bool_values(s: pl.Series) -> tuple[BoolArray, BoolArray]:
    """(true, valid) of a Boolean column, without a query (``fill_null`` and ``is_not_null``
    are one each): NumPy's copy of a column with nulls is an object array of True, False and
    None."""
    if s.null_count() == 0:
        v: BoolArray = s.to_numpy().astype(bool, copy=False)
        return v, np.ones(len(s), dtype=bool)
    obj = s.to_numpy()
    true: BoolArray = np.equal(obj, True)
    return true, true | np.equal(obj, False)


def table_once(
    store: dict[str, pl.DataFrame],
    plan: pl.LazyFrame | pl.DataFrame,
    run: Callable[[pl.LazyFrame], pl.DataFrame],
) -> pl.DataFrame:
    """``plan``'s table, ``run`` the first time it is read and kept in ``store`` (a result's
    field that most of its readers never need: the result holds the plan, not the table)."""
    got = store.get("t")
    if got is None:
        # (two threads reading it at once each get the same table: no lock needed)
        got = plan if isinstance(plan, pl.DataFrame) else run(plan)
        store["t"] = got
    return got


# Per-profile memoisation -------------------------------------------------------------------------

R = TypeVar("R")
P = ParamSpec("P")


class Memo:
    """Values computed once per owner object, while it lives: the owner is the object whose
    identity the value depends on (a Profile; the rules key theirs on the events table), held by
    weak reference, so an id reused by a new object never reads a stale value.

    Thread-safe: threads asking for the same key together (a report's parts run on threads:
    :mod:`opscope.analysis.threads`) compute it once, under the key's :func:`memo_lock`; the
    others wait and then read it. At most ``size`` values are kept (the oldest go first)."""

    def __init__(self, size: int) -> None:
        self._values: dict[Hashable, tuple[weakref.ref[Any], Any]] = {}
        self._size = size

    def get(self, key: Hashable, owner: object, compute: Callable[[], R]) -> R:
        """``key``'s value for ``owner``, computed by ``compute()`` when not held."""
        hit = self._values.get(key)
        if hit is not None and hit[0]() is owner:
            val: R = hit[1]
            return val
        with memo_lock((id(self), key)):
            hit = self._values.get(key)  # computed by another thread while this one waited
            if hit is not None and hit[0]() is owner:
                val = hit[1]
                return val
            val = compute()
            for k in [k for k, (ref, _) in self._values.items() if ref() is None]:
                del self._values[k]
            while len(self._values) >= self._size:
                self._values.pop(next(iter(self._values)))
            self._values[key] = (weakref.ref(owner), val)
        return val


_MEMO = Memo(32)


def per_profile(fn: Callable[[Profile], R]) -> Callable[[Profile], R]:
    """Memoise ``fn(profile)`` while that Profile object lives (Profiles are immutable, so the
    result cannot go stale; a copy with other tables is another object and computes afresh)."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(profile: Profile) -> R:
        return _MEMO.get((name, id(profile)), profile, lambda: fn(profile))

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
        return _MEMO.get(key, profile, lambda: fn(profile, *args, **kwargs))

    return wrapper


class _KeyLock:
    """A key's lock and how many threads hold or wait for it (the entry lives while any do)."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


_LOCKS: dict[Hashable, _KeyLock] = {}
_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def memo_lock(key: Hashable) -> Iterator[None]:
    """Hold ``key``'s lock while a memo computes its value, so that threads asking for the same
    intermediate together (a report's parts run on threads: :mod:`opscope.analysis.threads`)
    compute it once: the others wait and then read it.

    One lock per key, not a fixed set shared by hashing: two threads each computing a value that
    needs the other's lock would wait for ever. A key's entry is counted by the threads that hold
    or wait for it and removed when the last one leaves, so the table holds only the keys in use
    and a held lock is never dropped (a bounded table emptied when full once let a second thread
    compute a value again while the first still held the dropped lock)."""
    with _LOCKS_GUARD:
        entry = _LOCKS.get(key)
        if entry is None:
            entry = _LOCKS[key] = _KeyLock()
        entry.users += 1
    try:
        with entry.lock:
            yield
    finally:
        with _LOCKS_GUARD:
            entry.users -= 1
            if entry.users == 0:
                del _LOCKS[key]


@per_profile
def host_forest(profile: Profile) -> tuple[IntArray, Forest]:
    """(rows, forest): the rows of ``profile.events`` that are host events (every kind but the
    device's, :data:`~opscope.model.kinds.DEVICE_KINDS`), in order, and their forest.

    Built once per Profile: hotspots' op times and attribution's resolution both walk it (each
    built it, a filter of the events and a forest each). Only positions are kept, not the
    rows' columns: a reader takes the columns it reads at ``rows``."""
    # one query (each Series method is one: a fixed cost each, most of a small trace's time)
    t = collect(
        profile.events.lazy()
        .select(
            pl.int_range(pl.len(), dtype=pl.Int64).alias("row"),
            "id",
            pl.col("parent_id").fill_null(-1).alias("parent"),
            pl.col("parent_id").is_null().alias("root"),
            "kind",
        )
        .filter(~pl.col("kind").is_in(kinds.DEVICE_KINDS))
    )
    ids = t.get_column("id").to_numpy().astype(np.int64, copy=False)
    parent = _positions(ids, t.get_column("parent").to_numpy(), t.get_column("root").to_numpy())
    return t.get_column("row").to_numpy(), Forest(ids, parent)
