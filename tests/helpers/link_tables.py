"""Hand-made raw tables for the linker's tests: events rows (ids in row order, rank 0, the
reader-only helper columns kept beside the schema) and raw flow records."""

from __future__ import annotations

import polars as pl

from opscope.ingest import link
from opscope.model import schema

# columns a reader hands the linker beside the events schema
HELPER_COLUMNS = ("call_stack", "frame_text")


def events(rows: list[dict[str, object]]) -> pl.DataFrame:
    df = pl.DataFrame(rows).with_row_index("id").with_columns(pl.col("id").cast(pl.Int64))
    helpers = [df.get_column(c) for c in HELPER_COLUMNS if c in df.columns]
    base = df.drop([h.name for h in helpers]).with_columns(pl.lit(0).alias("rank"))
    return schema.conform("events", base).with_columns(helpers)


def raw_flows(rows: list[dict[str, object]]) -> pl.DataFrame:
    if not rows:
        return pl.DataFrame(schema=link.RAW_FLOWS)
    return (
        pl.DataFrame(rows)
        .with_columns(pl.lit(0).alias("rank"))
        .select([pl.col(c).cast(t) for c, t in link.RAW_FLOWS.items()])
    )
