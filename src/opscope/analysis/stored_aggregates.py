"""Hotspots and breakdown from the aggregates an out-of-core entry stores (issue 24).

The out-of-core load writes per-segment partial tables merged into ``aggregates/*.parquet``
of its entry (:mod:`opscope.ingest.segment_aggregates`, which says why each is exact). Here
they become the analyses' tables, computed as the in-memory path computes them from the same
sums (means, shares, sort orders, dtypes), so the results are equal table by table
(tests/test_stored_aggregates.py). Nothing here reads the events table.

They are used when the profile's events are an unparsed table file of an entry whose
``meta["out_of_core"]["aggregates"]`` lists files present at their written sizes; anything
else (an entry written by ``Profile.save``, an older one, a copy with other events) returns
None and the analysis takes its usual path.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from opscope.analysis import breakdown as bd
from opscope.analysis import hotspots as hs
from opscope.analysis.attribution import _LINE_SCHEMA, KEYS, user_frames
from opscope.ingest.segment_aggregates import FOLDER, KERNEL_KEYS, OP_KEYS, QUEUE_KEYS, VERSION
from opscope.model import Profile, schema
from opscope.model.tablefile import TableFile


@dataclass(frozen=True)
class Stored:
    """The aggregates folder of a profile's entry and its ``meta["out_of_core"]["aggregates"]``."""

    folder: Path
    info: dict[str, Any]

    def table(self, name: str) -> pl.DataFrame | None:
        if name not in self.info.get("tables", {}):
            return None
        return pl.read_parquet(self.folder / f"{name}.parquet")

    @property
    def has_device(self) -> bool:
        return bool(self.info.get("has_device"))


def stored(profile: Profile) -> Stored | None:
    """The aggregates stored with ``profile``'s entry, or None (see the module doc)."""
    ooc = profile.meta.get("out_of_core")
    info = ooc.get("aggregates") if isinstance(ooc, dict) else None
    if not isinstance(info, dict) or info.get("version") != VERSION:
        return None
    ev = profile.__dict__.get("events")
    if not isinstance(ev, TableFile) or ev.parsed:
        return None  # (events in memory: the in-memory path reads them already)
    folder = ev.path.parent / FOLDER
    tables = info.get("tables")
    if not isinstance(tables, dict):
        return None
    for name, size in tables.items():
        path = folder / f"{name}.parquet"
        if not path.is_file() or path.stat().st_size != size:
            return None
    return Stored(folder, info)


# hotspots ---------------------------------------------------------------------------------------


def _table(df: pl.DataFrame, keys: list[str], base: int, span: int, device: bool) -> pl.DataFrame:
    """``hotspots._agg``'s table from the merged sums of ``df``: the same columns, mean (the
    sum over the non-null durations' count, which is Polars' mean of the integers), shares
    and order."""
    cols = [
        *keys,
        pl.col("calls").cast(pl.UInt32),
        "total_ns",
        "self_ns",
        pl.when(pl.col("n_dur") > 0)
        .then(pl.col("total_ns") / pl.col("n_dur"))
        .cast(pl.Float64)
        .alias("mean_ns"),
        "min_ns",
        "max_ns",
    ]
    if device:
        cols += ["device_ns", "device_self_ns"]
    out = (
        df.lazy()
        .select(cols)
        .with_columns(
            pl.lit(None, pl.Float64).alias("pct"), pl.lit(None, pl.Float64).alias("pct_span")
        )
        .sort(["total_ns", *keys], descending=[True] + [False] * len(keys), nulls_last=True)
        .collect(engine="in-memory")  # (as hotspots._agg)
        .rechunk()
    )
    return hs.with_shares(out, base, span)


def hotspot_tables(st: Stored, profile: Profile) -> hs._Tables | None:
    """Hotspots' op and kernel tables and time base from ``st`` (None: not stored)."""
    parts = {n: st.table(n) for n in (*OP_KEYS, *KERNEL_KEYS, "per_step", "time_base")}
    if any(df is None for df in parts.values()):
        return None
    got: dict[str, pl.DataFrame] = {n: df for n, df in parts.items() if df is not None}
    tb = got["time_base"]
    span = int(tb.select((pl.col("t1") - pl.col("t0")).sum()).item() or 0) if tb.height else 0
    st_ = profile.steps
    step_ns = int(st_.get_column("dur_ns").sum() or 0) if st_.height else 0
    base = step_ns or span
    device = st.has_device
    ops = _table(got["ops"], OP_KEYS["ops"], base, span, device)
    shapes = _table(got["op_shapes"], OP_KEYS["op_shapes"], base, span, device)
    kernels = _table(got["kernels"], KERNEL_KEYS["kernels"], base, span, False)
    types = _table(got["kernel_types"], KERNEL_KEYS["kernel_types"], base, span, False)
    per_step = (
        got["per_step"]
        .lazy()
        .select("step", "name", pl.col("calls").cast(pl.UInt32), "total_ns", "self_ns", "what")
        .sort(["step", "what", "total_ns", "name"], descending=[False, False, True, False])
        .collect(engine="in-memory")  # (as hotspots._op_tables)
        .rechunk()
    )
    return hs._Tables(ops, shapes, kernels, types, per_step, step_ns, span)


def charged_lines(st: Stored, profile: Profile) -> pl.DataFrame | None:
    """``attribution.charged_lines`` from the stored charges (None: not stored)."""
    ch = st.table("charges") if st.info.get("attribution") else None
    if ch is None:
        return None
    if not ch.height:
        return pl.DataFrame(schema=_LINE_SCHEMA)
    ch = ch.join(user_frames(profile), on="stack_id", how="left")
    device = st.has_device
    bwd = pl.col("is_backward")
    t = (
        ch.filter(pl.col("device") == device)
        .group_by(KEYS)
        .agg(
            pl.col("time_ns").filter(~bwd).sum().alias("fwd_ns"),
            pl.col("time_ns").filter(bwd).sum().alias("bwd_ns"),
            pl.col("time_ns").sum().alias("total_ns"),
        )
    )
    host = (
        ch.filter(~pl.col("device"))
        .group_by(KEYS)
        .agg(pl.col("time_ns").sum().alias("host_ns"), pl.col("n").sum().alias("calls"))
    )
    kern = ch.filter(pl.col("device")).group_by(KEYS).agg(pl.col("n").sum().alias("kernels"))
    out = (  # (as attribution.charged_lines from here on)
        t.join(host, on=KEYS, how="full", coalesce=True, nulls_equal=True)
        .join(kern, on=KEYS, how="full", coalesce=True, nulls_equal=True)
        .with_columns(
            pl.col("fwd_ns", "bwd_ns", "total_ns", "host_ns").fill_null(0),
            pl.col("kernels", "calls").fill_null(0).cast(pl.UInt32),
        )
    )
    return (
        out.select(list(_LINE_SCHEMA))
        .cast(_LINE_SCHEMA)  # type: ignore[arg-type]
        .sort(
            ["total_ns", "host_ns", "file", "line", "function", "module"],
            descending=[True, True, False, False, False, False],
            nulls_last=True,
        )
    )


# breakdown --------------------------------------------------------------------------------------


def breakdown(st: Stored, profile: Profile) -> bd.Breakdown | None:
    """Breakdown's tables from ``st`` (None: not stored, or the windows do not match)."""
    if not st.info.get("breakdown") or not profile.steps.height:
        return None
    queue = st.table("bd_queue")
    if queue is None:
        return None
    has_dev = st.has_device
    # The analysis itself on the windows alone: its step statistics (they read the windows'
    # lengths only) and every table's schema.
    bare = Profile.from_tables(events=schema.empty("events"), steps=profile.steps)
    inp = dataclasses.replace(bd._inputs(bare), has_dev=has_dev)
    tpl = bd._breakdown_of(inp)
    win = inp.win
    steps = st.table("bd_steps")
    if steps is None:
        steps = tpl.steps.clear()
    steps = steps.sort("rank", "step")
    if not has_dev:  # (each segment took device work as present)
        steps = steps.with_columns(
            pl.lit(None, pl.Int64).alias(c) for c in ("device_idle_ns", *bd.IDLE_COLUMNS)
        )
    steps = steps.select(pl.col(c).cast(t) for c, t in tpl.steps.schema.items())
    if not steps.select("rank", "step").equals(tpl.steps.select("rank", "step")):
        return None  # (a window in no segment or in two: never expected; recompute)
    streams = _streams(st.table("bd_streams"), win, tpl.streams.schema)
    return bd.Breakdown(
        steps=steps, stats=tpl.stats, streams=streams, queue=_queue(queue, win, tpl.queue.schema)
    )


def _streams(part: pl.DataFrame | None, win: pl.DataFrame, out: pl.Schema) -> pl.DataFrame:
    """Every stream active on a rank, in every window of the rank: the stored rows of its
    segments' windows, and for the other windows what ``breakdown.idle_split`` gives a lane
    without work (busy 0, the whole window ``idle_other_ns``)."""
    if part is None or not part.height:
        return pl.DataFrame(schema=out)
    keys = ["rank", "step", "device", "stream"]
    lanes = part.select("rank", "device", "stream").unique().join(win, on="rank", how="inner")
    full = lanes.join(part, on=keys, how="left", nulls_equal=True).with_columns(
        pl.col("busy_ns", "idle_host_wait_ns", "idle_kernel_wait_ns").fill_null(0),
        pl.col("idle_other_ns").fill_null(pl.col("w1") - pl.col("w0")),
        (pl.col("w1") - pl.col("w0")).alias("dur_ns"),
    )
    return full.select(pl.col(c).cast(t) for c, t in out.items()).sort(keys)


def _queue(part: pl.DataFrame, win: pl.DataFrame, out: pl.Schema) -> pl.DataFrame:
    """``breakdown.queue_lengths`` from the summed area, maximum and busy time per stream (its
    figures as breakdown defines them: quotients of the integer sums, see
    ``breakdown._queue_of_sums``)."""
    if not part.height or not win.height:
        return pl.DataFrame(schema=out)
    rng = win.group_by("rank").agg(pl.col("w0").min().alias("r0"), pl.col("w1").max().alias("r1"))
    sums = (
        part.join(rng, on="rank")
        .with_columns((pl.col("r1") - pl.col("r0")).alias("span_ns"), pl.col("max").fill_null(0))
        .filter(pl.col("span_ns") > 0)
        .select(pl.col(c).cast(t) for c, t in bd._QUEUE_SUMS.items())
        .sort(QUEUE_KEYS)
    )
    return bd._queue_of_sums(sums)
