"""The one definition of tensor dtypes: names, the spellings traces use, element sizes.

Profilers spell the same dtype many ways: Kineto's ``"Input type"`` writes the C++ type
(``"float"``, ``"c10::BFloat16"``, ``"long int"``, ``"short unsigned int"``), collectives'
``dtype`` argument the ``c10::ScalarType`` name (``"Float"``, ``"BFloat16"``, ``"Byte"``),
Ascend's kernel tables the CANN names (``"FLOAT"``, ``"DT_BF16"``, ``"FLOAT16"``), HCCL tasks
their own (``"FP32"``, ``"BFP16"``) and users the short names (``"bf16"``). Every reader, cost
model, rule and benchmark resolves them here.

A dtype's canonical name is torch's attribute name (``torch.bfloat16`` -> ``"bfloat16"``).
Each has its element size, a short name for display (``"bf16"``) and a peak class: the key of
a device's FLOP/s table its arithmetic runs at (unsigned integers at the signed peak, complex
numbers at their component's, every 8-bit float at ``"fp8"``).

Spellings are matched case-insensitively after trimming quotes and spaces and dropping a
``torch.`` or ``DT_`` prefix, so ``"DT_FLOAT16"``, ``"torch.float16"`` and ``"Half"`` are one
dtype. ``"tf32"`` is not a dtype (it is fp32 storage with TF32 tensor-core math): only
:func:`torch_name` takes it, for the benchmarks that set that mode.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Final

import polars as pl


@dataclass(frozen=True)
class DType:
    """One tensor dtype."""

    name: str  # canonical: torch's attribute name
    itemsize: int  # bytes per element
    short: str  # display name: "fp32", "bf16", "int64"
    peak: str  # device-peak class: "fp32", "bf16", "fp8", "int8"...
    in_torch: bool = True  # torch has it as torch.<name>


def _d(
    name: str, itemsize: int, short: str, peak: str, *spellings: str
) -> tuple[DType, tuple[str, ...]]:
    return DType(name, itemsize, short, peak, name != "hifloat8"), spellings


# (dtype, the other spellings traces and users write; lower case, no torch./DT_ prefix)
_TABLE: Final = (
    _d("float32", 4, "fp32", "fp32", "float", "fp32"),
    _d("float16", 2, "fp16", "fp16", "half", "c10::half", "fp16"),
    _d("bfloat16", 2, "bf16", "bf16", "c10::bfloat16", "bf16", "bfp16"),
    _d("float64", 8, "fp64", "fp64", "double", "fp64"),
    _d("float8_e4m3fn", 1, "fp8_e4m3fn", "fp8", "c10::float8_e4m3fn", "fp8e4m3"),
    _d("float8_e5m2", 1, "fp8_e5m2", "fp8", "c10::float8_e5m2", "fp8e5m2"),
    _d("float8_e4m3fnuz", 1, "fp8_e4m3fnuz", "fp8", "c10::float8_e4m3fnuz"),
    _d("float8_e5m2fnuz", 1, "fp8_e5m2fnuz", "fp8", "c10::float8_e5m2fnuz"),
    _d("hifloat8", 1, "hif8", "fp8", "hif8"),  # Ascend's 8-bit float
    _d("int64", 8, "int64", "int64", "long", "long int", "long long", "long long int"),
    _d("int32", 4, "int32", "int32", "int"),
    _d("int16", 2, "int16", "int16", "short", "short int"),
    _d("int8", 1, "int8", "int8", "signed char", "char"),  # c10::ScalarType::Char is int8
    _d("uint64", 8, "uint64", "int64", "long unsigned int", "unsigned long"),
    _d("uint32", 4, "uint32", "int32", "unsigned int"),
    _d("uint16", 2, "uint16", "int16", "short unsigned int", "unsigned short"),
    _d("uint8", 1, "uint8", "int8", "unsigned char", "byte"),  # ScalarType::Byte is uint8
    _d("bool", 1, "bool", "bool"),
    _d("complex32", 4, "complex32", "fp16", "c10::complex<c10::half>", "complexhalf", "chalf"),
    _d("complex64", 8, "complex64", "fp32", "c10::complex<float>", "complexfloat", "cfloat"),
    _d("complex128", 16, "complex128", "fp64", "c10::complex<double>", "complexdouble", "cdouble"),
)

DTYPES: Final[dict[str, DType]] = {d.name: d for d, _ in _TABLE}
"""Every dtype by canonical name."""

ALIASES: Final[dict[str, str]] = {
    s: d.name for d, spellings in _TABLE for s in (d.name, d.short, *spellings)
}
"""Normalised spelling (see :func:`spelling`) -> canonical name; the canonical and short names
are spellings of themselves."""

ITEMSIZE_BY_SPELLING: Final[dict[str, int]] = {s: DTYPES[n].itemsize for s, n in ALIASES.items()}
"""Normalised spelling -> bytes per element (for :func:`itemsize_expr`)."""

SCALAR_TYPE_CODES: Final[dict[int, str]] = {
    0: "uint8",
    1: "int8",
    2: "int16",
    3: "int32",
    4: "int64",
    5: "float16",
    6: "float32",
    7: "float64",
    8: "complex32",
    9: "complex64",
    10: "complex128",
    11: "bool",
    15: "bfloat16",
    23: "float8_e5m2",
    24: "float8_e4m3fn",
    25: "float8_e5m2fnuz",
    26: "float8_e4m3fnuz",
    27: "uint16",
    28: "uint32",
    29: "uint64",
}
"""``c10::ScalarType`` codes (as Kineto's "Concrete Inputs" of ``aten::_to_copy`` write the
target dtype) -> canonical name."""

MATMUL_MODES: Final[dict[str, str]] = {"tf32": "float32"}
"""Math modes benchmarks accept where a dtype goes -> the storage dtype they run on."""

_SPACES = re.compile(r"\s+")


def spelling(text: str) -> str:
    """``text`` as the alias tables key it: trimmed of quotes and spaces, lower case, inner
    whitespace collapsed, a ``torch.`` or ``DT_`` prefix dropped."""
    t = _SPACES.sub(" ", text.strip().strip('"').strip()).lower()
    return t.removeprefix("torch.").removeprefix("dt_")


@functools.lru_cache(maxsize=4096)
def lookup(text: str | None) -> DType | None:
    """The dtype a trace or user spells ``text``, else None (``"Scalar"``, ``"TensorList"``,
    ``""``, ``"N/A"`` and unknown spellings)."""
    if not text:
        return None
    name = ALIASES.get(spelling(text))
    return DTYPES[name] if name is not None else None


def canonical(text: str | None) -> str | None:
    """The canonical name (torch's) of the dtype spelled ``text``, else None."""
    d = lookup(text)
    return d.name if d is not None else None


def itemsize(text: str | None) -> int | None:
    """Bytes per element of the dtype spelled ``text``, else None."""
    d = lookup(text)
    return d.itemsize if d is not None else None


def itemsize_expr(spellings: pl.Expr) -> pl.Expr:
    """Bytes per element of a String column of dtype spellings (null where unknown)."""
    norm = (
        spellings.cast(pl.String)
        .str.strip_chars()
        .str.strip_chars('"')
        .str.strip_chars()
        .str.replace_all(r"\s+", " ")
        .str.to_lowercase()
        .str.strip_prefix("torch.")
        .str.strip_prefix("dt_")
    )
    return norm.replace_strict(ITEMSIZE_BY_SPELLING, default=None, return_dtype=pl.Int64)


def torch_name(text: str) -> str | None:
    """The ``torch`` attribute holding the dtype spelled ``text`` (``"tf32"`` gives its storage
    dtype, ``"float32"``), else None (unknown, or a dtype torch lacks)."""
    t = spelling(text)
    if t in MATMUL_MODES:
        return MATMUL_MODES[t]
    d = lookup(text)
    return d.name if d is not None and d.in_torch else None
