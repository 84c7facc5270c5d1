"""Export a Profile as a Chrome trace (``.json.gz``) for Perfetto, chrome://tracing and Insight,
with opscope's findings, anomalies and critical path added as extra tracks and flows, and each
slice's user source line, module and step in its args.

Lines are built with Polars expressions (``struct.json_encode``), not a Python loop per event.
Times are µs relative to the profile's first timestamp (``otherData.opscope_origin_ns`` holds
it): absolute Kineto times in µs lose sub-µs precision as doubles.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from opscope.model import Profile, schema

OverlayFn = Callable[[Profile], list[dict[str, Any]]]
_OVERLAY_TRACKS = {"finding": 1, "anomaly": 2, "critical_path": 3}


def _user_source(profile: Profile) -> pl.DataFrame:
    st = profile.stacks
    if st.height == 0:
        return pl.DataFrame(schema={"stack_id": pl.Int64, "source": pl.String})
    return (
        st.filter(pl.col("is_user"))
        .sort("stack_id", "depth")
        .group_by("stack_id", maintain_order=True)
        .first()
        .select("stack_id", pl.format("{}:{}", "file", "line").alias("source"))
    )


def _lines(
    df: pl.DataFrame, base: list[pl.Expr | str], extra: list[pl.Expr | str], raw_args: str | None
) -> pl.Series:
    """One JSON object per row: ``base`` fields, plus ``args`` = ``extra`` (+ the raw args)."""
    args = pl.struct(extra).struct.json_encode()
    if raw_args is not None:
        args = pl.concat_str(
            args.str.strip_suffix("}"),
            pl.when(pl.col(raw_args).is_not_null())
            .then(pl.concat_str(pl.lit(',"trace_args":'), pl.col(raw_args)))
            .otherwise(pl.lit("")),
            pl.lit("}"),
        )
    line = pl.concat_str(
        pl.struct(base).struct.json_encode().str.strip_suffix("}"),
        pl.lit(',"args":'),
        args,
        pl.lit("}"),
    )
    return df.select(line.alias("line")).get_column("line")


def build_lines(
    profile: Profile, overlays: OverlayFn | None = None
) -> tuple[list[pl.Series], dict[str, Any]]:
    """The trace's event lines (JSON objects as strings) and its ``otherData``."""
    ev = profile.events
    starts = [
        ev.get_column("ts_ns").min(),
        profile.counters.get_column("ts_ns").min(),
        profile.memory.get_column("ts_ns").min(),
    ]
    origin = min((int(s) for s in starts if s is not None), default=0)  # type: ignore[arg-type,call-overload]
    dev = pl.col("kind").cast(pl.String).is_in(list(schema.DEVICE_KINDS))
    e = ev.with_columns(
        dev.alias("_dev"),
        pl.col("rank").fill_null(0),
        pl.col("pid").fill_null(0),
        pl.col("tid").fill_null(0),
    )
    procs = (
        e.select("rank", "pid", "_dev")
        .unique()
        .sort("rank", "_dev", "pid")
        .with_row_index("_pid", offset=1)
        .with_columns(pl.col("_pid").cast(pl.Int64))
    )
    e = e.join(procs, on=["rank", "pid", "_dev"], how="left").join(
        _user_source(profile), on="stack_id", how="left"
    )
    out: list[pl.Series] = []
    # Process and thread names.
    out.append(
        _lines(
            procs,
            [
                pl.lit("M").alias("ph"),
                pl.lit("process_name").alias("name"),
                pl.col("_pid").alias("pid"),
                pl.lit(0).alias("tid"),
            ],
            [
                pl.format(
                    "rank {} · {} {}",
                    "rank",
                    pl.when("_dev").then(pl.lit("device")).otherwise(pl.lit("process")),
                    "pid",
                ).alias("name")
            ],
            None,
        )
    )
    th = profile.threads
    if th.height:
        named = th.with_columns(pl.col("is_device").fill_null(False).alias("_dev")).join(
            procs, on=["rank", "pid", "_dev"], how="inner"
        )
        if named.height:
            out.append(
                _lines(
                    named,
                    [
                        pl.lit("M").alias("ph"),
                        pl.lit("thread_name").alias("name"),
                        pl.col("_pid").alias("pid"),
                        pl.col("tid"),
                    ],
                    [pl.col("name")],
                    None,
                )
            )
    rel_us = ((pl.col("ts_ns") - origin) / 1e3).alias("ts")
    out.append(
        _lines(
            e.filter(pl.col("ts_ns").is_not_null()),
            [
                pl.lit("X").alias("ph"),
                pl.col("kind").cast(pl.String).alias("cat"),
                pl.col("name"),
                pl.col("_pid").alias("pid"),
                pl.col("tid"),
                rel_us,
                (pl.col("dur_ns").fill_null(0) / 1e3).alias("dur"),
            ],
            [
                pl.col("id").alias("opscope_id"),
                "step",
                "module",
                "source",
                pl.col("input_dims").alias("input_dims"),
                pl.col("input_types").alias("input_types"),
                "op_id",
                "fwd_id",
                "launch_id",
            ],
            "args",
        )
    )
    # Recorded flows, bound to the slices at both ends.
    where = e.select("id", "_pid", "tid", "ts_ns")
    fl = (
        profile.flows.with_row_index("_fid", offset=1)
        .join(
            where.rename({"id": "src_id", "_pid": "s_pid", "tid": "s_tid", "ts_ns": "s_ts"}),
            on="src_id",
        )
        .join(
            where.rename({"id": "dst_id", "_pid": "d_pid", "tid": "d_tid", "ts_ns": "d_ts"}),
            on="dst_id",
        )
    )
    if fl.height:
        out.extend(_flow_lines(fl, origin, pl.col("kind").cast(pl.String)))
    # Counters and the allocator's running total.
    counters = profile.counters.select("rank", "name", "ts_ns", "value")
    if profile.memory.height:
        counters = pl.concat(
            [
                counters,
                profile.memory.filter(pl.col("total_allocated").is_not_null()).select(
                    "rank",
                    pl.format("memory allocated (device {})", pl.col("device").fill_null(-1)).alias(
                        "name"
                    ),
                    "ts_ns",
                    pl.col("total_allocated").cast(pl.Float64).alias("value"),
                ),
            ]
        )
    if counters.height:
        cp = counters.join(
            procs.filter(~pl.col("_dev")).group_by("rank").agg(pl.col("_pid").min()),
            on="rank",
            how="left",
        ).with_columns(pl.col("_pid").fill_null(0))
        out.append(
            _lines(
                cp,
                [
                    pl.lit("C").alias("ph"),
                    "name",
                    pl.col("_pid").alias("pid"),
                    pl.lit(0).alias("tid"),
                    rel_us,
                ],
                [pl.col("value")],
                None,
            )
        )
    other: dict[str, Any] = {
        "opscope_origin_ns": origin,
        "opscope_sources": [str(s) for s in profile.meta.get("sources", [])],
    }
    if overlays is not None:
        out.extend(
            _overlay_lines(
                profile, e, overlays, origin=origin, pid=int(procs.height) + 1, other=other
            )
        )
    return out, other


def _flow_lines(fl: pl.DataFrame, origin: int, cat: pl.Expr) -> list[pl.Series]:
    """The start ("s", at the source slice) and finish ("f", at the destination) of each flow."""
    out = []
    for ph, side, extra in (("s", "s_", []), ("f", "d_", [pl.lit("e").alias("bp")])):
        out.append(
            _lines(
                fl,
                [
                    pl.lit(ph).alias("ph"),
                    cat.alias("cat"),
                    pl.lit("flow").alias("name"),
                    pl.col("_fid").alias("id"),
                    pl.col(f"{side}pid").alias("pid"),
                    pl.col(f"{side}tid").alias("tid"),
                    ((pl.col(f"{side}ts") - origin) / 1e3).alias("ts"),
                    *extra,
                ],
                [pl.col("src_id").alias("from"), pl.col("dst_id").alias("to")],
                None,
            )
        )
    return out


def _overlay_lines(
    profile: Profile,
    e: pl.DataFrame,
    overlays: OverlayFn,
    *,
    origin: int,
    pid: int,
    other: dict[str, Any],
) -> list[pl.Series]:
    items = overlays(profile)
    other["opscope_overlays"] = len(items)
    rows = [
        {
            "kind": str(it.get("kind")),
            "label": str(it.get("label") or it.get("kind")),
            "id": it.get("id"),
            "order": i,
        }
        for i, it in enumerate(items)
        if it.get("kind") in _OVERLAY_TRACKS
    ]
    out: list[pl.Series] = []
    names = pl.DataFrame(
        {
            "kind": list(_OVERLAY_TRACKS),
            "tid": list(_OVERLAY_TRACKS.values()),
            "label": ["findings", "anomalies", "critical path"],
        }
    )
    out.append(
        _lines(
            pl.DataFrame({"x": [0]}),
            [
                pl.lit("M").alias("ph"),
                pl.lit("process_name").alias("name"),
                pl.lit(pid).alias("pid"),
                pl.lit(0).alias("tid"),
            ],
            [pl.lit("opscope").alias("name")],
            None,
        )
    )
    out.append(
        _lines(
            names,
            [
                pl.lit("M").alias("ph"),
                pl.lit("thread_name").alias("name"),
                pl.lit(pid).alias("pid"),
                "tid",
            ],
            [pl.col("label").alias("name")],
            None,
        )
    )
    if not rows:
        return out
    ov = (
        pl.DataFrame(
            rows, schema={"kind": pl.String, "label": pl.String, "id": pl.Int64, "order": pl.Int64}
        )
        .join(names.select("kind", "tid"), on="kind")
        .join(
            e.select(
                "id",
                "ts_ns",
                "dur_ns",
                "name",
                "_pid",
                pl.col("tid").alias("ev_tid"),
                "source",
                "module",
                "step",
            ),
            on="id",
            how="inner",
        )
        .sort("order")
    )
    if ov.height == 0:
        return out
    out.append(
        _lines(
            ov,
            [
                pl.lit("X").alias("ph"),
                pl.format("opscope.{}", "kind").alias("cat"),
                pl.col("label").alias("name"),
                pl.lit(pid).alias("pid"),
                "tid",
                ((pl.col("ts_ns") - origin) / 1e3).alias("ts"),
                (pl.col("dur_ns").fill_null(0) / 1e3).alias("dur"),
            ],
            [
                pl.col("id").alias("opscope_id"),
                pl.col("name").alias("event"),
                "source",
                "module",
                "step",
            ],
            None,
        )
    )
    # Arrows along the critical path, node to node, on the original slices.
    cp = ov.filter(pl.col("kind") == "critical_path").sort("order")
    if cp.height > 1:
        pairs = pl.DataFrame(
            {
                "src_id": cp.get_column("id")[:-1],
                "dst_id": cp.get_column("id")[1:],
                "s_pid": cp.get_column("_pid")[:-1],
                "s_tid": cp.get_column("ev_tid")[:-1],
                "s_ts": (cp.get_column("ts_ns") + cp.get_column("dur_ns").fill_null(0))[:-1] - 1,
                "d_pid": cp.get_column("_pid")[1:],
                "d_tid": cp.get_column("ev_tid")[1:],
                "d_ts": cp.get_column("ts_ns")[1:],
            }
        ).with_row_index("_fid", offset=10_000_000)
        out.extend(_flow_lines(pairs, origin, pl.lit("opscope.critical_path")))
    return out


def export_perfetto(
    profile: Profile, path: str | os.PathLike[str], *, overlays: OverlayFn | None = None
) -> Path:
    """Write ``profile`` as a gzip Chrome trace at ``path`` (temp file + rename); returns it."""
    lines, other = build_lines(profile, overlays)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with (
            os.fdopen(fd, "wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as gz,
        ):
            gz.write(b'{"displayTimeUnit":"ns","otherData":')
            gz.write(json.dumps(other).encode())
            gz.write(b',"traceEvents":[\n')
            first = True
            for series in lines:
                if series.len() == 0:
                    continue
                if not first:
                    gz.write(b",\n")
                gz.write(",\n".join(series.to_list()).encode())
                first = False
            gz.write(b"\n]}\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
