"""Raw Ascend events and flows through the shared linker (:func:`opscope.ingest.link.link_events`).

The Ascend reader only assembles (:mod:`opscope.ingest.ascend.assemble`); nesting, flow binding,
launches and ops, backward and forward links, step assignment, stacks and modules are the
shared linker's, the same rules as for Kineto traces. What stays here is Ascend's own:
flow ends onto streamless kernel rows, and the ``Call stack`` text as the linker's
``call_stack`` column.
"""

from __future__ import annotations

from collections import Counter

import polars as pl

from opscope.ingest import link
from opscope.model import schema as S


def _link(
    events: pl.DataFrame, raw_flows: pl.DataFrame, odd: Counter[str]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Linked events, the FLOWS table and the STACKS table of raw Ascend events (ids 0..n-1 in
    row order, ``rank`` set, the helper columns ``_call_stack`` / ``_krow`` allowed) and raw
    flow records (:data:`opscope.ingest.link.RAW_FLOWS`)."""
    text = pl.col("_call_stack").str.replace_all(r"\r?\n", "")
    events = events.with_columns(
        pl.when(text.str.strip_chars(" ;").str.len_chars() > 0).then(text).alias("call_stack"),
        # "<built-in method mul_ of Tensor object at 0xfffc8fcdcea0>": the address differs
        # between runs and exports (the text and database exports of one AlexNet run disagree
        # on every one), so frames are interned without it.
        pl.when(pl.col("kind") == "python_function")
        .then(pl.col("name").str.replace_all(r" at 0x[0-9a-fA-F]+", ""))
        .alias("frame_text"),
    ).select([c for c in S.EVENTS if c in events.columns] + ["call_stack", "frame_text"])
    linked = link.link_events(events, _onto_streamless(events, raw_flows))
    unbound = raw_flows.filter(pl.col("phase") == "s").height - linked.flows.height
    if unbound > 0:
        odd["trace_view.json: flows with an endpoint on no slice (dropped)"] += unbound
    return linked.events, linked.flows, linked.stacks


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
