"""Semantic keys: what a piece of work *is*, whatever the op, kernel, device or vendor ran it.

A row key is ``module path · pass · op class problem size · dtype``:

- **module path**: the ``nn.Module`` the work is charged to (backward work: its forward op's);
  absent when the profile has no module information.
- **pass**: ``fwd`` or ``bwd`` (the op runs in the autograd engine).
- **op class** (:data:`OP_CLASSES`): from the operator name, else the kernel name / kind.
- **problem size**: GEMM ``M,N,K`` (and the batch of a batched GEMM) derived from
  ``mm / addmm / matmul / linear / bmm / baddbmm`` shapes (``linear``'s weight is ``[N, K]``,
  biases are ignored), attention ``B,H,S,D`` of the query, conv input and weight shapes, the
  first input's shape for the other classes.
- **dtype**: the first floating-point input's dtype class (``fp32``, ``bf16``...).

So ``aten::matmul`` + ``aten::mm`` + ``volta_sgemm_128x64_nn`` on a V100 and ``aten::linear`` +
``aten::addmm`` + ``ampere_bf16_s16816gemm`` on an A100 of the same layer are one row.

Each device kernel is charged to one *anchor* operator: the class is that of the innermost
classified operator around its launch (the launcher itself, usually); the anchor is the
outermost operator of that class around the launch whose problem size can be derived
(``aten::linear`` rather than the ``aten::addmm`` inside it), else the innermost one. On a host
basis the anchors are the outermost classified operators.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

import msgspec
import polars as pl

from opscope.analysis import flops
from opscope.model import kinds

OP_CLASSES: Final = (
    "GEMM",
    "attention",
    "conv",
    "norm",
    "elementwise",
    "communication",
    "copy",
    "other",
)
"""Op classes of a semantic row; ``other`` keeps the operator's own name in the key."""

_GEMM_OPS: Final = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "addbmm",
        "matmul",
        "linear",
        "npu_linear",
        "_addmm_activation",
        "einsum",
        "_scaled_mm",
    }
)
_COPY_OPS: Final = frozenset(
    {
        "copy_",
        "clone",
        "_to_copy",
        "_copy_from",
        "_copy_from_and_resize",
        "to",
        "contiguous",
        "cat",
        "stack",
    }
)
# engine and compiler wrappers: the work is in what runs under them
_WRAPPERS: Final = (
    "autograd::engine::",
    "torch::autograd::",
    "CompiledFunction",
    "ProfilerStep",
    "Optimizer.",
    "Torch-Compiled Region",
)
# kernel names when the launching op says nothing (compiled graphs, a missing launcher)
_GEMM_KERNEL: Final = re.compile(
    r"(?i)gemm|cublas|cutlass|matmul|wgmma|xmma|s16816|s1688|h1688|hmma|mma_|"
    r"ampere_.*_tn|volta_.*_n[nt]|_nt$|_tn$"
)
_CONV_KERNEL: Final = re.compile(r"(?i)conv|implicit_convolve|winograd|cudnn::.*fprop|dgrad|wgrad")
_ATTN_KERNEL: Final = re.compile(r"(?i)flash|fmha|attention|attn")
_NORM_KERNEL: Final = re.compile(r"(?i)norm")
_COPY_KERNEL: Final = re.compile(r"(?i)memcpy|memset|copy|fill")
_COMM_OP: Final = re.compile(kinds.COMM_OP_PATTERN)


def op_class(name: str | None) -> str | None:
    """The class of a host operator from its name, ``None`` when its name says nothing.

    Autograd nodes (``MmBackward0``) and annotations have no class: the operators below them
    do the work.
    """
    if not name or flops.is_autograd_node(name) or name.startswith(_WRAPPERS):
        return None
    if _COMM_OP.search(name):
        return "communication"
    if "::" not in name:
        return None
    b = flops.base_name(name)
    low = b.lower()
    if b in _GEMM_OPS:
        return "GEMM"
    if "attention" in low:
        return "attention"
    if "conv" in low:
        return "conv"
    if "norm" in low and "normal" not in low:
        return "norm"
    if b in _COPY_OPS:
        return "copy"
    if (
        b.rstrip("_") in flops._ELEMENTWISE
        or b in flops._REDUCTIONS
        or "softmax" in low
        or "dropout" in low
        or b in ("gelu", "silu", "relu", "sigmoid", "tanh")
    ):
        return "elementwise"
    return "other"


def kernel_class(name: str | None, kind: str | None) -> str:
    """The class of device work with no classified operator around its launch."""
    if kind == kinds.COMMUNICATION:
        return "communication"
    if kind in kinds.COPY_KINDS:
        return "copy"
    n = name or ""
    if _ATTN_KERNEL.search(n):
        return "attention"
    if _CONV_KERNEL.search(n):
        return "conv"
    if _GEMM_KERNEL.search(n):
        return "GEMM"
    if _NORM_KERNEL.search(n):
        return "norm"
    if _COPY_KERNEL.search(n):
        return "copy"
    return "elementwise"


def _shapes(dims: str | None) -> list[list[int] | None]:
    if not dims:
        return []
    try:
        d = msgspec.json.decode(dims)
    except msgspec.DecodeError:
        return []
    if not isinstance(d, list):
        return []
    return [
        [int(v) for v in x]
        if isinstance(x, list)
        and x
        and all(isinstance(v, int) and not isinstance(v, bool) for v in x)
        else None
        for x in d
    ]


def gemm_mnk(name: str, dims: str | None) -> tuple[int, int, int, int] | None:
    """``(batch, M, N, K)`` of a GEMM call from its recorded shapes, or None.

    ``linear(x[..., K], W[N, K], bias)``: M is the product of x's leading dims; ``addmm(bias,
    A[M, K], B[K, N])``; ``mm(A, B)``; ``matmul(A[..., M, K], B[K, N])`` folds A's batch into
    M when B is a matrix; ``bmm / baddbmm`` keep their batch. Biases never enter the key.
    """
    b = flops.base_name(name)
    sh = _shapes(dims)
    args = [s for s in sh if s is not None]
    if b in ("addmm", "baddbmm", "addbmm", "_addmm_activation"):
        # (input/bias, mat1, mat2): the bias may be recorded as a tensor or be absent
        mats = [s for s in sh[1:3] if s is not None] if len(sh) >= 3 else []
        if len(mats) != 2:
            return None
        a, w = mats
    elif b in ("linear", "npu_linear"):
        if len(args) < 2 or len(args[1]) != 2 or not args[0]:
            return None
        x, wt = args[0], args[1]
        m = math.prod(x[:-1]) if len(x) > 1 else 1
        if x[-1] != wt[1]:
            return None
        return 1, m, wt[0], wt[1]
    elif b in ("mm", "bmm", "matmul", "_scaled_mm"):
        if len(args) < 2:
            return None
        a, w = args[0], args[1]
    else:
        return None
    if len(a) == 2 and len(w) == 2 and a[1] == w[0]:
        return 1, a[0], w[1], a[1]
    if len(a) >= 3 and len(w) == 2 and a[-1] == w[0]:  # matmul of a batch by a matrix
        return 1, math.prod(a[:-1]), w[1], a[-1]
    if len(a) >= 3 and len(w) >= 3 and a[-1] == w[-2]:
        return math.prod(a[:-2]), a[-2], w[-1], a[-1]
    if len(a) == 1 and len(w) == 2 and a[0] == w[0]:
        return 1, 1, w[1], a[0]
    return None


def problem_size(cls: str | None, name: str, dims: str | None) -> str | None:
    """The problem-size part of a key, or None when the shapes do not give it."""
    if cls == "GEMM":
        g = gemm_mnk(name, dims)
        if g is None:
            return None
        batch, m, n, k = g
        return (f"B={batch} " if batch > 1 else "") + f"M={m} N={n} K={k}"
    sh = [s for s in _shapes(dims) if s is not None]
    if not sh:
        return None
    if cls == "attention":
        q = sh[0]
        if len(q) != 4:
            return None
        b = flops.base_name(name)
        # flash-attn's own ops take [B, S, H, D]; SDPA and its kernels [B, H, S, D]
        if b.startswith("_flash_attention") or b.startswith("_efficient_attention"):
            bb, s, h, d = q
        else:
            bb, h, s, d = q
        return f"B={bb} H={h} S={s} D={d}"
    if cls == "conv":
        if len(sh) < 2:
            return None
        return f"x={_dims(sh[0])} w={_dims(sh[1])}"
    return _dims(sh[0])


def _dims(s: list[int]) -> str:
    return "[" + ",".join(str(v) for v in s) + "]"


def dtype_of(types: str | None) -> str | None:
    """The dtype class of the first floating-point input (else of the first tensor)."""
    if not types:
        return None
    try:
        t = msgspec.json.decode(types)
    except msgspec.DecodeError:
        return None
    if not isinstance(t, list):
        return None
    classes = [info[1] for x in t if isinstance(x, str) and (info := flops.dtype_info(x))]
    for c in classes:
        if c.startswith(("fp", "bf", "tf")):
            return c
    return classes[0] if classes else None


def strip_root(module: pl.Expr) -> pl.Expr:
    """``Model_0/enc/Linear_11`` -> ``…/enc/Linear_11`` (a root module alone stays as it is)."""
    return (
        pl.when(module.str.contains("/"))
        .then(pl.lit("…/") + module.str.replace(r"^[^/]*/", ""))
        .otherwise(module)
    )


def annotate_ops(ops: pl.DataFrame) -> pl.DataFrame:
    """``ops`` (``id, name, dims, types, is_backward, module``...) with ``cls``, ``size``,
    ``dtype``: one Python call per distinct (name, dims, types), not per event."""
    keys = ops.select("name", "dims", "types").unique()
    rows = keys.rows()
    cls: list[str | None] = []
    size: list[str | None] = []
    dtype: list[str | None] = []
    for name, dims, types in rows:
        c = op_class(name)
        cls.append(c)
        if c is None:
            size.append(None)
        elif c == "other":
            size.append(None if dims in (None, "[]") else dims)
        else:
            size.append(problem_size(c, name, dims))
        dtype.append(dtype_of(types))
    table = keys.with_columns(
        pl.Series("cls", cls, dtype=pl.String),
        pl.Series("size", size, dtype=pl.String),
        pl.Series("dtype", dtype, dtype=pl.String),
    )
    return ops.join(table, on=["name", "dims", "types"], how="left", nulls_equal=True)


def label(module: Any, pas: Any, cls: Any, name: Any, size: Any, dtype: Any) -> pl.Expr:
    """The row key: what its figures cover, in words (every part is a Polars expression)."""
    what = pl.when(cls == "other").then(pl.lit("other ") + name).otherwise(cls)
    parts = [
        pl.coalesce(module + pl.lit(" · "), pl.lit("")),
        pas,
        pl.lit(" · "),
        what,
        pl.coalesce(pl.lit(" ") + size, pl.lit("")),
        pl.coalesce(pl.lit(" · ") + dtype, pl.lit("")),
    ]
    return pl.concat_str(parts)


def fallback_label(module: Any, pas: Any, cls: Any, name: Any) -> pl.Expr:
    """Key of the padded-shape fallback: module + pass + class, shapes and dtype left out.

    Only with a module path: without one, "every GEMM of the backward pass" is not one layer."""
    what = pl.when(cls == "other").then(pl.lit("other ") + name).otherwise(cls)
    return pl.when(module.is_not_null()).then(
        pl.concat_str([module, pl.lit(" · "), pas, pl.lit(" · "), what, pl.lit(" (shape changed)")])
    )


__all__ = (
    "OP_CLASSES",
    "annotate_ops",
    "dtype_of",
    "gemm_mnk",
    "kernel_class",
    "op_class",
    "problem_size",
)
