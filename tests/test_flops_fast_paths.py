"""The per-key costing's fast paths give what the plain steps give: the typed decode of the
shapes (with the tensors shared within a call), and the matmul and elementwise formulas against
their earlier, step-by-step spelling (kept here as the reference)."""

from __future__ import annotations

import math
import random
from functools import reduce
from typing import Any

import polars as pl
import pytest

from opscope.analysis import flops
from opscope.analysis.flops import UNKNOWN, Cost, _Tensor

_TYPES = ["float", "c10::BFloat16", "c10::Half", "long", "int", "bool", "Scalar", "", "TensorList"]


def _dims_text(rng: random.Random) -> str:
    """An "Input Dims" text: mostly shapes, sometimes an argument that is not one."""
    args = []
    for _ in range(rng.randint(0, 6)):
        r = rng.random()
        if r < 0.7:
            args.append(
                "["
                + ",".join(
                    str(rng.choice([0, 1, 3, 64, 2048, 2**70])) for _ in range(rng.randint(0, 4))
                )
                + "]"
            )
        elif r < 0.8:
            args.append(
                rng.choice(
                    ["[true]", "[1.0]", "[[1,2],[3]]", "[1,[2]]", '"x"', "null", "7", "[-1,4]"]
                )
            )
        else:
            args.append("[]")
    return "[" + ",".join(args) + "]"


def test_typed_shapes_give_the_decoded_tensors() -> None:
    rng = random.Random(11)
    memo: flops._TensorMemo = {}
    for _ in range(3000):
        dims = _dims_text(rng) if rng.random() < 0.97 else rng.choice(["", "not json", "{}", "5"])
        types = [rng.choice(_TYPES) for _ in range(rng.randint(0, 7))]
        infos = flops._infos(types)
        want = flops._tensors_of(flops._decode(dims), infos)
        assert flops._arg_tensors(dims, infos, memo) == want
        assert flops._arg_tensors(dims, infos, {}) == want
    assert flops._arg_tensors(None, [], {}) == []


# the formulas as they were spelt before (a list of operands summed and searched by helpers,
# a Cost renamed): the reference for the one-pass versions


def _ref_first_float(ts: list[_Tensor]) -> _Tensor | None:
    for t in ts:
        if t is not None and t.dtype in ("fp64", "fp32", "fp16", "bf16", "fp8"):
            return t
    return next((t for t in ts if t is not None), None)


def _ref_broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    def two(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        n = max(len(a), len(b))
        a2 = (1,) * (n - len(a)) + a
        b2 = (1,) * (n - len(b)) + b
        return tuple(max(x, y) if min(x, y) != 0 else 0 for x, y in zip(a2, b2, strict=True))

    return reduce(two, shapes, ())


def _ref_mm(m: int, n: int, k: int, batch: int, ins: list[_Tensor], out_size: int) -> Cost:
    dtype = _ref_first_float(ins)
    nbytes = sum(t.nbytes for t in ins) + batch * m * n * out_size
    return Cost(2 * batch * m * n * k, nbytes, "", dtype.dtype if dtype else None, "matrix")


def _ref_named(c: Cost, formula: str) -> Cost:
    return Cost(c.flops, c.bytes, formula, c.dtype, c.roof)


def _ref_matmul(ts: list[_Tensor | None], name: str) -> Cost:
    tens = [t for t in ts if t is not None]
    if name in ("mm", "bmm", "matmul", "linear", "npu_linear", "_addmm_activation"):
        if name == "_addmm_activation":
            if len(tens) < 3:
                return UNKNOWN
            a, b = tens[1], tens[2]
        else:
            if len(tens) < 2:
                return UNKNOWN
            a, b = tens[0], tens[1]
        extra = tens[2:3] if name in ("linear", "npu_linear", "_addmm_activation") else []
    else:
        if len(tens) < 3:
            return UNKNOWN
        a, b = tens[1], tens[2]
        extra = tens[0:1]
    ins = [a, b, *extra]
    out_size = a.size
    if name in ("linear", "npu_linear"):
        if not a.shape or len(b.shape) != 2 or a.shape[-1] != b.shape[1]:
            return UNKNOWN
        k = a.shape[-1]
        c = _ref_mm(a.numel // max(k, 1) if k else 0, b.shape[0], k, 1, ins, out_size)
        return _ref_named(c, "linear: 2*M*N*K")
    sa, sb = a.shape, b.shape
    if len(sa) == 0 or len(sb) == 0:
        return UNKNOWN
    if len(sa) == 1 and len(sb) == 1:
        if sa[0] != sb[0]:
            return UNKNOWN
        return _ref_named(_ref_mm(1, 1, sa[0], 1, ins, out_size), "dot: 2*K")
    sa2 = (1, sa[0]) if len(sa) == 1 else sa
    sb2 = (sb[0], 1) if len(sb) == 1 else sb
    m, k = sa2[-2], sa2[-1]
    k2, n = sb2[-2], sb2[-1]
    if k != k2:
        return UNKNOWN
    batch = math.prod(_ref_broadcast([sa2[:-2], sb2[:-2]]))
    if name == "addbmm":
        c = _ref_mm(m, n, k, batch, ins, out_size)
        c = Cost(c.flops, sum(t.nbytes for t in ins) + m * n * out_size, "", c.dtype, c.roof)
        return _ref_named(c, "addbmm: 2*B*M*N*K")
    label = "2*M*N*K" if batch == 1 else "2*B*M*N*K"
    return _ref_named(_ref_mm(m, n, k, batch, ins, out_size), f"{name}: {label}")


def _ref_elementwise(ts: list[_Tensor | None], name: str) -> Cost:
    tens = [t for t in ts if t is not None]
    if not tens:
        return UNKNOWN
    out_numel = math.prod(_ref_broadcast([t.shape for t in tens]))
    per = flops._ELEMENTWISE[name.rstrip("_")]
    ref = _ref_first_float(tens) or tens[0]
    out_size = 1 if name.rstrip("_") in flops._COMPARISONS else ref.size
    reads = sum(t.nbytes for t in tens)
    if name.rstrip("_") in ("fill", "zero", "zeros_like", "ones_like", "full_like"):
        reads = 0
    return Cost(
        per * out_numel,
        reads + out_numel * out_size,
        f"elementwise: {per} x numel",
        ref.dtype,
        "vector",
    )


def _random_tensors(rng: random.Random, matmul: bool) -> list[_Tensor | None]:
    dims = [1, 2, 3, 8, 64] if matmul else [1, 2, 8]
    out: list[_Tensor | None] = []
    for _ in range(rng.randint(0, 5)):
        if rng.random() < 0.2:
            out.append(None)
            continue
        rank = rng.choice([0, 1, 2, 2, 3, 4])
        shape = tuple(rng.choice(dims) for _ in range(rank))
        size, dtype = rng.choice([(4, "fp32"), (2, "bf16"), (8, "int64"), (1, "bool"), (2, "fp16")])
        out.append(flops._tensor(shape, size, dtype))
    return out


@pytest.mark.parametrize(
    "name",
    [
        "mm",
        "bmm",
        "matmul",
        "linear",
        "npu_linear",
        "_addmm_activation",
        "addmm",
        "baddbmm",
        "addbmm",
    ],
)
def test_matmul_is_the_step_by_step_formula(name: str) -> None:
    rng = random.Random(name)
    known = 0
    for _ in range(4000):
        ts = _random_tensors(rng, matmul=True)
        got, want = flops._matmul(ts, name), _ref_matmul(ts, name)
        assert got == want and type(got) is Cost
        known += got is not UNKNOWN
    assert known > 100  # (the cases reach the formulas, not only their refusals)


@pytest.mark.parametrize(
    "name", [*sorted(flops._ELEMENTWISE), "add_", "mul_", "eq_", "fill_", "zero_"]
)
def test_elementwise_is_the_step_by_step_formula(name: str) -> None:
    rng = random.Random(name)
    for _ in range(300):
        ts = _random_tensors(rng, matmul=False)
        got = flops._elementwise(ts, name)
        assert got == _ref_elementwise(ts, name) and type(got) is Cost
        rule = flops._rule(f"aten::{name}")
        if name != "dropout" and rule is not None:
            assert rule(ts, None) == got


def test_op_costs_is_each_keys_cost() -> None:
    """op_costs' keys, costed in one call (tensors shared between them), as cost() of each."""
    rng = random.Random(5)
    names = [
        "aten::mm",
        "aten::addmm",
        "aten::linear",
        "aten::add_",
        "aten::mul",
        "aten::eq",
        "aten::sum",
        "aten::copy_",
        "aten::view",
    ]
    rows: dict[str, list[Any]] = {
        "id": [],
        "name": [],
        "input_dims": [],
        "input_types": [],
        "concrete_inputs": [],
    }
    for i in range(600):
        rows["id"].append(i)
        rows["name"].append(rng.choice(names))
        n = rng.randint(0, 4)
        rows["input_dims"].append(
            "["
            + ",".join(rng.choice(["[8,8]", "[8]", "[]", "[2,8,8]", "[8,3]"]) for _ in range(n))
            + "]"
        )
        rows["input_types"].append(
            "["
            + ",".join(
                '"' + rng.choice(["float", "c10::BFloat16", "Scalar", "long"]) + '"'
                for _ in range(n)
            )
            + "]"
        )
        rows["concrete_inputs"].append(None)
    ev = pl.DataFrame(rows, schema={"id": pl.Int64, **{c: pl.String for c in rows if c != "id"}})
    got = flops.op_costs(ev)
    for r, c in zip(ev.iter_rows(named=True), got.iter_rows(named=True), strict=True):
        want = flops.cost(r["name"], r["input_dims"], r["input_types"], r["concrete_inputs"])
        assert (c["flops"], c["bytes"], c["formula"], c["dtype"], c["roof"]) == tuple(want)
