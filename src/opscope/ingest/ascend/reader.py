"""Reading one Ascend rank (text export, else database export, else partial output) into a
Profile.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from opscope.errors import InputError
from opscope.ingest.ascend.assemble import _assemble
from opscope.ingest.ascend.kernels import _kernel_metrics, _read_kernels
from opscope.ingest.ascend.layout import (
    _PARTIAL_FILES,
    _RANK_FILES,
    _device_of,
    _level,
    _profiler_info,
    cache_anchor,
    find_output_dir,
    rank_of,
)
from opscope.ingest.ascend.linking import _link
from opscope.ingest.ascend.memory import _memory_links, _read_memory
from opscope.ingest.ascend.steps import _read_steps
from opscope.ingest.ascend.trace_view import _read_trace_view
from opscope.ingest.registry import Progress
from opscope.model import Profile
from opscope.redact import redact


def read_ascend(
    path: Path,
    *,
    salvage: bool = False,
    cache: bool = True,
    progress: Progress | None = None,
) -> Profile:
    """Read one Ascend rank (a ``*_ascend_pt`` dir, its ``ASCEND_PROFILER_OUTPUT``, or a folder
    holding only ``kernel_details.csv``) into a linked :class:`~opscope.model.Profile`.

    ``salvage`` recovers the complete events of a truncated ``trace_view.json``. With
    ``cache``, outputs whose ``trace_view.json`` is at least :data:`CACHE_MIN_BYTES` are cached
    (:mod:`opscope.ingest.cache`, keyed by that file's size and mtime); smaller ones parse
    faster than a cache is written. Raises :class:`~opscope.errors.InputError` naming the file
    when nothing can be read.
    """
    # The threshold is read from the package, where callers (and tests) set it.
    from opscope.ingest import ascend as package

    path = Path(path)
    anchor = cache_anchor(path)
    use_cache = cache and anchor is not None and anchor.stat().st_size >= package.CACHE_MIN_BYTES
    if use_cache and anchor is not None:
        from opscope.ingest import cache as cache_mod

        hit = cache_mod.lookup(anchor, salvage=salvage)
        if hit is not None:
            return hit
    prof = _parse_export(path, salvage=salvage, progress=progress)
    if use_cache and anchor is not None:
        from opscope.ingest import cache as cache_mod

        cache_mod.store(anchor, prof, salvage=salvage)
    return prof


def _parse_export(path: Path, *, salvage: bool, progress: Progress | None) -> Profile:
    """The text export, else the database export, else a rank's partial output."""
    out = find_output_dir(path)
    if not any((out / n).is_file() for n in _RANK_FILES):
        from opscope.ingest import ascend_comm, ascend_db

        if ascend_db.is_db_dir(path):
            return ascend_db.read_ascend_db(path, cache=False, progress=progress)
        if any((out / n).is_file() for n in _PARTIAL_FILES):
            return ascend_comm.read_partial(path)
    return _parse(path, salvage=salvage, progress=progress)


def _parse(path: Path, *, salvage: bool, progress: Progress | None) -> Profile:
    out = find_output_dir(path)
    if not out.is_dir():
        raise InputError("not a directory", path)
    trace_file = out / "trace_view.json"
    kernel_file = out / "kernel_details.csv"
    if not trace_file.is_file() and not kernel_file.is_file():
        raise InputError(
            f"no trace_view.json or kernel_details.csv in {out.name}: nothing to read", out
        )
    rank = rank_of(out)
    rank_id = 0 if rank is None else rank
    odd: Counter[str] = Counter()
    read: list[str] = []
    meta_extra: dict[str, Any] = {}

    trace = _read_trace_view(trace_file, salvage, odd, meta_extra) if trace_file.is_file() else None
    if trace is not None:
        read.append(trace_file.name)
    if progress is not None:
        progress("ascend", 1, 3)
    kernels = _read_kernels(kernel_file, odd) if kernel_file.is_file() else None
    if kernels is not None:
        read.append(kernel_file.name)
    device = _device_of(out, rank_id)

    events, raw_flows, counters, threads = _assemble(trace, kernels, device, odd, meta_extra)
    events = events.with_columns(pl.lit(rank_id, pl.Int32).alias("rank"))
    km = _kernel_metrics(events, kernels)
    events, flows, stacks = _link(
        events, raw_flows.with_columns(pl.lit(rank_id, pl.Int32).alias("rank")), odd
    )
    steps = _read_steps(out / "step_trace_time.csv", events, odd, read)
    memory, mem_counters = _read_memory(out, device, odd, read)
    memory = _memory_links(memory, events)
    counters = pl.concat([counters, mem_counters], how="vertical")
    if progress is not None:
        progress("ascend", 2, 3)

    info = _profiler_info(out)
    ascend_meta = {"files": read, "level": _level(info), "has_trace_view": trace is not None}
    return rank_profile(
        path, rank_id, device, info, odd, ascend_meta, meta_extra,
        events, flows, stacks, memory, counters, steps, km, threads, progress,
    )  # fmt: skip


def rank_profile(
    path: Path,
    rank_id: int,
    device: int,
    info: dict[str, Any],
    odd: Mapping[str, int],
    ascend: dict[str, Any],
    meta_extra: dict[str, Any],
    events: pl.DataFrame,
    flows: pl.DataFrame,
    stacks: pl.DataFrame,
    memory: pl.DataFrame,
    counters: pl.DataFrame,
    steps: pl.DataFrame,
    kernel_metrics: pl.DataFrame,
    threads: pl.DataFrame,
    progress: Progress | None = None,
) -> Profile:
    """One Ascend rank's linked tables -> its Profile (the text and the database readers):
    the rank on every per-rank table, the NPU device row, and the meta (``ascend``: what the
    reader found, ``op_kernel_links``, then ``meta_extra``, whose ``salvaged`` entry moves to
    the top level)."""
    n_links = int(
        events.filter(pl.col("kind").is_in(["kernel", "communication"]))
        .get_column("op_id")
        .is_not_null()
        .sum()
    )
    meta: dict[str, Any] = {
        "format": "ascend",
        "sources": [str(path)],
        "ranks": [rank_id],
        "oddities": dict(odd),
        "trace_meta": {str(rank_id): redact(info)},
        "ascend": {**ascend, "op_kernel_links": n_links, **meta_extra},
    }
    if "salvaged" in meta_extra:
        meta["salvaged"] = meta["ascend"].pop("salvaged")
    rank = pl.lit(rank_id, pl.Int32).alias("rank")
    tables: dict[str, pl.DataFrame] = {
        "events": events,
        "flows": flows,
        "stacks": stacks,
        "memory": memory.with_columns(rank),
        "counters": counters.with_columns(rank),
        "steps": steps.with_columns(rank),
        "kernel_metrics": kernel_metrics,
        "devices": pl.DataFrame(
            {"rank": [rank_id], "device": [device], "name": ["Ascend NPU"], "vendor": ["ascend"]},
            schema={"rank": pl.Int32, "device": pl.Int32, "name": pl.String, "vendor": pl.String},
        ),
        "threads": threads.with_columns(rank),
    }
    if progress is not None:
        progress("ascend", 3, 3)
    return Profile.from_tables(meta=meta, **tables)


def read_communication(path: Path) -> dict[str, pl.DataFrame]:
    """Per-collective timing and per-link traffic of one Ascend rank: see
    :func:`opscope.ingest.ascend_comm.read_communication` (links with global ranks, the
    matrix's summary entries left out)."""
    from opscope.ingest import ascend_comm

    return ascend_comm.read_communication(path)
