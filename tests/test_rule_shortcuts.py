"""The rules' shortcuts on absent inputs (issue 19 item 8) change nothing.

A rule that reads only events of some kinds (runtime syncs, HCCL plane tasks, compute kernels,
optimizer annotations), only host ops, or only shapes and dtypes, returns before its queries
when the profile has none of them (``advise._common.absent``, ``analysis.tree.no_ops``, a null
count): the queries would find nothing. ``opscope.analysis.tree.SHORTCUTS`` switches them off;
each rule's findings must then be the same, field for field, and the shortcut must be taken (the
engine's, on the kinds a rule declares it ``needs``, or the rule's own): a
spy counts the DataFrames the rule makes (fewer with the shortcut). The whole report with and
without the shortcuts is compared byte for byte in test_report_speed_empty/_tiny.

Also here: ``kind_mask`` / ``kind_counts`` (the kinds as codes, once a profile) against the
kind column's own comparisons, and comm-exposed's names counted in Python against the
group-by and sort they replace.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import opscope
from conftest import SHARED_TRACES
from opscope.advise import _common as c
from opscope.advise.rule import can_apply, rules
from opscope.analysis import tree
from opscope.model import Profile
from test_report_speed_empty import _kernels_only

ASCEND_DATA = Path("/work/ascend_data")
_COMM_ONLY = ASCEND_DATA / "st/level2/rank_1_ascend_pt"  # 15 collectives, nothing else

# the rules that take a shortcut on each input (fusion-optimizer-foreach's full path on these
# makes no frame, its names' masks in NumPy: its gate is tested in test_rule_needs.py)
_TAKEN = {
    "comm_only": [
        "overhead-host-sync",  # no op, no runtime call
        "ascend-comm-byte-alignment",  # no HCCL task ("other" events)
        "ascend-comm-packet",  # the trace's tasks (none) not parsed, not concatenated
        "ascend-fusible-sequence",  # no compute kernel
        "shape-alignment",  # no shape, no op
        "moe-expert-loop",  # no costed call
        "overhead-ascend-slow-path",  # no core type, no dtype
    ],
    "kernels_only": [
        "overhead-host-sync",
        "shape-alignment",
        "precision-fp32-matmul",
        "moe-expert-loop",
    ],
    "test_rank_0": [
        "ascend-fusible-sequence",  # 21 events: fewer kernels than one repeated run needs
        "memory-alloc-churn",  # 56 memory events: fewer than the allocations a step needs
    ],
}


@pytest.fixture
def frames(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A count of the DataFrames made (every eager result and collected plan is one)."""
    made: list[int] = [0]
    real = pl.DataFrame._from_pydf.__func__  # type: ignore[attr-defined]

    def counted(cls: Any, py_df: Any) -> Any:
        made[0] += 1
        return real(cls, py_df)

    monkeypatch.setattr(pl.DataFrame, "_from_pydf", classmethod(counted))
    yield made


def _run(path: Path, rid: str, on: bool, made: list[int], mp: pytest.MonkeyPatch) -> Any:
    """(the rule's findings as JSON, the DataFrames its match made) on a fresh profile whose
    kinds are counted before (the count is shared by every rule of a report)."""
    mp.setattr(tree, "SHORTCUTS", on)
    prof = opscope.load(path, cache=False)
    c.kind_counts(prof)
    before = made[0]
    rule = rules()[rid]
    # the engine's gate on the kinds a rule needs (advise.rule.can_apply), then the rule's own
    found = rule.match(prof, {}) if can_apply(rule, prof) else []
    n = made[0] - before
    return json.dumps([f.to_json() for f in found], default=str, sort_keys=True), n


def _input(which: str, tmp_path: Path) -> Path:
    if which == "kernels_only":
        return _kernels_only(tmp_path / "k.json")
    if which == "test_rank_0":
        p = SHARED_TRACES / "ascend/small_two_rank/test_rank_0"
        if not p.exists():
            pytest.skip(f"shared trace not found: {p}")
        return p
    if not _COMM_ONLY.exists():
        pytest.skip(f"ascend_data export not found: {_COMM_ONLY}")
    return _COMM_ONLY


@pytest.mark.parametrize(("which", "rid"), [(w, r) for w, rids in _TAKEN.items() for r in rids])
def test_rule_shortcut_is_taken_and_changes_nothing(
    which: str, rid: str, tmp_path: Path, frames: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _input(which, tmp_path)
    fast, n_fast = _run(path, rid, True, frames, monkeypatch)
    full, n_full = _run(path, rid, False, frames, monkeypatch)
    assert fast == full
    assert n_fast < n_full, (rid, n_fast, n_full)  # the spy: the shortcut skipped queries


def test_the_inputs_are_what_the_shortcuts_stand_on(tmp_path: Path) -> None:
    k = opscope.load(_kernels_only(tmp_path / "k.json"), cache=False)
    assert k.ops.height == 0
    assert c.kind_counts(k) == {"kernel": 4, "communication": 1, "memcpy": 1}  # nccl_allreduce
    if _COMM_ONLY.exists():
        p = opscope.load(_COMM_ONLY, cache=False)
        assert p.ops.height == 0 and c.kind_counts(p) == {"communication": 15}
        assert c.present(p.kernels.get_column("input_dims")) == 0
        # the packet rule still finds its small collectives, from the communication files
        assert [f.rule for f in rules()["ascend-comm-packet"].match(p, {})] == [
            "ascend-comm-packet"
        ]


def test_shortcuts_off_means_nothing_is_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prof = opscope.load(_kernels_only(tmp_path / "k.json"), cache=False)
    assert c.absent(prof, "cpu_op", "runtime")
    assert not c.absent(prof, "cpu_op", "kernel")
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    assert not c.absent(prof, "cpu_op", "runtime")


def test_fewer_counts_the_kinds_together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prof = opscope.load(_kernels_only(tmp_path / "k.json"), cache=False)
    # 4 kernels, 1 communication, 1 memcpy
    assert not c.fewer(prof, 4, "kernel") and c.fewer(prof, 5, "kernel")
    assert not c.fewer(prof, 5, "kernel", "memcpy") and c.fewer(prof, 7, "kernel", "memcpy", "x")
    assert c.fewer(prof, 1, "cpu_op") == c.absent(prof, "cpu_op") is True
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    assert not c.fewer(prof, 5, "kernel")


@pytest.mark.parametrize(
    "rel",
    [
        "gpu/hta_triton_a100.json.gz",
        "ascend/small_two_rank/test_rank_0",
        "multi_rank/hta_sampled_128rank_job/rank-1.json.gz",
    ],
)
def test_kind_mask_and_counts_equal_the_columns_tests(rel: str) -> None:
    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    prof = opscope.load(p, cache=False)
    kind = prof.events.get_column("kind")
    want = {str(k): n for k, n in kind.value_counts().iter_rows() if k is not None and n}
    assert c.kind_counts(prof) == want
    for k in [*kind.dtype.categories.to_list(), "no such kind"]:  # type: ignore[attr-defined]
        got = c.kind_mask(prof, k)
        assert got.tolist() == (kind == k).fill_null(False).to_list(), k
    pair = c.kind_mask(prof, "runtime", "driver")
    assert pair.tolist() == kind.is_in(["runtime", "driver"]).fill_null(False).to_list()


def test_kind_codes_of_a_text_kind_column_with_nulls() -> None:
    ev = pl.DataFrame(
        {
            "id": [1, 2, 3, 4, 5],
            "parent_id": [None] * 5,
            "kind": ["cpu_op", None, "kernel", "cpu_op", "runtime"],
            "name": ["a", "b", "c", "d", "e"],
        },
        schema={"id": pl.Int64, "parent_id": pl.Int64, "kind": pl.String, "name": pl.String},
    )
    prof = Profile.from_tables(events=ev)
    assert c.kind_counts(prof) == {"cpu_op": 2, "kernel": 1, "runtime": 1}
    assert c.kind_mask(prof, "cpu_op").tolist() == [True, False, False, True, False]
    assert c.kind_mask(prof, "runtime", "kernel").tolist() == [False, False, True, False, True]
    assert c.kind_mask(prof, "step").tolist() == [False] * 5


def test_exposed_names_order_equals_the_group_by() -> None:
    """The most frequent names first, ties by name, a missing name first among its ties: what
    ``group_by("name").len().sort(["len", "name"], descending=[True, False])`` gave."""
    from opscope.advise.rules.comm import by_count

    names = ["b", "a", None, "c", "a", "b", "é", "B", None, "c", "d"]
    df = pl.DataFrame({"name": names}, schema={"name": pl.String})
    want = (
        df.group_by("name")
        .len()
        .sort(["len", "name"], descending=[True, False])
        .get_column("name")
        .to_list()
    )
    assert by_count(names) == want
    assert by_count([]) == []


@pytest.mark.parametrize(
    "rel", ["ascend/alexnet_ddp_910b/level1_rank0_ascend_pt", "gpu/hta_triton_a100.json.gz"]
)
def test_rows_by_location_equal_a_filter_per_location(rel: str) -> None:
    """Each location's rows (a partition, or the table itself for one location) are the rows
    ``df.filter(pl.col("id").is_in(ids))`` gives, in order; the locations as
    ``group_by_location``'s."""
    from polars.testing import assert_frame_equal

    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    prof = opscope.load(p, cache=False)
    for df in (prof.ops, prof.ops.head(40), prof.kernels, prof.ops.head(0)):
        want = c.group_by_location(prof, df)
        got = c.rows_by_location(prof, df)
        assert [(w, ids) for w, ids, _ in got] == list(want.items())
        for _, ids, rs in got:
            assert_frame_equal(rs, df.filter(pl.col("id").is_in(ids)), check_row_order=True)
    if "alexnet" in rel:  # the case of several locations is there
        assert len(c.group_by_location(prof, prof.ops)) > 1


def _dtype_rows_by_join(df: pl.DataFrame, wanted: tuple[str, ...]) -> pl.DataFrame:
    """``has_tensor_dtype`` as it was: the distinct pairs, then a semi join on the hits."""
    hits = []
    for dims_s, types_s in df.select("input_dims", "input_types").unique().iter_rows():
        dims = c.parse_dims(dims_s) or []
        types = c.parse_types(types_s)
        if any(t in wanted and i < len(dims) and len(dims[i]) > 0 for i, t in enumerate(types)):
            hits.append((dims_s, types_s))
    if not hits:
        return df.clear()
    sel = pl.DataFrame(
        {"input_dims": [h[0] for h in hits], "input_types": [h[1] for h in hits]},
        schema={"input_dims": pl.String, "input_types": pl.String},
    )
    return df.join(sel, on=["input_dims", "input_types"], how="semi", nulls_equal=True)


@pytest.mark.parametrize(
    "rel",
    ["gpu/hta_triton_a100.json.gz", "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt"],
)
@pytest.mark.parametrize("wanted", [("float32",), ("float64",), ("bfloat16", "float16")])
def test_has_tensor_dtype_equals_the_semi_join(rel: str, wanted: tuple[str, ...]) -> None:
    from polars.testing import assert_frame_equal

    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    prof = opscope.load(p, cache=False)
    for src in (prof.ops, prof.kernels):
        df = src.select("id", "name", "input_dims", "input_types")
        assert_frame_equal(c.has_tensor_dtype(df, wanted), _dtype_rows_by_join(df, wanted))


@pytest.mark.parametrize(
    "rel",
    [
        "gpu/hta_triton_a100.json.gz",
        "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
        "multi_rank/hta_sampled_128rank_job/rank-1.json.gz",
    ],
)
def test_user_level_ops_and_masks_equal_the_joins(rel: str) -> None:
    """The top-level ops by position equal the ops joined with ``op_parents`` and ``op_cost``
    and filtered on a missing parent (the code before); the event masks from the kinds' codes
    equal the kind column's text tests."""
    from polars.testing import assert_frame_equal

    from opscope.model import kinds

    p = SHARED_TRACES / rel
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    prof = opscope.load(p, cache=False)
    want = (
        prof.ops.lazy()
        .join(c.op_parents(prof).lazy(), on="id", how="left")
        .join(c.op_cost(prof).lazy(), on="id", how="left")
        .filter(pl.col("op_parent").is_null())
        .sort("rank", "tid", "ts_ns")
        .collect(engine="in-memory")
    )
    got = c.user_level_ops(prof)
    assert_frame_equal(got, want, check_row_order=True)
    assert 0 < got.height < prof.ops.height  # nested ops are there and left out
    kind = prof.events.get_column("kind").cast(pl.String)
    is_op, dev, _, _ = c._event_masks(prof)
    assert is_op.tolist() == (kind == "cpu_op").fill_null(False).to_list()
    assert dev.tolist() == kind.is_in(kinds.DEVICE_KINDS).fill_null(False).to_list()


@pytest.mark.parametrize("which", ["comm_only", "kernels_only", "rank1"])
def test_device_idle_counts_shortcut(
    which: str, tmp_path: Path, frames: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rank's kernels, all timed: the idle time from the columns' counts equals the
    query's; the query is not run (one DataFrame fewer). (The NumPy path's: a few kernels'
    Python path, advise/_idle.py, makes none either way.)"""
    from opscope.advise import _idle
    from opscope.advise.rules import overhead

    monkeypatch.setattr(_idle, "IDLE_PY_MAX_ROWS", -1)

    if which == "rank1":
        path = SHARED_TRACES / "multi_rank/hta_sampled_128rank_job/rank-1.json.gz"
        if not path.exists():
            pytest.skip(f"shared trace not found: {path}")
    else:
        path = _input(which, tmp_path)
    got = {}
    for on in (True, False):
        monkeypatch.setattr(tree, "SHORTCUTS", on)
        prof = opscope.load(path, cache=False)
        assert prof.kernels.get_column("rank").n_unique() == 1
        before = frames[0]
        got[on] = (overhead._idle_of(prof), frames[0] - before)
    assert got[True][0] == got[False][0] > 0
    assert got[True][1] == got[False][1] - 1


def test_foreach_reads_the_op_parents_of_its_ops_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """optimizer-foreach finds the loop without the every-op parents table (the parents of the
    ops under the annotation by position): the same finding as with that table joined."""
    from opscope.advise.rules import fusion

    p = SHARED_TRACES / "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz"
    if not p.exists():
        pytest.skip(f"shared trace not found: {p}")
    rule = rules()["fusion-optimizer-foreach"]
    asked: list[int] = []
    real = c.op_parents

    def spy(profile: Any) -> Any:
        asked.append(1)
        return real(profile)

    monkeypatch.setattr(c, "op_parents", spy)
    prof = opscope.load(p, cache=False)
    (f,) = rule.match(prof, {})
    assert asked == []
    # the parents by position equal the table's for every op under the annotation
    table = dict(real(prof).iter_rows())
    ops_at = c.event_positions(prof, prof.ops.get_column("id"))
    up = c.op_parent_positions(prof)
    ids = prof.events.get_column("id").to_list()
    for i, at in zip(prof.ops.get_column("id").to_list(), ops_at.tolist(), strict=True):
        assert table[i] == (ids[up[at]] if up[at] >= 0 else None)
    assert f.rule == "fusion-optimizer-foreach" and f.evidence["calls"] > 0
    assert fusion.FOREACH_MIN_OPS > 1


@pytest.mark.parametrize("n", [0, 1, 7, 40])
def test_name_codes_of_a_small_table_equal_the_cast_path(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The distinct names found in Python for a small table: every name's mask (a pattern, a
    set of names, a test) equals the categorical path's."""
    names = [None if i % 5 == 3 else f"op{(i * 7) % 4}" for i in range(n)]
    ev = pl.DataFrame(
        {"id": list(range(n)), "name": names}, schema={"id": pl.Int64, "name": pl.String}
    )
    out = []
    for most in (10**6, -1):
        monkeypatch.setattr(c, "NAME_CODES_PY_MAX_ROWS", most)
        prof = Profile.from_tables(events=ev)
        out.append(
            (
                c.pattern_masks(prof, "events", ["op[12]", "^op0$"])[0].tolist(),
                c.pattern_masks(prof, "events", ["op[12]", "^op0$"])[1].tolist(),
                c.name_mask(prof, "events", names=["op3", "op1"]).tolist(),
                c.name_where(prof, "events", lambda s: s.endswith("2")).tolist(),
            )
        )
    assert out[0] == out[1]
    assert out[0][0] == [x in ("op1", "op2") for x in names]


@pytest.mark.parametrize("kinds", [["kernel", "cpu_op", "kernel"], ["kernel", None, "cpu_op"]])
def test_kind_codes_of_an_enum_column_equal_links(kinds: list[str | None]) -> None:
    """The model's Enum kinds without a null read as their codes directly; with one, through
    ``ingest.link.kind_codes``: the same codes either way (a null: -1)."""
    from opscope.ingest.link import kind_codes
    from opscope.model.schema import EventKind

    ev = pl.DataFrame(
        {"id": [0, 1, 2], "kind": pl.Series(kinds, dtype=EventKind), "name": ["a", "b", "c"]}
    )
    prof = Profile.from_tables(events=ev)
    codes, at = c._kind_codes(prof)
    want, cats = kind_codes(ev.get_column("kind"))
    assert codes.tolist() == [-1 if w == len(cats) else w for w in want.tolist()]
    assert at == {k: i for i, k in enumerate(cats)}
