"""Ascend cluster figures as msprof-analyze reports them, pipeline-stage imbalance, the matrix.

Inputs are the small per-rank tables of :func:`opscope.analysis.cluster.rank_tables`:

- ``hccl`` (:data:`HCCL_COLUMNS`): one row per HCCL operation of ``communication.json``
  (``opscope.ingest.ascend.read_communication()["collectives"]``; its "Total Op Info" summary
  rows are left out, so sums over these rows are the file's own per-op figures summed).
- ``stages`` (:data:`STAGE_COLUMNS`): the rank's pipeline stage from
  ``profiler_metadata.json``'s ``parallel_group_info`` (the group named ``pp``: its
  ``group_rank`` is the stage), read by :func:`read_stages`.

msprof-analyze's definitions and opscope's columns (``msprof`` table of :func:`msprof_ranks`):

==================================  ==========================================================
msprof-analyze                      opscope
==================================  ==========================================================
Computing (step_trace_time)         ``compute_us`` (device time in non-communication kernels)
Communication                       ``comm_us`` (union of communication on the device)
Communication(Not Overlapped)       ``comm_not_overlapped_us``
Free                                ``idle_us`` (device neither computes nor communicates)
Stage                               ``step_time_us``
Elapse Time (communication.json)    ``hccl_elapse_us``: Σ over the rank's HCCL ops
Wait Time                           ``hccl_wait_us``: Σ (time before the first transfer,
                                    waiting for the peers' notify)
Transit / Synchronization Time      ``hccl_transit_us`` / ``hccl_synchronization_us``
==================================  ==========================================================

opscope's own ``wait_us`` aligns the same collective over the ranks (latest start − own start);
``hccl_wait_us`` is what the rank's HCCL recorded. Both are reported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final, TypeVar

import numpy as np
import polars as pl

from opscope import units
from opscope.analysis import tree
from opscope.analysis.small_frames import ROWS_MAX, frame_of_rows

#: A DataFrame or a LazyFrame: eager steps, or the same steps in a plan.
FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

UNKNOWN_RANK: Final = -1
"""A link's far end whose global rank the files do not give (an unprofiled member of a group
without metadata): such links are kept, marked "unknown rank (not profiled)"."""

STAGE_IMBALANCE: Final = 0.1
"""A pipeline stage whose compute exceeds the median of the other stages by this share is slow."""

HCCL_COLUMNS: Final[dict[str, type[pl.DataType]]] = {
    "rank": pl.Int32,
    "step": pl.Int32,
    "kind": pl.String,
    "op_name": pl.String,
    "group": pl.String,
    "start_ns": pl.Int64,
    "elapse_ns": pl.Int64,
    "transit_ns": pl.Int64,
    "wait_ns": pl.Int64,
    "synchronization_ns": pl.Int64,
    "idle_ns": pl.Int64,
}
STAGE_COLUMNS: Final[dict[str, type[pl.DataType]]] = {
    "rank": pl.Int32,
    "pp_stage": pl.Int32,
    "pp_size": pl.Int32,
    "pp_group": pl.String,  # the pp group's global ranks as JSON, e.g. "[0, 4]"
}


def read_stages(path: Path, rank: int) -> pl.DataFrame:
    """The pipeline stage of ``rank`` from ``profiler_metadata.json`` beside ``path``'s output
    (empty when the file or its ``pp`` group is absent or unreadable: no stage analysis)."""
    root = path.parent if path.name == "ASCEND_PROFILER_OUTPUT" else path
    md = root / "profiler_metadata.json"
    empty = pl.DataFrame(schema=STAGE_COLUMNS)
    if not md.is_file():
        return empty
    try:
        data = json.loads(md.read_bytes())
    except (OSError, ValueError):
        return empty  # metadata is optional: a bad file only means no stages
    groups = data.get("parallel_group_info") if isinstance(data, dict) else None
    if not isinstance(groups, dict):
        return empty
    for g in groups.values():
        if not isinstance(g, dict) or g.get("group_name") != "pp":
            continue
        members = g.get("global_ranks")
        stage = g.get("group_rank")
        if isinstance(members, list) and isinstance(stage, int):
            return pl.DataFrame(
                [
                    {
                        "rank": rank,
                        "pp_stage": stage,
                        "pp_size": len(members),
                        "pp_group": json.dumps(sorted(int(m) for m in members)),
                    }
                ],
                schema=STAGE_COLUMNS,
            )
    return empty


def links(comm: dict[str, pl.DataFrame], path: Path, rank: int) -> pl.DataFrame:
    """One rank's matrix rows for the cluster: ``read_communication``'s per-op ``links`` and its
    ``<op>-total@<group>`` rows (``total``), ``mapped`` when the group is in the rank's
    ``parallel_group_info`` (the reader then mapped the ends to global ranks)."""
    from opscope.ingest.ascend_comm import parallel_groups

    known = list(parallel_groups(path))
    parts = [comm["links"].with_columns(pl.lit(False).alias("total"))]
    tot = comm.get("link_totals")
    if tot is not None and tot.height:
        parts.append(
            tot.filter(
                pl.col("group").is_not_null()
                & pl.col("op_name").str.to_lowercase().str.ends_with("-total")
            ).with_columns(pl.lit(True).alias("total"))
        )
    return pl.concat(parts, how="diagonal_relaxed").with_columns(
        pl.lit(rank, pl.Int32).alias("rank"),
        pl.col("group").is_in(known).fill_null(False).alias("mapped"),
    )


def matrix_links(lk: pl.DataFrame, hccl: pl.DataFrame) -> pl.DataFrame:
    """The links the matrix sums, as msprof-analyze's cluster analysis takes them.

    - Where a rank's file sums a group's op type (``allreduce-total@<group>``), those sums
      replace the rank's per-op rows of that group: a summary-only export lists only a few
      top/middle/bottom calls, the total covers every call.
    - A group's link ends are its ranks' indices within the group. When the rank's metadata
      does not map them (``mapped``), the group's ranks are the ranks whose communication.json
      holds an op of that group (msprof-analyze's communication_group.json), in order; the
      ends are mapped through them when that set covers every index seen in the group (all
      its ranks were profiled). Otherwise an index is mapped through the self links ("i-i")
      the profiled ranks wrote in that group (index i is the writer: msprof-analyze's
      rule), else kept as written (local = global, true of the world group), except an index
      equal to a rank whose files write self links but none as index i in this group: that
      rank is not the group's member i, so the end is an unknown, unprofiled rank
      (:data:`UNKNOWN_RANK`).
      msprof-analyze drops the links it cannot map; opscope keeps them, marked
      (:func:`mark_profiled`).
    """
    total = pl.col("total").fill_null(False)
    tot = lk.filter(total)
    per_op = lk.filter(~total)
    if tot.height:  # (without sums, nothing to replace: two queries fewer)
        summed = tot.select("rank", "step", "group").unique()
        per_op = per_op.join(summed, on=["rank", "step", "group"], how="anti")
    lk = pl.concat([tot, per_op])
    unmapped = ~pl.col("mapped").fill_null(False)
    sets = (
        hccl.filter(pl.col("group").is_not_null())
        .group_by("group")
        .agg(pl.col("rank").unique().sort().alias("_set"))
    )
    span = (
        lk.filter(unmapped & pl.col("group").is_not_null())
        .group_by("group")
        .agg(pl.max_horizontal(pl.col("src_rank").max(), pl.col("dst_rank").max()).alias("_top"))
    )
    m = lk.join(sets, on="group", how="left").join(span, on="group", how="left")
    remap = unmapped & pl.col("_set").is_not_null() & (pl.col("_top") < pl.col("_set").list.len())
    selfmap = (
        lk.filter(
            unmapped & pl.col("group").is_not_null() & (pl.col("src_rank") == pl.col("dst_rank"))
        )
        .select("group", pl.col("src_rank").alias("_i"), pl.col("rank").alias("_w"))
        .unique(["group", "_i"], keep="first")
    )
    # Ranks whose files write self links: one of them absent from a group's self links is not
    # that group's member of its own number.
    writers = sorted({int(r) for r in selfmap.get_column("_w").drop_nulls()})

    def through_self(c: str) -> pl.DataFrame:
        return selfmap.rename({"_i": c, "_w": f"_{c}_w"})

    m = m.join(through_self("src_rank"), on=["group", "src_rank"], how="left").join(
        through_self("dst_rank"), on=["group", "dst_rank"], how="left"
    )
    by_self = unmapped & ~remap & pl.col("group").is_not_null()
    return m.with_columns(
        pl.when(remap)
        .then(pl.col("_set").list.get(pl.col("src_rank"), null_on_oob=True))
        .when(by_self)
        .then(pl.coalesce("_src_rank_w", "src_rank"))
        .otherwise(pl.col("src_rank"))
        .cast(pl.Int32)
        .alias("src_rank"),
        pl.when(remap)
        .then(pl.col("_set").list.get(pl.col("dst_rank"), null_on_oob=True))
        .when(by_self & pl.col("_dst_rank_w").is_not_null())
        .then(pl.col("_dst_rank_w"))
        .when(by_self & pl.col("dst_rank").is_in(writers))
        .then(pl.lit(UNKNOWN_RANK))
        .otherwise(pl.col("dst_rank"))
        .cast(pl.Int32)
        .alias("dst_rank"),
    ).drop("_set", "_top", "_src_rank_w", "_dst_rank_w")


def hccl_per_rank(hccl: FrameT) -> FrameT:
    """Per rank: HCCL ops and the sums of their communication.json times (ns) (eager, or a plan
    for a plan)."""
    return (
        hccl.group_by("rank")
        .agg(
            pl.len().cast(pl.Int64).alias("hccl_ops"),
            *[
                pl.col(f"{c}_ns").sum().alias(f"hccl_{c}_ns")
                for c in ("elapse", "transit", "wait", "synchronization", "idle")
            ],
        )
        .sort("rank")
    )


def msprof_ranks(ranks: pl.DataFrame, hccl: pl.DataFrame) -> pl.DataFrame:
    """Per rank in msprof-analyze's terms (µs): Computing, Communication, not overlapped, Free,
    Stage, and the communication.json sums; ``wait_us`` is opscope's aligned wait."""
    return msprof_us(msprof_plan(ranks.lazy(), hccl).collect(engine="in-memory"))


def msprof_plan(ranks: pl.LazyFrame, hccl: pl.DataFrame) -> pl.LazyFrame:
    """:func:`msprof_ranks` in ns (its figures' ``*_ns`` columns: :func:`msprof_us` gives the
    table) as a plan over the plan of ``ranks`` (run with the caller's other plans: the five
    eager steps it replaces were a query of fixed cost each)."""
    per = hccl_per_rank(hccl.lazy())
    out = ranks.lazy().join(per, on="rank", how="left").sort("rank")
    return out.select("rank", *[pl.col(a) for a, _ in _MSPROF_US], pl.col("hccl_ops").fill_null(0))


def msprof_us(ns: pl.DataFrame) -> pl.DataFrame:
    """:func:`msprof_ranks` of :func:`msprof_plan`'s table in ns: each µs figure the quotient
    ns / 1000 rounded once (not a query's product by the reciprocal)."""
    return pl.DataFrame(
        [
            ns.get_column("rank"),
            *(_us(ns.get_column(a), b) for a, b in _MSPROF_US),
            ns.get_column("hccl_ops"),
        ]
    )


#: The msprof table's columns in µs, from the ranks' (and the HCCL sums') columns in ns.
_MSPROF_US: Final = (
    ("compute_ns", "computing_us"),
    ("comm_ns", "communication_us"),
    ("comm_not_overlapped_ns", "communication_not_overlapped_us"),
    ("idle_ns", "free_us"),
    ("step_time_ns", "stage_us"),
    ("wait_ns", "wait_us"),
    ("hccl_elapse_ns", "hccl_elapse_us"),
    ("hccl_transit_ns", "hccl_transit_us"),
    ("hccl_wait_ns", "hccl_wait_us"),
    ("hccl_synchronization_ns", "hccl_synchronization_us"),
)


def _us(ns: pl.Series, name: str) -> pl.Series:
    """``ns / 1000`` of an integer column (:func:`opscope.units.us_array`), null kept."""
    v, valid = tree.int_values(ns)
    return units.us_array(name, v, valid)


def msprof_without_hccl(ranks: pl.DataFrame) -> pl.DataFrame:
    """:func:`msprof_ranks` of ``ranks`` (sorted by rank, one row each) and an HCCL table of
    :data:`HCCL_COLUMNS` without a row (every GPU trace, most Ascend ranks): no HCCL op to
    join, so the HCCL sums are null and the ops 0, from the rank rows' columns without a query
    (the join, group-by and sort would find so). tests/test_report_speed_ha.py checks it."""
    n = ranks.height
    if n <= _ROWS_MAX:
        # as rows (a Series per column, eleven, was ~0.1 ms more on a rank or two)
        cols: list[list[Any]] = [ranks.get_column("rank").to_list()]
        for a, _ in _MSPROF_US:
            if a.startswith("hccl_"):
                cols.append([None] * n)
            else:
                cols.append([units.us_value(x) for x in ranks.get_column(a).to_list()])
        cols.append([0] * n)
        schema: dict[str, Any] = {
            "rank": ranks.get_column("rank").dtype,
            **{b: pl.Float64 for _, b in _MSPROF_US},
            "hccl_ops": pl.Int64,
        }
        return frame_of_rows(zip(*cols, strict=True), schema)
    none = pl.Series([None], dtype=pl.Float64).new_from_index(0, n) if n else None
    return pl.DataFrame(
        [
            ranks.get_column("rank"),
            *(
                none.alias(b)
                if none is not None and a.startswith("hccl_")
                else _us(
                    ranks.get_column(a)
                    if not a.startswith("hccl_")
                    else pl.Series(a, [], pl.Int64),
                    b,
                )
                for a, b in _MSPROF_US
            ),
            pl.Series("hccl_ops", np.zeros(n, dtype=np.int64)),
        ]
    )


#: Up to this many rank rows :func:`msprof_without_hccl` builds its table from rows.
_ROWS_MAX: Final = ROWS_MAX


def rank_gaps(msprof: pl.DataFrame) -> dict[str, Any]:
    """msprof-analyze advisor's slow-rank figures: per column the largest − smallest value over
    the ranks (µs) with the ranks that hold them ({} without ranks)."""
    out: dict[str, Any] = {}
    if not msprof.height:
        return out
    for c in ("computing_us", "communication_us", "free_us"):
        # in Python over the few rank rows (three queries per column were a fixed cost that
        # showed on small traces); a NaN, which Python cannot order as Polars does, takes Polars
        pairs = [
            (v, r)
            for r, v in zip(msprof.get_column("rank"), msprof.get_column(c), strict=True)
            if r is not None and v is not None
        ]
        if any(isinstance(v, float) and math.isnan(v) for v, _ in pairs):
            d = msprof.select("rank", c).drop_nulls().sort(c, "rank")
            pairs = [(v, r) for r, v in d.iter_rows()]
        else:
            pairs.sort()
        if pairs:
            lo, hi = pairs[0][::-1], pairs[-1][::-1]
            out[c] = {"gap": hi[1] - lo[1], "max_rank": hi[0], "min_rank": lo[0]}
    return out


def stage_imbalance(ranks: pl.DataFrame, stages: pl.DataFrame) -> pl.DataFrame:
    """Per pipeline stage: its ranks, mean compute per rank, the other stages' median and the
    excess; ``slow`` when the excess reaches :data:`STAGE_IMBALANCE`. Empty without stages."""
    schema = {
        "pp_stage": pl.Int32,
        "ranks": pl.String,
        "compute_us": pl.Float64,
        "others_median_us": pl.Float64,
        "excess": pl.Float64,
        "slow": pl.Boolean,
    }
    if stages.height < 2:  # fewer than two stage rows: fewer than two stages (no query)
        return tree.empty_frame(tree.schema_key(schema))  # (a frame made once per process)
    st = stages.unique("rank", keep="first").join(ranks.select("rank", "compute_ns"), on="rank")
    per = (
        st.group_by("pp_stage")
        .agg(
            pl.col("rank").sort().alias("_r"),
            pl.col("compute_ns").sum().alias("_sum"),
            pl.col("compute_ns").count().alias("_n"),
        )
        .sort("pp_stage")
    )
    if per.height < 2:
        return pl.DataFrame(schema=schema)
    rows: list[dict[str, Any]] = []
    # a stage's mean compute, sum / (1000 * ranks): one division of exact parts (units)
    sums, counts = per.get_column("_sum").to_list(), per.get_column("_n").to_list()
    comp = [None if n == 0 else units.mean_us(t, n) for t, n in zip(sums, counts, strict=True)]
    per = per.with_columns(pl.Series("compute_us", comp, dtype=pl.Float64))
    for i, r in enumerate(per.iter_rows(named=True)):
        others = pl.Series([c for j, c in enumerate(comp) if j != i], dtype=pl.Float64)
        med = others.median()
        m = float(med) if isinstance(med, (int, float)) else 0.0
        excess = (r["compute_us"] - m) / m if m > 0 else None
        rows.append(
            {
                "pp_stage": r["pp_stage"],
                "ranks": ",".join(str(x) for x in r["_r"]),
                "compute_us": r["compute_us"],
                "others_median_us": m,
                "excess": excess,
                "slow": excess is not None and excess >= STAGE_IMBALANCE,
            }
        )
    return pl.DataFrame(rows, schema=schema)


def profiled_ranks(links: pl.DataFrame, ranks: Iterable[int] = ()) -> set[int]:
    """The ranks whose output was read: ``ranks`` (the cluster's) and every link's source (a
    rank's matrix file holds the links it sent: the source wrote the row)."""
    return {int(r) for r in ranks} | {int(r) for r in links.get_column("src_rank").drop_nulls()}


def mark_profiled(links: pl.DataFrame, ranks: Iterable[int] = ()) -> pl.DataFrame:
    """``links`` with ``dst_profiled`` (the destination's output was read) and ``dst_label``
    ("rank 5", or "rank 5 (not profiled)"): a collective's matrix names every peer of the
    group, profiled or not. msprof-analyze drops the links to ranks without output ("cannot be
    mapped to the global rank"); opscope keeps them, marked, and :func:`matrix_totals` keeps the
    figure comparable with msprof-analyze's apart."""
    seen = sorted(profiled_ranks(links, ranks))
    ok = pl.col("dst_rank").is_in(seen)
    return links.with_columns(
        ok.alias("dst_profiled"),
        pl.when(ok)
        .then(pl.format("rank {}", pl.col("dst_rank")))
        .when(pl.col("dst_rank") == UNKNOWN_RANK)
        .then(pl.lit("unknown rank (not profiled)"))
        .otherwise(pl.format("rank {} (not profiled)", pl.col("dst_rank")))
        .alias("dst_label"),
    )


def matrix_totals(links: pl.DataFrame, ranks: Iterable[int] = ()) -> dict[str, Any]:
    """Bytes of the matrix (self links excluded) between profiled ranks (``profiled_bytes``:
    what msprof-analyze's matrix sums) and to ranks not profiled (``unprofiled_bytes``), with
    those ranks (``unprofiled_ranks``)."""
    m = mark_profiled(links.filter(pl.col("src_rank") != pl.col("dst_rank")), ranks)
    ok = m.filter(pl.col("dst_profiled"))
    off = m.filter(~pl.col("dst_profiled"))
    return {
        "profiled_bytes": int(ok.get_column("size_bytes").sum()),
        "unprofiled_bytes": int(off.get_column("size_bytes").sum()),
        "unprofiled_ranks": sorted({int(r) for r in off.get_column("dst_rank").drop_nulls()}),
    }


def matrix_rows(links: pl.DataFrame, ranks: Iterable[int] = ()) -> list[dict[str, Any]]:
    """The communication matrix: one row per (src rank, dst rank, transport) with bytes, time
    (µs), bandwidth (GB/s), the ops that used it (``links`` as :class:`Cluster` holds it), and
    whether the destination was profiled (:func:`mark_profiled`)."""
    if tree.SHORTCUTS and not links.height:
        return []  # no link (every GPU trace): no row, without marking none (~0.3 ms)
    m = mark_profiled(links, ranks)
    return m.select(
        "src_rank",
        "dst_rank",
        "dst_profiled",
        "dst_label",
        "transport",
        "size_bytes",
        units.us(m.get_column("time_ns"), name="time_us"),
        "bandwidth_gbps",
        "ops",
    ).to_dicts()
