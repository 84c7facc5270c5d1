"""The one definition of the counts ``opscope load`` prints (reused by ``opscope report``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, cast

import polars as pl

from opscope.model import Profile, kinds

#: Device work counted as "kernels": the rows of :attr:`Profile.kernels`.
DEVICE_WORK = kinds.DEVICE_WORK


def summary(profile: Profile) -> dict[str, Any]:
    """Counts describing what was read.

    - ``events``: rows of the events table (every slice, host and device)
    - ``ops``: ``cpu_op`` rows; ``kernels``: kernel + communication + memcpy + memset rows
    - ``steps``: rows of the steps table (distinct ProfilerStep#N per rank)
    - ``fwd_bwd_links``: distinct forward ops that some backward op links to (``fwd_id``)
    - ``op_kernel_links``: kernels (as above) whose ``op_id`` names a launching op
    - ``span_us``: from the first start to the last end over all events, in µs
    - ``notes``: what the reader wants the user to know (files skipped, a file read by another
      reader, one rank of a larger job opened alone: :func:`notes`)
    """
    ev = profile.events
    counts = _counts_listed(ev) if ev.height <= _LISTED_ROWS else _counts(ev)
    out: dict[str, Any] = {
        "format": profile.meta.get("format", "kineto"),
        "ranks": profile.ranks,
        "events": ev.height,
        "ops": counts.ops,
        "kernels": counts.kernels,
        "steps": profile.steps.height,
        "fwd_bwd_links": counts.fwd_bwd_links,
        "op_kernel_links": counts.op_kernel_links,
        "span_us": float(counts.span_ns or 0) / 1000.0,
        "python_frames": counts.python_frames,
        "memory_events": profile.memory.height,
        "stacks": int(profile.stacks.get_column("stack_id").n_unique())
        if profile.stacks.height
        else 0,
        "oddities": dict(profile.meta.get("oddities", {})),
        "salvaged": profile.meta.get("salvaged"),
        "from_cache": bool(profile.meta.get("from_cache", False)),
        "notes": notes(profile),
    }
    return out


class _Counts(NamedTuple):
    ops: int
    kernels: int
    fwd_bwd_links: int
    op_kernel_links: int
    span_ns: int | None
    python_frames: int


#: Events tables of at most this many rows are counted from their columns' Python lists: each
#: Polars call costs ~5-20 us whatever the rows (~20 of them here), a list ~25 ns a row.
_LISTED_ROWS = 256


def _counts(ev: pl.DataFrame) -> _Counts:
    """The event counts by Series operations, no query (a fixed cost each on small traces): the
    device-work mask as equalities, the span from the columns' extremes (exact integers, null
    when a side is)."""
    kinds = ev.get_column("kind").cast(pl.String)
    dev = kinds == DEVICE_WORK[0]
    for kind in DEVICE_WORK[1:]:
        dev = dev | (kinds == kind)
    span_ns: int | None = 0
    if ev.height:
        ts = ev.get_column("ts_ns")
        last, first = (ts + ev.get_column("dur_ns")).max(), ts.min()
        span_ns = None if last is None or first is None else cast(int, last) - cast(int, first)
    kernels = int(dev.sum())
    return _Counts(
        ops=int((kinds == "cpu_op").sum()),
        kernels=kernels,
        fwd_bwd_links=_distinct_non_null(ev.get_column("fwd_id")),
        op_kernel_links=kernels - ev.get_column("op_id").filter(dev).null_count(),
        span_ns=span_ns,
        python_frames=int((kinds == "python_function").sum()),
    )


def _counts_listed(ev: pl.DataFrame) -> _Counts:
    """:func:`_counts` from the columns' lists (the same counts: a null kind is no kind, a
    null id no link, the span over the rows whose sides are known)."""
    kinds = ev.get_column("kind").cast(pl.String).to_list()
    op_ids = ev.get_column("op_id").to_list()
    work = frozenset(DEVICE_WORK)
    dev = [k in work for k in kinds]
    ts = ev.get_column("ts_ns").to_list()
    ends = [t + d for t, d in zip(ts, ev.get_column("dur_ns").to_list(), strict=True)
            if t is not None and d is not None]  # fmt: skip
    starts = [t for t in ts if t is not None]
    span_ns: int | None = 0
    if kinds:
        span_ns = max(ends) - min(starts) if ends and starts else None
    return _Counts(
        ops=kinds.count("cpu_op"),
        kernels=sum(dev),
        fwd_bwd_links=len({x for x in ev.get_column("fwd_id").to_list() if x is not None}),
        op_kernel_links=sum(1 for d, o in zip(dev, op_ids, strict=True) if d and o is not None),
        span_ns=span_ns,
        python_frames=kinds.count("python_function"),
    )


def _distinct_non_null(s: pl.Series) -> int:
    """Distinct values of ``s`` other than null (``n_unique`` counts null as one)."""
    return s.n_unique() - (1 if s.null_count() else 0)


def world_size(profile: Profile) -> int | None:
    """The largest ``distributedInfo.world_size`` in the traces' headers (None when absent)."""
    world: int | None = None
    for h in _headers(profile):
        w = header_world_size(h)
        if w is not None:
            world = max(world or 0, w)
    return world


def header_world_size(header: Mapping[str, Any]) -> int | None:
    """``distributedInfo.world_size`` of one trace header (the object, or its JSON text); None
    when absent or not an integer."""
    import json

    di = header.get("distributedInfo")
    if isinstance(di, str):
        try:
            di = json.loads(di)
        except ValueError:
            di = None
    if isinstance(di, Mapping) and isinstance(di.get("world_size"), int):
        return int(di["world_size"])
    return None


def _headers(profile: Profile) -> list[dict[str, Any]]:
    """Each rank's trace header; multi-rank readers nest ``{rank: {rank: header}}``."""
    tm = profile.meta.get("trace_meta") or {}
    out: list[dict[str, Any]] = []
    if not isinstance(tm, dict):
        return out
    for raw in tm.values():
        v = raw
        if isinstance(raw, dict) and len(raw) == 1:
            ((ik, iv),) = raw.items()
            if str(ik).lstrip("-").isdigit() and isinstance(iv, dict):
                v = iv
        if isinstance(v, dict):
            out.append(v)
    return out


def single_rank_of(profile: Profile) -> tuple[int, int] | None:
    """``(rank, world size)`` when one rank's own trace of a larger job was opened on its own."""
    ranks = sorted(set(profile.ranks))
    sources = profile.meta.get("sources") or []
    world = world_size(profile)
    if len(ranks) != 1 or len(sources) != 1 or world is None or not 1 < world <= 1 << 20:
        return None
    return ranks[0], world


def notes(profile: Profile) -> list[str]:
    """The reader's notes (``meta["notes"]``) and, for one rank of a larger job opened alone,
    "rank R of W": informational, the user may well have meant to open only that rank."""
    out = [str(n) for n in profile.meta.get("notes") or []]
    one = single_rank_of(profile)
    if one is not None:
        out.append(f"rank {one[0]} of {one[1]}; open the directory for all ranks")
    return out
