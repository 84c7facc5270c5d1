# mypy: disable-error-code="untyped-decorator,no-any-return,misc"
"""Compiled kernel of the out-of-core cut plan's key spans
(:class:`opscope.ingest.window_link.KeySpans`): the first and last time of each key, one pass
over a window's rows.

A hash group-by per key and window cost ~0.15 us per row (the plan's four streaming group-bys
over the window files: ~1 CPU s per GB of trace, 8 s of wall at 10 GB); the keys are integers,
so a min/max into arrays indexed by key (or by the key's rank among a window's keys) is one
pass. numba compiles it on first use and caches the machine code beside this file
(``cache=True``, as :mod:`opscope.ingest._scan_kernels` does), so a fresh process only loads it.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

_jit: Any = numba.njit(cache=True, nogil=True)


@_jit
def spans(
    idx: np.ndarray, first: np.ndarray, last: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> None:
    """``lo[idx[i]] = min(lo[idx[i]], first[i])`` and ``hi[idx[i]] = max(hi[idx[i]], last[i])``
    for every row ``i`` (int64 arrays; ``idx`` in range)."""
    for i in range(idx.shape[0]):
        k = idx[i]
        lo[k] = min(lo[k], first[i])
        hi[k] = max(hi[k], last[i])
