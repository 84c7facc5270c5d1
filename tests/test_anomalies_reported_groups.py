"""anomalies._report_tables (the reported groups and their outlier calls, in Python) equals the
plans it stands for (:func:`opscope.analysis.anomalies._report_plans` on the outliers joined
with the reported groups) on random outliers: several groups, null keys and steps, even and odd
counts, equal excesses (the keys break the tie), repeated starts (the ids break it)."""

from __future__ import annotations

import random

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from opscope.analysis import anomalies as an
from opscope.analysis import tree


def _outliers(rng: random.Random) -> pl.DataFrame:
    rows = []
    keys = [
        (rng.choice(["kernel", "op"]), rng.choice([None, "a", "b", "é"]),
         rng.choice([None, "[1]", "[2,3]"]), rng.choice([None, "float"]))
        for _ in range(rng.randint(1, 8))
    ]  # fmt: skip
    per_key = {k: (rng.randint(3, 40), rng.randint(1, 50) * 1000.0) for k in keys}
    for i in range(rng.randint(1, 40)):
        k = rng.choice(keys)
        n, med = per_key[k]
        dur = int(med) + rng.choice([20_000, 30_000, rng.randint(10_000, 90_000)])
        rows.append(
            {
                "id": i,
                "what": k[0],
                "name": k[1],
                "input_dims": k[2],
                "input_types": k[3],
                "step": rng.choice([None, 0, 1, 2]),
                "ts_ns": rng.choice([None, rng.randint(0, 5) * 100]),
                "dur_ns": dur,
                "n": n,
                "med": med,
                "mad": 1.5,
                "excess": dur - med,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "id": pl.Int64, "what": pl.String, "name": pl.String, "input_dims": pl.String,
            "input_types": pl.String, "step": pl.Int32, "ts_ns": pl.Int64, "dur_ns": pl.Int64,
            "n": pl.UInt32, "med": pl.Float64, "mad": pl.Float64, "excess": pl.Float64,
        },
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(30))
def test_report_tables_equal_the_plans(seed: int) -> None:
    rng = random.Random(seed)
    out = _outliers(rng)
    keys = sorted(
        set(zip(*(out.get_column(c).to_list() for c in an._GROUP), strict=True)),
        key=lambda k: tuple((v is None, v or "") for v in k),
    )
    keep = [dict(zip(an._GROUP, k, strict=True)) for k in keys if rng.random() < 0.7] or [
        dict(zip(an._GROUP, keys[0], strict=True))
    ]
    kept = out.lazy().join(
        pl.DataFrame(keep, schema={k: out.schema[k] for k in an._GROUP}).lazy(),
        on=an._GROUP,
        nulls_equal=True,
    )
    want = pl.collect_all(list(an._report_plans(kept)))
    got = an._report_tables(out, keep)
    assert tree.SHORTCUTS  # (the report's path)
    for a, b in zip(got, want, strict=True):
        assert_frame_equal(a, b, check_row_order=True, check_exact=True)
