"""advise._common.ancestors built as one frame from arrays (ids without nulls) equals the
two-frame concatenation it replaced (kept for ids with a null), row by row, on a real trace."""

from __future__ import annotations

import numpy as np
import polars as pl
from polars.testing import assert_frame_equal

from conftest import shared_trace
from opscope.advise import _common as c
from opscope.advise._common import MAX_WALK, ancestors
from opscope.ingest import load


def _reference(profile: object, ids: pl.Series | None) -> pl.DataFrame:
    forest = c._forest(profile)  # type: ignore[arg-type]
    ev = profile.events  # type: ignore[attr-defined]
    start = ev.get_column("id") if ids is None else ids.cast(pl.Int64).unique()
    i, anc, hops = forest.ancestor_pairs(forest.positions(start), max_depth=MAX_WALK - 1)
    own = start.to_numpy()
    return pl.concat(
        [
            pl.DataFrame({"id": start, "anc_id": start}).with_columns(pl.lit(0).alias("hops")),
            pl.DataFrame(
                {"id": own[i], "anc_id": forest.ids[anc], "hops": hops.astype(np.int32)},
                schema={"id": pl.Int64, "anc_id": pl.Int64, "hops": pl.Int32},
            ),
        ]
    )


def test_ancestors_equal_the_concatenation() -> None:
    p = load(shared_trace("gpu/hta_triton_a100.json.gz"), cache=False)
    ids = p.kernels.get_column("op_id").drop_nulls().head(200)
    assert ids.len() > 0
    for which in (None, ids, ids.cast(pl.Int32)):
        got = ancestors(p, which)
        assert_frame_equal(got, _reference(p, which))
    got = ancestors(p, ids)
    assert (got.get_column("hops") > 0).any()  # the walk found ancestors: not vacuous


def test_ids_with_a_null_take_the_concatenation() -> None:
    p = load(shared_trace("gpu/hta_triton_a100.json.gz"), cache=False)
    ids = pl.Series("id", [None, *p.ops.get_column("id").head(20).to_list()], dtype=pl.Int64)
    got = ancestors(p, ids)
    assert got.get_column("id").null_count() >= 1
    ref = _reference(p, ids)
    assert sorted(got.rows(), key=repr) == sorted(ref.rows(), key=repr)
    assert ref.height > 1  # the reference is not trivially empty
