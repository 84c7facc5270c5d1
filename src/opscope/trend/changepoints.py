"""Change points: a shift in a series' level that persists, not a single spike.

Binary segmentation with a robust cost: a segment's cost is the sum of absolute deviations from
its median (the L1 cost, which one outlier cannot pull the way it pulls a mean). The best split of
a segment is the one that lowers that cost most, with at least ``min_segment`` points on each side;
it is kept when the two sides' medians differ by at least :data:`MIN_EFFECT` of the smaller one
*and* by more than :data:`NOISE_K` times the noise: the larger of the two sides' pooled scaled MAD
(compare's "beyond the step-to-step scatter" rule) and the whole series' point-to-point scatter
(scaled MAD of successive differences / sqrt 2, which a level shift barely moves). The second
term matters for short sides (three samples can have a MAD near 0) and for load drift on shared
machines, which moves a steady run's level by less than its point-to-point jitter. Then both
sides are searched again. The L1 split can land on a spike beside the true boundary, so the
position is then refined within ``min_segment`` points to the one that leaves fewest points on
the wrong side of the midpoint between the two medians (ties: the one from which the new level
persists longest). A spike shorter than ``min_segment`` points cannot move a median, so it is
never a change point.

Pure: numbers in, :class:`ChangePoint` records out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from opscope.analysis.compare import MAD_SCALE

MIN_SEGMENT_STEPS: Final = 5
"""Points a side needs for a per-step series (metrics.jsonl): a shift must last 5 steps, which a
GC pause, a checkpoint write or a dataloader hiccup (1-2 steps) does not."""

MIN_SEGMENT_SAMPLES: Final = 3
"""Points a side needs for a per-sample series (one point per periodic trace): the first sample
often carries one-time costs (allocator warm-up, lazy initialisation), so two odd samples in a row
are not yet a change; three are."""

MIN_EFFECT: Final = 0.25
"""The medians must differ by at least 25 % of the smaller one. CPU frequency scaling and
co-tenant load on shared machines move a steady run's step time by 10-20 % for minutes; a
persistent change smaller than this is not worth an alarm in a trend."""

NOISE_K: Final = 3.0
"""And by more than this many pooled scaled MADs of the two sides (robust 3-sigma)."""

MAX_CANDIDATES: Final = 1000
"""Split positions tried per segment at first; a longer segment is searched on a stride and then
refined around the best (bounds the cost on very long runs to O(n · 1000) per level)."""

MAX_CHANGES: Final = 20
"""At most this many change points per series (a sawtooth would otherwise yield dozens)."""


@dataclass(frozen=True)
class ChangePoint:
    """A persistent shift at ``index`` (the first point of the new level)."""

    index: int
    before: float  # median of the segment before
    after: float  # median of the segment after
    before_range: tuple[int, int]  # [start, end) point indices of the segment before
    after_range: tuple[int, int]
    noise: float  # NOISE_K x max(pooled scaled MAD, jitter)

    @property
    def ratio(self) -> float | None:
        """``after / before`` (> 1: slower / larger); None when ``before`` is 0."""
        return self.after / self.before if self.before else None


def _l1(x: npt.NDArray[np.float64]) -> float:
    return float(np.abs(x - np.median(x)).sum()) if x.size else 0.0


def _mad(x: npt.NDArray[np.float64]) -> float:
    return float(np.median(np.abs(x - np.median(x)))) * MAD_SCALE if x.size else 0.0


def _best_split(x: npt.NDArray[np.float64], m: int) -> int | None:
    n = x.size
    if n < 2 * m:
        return None
    lo, hi = m, n - m  # split t: left x[:t], right x[t:]
    stride = max(1, math.ceil((hi - lo + 1) / MAX_CANDIDATES))

    def search(ts: range) -> tuple[float, int]:
        best = (math.inf, -1)
        for t in ts:
            c = _l1(x[:t]) + _l1(x[t:])
            if c < best[0]:
                best = (c, t)
        return best

    _, t = search(range(lo, hi + 1, stride))
    if stride > 1:
        _, t = search(range(max(lo, t - stride), min(hi, t + stride) + 1))
    return t if t >= 0 else None


def jitter(x: npt.NDArray[np.float64]) -> float:
    """Point-to-point scatter of a series: scaled MAD of its successive differences / sqrt 2."""
    return _mad(np.diff(x)) / math.sqrt(2.0) if x.size > 2 else 0.0


def noise(before: npt.NDArray[np.float64], after: npt.NDArray[np.float64], floor: float) -> float:
    """NOISE_K times the larger of the sides' pooled scaled MAD and ``floor`` (the jitter)."""
    return NOISE_K * max(math.sqrt((_mad(before) ** 2 + _mad(after) ** 2) / 2.0), floor)


def significant(
    before: npt.NDArray[np.float64], after: npt.NDArray[np.float64], floor: float = 0.0
) -> bool:
    """Whether ``after``'s level differs from ``before``'s by the module's rule."""
    mb, ma = float(np.median(before)), float(np.median(after))
    small = min(abs(mb), abs(ma))
    shift = abs(ma - mb)
    effect = shift / small if small > 0 else (math.inf if shift > 0 else 0.0)
    return effect >= MIN_EFFECT and shift > noise(before, after, floor)


def _refine(x: npt.NDArray[np.float64], t: int, m: int) -> int:
    """The split near ``t`` with fewest points on the wrong side of the medians' midpoint."""
    mb, ma = float(np.median(x[:t])), float(np.median(x[t:]))
    mid = (mb + ma) / 2.0
    up = ma > mb
    after_side = (x > mid) if up else (x < mid)
    best: tuple[int, int, int] | None = None
    for c in range(max(m, t - m), min(x.size - m, t + m) + 1):
        wrong = int(after_side[:c].sum() + (~after_side[c:]).sum())
        tail = ~after_side[c:]
        persists = int(tail.argmax()) if tail.any() else int(tail.size)  # new-level run from c
        key = (wrong, -persists, c)
        if best is None or key < best:
            best = key
    return t if best is None else best[2]


def detect(values: npt.ArrayLike, min_segment: int) -> list[ChangePoint]:
    """Change points of the finite ``values`` (in order), by index; see the module docstring."""
    x = np.asarray(values, dtype=np.float64)
    floor = jitter(x)
    cuts: list[int] = []
    todo = [(0, x.size)]
    while todo and len(cuts) < MAX_CHANGES:
        a, b = todo.pop()
        t = _best_split(x[a:b], min_segment)
        if t is None or not significant(x[a : a + t], x[a + t : b], floor):
            continue
        t = _refine(x[a:b], t, min_segment)
        cuts.append(a + t)
        todo += [(a, a + t), (a + t, b)]
    cuts.sort()
    bounds = [0, *cuts, x.size]
    out = []
    for i, c in enumerate(cuts):
        before, after = x[bounds[i] : c], x[c : bounds[i + 2]]
        out.append(
            ChangePoint(
                index=c,
                before=float(np.median(before)),
                after=float(np.median(after)),
                before_range=(bounds[i], c),
                after_range=(c, bounds[i + 2]),
                noise=noise(before, after, floor),
            )
        )
    return out
