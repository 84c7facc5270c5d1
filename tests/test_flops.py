"""Our FLOP formulas against torch's own counters and hand computations."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from opscope.analysis.flops import ascend_kernel_cost, cost, op_costs

torch = pytest.importorskip("torch")


def _dumps(v: object) -> str | None:
    return None if v is None else json.dumps(v, separators=(",", ":"))


def _events_from_chrome(path: Path) -> tuple[pl.DataFrame, dict[int, int]]:
    """cpu_op rows as the events table would hold them, and torch's flops by External id."""
    data = json.loads(path.read_text())
    rows = []
    for i, e in enumerate(data["traceEvents"]):
        if e.get("cat") != "cpu_op":
            continue
        a = e.get("args", {})
        rows.append(
            {
                "id": i,
                "name": e["name"],
                "input_dims": _dumps(a.get("Input Dims")),
                "input_types": _dumps(a.get("Input type")),
                "concrete_inputs": _dumps(a.get("Concrete Inputs")),
            }
        )
    return pl.DataFrame(rows), {}


def test_flops_equal_torch_with_flops(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
    img = torch.randn(2, 3, 9, 9)
    x = torch.randn(4, 8, 16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as p:
        torch.mm(torch.randn(5, 6), torch.randn(6, 7))
        torch.addmm(torch.randn(5, 7), torch.randn(5, 6), torch.randn(6, 7))
        torch.bmm(torch.randn(2, 3, 4), torch.randn(2, 4, 5))
        torch.baddbmm(torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5))
        conv(img)
        torch.nn.functional.linear(x, torch.randn(32, 16), torch.randn(32))
        _ = x + x
        _ = x * x
    trace = tmp_path / "t.json"
    p.export_chrome_trace(str(trace))
    # torch's per-call counts, in call order per op name
    theirs: dict[str, list[int]] = {}
    for ev in p.events():
        if ev.flops:
            theirs.setdefault(ev.name, []).append(int(ev.flops))
    assert {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::conv2d"} <= set(theirs)

    events, _ = _events_from_chrome(trace)
    costs = events.join(op_costs(events), on="id").sort("id")
    checked = 0
    for name, counts in theirs.items():
        ours = costs.filter(pl.col("name") == name).get_column("flops").to_list()
        # ours costs every call of the op; torch counts the same calls
        assert sorted(ours) == sorted(counts), name
        checked += len(counts)
    assert checked >= 8


def test_conv_formula_against_nested_loops() -> None:
    # 1-d, 2-d and 3-d convolutions, strided, padded, dilated and grouped: count MACs by
    # walking every output element and every weight tap that lands inside the padded input.
    def macs(
        n: int, c: int, sp: list[int], co: int, k: list[int], s: int, p: int, d: int, g: int
    ) -> int:
        out = [(i + 2 * p - d * (kk - 1) - 1) // s + 1 for i, kk in zip(sp, k, strict=True)]
        total = 0
        for o_idx in range(math.prod(out)):
            _ = o_idx
            total += (c // g) * math.prod(k)  # every tap counts, padding included (dense conv)
        return n * co * total

    cases = [
        ("aten::conv1d", [2, 4, 17], [6, 4, 3], 2, 1, 1, 1),
        ("aten::conv2d", [1, 6, 11, 9], [8, 3, 3, 2], 1, 2, 2, 2),
        ("aten::conv3d", [1, 2, 5, 6, 7], [3, 2, 2, 3, 2], 2, 0, 1, 1),
    ]
    for name, xs, ws, s, p, d, g in cases:
        nd = len(xs) - 2
        concrete = ["", "", "", str([s] * nd), str([p] * nd), str([d] * nd), str(g)]
        c = cost(
            name,
            json.dumps([xs, ws, [], [], [], [], []]),
            json.dumps(["float"] * 2 + ["", "ScalarList", "ScalarList", "ScalarList", "Scalar"]),
            json.dumps(concrete),
        )
        expected = 2 * macs(xs[0], xs[1], xs[2:], ws[0], ws[2:], s, p, d, g)
        assert c.flops == expected, name
        # and torch's own output shape gives the same count
        fn = getattr(torch.nn.functional, name.split("::")[1])
        y = fn(torch.zeros(xs), torch.zeros(ws), stride=s, padding=p, dilation=d, groups=g)
        assert c.flops == 2 * y.numel() * (xs[1] // g) * math.prod(ws[2:])


def test_flop_counter_mode_for_sdpa_matmul_and_conv_backward() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    q = torch.randn(2, 3, 5, 8)
    k = torch.randn(2, 3, 7, 8)
    v = torch.randn(2, 3, 7, 4)
    with FlopCounterMode(display=False) as fc:
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    ours = cost(
        "aten::scaled_dot_product_attention",
        json.dumps([list(q.shape), list(k.shape), list(v.shape), [], [], []]),
        json.dumps(["float"] * 3 + ["", "Scalar", "Scalar"]),
        json.dumps(["", "", "", "", "0.", "False"]),
    )
    assert ours.flops == fc.get_total_flops()

    a = torch.randn(3, 1, 4, 5)
    b = torch.randn(6, 5, 2)
    with FlopCounterMode(display=False) as fc:
        torch.matmul(a, b)
    ours = cost("aten::matmul", json.dumps([[3, 1, 4, 5], [6, 5, 2]]), '["float","float"]', None)
    assert ours.flops == fc.get_total_flops()
    # torch's counter has no formula for dot: 5 multiplies + 5 adds by hand
    assert cost("aten::matmul", "[[5],[5]]", '["float","float"]', None).flops == 2 * 5
    # nor for matrix @ vector (mv): 2 batches x 4 rows x 5 MACs
    assert cost("aten::matmul", "[[2,4,5],[5]]", '["float","float"]', None).flops == 2 * 2 * 4 * 5
    for sa, sb in ([[5], [3, 5, 2]], [[7, 1, 3, 5], [2, 5, 4]]):
        with FlopCounterMode(display=False) as fc:
            torch.matmul(torch.randn(sa), torch.randn(sb))
        ours = cost("aten::matmul", json.dumps([sa, sb]), '["float","float"]', None)
        assert ours.flops == fc.get_total_flops(), (sa, sb)

    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    y = torch.nn.functional.conv2d(x, w, padding=1)
    g = torch.ones_like(y)
    with FlopCounterMode(display=False) as fc:
        y.backward(g)
    ours = cost(
        "aten::convolution_backward",
        json.dumps([list(g.shape), list(x.shape), list(w.shape), [], [], [], [], [], [], [], []]),
        json.dumps(["float"] * 3 + [""] * 8),
        json.dumps(
            [
                "",
                "",
                "",
                "[0]",
                "[1, 1]",
                "[1, 1]",
                "[1, 1]",
                "False",
                "[0, 0]",
                "1",
                "[True, True, False]",
            ]
        ),
    )
    assert ours.flops == fc.get_total_flops()


def test_bytes_and_dtypes() -> None:
    # bf16 mm [64,32] x [32,16]: reads both, writes [64,16], 2 bytes each
    c = cost("aten::mm", "[[64,32],[32,16]]", '["c10::BFloat16","c10::BFloat16"]', None)
    assert c.bytes == (64 * 32 + 32 * 16 + 64 * 16) * 2
    assert c.dtype == "bf16" and c.roof == "matrix"
    # broadcasting add, fp16: inputs [4,1,8] and [8] -> output [4,1,8]
    c = cost("aten::add", "[[4,1,8],[8],[]]", '["c10::Half","c10::Half","Scalar"]', None)
    assert c.flops == 32 and c.bytes == (32 + 8 + 32) * 2
    # copy_ fp32 <- fp16: read 2 bytes, write 4 bytes per element, no FLOPs
    c = cost("aten::copy_", "[[10,10],[10,10],[]]", '["float","c10::Half","Scalar"]', None)
    assert c.flops == 0 and c.bytes == 100 * 4 + 100 * 2
    # embedding: 30 ids of 8 bytes, 30 rows of 16 fp32 read and written
    c = cost("aten::embedding", "[[1000,16],[3,10]]", '["float","long int"]', None)
    assert c.bytes == 30 * 8 + 2 * 30 * 16 * 4
    # Ascend dtype names
    c = cost("aten::mul", "[[8,8],[8,8]]", '["FLOAT16","FLOAT16"]', None)
    assert c.bytes == 3 * 64 * 2 and c.dtype == "fp16"
    assert cost("aten::frobnicate", "[[2,2]]", '["float"]', None).flops is None


def test_op_costs_groups_and_backward_from_forward() -> None:
    ev = pl.DataFrame(
        {
            "id": [0, 1, 2, 3],
            "name": ["aten::mm", "aten::mm", "MmBackward0", "aten::view"],
            "input_dims": ["[[4,5],[5,6]]", "[[4,5],[5,6]]", "[[4,6]]", "[[4,6],[]]"],
            "input_types": ['["float","float"]'] * 2 + ['["float"]', '["float","Scalar"]'],
            "concrete_inputs": [None] * 4,
            "fwd_id": [None, None, 1, None],
        },
        schema_overrides={"fwd_id": pl.Int64},
    )
    out = op_costs(ev).sort("id")
    assert out.columns[:4] == ["id", "flops", "bytes", "formula"]
    assert out.get_column("flops").to_list() == [240, 240, 480, None]
    assert out.get_column("formula")[3] == "unknown"


def test_ascend_kernel_matmul_and_conv() -> None:
    # kernel_details.csv style: transposed A (shapes carry no flags), output given
    c = ascend_kernel_cost("MatMulV2", '"8192,4096;8192,512"', "DT_BF16;DT_BF16", '"4096,512"')
    assert c.flops == 2 * 4096 * 512 * 8192 and c.dtype == "bf16"
    c = ascend_kernel_cost("BatchMatMulV2", "[[3,4,5],[3,5,6]]", '["FLOAT","FLOAT"]', None)
    assert c.flops == 2 * 3 * 4 * 6 * 5
    c = ascend_kernel_cost("Conv2D", '"32,3,224,224;64,3,11,11"', "FLOAT;FLOAT", '"32,64,55,55"')
    assert c.flops == 2 * 32 * 64 * 55 * 55 * 3 * 11 * 11


def test_transposed_conv_against_flop_counter_and_output_shape() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(2, 6, 5, 7)
    w = torch.randn(6, 4, 3, 3)
    with FlopCounterMode(display=False) as fc:
        y = torch.nn.functional.conv_transpose2d(
            x, w, stride=2, padding=1, output_padding=1, groups=2
        )
    c = cost(
        "aten::conv_transpose2d",
        json.dumps([list(x.shape), list(w.shape), [], [], [], [], [], []]),
        json.dumps(["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar",
                    "ScalarList"]),
        json.dumps(["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "2", "[1, 1]"]),
    )  # fmt: skip
    assert c.flops == fc.get_total_flops()
    assert c.bytes == (x.numel() + w.numel() + y.numel()) * 4


def test_attention_layouts_and_ascend_fusion_attention() -> None:
    # flash forward takes [B, L, H, D]: same count as SDPA's [B, H, L, D] for the same problem
    b, h, lq, lk, d = 1, 8, 141, 141, 64
    want = 2 * b * h * lq * lk * d * 2
    flash = cost(
        "aten::_flash_attention_forward",
        json.dumps([[b, lq, h, d], [b, lk, h, d], [b, lk, h, d]]),
        '["c10::BFloat16","c10::BFloat16","c10::BFloat16"]',
        None,
    )
    sdpa = cost(
        "aten::_scaled_dot_product_flash_attention",
        json.dumps([[b, h, lq, d], [b, h, lk, d], [b, h, lk, d], [], []]),
        '["c10::BFloat16","c10::BFloat16","c10::BFloat16","Scalar","Scalar"]',
        '["","","","0.","False"]',
    )
    assert flash.flops == sdpa.flops == want
    causal = cost(
        "aten::scaled_dot_product_attention",
        json.dumps([[b, h, lq, d], [b, h, lk, d], [b, h, lk, d], [], [], []]),
        '["float","float","float","","Scalar","Scalar"]',
        '["","","","","0.","True"]',
    )
    assert causal.flops == want // 2
    # npu_fusion_attention(q, k, v, head_num, input_layout): BSH with H = heads * D
    bsh = cost(
        "npu::npu_fusion_attention",
        json.dumps([[2, 128, 512], [2, 256, 512], [2, 256, 512], [], []]),
        '["c10::Half","c10::Half","c10::Half","Scalar","Scalar"]',
        '["","","","8","BSH"]',
    )
    assert bsh.flops == 2 * 2 * 8 * 128 * 256 * 64 * 2
    bnsd = cost(
        "npu::npu_fusion_attention",
        json.dumps([[2, 8, 128, 64], [2, 8, 256, 64], [2, 8, 256, 64], [], []]),
        '["c10::Half","c10::Half","c10::Half","Scalar","Scalar"]',
        '["","","","8","BNSD"]',
    )
    assert bnsd.flops == bsh.flops


def test_memory_bound_families_by_hand() -> None:
    n = 4 * 128 * 1024
    sm = cost("aten::_softmax", "[[4,128,1024],[],[]]", '["float","Scalar","Scalar"]', None)
    assert (sm.flops, sm.bytes) == (5 * n, 2 * n * 4)
    ln = cost(
        "aten::native_layer_norm",
        "[[4,128,1024],[],[1024],[1024],[]]",
        '["c10::BFloat16","ScalarList","c10::BFloat16","c10::BFloat16","Scalar"]',
        None,
    )
    assert (ln.flops, ln.bytes) == (7 * n, (2 * n + 2 * 1024) * 2)
    # sum over dim 1 of [4,128,1024]: reads everything, writes [4,1024]
    s = cost("aten::sum", "[[4,128,1024],[],[],[]]", '["float","ScalarList","Scalar",""]',
             '["","[1]","False",""]')  # fmt: skip
    assert (s.flops, s.bytes) == (n, (n + 4 * 1024) * 4)
    # eval-mode dropout does no work
    assert cost("aten::dropout", "[[8,8],[],[]]", '["float","Scalar","Scalar"]',
                '["","0.1","False"]').flops is None  # fmt: skip


def test_pass_through_backward_nodes_are_not_costed() -> None:
    ev = pl.DataFrame(
        {
            "id": [0, 1, 2, 3],
            "name": ["aten::add", "AddBackward0", "aten::gelu", "GeluBackward0"],
            "input_dims": ["[[4,4],[4,4],[]]", "[[4,4]]", "[[4,4],[]]", "[[4,4]]"],
            "input_types": ['["float","float","Scalar"]', '["float"]', '["float",""]',
                            '["float"]'],
            "fwd_id": [None, 0, None, 2],
        },
        schema_overrides={"fwd_id": pl.Int64},
    )  # fmt: skip
    out = op_costs(ev).sort("id")
    assert out.get_column("flops").to_list() == [16, None, 8 * 16, 2 * 8 * 16]


def test_cost_table_reads_the_key_columns_without_a_select(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """_cost_table on a frame of exactly the key columns (op_costs' keys) reads them as they are
    (a spy counts DataFrame.select) and gives what selecting them from a wider, reordered frame
    gives."""
    from polars.testing import assert_frame_equal

    from opscope.analysis.flops import _KEY, _cost_table, cost

    keys = pl.DataFrame(
        {
            "name": ["aten::mm", "aten::add", "aten::view"],
            "input_dims": ["[[4,8],[8,16]]", "[[4,16],[4,16]]", "[[4,16],[]]"],
            "input_types": ['["float","float"]', '["c10::BFloat16","c10::BFloat16"]', None],
            "concrete_inputs": [None, '["",""]', None],
        }
    )
    wide = keys.select(pl.lit(1).alias("x"), *reversed(_KEY))
    full = _cost_table(wide, cost, _KEY).select(*_KEY, "flops", "bytes", "formula", "dtype", "roof")
    selects: list[int] = []
    real = pl.DataFrame.select

    def spy(self: pl.DataFrame, *a: object, **k: object) -> pl.DataFrame:
        selects.append(self.width)
        return real(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(pl.DataFrame, "select", spy)
    fast = _cost_table(keys, cost, _KEY)
    assert selects == []  # the shortcut was taken
    monkeypatch.undo()
    assert_frame_equal(fast, full)
    assert fast.get_column("flops").to_list() == [2 * 4 * 16 * 8, 64, None]


def _fold(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Broadcasting by the per-dim fold alone (the full path of flops._broadcast)."""
    from functools import reduce

    def two(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        n = max(len(a), len(b))
        a2, b2 = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
        return tuple(max(x, y) if min(x, y) != 0 else 0 for x, y in zip(a2, b2, strict=True))

    return reduce(two, shapes, ())


@pytest.mark.parametrize(
    "shapes",
    [
        [],
        [()],
        [(4, 16)],
        [(4, 16), (4, 16), (4, 16)],
        [(0, 16), (0, 16)],
        [(4, 1), (1, 16)],
        [(16,), (4, 16)],
        [(-1, 3), (-1, 3)],  # a negative dim: the fold's answer (1), not the shape's
        [(4, 16), (4, 0)],
        [(1953,), (), (1953,)],  # scalars beside one shape
        [(), (2048,), ()],
        [(), ()],
        [(-1, 3), (), (-1, 3)],  # a negative dim beside a scalar: the fold's answer
        [(), (0, 4)],
        [(4, 1), (), (1, 16)],
    ],
)
def test_broadcast_equals_the_fold(shapes: list[tuple[int, ...]]) -> None:
    from opscope.analysis.flops import _broadcast

    assert _broadcast(shapes) == _fold(shapes)


def test_is_shape_is_a_list_of_ints_not_bools() -> None:
    from opscope.analysis.flops import _is_shape

    assert _is_shape([]) and _is_shape([4, 16]) and _is_shape([2**70])
    assert not _is_shape([4, True]) and not _is_shape([False])
    assert not _is_shape([4, 1.0]) and not _is_shape([4, None]) and not _is_shape((4, 16))
    assert not _is_shape("[4]") and not _is_shape(None)


def test_broadcast_of_one_shape_skips_the_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    from opscope.analysis import flops

    folds: list[int] = []
    real = flops.reduce

    def spy(*a: Any) -> Any:
        folds.append(1)
        return real(*a)

    monkeypatch.setattr(flops, "reduce", spy)
    assert flops._broadcast([(4, 16), (4, 16)]) == (4, 16)
    assert flops._broadcast([(0, 16), (0, 16)]) == (0, 16)
    assert flops._broadcast([(1953,), (), (1953,)]) == (1953,)  # scalars beside one shape
    assert flops._broadcast([(), ()]) == () and flops._broadcast([]) == ()
    assert folds == []  # the shortcut was taken
    assert flops._broadcast([(4, 1), (1, 16)]) == (4, 16)
    assert folds == [1]


def test_op_costs_rows_equal_a_row_by_row_reference() -> None:
    """Every row's cost as a plain loop computes it: its key's formula (UNKNOWN for a name
    without one), then for an autograd node whose fwd_id is a row that is real forward work
    (a name, not passed through, some cost), twice that row's cost. Rows out of id order,
    repeated keys, a node of a node, links to a missing id, to a pass-through op and to a
    row of unknown cost, a null link, and nodes of three forward keys."""
    from opscope.analysis.flops import (
        _PASSTHROUGH_BACKWARD,
        BACKWARD_FACTOR,
        UNKNOWN,
        cost,
        has_formula,
        is_autograd_node,
    )

    mm, mm_t = "[[4,5],[5,6]]", '["float","float"]'
    rows = [  # id, name, dims, types, fwd_id
        (9, "aten::mm", mm, mm_t, None),
        (3, "MmBackward0", "[[4,6]]", '["float"]', 9),
        (5, "aten::add", mm, mm_t, None),
        (4, "AddBackward0", "[[4,6]]", '["float"]', 5),
        (7, "MmBackward0", "[[4,6]]", '["float"]', 3),  # a node's node: its pre-backward cost
        (2, "MmBackward0", "[[4,6]]", '["float"]', 99),  # no such id
        (8, "aten::view", "[[4,6],[]]", '["float","Scalar"]', None),
        (1, "ViewBackward0", "[[4,6]]", '["float"]', 8),  # forward of unknown cost
        (6, "MmBackward0", "[[4,6]]", '["float"]', None),
        (10, "aten::mm", mm, mm_t, None),
        # nodes of two other forward keys, the later key's first: each node's row of the
        # derived costs is its own forward key's
        (12, "MulBackward0", "[[4,5]]", '["float"]', 11),
        (14, "BmmBackward0", "[[2,4,6]]", '["float"]', 13),
        (11, "aten::mul", "[[4,5],[4,5]]", '["float","float"]', None),
        (13, "aten::bmm", "[[2,4,5],[2,5,6]]", '["c10::BFloat16","c10::BFloat16"]', None),
        (15, "MulBackward0", "[[4,5]]", '["float"]', 11),
    ]
    ev = pl.DataFrame(
        {
            "id": [r[0] for r in rows],
            "name": [r[1] for r in rows],
            "input_dims": [r[2] for r in rows],
            "input_types": [r[3] for r in rows],
            "concrete_inputs": [None] * len(rows),
            "fwd_id": [r[4] for r in rows],
        },
        schema_overrides={"fwd_id": pl.Int64, "name": pl.String},
    )

    def own(r: tuple[Any, ...]) -> Any:
        if not has_formula(r[1]):
            return UNKNOWN
        return cost(r[1], r[2], r[3], None)

    by_id = {r[0]: r for r in rows}
    want = []
    for r in rows:
        c = own(r)
        f = by_id.get(r[4]) if r[4] is not None else None
        if r[1] is not None and is_autograd_node(r[1]) and f is not None and f[1] is not None:
            fc = own(f)
            base = f[1].split("::")[-1].split(".")[0]
            if base not in _PASSTHROUGH_BACKWARD and (fc.flops is not None or fc.bytes is not None):
                c = type(fc)(
                    None if fc.flops is None else fc.flops * BACKWARD_FACTOR,
                    None if fc.bytes is None else fc.bytes * BACKWARD_FACTOR,
                    f"backward: {BACKWARD_FACTOR} x forward ({fc.formula})",
                    fc.dtype,
                    fc.roof,
                )
        want.append((r[0], c.flops, c.bytes, c.formula, c.dtype, c.roof))
    got = op_costs(ev)
    assert got.rows() == want
    assert got.schema["flops"] == pl.Int64 and got.schema["formula"] == pl.String


def _key_events(rows: list[tuple[Any, ...]], *, fwd_id: bool = False) -> pl.DataFrame:
    """Events of ids 0.. from (name, input_dims, input_types, concrete_inputs) rows (strings,
    null where None), with a null ``fwd_id`` column when asked."""
    cols: dict[str, list[Any]] = {
        "id": list(range(len(rows))),
        "name": [r[0] for r in rows],
        "input_dims": [r[1] for r in rows],
        "input_types": [r[2] for r in rows],
        "concrete_inputs": [r[3] for r in rows],
    }
    types: dict[str, Any] = {"name": pl.String, "concrete_inputs": pl.String}
    if fwd_id:
        cols["fwd_id"] = [None] * len(rows)
        types["fwd_id"] = pl.Int64
    return pl.DataFrame(cols, schema_overrides=types)


def test_op_costs_decodes_each_input_type_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys that share their "Input type" string read its dtypes once (a spy on _infos), and
    every row's cost is still :func:`cost` of its own four strings."""
    from opscope.analysis import flops
    from opscope.analysis.flops import cost

    f2, bf = '["float","float"]', '["c10::BFloat16","c10::BFloat16"]'
    rows = [  # name, dims, types, concrete
        ("aten::mm", "[[4,5],[5,6]]", f2, None),
        ("aten::mm", "[[8,5],[5,6]]", f2, None),
        ("aten::add", "[[4,5],[4,5]]", f2, '["","","1"]'),
        ("aten::bmm", "[[2,4,5],[2,5,6]]", bf, None),
        ("aten::mul", "[[3],[3]]", bf, None),
        ("aten::mm", "[[4,5],[5,6]]", f2, None),  # a repeated key
        ("aten::sum", "[[4,5],[]]", '["float","ScalarList"]', '["","[1]"]'),
    ]
    ev = _key_events(rows)
    seen: list[Any] = []
    real = flops._infos

    def spy(types: Any) -> Any:
        seen.append(types)
        return real(types)

    monkeypatch.setattr(flops, "_infos", spy)
    got = op_costs(ev)
    assert len(seen) == 3  # three distinct type strings
    monkeypatch.setattr(flops, "_infos", real)
    want = [cost(*r) for r in rows]
    assert got.select("flops", "bytes", "formula", "dtype", "roof").rows() == [
        tuple(c) for c in want
    ]


def test_rule_once_per_name_matches_has_formula_and_reads_concrete_only_where_needed() -> None:
    """The formula chosen once per name (flops._rule) exists exactly for the names
    has_formula accepts; the concrete inputs are decoded only by the formulas reading them
    (a matmul costs the same whatever that text holds, eval-mode dropout reads it)."""
    from opscope.analysis import flops

    names = [
        *(f"aten::{b}" for b in sorted(flops._FORMULA_NAMES)),
        *(f"aten::{b}.Tensor" for b in sorted(flops._ELEMENTWISE)),
        *(f"aten::{b}_" for b in sorted(flops._ELEMENTWISE)),
        "aten::view", "aten::as_strided", "MmBackward0", "npu::npu_rms_norm", "x", "",
    ]  # fmt: skip
    for n in names:
        assert (flops._rule(n) is not None) == flops.has_formula(n), n
    dims, types = "[[4,8],[8,2]]", '["float","float"]'
    mm = flops.cost("aten::mm", dims, types, None)
    assert mm.flops == 2 * 4 * 2 * 8
    for text in ("", "[", '["", ""]', "not json"):
        assert flops.cost("aten::mm", dims, types, text) == mm
    drop = ("aten::dropout", "[[4,8],[],[]]", '["float","Scalar","Scalar"]')
    assert flops.cost(*drop, '["", "0.1", "False"]') == flops.UNKNOWN
    assert flops.cost(*drop, '["", "0.1", "True"]').formula == "elementwise: 2 x numel"


def test_op_costs_two_queries_and_null_keys_grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    """op_costs runs two queries (the distinct names; each costed row's key by a window), and
    rows whose key strings are null where another's are, or equal, share that key's cost:
    every row's cost is cost() of its own strings."""
    from helpers.spies import count_queries
    from opscope.analysis.flops import cost

    mm, mm_t = "[[4,5],[5,6]]", '["float","float"]'
    rows = [
        ("aten::mm", mm, mm_t, None),
        ("aten::mm", None, mm_t, None),
        ("aten::add", mm, None, None),
        ("aten::mm", mm, mm_t, '["", ""]'),
        ("aten::add", mm, None, None),
        ("aten::mm", None, mm_t, None),
        ("aten::mm", mm, mm_t, None),
        (None, mm, mm_t, None),
        ("aten::view", mm, mm_t, None),
    ]
    ev = _key_events(rows, fwd_id=True)
    ran = count_queries(monkeypatch)
    got = op_costs(ev)
    assert len(ran) == 2
    for r, g in zip(rows, got.iter_rows(), strict=True):
        c = cost(r[0], r[1], r[2], r[3]) if r[0] is not None else None
        if c is None or r[0] == "aten::view":
            assert g[1:] == (None, None, "unknown", None, None)
        else:
            assert g[1:] == (c.flops, c.bytes, c.formula, c.dtype, c.roof)
