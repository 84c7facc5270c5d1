"""Raw Ascend events and flows through the shared linker (:mod:`opscope.ingest.link`)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl

from opscope.ingest import link
from opscope.model import schema as S
from opscope.model.usercode import is_model_file


def _link(
    events: pl.DataFrame, raw_flows: pl.DataFrame, odd: Counter[str]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    host = pl.col("device").is_null()
    # Nesting per (rank, pid, tid) track: the shared linker's rule (host threads; device
    # streams nest nothing here, the table's kernels do not overlap on a stream).
    events, index = link.nest_indexed(events)
    # Flows through the shared linker: an endpoint binds to the innermost qualifying slice on
    # its track holding its time (Chrome's rule for flow starts and ``bp: "e"`` ends). CANN's
    # HostToDevice starts fall inside a CANN call, not at its start: an exact-start match
    # bound 23 of 210 on the AlexNet 910B export, this binds all of them.
    flows = link.resolve_flows(events, _onto_streamless(events, raw_flows), index=index)
    unbound = raw_flows.filter(pl.col("phase") == "s").height - flows.height
    if unbound > 0:
        odd["trace_view.json: flows with an endpoint on no slice (dropped)"] += unbound

    # Stacks from "Call stack" text, interned.
    stacks, events = _intern_stacks(events)

    # Walk down the nesting levels: module path, inherited stack, backward flag.
    module_name = (
        pl.when(pl.col("kind") == "python_function")
        .then(pl.col("name").str.extract(r"^nn\.Module:\s*(.+)$"))
        .otherwise(None)
    )
    events = events.with_columns(
        module_name.alias("_mod"),
        (
            (pl.col("fwd_tid").fill_null(0) > 0)
            | pl.col("name").str.contains(r"(?i)backward|autograd::engine")
        )
        .and_(host)
        .alias("is_backward"),
    )
    # Level by level (vectorised per nesting depth): module path = ancestors' module names
    # joined by "/", stack inherited from the nearest ancestor that has one, backward flag
    # inherited from any ancestor.
    max_depth = int(events.get_column("depth").fill_null(0).max() or 0)  # type: ignore[arg-type]
    base = events.select("id", "parent_id", "depth", "_mod", "stack_id", "is_backward")
    level = base.filter(pl.col("depth") == 0).select(
        "id", pl.col("_mod").alias("module"), "stack_id", "is_backward"
    )
    done = [level]
    for lvl in range(1, max_depth + 1):
        rows = base.filter(pl.col("depth") == lvl).join(
            level.rename(
                {"id": "parent_id", "module": "_pm", "stack_id": "_ps", "is_backward": "_pb"}
            ),
            on="parent_id",
            how="left",
        )
        level = rows.select(
            "id",
            pl.when(pl.col("_pm").is_not_null() & pl.col("_mod").is_not_null())
            .then(pl.col("_pm") + pl.lit("/") + pl.col("_mod"))
            .otherwise(pl.coalesce("_mod", "_pm"))
            .alias("module"),
            pl.coalesce("stack_id", "_ps").alias("stack_id"),
            (pl.col("is_backward") | pl.col("_pb").fill_null(False)).alias("is_backward"),
        )
        done.append(level)
    walked = pl.concat(done)
    events = events.drop("stack_id", "is_backward", "module").join(walked, on="id", how="left")
    # Non-module events keep only the module of their ancestors; python frames that are modules
    # keep their own path.

    # Steps on the host: the ProfilerStep slice that contains the event's start.
    steps = (
        events.filter(pl.col("kind") == "step")
        .select(
            pl.col("ts_ns").alias("_sts"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("_send"),
            pl.col("name").str.extract(r"#(\d+)").cast(pl.Int32, strict=False).alias("_step"),
        )
        .sort("_sts")
    )
    if steps.height:
        tagged = (
            events.select("id", "ts_ns")
            .sort("ts_ns")
            .join_asof(steps, left_on="ts_ns", right_on="_sts", strategy="backward")
            .select(
                "id",
                pl.when(pl.col("ts_ns") < pl.col("_send")).then(pl.col("_step")).alias("_hstep"),
            )
        )
        events = events.join(tagged, on="id", how="left")
    else:
        events = events.with_columns(pl.lit(None, pl.Int32).alias("_hstep"))

    # Kernel -> host op through async_npu flows; launch through the CANN call's connection id.
    a = (
        flows.filter(pl.col("kind") == "async_npu")
        .select(pl.col("dst_id").alias("id"), pl.col("src_id").alias("_op"))
        .unique("id", keep="first")
    )
    launches = (
        events.filter(pl.col("kind") == "runtime")
        .filter(pl.col("correlation").is_not_null())
        .select(pl.col("correlation"), pl.col("id").alias("_launch"))
        .unique("correlation", keep="first")
    )
    events = events.join(a, on="id", how="left").join(launches, on="correlation", how="left")
    events = events.with_columns(
        pl.when(host).then(None).otherwise(pl.col("_launch")).alias("launch_id"),
        pl.when(host).then(None).otherwise(pl.col("_op")).alias("op_id"),
    )
    # Host runtime calls: the innermost enclosing cpu_op is their op.
    events = _host_op_of_runtime(events)
    # Fill device rows from their op: step, stack, module, backward; host rows take _hstep.
    opinfo = events.select(
        pl.col("id").alias("op_id"),
        pl.col("_hstep").alias("_ostep"),
        pl.col("stack_id").alias("_ostack"),
        pl.col("module").alias("_omod"),
        pl.col("is_backward").alias("_obwd"),
    )
    events = events.join(opinfo, on="op_id", how="left").with_columns(
        pl.when(host).then(pl.col("_hstep")).otherwise(pl.coalesce("step", "_ostep")).alias("step"),
        pl.when(host).then(pl.col("stack_id")).otherwise(pl.col("_ostack")).alias("stack_id"),
        pl.when(host).then(pl.col("module")).otherwise(pl.col("_omod")).alias("module"),
        pl.when(host)
        .then(pl.col("is_backward"))
        .otherwise(pl.col("_obwd").fill_null(False))
        .alias("is_backward"),
    )
    # Backward op -> forward op via fwdbwd flows.
    fb = (
        flows.filter(pl.col("kind") == "fwdbwd")
        .select(pl.col("dst_id").alias("id"), pl.col("src_id").alias("_fwd"))
        .unique("id", keep="first")
    )
    events = events.join(fb, on="id", how="left").with_columns(pl.col("_fwd").alias("fwd_id"))
    # Backward: the shared linker's rule (autograd evaluate_function / *Backward ops and what
    # they enclose; device events through their op), so both formats agree.
    events = link.mark_backward(events.sort("id"))
    events = events.sort("id").select([c for c in S.EVENTS if c in events.columns])
    return events, flows, stacks


def _onto_streamless(events: pl.DataFrame, raw_flows: pl.DataFrame) -> pl.DataFrame:
    """Flow ends pointing at a trace task that a streamless kernel_details row replaced (level 0
    tables have no Stream ID) move to that row's track (tid null), where it starts at their ts."""
    rows = (
        events.filter(pl.col("device").is_not_null() & pl.col("tid").is_null())
        .select("pid", "ts_ns", pl.lit(True).alias("_streamless"))
        .unique(["pid", "ts_ns"])
    )
    if rows.height == 0:
        return raw_flows
    return (
        raw_flows.join(rows, on=["pid", "ts_ns"], how="left", maintain_order="left")
        .with_columns(
            pl.when(pl.col("_streamless") & (pl.col("phase") != "s"))
            .then(None)
            .otherwise(pl.col("tid"))
            .alias("tid")
        )
        .drop("_streamless")
    )


def _host_op_of_runtime(events: pl.DataFrame) -> pl.DataFrame:
    """Runtime (CANN) calls and other host slices: op_id = innermost enclosing cpu_op."""
    ops = events.select("id", "kind", "parent_id")
    is_op = ops.get_column("kind").to_numpy() == "cpu_op"
    par = ops.get_column("parent_id").fill_null(-1).to_numpy()
    n = ops.height
    owner = np.full(n, -1, dtype=np.int64)
    cur = par.copy()
    host = events.get_column("device").is_null().to_numpy()
    todo = np.nonzero(host & (events.get_column("kind").to_numpy() == "runtime"))[0]
    for _ in range(256):
        if todo.size == 0:
            break
        c = cur[todo]
        valid = c >= 0
        hit = valid & is_op[np.maximum(c, 0)]
        owner[todo[hit]] = c[hit]
        keep = valid & ~hit
        todo = todo[keep]
        cur[todo] = par[cur[todo]]
    return events.with_columns(
        pl.when(pl.col("kind") == "runtime")
        .then(pl.Series("_own", owner).replace(-1, None))
        .otherwise(pl.col("op_id"))
        .alias("op_id")
    )


_FRAME = r"^(?P<file>.*)\((?P<line>\d+)\):\s*(?P<function>.*)$"


def parse_stacks(texts: pl.Series) -> pl.DataFrame:
    """Intern ``Call stack`` strings ("file(line): func;\\nfile(line): func", innermost first).

    Returns the STACKS table (stack_id = position of the distinct string in ``texts``).
    """
    u = pl.DataFrame({"text": texts}).with_row_index("stack_id")
    frames = (
        u.with_columns(pl.col("text").str.split(";").alias("f"))
        .explode("f")
        .with_columns(pl.col("f").str.strip_chars(" \t\r\n"))
        .filter(pl.col("f").str.len_chars() > 0)
        .with_columns(pl.int_range(pl.len()).over("stack_id").alias("depth"))
        .with_columns(pl.col("f").str.extract_groups(_FRAME).alias("g"))
        .unnest("g")
    )
    file_ = pl.coalesce("file", "f")
    return frames.select(
        pl.col("stack_id").cast(pl.Int64),
        pl.col("depth").cast(pl.Int32),
        file_.alias("file"),
        pl.col("line").cast(pl.Int32, strict=False),
        pl.col("function"),
        # the one rule of what is the model's code (Kineto stacks use it too)
        file_.map_elements(is_model_file, return_dtype=pl.Boolean)
        .fill_null(False)
        .alias("is_user"),
    )


def _intern_stacks(events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    text = pl.col("_call_stack").str.replace_all(r"\r?\n", "")
    events = events.with_columns(
        pl.when(text.str.strip_chars(" ;").str.len_chars() > 0).then(text).alias("_cs")
    )
    uniq = events.get_column("_cs").drop_nulls().unique(maintain_order=True)
    if uniq.len() == 0:
        return S.empty("stacks"), events.with_columns(pl.lit(None, pl.Int64).alias("stack_id"))
    stacks = parse_stacks(uniq)
    ids = (
        pl.DataFrame({"_cs": uniq})
        .with_row_index("stack_id")
        .with_columns(pl.col("stack_id").cast(pl.Int64))
    )
    events = events.drop("stack_id", strict=False).join(ids, on="_cs", how="left")
    return stacks, events.sort("id")
