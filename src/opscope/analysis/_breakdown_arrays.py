"""The step breakdown's interval sums over NumPy arrays (:mod:`opscope.analysis.breakdown`'s
definitions, for inputs already read into int64 arrays without nulls).

Intervals belong to *lanes* (dense ids ``0 .. n_lanes - 1``): a window's class, a window, a
window's stream. Every figure is a sum or difference of int64 times, exact in any order of
additions. (A plan of a dozen steps per table was a fixed cost of ~0.3 ms a query on small
traces.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from opscope.analysis import tree

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: Laying the groups end to end must stay below this (int64, with room for the +1 per group).
_SPAN_LIMIT = 2.0**61


def run_starts(lane: IntArray) -> BoolArray:
    """For ``lane`` sorted: True at the first row of each run of equal lanes."""
    first = np.ones(len(lane), dtype=bool)
    first[1:] = lane[1:] != lane[:-1]
    return first


def running_cover(
    first: BoolArray, start: IntArray, end: IntArray
) -> tuple[BoolArray, IntArray] | None:
    """For intervals sorted by group and start (``first``: the row starts its group): (``new``:
    the row starts a segment of its group's union, ``covered``: the running maximum of the ends
    of the group's rows before it).

    The running maximum must restart at each group: each group's times are moved to lie after
    the previous group's, so that one running maximum over the whole column is the per-group one
    (integers: exact). None when an interval ends before it starts or the moved times would not
    fit in int64."""
    n = len(start)
    if not n:
        return np.zeros(0, dtype=bool), np.zeros(0, dtype=np.int64)
    if (end < start).any():
        return None
    at = np.flatnonzero(first)
    lo = start[at]  # sorted by start within a group: its first start is its least
    hi = np.maximum.reduceat(end, at)
    if float(np.sum(hi.astype(np.float64) - lo.astype(np.float64))) + n >= _SPAN_LIMIT:
        return None
    span = hi - lo + 1
    off = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(span)[:-1]])
    shift = np.repeat(off - lo, np.diff(np.append(at, n)))
    run = np.maximum.accumulate(end + shift)
    covered = np.empty(n, dtype=np.int64)
    covered[0] = 0
    covered[1:] = run[:-1]
    new = first | (start + shift > covered)
    covered -= shift
    return new, covered


def per_lane_sum(lane: IntArray, values: IntArray, n_lanes: int) -> IntArray:
    """The sum of ``values`` per lane (``lane`` sorted; 0 for a lane without a row)."""
    out = np.zeros(n_lanes, dtype=np.int64)
    if len(lane):
        at = np.flatnonzero(run_starts(lane))
        out[lane[at]] = np.add.reduceat(values, at)
    return out


def union_per_lane(lane: IntArray, start: IntArray, end: IntArray, n_lanes: int) -> IntArray | None:
    """The length of the union of the intervals ``start``..``end`` per lane (0 without one);
    None where :func:`running_cover` declines."""
    order = np.lexsort((start, lane))
    ln, s, e = lane[order], start[order], end[order]
    runs = running_cover(run_starts(ln), s, e)
    if runs is None:
        return None
    new, covered = runs
    # each interval adds what it covers past the running end of those before it (its whole
    # length when it starts a segment): the sum per lane is the union
    add = np.where(new, e - s, np.maximum(e - np.maximum(s, covered), 0))
    return per_lane_sum(ln, add, n_lanes)


@dataclass(frozen=True)
class Split:
    """Busy time and the idle categories per lane (each ``n_lanes`` long)."""

    busy: IntArray
    host_wait: IntArray
    kernel_wait: IntArray
    other: IntArray


def idle_split(
    lane: IntArray,
    start: IntArray,
    end: IntArray,
    launch: IntArray,
    launched: BoolArray,
    w0: IntArray,
    w1: IntArray,
) -> Split | None:
    """The idle split of breakdown's module doc per lane (``w0``, ``w1``: each lane's window,
    the intervals inside it): the union's segments, each the gap before it (from the previous
    segment's end, or the window's start) counted as host wait when the earliest launch
    (``launch`` where ``launched``) among the work starting the segment is after the gap
    began, kernel wait when at or before it, other without a launch; plus the tail after the
    last segment (the whole window without one) as other. None where :func:`running_cover`
    declines."""
    n_lanes = len(w0)
    if tree.SHORTCUTS and not launched.any():
        # no launch (Ascend's work, kernels without runtime calls): every gap is other, so a
        # lane's idle time is its window less its busy time (the gaps, the tail and the
        # segments lie end to end from the window's start), the union alone
        busy = union_per_lane(lane, start, end, n_lanes)
        if busy is None:
            return None
        none = np.zeros(n_lanes, dtype=np.int64)
        return Split(busy=busy, host_wait=none, kernel_wait=none, other=w1 - w0 - busy)
    order = np.lexsort((start, lane))
    ln, s, e = lane[order], start[order], end[order]
    first = run_starts(ln)
    runs = running_cover(first, s, e)
    if runs is None:
        return None
    at = np.flatnonzero(runs[0])
    seg_lane, seg_s = ln[at], s[at]
    seg_e = np.maximum.reduceat(e, at) if len(at) else np.zeros(0, dtype=np.int64)
    # the work that starts a segment: its rows at the segment's start
    opening = s == np.repeat(seg_s, np.diff(np.append(at, len(s))))
    seg_launched = np.zeros(len(at), dtype=bool)
    seg_launch = np.zeros(len(at), dtype=np.int64)
    if len(at):
        with_launch = opening & launched[order]
        seg_launched = np.logical_or.reduceat(with_launch, at)
        big = np.iinfo(np.int64).max
        seg_launch = np.minimum.reduceat(np.where(with_launch, launch[order], big), at)
    lane_first = first[at]
    prev_end = np.concatenate([np.zeros(1, dtype=np.int64), seg_e[:-1]])
    g0 = np.where(lane_first, w0[seg_lane], prev_end)
    gap = seg_s - g0
    none = np.zeros(len(at), dtype=np.int64)
    host = np.where(seg_launched & (seg_launch > g0), gap, none)
    kernel = np.where(seg_launched & (seg_launch <= g0), gap, none)
    unlinked = np.where(seg_launched, none, gap)
    has_work = np.zeros(n_lanes, dtype=bool)
    has_work[seg_lane] = True
    last_end = np.zeros(n_lanes, dtype=np.int64)
    if len(at):
        lane_at = np.flatnonzero(lane_first)
        last_end[seg_lane[lane_at]] = np.maximum.reduceat(seg_e, lane_at)
    other = np.where(has_work, per_lane_sum(seg_lane, unlinked, n_lanes) + w1 - last_end, w1 - w0)
    return Split(
        busy=per_lane_sum(seg_lane, seg_e - seg_s, n_lanes),
        host_wait=per_lane_sum(seg_lane, host, n_lanes),
        kernel_wait=per_lane_sum(seg_lane, kernel, n_lanes),
        other=other,
    )


def lane_ids(*keys: IntArray) -> tuple[IntArray, IntArray]:
    """(Each row's lane: the rank of its ``keys`` among the distinct ones, sorted by the first
    key, then the next; a row of each lane, in lane order)."""
    n = len(keys[0])
    order = np.lexsort(keys[::-1])
    first = np.zeros(n, dtype=bool)
    if n:
        first[0] = True
        for k in keys:
            sk = k[order]
            first[1:] |= sk[1:] != sk[:-1]
    ids = np.empty(n, dtype=np.int64)
    ids[order] = np.cumsum(first) - 1
    return ids, order[first]


@dataclass(frozen=True)
class Queue:
    """The launch queue per lane (each ``n_lanes`` long): ``area`` the integral of the queue's
    length over the lane's range (ns), ``top`` its greatest length over a stretch of some
    length (0 without one), ``busy`` the time something is queued (ns)."""

    area: IntArray
    top: IntArray
    busy: IntArray


def launch_queue(
    lane: IntArray,
    launch: IntArray,
    end: IntArray,
    r0: IntArray,
    r1: IntArray,
) -> Queue:
    """The launch queue of work items (each in its ``lane``, queued from ``launch`` to
    ``end``) over each lane's range ``r0[lane]`` .. ``r1[lane]``: the points of every lane
    sorted by time, an end before a launch at one instant (no phantom peak), each stretch
    from a point to its lane's next one clipped to the range. Integers throughout: exact."""
    n_lanes = len(r0)
    n = len(lane)
    ln = np.concatenate([lane, lane])
    t = np.concatenate([launch, end])
    d = np.concatenate([np.ones(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)])
    order = np.lexsort((d, t, ln))
    ln, t, d = ln[order], t[order], d[order]
    # a lane's launches and ends cancel (one of each per item, in its lane): the running sum
    # over all rows is each lane's own
    q = np.cumsum(d)
    nxt = t.copy()  # the lane's next point (its last: itself, a stretch of no length)
    if len(t) > 1:
        same = ln[1:] == ln[:-1]
        nxt[:-1] = np.where(same, t[1:], t[:-1])
    length = np.maximum(np.minimum(nxt, r1[ln]) - np.maximum(t, r0[ln]), 0)
    low = np.iinfo(np.int64).min
    top = np.full(n_lanes, low, dtype=np.int64)
    if len(ln):
        at = np.flatnonzero(run_starts(ln))
        top[ln[at]] = np.maximum.reduceat(np.where(length > 0, q, low), at)
    return Queue(
        area=per_lane_sum(ln, q * length, n_lanes),
        top=np.where(top == low, 0, top),
        busy=per_lane_sum(ln, np.where(q > 0, length, 0), n_lanes),
    )
