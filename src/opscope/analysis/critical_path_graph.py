"""The graph of the critical path (:mod:`opscope.analysis.critical_path` says what its nodes and
edges are): each thread's host nodes, the cross-thread waits, the device nodes, and the lane,
launch, copy, sync and wait edges, built over the events' columns in NumPy (a few Polars queries
a profile: the per-thread and per-step queries they replace were a fixed cost of every report).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import polars as pl

from opscope.analysis import tree
from opscope.model import Profile, kinds

# Host calls that block until device work is done (Ascend names carry an "AscendCL@" prefix and
# may end in "WithTimeout"). cudaStreamWaitEvent is not one: it makes a stream wait, not the host.
SYNC_PATTERN: Final = (
    r"(?:^|@)(?:(?:cuda|hip)(?:Device|Stream|Event)Synchronize"
    r"|aclrtSynchronize(?:Stream|Device|Event)\w*"
    r"|(?:cudaMemcpy|hipMemcpy|aclrtMemcpy))$"
)
_DEVICE_KINDS: Final = kinds.DEVICE_WORK

#: Host kinds whose slices say a thread runs an operator. Python frames and annotations are
#: not: with ``with_stack`` a frame such as ``runpy._run_module_as_main`` covers the whole run,
#: so its time outside any operator (Python code, waits) would go to the next op.
_TRACKED: Final = ("cpu_op", "runtime", "driver")
#: A runtime copy: blocking when its copy ends before the call returns (a D2H copy to pageable
#: memory, ``.item()``, ``.cpu()``): the host waited for that copy and the work queued before it.
COPY_CALL: Final = r"(?:^|@)(?:cuda|hip|aclrt)Memcpy\w*$"
#: ``op`` of the explicit segments of a host thread's empty time.
IDLE_OP: Final = "(host idle/untracked: no op running)"
_NO_NODE: Final = np.iinfo(np.int64).min

_NODE_SCHEMA: Final = {
    "rank": pl.Int32, "step": pl.Int32, "id": pl.Int64, "lane_kind": pl.String,
    "lane": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "op_id": pl.Int64,
    "name": pl.String, "is_sync": pl.Boolean, "is_wait": pl.Boolean,
}  # fmt: skip


def dense_unique(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)`` of non-negative integers: by a table over their
    range where it is a few times their number (a sort was ~0.3 ms on 38k values), else
    ``np.unique`` (the same values either way)."""
    i64 = np.int64
    x = np.asarray(x, dtype=i64)
    if not len(x):
        return x, x
    span = int(x.max()) + 1
    if span > DENSE_SPAN * len(x) + 4096:
        u, inv = np.unique(x, return_inverse=True)
        return u, inv.reshape(-1).astype(i64)
    seen = np.zeros(span, dtype=bool)
    seen[x] = True
    return np.flatnonzero(seen).astype(i64), (np.cumsum(seen) - 1)[x].astype(i64)


#: :func:`dense_unique` reads a table of up to this many entries per value (and 4096 more).
DENSE_SPAN = 4


def a_row_of_each(inv: np.ndarray) -> np.ndarray:
    """A row of each value of ``inv`` (the codes ``0..k-1`` of :func:`dense_unique`): any one,
    the values being read from it are equal on all its rows."""
    row = np.empty(int(inv.max()) + 1 if len(inv) else 0, dtype=np.int64)
    row[inv] = np.arange(len(inv), dtype=np.int64)
    return row


def _empty(schema: dict[str, Any]) -> pl.DataFrame:
    """An empty table of ``schema`` (made once per process: ~45 us each time)."""
    return tree.empty_frame(tree.schema_key(schema))


def _int_column(df: pl.DataFrame, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    """A column's values as int64 (nulls as 0) and its null mask (None without a null: no
    Series query then)."""
    s = df.get_column(name)
    if not s.null_count():
        return s.to_numpy().astype(np.int64), None
    # with nulls: NumPy's float copy (NaN for null, no query), exact below 2**(mantissa + 1)
    f = s.to_numpy()
    if f.dtype.kind == "f":
        null = np.isnan(f)
        v = np.where(null, 0, f)
        if not len(v) or np.abs(v).max() < 2.0 ** (np.finfo(f.dtype).nmant + 1):
            return v.astype(np.int64), null
    return s.fill_null(0).to_numpy().astype(np.int64), s.is_null().to_numpy()


def _flag(s: pl.Series) -> np.ndarray:
    """A Boolean column as a NumPy mask, null as False (no query)."""
    return tree.bool_values(s)[0]


def _clip(x: np.ndarray, lo: int, hi: int | None) -> np.ndarray:
    """``np.clip(x, lo, hi)`` for integers (np.clip's generic loop was ~10 ms of a 75k-event
    trace's nodes)."""
    x = np.maximum(x, lo)
    return x if hi is None else np.minimum(x, hi)


def _distinct(x: np.ndarray) -> np.ndarray:
    """``np.unique(x)``: by a sort (NumPy's hash table was ~1 ms per call on 25k values), and
    without one for the few values of a thread key column."""
    if len(x) == 0:
        return x
    seen: list[Any] = []
    rest = x
    while len(rest) and len(seen) < 8:  # a column of a few values: a pass per value
        seen.append(rest[0])
        rest = rest[rest != rest[0]]
    if not len(rest):
        return np.sort(np.array(seen, dtype=x.dtype))
    y = np.sort(x)
    return y[np.concatenate(([True], y[1:] != y[:-1]))]


_Column = tuple[np.ndarray, "np.ndarray | None"]


def _thread_codes(
    calls: pl.DataFrame, slices: pl.DataFrame
) -> tuple[np.ndarray, np.ndarray, list[tuple[Any, ...]]]:
    """A code per thread (rank, pid, tid; a null is a value of its own, as the semi join with
    ``nulls_equal`` matched it) of each call and each slice (-1: a thread with no call), and
    each code's key as Polars gives it (None for a null)."""
    thread = ("rank", "pid", "tid")
    return _thread_codes_of(
        [_int_column(calls, c) for c in thread], [_int_column(slices, c) for c in thread]
    )


def _thread_codes_of(
    calls: list[_Column], slices: list[_Column]
) -> tuple[np.ndarray, np.ndarray, list[tuple[Any, ...]]]:
    """:func:`_thread_codes` of the thread columns as (values, null mask) arrays."""
    i64 = np.int64
    c_code = np.zeros(len(calls[0][0]), dtype=i64)
    s_code = np.zeros(len(slices[0][0]), dtype=i64)
    s_ok = np.ones(len(s_code), dtype=bool)
    uniq: list[np.ndarray] = []
    for (cv, cn0), (sv, sn) in zip(calls, slices, strict=True):
        cn = cn0 if cn0 is not None and cn0.any() else None  # (a call of null key: a key)
        u = _distinct(cv if cn is None else cv[~cn])
        null_code = len(u)  # after every value
        c = np.searchsorted(u, cv)
        if cn is not None:
            c[cn] = null_code
        j = _clip(np.searchsorted(u, sv), 0, max(len(u) - 1, 0))
        s = np.where(u[j] == sv, j, -1) if len(u) else np.full(len(sv), -1, dtype=i64)
        if sn is not None:
            s[sn] = null_code if cn is not None else -1
        s_ok &= s >= 0
        c_code = c_code * (len(u) + 1) + c
        s_code = s_code * (len(u) + 1) + s
        uniq.append(u)
    s_code[~s_ok] = -1
    # each code's key, decoded (only the codes of calls: few threads)
    keys = []
    for code in _distinct(c_code).tolist():
        key: list[Any] = []
        rest = code
        for u in reversed(uniq):
            rest, c = divmod(rest, len(u) + 1)
            key.append(int(u[c]) if c < len(u) else None)
        keys.append(tuple(reversed(key)))
    return c_code, s_code, keys


@dataclass(frozen=True)
class _Kinds:
    """Where the events are of each kind the graph reads (a null kind: none)."""

    call: np.ndarray  # runtime and driver calls
    device: np.ndarray  # device work (_DEVICE_KINDS)
    tracked: np.ndarray  # what a host thread runs (_TRACKED)
    op: np.ndarray  # operators (cpu_op)

    @classmethod
    def of(cls, kind: pl.Series) -> _Kinds:
        """The masks from the codes of the kind's Enum (one small query: a Series' is_in was
        one per group), else by comparisons (no query each)."""
        groups = (("runtime", "driver"), _DEVICE_KINDS, _TRACKED, ("cpu_op",))
        if isinstance(kind.dtype, pl.Enum):
            cats = kind.dtype.categories.to_list()
            codes, known = tree.int_values(kind.to_physical())
            # each code's groups as bits (a null: the last entry, in no group), read by one
            # take (a fancy index of a table per group was ~4x slower)
            bits = [sum(1 << i for i, g in enumerate(groups) if c in g) for c in cats]
            at = np.take(np.array([*bits, 0], dtype=np.uint8), np.where(known, codes, len(cats)))
            masks = [(at & (1 << i)) != 0 for i in range(len(groups))]
        else:
            none = np.zeros(len(kind), dtype=bool)
            masks = [np.logical_or.reduce([none, *(_flag(kind == k) for k in g)]) for g in groups]
        return cls(*masks)


_SYNC_RE: Final = re.compile(SYNC_PATTERN.replace("$", r"\Z"))
_COPY_RE: Final = re.compile(COPY_CALL.replace("$", r"\Z"))


def call_names(names: pl.Series) -> tuple[pl.Series, pl.Series]:
    """Of the distinct runtime call ``names``, those that :data:`SYNC_PATTERN` and
    :data:`COPY_CALL` find (``str.contains`` on the name, a null read as ""). In Python on an
    ASCII name, where Python's ``re`` reads the patterns as Polars' regex engine does (``$`` as
    the end of the text: ``\\Z``; ``\\w`` as ``[A-Za-z0-9_]``); any other name by Polars' own
    ``str.contains`` (a query, only then)."""
    text = [n for n in names.to_list() if n is not None]
    plain = [n for n in text if n.isascii()]
    other = pl.Series([n for n in text if not n.isascii()], dtype=pl.String)
    out = []
    for rx, pattern in ((_SYNC_RE, SYNC_PATTERN), (_COPY_RE, COPY_CALL)):
        hits = [n for n in plain if rx.search(n) is not None]
        if other.len():
            hits += other.filter(other.str.contains(pattern)).to_list()
        out.append(pl.Series(hits, dtype=pl.String))
    return out[0], out[1]


def _host_nodes(
    ev: pl.DataFrame,
    steps: pl.DataFrame,
    coverage: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
    kinds: _Kinds | None = None,
) -> pl.DataFrame:
    """Host nodes of the threads that make runtime calls (see the module doc).

    Per thread, the time from the previous call's end (or the step's start) to the end of call
    *i* is cut where the thread was doing nothing tracked (no operator or runtime call
    covers it): those gaps become explicit idle nodes (ids < 0, ``op`` :data:`IDLE_OP`), never
    part of the next op. The tracked piece just before the call is its node (the call's id and
    op); earlier tracked pieces are nodes of the top-level slice running at their end. A
    synchronising call is its own node from its start, so that the host work before it keeps
    its time when the wait is handed to the device.

    ``coverage``, when given, receives :func:`_rank_coverage` of ``ev`` from the tracked slices
    read here (when there is a runtime call: else no node has a gap to cut). ``kinds``:
    :class:`_Kinds` of ``ev`` when known.
    """
    i64 = np.int64
    # the calls and tracked slices as rows of the events' columns in NumPy, in their defined
    # orders (the filters, name patterns and flags were two queries of fixed cost)
    if kinds is None:
        kinds = _Kinds.of(ev.get_column("kind"))
    is_copy_kind, is_tracked = kinds.device, kinds.tracked
    rt = np.flatnonzero(kinds.call)
    if not len(rt):
        # no runtime call (a trace of device work only; a CPU-only one): no node
        return _empty(_NODE_SCHEMA)
    n = len(rt)
    ev_id = ev.get_column("id").to_numpy().astype(i64)
    ev_ts, ts_null = _int_column(ev, "ts_ns")
    ev_dur, dur_null = _int_column(ev, "dur_ns")
    ev_end = ev_ts + ev_dur
    cid, ts, end = ev_id[rt], ev_ts[rt], ev_end[rt]
    tr = np.flatnonzero(is_tracked)
    thread = [_int_column(ev, c) for c in ("rank", "pid", "tid")]
    c_code, s_code, keys = _thread_codes_of(
        [(v[rt], None if null is None else null[rt]) for v, null in thread],
        [(v[tr], None if null is None else null[tr]) for v, null in thread],
    )
    t_ts, t_end, t_id = ev_ts[tr], ev_end[tr], ev_id[tr]
    # the calls by (start, id); the slices of threads with calls by (start, end descending,
    # id): a slice before those it encloses, so that of slices starting together the outermost
    # is the top-level one (the ids, numbered in trace order, break the remaining ties)
    c_order = np.lexsort((cid, ts))
    mine = np.flatnonzero(s_code >= 0)
    s_order = mine[np.lexsort((t_id[mine], -t_end[mine], t_ts[mine]))]
    # which calls sync or copy: the patterns on the distinct names (a handful), each call's
    # flags by its name's code (the regexes in a query were compiled there each time)
    rt_name = ev.get_column("name")[rt]
    code, known = tree.int_values(rt_name.cast(pl.Categorical).to_physical())
    code = np.where(known, code + 1, 0)  # (a null name: a code of its own)
    _, inv = dense_unique(code)
    distinct = rt_name[a_row_of_each(inv)]
    sync_names, copy_names = (set(x.to_list()) for x in call_names(distinct))
    texts = distinct.to_list()
    sync = np.array([x in sync_names for x in texts], dtype=bool)[inv]
    copy = np.array([x in copy_names for x in texts], dtype=bool)[inv]
    # a copy call blocked when its (last-ending) copy ends before the call returns (a copy of
    # unknown end: none, as the max of the group_by skipped it)
    launch, no_launch = _int_column(ev, "launch_id")
    cp_ok = is_copy_kind if no_launch is None else is_copy_kind & ~no_launch
    for null in (ts_null, dur_null):
        if null is not None:
            cp_ok = cp_ok & ~null
    copies = np.flatnonzero(cp_ok)
    copy_end = np.full(n, np.iinfo(i64).min, dtype=i64)
    if len(copies):
        at = positions(cid, launch[copies])
        np.maximum.at(copy_end, at[at >= 0], ev_end[copies][at >= 0])
    blocking = copy & (copy_end > np.iinfo(i64).min)
    wait = sync | (blocking & (copy_end <= end))
    ev_step, ev_step_null = _int_column(ev, "step")
    step = ev_step[rt]
    step_null = None if ev_step_null is None or not ev_step_null[rt].any() else ev_step_null[rt]
    ev_op, ev_op_null = _int_column(ev, "op_id")
    op = ev_op[rt]
    op_null = None if ev_op_null is None or not ev_op_null[rt].any() else ev_op_null[rt]
    # the step starts of the rank, by step
    step_start: dict[tuple[Any, Any], int] = {
        k: t
        for k, t in zip(
            zip(
                steps.get_column("rank").to_list(), steps.get_column("step").to_list(), strict=True
            ),
            steps.get_column("ts_ns").to_list(),
            strict=True,
        )
        if t is not None and k[1] is not None
    }
    # threads in the order of their first call by start time, each thread's calls and slices
    # in that order (the partitions of the frames sorted by start time)
    if coverage is not None:  # (the rank coverage of the same slices: no query of its own)
        pos = ev_dur[tr] > 0 if dur_null is None else (ev_dur[tr] > 0) & ~dur_null[tr]
        coverage.update(_coverage(thread[0][0][tr][pos], t_ts[pos], t_end[pos]))
    codes = _distinct(c_code)
    code_ix = np.searchsorted(codes, c_code)  # keys[i] is the code's key
    by_thread = np.argsort(code_ix[c_order], kind="stable")
    c_rows = c_order[by_thread]
    c_cut = np.searchsorted(code_ix[c_rows], np.arange(len(keys) + 1))
    s_ix = np.searchsorted(codes, s_code[s_order])
    s_rows = s_order[np.argsort(s_ix, kind="stable")]
    s_cut = np.searchsorted(np.sort(s_ix), np.arange(len(keys) + 1))
    # a thread's first call in the sorted order: the threads' order
    first_at = np.full(len(keys), n, dtype=i64)
    np.minimum.at(first_at, code_ix[c_order], np.arange(n, dtype=i64))
    parts: list[dict[str, np.ndarray]] = []
    next_id = -1
    for ix in np.argsort(first_at, kind="stable").tolist():
        key = keys[ix]
        sl = s_rows[s_cut[ix] : s_cut[ix + 1]]
        rank = int(key[0]) if key[0] is not None else -1
        tid = int(key[2]) if key[2] is not None else -1
        part = _thread_host_nodes(
            c_rows[c_cut[ix] : c_cut[ix + 1]], cid, ts, end, step, step_null, op, op_null,
            sync, wait, t_ts[sl], t_end[sl], t_id[sl],
            sorted((s, t) for (r, s), t in step_start.items() if r == rank), next_id,
        )  # fmt: skip
        part["rank"] = np.full(len(part["id"]), rank, dtype=np.int32)
        part["lane"] = np.full(len(part["id"]), tid, dtype=i64)
        next_id -= int((part["id"] < 0).sum())
        parts.append(part)
    col = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    names = pl.concat([rt_name, pl.Series(["", "(idle)"], dtype=pl.String)])
    step_s = pl.Series("step", step[col["call"]], dtype=pl.Int32)
    if step_null is not None and step_null[col["call"]].any():
        step_s = step_s.set(pl.Series(step_null[col["call"]]), None)
    op_s = pl.Series("op_id", col["op_id"], dtype=pl.Int64)
    if col["op_null"].any():
        op_s = op_s.set(pl.Series(col["op_null"]), None)
    return pl.DataFrame(
        {
            "rank": col["rank"],
            "step": step_s,
            "id": col["id"],
            "lane_kind": pl.Series(["host"], dtype=pl.String).new_from_index(0, len(col["id"])),
            "lane": col["lane"],
            "start_ns": col["start_ns"],
            "end_ns": col["end_ns"],
            "op_id": op_s,
            "name": names[col["name_row"]],  # (indexing: a gather with no query)
            "is_sync": col["is_sync"],
            "is_wait": col["is_wait"],
        },
        schema=_NODE_SCHEMA,
    )


def _thread_host_nodes(
    rows: np.ndarray,
    cid_all: np.ndarray,
    ts_all: np.ndarray,
    end_all: np.ndarray,
    step_all: np.ndarray,
    step_null_all: np.ndarray | None,
    op_all: np.ndarray,
    op_null_all: np.ndarray | None,
    sync_all: np.ndarray,
    wait_all: np.ndarray,
    t0: np.ndarray,
    t1: np.ndarray,
    sid: np.ndarray,
    step_start: list[tuple[int, int]],
    first_id: int,
) -> dict[str, np.ndarray]:
    """The host nodes of one thread (see :func:`_host_nodes`), as arrays: the time before each
    call is cut at every boundary of the thread's coverage (union of tracked slices) and at
    every top-level slice start; each piece is untracked (an idle node) or tracked (a node of
    the top-level slice running at its start), and the last tracked piece is the call's own.

    ``rows``: the thread's calls (positions in the ``*_all`` arrays) in start order; ``t0``,
    ``t1``, ``sid``: its tracked slices in start order; ``step_start``: (step, start) of the
    rank's steps, sorted. Returns the columns, ``row`` being the call of each node (or ``n``,
    ``n + 1`` for the names "" and "(idle)" of pieces, ``n`` the number of calls of all
    threads)."""
    i64 = np.int64
    n_all = len(cid_all)
    # coverage: union of tracked slices (in start order), and the top-level slices
    reach = np.maximum.accumulate(t1) if len(t1) else t1
    before = np.concatenate(([np.iinfo(i64).min], reach[:-1])) if len(t1) else t1
    top = t0 >= before  # starts outside the slices seen so far
    new_seg = t0 > before
    seg_s = t0[new_seg]
    last_of_seg = np.concatenate((np.flatnonzero(new_seg)[1:] - 1, [len(t0) - 1]))
    seg_e = reach[last_of_seg] if len(seg_s) else seg_s
    top_ts = t0[top]
    top_id = sid[top]
    bounds = _distinct(np.concatenate((seg_s, seg_e, top_ts)))

    n = len(rows)
    cid = cid_all[rows]
    ts = ts_all[rows]
    end = end_all[rows]
    sn = step_all[rows]
    op = op_all[rows]
    op_null = np.zeros(n, dtype=bool) if op_null_all is None else op_null_all[rows]
    sync = sync_all[rows]
    wait = wait_all[rows]
    # start: the previous call of the same step's end, else the step's start, else the call
    sv = np.array([s for s, _ in step_start], dtype=i64)
    tv = np.array([t for _, t in step_start], dtype=i64)
    j = _clip(np.searchsorted(sv, sn), 0, max(len(sv) - 1, 0))
    start = np.where(sv[j] == sn, tv[j], ts) if len(sv) else ts.copy()
    if step_null_all is not None:
        s_null = step_null_all[rows]
        start[s_null] = ts[s_null]  # a call outside every step: from its own start
        # a null step is a group of its own: a code no step has
        codes = np.where(s_null, (sn.min() if n else 0) - 1, sn)
    else:
        codes = sn
    if n:
        order = np.lexsort((np.arange(n), codes))
        same = codes[order][1:] == codes[order][:-1]
        start[order[1:][same]] = end[order[:-1][same]]
    start = np.minimum(start, ts)

    # pieces of [start, ts): cut at every bound strictly inside
    lo = np.searchsorted(bounds, start, side="right")
    hi = np.searchsorted(bounds, ts, side="left")
    count = np.where(start < ts, np.maximum(hi - lo, 0) + 1, 0)
    call_of = np.repeat(np.arange(n), count)
    first = np.cumsum(count) - count
    k = np.arange(len(call_of)) - first[call_of]  # piece number within its call
    inner = _clip(lo[call_of] + k - 1, 0, max(len(bounds) - 1, 0))
    pa = np.where(k == 0, start[call_of], bounds[inner] if len(bounds) else start[call_of])
    is_last = k == count[call_of] - 1
    inner_b = _clip(lo[call_of] + k, 0, max(len(bounds) - 1, 0))
    pb = np.where(is_last, ts[call_of], bounds[inner_b] if len(bounds) else ts[call_of])
    seg = np.searchsorted(seg_e, pa, side="right")
    tracked = np.zeros(len(pa), dtype=bool)
    ok = seg < len(seg_s)
    tracked[ok] = seg_s[seg[ok]] <= pa[ok]
    j = np.searchsorted(top_ts, pa, side="right") - 1
    p_op = np.where(j >= 0, top_id[np.maximum(j, 0)] if len(top_id) else 0, op[call_of])
    p_null = np.where(j >= 0, False, op_null[call_of])
    # the last tracked piece belongs to the call; a waiting call keeps it as its own node
    tail = is_last & tracked
    call_start = ts.copy()
    no_wait_tail = tail & ~wait[call_of]
    call_start[call_of[no_wait_tail]] = pa[no_wait_tail]
    keep = ~no_wait_tail
    wait_tail = tail & wait[call_of]
    p_op = np.where(wait_tail, op[call_of], p_op)
    p_null = np.where(wait_tail, op_null[call_of], p_null)
    kind = np.where(tracked, 1, 2)  # 0 call, 1 tracked piece, 2 idle

    # rows: each call's pieces in order, then the call
    row_call = np.concatenate((call_of[keep], np.arange(n)))
    order = np.argsort(row_call, kind="stable")
    row_call = row_call[order]
    rkind = np.concatenate((kind[keep], np.zeros(n, dtype=i64)))[order]
    is_piece = rkind != 0
    rid = cid[row_call]
    rid[is_piece] = first_id - np.arange(int(is_piece.sum()), dtype=i64)
    call = rows[row_call]
    return {
        "call": call,
        "name_row": np.where(rkind == 0, call, n_all + rkind - 1),
        "id": rid,
        "start_ns": np.concatenate((pa[keep], call_start))[order],
        "end_ns": np.concatenate((pb[keep], end))[order],
        "op_id": np.concatenate((p_op[keep], op))[order],
        "op_null": np.concatenate((p_null[keep] | (kind[keep] == 2), op_null))[order],
        "is_sync": sync[row_call] & ~is_piece,
        "is_wait": wait[row_call] & ~is_piece,
    }


def _rank_coverage(ev: pl.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per rank, the union of every host thread's tracked slices of positive length (touching
    slices merge), as sorted, disjoint ``(starts, ends)``."""
    tr = (
        ev.lazy()
        .filter(pl.col("kind").is_in(list(_TRACKED)) & (pl.col("dur_ns") > 0))
        .select("rank", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("e"))
        .pipe(tree.collect)
    )
    return _coverage(
        tr.get_column("rank").to_numpy(),
        tr.get_column("ts_ns").to_numpy().astype(np.int64),
        tr.get_column("e").to_numpy().astype(np.int64),
    )


def _coverage(
    rank: np.ndarray, ts: np.ndarray, e: np.ndarray
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """:func:`_rank_coverage` of slices ``[ts, e)`` of positive length, in any order (the union
    does not depend on the order of equal starts)."""
    # the merge in NumPy per rank (a running max of ends; a segment starts past it): the window
    # and group_by queries it replaces were 6 ms on a 75k-event trace
    order = np.lexsort((ts, rank))
    rank, ts, e = rank[order], ts[order], e[order]
    cuts = (np.flatnonzero(rank[1:] != rank[:-1]) + 1).tolist()
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for lo, hi in zip([0, *cuts], [*cuts, len(ts)], strict=True):
        if lo == hi:
            continue
        t = ts[lo:hi]
        reach = np.maximum.accumulate(e[lo:hi])
        new = np.ones(len(t), dtype=bool)
        new[1:] = t[1:] > reach[:-1]
        first = np.flatnonzero(new)
        last = np.append(first[1:] - 1, len(t) - 1)
        out[int(rank[lo])] = (t[first], reach[last])
    return out


def _cross_thread_waits(
    host: pl.DataFrame,
    ev: pl.DataFrame,
    cover: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Cut the idle nodes of ``host`` (:func:`_host_nodes`' table, in its row order) at the time
    other host threads of the rank run tracked work: then the thread waits on them, not idles.

    Returns the host nodes with each idle node replaced by its uncovered pieces (new ids < 0),
    and its **covered stretches** ``[c, d)`` (rank, step, lane) with ``dst``: the thread's node
    after the stretch (its next uncovered piece, else the node after the idle node); see
    :func:`_stretch_edges`. ``cover``: :func:`_rank_coverage` of ``ev`` when known.
    """
    i64 = np.int64
    stretch_schema = {"rank": pl.Int32, "step": pl.Int32, "lane": pl.Int64, "c": pl.Int64,
                      "d": pl.Int64, "dst": pl.Int64}  # fmt: skip
    if tree.SHORTCUTS and host.height == 0:  # no host node, no gap to cut (device work only)
        return host, _empty(stretch_schema)
    name = host.get_column("name")
    is_idle = _flag(name == "(idle)")
    if not is_idle.any():
        return host, _empty(stretch_schema)
    # (a node of no name is neither idle nor kept, as the filters on the name dropped it)
    kept = ~is_idle & ~name.is_null().to_numpy() if name.null_count() else ~is_idle
    ids = host.get_column("id").to_numpy().astype(i64)
    starts = host.get_column("start_ns").to_numpy().astype(i64)
    ends = host.get_column("end_ns").to_numpy().astype(i64)
    # each node's next node of its thread and step, in row order (as shift(-1).over(rank, lane,
    # step) gave it; the queries per rank it replaces were ~16 per report)
    keys: list[np.ndarray] = []
    for c in ("rank", "lane", "step"):
        v, null = _int_column(host, c)
        keys += [v] if null is None else [v, null]
    n = len(ids)
    order = np.lexsort([np.arange(n), *keys[::-1]])
    same = np.ones(max(n - 1, 0), dtype=bool)
    for k in keys:
        same &= k[order][1:] == k[order][:-1]
    nxt_all = np.full(n, _NO_NODE, dtype=i64)
    nxt_all[order[:-1][same]] = ids[order[1:][same]]
    rank_all = keys[0]
    if cover is None:
        cover = _rank_coverage(ev)
    next_id = min(int(ids.min()), 0) - 1
    idle_rows = np.flatnonzero(is_idle)
    out_rows = [np.flatnonzero(kept)]
    out_id, out_a, out_b = [ids[out_rows[0]]], [starts[out_rows[0]]], [ends[out_rows[0]]]
    st_rows: list[np.ndarray] = []
    st_c: list[np.ndarray] = []
    st_d: list[np.ndarray] = []
    st_dst: list[np.ndarray] = []
    idle_rank = rank_all[idle_rows]
    # the ranks in order of their first idle node
    _, first = np.unique(idle_rank, return_index=True)
    for r in idle_rank[np.sort(first)].tolist():
        g = idle_rows[idle_rank == r]
        seg_s, seg_e = cover.get(int(r), (np.empty(0, i64), np.empty(0, i64)))
        a = starts[g]
        b = ends[g]
        # (an idle node always precedes a node of its thread and step: the null is defensive)
        nxt = nxt_all[g]
        # covered stretches of each idle node: the coverage segments overlapping (a, b), clipped
        lo = np.searchsorted(seg_e, a, side="right")
        m = np.maximum(np.searchsorted(seg_s, b, side="left") - lo, 0)
        s_off = np.cumsum(m) - m
        s_node = np.repeat(np.arange(len(g)), m)
        j = np.arange(len(s_node)) - s_off[s_node] + lo[s_node]
        c = np.maximum(seg_s[j], a[s_node])
        d = np.minimum(seg_e[j], b[s_node])
        # uncovered pieces: [a, c0), [d0, c1), ..., [d(m-1), b); piece k follows stretch k-1
        p_node = np.repeat(np.arange(len(g)), m + 1)
        k = np.arange(len(p_node)) - (np.cumsum(m + 1) - (m + 1))[p_node]
        si = s_off[p_node] + k  # the stretch after piece k (if k < m)
        pa = np.where(k == 0, a[p_node], d[_clip(si - 1, 0, None)] if len(d) else 0)
        pb = np.where(
            k == m[p_node], b[p_node], c[_clip(si, 0, max(len(c) - 1, 0))] if len(c) else 0
        )
        keep = pa < pb
        pid = np.zeros(len(pa), dtype=i64)
        pid[keep] = next_id - np.arange(int(keep.sum()), dtype=i64)
        next_id -= int(keep.sum())
        out_rows.append(g[p_node[keep]])
        out_id.append(pid[keep])
        out_a.append(pa[keep])
        out_b.append(pb[keep])
        after = k > 0
        dst = np.where(keep, pid, nxt[p_node])[after]
        known = dst != _NO_NODE
        st_rows.append(g[p_node[after]][known])
        st_c.append(c[known])
        st_d.append(d[known])
        st_dst.append(dst[known])
    rows = np.concatenate(out_rows)
    # the rows taken and the cut times set column by column, by indexing (no query: a plan per
    # table was one, of fixed cost)
    cut = {
        "id": pl.Series("id", np.concatenate(out_id), dtype=pl.Int64),
        "start_ns": pl.Series("start_ns", np.concatenate(out_a), dtype=pl.Int64),
        "end_ns": pl.Series("end_ns", np.concatenate(out_b), dtype=pl.Int64),
    }
    out = pl.DataFrame([cut[c] if c in cut else host.get_column(c)[rows] for c in host.columns])
    st = np.concatenate(st_rows)
    stretches = pl.DataFrame(
        [
            *(host.get_column(c)[st] for c in ("rank", "step", "lane")),
            pl.Series("c", np.concatenate(st_c), dtype=pl.Int64),
            pl.Series("d", np.concatenate(st_d), dtype=pl.Int64),
            pl.Series("dst", np.concatenate(st_dst), dtype=pl.Int64),
        ]
    )
    return out, stretches


def _stretch_edges(stretches: pl.DataFrame, srcs: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """Every node of ``srcs`` on another lane of the same rank and step ending in ``(c, d]`` of a
    stretch -> the stretch's ``dst``."""
    i64 = np.int64
    if tree.SHORTCUTS and stretches.height == 0:
        return _empty({"src": pl.Int64, "dst": pl.Int64})
    if isinstance(srcs, pl.LazyFrame):
        srcs = tree.collect(srcs)
    # per (rank, step) of the stretches, in their order: the sources of that step by end time
    # (their order among equal ends is no edge's business); the partitions and queries per
    # step they replace were ~9 per report
    s_rank, s_step = (_int_column(srcs, c)[0] for c in ("rank", "step"))
    s_lane = srcs.get_column("lane").to_numpy()
    s_id = srcs.get_column("id").to_numpy()
    s_end = srcs.get_column("end_ns").to_numpy().astype(i64)
    t_rank, t_step = (_int_column(stretches, c)[0] for c in ("rank", "step"))
    t_lane = stretches.get_column("lane").to_numpy()
    t_c = stretches.get_column("c").to_numpy().astype(i64)
    t_d = stretches.get_column("d").to_numpy().astype(i64)
    t_dst = stretches.get_column("dst").to_numpy()
    key = np.stack((t_rank, t_step), axis=1)
    _, first = np.unique(key, axis=0, return_index=True)
    src_parts: list[np.ndarray] = [np.empty(0, i64)]
    dst_parts: list[np.ndarray] = [np.empty(0, i64)]
    steps = [
        (r, s, mine)
        for r, s in key[np.sort(first)].tolist()
        if len(mine := np.flatnonzero((s_rank == r) & (s_step == s)))
    ]
    for r, s, mine in steps:
        g = mine[np.argsort(s_end[mine], kind="stable")]
        end = s_end[g]
        st = np.flatnonzero((t_rank == r) & (t_step == s))
        lo = np.searchsorted(end, t_c[st], side="right")
        hi = np.searchsorted(end, t_d[st], side="right")
        n = np.maximum(hi - lo, 0)
        of = np.repeat(np.arange(len(st)), n)  # the stretch of each edge
        row = st[of]
        src = g[np.arange(len(of)) - (np.cumsum(n) - n)[of] + lo[of]]
        other = s_lane[src] != t_lane[row]
        src_parts.append(s_id[src][other].astype(i64))
        dst_parts.append(t_dst[row][other].astype(i64))
    return pl.DataFrame(
        {"src": np.concatenate(src_parts), "dst": np.concatenate(dst_parts)},
        schema={"src": pl.Int64, "dst": pl.Int64},
    )


def _nodes(profile: Profile) -> pl.DataFrame:
    """Every node of every step: host segments and device work, with their attribution."""
    nodes, _, ev = graph(profile)
    op = op_names(nodes, ev)
    return nodes.with_columns(
        op_expr(pl.col("name"), op).alias("op"), name_expr(pl.col("name"), op).alias("name")
    )


def op_names(nodes: pl.DataFrame, ev: pl.DataFrame) -> pl.Series:
    """Per node, the name of the event its op_id is (null where none): a gather by position, not
    a join with every event (~3 ms of a 75k-event trace)."""
    op_id, op_null = _int_column(nodes, "op_id")
    at = positions(ev.get_column("id").to_numpy().astype(np.int64), op_id)
    miss = at < 0 if op_null is None else (at < 0) | op_null
    op = ev.get_column("name")[np.where(miss, 0, at)]  # (indexing: a gather with no query)
    return op.set(pl.Series(miss), None) if miss.any() else op


def op_expr(name: pl.Expr, op: pl.Series) -> pl.Expr:
    """A node's operator: its op's name, else its own (an idle gap: :data:`IDLE_OP`)."""
    return pl.when(name == "(idle)").then(pl.lit(IDLE_OP)).otherwise(pl.coalesce(pl.lit(op), name))


def name_expr(name: pl.Expr, op: pl.Series) -> pl.Expr:
    """A node's name: its own, else (a host piece of no name) its op's."""
    return pl.when(name == "").then(pl.lit(op)).otherwise(name)


def _top_op_nodes(ev: pl.DataFrame, kinds: _Kinds | None = None) -> pl.DataFrame:
    """The host nodes of threads without runtime calls: their top-level operators (no parent,
    or a parent that is no operator). The thread and parent matches on arrays (the anti join
    and the join with every event's kind were ~4 ms of a 75k-event trace, most often for none).
    ``kinds``: :class:`_Kinds` of ``ev`` when known."""
    if kinds is None:
        kinds = _Kinds.of(ev.get_column("kind"))
    is_op, is_rt = kinds.op, kinds.call
    threads = [_int_column(ev, c) for c in ("rank", "pid", "tid")]
    calls = [(v[is_rt], None if null is None else null[is_rt]) for v, null in threads]
    _, code, _ = _thread_codes_of(calls, threads)
    cand = np.flatnonzero(is_op & (code < 0))  # (a thread of no call: no code)
    if len(cand):
        parent, parent_null = _int_column(ev, "parent_id")
        at = positions(ev.get_column("id").to_numpy().astype(np.int64), parent[cand])
        # a parent that is an operator: not top-level (an unknown parent is no operator)
        nested = (at >= 0) & is_op[np.maximum(at, 0)]
        if parent_null is not None:
            nested &= ~parent_null[cand]
        cand = cand[~nested]
    if not len(cand):
        return _empty(_NODE_SCHEMA)
    top = _rows(ev, cand, "tid")
    return _event_nodes(top, "host", top.get_column("tid"), top.get_column("id"))


def _device_nodes(ev: pl.DataFrame, kinds: _Kinds) -> pl.DataFrame:
    """The device nodes: the device work, each on its lane (device and stream, else thread)."""
    dev = _rows(ev, np.flatnonzero(kinds.device), "device", "stream", "tid", "op_id")
    device, _ = tree.int_values(dev.get_column("device"))  # (a null: device 0)
    stream, has_stream = tree.int_values(dev.get_column("stream"))
    tid, has_tid = tree.int_values(dev.get_column("tid"))
    lane = device * 1_000_000 + np.where(has_stream, stream, np.where(has_tid, tid, -1))
    return _event_nodes(dev, "device", pl.Series(lane), dev.get_column("op_id"))


def _rows(ev: pl.DataFrame, rows: np.ndarray, *more: str) -> pl.DataFrame:
    """The columns of ``ev`` that :func:`_event_nodes` reads, and ``more``, at ``rows`` (one
    gather of the frame: an indexing per column was ~10 us each)."""
    cols = ("rank", "step", "id", "ts_ns", "dur_ns", "name", *more)
    return pl.DataFrame([ev.get_column(c) for c in cols])[rows]


def _event_nodes(
    ev: pl.DataFrame, lane_kind: str, lane: pl.Series, op_id: pl.Series
) -> pl.DataFrame:
    """Nodes that are the events of ``ev`` (:func:`_rows`: a plan of their gather and literals
    was a query of fixed cost)."""
    ts = ev.get_column("ts_ns")
    n = ev.height
    return pl.DataFrame(
        [
            *(ev.get_column(c) for c in ("rank", "step", "id")),
            pl.Series("lane_kind", [lane_kind], pl.String).new_from_index(0, n),
            lane.alias("lane"),
            ts.alias("start_ns"),
            (ts + ev.get_column("dur_ns")).alias("end_ns"),
            op_id.alias("op_id"),
            ev.get_column("name"),
            pl.Series("is_sync", np.zeros(n, dtype=bool)),
            pl.Series("is_wait", np.zeros(n, dtype=bool)),
        ],
        schema=_NODE_SCHEMA,
    )


#: The columns of the nodes that :func:`_stretch_edges` reads as its sources.
_SRC_COLUMNS: Final = ("rank", "step", "lane", "id", "end_ns")


#: The columns of the events the graph reads.
_EVENT_COLUMNS: Final = (
    "rank", "pid", "tid", "step", "id", "parent_id", "kind", "name", "ts_ns", "dur_ns", "op_id",
    "launch_id", "device", "stream",
)  # fmt: skip


def _columns(events: pl.DataFrame) -> pl.DataFrame:
    """The columns of the events the graph reads, a null step read as -1 (a select of them was
    a query of fixed cost; this takes the columns as they are)."""
    step = events.get_column("step")
    if step.null_count():  # (a query only then: NumPy's fill was ~10x slower on 75k events)
        step = step.fill_null(-1)
    return pl.DataFrame([step if c == "step" else events.get_column(c) for c in _EVENT_COLUMNS])


def graph(profile: Profile) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Every node of every step (host segments and device work, with their op_id: their
    operator and the name of a host piece come from :func:`op_names`, read for the nodes on
    the path only), the cross-thread edges of :func:`_cross_thread_waits`, and the columns of
    the events read."""
    ev = _columns(profile.events)
    kinds = _Kinds.of(ev.get_column("kind"))
    cover: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    host = _host_nodes(ev, profile.steps, cover, kinds)
    # threads without runtime calls: their top-level operators (no operator: none)
    top_nodes = _empty(_NODE_SCHEMA) if tree.no_ops(profile) else _top_op_nodes(ev, kinds)
    host, stretches = _cross_thread_waits(host, ev, cover)
    # (tables of one schema: appended, no query)
    nodes = pl.concat([host, top_nodes, _device_nodes(ev, kinds)], how="vertical").rechunk()
    nodes = _split_earlier_waits(nodes, ev)
    # the nodes that can end a cross-thread wait: every host node, the split waits included
    # (their columns filtered as Series, no query; only when there is a stretch)
    if stretches.height:
        host_mask = pl.Series(_flag(nodes.get_column("lane_kind") == "host"))
        srcs = pl.DataFrame([nodes.get_column(c).filter(host_mask) for c in _SRC_COLUMNS])
    else:
        srcs = _empty({c: _NODE_SCHEMA[c] for c in _SRC_COLUMNS})
    return nodes, _stretch_edges(stretches, srcs), ev


def _split_earlier_waits(nodes: pl.DataFrame, ev: pl.DataFrame) -> pl.DataFrame:
    """A waiting call (a sync: on every stream; a blocking copy: on its copy's stream) that
    waits while device work of the rank outside its step's graph (an earlier step's, work queued
    before profiling) runs on what it waits on: that part of the wait, from the call's start to
    the end of the last such work ending before the call returns, is a node of its own (the
    call's op and name; no wait): the earlier work is in no node of this graph, so without it
    the wait would be a hole (or the time of an idle thread) on the path. The call's wait node
    starts where that node ends."""
    i64 = np.int64
    is_wait = _flag(nodes.get_column("is_wait"))
    if tree.SHORTCUTS and not is_wait.any():  # no waiting call (no runtime call at all)
        return nodes
    # (Series comparisons: a select of the two flags was a query of fixed cost)
    lane_kind = nodes.get_column("lane_kind")
    on_dev = _flag(lane_kind == "device")
    waits = np.flatnonzero(is_wait & _flag(lane_kind == "host"))
    if not len(waits) or not on_dev.any():
        return nodes
    ids = nodes.get_column("id").to_numpy().astype(i64)
    starts = nodes.get_column("start_ns").to_numpy().astype(i64)
    ends = nodes.get_column("end_ns").to_numpy().astype(i64)
    rank, rank_null = _int_column(nodes, "rank")
    step, step_null = _int_column(nodes, "step")
    lane, lane_null = _int_column(nodes, "lane")
    is_sync = _flag(nodes.get_column("is_sync"))
    # the stream a blocking copy waits on: its (last-ending) copy's; a sync waits on every
    # stream (no lane); a blocking copy with no copy in the graph on none (no split)
    w_lane = np.zeros(len(waits), dtype=i64)
    w_ok = is_sync[waits].copy()
    if not w_ok.all():  # a blocking copy (only then the copies' streams)
        # each launch's device node last by (end, id)
        launch, no_launch = _int_column(ev, "launch_id")
        launched = np.flatnonzero(~no_launch) if no_launch is not None else np.arange(len(launch))
        at = positions(ids, ev.get_column("id").to_numpy().astype(i64)[launched])
        ok = at >= 0
        ok[ok] = on_dev[at[ok]]
        node = at[ok]
        order = np.lexsort((ids[node], ends[node]))[::-1]  # the last first
        last_of, first = np.unique(launch[launched[ok]][order], return_index=True)
        last = node[order][first]
        known = np.ones(len(last), dtype=bool) if lane_null is None else ~lane_null[last]
        c_at = positions(last_of[known], ids[waits[~w_ok]])
        w_lane[~w_ok] = np.where(c_at >= 0, lane[last[known]][np.maximum(c_at, 0)], 0)
        w_ok[~w_ok] = c_at >= 0
    waits, w_lane, w_sync = waits[w_ok], w_lane[w_ok], is_sync[waits[w_ok]]
    # per (rank, step, stream waited on): the end of the last device node of the rank outside
    # the step (on that stream) ending before the call returns
    dev = np.flatnonzero(on_dev)
    d_rank, d_step, d_lane, d_end = rank[dev], step[dev], lane[dev], ends[dev]
    # (as the filter ``step != key``: a null step on either side keeps no device node; a
    # null rank or stream is a key of its own)
    d_known = np.ones(len(dev), dtype=bool) if step_null is None else ~step_null[dev]
    d_rnull = np.zeros(len(dev), dtype=bool) if rank_null is None else rank_null[dev]
    d_lnull = np.zeros(len(dev), dtype=bool) if lane_null is None else lane_null[dev]
    cut = np.full(len(ids), _NO_NODE, dtype=i64)
    w_rnull = np.zeros(len(waits), dtype=bool) if rank_null is None else rank_null[waits]
    w_snull = np.zeros(len(waits), dtype=bool) if step_null is None else step_null[waits]
    group = np.stack((w_rnull, rank[waits], w_snull, step[waits], w_sync, w_lane), axis=1)
    for key in {tuple(g) for g in group.tolist()}:
        r_null, r, s_null, s, sync, ln = key
        if r_null or s_null:  # (no rank: dev_by_rank had none; no step: no device node)
            continue
        keep = ~d_rnull & (d_rank == r) & d_known & (d_step != s)
        if not sync:
            keep &= ~d_lnull & (d_lane == ln)
        end = np.sort(d_end[keep])
        mine = waits[(group == np.array(key, dtype=group.dtype)).all(axis=1)]
        a = starts[mine]
        k = np.searchsorted(end, ends[mine], side="right") - 1
        prev = np.where(k >= 0, end[np.maximum(k, 0)] if len(end) else a, a)
        hit = prev > a
        cut[mine[hit]] = prev[hit]
    has_cut = cut != _NO_NODE
    if not has_cut.any():
        return nodes
    # the nodes with each cut wait starting at its cut, then the cut-off parts in node order
    first_id = min(int(ids.min()), 0) - 1
    before = np.flatnonzero(has_cut)
    rows = np.concatenate((np.arange(len(ids)), before))
    nb = len(before)
    return (
        nodes.lazy()
        .select(pl.all().gather(pl.Series(rows)))
        .with_columns(
            pl.Series("id", np.concatenate((ids, first_id - np.arange(nb, dtype=i64)))),
            pl.Series("start_ns", np.concatenate((np.where(has_cut, cut, starts), starts[before]))),
            pl.Series("end_ns", np.concatenate((ends, cut[before]))),
            pl.Series("is_sync", np.concatenate((is_sync, np.zeros(nb, dtype=bool)))),
            pl.Series("is_wait", np.concatenate((is_wait, np.zeros(nb, dtype=bool)))),
        )
        .pipe(tree.collect)
    )


#: The kinds of :func:`edges`, in their order of precedence: of the edges that give a node the
#: same length, the path takes one of the first kind (then of the source first in the step's
#: node order, see :func:`opscope.analysis.critical_path.critical_path`).
LANE, LAUNCH, COPY, SYNC, CROSS = range(5)


def edges(
    nodes: pl.DataFrame, events: pl.DataFrame, cross: pl.DataFrame | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, kind) of the lane-order, launch, copy, sync and ``cross``-thread edges (event
    ids and :data:`LANE` .. :data:`CROSS`), grouped by kind, as arrays (the Polars plan they
    replace was ~14 ms of a 75k-event trace's 120). Within a kind the order has no meaning: the
    path's choice among edges of equal length is defined by kind and source
    (:func:`opscope.analysis.critical_path.critical_path`)."""
    i64 = np.int64
    ids = nodes.get_column("id").to_numpy().astype(i64)
    lanes: list[np.ndarray] = []
    for c in ("rank", "step", "lane"):
        col = nodes.get_column(c)
        # a null is its own key, as over() groups it (never one in practice)
        if col.null_count():
            lanes += [col.is_null().to_numpy(), col.fill_null(0).to_numpy().astype(i64)]
        else:
            lanes.append(col.to_numpy().astype(i64))
    is_dev = _flag(nodes.get_column("lane_kind") == "device")
    lanes.append(is_dev)
    lane_src, lane_at = _lane_pairs(nodes, lanes)
    parts = [(LANE, ids[lane_src], ids[lane_at])]
    # launch: the runtime call -> the work it launched
    launch, no_launch = _int_column(events, "launch_id")
    has = np.ones(len(launch), dtype=bool) if no_launch is None else ~no_launch
    l_src = launch[has]
    l_dst = events.get_column("id").to_numpy().astype(i64)[has]
    parts.append((LAUNCH, l_src, l_dst))
    # a blocking copy call waits for its own copy (and, through the stream, what precedes it)
    is_sync = _flag(nodes.get_column("is_sync"))
    waiting = _flag(nodes.get_column("is_wait")) & ~is_sync
    if waiting.any():
        w = np.isin(l_src, ids[waiting])
        parts.append((COPY, l_dst[w], l_src[w]))
    if is_sync.any() and is_dev.any():
        parts += [(SYNC, a, b) for a, b in _sync_edges(nodes, ids, is_sync, is_dev)]
    if cross is not None and cross.height:
        c_src, c_dst = (cross.get_column(c).to_numpy().astype(i64) for c in ("src", "dst"))
        parts.append((CROSS, c_src, c_dst))
    kind = np.repeat(np.array([k for k, _, _ in parts], dtype=i64), [len(a) for _, a, _ in parts])
    return (
        np.concatenate([a for _, a, _ in parts]).astype(i64),
        np.concatenate([b for _, _, b in parts]).astype(i64),
        kind,
    )


def _sync_edges(
    nodes: pl.DataFrame, ids: np.ndarray, is_sync: np.ndarray, is_dev: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The sync edges, as (src, dst) parts: each sync waits on the last device node of each
    stream of its rank and step ending at or before the sync's end, last by (end, start, id):
    the step's node order (a null rank or step matches no device node)."""
    i64 = np.int64
    rank, step = _int_column(nodes, "rank"), _int_column(nodes, "step")
    end = nodes.get_column("end_ns").to_numpy().astype(i64)
    start = nodes.get_column("start_ns").to_numpy().astype(i64)
    lane = _int_column(nodes, "lane")[0]
    dev = np.flatnonzero(is_dev)
    dev = dev[np.lexsort((ids[dev], start[dev], end[dev]))]
    d_at = _by_rank_step(dev, rank, step)
    out = []
    for key, s_rows in _by_rank_step(np.flatnonzero(is_sync), rank, step).items():
        d_rows = d_at.get(key)
        if d_rows is None:
            continue
        # per stream, the as-of match: the last of the stream's nodes (in their order) ending
        # at or before the sync's end (five queries per stream were ~1 ms)
        s_end = end[s_rows]
        d_lane = lane[d_rows]
        for ln in np.unique(d_lane).tolist():
            on = d_rows[d_lane == ln]
            j = np.searchsorted(end[on], s_end, side="right") - 1
            hit = j >= 0
            out.append((ids[on[j[hit]]], ids[s_rows[hit]]))
    return out


def _lane_pairs(nodes: pl.DataFrame, lanes: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(predecessor, node) rows of each node with a predecessor on its lane (equal ``lanes``
    keys) in the lane's order: by start, then end (a null first), then id. In an order of no
    meaning (each node has one at most)."""
    i64 = np.int64
    keys = [nodes.get_column("id").to_numpy().astype(i64)]
    for c in ("end_ns", "start_ns"):
        v, null = _int_column(nodes, c)
        keys += [v] if null is None else [v, ~null]
    by_lane = np.lexsort([*keys, *lanes[::-1]])
    same = np.ones(max(len(by_lane) - 1, 0), dtype=bool)
    for k in lanes:
        same &= k[by_lane][1:] == k[by_lane][:-1]
    return by_lane[:-1][same].astype(i64), by_lane[1:][same].astype(i64)


def _by_rank_step(
    rows: np.ndarray, rank: _Column, step: _Column
) -> dict[tuple[int, int], np.ndarray]:
    """``rows`` of each (rank, step) (``rank``, ``step``: the columns' values and null masks),
    in their order within each (rows of a null rank or step in none)."""
    ok = np.ones(len(rows), dtype=bool)
    for _, null in (rank, step):
        if null is not None:
            ok &= ~null[rows]
    rows = rows[ok]
    rows = rows[np.lexsort((step[0][rows], rank[0][rows]))]  # stable: the order within a key
    r, s = rank[0][rows], step[0][rows]
    cut = np.flatnonzero((r[1:] != r[:-1]) | (s[1:] != s[:-1])) + 1
    bounds = np.concatenate(([0], cut, [len(rows)])).tolist()
    return {(int(r[a]), int(s[a])): rows[a:b] for a, b in itertools.pairwise(bounds) if b > a}


def positions(ids: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The position in ``ids`` of each value of ``x`` (the first, where ``ids`` repeats it), -1
    where absent."""
    n = len(ids)
    if n and len(x):
        lo = int(ids.min())
        span = int(ids.max()) - lo + 1
        # a table indexed by id when the ids are dense enough (a gather instead of a sort and a
        # binary search per value: 9 of the 17 ms of longest_path on a 75k-event trace)
        if span <= 8 * (n + len(x)) + 4096:
            table = np.full(span, -1, dtype=np.int64)
            at = np.arange(n, dtype=np.int64)
            table[ids - lo] = at
            if (table[ids - lo] == at).all():  # no repeated id (else: the sort below)
                off = x.astype(np.int64) - lo
                inside = (off >= 0) & (off < span)
                return np.where(inside, table[np.where(inside, off, 0)], -1)
    return _positions_sorted(ids, x)


def _positions_sorted(ids: np.ndarray, x: np.ndarray) -> np.ndarray:
    """:func:`positions` by a stable sort of ``ids`` and a binary search of each value."""
    n = len(ids)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    i = _clip(np.searchsorted(sorted_ids, x), 0, n - 1)
    return np.where(sorted_ids[i] == x, order[i], -1)
