# mypy: disable-error-code="untyped-decorator,no-any-return,misc"
"""Compiled kernel of :func:`opscope.analysis.critical_path.longest_path`: the pass over nodes in
end-time order that relaxes each node's incoming edges and walks the best path back.

It was a Python loop: ~1 us per node and per edge, 0.065 s of the 0.2 s critical path of a
75k-event trace. numba compiles it on first use and caches the machine code beside this file
(``cache=True``, as :mod:`opscope.ingest._scan_kernels` does), so a fresh process only loads it.
The arithmetic is int64, as Python's was on nanosecond times (no value nears 2**63), and the
ties break the same way: an edge only wins with a strictly longer path, the earliest such
predecessor in edge order, and the path ends at the first node of the longest length.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

_jit: Any = numba.njit(cache=True, nogil=True)


@_jit
def longest(
    own: np.ndarray,
    gains: np.ndarray,
    preds: np.ndarray,
    bounds: np.ndarray,
    gid: np.ndarray,
    es: np.ndarray,
    ed: np.ndarray,
    ebounds: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:
    """``own``: each node's length alone; edges grouped by destination (``bounds[k]`` to
    ``bounds[k + 1]`` are node ``k``'s, in order) with their source ``preds`` and ``gains``.
    ``gid``, ``es``, ``ed``, ``ebounds`` (empty when not needed): each node's group of equal end
    time and that group's edges (``ebounds[g]`` to ``ebounds[g + 1]``), over which the group's
    lengths are closed once its last node is relaxed (critical_path.ties_of).
    Returns the path's node positions and contributions, in order, and its length."""
    n = own.shape[0]
    # zeroed as the loop's lists were: an edge between nodes of equal end time can come from a
    # node later in the order, not yet reached, whose best length then reads 0 (the group's
    # closure below then carries it)
    best = np.zeros(n, np.int64)
    via = np.full(n, -1, np.int64)
    gain = np.zeros(n, np.int64)
    for k in range(n):
        b = own[k]
        g = b
        bv = -1
        for e in range(bounds[k], bounds[k + 1]):
            v = best[preds[e]] + gains[e]
            if v > b:
                b = v
                bv = preds[e]
                g = gains[e]
        best[k] = b
        via[k] = bv
        gain[k] = g
        if es.shape[0] and (k == n - 1 or gid[k + 1] != gid[k]):
            grp = gid[k]
            changed = True
            while changed:  # a strict rise each time: ends within the group's size passes
                changed = False
                for e in range(ebounds[grp], ebounds[grp + 1]):
                    if best[es[e]] > best[ed[e]]:
                        best[ed[e]] = best[es[e]]
                        via[ed[e]] = es[e]
                        gain[ed[e]] = 0
                        changed = True
    k = 0
    for i in range(1, n):  # the first node of the greatest length, as max() picks it
        if best[i] > best[k]:
            k = i
    length = best[k]
    m = 0
    j = k
    while j != -1:
        m += 1
        j = via[j]
    path = np.empty(m, np.int64)
    contrib = np.empty(m, np.int64)
    j = k
    for i in range(m - 1, -1, -1):
        path[i] = j
        contrib[i] = gain[j]
        j = via[j]
    return path, contrib, length
