"""The Ascend profiler's "Overlap Analysis" tracks: when the NPU computes, communicates, does
both, or neither.

The text export writes them into ``trace_view.json`` as an ``Overlap Analysis`` process with four
threads (tid = type): ``Computing`` (0), ``Communication`` (1), ``Communication(Not Overlapped)``
(2) and ``Free`` (3). The database export writes the same slices to an ``OVERLAP_ANALYSIS`` table
(``startNs``, ``endNs``, ``type``) in some versions and leaves it out in others; then
:func:`overlap` rebuilds them from the device tasks the way the profiler does:

- Computing: the union of the compute tasks (the kernel table's non-communication rows);
- Communication: the union of the collectives (the HCCL ops, start to end);
- Communication(Not Overlapped): Communication minus Computing;
- Free: the gaps between the segments of Computing ∪ Communication (from the first segment's
  start to the last one's end).

Intervals that touch are merged (``[a, b]`` and ``[b, c]`` give ``[a, c]``), as msprof's
``UnionOneSet`` does (msprof ``analysis/csrc/domain/data_process/ai_task/
overlap_analysis_processor.cpp``). msprof's own timeline starts Free at the first device task of
any kind; the torch_npu export (text and database alike) starts it at the first compute or
communication segment, and that is what this module reproduces: equal to the ``OVERLAP_ANALYSIS``
table of the AlexNet Level1 database (382 of 382 slices, ns exact) and to the text exports'
slices (to the 1 ns the text's µs durations round to).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import polars as pl

NAMES: Final = ("Computing", "Communication", "Communication(Not Overlapped)", "Free")
"""Slice and thread names by type (the trace's tid and the database's ``type``)."""

SCHEMA: Final[dict[str, Any]] = {
    "type": pl.Int32,
    "name": pl.String,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}

Span = tuple[int, int]


def union(spans: Iterable[Span]) -> list[Span]:
    """Sorted, merged intervals (touching ones merged); empty and reversed spans dropped."""
    out: list[list[int]] = []
    for s, e in sorted((int(s), int(e)) for s, e in spans if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def subtract(a: list[Span], b: list[Span]) -> list[Span]:
    """``a`` minus ``b``, both sorted and disjoint (as :func:`union` returns them)."""
    out: list[Span] = []
    j = 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        cur, k = s, j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def overlap(compute: Iterable[Span], communication: Iterable[Span]) -> pl.DataFrame:
    """The four overlap tracks (:data:`SCHEMA`, by type then start) from the compute tasks'
    and the collectives' ``(start_ns, end_ns)``."""
    comp, comm = union(compute), union(communication)
    both = union(comp + comm)
    free = [(both[i][1], both[i + 1][0]) for i in range(len(both) - 1)]
    rows = [
        (t, NAMES[t], s, e)
        for t, spans in enumerate((comp, comm, subtract(comm, comp), free))
        for s, e in spans
    ]
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


__all__ = ["NAMES", "SCHEMA", "overlap", "subtract", "union"]
