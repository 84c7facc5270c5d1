"""shape-alignment's peer-rate estimate and candidate order, against plain Python references.

The estimate reads the aligned rows from per-(op, dtype) lists of tuples built once a rule run
(:meth:`Alignment._peers_by_op`); the reference scans every aligned row's dict per flagged
group, as the rule did before. The candidates' order is read from the groups' keys
(``_group_key``); the reference sorts the rows by :func:`candidate_key`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import opscope
from conftest import SHARED_TRACES
from opscope.advise import _common as c
from opscope.advise.rules.alignment import Alignment, _matmul_shape, candidate_key

CORPUS = Path("/work/corpus")
TRACES = [
    SHARED_TRACES / "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
    SHARED_TRACES / "gpu/tracelens_h100_bert_small.json.gz",
    SHARED_TRACES / "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
    CORPUS / "hta/rank_non_gpu/rank_non_gpu.json.gz",
    SHARED_TRACES / "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",  # kernels with shapes
    SHARED_TRACES / "ascend/small_two_rank/test_rank_0",
]


def _scan_estimate(
    rs: list[dict[str, Any]], aligned: list[dict[str, Any]], total_ns: float
) -> tuple[float, str]:
    """The estimate by a scan of every aligned row per flagged group (the rule's old code)."""
    flops = sum(r["flops"] * r["calls"] for r in rs)
    if not flops or total_ns <= 0:
        return 0.0, ""
    per_call = flops / max(sum(r["calls"] for r in rs), 1)
    names = {r["name"] for r in rs}
    dtypes = {r["dtype"] for r in rs}
    peers = [
        a
        for a in aligned
        if a["name"] in names
        and ((a["dtypes"] or [None])[0] or "float32") in dtypes
        and per_call / 8 <= a["flops"] <= per_call * 8
    ]
    if not peers:
        return 0.0, ""
    rate = sum(a["flops"] * a["calls"] for a in peers) / sum(a["cost_ns"] for a in peers)
    mine = flops / total_ns
    if rate <= mine:
        return 0.0, ""
    return total_ns - flops / rate, (
        f"at the FLOP/s the same operator reaches on aligned shapes in this profile "
        f"({rate / 1e3:.3g} vs {mine / 1e3:.3g} TFLOP/s over {len(peers)} shapes)"
    )


def _check(flagged_groups: list[list[dict[str, Any]]], aligned: list[dict[str, Any]]) -> int:
    """Each group's estimate equals the scan's; how many groups found peers."""
    peers_of = Alignment._peers_by_op(aligned)
    found = 0
    for rs in flagged_groups:
        total = float(sum(r["cost_ns"] for r in rs))
        want = _scan_estimate(rs, aligned, total)
        assert Alignment._estimate(rs, peers_of, total) == want
        found += want[0] > 0
    return found


def _row(name: str, dtypes: list[Any] | None, flops: float, calls: int, ns: int) -> dict[str, Any]:
    dtype = next((t for t in dtypes or [] if t), "float32")
    return {"name": name, "dtypes": dtypes, "dtype": dtype, "flops": flops, "calls": calls,
            "cost_ns": ns}  # fmt: skip


def test_estimate_equals_the_scan_on_planted_rows() -> None:
    """Peers of two ops and dtypes interleaved (the sums add in the rows' order), a row whose
    first dtype is null (float32), rows at the work range's edges and just outside, another
    op's rows; groups of one op, of two ops (their peers merged in the rows' order), of two
    dtypes, and with no peer."""
    aligned = [
        _row("aten::mm", ["bfloat16"], 1e9, 3, 700),
        _row("aten::addmm", ["float32"], 2e9, 1, 310),
        _row("aten::mm", [None, "bfloat16"], 8e9, 2, 1000),  # float32: its first is null
        _row("aten::mm", None, 1.25e8, 1, 90),  # float32, the range's low edge for 1e9
        _row("aten::addmm", ["bfloat16"], 1.2e8, 5, 33),  # below the range for 1e9
        _row("aten::mm", ["bfloat16"], 8e9, 7, 2900),  # the high edge for 1e9
        _row("aten::bmm", ["bfloat16"], 1e9, 1, 1),
        _row("aten::mm", ["float32"], 3e9, 1, 123),
        _row("aten::addmm", ["bfloat16"], 7.9e9, 2, 1500),
    ]
    groups = [
        [_row("aten::mm", ["bfloat16"], 1e9, 4, 40_000)],
        [_row("aten::mm", ["float32"], 1e9, 2, 9000), _row("aten::addmm", ["float32"], 1e9, 1, 9)],
        [_row("aten::mm", ["bfloat16"], 1e9, 1, 5000), _row("aten::addmm", ["float32"], 1e9, 2, 7)],
        [_row("aten::addmm", ["bfloat16"], 1e9, 3, 80_000)],
        [_row("aten::baddbmm", ["bfloat16"], 1e9, 3, 80_000)],  # no peer of its op
        [_row("aten::mm", ["float16"], 1e9, 3, 80_000)],  # no peer of its dtype
        [_row("aten::mm", ["bfloat16"], 0.0, 3, 80_000)],  # no work
        [_row("aten::mm", ["bfloat16"], 1e9, 3, 1)],  # faster than its peers
    ]
    assert _check(groups, aligned) == 4


def test_estimate_adds_the_peers_in_the_rows_order() -> None:
    """Work whose float sum depends on the order it is added in: the peers of two ops, rows of
    each interleaved, are added in the rows' order (either op's peers first gives another
    last digit)."""
    work = [2e9 / 3, 1.1e9, 1e9 / 3, 1e9 / 3]
    assert sum(work) != sum(work[0::2] + work[1::2]) and sum(work) != sum(work[1::2] + work[0::2])
    ops = ["aten::mm", "aten::addmm"] * 2
    aligned = [_row(op, ["bfloat16"], w, 1, 100) for op, w in zip(ops, work, strict=True)]
    # (a time near the peers' rate: the saving keeps the rate's last digit)
    group = [_row(op, ["bfloat16"], 1e9, 1, 200) for op in ops[:2]]
    assert _check([group], aligned) == 1


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p)[-40:])
def test_estimate_equals_the_scan_on_traces(path: Path) -> None:
    """On real traces, for every target: the rule's rows split as it splits them; each flagged
    row alone and the flagged rows of each op together (several dtypes, shapes) as groups."""
    if not path.exists():
        pytest.skip(f"trace not found: {path}")
    prof = opscope.load(path, cache=False)
    rows = Alignment._candidates(prof)
    for target in ("nvidia", "ascend", "cpu"):
        flagged, aligned = [], []
        for r in rows:
            shape = _matmul_shape(r)
            v = Alignment()._violations(target, r, shape)
            r["flops"] = Alignment._flops(r, shape)
            if v:
                flagged.append({**r, **v})
            elif r["flops"] and r["cost_ns"]:
                aligned.append(r)
        by_op: dict[str, list[dict[str, Any]]] = {}
        for r in flagged:
            by_op.setdefault(r["name"], []).append(r)
        _check([[r] for r in flagged] + list(by_op.values()) + [flagged], aligned)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p)[-40:])
def test_candidates_in_candidate_key_order(path: Path) -> None:
    """The candidates' order (read from the groups' keys) is :func:`candidate_key`'s."""
    if not path.exists():
        pytest.skip(f"trace not found: {path}")
    rows = Alignment._candidates(opscope.load(path, cache=False))
    assert rows == sorted(rows, key=candidate_key)
    assert len({(r["name"], r["input_dims"], r["input_types"]) for r in rows}) == len(rows)
    assert all(c.parse_dims(r["input_dims"]) == r["dims"] for r in rows)
