"""Out-of-core load, phase 3 (issue 24; design: docs/out-of-core.md): the spilled windows are
linked segment by segment and written straight into a Profile folder (the cache entry), which
is then opened lazily, so the events table is never whole in memory.

What :mod:`opscope.ingest.spill` hands over: one Parquet file of unlinked events per scanned
window (each stably sorted by ``ts_ns``), one of raw flow records per window (sorted by
``ts_ns``, each with its position in the trace, ``_fi``), and the small tables in memory.

1. *Plan* (:func:`plan`): the event ids are the stable ``ts_ns`` order of all windows' rows
   (window order breaks ties), so a segment, the events with ``ts_ns`` in ``[T_k, T_k+1)``, is
   a row range of every window file, and concatenating those ranges in window order and sorting
   them stably gives the segment's rows in id order. A time ``T`` is a cut when no linking
   step relates an event before it to one at or after it:

   - no event (any track) starts before ``T`` and ends after it: nesting, runtime calls' ops,
     ``is_backward``, stacks and modules, and the binding of flow and memory records to the
     innermost event holding them never cross ``T``. An event ending exactly at ``T`` is
     allowed unless a zero-length event, a flow record or a memory row sits at ``T`` (one of
     those could nest under, or bind to, it);
   - no key spans ``T``: the records of one flow (``kind, flow_id``), the events of one
     ``correlation`` (launch and device work), one ``external_id`` (the op fallback of launches
     and device work) and the ``cpu_op`` rows of one sequence number (the forward/backward
     pairing and its fallback by ``seq``, which picks among all forward ops of the key).

   Each window's event blocks and the keys' first and last times are taken by the spill
   while the window is in memory (:class:`WindowFacts`, :class:`KeySpans`), and the cuts are
   placed in each window from its blocks, so the plan reads only the flow files' ``ts_ns``.
   The segments are then grown greedily from the cuts to about :func:`segment_rows` events.
2. *Link* each segment (:func:`link_windows`) with the in-memory steps of
   :mod:`opscope.ingest.link`, unchanged, on local ids 0..n-1, then offset the ids. What is
   global is carried, small: the STEPS table (from the ``step`` rows alone, before linking),
   the stack interning (:class:`StackInterner`: ids given per segment, renumbered at the end
   into the in-memory order: level by level, then call-stack nodes, each by first
   appearance), the tracks (for THREADS), and what :func:`link.queued_before_profiling`
   needs from the whole trace (:class:`QueuedWork`: the first launched device work per device
   and the device work without a launch before it).
3. *Write*: one streaming Parquet sink writes the entry's ``events.parquet`` (zstd row
   groups) from a source that links the next segment whenever the writer asks for rows; a
   second streaming pass applies the final stack ids and the queued-before-profiling steps
   where the end finds any to change. Then the small tables and ``meta.json``, in a temporary
   folder renamed into place. The Profile returned is ``Profile.open(entry, lazy=True)``,
   marked ``meta["out_of_core"]``.

A segment larger than its target (no cut in a long stretch of the trace) is still linked whole
in memory: correct, not bounded; the marker says so (``largest_segment_events``).
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from polars.io.plugins import register_io_source

from opscope.ingest import _span_kernels, cache, jsonscan, kineto, link, segment_aggregates
from opscope.model import Profile, kinds, schema
from opscope.model.profile import WRITE_OPTIONS, finish_folder

IntArray = link.IntArray
BoolArray = link.BoolArray

LINK_BYTES_PER_EVENT = 1500
"""Peak memory of linking one event of a segment (the events table ~450 B of RSS per event,
its helper arrays and the frames each step builds), a bound from the phase-2 measurements."""

SEGMENT_SHARE = 0.25
"""Share of the memory budget one segment's linking may use (the rest: the global state, the
allocator's slack)."""

MIN_SEGMENT_ROWS = 20_000
"""Fewest events a segment is grown to (fixed costs per segment); tests set it to 1."""


PROBE_ENV = "OPSCOPE_OOC_PROBE"
"""When set, the peak RSS (``ru_maxrss``) after each phase is printed to stderr."""

_TRACK_COLUMNS: dict[str, tuple[str, ...]] = {"pid": ("pid", "device"), "tid": ("tid", "stream")}
_FLOW_TRACKS: dict[str, tuple[str, ...]] = {"pid": ("pid",), "tid": ("tid",)}
_ID_COLUMNS = ("id", "parent_id", "launch_id", "op_id", "fwd_id")
# Kinds whose external_id the op fallback of link.link_launches reads.
_EXT_KINDS = ["cpu_op", "runtime", "driver", *kinds.DEVICE_KINDS]

Maps = dict[str, tuple[list[int], list[int]]]


def segment_rows(budget: int) -> int:
    """Events per segment for a memory budget (bytes)."""
    return max(MIN_SEGMENT_ROWS, int(budget * SEGMENT_SHARE / LINK_BYTES_PER_EVENT))


_STARTED = time.perf_counter()  # (the probes' wall clock: from this module's import)


def probe(label: str) -> None:
    """Print the peak RSS so far (``$OPSCOPE_OOC_PROBE``)."""
    if os.environ.get(PROBE_ENV):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        cpu = time.process_time()
        wall = time.perf_counter() - _STARTED
        print(
            f"[ooc] {label}: peak RSS {peak / 1e9:.2f} GB, CPU {cpu:.1f} s, wall {wall:.1f} s",
            file=sys.stderr,
            flush=True,
        )


def renumbered(df: pl.DataFrame, maps: Maps, columns: dict[str, tuple[str, ...]]) -> pl.DataFrame:
    """``df`` with the spill's provisional track ids replaced by the final ones."""
    exprs = []
    for c, (old, new) in maps.items():
        if old:
            exprs += [pl.col(col).replace(old, new) for col in columns[c] if col in df.columns]
    return df.with_columns(exprs) if exprs else df


@dataclass
class Spilled:
    """What the spill hands over once every window is on disk."""

    event_files: list[Path]
    flow_files: list[Path]
    maps: Maps
    rank: int
    memory: pl.DataFrame  # [memory] rows, final tracks and rank, in trace order
    names: pl.DataFrame
    notes: list[str]
    counters: list[jsonscan.CounterEvent]
    header: dict[str, Any]
    path: Path
    oddities: dict[str, int]
    flow_starts: int  # flow start records (for the "flow not bound to events" count)
    windows: WindowFacts  # what the spill took of each window for the plan
    rank_arg: int | None = None  # the rank the caller gave (part of the cache key)


_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min

DENSE_SLACK = 4
""":class:`KeySpans` keeps one slot per key value between the smallest and the largest met while
that range is at most this many times the rows added (plus :data:`DENSE_MIN`); the ids PyTorch
writes (correlation, external id, sequence number, flow id) are counters, so the range is about
the number of keys."""

DENSE_MIN = 1 << 16
"""Slots :class:`KeySpans` may always keep, whatever the rows added."""


@dataclass
class KeySpans:
    """The first and last ``ts_ns`` of each value of one integer key, taken window by window
    (:meth:`add`): one slot per key value in a range that grows as keys are met (the keys of
    one window are ~2-3 rows each, and the next window's continue the counters), or, where the
    values are too sparse for that (:data:`DENSE_SLACK`), each window's spans as a partial
    table (its distinct keys by a sort) merged at the end. Both fill the slots with
    :func:`_span_kernels.spans`."""

    base: int = 0
    lo: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    hi: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    rows: int = 0
    parts: list[tuple[IntArray, IntArray, IntArray]] | None = None  # sparse: (keys, lo, hi)

    def add(self, keys: IntArray, ts: IntArray) -> None:
        """Rows of the key (``keys``, int64, no null) and their ``ts`` (int64)."""
        if not keys.size:
            return
        self.rows += int(keys.size)
        if self.parts is None:
            k0, k1 = int(keys.min()), int(keys.max())
            if self.lo.size:
                k0, k1 = min(k0, self.base), max(k1, self.base + self.lo.size - 1)
            if k1 - k0 + 1 <= DENSE_SLACK * self.rows + DENSE_MIN:
                self._cover(k0, k1)
                _span_kernels.spans(keys - self.base, ts, ts, self.lo, self.hi)
                return
            self.parts = [self._present()] if self.lo.size else []
            self.lo = self.hi = np.zeros(0, dtype=np.int64)
        self.parts.append(_partial(keys, ts, ts))

    def _cover(self, k0: int, k1: int) -> None:
        """Slots for every key value in ``[k0, k1]`` (with room to grow: the next window's keys
        are mostly above these)."""
        size = self.lo.size
        if size and k0 >= self.base and k1 < self.base + size:
            return
        base = k0 if not size else min(k0, self.base)
        need = k1 - base + 1
        new = max(need, need + (need >> 2)) if size else need
        lo = np.full(new, _I64_MAX, dtype=np.int64)
        hi = np.full(new, _I64_MIN, dtype=np.int64)
        if size:
            at = self.base - base
            lo[at : at + size] = self.lo
            hi[at : at + size] = self.hi
        self.base, self.lo, self.hi = base, lo, hi

    def _present(self) -> tuple[IntArray, IntArray, IntArray]:
        """The dense slots as a partial table: ``(keys, lo, hi)`` of the keys met."""
        at = np.nonzero(self.lo <= self.hi)[0]
        return at + self.base, self.lo[at], self.hi[at]

    def spans(self) -> tuple[IntArray, IntArray]:
        """``(lo, hi)`` of every key met, in no particular order."""
        if self.parts is None:
            _, lo, hi = self._present()
            return lo, hi
        if not self.parts:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        keys, lo, hi = (np.concatenate(c) for c in zip(*self.parts, strict=True))
        _, lo, hi = _partial(keys, lo, hi)
        return lo, hi

    def blocks(self) -> tuple[IntArray, IntArray]:
        """The keys' spans ``[lo, hi + 1]`` reduced to their :func:`_blocks` (a cut inside a
        key's span is one inside its block): a few per step instead of one per key."""
        lo, hi = self.spans()
        order = np.argsort(lo)
        return _blocks(lo[order], hi[order] + 1)


def _partial(
    keys: IntArray, first: IntArray, last: IntArray
) -> tuple[IntArray, IntArray, IntArray]:
    """``(distinct keys, min first, max last)`` of rows."""
    uniq, idx = np.unique(keys, return_inverse=True)
    lo = np.full(uniq.size, _I64_MAX, dtype=np.int64)
    hi = np.full(uniq.size, _I64_MIN, dtype=np.int64)
    _span_kernels.spans(idx.astype(np.int64, copy=False), first, last, lo, hi)
    return uniq, lo, hi


# (on the Enum itself: a cast to text cost 4 ms per 160 K-row window, the match 0.3 ms)
_KIND = pl.col("kind")
SPAN_KEYS: dict[str, pl.Expr] = {
    "correlation": pl.col("correlation").is_not_null(),
    "external_id": pl.col("external_id").is_not_null()
    & (_KIND.is_in(_EXT_KINDS) | pl.col("device").is_not_null()),
    "seq": (_KIND == "cpu_op") & (pl.col("seq") >= 0),
}
"""The events' keys no cut may split, and the rows each is read on."""


@dataclass
class WindowFacts:
    """What the plan needs of each window, taken by the spill while it holds the window in
    memory (:meth:`add`, :meth:`add_flows`), so the plan does not read it back from the window
    files: the window's event blocks, its ``step`` rows, its schema and the keys' spans (one
    :class:`KeySpans` per key of :data:`SPAN_KEYS`, and per flow kind code)."""

    blocks: list[tuple[IntArray, IntArray]] = field(default_factory=list)
    block_rows: list[IntArray] = field(default_factory=list)  # each block's first row
    zero_starts: list[IntArray] = field(default_factory=list)  # blocks starting with a 0-dur
    rows: list[int] = field(default_factory=list)
    steps: list[pl.DataFrame] = field(default_factory=list)
    schemas: list[pl.Schema] = field(default_factory=list)
    keys: dict[str, KeySpans] = field(default_factory=lambda: {k: KeySpans() for k in SPAN_KEYS})
    flows: dict[int, KeySpans] = field(default_factory=dict)

    def add(self, events: pl.DataFrame) -> None:
        """One window's events (its ``kineto._events_table`` rows, ``ts_ns`` order)."""
        ts = link._np(events.get_column("ts_ns"))
        dur = link._np(events.get_column("dur_ns"), 0)
        end = ts + dur
        at = _block_index(ts, end)
        starts = ts[at]
        self.blocks.append((starts, np.maximum.reduceat(end, at) if at.size else starts))
        self.block_rows.append(at)
        self.zero_starts.append(np.intersect1d(starts, ts[dur == 0]))
        self.rows.append(int(ts.size))
        self.steps.append(events.filter(_KIND == "step").select("kind", "name", "ts_ns", "dur_ns"))
        self.schemas.append(events.schema)
        # (a column no row of a window has is typed by the scanner's default there)
        keyed = events.select(
            "kind", "device", *(pl.col(k).cast(pl.Int64, strict=False) for k in SPAN_KEYS)
        ).select(pl.when(where).then(pl.col(key)).alias(key) for key, where in SPAN_KEYS.items())
        for key, spans in self.keys.items():
            col = keyed.get_column(key)
            has = col.is_not_null()
            spans.add(col.filter(has).to_numpy(), ts[has.to_numpy()])

    def take_spans(self) -> Iterator[KeySpans]:
        """Each key's spans, dropped from here as they are handed over (their slots: ~16 B per
        key value, ~0.5 GB at 10 GB of trace, not to be kept through the linking)."""
        while self.keys:
            yield self.keys.pop(next(iter(self.keys)))
        while self.flows:
            yield self.flows.pop(next(iter(self.flows)))

    # A cut candidate is inside no window's block (nothing starts before it and ends after it),
    # so the window's rows before it are those of its blocks starting before it, and a
    # zero-length event at it starts one of its blocks: the window's rows are not read back.

    def rows_before(self, cands: IntArray) -> list[IntArray]:
        """Each window's rows with ``ts_ns`` before each cut candidate (sorted), as
        ``np.searchsorted(ts_ns, cands)`` on its rows."""
        out = []
        for at, (block_ts, _), n in zip(self.block_rows, self.blocks, self.rows, strict=True):
            first = np.append(at, n).astype(np.int64)
            out.append(first[np.searchsorted(block_ts, cands, side="left")])
        return out

    def zero_length_at(self, cands: IntArray) -> BoolArray:
        """Whether a zero-length event of some window starts at each cut candidate."""
        found = np.zeros(cands.size, dtype=bool)
        for zero in self.zero_starts:
            found |= np.isin(cands, zero)
        return found

    def add_flows(self, flows: pl.DataFrame) -> None:
        """One window's raw flow records (:data:`link.RAW_FLOWS` columns): a flow's key is
        its kind and id."""
        code = flows.get_column("kind").cast(schema.FlowKind).to_physical().to_numpy()
        fid = flows.get_column("flow_id").to_numpy()
        ts = flows.get_column("ts_ns").to_numpy()
        for c in np.unique(code).tolist():  # one per flow kind (a few)
            at = code == c
            self.flows.setdefault(c, KeySpans()).add(fid[at], ts[at])


# --------------------------------------------------------------------------------------------------
# plan


@dataclass
class Plan:
    """Segments: ``[-inf, cuts[0])``, ``[cuts[0], cuts[1])``, ..., ``[cuts[-1], inf)``."""

    cuts: IntArray
    event_pos: list[IntArray]  # per event file: its rows before each cut
    event_rows: list[int]
    flow_pos: list[IntArray]  # per flow file: its rows before each cut
    flow_rows: list[int]
    candidates: int  # valid cut times found
    steps: pl.DataFrame
    schema: pl.Schema  # the events files' common (relaxed) schema

    @property
    def segments(self) -> int:
        return len(self.cuts) + 1

    def ranges(self, pos: list[IntArray], rows: list[int], k: int) -> list[tuple[int, int]]:
        """Row range ``[lo, hi)`` of segment ``k`` in each file."""
        out = []
        for p, n in zip(pos, rows, strict=True):
            lo = 0 if k == 0 else int(p[k - 1])
            hi = n if k == len(self.cuts) else int(p[k])
            out.append((lo, hi))
        return out


def _block_index(ts: IntArray, end: IntArray) -> IntArray:
    """First row of each of :func:`_blocks`' groups."""
    if ts.size == 0:
        return np.zeros(0, dtype=np.int64)
    m = np.maximum.accumulate(end)
    start = np.ones(ts.size, dtype=bool)
    start[1:] = ts[1:] != ts[:-1]
    start[1:] &= ts[1:] >= m[:-1]
    return np.nonzero(start)[0]


def _blocks(ts: IntArray, end: IntArray) -> tuple[IntArray, IntArray]:
    """Maximal groups of time-sorted intervals that overlap (an interval starting exactly where
    the ones before it end starts a new group): ``(starts, ends)``."""
    idx = _block_index(ts, end)
    if idx.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    return ts[idx], np.maximum.reduceat(end, idx)


def plan(sp: Spilled, target_rows: int) -> Plan:
    """Cut times and each file's row ranges (see the module doc)."""
    facts = sp.windows
    starts = [a for a, _ in facts.blocks]
    ends = [b for _, b in facts.blocks]
    for spans in facts.take_spans():
        a, b = spans.blocks()
        starts.append(a)
        ends.append(b)
        del spans
    probe("plan: key spans")
    cands, touch = _candidates(np.concatenate(starts), np.concatenate(ends))
    del starts, ends
    probe("plan: cut candidates")

    # Pass 2: rows before each candidate per file, and the ties that forbid a touching cut.
    bad = np.zeros(cands.size, dtype=bool)
    tc = cands[touch]
    event_pos, event_rows = facts.rows_before(cands), list(facts.rows)
    if tc.size:
        bad[touch] |= facts.zero_length_at(tc)
    flow_pos, flow_rows = [], []
    for f in sp.flow_files:
        ts = link._np(pl.read_parquet(f, columns=["ts_ns"]).get_column("ts_ns"))
        flow_pos.append(np.searchsorted(ts, cands, side="left").astype(np.int64))
        flow_rows.append(int(ts.size))
        if tc.size:
            bad[touch] |= np.isin(tc, ts)
    if tc.size and sp.memory.height:
        mts = sp.memory.get_column("ts_ns").drop_nulls().to_numpy()
        bad[touch] |= np.isin(tc, mts)
    ok = ~bad
    cands = cands[ok]
    event_pos = [p[ok] for p in event_pos]
    flow_pos = [p[ok] for p in flow_pos]
    before = np.sum(event_pos, axis=0) if event_pos else np.zeros(cands.size, dtype=np.int64)
    edge = max(MIN_SEGMENT_ROWS, target_rows // EDGE_SHARE)
    chosen = _choose(before, sum(event_rows), target_rows, edge)
    steps_df = pl.concat(facts.steps, how="vertical_relaxed").sort("ts_ns", maintain_order=True)
    steps = link.step_numbers(steps_df.with_columns(pl.lit(sp.rank, pl.Int32).alias("rank")))
    return Plan(
        cuts=cands[chosen],
        event_pos=[p[chosen] for p in event_pos],
        event_rows=event_rows,
        flow_pos=[p[chosen] for p in flow_pos],
        flow_rows=flow_rows,
        candidates=int(cands.size),
        steps=steps,
        schema=pl.concat(
            [pl.DataFrame(schema=sc) for sc in facts.schemas], how="vertical_relaxed"
        ).schema,
    )


def _candidates(a: IntArray, b: IntArray) -> tuple[IntArray, BoolArray]:
    """Times ``T`` (interval starts) before which every interval ends at or before ``T``:
    ``(T, whether one ends exactly at T)``. The first start is no cut (nothing before it)."""
    if a.size == 0:
        return a, np.zeros(0, dtype=bool)
    o = np.argsort(a, kind="stable")
    a, b = a[o], b[o]
    m = np.maximum.accumulate(b)
    first = np.nonzero(np.r_[True, a[1:] != a[:-1]])[0][1:]
    prev = m[first - 1]
    t = a[first]
    ok = t >= prev
    return t[ok], (t == prev)[ok]


EDGE_SHARE = 8
"""The first and the last segment are grown to about 1/``EDGE_SHARE`` of the target (at least
:data:`MIN_SEGMENT_ROWS`): the first is linked with nothing beside it (the writer and the
aggregates' worker wait for it), the last one's aggregates and write with no linking beside
them, so a small one at each end shortens what does not overlap (at 10 GB the first segment
took 3.6 s of wall, the steady pace ~1.4 s per segment)."""


def _choose(before: IntArray, total: int, target: int, edge: int | None = None) -> IntArray:
    """Indexes of the cuts kept: segments grown to at most ``target`` rows where the cuts allow,
    the first and the last to at most ``edge`` (default ``target``) rows (``before``: rows
    before each candidate, non-decreasing; ``total``: all rows)."""
    edge = target if edge is None else edge
    chosen: list[int] = []
    last = 0
    prev = -1
    for j in range(before.size + 1):  # one per candidate cut (a few per step), then the end
        rows = int(before[j]) if j < before.size else total
        goal = target if chosen else edge
        if rows - last > goal:
            if prev >= 0 and before[prev] > last:
                chosen.append(prev)
                last = int(before[prev])
                goal = target
            if rows - last > goal and j < before.size:
                chosen.append(j)
                last = rows
        prev = j
    if edge < total - last and before.size:  # the last segment split: its tail <= edge rows
        j = int(np.searchsorted(before, total - edge, side="left"))
        if j < before.size and last < before[j] < total:
            chosen.append(j)
    return np.array(chosen, dtype=np.int64)


# --------------------------------------------------------------------------------------------------
# state carried across segments


@dataclass
class StackInterner:
    """The stack interning of :func:`link.stack_nodes` over every segment: nodes get a
    provisional id as they are first met (segments in id order); :meth:`final` gives the
    in-memory numbering (frame nodes level by level, each level in order of first appearance,
    then call-stack nodes in order of first appearance)."""

    frames: dict[tuple[int, str], int] = field(default_factory=dict)
    calls: dict[tuple[int, str], int] = field(default_factory=dict)
    level: list[int] = field(default_factory=list)  # per provisional id; -1: call-stack node
    order: list[int] = field(default_factory=list)  # rank within its level / the call nodes
    parent: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    per_level: list[int] = field(default_factory=list)
    n_calls: int = 0

    def _new(self, level: int, parent: int, text: str) -> int:
        pid = len(self.level)
        if level >= 0:
            while len(self.per_level) <= level:
                self.per_level.append(0)
            self.order.append(self.per_level[level])
            self.per_level[level] += 1
        else:
            self.order.append(self.n_calls)
            self.n_calls += 1
        self.level.append(level)
        self.parent.append(parent)
        self.text.append(text)
        return pid

    def add(self, levels: list[pl.DataFrame], calls: list[pl.DataFrame]) -> IntArray:
        """Provisional ids of a segment's local stack ids."""
        frames = [(d, lv) for d, lv in enumerate(levels)] + [(-1, c) for c in calls]
        size = sum(f.height for _, f in frames)
        local = np.full(size, -1, dtype=np.int64)
        for d, nodes in frames:
            table = self.frames if d >= 0 else self.calls
            for sid, pst, text in nodes.iter_rows():  # one per distinct stack node
                par = int(local[pst]) if pst is not None and pst >= 0 else -1
                key = (par, text)
                got = table.get(key)
                if got is None:
                    got = table[key] = self._new(d, par, text)
                local[sid] = got
        return local

    def final(self) -> IntArray:
        """Final stack id of each provisional id."""
        offsets = np.concatenate([[0], np.cumsum(self.per_level)]).astype(np.int64)
        level = np.array(self.level, dtype=np.int64)
        order = np.array(self.order, dtype=np.int64)
        frame = level >= 0
        out = np.where(frame, offsets[np.maximum(level, 0)] + order, offsets[-1] + order)
        return out.astype(np.int64)

    def table(self, final: IntArray) -> pl.DataFrame:
        if not self.level:
            return schema.empty("stacks")
        par = np.array(self.parent, dtype=np.int64)
        nodes = pl.DataFrame(
            {
                "sid": final,
                "pstack": np.where(par >= 0, final[np.maximum(par, 0)], -1),
                "text": pl.Series(self.text, dtype=pl.String),
            },
            schema={"sid": pl.Int64, "pstack": pl.Int64, "text": pl.String},
        )
        return link.stack_rows([nodes])


@dataclass
class QueuedWork:
    """What :func:`link.queued_before_profiling` reads of the whole trace (one rank): the first
    launched device work per device, the device work without a launch (only what may precede
    that first work) and the launch calls no device work used (likewise)."""

    first: dict[int, int] = field(default_factory=dict)  # device (-1: none) -> ts_ns
    launched: bool = False
    unlaunched: bool = False
    cands: list[pl.DataFrame] = field(default_factory=list)  # id, device, ts_ns
    lost: list[IntArray] = field(default_factory=list)  # ts_ns

    def add(self, ev: pl.DataFrame, offset: int) -> None:
        """A linked segment (local ids; ``offset``: its first event's id)."""
        is_dev = link.on_device(ev)
        op = link._np(ev.get_column("op_id"))
        la = link._np(ev.get_column("launch_id"))
        via = np.where(op >= 0, op, la)
        launched = is_dev & (via >= 0)
        # A first launched work met in an earlier segment is earlier than every event of this
        # one (segments come in time order), so none of this segment's launch calls can
        # precede it: :meth:`_prune` would drop them all (their search is skipped).
        known = bool(self.first)
        keys = ev.select(pl.col("id") + offset, pl.col("device").fill_null(-1), "ts_ns")
        if launched.any():
            self.launched = True
            firsts = keys.filter(pl.Series(launched)).group_by("device").agg(pl.min("ts_ns"))
            for dev, ts in firsts.iter_rows():  # one per device
                self.first[dev] = min(ts, self.first.get(dev, ts))
        cand = is_dev & (via < 0)
        if cand.any():
            self.unlaunched = True
            self.cands.append(keys.filter(pl.Series(cand)))
        if not known:
            used = pl.Series(np.unique(la[is_dev & (la >= 0)])).implode()
            calls = (
                ev.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("row"), "ts_ns", "name")
                .filter(
                    (ev.get_column("kind") == "runtime")
                    & ev.get_column("correlation").is_not_null()
                )
                .filter(pl.col("name").str.contains(link._LAUNCH_CALL))
            )
            lost = calls.filter(~pl.col("row").is_in(used))
            self.lost.append(link._np(lost.get_column("ts_ns")))
        self._prune()

    def _prune(self) -> None:
        """Drop what can no longer precede a first launched work (segments come in time
        order: a device's first launched work, once met, is the trace's)."""
        if self.first:
            low = min(self.first.values())
            self.lost = [t[t < low] for t in self.lost if (t < low).any()]
            firsts = pl.DataFrame(
                {"device": list(self.first), "first": list(self.first.values())},
                schema={"device": pl.Int64, "first": pl.Int64},
            )
            kept = []
            for part in self.cands:
                c = part.with_columns(pl.col("device").cast(pl.Int64)).join(
                    firsts, on="device", how="left", maintain_order="left"
                )
                kept.append(
                    c.filter(pl.col("first").is_null() | (pl.col("ts_ns") < pl.col("first"))).drop(
                        "first"
                    )
                )
            self.cands = [c for c in kept if c.height]

    def early_ids(self) -> IntArray:
        """Ids of the queued-before-profiling work (its step is none)."""
        none = np.zeros(0, dtype=np.int64)
        if not (self.launched and self.unlaunched) or not self.cands:
            return none
        firsts = pl.DataFrame(
            {"device": list(self.first), "first": list(self.first.values())},
            schema={"device": pl.Int64, "first": pl.Int64},
        )
        c = pl.concat(self.cands).with_columns(pl.col("device").cast(pl.Int64))
        c = c.join(firsts, on="device", how="inner").filter(pl.col("ts_ns") < pl.col("first"))
        if not c.height:
            return none
        low = min(self.first.values())
        n_lost = sum(int((t < low).sum()) for t in self.lost)
        if n_lost >= c.height:  # as many lost launches as such work: not known to predate
            return none
        return link._np(c.get_column("id"))


# --------------------------------------------------------------------------------------------------
# link


@dataclass
class _Out:
    """What the segments leave for the end."""

    segments: int = 0
    flows: list[pl.DataFrame] = field(default_factory=list)
    memory: list[pl.DataFrame] = field(default_factory=list)
    memory_order: list[pl.Series] = field(default_factory=list)
    tracks: list[pl.DataFrame] = field(default_factory=list)
    stacks: StackInterner = field(default_factory=StackInterner)
    queued: QueuedWork = field(default_factory=QueuedWork)
    largest: int = 0
    # hotspots' and breakdown's partial tables, per segment (None: not written)
    aggregates: segment_aggregates.Collector | None = field(
        default_factory=segment_aggregates.collector
    )


def _read_rows(files: list[Path], ranges: list[tuple[int, int]]) -> list[pl.DataFrame]:
    return [
        pl.scan_parquet(f).slice(lo, hi - lo).collect()
        for f, (lo, hi) in zip(files, ranges, strict=True)
        if hi > lo
    ]


def _segment_events(sp: Spilled, pl_: Plan, k: int) -> pl.DataFrame:
    """Segment ``k``'s unlinked events in id order, ids 0..n-1 (as the in-memory load's
    ``kineto._events_table`` rows, for the whole trace, restricted to it)."""
    parts = _read_rows(sp.event_files, pl_.ranges(pl_.event_pos, pl_.event_rows, k))
    seg = pl.concat([pl.DataFrame(schema=pl_.schema), *parts], how="vertical_relaxed")
    del parts
    seg = renumbered(seg, sp.maps, _TRACK_COLUMNS)
    if "rank" in seg.columns:
        seg = seg.with_columns(pl.lit(sp.rank, pl.Int32).alias("rank"))
    seg = _in_time_order(seg)
    return seg.insert_column(0, pl.int_range(seg.height, dtype=pl.Int64, eager=True).alias("id"))


MAX_MERGE_BLOCKS = 64
"""Most interleaved blocks :func:`_in_time_order` gathers one by one (more: one gather of all
the rows)."""


def _in_time_order(seg: pl.DataFrame) -> pl.DataFrame:
    """``seg`` stably sorted by ``ts_ns``, as ``seg.sort("ts_ns", maintain_order=True)``.

    ``seg`` is its window files' row ranges in window order, each sorted already, so the
    stable order moves only the rows where two ranges overlap in time (about 0.3% of a
    segment of the generated traces, next to the ranges' ends). The order is found on the
    ``ts_ns`` array alone, and only the blocks of positions it permutes are gathered; the
    rows between them are kept as slices (a sort of the whole frame gathers every column of
    every row: ~0.2 CPU s per 500 K events)."""
    ts = seg.get_column("ts_ns")
    if ts.is_sorted():  # (one window's rows, or ranges that do not overlap)
        return seg
    if ts.null_count():  # (the events table has none: the scan drops slices without ts)
        return seg.sort("ts_ns", maintain_order=True)
    order = np.argsort(link._np(ts), kind="stable")
    pos = np.arange(order.size)
    # position i closes a block when the order's first i + 1 entries are a permutation of
    # 0..i; a block of one row is a row that stays
    ends = np.nonzero(np.maximum.accumulate(order) == pos)[0]
    starts = np.r_[0, ends[:-1] + 1]
    moved = ends > starts
    if int(moved.sum()) > MAX_MERGE_BLOCKS:
        return seg[pl.Series(order)]
    pieces = []
    done = 0
    for a, b in zip(starts[moved].tolist(), ends[moved].tolist(), strict=True):  # a few
        if a > done:
            pieces.append(seg.slice(done, a - done))
        pieces.append(seg[pl.Series(order[a : b + 1])])
        done = b + 1
    if done < seg.height:
        pieces.append(seg.slice(done))
    # one contiguous copy (a memcpy, not a gather), so the read parts are freed before the
    # linking copies the frame column by column (a chunked frame kept them alive: +0.35 GB
    # of peak at 3 GB)
    return pl.concat(pieces, rechunk=True)


def _segment_flows(sp: Spilled, pl_: Plan, k: int) -> pl.DataFrame:
    """Segment ``k``'s raw flow records, in trace order."""
    parts = _read_rows(sp.flow_files, pl_.ranges(pl_.flow_pos, pl_.flow_rows, k))
    if not parts:
        return pl.DataFrame(schema=link.RAW_FLOWS)
    fl = pl.concat(parts, how="vertical_relaxed").sort("_fi").drop("_fi")
    fl = renumbered(fl, sp.maps, _FLOW_TRACKS)
    return fl.with_columns(
        pl.lit(sp.rank, pl.Int32).alias("rank"), pl.col("kind").cast(schema.FlowKind)
    )


def _link_segment(
    seg: pl.DataFrame, raw_flows: pl.DataFrame, memory: pl.DataFrame, steps: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, list[pl.DataFrame], list[pl.DataFrame]]:
    """:func:`link.link_events` and :func:`link.link_memory` on one segment (local ids), with
    the whole trace's steps, the queued-before-profiling rule left for the end and the stack
    nodes before numbering: ``(events, flows, memory, frame levels, call-stack nodes)``."""
    ev, index = link.nest_indexed(link.call_site_frames(seg))
    del seg
    if raw_flows.height and ev.height:
        flows = link.resolve_flows(ev, raw_flows, index=index)
    else:
        flows = schema.empty("flows")
    ev = link.link_launches(ev, flows)
    ev = link.classify_communication(ev)
    ev = link.mark_backward(ev)
    ev = link.link_fwd_bwd(ev, flows)
    ev = link.assign_steps(ev, steps, queued=False)
    ev, levels, calls = link.stack_nodes(ev)
    ev = schema.conform("events", ev.drop([c for c in link.HELPER_COLUMNS if c in ev.columns]))
    mem = link.link_memory(ev, memory, steps, index=index)
    return ev, flows, mem, levels, calls


def link_windows(
    sp: Spilled,
    folder: Path,
    *,
    budget: int,
    cache_entry: bool,
    progress: Callable[[str, int, int], None] | None = None,
) -> Profile:
    """The Profile of the spilled windows, linked segment by segment into a Profile folder and
    opened lazily (see the module doc). ``folder``: the spill folder (the Profile folder goes
    there when it is not the cache entry)."""
    target_rows = segment_rows(budget)
    pl_ = plan(sp, target_rows)
    target = cache.writable_entry(sp.path) if cache_entry else None
    dest = target or folder / "profile"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        out = _Out()
        source = register_io_source(
            lambda *_: _linked_segments(sp, pl_, out, progress),
            schema=dict(schema.EVENTS),
        )
        # Each segment is linked when the writer asks for it and written as its row groups.
        source.sink_parquet(tmp / "events.parquet", **WRITE_OPTIONS)
        probe("all segments linked and written")
        return _finish(
            sp,
            pl_,
            out,
            tmp,
            dest,
            budget=budget,
            target_rows=target_rows,
            in_cache=target is not None,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


PREFETCH = False
"""Read the next segment's rows from the window files on a worker thread while this one is
linked (the Parquet decoding releases the GIL; the linking holds it between its queries).
Off: at 10 GB the linking phase took the same wall time with it (59.7 s against 60.1 s) and
~0.3 GB more peak RSS (docs/out-of-core.md, "Time per GB")."""

THREADS_ENV = "OPSCOPE_OOC_THREADS"
"""``0``: the out-of-core load's worker threads off (the spill's background writes and this
prefetch), to compare their wall time on a given machine; anything else or unset: on."""


def worker_threads() -> bool:
    """Whether ``$OPSCOPE_OOC_THREADS`` leaves the out-of-core load's worker threads on."""
    return os.environ.get(THREADS_ENV, "1") != "0"


class _Prefetch:
    """``read(k)`` for k = 0, 1, ... in order, ``read(k + 1)`` running on a worker thread
    (with :data:`PREFETCH`) while segment ``k`` is used: one segment's raw rows in memory
    beside the one being linked."""

    def __init__(self, read: Callable[[int], tuple[pl.DataFrame, pl.DataFrame]], n: int) -> None:
        self.read, self.n = read, n
        on = PREFETCH and worker_threads() and n > 1
        self.pool = ThreadPoolExecutor(max_workers=1) if on else None
        self.next: Future[tuple[pl.DataFrame, pl.DataFrame]] | None = None

    def get(self, k: int) -> tuple[pl.DataFrame, pl.DataFrame]:
        got = self.next.result() if self.next is not None else self.read(k)
        self.next = None
        if self.pool is not None and k + 1 < self.n:
            self.next = self.pool.submit(self.read, k + 1)
        return got

    def close(self) -> None:
        """The worker stopped (a read under way ends first; its rows are dropped)."""
        self.next = None
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _linked_segments(
    sp: Spilled,
    pl_: Plan,
    out: _Out,
    progress: Callable[[str, int, int], None] | None,
) -> Iterator[pl.DataFrame]:
    """Each segment's linked events (final ids, provisional stack ids), in id order; what the
    end needs is left in ``out``."""
    n_seg = pl_.segments
    # memory rows by segment, trace order kept (their table is in trace order)
    mem = sp.memory.with_row_index("_mi")
    mem_seg = np.searchsorted(
        pl_.cuts, link._np(mem.get_column("ts_ns"), np.iinfo(np.int64).min), side="right"
    )
    mem = mem.with_columns(pl.Series("_seg", mem_seg, dtype=pl.Int64)).sort(
        "_seg", maintain_order=True
    )
    mem_bounds = np.searchsorted(
        link._np(mem.get_column("_seg")), np.arange(n_seg + 1), side="left"
    )
    reader = _Prefetch(lambda k: (_segment_events(sp, pl_, k), _segment_flows(sp, pl_, k)), n_seg)
    aggregates = _Aggregating(out.aggregates, pl_.steps)
    try:
        yield from _linked_each(sp, pl_, out, progress, reader, mem, mem_bounds, aggregates)
    finally:
        try:
            aggregates.close()
        finally:
            reader.close()


class _Aggregating:
    """Each linked segment's partial tables taken (:meth:`segment_aggregates.Collector.add`) on
    a worker thread while the next segment is linked and this one written: they cost ~4.5 CPU s
    per GB, mostly in Polars, which releases the GIL, so on two cores they overlap the link.
    One segment at a time (the previous one's is waited for before the next is handed over):
    at most one linked segment more in memory. Without worker threads, in the caller."""

    def __init__(self, collector: segment_aggregates.Collector | None, steps: pl.DataFrame):
        self.collector, self.steps = collector, steps
        on = collector is not None and worker_threads()
        self.pool = ThreadPoolExecutor(max_workers=1) if on else None
        self.pending: Future[None] | None = None

    def add(self, ev: pl.DataFrame, offset: int) -> None:
        if self.collector is None:
            return
        if self.pool is None:
            self.collector.add(ev, self.steps, offset)
            return
        self.wait()
        self.pending = self.pool.submit(self.collector.add, ev, self.steps, offset)

    def wait(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()  # (add records its own failures: only a BaseException gets here)

    def close(self) -> None:
        try:
            self.wait()
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True)


def _linked_each(
    sp: Spilled,
    pl_: Plan,
    out: _Out,
    progress: Callable[[str, int, int], None] | None,
    reader: _Prefetch,
    mem: pl.DataFrame,
    mem_bounds: IntArray,
    aggregates: _Aggregating,
) -> Iterator[pl.DataFrame]:
    """:func:`_linked_segments`' loop (``reader``: each segment's rows and raw flows;
    ``aggregates``: takes each linked segment's partial tables)."""
    n_seg = pl_.segments
    offset = 0
    for k in range(n_seg):  # one per segment
        seg, raw_flows = reader.get(k)
        n = seg.height
        out.largest = max(out.largest, n)
        m = mem.slice(int(mem_bounds[k]), int(mem_bounds[k + 1] - mem_bounds[k]))
        out.memory_order.append(m.get_column("_mi"))
        m = m.drop("_mi", "_seg")
        ev, flows, lm, levels, calls = _link_segment(seg, raw_flows, m, pl_.steps)
        del seg, raw_flows
        out.queued.add(ev, offset)  # (local ids)
        local = out.stacks.add(levels, calls)
        sid = link._np(ev.get_column("stack_id"))
        prov = np.where(sid >= 0, local[np.maximum(sid, 0)], -1) if local.size else sid
        ev = ev.with_columns(
            *[pl.col(c) + offset for c in _ID_COLUMNS], link._nullable("stack_id", prov)
        )
        aggregates.add(ev, offset)
        out.tracks.append(kineto._tracks(ev))
        out.flows.append(flows.with_columns(pl.col("src_id") + offset, pl.col("dst_id") + offset))
        out.memory.append(lm.with_columns(pl.col("op_id") + offset))
        out.segments += 1
        offset += n
        if progress is not None:
            progress("link", k + 1, n_seg)
        if k == 0:
            probe("first segment linked")
        yield ev
        del ev


def _finish(
    sp: Spilled,
    pl_: Plan,
    out: _Out,
    tmp: Path,
    dest: Path,
    *,
    budget: int,
    target_rows: int,
    in_cache: bool,
) -> Profile:
    """The small tables and the fixes of the events written, the folder renamed into place
    and opened lazily."""
    if out.segments != pl_.segments:  # (the writer stopped asking: never silently short)
        raise RuntimeError(f"{sp.path}: {out.segments} of {pl_.segments} segments written")
    flows = (
        pl.concat(out.flows).sort(["rank", "kind", "flow_id"])
        if any(f.height for f in out.flows)
        else schema.empty("flows")
    )
    flows = schema.conform("flows", flows)
    oddities = dict(sp.oddities)
    kineto._bump(oddities, "flow not bound to events", max(0, sp.flow_starts - flows.height))
    memory = pl.concat(out.memory, how="vertical_relaxed")
    order = pl.concat(out.memory_order)
    memory = memory.with_columns(order.alias("_mi")).sort("_mi").drop("_mi")
    tracks = pl.concat(out.tracks).group_by(["pid", "tid"]).agg(pl.col("is_device").any())
    final = out.stacks.final()
    tables = {
        "flows": flows,
        "stacks": out.stacks.table(final),
        "memory": memory,
        "counters": kineto._counters(sp.counters, sp.rank),
        "steps": pl_.steps,
        "devices": kineto._devices(sp.header, sp.rank),
        "threads": kineto._threads_of(tracks, sp.names, sp.rank),
    }
    fix = []
    if final.size and not np.array_equal(final, np.arange(final.size)):
        fix.append(
            pl.col("stack_id").replace_strict(
                pl.Series(np.arange(final.size)),
                pl.Series(final),
                default=None,
                return_dtype=pl.Int64,
            )
        )
    early = out.queued.early_ids()
    aggregates = (
        out.aggregates.finish(
            tmp,
            final_stacks=final,
            early=early,
            events_file=tmp / "events.parquet",
            had_steps=pl_.steps.height > 0,
        )
        if out.aggregates is not None
        else None
    )
    if early.size:
        fix.append(
            pl.when(pl.col("id").is_in(pl.Series(early).implode()))
            .then(None)
            .otherwise(pl.col("step"))
            .cast(pl.Int32)
            .alias("step")
        )
    if fix:  # a second streaming pass over the written events (stack ids, queued work's steps)
        fixed = tmp / "events.fixed.parquet"
        pl.scan_parquet(tmp / "events.parquet").with_columns(fix).sink_parquet(
            fixed, **WRITE_OPTIONS
        )
        fixed.replace(tmp / "events.parquet")
    meta = kineto._profile_meta(sp.header, sp.path, oddities, sp.notes, sp.rank)
    if in_cache:
        meta["cache_key"] = cache.cache_key(sp.path, rank=sp.rank_arg)
    meta["out_of_core"] = {
        "segments": pl_.segments,
        "cut_points": pl_.candidates,
        "budget": budget,
        "segment_rows": target_rows,
        "largest_segment_events": out.largest,
        "largest_over_budget": out.largest * LINK_BYTES_PER_EVENT > budget,
        "fix_pass": bool(fix),
        "entry": str(dest) if in_cache else None,
    }
    if aggregates is not None:
        meta["out_of_core"]["aggregates"] = aggregates
    _write_entry(tmp, dest, tables, meta)
    probe("entry written")
    if in_cache and dest.parent == cache.user_cache_root():
        cache.evict(dest.parent, keep=dest)
    return Profile.open(dest, lazy=True)


def _write_entry(
    tmp: Path, target: Path, tables: dict[str, pl.DataFrame], meta: dict[str, Any]
) -> None:
    """The Profile folder as ``Profile.save`` writes it, from ``tmp`` (which holds
    ``events.parquet`` already) and the other ``tables``, renamed to ``target``."""
    for name in schema.TABLES:
        if name != "events":
            df = tables.get(name)
            (schema.empty(name) if df is None else schema.conform(name, df)).write_parquet(
                tmp / f"{name}.parquet", **WRITE_OPTIONS
            )
    finish_folder(tmp, target, meta)
