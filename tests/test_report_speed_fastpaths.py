"""Report-speed fast paths against the slow code they skip (issue 19 item 8).

- ``flops.op_costs`` calls the cost formulas only for names :func:`flops.has_formula` accepts;
  every other name must be UNKNOWN for any arguments, so the result equals one ``cost()`` per
  row computed in plain Python;
- ``jsonsafe.finite``'s exact-type fast path equals the general rules on every kind of value.
"""

from __future__ import annotations

import json
import math
import random
from collections import OrderedDict
from enum import StrEnum
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from opscope.analysis import flops
from opscope.analysis.flops import UNKNOWN, cost, has_formula, op_costs
from opscope.jsonsafe import finite

# Names with and without formulas, overloads and namespaces included; arguments that some
# formulas accept (2-D float matmuls, conv shapes, broadcasts) and that none accept.
NAMES = [
    "aten::mm",
    "aten::addmm",
    "aten::linear",
    "aten::bmm",
    "aten::add.Tensor",
    "aten::add_",
    "aten::mul",
    "aten::relu_",
    "aten::eq",
    "aten::convolution",
    "aten::_convolution",
    "aten::softmax",
    "aten::layer_norm",
    "aten::native_layer_norm",
    "aten::sum",
    "aten::copy_",
    "aten::embedding",
    "aten::dropout",
    "aten::as_strided",
    "aten::select",
    "aten::view",
    "aten::empty",
    "aten::to",
    "aten::detach",
    "npu::npu_linear",
    "aten::_scaled_dot_product_flash_attention",
    "MmBackward0",
    "AccumulateGrad",
    "ProfilerStep#3",
    "my_custom::op",
]
DIMS = [
    "[[64,128],[128,32]]",
    "[[32],[64,128],[128,32],[],[]]",
    "[[8,16,32],[8,32,4]]",
    "[[64,128],[1,128]]",
    "[[8,3,32,32],[16,3,3,3],[16],[],[],[],[],[],[]]",
    "[[4,8,128,64],[4,8,128,64],[4,8,128,64]]",
    "[[]]",
    "[]",
    None,
    "not json",
]
TYPES = [
    '["float","float"]',
    '["c10::BFloat16","c10::BFloat16","c10::BFloat16","Scalar","Scalar"]',
    '["c10::Half","c10::Half","c10::Half"]',
    '["float","float","float","","","","","",""]',
    '["Scalar"]',
    None,
]
CONCRETE = [None, '["","","False"]', '["","","True"]', '["","[1, 1]","[0, 0]"]']


def test_names_without_formula_are_unknown_for_every_argument() -> None:
    no_formula = [n for n in NAMES if not has_formula(n)]
    assert {"aten::as_strided", "aten::select", "aten::view", "my_custom::op"} <= set(no_formula)
    assert {"aten::mm", "aten::add.Tensor", "aten::relu_", "aten::copy_"}.isdisjoint(no_formula)
    for n in no_formula:
        for d in DIMS:
            for t in TYPES:
                for c in CONCRETE:
                    assert cost(n, d, t, c) == UNKNOWN, (n, d, t, c)


def test_every_formula_name_has_formula() -> None:
    # each branch of cost() reaches a formula for a name in _FORMULA_NAMES or _ELEMENTWISE
    for b in [*flops._FORMULA_NAMES, *flops._ELEMENTWISE]:
        assert has_formula(f"aten::{b}") and has_formula(f"aten::{b}.out")
    for b in flops._ELEMENTWISE:
        assert has_formula(f"aten::{b}_")  # in-place spelling of an elementwise op


def _events(seed: int, n: int) -> pl.DataFrame:
    rng = random.Random(seed)
    return pl.DataFrame(
        {
            "id": list(range(n)),
            "name": [rng.choice(NAMES) for _ in range(n)],
            "input_dims": [rng.choice(DIMS) for _ in range(n)],
            "input_types": [rng.choice(TYPES) for _ in range(n)],
            "concrete_inputs": [rng.choice(CONCRETE) for _ in range(n)],
            "fwd_id": [None] * n,
        },
        schema={
            "id": pl.Int64,
            "name": pl.String,
            "input_dims": pl.String,
            "input_types": pl.String,
            "concrete_inputs": pl.String,
            "fwd_id": pl.Int64,
        },
    )


def test_op_costs_equal_one_cost_call_per_row() -> None:
    for seed in range(4):
        ev = _events(seed, 600)
        got = {r["id"]: r for r in op_costs(ev).iter_rows(named=True)}
        assert len(got) == ev.height
        costed = 0
        for r in ev.iter_rows(named=True):
            if flops.is_autograd_node(r["name"]):
                continue  # costed from the forward op (no fwd_id here: its own formula)
            c = cost(r["name"], r["input_dims"], r["input_types"], r["concrete_inputs"])
            g = got[r["id"]]
            assert (g["flops"], g["bytes"], g["formula"], g["dtype"], g["roof"]) == (
                c.flops,
                c.bytes,
                c.formula,
                c.dtype,
                c.roof,
            ), r
            costed += c.flops is not None
        assert costed > 0  # the planted rows do reach formulas


def test_op_costs_mm_by_hand() -> None:
    ev = _events(0, 1).with_columns(
        pl.lit("aten::mm").alias("name"),
        pl.lit("[[64,128],[128,32]]").alias("input_dims"),
        pl.lit('["float","float"]').alias("input_types"),
    )
    ev = pl.concat(
        [ev, ev.with_columns(pl.lit(1, pl.Int64).alias("id"), pl.lit("aten::view").alias("name"))]
    )
    out = op_costs(ev).sort("id")
    assert out.get_column("flops").to_list() == [2 * 64 * 32 * 128, None]
    # read A and B, write C, fp32
    assert out.get_column("bytes").to_list() == [4 * (64 * 128 + 128 * 32 + 64 * 32), None]
    assert out.get_column("formula").to_list()[1] == "unknown"


class _Colour(StrEnum):
    RED = "red"


def _slow_finite(obj: object) -> object:
    """The general rules alone (jsonsafe.finite before its fast path)."""
    from collections.abc import Mapping

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _slow_finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_slow_finite(v) for v in obj]
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    return str(obj)


def test_finite_fast_path_equals_general_rules() -> None:
    values: list[object] = [
        1,
        True,
        False,
        None,
        "s",
        _Colour.RED,
        1.5,
        math.nan,
        math.inf,
        -math.inf,
        np.float64(2.5),
        np.float64(math.nan),
        np.int64(3),
        (1, 2.0, math.nan),
        [1, [math.inf, {"a": math.nan}]],
        {1: 2.0, "b": (math.inf,), _Colour.RED: [None]},
        OrderedDict(x=math.nan),
        {(1, 2): "tuple key"},
        object,
    ]
    for v in values:
        got, want = finite(v), _slow_finite(v)
        assert got == want or (got != got and want != want), v  # noqa: PLR0124
        assert type(got) is type(want), v
        json.dumps(got)  # encodable
    deep = {"rows": [{"x": float(i), "y": [math.nan, i, str(i)]} for i in range(50)]}
    assert finite(deep) == _slow_finite(deep)


SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
RESNET = SHARED / "gpu" / "kineto_resnet50_v100_train_2021.pt.trace.json.gz"


@pytest.mark.skipif(not RESNET.exists(), reason="shared traces absent")
def test_op_costs_on_a_real_trace_equal_cost_per_row() -> None:
    import opscope

    ev = opscope.load(RESNET, cache=False).events.filter(pl.col("kind") == "cpu_op")
    got = op_costs(ev)
    assert got.get_column("id").to_list() == ev.get_column("id").to_list()
    memo: dict[tuple[str | None, ...], flops.Cost] = {}
    formulas = 0
    for r, g in zip(ev.iter_rows(named=True), got.iter_rows(named=True), strict=True):
        if flops.is_autograd_node(r["name"]):
            continue  # costed from the forward op
        key = (r["name"], r["input_dims"], r["input_types"], r["concrete_inputs"])
        c = memo.get(key) or memo.setdefault(key, cost(*key))  # type: ignore[arg-type]
        assert (g["flops"], g["bytes"], g["formula"], g["dtype"], g["roof"]) == (
            c.flops,
            c.bytes,
            c.formula,
            c.dtype,
            c.roof,
        ), key
        formulas += c.formula != "unknown"
    assert formulas > 1000


SAMPLED = SHARED / "gpu" / "tracelens_h100_bert_small.json.gz"


@pytest.mark.skipif(not SAMPLED.exists(), reason="shared traces absent")
def test_locate_and_grouping_equal_row_by_row_reference() -> None:
    import opscope
    from opscope.advise import _common as c

    profile = opscope.load(SAMPLED, cache=False)
    table = c._locations(profile)
    ref = {
        r["id"]: c.Location(r["file"], r["line"], r["function"], r["module"])
        for r in table.iter_rows(named=True)
    }
    ids = profile.events.get_column("id").to_list()
    rng = random.Random(7)
    pick = rng.sample(ids, 1000) + ids[:5] + ids[:5]  # repeats, and ids in no particular order
    got = c.locate(profile, pick)
    assert got == {i: ref[i] for i in pick}
    assert sum(loc.file is not None for loc in got.values()) > 50  # placed events among them
    ops = profile.ops.select("id")
    groups = c.group_by_location(profile, ops)
    want: dict[tuple[str | None, int | None, str | None], list[int]] = {}
    for i in ops.get_column("id").to_list():
        want.setdefault((ref[i].file, ref[i].line, ref[i].module), []).append(i)
    assert list(groups.items()) == list(want.items())  # same groups, same order
    assert len(groups) > 1
