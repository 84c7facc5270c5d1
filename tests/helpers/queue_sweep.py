"""The launch queue worked out by a sweep in plain Python: the reference the breakdown's queue
tests (its plan and its arrays) compare with."""

from __future__ import annotations

from collections.abc import Iterable


def queue_sweep(
    rows: Iterable[tuple[int | None, ...]], rng_of: dict[int, tuple[int, int]]
) -> dict[tuple[int | None, ...], tuple[int, float, int, int, float]]:
    """Per (rank, device, stream) of ``rows`` (rank, device, stream, launch_ts, ts_ns, dur_ns)
    whose rank has a range in ``rng_of`` (its first window's start, its last window's end) of
    more than 0 ns: (span, mean queue length, max, ns with none queued, % of the span with none
    queued). Each kernel is queued from its launch (its start where it has none) to its end; the
    points are swept in time order, an end before a launch at one instant, clipped to the range.
    The mean and share are Python's quotients of the integer sums."""
    lanes: dict[tuple[int | None, ...], list[tuple[int, int]]] = {}
    for rank, dev, stream, launch, ts, dur in rows:
        if rank in rng_of:
            assert ts is not None and dur is not None
            pts = lanes.setdefault((rank, dev, stream), [])
            pts += [(ts if launch is None else launch, 1), (ts + dur, -1)]
    want = {}
    for key, pts in lanes.items():
        pts.sort()  # (-1 before 1 at one instant)
        r0, r1 = rng_of[key[0]]  # type: ignore[index]
        q = area = top = busy = 0
        for i, (t, d) in enumerate(pts):
            q += d
            t1 = pts[i + 1][0] if i + 1 < len(pts) else t
            ln = max(min(t1, r1) - max(t, r0), 0)
            area += q * ln
            if ln > 0:
                top = max(top, q)
            if q > 0:
                busy += ln
        span = r1 - r0
        if span > 0:
            zero = span - busy
            want[key] = (span, area / span, top, zero, 100 * zero / span)
    return want
