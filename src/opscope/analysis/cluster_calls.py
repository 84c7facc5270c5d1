"""The collectives table of device collective calls that carry no Kineto ``args`` (Ascend's
HCCL tasks, kernels of a trace without arguments), in Python and NumPy.

Without ``args`` a call has no collective name, process group, element count or dtype there:
its ``collective`` is the word of its name (:data:`opscope.analysis.cluster._COLL_WORD`, else
the name), lowercased without "_"; ``group`` and ``bytes`` are null. The plan that computes
them, sorts the calls and numbers them (``seq``) was ~1 ms of a 15-call rank's report, all of
it a query's fixed cost. The same table as the plan (tests/test_cluster_calls_python.py).
"""

from __future__ import annotations

import re
from typing import Any, Final

import numpy as np
import polars as pl

from opscope.analysis import tree
from opscope.analysis.small_frames import ROWS_MAX as _SHARED_ROWS_MAX
from opscope.analysis.small_frames import codes_in_order, frame_of_rows

#: Up to this many calls (a name's word is found once per distinct name, the rest in NumPy;
#: past it, the plan: its cost no longer fixed).
MAX_CALLS: Final = 4096


def collectives(ev: pl.DataFrame, comm: pl.Series, word: re.Pattern[str]) -> pl.DataFrame | None:
    """The collectives table (``cluster.COLLECTIVE_COLUMNS``) of the rows of ``ev`` where
    ``comm``, ``word`` the pattern of a collective's word in its name; None where the plan
    must run: a call with ``args``, a null rank or start, a name not ASCII (``re`` and Polars'
    engine read the pattern alike on ASCII text), more than :data:`MAX_CALLS` calls."""
    # (every event a call, a partial Ascend rank's collectives alone: the columns as they
    # are, no filter)
    every = tree.SHORTCUTS and len(comm) == ev.height and comm.null_count() == 0 and comm.all()

    def column(c: str) -> pl.Series:
        s = ev.get_column(c)
        return s if every else s.filter(comm)  # (a Series filter: no query)

    args = column("args")
    n = len(args)
    if not n or n > MAX_CALLS or args.null_count() != n:
        return None
    rank_s, start_s = column("rank"), column("ts_ns")
    if rank_s.null_count() or start_s.null_count():
        return None
    names = column("name")
    texts = names.to_list()
    found = _words(set(texts), word)
    if found is None:
        return None
    i64 = np.int64
    rank = rank_s.to_numpy().astype(i64)
    start = start_s.to_numpy().astype(i64)
    step_v, step_ok = tree.int_values(column("step"))
    step = np.where(step_ok, step_v, -1)  # (a null step: -1)
    # the calls by rank and start, ties in trace order (a stable sort)
    order = np.lexsort((start, rank))
    coll = [found[texts[i]] for i in order.tolist()]
    # seq: each call's number among the calls before it of its rank, step and collective
    # (the group: null for all)
    c, _ = codes_in_order(coll)
    r, s = rank[order], step[order]
    by = np.lexsort((np.arange(n), c, s, r))
    new = np.ones(n, dtype=bool)
    new[1:] = (r[by][1:] != r[by][:-1]) | (s[by][1:] != s[by][:-1]) | (c[by][1:] != c[by][:-1])
    first = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    seq = np.empty(n, dtype=i64)
    seq[by] = np.arange(n) - first
    same = bool((order == np.arange(n)).all())
    dur = column("dur_ns")
    if n <= ROWS_MAX and dur.dtype == pl.Int64:
        # a few calls: the frame from rows (a Series per column was ~8 us each)
        durs = dur.to_list()
        picked = order.tolist()
        columns = (
            r.tolist(),
            s.tolist(),
            coll,
            [texts[i] for i in picked],
            [None] * n,
            seq.tolist(),
            start[order].tolist(),
            [durs[i] for i in picked],
            [None] * n,
        )
        return frame_of_rows(zip(*columns, strict=True), _SCHEMA)
    none = pl.Series([None], dtype=pl.Int64).new_from_index(0, n)
    return pl.DataFrame(
        [
            pl.Series("rank", r, pl.Int32),
            pl.Series("step", s, pl.Int32),
            pl.Series("collective", coll, pl.String),
            (names if same else names[order]).alias("name"),
            pl.Series("group", [None], pl.String).new_from_index(0, n),
            pl.Series("seq", seq, pl.Int32),
            pl.Series("start_ns", start[order], pl.Int64),
            (dur if same else dur[order]).cast(pl.Int64),
            none.alias("bytes"),
        ]
    )


#: Up to this many calls the table is made from rows.
ROWS_MAX: Final = _SHARED_ROWS_MAX

#: The table's columns as :func:`collectives` makes them.
_SCHEMA: Final = {
    "rank": pl.Int32, "step": pl.Int32, "collective": pl.String, "name": pl.String,
    "group": pl.String, "seq": pl.Int32, "start_ns": pl.Int64, "dur_ns": pl.Int64,
    "bytes": pl.Int64,
}  # fmt: skip


def _words(names: set[str | None], word: re.Pattern[str]) -> dict[str | None, str | None] | None:
    """Each name's collective: its first match of ``word`` (else itself), lowercased, "_"
    removed; a null name's null. None when a name is not ASCII."""
    out: dict[str | None, str | None] = {None: None}
    for name in names:
        if name is None:
            continue
        if not name.isascii():
            return None
        m = word.search(name)
        out[name] = (m.group(1) if m else name).lower().replace("_", "")
    return out


#: The sum of a group, as Polars' Int64 sum holds it (a sum past it would wrap there).
_I64 = (-(2**63), 2**63 - 1)


def sums(coll: pl.DataFrame) -> list[dict[str, Any]] | None:
    """The collectives summed per (rank, collective) as rows, sorted by rank then collective
    (a null first): ``calls``, ``dur_ns``, ``wait_ns``, ``bytes`` (a group without any: 0), as
    the group-by's query of ``Cluster.to_json`` gives them, in Python (that query was a fixed
    cost of a few calls' report). None where the query must run: past :data:`MAX_CALLS`
    calls, a key or summed column not of the types the collectives table declares, a sum past
    Int64."""
    if not tree.SHORTCUTS or coll.height > MAX_CALLS:
        return None
    rank, name = coll.get_column("rank"), coll.get_column("collective")
    summed = [coll.get_column(c) for c in ("dur_ns", "wait_ns", "bytes")]
    if not rank.dtype.is_integer() or name.dtype != pl.String:
        return None
    if any(s.dtype != pl.Int64 for s in summed):
        return None
    groups: dict[tuple[Any, Any], list[int]] = {}
    columns = [rank.to_list(), name.to_list(), *(s.to_list() for s in summed)]
    for r, c, *vs in zip(*columns, strict=True):
        acc = groups.setdefault((r, c), [0, 0, 0, 0])
        acc[0] += 1
        for i, v in enumerate(vs, 1):
            if v is not None:
                acc[i] += v
    if any(not _I64[0] <= v <= _I64[1] for acc in groups.values() for v in acc[1:]):
        return None
    # (a null key first, as the sort puts it; Polars orders strings by their UTF-8 bytes,
    # which is Python's order of code points)
    keys = sorted(groups, key=lambda k: (k[0] is not None, k[0] or 0, k[1] is not None, k[1] or ""))
    return [dict(zip(_SUM_KEYS, (r, c, *groups[r, c]), strict=True)) for r, c in keys]


_SUM_KEYS = ("rank", "collective", "calls", "dur_ns", "wait_ns", "bytes")
