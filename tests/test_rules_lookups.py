"""The rules' look-ups by position and by distinct name equal the joins, windows and per-row
string tests they replace: the name masks (with and without the distinct-name codes), event
positions (dense ids, permuted ids, nulls, repeats), each op's parent/cost context, the layout
rule's copy/view rows with their siblings and its copy-kernel rows, and the host-sync rule's
sync ops. The references are the previous code, verbatim, run on real traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import opscope
from helpers import synth
from opscope.advise import _common as c
from opscope.advise import advise
from opscope.advise.rules import layout, overhead
from opscope.analysis.tree import _positions
from opscope.model import Profile

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
TRACES = [
    SHARED / "compare" / "hta_trace_diff_control_a100_rank3of8.json.gz",  # 75k events, copies
    SHARED / "gpu" / "kineto_resnet50_v100_train_2021.pt.trace.json.gz",
    SHARED / "gpu" / "tracelens_h100_bert_small.json.gz",
    SHARED / "multi_rank" / "hta_sampled_128rank_job" / "rank-1.json.gz",
    SHARED / "ascend" / "small_two_rank" / "test_rank_0",
]


def _profiles() -> list[Profile]:
    out = [synth.training(steps=2, layers=3).profile]
    out += [opscope.load(p, cache=False) for p in TRACES if p.exists()]
    return out


@pytest.fixture(scope="module")
def profiles() -> list[Profile]:
    return _profiles()


# the previous code (references) ------------------------------------------------------------


def _old_linked(profile: Profile) -> pl.DataFrame:
    ops = profile.ops
    par = c.op_parents(profile)
    o = (
        ops.lazy()
        .select("id", "rank", "tid", "ts_ns", "name", "input_dims", "input_types", "input_strides")
        .join(par.lazy(), on="id", how="left")
        .join(c.op_cost(profile).lazy(), on="id", how="left")
        .sort("rank", "tid", "ts_ns", "id")
    )
    names = o.select(pl.col("id").alias("op_parent"), pl.col("name").alias("parent_name"))
    o = o.join(names, on="op_parent", how="left")
    key = ("rank", "tid", "op_parent")

    def same(k: int) -> pl.Expr:
        return pl.all_horizontal(pl.col(c).eq_missing(pl.col(c).shift(-k)) for c in key)

    o = (
        o.with_row_index("_row")
        .sort(key, maintain_order=True, nulls_last=True)
        .with_columns(
            pl.when(same(k)).then(pl.col("_row").shift(-k)).alias(f"_next{k}") for k in (1, 2)
        )
        .sort("_row")
    )
    o = o.with_columns(
        pl.when(pl.col(f"_next{k}").is_not_null())
        .then(pl.col(col).gather(pl.col(f"_next{k}").fill_null(0)))
        .alias(f"next{k}{suffix}")
        for k in (1, 2)
        for col, suffix in (
            ("name", ""),
            ("id", "_id"),
            ("input_dims", "_dims"),
            ("input_strides", "_strides"),
        )
    ).drop("_row", "_next1", "_next2")
    return o.collect(engine="in-memory")


def _old_copy_kernels(profile: Profile) -> pl.DataFrame:
    k = profile.kernels.sort("rank", "device", "stream", "ts_ns", "id").with_columns(
        pl.col("name").shift(-1).over("rank", "device", "stream").alias("next_name")
    )
    return k.filter(
        pl.col("name").str.contains(layout.COPY_KERNELS)
        & pl.col("next_name").fill_null("").str.contains(layout.MATMUL_KERNELS)
    )


def _old_sync_ops(profile: Profile) -> pl.DataFrame:
    nested = (
        profile.ops.lazy()
        .filter(pl.col("name").is_in(overhead.SYNC_OPS))
        .join(c.op_parents(profile).lazy(), on="id", how="left")
        .join(c.op_cost(profile).lazy(), on="id", how="left")
    )
    names = profile.ops.lazy().select(
        pl.col("id").alias("op_parent"), pl.col("name").alias("pname")
    )
    return (
        nested.join(names, on="op_parent", how="left")
        .filter(~pl.col("pname").fill_null("").is_in(overhead.SYNC_OPS))
        .collect(engine="in-memory")
    )


# tests -------------------------------------------------------------------------------------

PATTERNS = [
    {"pattern": overhead.SYNC_RUNTIME},
    {"pattern": layout.COPY_KERNELS},
    {"names": list(overhead.SYNC_OPS)},
    {"names": ["aten::copy_", "aten::mm", "no such op"]},
    {"names": ["aten::copy_", "aten::addmm"], "pattern": "^aten::(copy|mm)"},
    {"names": []},
]


def test_name_masks_equal_the_per_row_tests(
    profiles: list[Profile], monkeypatch: pytest.MonkeyPatch
) -> None:
    codes: list[str] = []
    real = c._name_codes
    monkeypatch.setattr(c, "_name_codes", lambda p, t: codes.append(t) or real(p, t))
    for p in profiles:
        for table in ("events", "ops", "kernels"):
            df = getattr(p, table)
            for kw in PATTERNS:
                want = pl.lit(True)
                if "names" in kw:
                    want = want & pl.col("name").is_in(kw["names"])
                if "pattern" in kw:
                    want = want & pl.col("name").str.contains(str(kw["pattern"]))
                rows = df.filter(want)
                assert_frame_equal(df.filter(c.name_match(p, table, **kw)), rows)  # type: ignore[arg-type]
                mask = c.name_mask(p, table, **kw)  # type: ignore[arg-type]
                assert mask.dtype == np.bool_ and len(mask) == df.height
                assert_frame_equal(df.filter(pl.Series(mask)), rows)
    assert codes  # each distinct name tested once, spread by the rows' codes


def test_name_mask_with_null_names() -> None:
    # (a null among the distinct names: in no list, matching no pattern, kept by no test)
    p = synth.training(steps=1, layers=2).profile
    ev = p.events.with_columns(
        pl.when(pl.col("id") % 3 == 0).then(None).otherwise(pl.col("name")).alias("name")
    )
    q = p.with_tables(events=ev)
    assert q.events.get_column("name").null_count() > 0
    for kw in PATTERNS:
        want = pl.lit(True)
        if "names" in kw:
            want = want & pl.col("name").is_in(kw["names"])
        if "pattern" in kw:
            want = want & pl.col("name").str.contains(str(kw["pattern"]))
        mask = c.name_mask(q, "events", **kw)  # type: ignore[arg-type]
        assert_frame_equal(q.events.filter(pl.Series(mask)), q.events.filter(want))


def _matches(names: list[str | None], pattern: str) -> list[bool]:
    """Whether each name matches ``pattern``: the engine's regex on each name alone."""
    return [n is not None and bool(pl.Series([n]).str.contains(pattern).item()) for n in names]


def test_pattern_masks_equal_each_names_test(profiles: list[Profile]) -> None:
    # every table tested over its distinct names
    patterns = (layout.COPY_KERNELS, layout.MATMUL_KERNELS, overhead.SYNC_RUNTIME, "^aten::")
    hits = 0
    for p in profiles:
        for table in ("events", "ops", "kernels"):
            names = getattr(p, table).get_column("name").to_list()
            distinct = list(set(names))
            for pattern, got in zip(patterns, c.pattern_masks(p, table, patterns), strict=True):
                # each distinct name tested alone, the answers spread over the rows in Python
                want = dict(zip(distinct, _matches(distinct, pattern), strict=True))
                assert got.dtype == np.bool_
                assert got.tolist() == [want[n] for n in names]
                hits += int(got.sum())
    assert hits > 100


def test_pattern_masks_with_null_names() -> None:
    p = synth.training(steps=1, layers=2).profile
    ev = p.events.with_columns(
        pl.when(pl.col("id") % 3 == 0).then(None).otherwise(pl.col("name")).alias("name")
    )
    q = p.with_tables(events=ev)
    names = q.events.get_column("name").to_list()
    assert None in names
    got = c.pattern_masks(q, "events", ("aten", "^$"))
    assert got[0].tolist() == _matches(names, "aten")
    assert got[0].any() and not got[1].any()


def test_index_finds_what_forest_positions_finds() -> None:
    rng = np.random.default_rng(3)
    cases = [
        pl.Series(np.arange(50), dtype=pl.Int64),  # dense: ids are positions
        pl.Series(rng.permutation(50), dtype=pl.Int64),
        pl.Series([5, 3, None, 3, 9, 0, None, 7], dtype=pl.Int64),  # nulls and a repeat
        pl.Series([], dtype=pl.Int64),
    ]
    for ids in cases:
        index = c._Index.of(ids)
        assert (index.order is None) == (ids.to_list() == list(range(ids.len())))
        want = np.array([-3, -1, 0, 3, 5, 7, 9, 12, 49, 50, 99], dtype=np.int64)
        arr = ids.fill_null(-1).to_numpy().astype(np.int64)
        ref = _positions(arr, want, np.zeros(len(want), dtype=bool))
        # a null id is never found (the reference masks it by its stand-in value, -1)
        ref[want == -1] = -1
        got = index.find(want)
        assert got.tolist() == ref.tolist(), ids.to_list()


def test_event_positions_equal_forest_positions(profiles: list[Profile]) -> None:
    for p in profiles:
        forest = c._forest(p)
        ids = p.events.get_column("id")
        pick = pl.Series([*ids.to_list()[::7], None, -5, ids.len() + 3], dtype=pl.Int64)
        assert c.event_positions(p, pick).tolist() == forest.positions(pick).tolist()


def test_op_context_equals_the_joins(profiles: list[Profile]) -> None:
    for p in profiles:
        ops = p.ops
        rows = np.arange(ops.height)[::3]
        want = (
            ops[rows]
            .select("id")
            .join(c.op_parents(p), on="id", how="left", maintain_order="left")
            .join(
                ops.select(pl.col("id").alias("op_parent"), pl.col("name").alias("parent_name")),
                on="op_parent",
                how="left",
                maintain_order="left",
            )
            .join(c.op_cost(p), on="id", how="left", maintain_order="left")
            .drop("id")
        )
        got = pl.DataFrame(c.op_context(p, rows))
        assert_frame_equal(got, want)


def _strided_inputs(dims_s: str | None, strides_s: str | None) -> list[list[int]]:
    """The shapes of a matmul's inputs whose strides are not the row-major ones (size-1 axes
    and stride-0 broadcasts aside), from its shape and stride texts."""
    out = []
    dims, strides = c.parse_dims(dims_s) or [], c.parse_dims(strides_s) or []
    for d, s in zip(dims, strides, strict=False):
        if len(d) < 2 or len(s) != len(d) or 0 in s:
            continue
        want = [int(np.prod(d[i + 1 :])) for i in range(len(d))]
        if any(a != b for a, b, n in zip(s, want, d, strict=True) if n > 1):
            out.append(d)
    return out


def _old_filtered(linked: pl.DataFrame) -> pl.DataFrame:
    """The copy and view rows Layout._host's filters kept (the union of the two)."""
    mm = list(c.MATMUL_OPS)
    feeds_next = pl.col("next1").is_in(mm) | (
        pl.col("next1").is_in(layout.VIEW_OPS) & pl.col("next2").is_in(mm)
    )
    copies = (
        pl.col("name").is_in(layout.COPY_OPS)
        & ~pl.col("parent_name")
        .fill_null("")
        .is_in([*layout.COPY_OPS, "aten::to", "aten::_to_copy"])
        & (feeds_next | (pl.col("parent_name").is_in(mm) & (pl.col("name") != "aten::copy_")))
    )
    views = (
        pl.col("name").is_in(layout.VIEW_OPS)
        & pl.col("op_parent").is_null()
        & (pl.col("next1").is_in(mm) | pl.col("next2").is_in(mm))
    )
    return linked.filter(copies | views)


def _old_flagged(linked: pl.DataFrame) -> pl.DataFrame:
    """The copy and view rows Layout._host flagged: those its filters kept, less the views
    that no next matmul takes as a strided input of the view's shape (its loop over them)."""
    mm = set(c.MATMUL_OPS)
    kept = _old_filtered(linked)

    def feeds(r: dict[str, Any]) -> bool:
        src = (c.parse_dims(r["input_dims"]) or [[]])[0]
        return len(src) >= 2 and any(
            r[f"next{k}"] in mm
            and any(
                sorted(d) == sorted(src)
                for d in _strided_inputs(r[f"next{k}_dims"], r[f"next{k}_strides"])
            )
            for k in (1, 2)
        )

    flagged = [r["name"] in layout.COPY_OPS or feeds(r) for r in kept.iter_rows(named=True)]
    return kept.filter(pl.Series(flagged, dtype=pl.Boolean))


def _layout_trace(path: Path) -> Path:
    """A Kineto trace of one host thread whose top-level ops are transposed views and copies
    before matmuls: views feeding the next op's (or the one after's) strided input, a view
    whose matmul reads contiguous inputs, a view inside ``aten::linear``, a copy before a
    matmul and a copy before an add."""
    ev: list[dict[str, Any]] = []
    t = 0.0

    def op(name: str, dims: list[list[int]], strides: list[list[int]], dur: float = 2.0) -> None:
        nonlocal t
        args = {"Input Dims": dims, "Input type": ["float"] * len(dims), "Input Strides": strides}
        ev.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": t, "dur": dur}
            | {"args": args}
        )
        t += dur + 1.0

    strided = ([[16, 32], [32, 64]], [[32, 1], [1, 32]])  # the second input a transposed view
    flat = ([[16, 32], [32, 64]], [[32, 1], [64, 1]])
    for _ in range(2):
        op("aten::permute", [[64, 32]], [[32, 1]])
        op("aten::mm", *strided)  # flagged: feeds the next matmul
        op("aten::t", [[64, 32]], [[32, 1]])
        op("aten::reshape", [[32, 64]], [[1, 32]])
        op("aten::mm", *strided)  # flagged: feeds the matmul after the reshape
        op("aten::transpose", [[64, 32]], [[32, 1]])
        op("aten::mm", *flat)  # filtered, then dropped: the matmul reads no strided input
        op("aten::transpose", [[8, 8]], [[8, 1]])
        op("aten::mm", *strided)  # filtered, then dropped: another shape is strided
        op("aten::contiguous", [[32, 64]], [[1, 32]])
        op("aten::mm", *flat)  # a copy feeding a matmul: flagged
        op("aten::contiguous", [[32, 64]], [[1, 32]])
        op("aten::add", *flat)  # a copy feeding no matmul
        start = t
        op("aten::linear", [[16, 32], [64, 32]], [[32, 1], [32, 1]], dur=10.0)
        t = start + 1.0
        op("aten::t", [[64, 32]], [[32, 1]])  # a view inside linear: the library's own
        op("aten::mm", *strided)
        t = start + 12.0
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_layout_rows_on_planted_views_and_copies(tmp_path: Path) -> None:
    p = opscope.load(_layout_trace(tmp_path / "layout.json"), cache=False)
    old = _old_flagged(_old_linked(p))
    new = layout._linked(p)
    assert new is not None
    assert_frame_equal(new.select(old.columns), old.sort("rank", "tid", "ts_ns", "id"))
    # per repeat: the permute, the t before the reshape and the copy before the matmul
    names = new.get_column("name").to_list()
    assert names == ["aten::permute", "aten::t", "aten::contiguous"] * 2
    found = advise(p, only=[layout.Layout.id])
    assert sorted(f.title.split(" ")[0] for f in found) == ["aten::contiguous", "transposed"]


def test_layout_rows_equal_the_plan_over_every_op(profiles: list[Profile]) -> None:
    dropped = 0
    for p in profiles:
        if p.ops.height == 0:
            continue
        linked = _old_linked(p)
        old = _old_flagged(linked)
        new = layout._linked(p)
        # (the views the filters kept that the shape check drops: the rows were built for them)
        dropped += _old_filtered(linked).height - old.height
        if new is None:
            assert old.height == 0
            continue
        # the same rows, in the ops' order by rank, thread, time and id (the order the rule's
        # findings take them in; the plan's own order was its last join's)
        assert_frame_equal(new.select(old.columns), old.sort("rank", "tid", "ts_ns", "id"))
    # (the 75k-event and BERT traces' views; the planted trace above has views that are kept)
    assert dropped > 10


def test_copy_kernels_equal_the_window_per_stream(profiles: list[Profile]) -> None:
    found = 0
    for p in profiles:
        old = _old_copy_kernels(p)
        new = layout._copy_kernels(p)
        if new is None:
            assert old.height == 0
            continue
        # the columns the rule reads (and the next kernel's name)
        assert new.columns == [*layout._KERNEL_COLUMNS, "next_name"]
        assert_frame_equal(new, old.select(new.columns))
        found += new.height
    assert found > 0


def test_sync_ops_equal_the_joins(profiles: list[Profile]) -> None:
    n = 0
    for p in profiles:
        got, want = overhead._sync_ops(p), _old_sync_ops(p)
        assert_frame_equal(got, want)
        n += got.height
    assert n > 0


def _old_kernel_blocks(profile: Profile, ids: pl.Series) -> pl.DataFrame:
    k = profile.kernels.filter(pl.col("op_id").is_not_null())
    if "blocks" not in k.columns or k.height == 0:
        return pl.DataFrame(schema={"id": pl.Int64, "blocks": pl.Int64})
    k = k.filter(pl.col("blocks").is_not_null()).select("op_id", "blocks")
    if k.height == 0:
        return pl.DataFrame(schema={"id": pl.Int64, "blocks": pl.Int64})
    anc = c.ancestors(profile, k.get_column("op_id")).filter(pl.col("anc_id").is_in(ids.implode()))
    return (
        k.rename({"op_id": "id"})
        .join(anc, on="id")
        .group_by("anc_id")
        .agg(pl.col("blocks").max())
        .rename({"anc_id": "id"})
    )


def test_kernel_blocks_equal_the_ancestor_table(profiles: list[Profile]) -> None:
    from opscope.advise.rules import gemm

    found = 0
    for p in profiles:
        ops = p.ops.get_column("id")
        for ids in (ops, ops[::5], ops.head(0)):
            got, want = gemm._kernel_blocks(p, ids), _old_kernel_blocks(p, ids)
            assert_frame_equal(got.sort("id"), want.sort("id"))
            found += got.height
    assert found > 1000


def test_sync_ops_and_dtype_rows_when_none(profiles: list[Profile]) -> None:
    """No sync op / no dtype hit: the empty tables the full paths give (schema included)."""
    for p in profiles:
        if overhead._sync_ops(p).height == 0:
            assert_frame_equal(overhead._sync_ops(p), _old_sync_ops(p))
        t = p.ops.select("id", "name", "input_dims", "input_types")
        got = c.has_tensor_dtype(t, ("no such dtype",))
        assert got.height == 0 and got.schema == t.schema


def test_shifted_equals_the_window_per_thread(profiles: list[Profile]) -> None:
    from opscope.advise.rules import fusion

    rows = 0
    for p in profiles:
        s = fusion._seq(p)
        for k in (-2, -1, 0, 1, 4):
            for col in ("name", "cost_ns", "input_dims"):
                got = s.select(fusion._shifted(col, k).alias("x"))
                want = s.select(pl.col(col).shift(-k).over("rank", "tid").alias("x"))
                assert_frame_equal(got, want)
        rows += s.height
    assert rows > 1000


def test_rules_forest_equals_forest_of_the_events(profiles: list[Profile]) -> None:
    from opscope.analysis.tree import Forest

    for p in profiles:
        got, want = c._forest(p), Forest.of(p.events)
        assert got.ids.tolist() == want.ids.tolist()
        assert got.parent.tolist() == want.parent.tolist()


def test_rules_forest_with_ids_that_are_not_positions() -> None:
    from opscope.analysis.tree import Forest

    p = synth.training(steps=1, layers=2).profile
    ev = p.events.with_columns(
        (pl.col("id") * 3 + 7).alias("id"),
        # a parent outside the events (-> no parent) and a few nulls
        pl.when(pl.col("id") % 5 == 0)
        .then(10**9)
        .otherwise(pl.col("parent_id") * 3 + 7)
        .alias("parent_id"),
    ).reverse()
    q = p.with_tables(events=ev)
    assert not c._dense_ids(q.events) and q.events.get_column("parent_id").null_count()
    got, want = c._forest(q), Forest.of(q.events)
    assert got.parent.tolist() == want.parent.tolist()
    assert (got.parent == -1).sum() > q.events.get_column("parent_id").null_count()


def _old_op_cost(profile: Profile) -> pl.DataFrame:
    ops = profile.ops.select("id", "dur_ns")
    per = (
        profile.kernels.lazy()
        .filter(pl.col("op_id").is_not_null())
        .select(pl.col("op_id").alias("id"), "dur_ns")
        .group_by("id")
        .agg(pl.col("dur_ns").sum())
        .collect(engine="in-memory")
    )
    anc = c.ancestors(profile, per.get_column("id"))
    rolled = (
        per.lazy()
        .join(anc.lazy(), on="id")
        .group_by("anc_id")
        .agg(pl.col("dur_ns").sum().alias("cost_ns"))
        .rename({"anc_id": "id"})
    )
    return (
        ops.lazy()
        .select("id")
        .join(rolled, on="id", how="left")
        .with_columns(pl.col("cost_ns").fill_null(0))
        .collect(engine="in-memory")
    )


def test_op_cost_equals_the_ancestor_roll_up(profiles: list[Profile]) -> None:
    costed = 0
    for p in profiles:
        if p.ops.height == 0 or not p.has_device or not c.present(p.kernels["op_id"]):
            continue
        got, want = c._op_cost(p), _old_op_cost(p)
        assert got.get_column("id").to_list() == p.ops.get_column("id").to_list()
        assert_frame_equal(got.sort("id"), want.sort("id"))
        costed += int((got.get_column("cost_ns") > 0).sum())
    assert costed > 1000
