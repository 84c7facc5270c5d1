"""anomalies: a host outlier whose excess is mostly that of outliers nested in it is dropped
(the nested one is the cause), equal to the definition walked here in Python on generated
forests; the efficiency table's groups are one query for both metrics."""

from __future__ import annotations

import random

import polars as pl
import pytest

from helpers.spies import count_queries
from opscope.analysis import anomalies as an
from opscope.analysis.flops import host_op_costs
from opscope.analysis.hotspots import op_times
from opscope.analysis.tree import host_forest
from opscope.model import Profile


def _forest_profile(rng: random.Random, n: int) -> tuple[Profile, list[int | None]]:
    parent: list[int | None] = []
    for i in range(n):
        parent.append(None if i == 0 or rng.random() < 0.2 else rng.randrange(i))
    kinds = [rng.choice(["cpu_op", "cpu_op", "user_annotation", "python_function"]) for _ in parent]
    ev = pl.DataFrame(
        {
            "id": list(range(n)),
            "rank": [0] * n,
            "kind": kinds,
            "name": [f"op{i % 5}" for i in range(n)],
            "tid": [1] * n,
            "ts_ns": list(range(n)),
            "dur_ns": [10] * n,
            "parent_id": parent,
        },
        schema_overrides={"parent_id": pl.Int64},
    )
    return Profile.from_tables(events=ev), parent


def test_nested_outliers_equal_the_walk_up() -> None:
    rng = random.Random(11)
    for _ in range(60):
        n = rng.randint(1, 80)
        profile, parent = _forest_profile(rng, n)
        ids = sorted(rng.sample(range(n), rng.randint(1, n)))
        # excesses in whole and half nanoseconds, as a duration less a median gives
        excess = {i: rng.randint(1, 400) / 2 for i in ids}
        out = pl.DataFrame(
            {"id": ids, "excess": [excess[i] for i in ids], "n": list(range(len(ids)))},
            schema={"id": pl.Int64, "excess": pl.Float64, "n": pl.Int64},
        )
        inner = dict.fromkeys(ids, 0.0)
        for i in ids:
            a = parent[i]
            while a is not None:
                if a in inner:
                    inner[a] += excess[i]
                a = parent[a]
        want = out.filter(pl.Series([inner[i] < 0.5 * excess[i] for i in ids]))
        got = an._without_nested(profile, out)
        assert got.equals(want)


def test_nested_outliers_run_no_query_once_the_forest_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    profile, _ = _forest_profile(random.Random(2), 50)
    host_forest(profile)  # (built once per profile: hotspots and attribution build it first)
    out = pl.DataFrame({"id": [3, 9, 30], "excess": [5.0, 7.5, 1.0]})
    ran = count_queries(monkeypatch)
    an._without_nested(profile, out)
    assert not ran


@pytest.mark.parametrize("slow_us", [2000.0, 300.0])
def test_efficiency_groups_are_one_query(slow_us: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both metrics' rows from one query once the op times and costs are known (memoised per
    profile: the report's other parts compute them first), whether the FLOP/s rows find the
    planted shape (tests/test_anomalies.py's case) or nothing (then the bytes/s rows are read:
    a second query before)."""
    from helpers.synth import Builder

    b = Builder()
    t = 0.0
    for dims, flops, k_us in (
        ("[[64,64],[64,128]]", 1_048_576, 30.0),
        ("[[128,128],[128,256]]", 8_388_608, 40.0),
        ("[[256,256],[256,512]]", 67_108_864, slow_us),
    ):
        for _ in range(3):
            op = b.op("aten::mm", t, k_us + 10, dims=dims, types='["float","float"]', flops=flops)
            b.kernel("gemm", t + 5, k_us, op)
            t += k_us + 50
    profile = b.build()
    op_times(profile), host_op_costs(profile), profile.ops
    ran = count_queries(monkeypatch)
    eff = an.inefficient_shapes(profile)
    assert len(ran) == 1
    if slow_us < 1000:  # 8x the FLOPs in 7.5x the time: no slower per FLOP
        assert eff.height == 0
        return
    assert eff.get_column("input_shapes").to_list() == ["[[256,256],[256,512]]"]
    assert eff.row(0, named=True)["rate"] == pytest.approx(67_108_864 / 2000e-6)
