"""The one dtype table (opscope.model.dtypes): every spelling, its users, torch's own answer.

The expected table below is written out by hand from the sources named beside each row (what
torch's profiler records, c10::ScalarType names, CANN/HCCL enums), not derived from the module,
and the module may hold no spelling this table lacks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from opscope.model import dtypes

# spelling -> (canonical name, bytes per element, peak class)
EXPECTED: dict[str, tuple[str, int, str]] = {
    # torch attribute names and users' short names
    "float32": ("float32", 4, "fp32"),
    "fp32": ("float32", 4, "fp32"),
    "float16": ("float16", 2, "fp16"),
    "fp16": ("float16", 2, "fp16"),
    "bfloat16": ("bfloat16", 2, "bf16"),
    "bf16": ("bfloat16", 2, "bf16"),
    "float64": ("float64", 8, "fp64"),
    "fp64": ("float64", 8, "fp64"),
    "float8_e4m3fn": ("float8_e4m3fn", 1, "fp8"),
    "fp8_e4m3fn": ("float8_e4m3fn", 1, "fp8"),
    "float8_e5m2": ("float8_e5m2", 1, "fp8"),
    "fp8_e5m2": ("float8_e5m2", 1, "fp8"),
    "float8_e4m3fnuz": ("float8_e4m3fnuz", 1, "fp8"),
    "fp8_e4m3fnuz": ("float8_e4m3fnuz", 1, "fp8"),
    "float8_e5m2fnuz": ("float8_e5m2fnuz", 1, "fp8"),
    "fp8_e5m2fnuz": ("float8_e5m2fnuz", 1, "fp8"),
    "int64": ("int64", 8, "int64"),
    "int32": ("int32", 4, "int32"),
    "int16": ("int16", 2, "int16"),
    "int8": ("int8", 1, "int8"),
    "uint64": ("uint64", 8, "int64"),
    "uint32": ("uint32", 4, "int32"),
    "uint16": ("uint16", 2, "int16"),
    "uint8": ("uint8", 1, "int8"),
    "bool": ("bool", 1, "bool"),
    "complex32": ("complex32", 4, "fp16"),
    "chalf": ("complex32", 4, "fp16"),
    "complex64": ("complex64", 8, "fp32"),
    "cfloat": ("complex64", 8, "fp32"),
    "complex128": ("complex128", 16, "fp64"),
    "cdouble": ("complex128", 16, "fp64"),
    # Kineto "Input type" (the C++ type torch's profiler writes; see the torch test below)
    "float": ("float32", 4, "fp32"),
    "c10::Half": ("float16", 2, "fp16"),
    "c10::BFloat16": ("bfloat16", 2, "bf16"),
    "double": ("float64", 8, "fp64"),
    "long int": ("int64", 8, "int64"),
    "long": ("int64", 8, "int64"),
    "long long": ("int64", 8, "int64"),
    "long long int": ("int64", 8, "int64"),
    "int": ("int32", 4, "int32"),
    "short int": ("int16", 2, "int16"),
    "short": ("int16", 2, "int16"),
    "signed char": ("int8", 1, "int8"),
    "unsigned char": ("uint8", 1, "int8"),
    "short unsigned int": ("uint16", 2, "int16"),
    "unsigned short": ("uint16", 2, "int16"),
    "unsigned int": ("uint32", 4, "int32"),
    "long unsigned int": ("uint64", 8, "int64"),
    "unsigned long": ("uint64", 8, "int64"),
    "c10::complex<c10::Half>": ("complex32", 4, "fp16"),
    "c10::complex<float>": ("complex64", 8, "fp32"),
    "c10::complex<double>": ("complex128", 16, "fp64"),
    "c10::Float8_e4m3fn": ("float8_e4m3fn", 1, "fp8"),
    "c10::Float8_e5m2": ("float8_e5m2", 1, "fp8"),
    "c10::Float8_e4m3fnuz": ("float8_e4m3fnuz", 1, "fp8"),
    "c10::Float8_e5m2fnuz": ("float8_e5m2fnuz", 1, "fp8"),
    # c10::ScalarType names (collectives' "dtype" argument)
    "Float": ("float32", 4, "fp32"),
    "Half": ("float16", 2, "fp16"),
    "BFloat16": ("bfloat16", 2, "bf16"),
    "Double": ("float64", 8, "fp64"),
    "Long": ("int64", 8, "int64"),
    "Int": ("int32", 4, "int32"),
    "Short": ("int16", 2, "int16"),
    "Char": ("int8", 1, "int8"),
    "char": ("int8", 1, "int8"),
    "Byte": ("uint8", 1, "int8"),
    "Bool": ("bool", 1, "bool"),
    "ComplexHalf": ("complex32", 4, "fp16"),
    "ComplexFloat": ("complex64", 8, "fp32"),
    "ComplexDouble": ("complex128", 16, "fp64"),
    "UInt16": ("uint16", 2, "int16"),
    # Ascend kernel tables (CANN names, with and without DT_) and HCCL's enum
    "FLOAT": ("float32", 4, "fp32"),
    "DT_FLOAT": ("float32", 4, "fp32"),
    "FLOAT16": ("float16", 2, "fp16"),
    "DT_FLOAT16": ("float16", 2, "fp16"),
    "DT_HALF": ("float16", 2, "fp16"),
    "DT_BF16": ("bfloat16", 2, "bf16"),
    "DT_BFLOAT16": ("bfloat16", 2, "bf16"),
    "DOUBLE": ("float64", 8, "fp64"),
    "INT64": ("int64", 8, "int64"),
    "DT_INT32": ("int32", 4, "int32"),
    "UINT8": ("uint8", 1, "int8"),
    "BOOL": ("bool", 1, "bool"),
    "DT_COMPLEX64": ("complex64", 8, "fp32"),
    "HIFLOAT8": ("hifloat8", 1, "fp8"),
    "DT_HIFLOAT8": ("hifloat8", 1, "fp8"),
    "HIF8": ("hifloat8", 1, "fp8"),
    "FP8E4M3": ("float8_e4m3fn", 1, "fp8"),
    "FP8E5M2": ("float8_e5m2", 1, "fp8"),
    "FP32": ("float32", 4, "fp32"),
    "FP16": ("float16", 2, "fp16"),
    "BFP16": ("bfloat16", 2, "bf16"),
    "FP64": ("float64", 8, "fp64"),
    "INT8": ("int8", 1, "int8"),
    "INT16": ("int16", 2, "int16"),
    "UINT16": ("uint16", 2, "int16"),
    "UINT32": ("uint32", 4, "int32"),
    "UINT64": ("uint64", 8, "int64"),
    # torch reprs and quoted / padded text
    "torch.float16": ("float16", 2, "fp16"),
    "torch.bfloat16": ("bfloat16", 2, "bf16"),
    '"float"': ("float32", 4, "fp32"),
    "  long   int ": ("int64", 8, "int64"),
}

# Argument types that are no tensor dtype, and text that is none.
NOT_DTYPES = [
    None,
    "",
    "Scalar",
    "ScalarList",
    "TensorList",
    "GenericList",
    "None",
    "N/A",
    "DT_UNDEFINED",
    "FORMAT_ND",
    "INVALID_TYPE",
    "tf32",
    "fp8",
]


@pytest.mark.parametrize("text", list(EXPECTED))
def test_every_spelling_resolves_to_its_dtype(text: str) -> None:
    name, size, peak = EXPECTED[text]
    d = dtypes.lookup(text)
    assert d is not None, text
    assert (d.name, d.itemsize, d.peak) == (name, size, peak)
    assert dtypes.canonical(text) == name
    assert dtypes.itemsize(text) == size


@pytest.mark.parametrize("text", NOT_DTYPES)
def test_what_is_no_dtype_resolves_to_none(text: str | None) -> None:
    assert dtypes.lookup(text) is None
    assert dtypes.itemsize(text) is None


def test_the_module_holds_no_spelling_the_hand_table_lacks() -> None:
    # Adding a spelling to the module without a row above fails here.
    covered = {dtypes.spelling(s) for s in EXPECTED}
    assert set(dtypes.ALIASES) - covered == set()
    assert set(dtypes.DTYPES) == {name for name, _, _ in EXPECTED.values()}


def test_short_names_are_spellings_of_their_dtype() -> None:
    for name, d in dtypes.DTYPES.items():
        assert dtypes.canonical(d.short) == name
        assert dtypes.canonical(name) == name


def test_itemsize_expr_agrees_with_itemsize() -> None:
    texts = [*EXPECTED, *(t for t in NOT_DTYPES if t is not None)]
    got = pl.DataFrame({"t": texts}).select(dtypes.itemsize_expr(pl.col("t"))).to_series()
    assert got.to_list() == [dtypes.itemsize(t) for t in texts]
    assert got.dtype == pl.Int64


def test_torch_name_takes_the_tf32_mode_and_no_foreign_dtype() -> None:
    assert dtypes.torch_name("tf32") == "float32"
    assert dtypes.torch_name("TF32") == "float32"
    assert dtypes.torch_name("bf16") == "bfloat16"
    assert dtypes.torch_name("c10::Half") == "float16"
    assert dtypes.torch_name("hifloat8") is None  # Ascend's, not torch's
    assert dtypes.torch_name("Scalar") is None


# --- the former copies now answer from the one table -------------------------------------------


@pytest.mark.parametrize("text", list(EXPECTED))
def test_flops_cost_model_uses_the_table(text: str) -> None:
    from opscope.analysis.flops import dtype_info

    _, size, peak = EXPECTED[text]
    assert dtype_info(text) == (size, peak)


@pytest.mark.parametrize("text", list(EXPECTED))
def test_advise_normalises_with_the_table(text: str) -> None:
    from opscope.advise import _common as c

    name, size, _ = EXPECTED[text]
    assert c.norm_dtype(text) == name
    assert c.DTYPE_BYTES[name] == size


def test_advise_short_names() -> None:
    from opscope.advise import _common as c

    assert c.SHORT_DTYPE["bfloat16"] == "bf16"
    assert c.SHORT_DTYPE["float16"] == "fp16"
    assert c.SHORT_DTYPE["float32"] == "fp32"
    assert c.SHORT_DTYPE["float64"] == "fp64"
    assert c.norm_dtype("Scalar") == "scalar"  # no dtype: kept, lower case
    assert c.parse_types('["c10::BFloat16","long int","Scalar",""]') == [
        "bfloat16",
        "int64",
        "scalar",
        None,
    ]
    assert c.parse_types("DT_BF16;FLOAT;INT64") == ["bfloat16", "float32", "int64"]


def test_bench_dtypes_are_the_floating_point_ones_plus_tf32() -> None:
    from opscope.advise import _bench as b

    assert set(b.TORCH_DTYPES.values()) == {"float32", "float16", "bfloat16", "float64"}
    for s in ("fp32", "float", "fp16", "half", "bf16", "bfloat16", "fp64", "double"):
        assert b.TORCH_DTYPES[s] == dtypes.canonical(s)
    assert b.TORCH_DTYPES["tf32"] == "float32"
    assert "int8" not in b.TORCH_DTYPES


def test_collective_bytes_use_the_table() -> None:
    # Planted NCCL collectives: bytes = "In msg nelems" x element size of their "dtype".
    from opscope.analysis.cluster import _calls

    rows = [("Float", 4), ("BFloat16", 2), ("Byte", 1), ("Long", 8), ("ComplexFloat", 8)]
    ev = pl.DataFrame(
        {
            "rank": [0] * len(rows),
            "step": [0] * len(rows),
            "kind": ["communication"] * len(rows),
            "name": ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"] * len(rows),
            "ts_ns": [1000 * i for i in range(len(rows))],
            "dur_ns": [100] * len(rows),
            "args": [
                json.dumps({"In msg nelems": 1000, "dtype": dt, "Collective name": "allreduce"})
                for dt, _ in rows
            ],
        }
    )
    out = _calls(ev, host_compute=False)[0].sort("start_ns")  # (the collectives table)
    assert out.get_column("bytes").to_list() == [1000 * size for _, size in rows]


# --- torch's own answer ------------------------------------------------------------------------


def _torch_dtypes(torch: Any) -> list[Any]:
    return [getattr(torch, d.name) for d in dtypes.DTYPES.values() if d.in_torch]


def test_torch_agrees_on_every_name_and_size() -> None:
    torch = pytest.importorskip("torch")
    for d in dtypes.DTYPES.values():
        if d.in_torch:
            assert getattr(torch, d.name).itemsize == d.itemsize, d.name


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_what_torch_profiler_records_resolves_to_the_tensor_dtype(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    xs = [torch.zeros(4, dtype=dt) for dt in _torch_dtypes(torch)]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for x in xs:
            torch.ops.aten.clone(x)
        for x in xs:
            torch.zeros(2).to(x.dtype)
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    clones = [
        e["args"]["Input type"][0]
        for e in sorted(events, key=lambda e: e.get("ts", 0))
        if e.get("name") == "aten::clone"
    ]
    assert len(clones) == len(xs)
    for x, text in zip(xs, clones, strict=True):
        d = dtypes.lookup(text)
        assert d is not None, text
        assert d.name == str(x.dtype).removeprefix("torch."), text
        assert d.itemsize == x.element_size()
    # aten::_to_copy records the target dtype as its c10::ScalarType code
    codes = [
        int(e["args"]["Concrete Inputs"][1])
        for e in sorted(events, key=lambda e: e.get("ts", 0))
        if e.get("name") == "aten::_to_copy"
    ]
    wanted = [str(x.dtype).removeprefix("torch.") for x in xs if x.dtype != torch.float32]
    assert [dtypes.SCALAR_TYPE_CODES[c] for c in codes] == wanted
