"""Micro-benchmark sweeps of an operator at a shape, and of its candidate fixes.

``sweep_matmul(256, 1024, 256, "bf16", "auto")`` times ``a @ b`` and each variant (padded dims,
transposed vs contiguous weight, ``F.linear`` vs matmul + bias add, other dtypes) on the
present device and returns a Polars table; nothing is printed. torch is imported lazily.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from opscope.advise import _bench as b

MATMUL_VARIANTS = ("original", "padded", "transposed_b", "contiguous_b", "linear", "addmm")
# Default pad multiple per device and dtype: tensor cores want 8 (fp16/bf16) or 4 (tf32);
# Ascend cube units 128 (the alignment rule's constants); the CPU gets the generic 128 rule.
PAD_DEFAULTS = {"cuda": {"float16": 8, "bfloat16": 8, "float32": 4}, "npu": {}, "cpu": {}}
PAD_FALLBACK = 128
# A CPU micro-benchmark of more FLOPs than this per call is refused (it would take minutes).
CPU_MAX_FLOPS = 4e10

SWEEP_SCHEMA = {
    "variant": pl.String,
    "m": pl.Int64,
    "k": pl.Int64,
    "n": pl.Int64,
    "dtype": pl.String,
    "device": pl.String,
    "median_us": pl.Float64,
    "q1_us": pl.Float64,
    "q3_us": pl.Float64,
    "iqr_us": pl.Float64,
    "repeats": pl.Int64,
    "tflops": pl.Float64,
    "speedup": pl.Float64,
    "faster": pl.Boolean,
}


def default_pad(device: str, dtype: str) -> int:
    """The pad multiple the alignment rule would ask for on ``device`` in ``dtype``."""
    return PAD_DEFAULTS.get(device, {}).get(b.TORCH_DTYPES.get(dtype, dtype), PAD_FALLBACK)


def _pad(x: int, mult: int) -> int:
    return -(-x // mult) * mult


def matmul_variants(
    m: int,
    k: int,
    n: int,
    dtype: str,
    device: str,
    *,
    variants: Sequence[str] = ("original", "padded"),
    pad_to: int | None = None,
    padded_shape: Sequence[int] | None = None,
    bias: bool = False,
    transposed_b: bool = False,
) -> dict[str, tuple[Callable[[], Any], tuple[int, int, int], str]]:
    """Callables for each variant: ``{name: (fn, (m, k, n) run, dtype)}``.

    ``original`` is ``a @ b`` (``b = W.t()`` when ``transposed_b``), plus ``y += bias`` when
    ``bias``; the other variants change one thing each. ``padded`` pads every dim to a multiple
    of ``pad_to`` (default: the device rule's), or runs ``padded_shape`` when given.
    """
    torch = b.torch_mod()
    F = torch.nn.functional
    if device == "cpu" and 2.0 * m * k * n > CPU_MAX_FLOPS:
        raise b.BenchError(
            f"matmul {m}x{k}x{n} is too large for a CPU micro-benchmark "
            f"({2.0 * m * k * n:.2g} FLOP > {CPU_MAX_FLOPS:.0g}); run it on the device"
        )
    dt_name = b.TORCH_DTYPES.get(dtype.lower(), dtype)
    tdev = torch.device(device)
    mult = pad_to or default_pad(device, dt_name)
    gen = torch.Generator().manual_seed(0)

    def mk(*shape: int, dt: Any) -> Any:
        return torch.randn(*shape, generator=gen).to(device=tdev, dtype=dt)

    def build(mm: int, kk: int, nn: int, dt_s: str, layout: str) -> Callable[[], Any]:
        dt = b.torch_dtype(dt_s)
        a = mk(mm, kk, dt=dt)
        w = mk(nn, kk, dt=dt)  # weight [out, in] like nn.Linear
        wt = w.t().contiguous()  # [in, out], contiguous
        bb = mk(nn, dt=dt)
        if layout == "linear":
            return lambda: F.linear(a, w, bb if bias else None)
        if layout == "addmm":
            return lambda: torch.addmm(bb, a, w.t()) if bias else torch.mm(a, w.t())
        rhs = w.t() if layout == "transposed" else wt

        if bias:

            def fn() -> Any:
                y = torch.matmul(a, rhs)
                y += bb
                return y

            return fn
        return lambda: torch.matmul(a, rhs)

    orig_layout = "transposed" if transposed_b else "contiguous"
    out: dict[str, tuple[Callable[[], Any], tuple[int, int, int], str]] = {}
    for v in variants:
        if v in ("original", "identity"):
            out[v] = (build(m, k, n, dt_name, orig_layout), (m, k, n), dt_name)
        elif v == "padded":
            if padded_shape is not None:
                pm, pk, pn = (int(x) for x in padded_shape)
            else:
                pm, pk, pn = _pad(m, mult), _pad(k, mult), _pad(n, mult)
            out[v] = (build(pm, pk, pn, dt_name, orig_layout), (pm, pk, pn), dt_name)
        elif v == "transposed_b":
            out[v] = (build(m, k, n, dt_name, "transposed"), (m, k, n), dt_name)
        elif v == "contiguous_b":
            out[v] = (build(m, k, n, dt_name, "contiguous"), (m, k, n), dt_name)
        elif v in ("linear", "addmm"):
            out[v] = (build(m, k, n, dt_name, v), (m, k, n), dt_name)
        elif v.startswith("splitk:"):
            # split K into S slices run as one batched GEMM (S times the output tiles), then
            # reduce: what cuBLASLt/hipBLASLt split-K does for a GEMM with too few tiles
            splits = int(v.split(":", 1)[1])
            if splits < 2 or k % splits:
                raise b.BenchError(f"K={k} does not split into {splits} equal slices")
            out[v] = (_split_k(mk, m, k, n, splits, b.torch_dtype(dt_name)), (m, k, n), dt_name)
        elif v.startswith("dtype:"):
            raw = v.split(":", 1)[1].lower()
            other = b.TORCH_DTYPES.get(raw)
            if other is None:
                raise b.BenchError(f"unknown dtype in variant {v!r}")
            fn = build(m, k, n, other, orig_layout)
            out[v] = (_tf32(fn) if raw == "tf32" else fn, (m, k, n), raw)
        else:
            raise b.BenchError(
                f"unknown matmul variant {v!r} ({', '.join(MATMUL_VARIANTS)}, dtype:X, "
                "splitk:S, identity)"
            )
    if dtype.lower() == "tf32":
        out = {
            name: (_tf32(fn), shp, "tf32") if dt_ == "float32" else (fn, shp, dt_)
            for name, (fn, shp, dt_) in out.items()
        }
    if "original" not in out:
        out = {"original": (build(m, k, n, dt_name, orig_layout), (m, k, n), dt_name), **out}
    return out


def _split_k(
    mk: Callable[..., Any], m: int, k: int, n: int, splits: int, dt: Any
) -> Callable[[], Any]:
    """``a @ b`` as ``splits`` batched partial products over slices of K, summed."""
    torch = b.torch_mod()
    a = mk(m, k, dt=dt).reshape(m, splits, k // splits).transpose(0, 1).contiguous()
    w = mk(k, n, dt=dt).reshape(splits, k // splits, n).contiguous()
    return lambda: torch.bmm(a, w).sum(0)


def _tf32(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Run ``fn`` with TF32 matmuls allowed (CUDA; a no-op elsewhere)."""
    torch = b.torch_mod()

    def run() -> Any:
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return fn()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev

    return run


def _table(
    timings: dict[str, b.Timing],
    shapes: dict[str, tuple[int, int, int]],
    dtypes: dict[str, str],
    device: str,
) -> pl.DataFrame:
    orig = timings["original"]
    rows = []
    for name, t in timings.items():
        mm, kk, nn = shapes[name]
        med = t.median_ns
        rows.append(
            {
                "variant": name,
                "m": mm,
                "k": kk,
                "n": nn,
                "dtype": dtypes[name],
                "device": device,
                "median_us": med / 1e3,
                "q1_us": t.q1_ns / 1e3,
                "q3_us": t.q3_ns / 1e3,
                "iqr_us": t.iqr_ns / 1e3,
                "repeats": len(t.samples_ns),
                "tflops": 2.0 * mm * kk * nn / med / 1e3 if mm * kk * nn else None,
                "speedup": orig.median_ns / med if med > 0 else None,
                "faster": name != "original" and b.is_faster(orig, t),
            }
        )
    return pl.DataFrame(rows, schema=SWEEP_SCHEMA)


def sweep_matmul(
    m: int,
    k: int,
    n: int,
    dtype: str = "float32",
    device: str = "auto",
    *,
    variants: Sequence[str] = MATMUL_VARIANTS,
    pad_to: int | None = None,
    bias: bool = False,
    transposed_b: bool = False,
    budget_s: float = 2.0,
) -> pl.DataFrame:
    """Time ``[m, k] @ [k, n]`` and each variant on ``device``; one row per variant.

    Columns: variant, m, k, n (the shape run), dtype, device, median_us, q1_us, q3_us, iqr_us,
    repeats, tflops, speedup (original median / variant median), faster (beyond the noise).
    ``linear``/``addmm`` fuse the bias when ``bias`` is set.
    """
    if min(m, k, n) <= 0:
        raise b.BenchError(f"matmul dims must be positive, got m={m} k={k} n={n}")
    dev = b.resolve_device(device)
    fns = matmul_variants(
        m,
        k,
        n,
        dtype,
        dev,
        variants=variants,
        pad_to=pad_to,
        bias=bias,
        transposed_b=transposed_b,
    )
    timings = b.time_variants({k_: v[0] for k_, v in fns.items()}, dev, budget_s)
    return _table(
        timings, {k_: v[1] for k_, v in fns.items()}, {k_: v[2] for k_, v in fns.items()}, dev
    )


def sweep_linear(
    m: int,
    k: int,
    n: int,
    dtype: str = "float32",
    device: str = "auto",
    *,
    budget_s: float = 2.0,
) -> pl.DataFrame:
    """The seed's layer: ``matmul(x, W.t()); += b`` vs contiguous weight vs ``F.linear``."""
    return sweep_matmul(
        m,
        k,
        n,
        dtype,
        device,
        variants=("original", "contiguous_b", "linear", "addmm"),
        bias=True,
        transposed_b=True,
        budget_s=budget_s,
    )


def attention_variants(
    shape: Sequence[int], kv_len: int, dtype: str, device: str
) -> dict[str, Callable[[], Any]]:
    """``softmax(q kᵀ · s) v`` written out vs ``F.scaled_dot_product_attention``."""
    torch = b.torch_mod()
    dt = b.torch_dtype(dtype)
    *batch, length, d = (int(x) for x in shape)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(*batch, length, d, generator=gen).to(device=device, dtype=dt)
    k = torch.randn(*batch, kv_len, d, generator=gen).to(device=device, dtype=dt)
    v = torch.randn(*batch, kv_len, d, generator=gen).to(device=device, dtype=dt)
    scale = d**-0.5

    def eager() -> Any:
        return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1) @ v

    return {
        "original": eager,
        "sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v),
    }


def optimizer_variants(
    name: str, shapes: Sequence[Sequence[int]], dtype: str, device: str
) -> dict[str, Callable[[], Any]]:
    """``optimizer.step()`` per parameter (``foreach=False``) vs ``foreach=True``."""
    torch = b.torch_mod()
    cls = getattr(torch.optim, name, None)
    if cls is None:
        raise b.BenchError(f"unknown optimizer {name!r}")
    dt = b.torch_dtype(dtype)
    out: dict[str, Callable[[], Any]] = {}
    for label, foreach in (("original", False), ("foreach", True)):
        params = [torch.zeros(*s, device=device, dtype=dt, requires_grad=True) for s in shapes]
        for p in params:
            p.grad = torch.full_like(p, 1e-3)
        opt = cls(params, lr=1e-3, foreach=foreach)
        out[label] = opt.step
    return out


CONV_VARIANTS = ("original", "padded_channels", "channels_last")
CONV_SCHEMA = {
    "variant": pl.String,
    "n": pl.Int64,
    "c": pl.Int64,
    "h": pl.Int64,
    "w": pl.Int64,
    "k": pl.Int64,
    "r": pl.Int64,
    "dtype": pl.String,
    "device": pl.String,
    "median_us": pl.Float64,
    "q1_us": pl.Float64,
    "q3_us": pl.Float64,
    "iqr_us": pl.Float64,
    "repeats": pl.Int64,
    "speedup": pl.Float64,
    "faster": pl.Boolean,
}


def sweep_conv(
    n: int,
    c: int,
    h: int,
    w: int,
    k: int,
    r: int = 3,
    dtype: str = "float32",
    device: str = "auto",
    *,
    variants: Sequence[str] = CONV_VARIANTS,
    pad_to: int | None = None,
    budget_s: float = 2.0,
) -> pl.DataFrame:
    """Time a 2-D convolution ``[n, c, h, w] * [k, c, r, r]`` (padding ``r // 2``) and its
    variants: channels padded to a multiple (``padded_channels``), NHWC memory format
    (``channels_last``). One row per variant, columns as :func:`sweep_matmul` with the conv
    shape instead of m/k/n."""
    if min(n, c, h, w, k, r) <= 0:
        raise b.BenchError("conv dims must be positive")
    torch = b.torch_mod()
    dev = b.resolve_device(device)
    dt_name = b.TORCH_DTYPES.get(dtype.lower(), dtype)
    dt = b.torch_dtype(dtype)
    if dev == "cpu" and 2.0 * n * k * c * h * w * r * r > CPU_MAX_FLOPS:
        raise b.BenchError("conv too large for a CPU micro-benchmark; run it on the device")
    mult = pad_to or default_pad(dev, dt_name)
    gen = torch.Generator().manual_seed(0)
    F = torch.nn.functional

    def build(cc: int, kk: int, fmt: Any) -> Callable[[], Any]:
        x = torch.randn(n, cc, h, w, generator=gen).to(device=dev, dtype=dt)
        wt = torch.randn(kk, cc, r, r, generator=gen).to(device=dev, dtype=dt)
        x, wt = x.contiguous(memory_format=fmt), wt.contiguous(memory_format=fmt)
        return lambda: F.conv2d(x, wt, padding=r // 2)

    fns: dict[str, tuple[Callable[[], Any], tuple[int, int]]] = {}
    for v in ("original", *[x for x in variants if x != "original"]):
        if v in ("original", "identity"):
            fns[v] = (build(c, k, torch.contiguous_format), (c, k))
        elif v == "padded_channels":
            pc, pk = _pad(c, mult), _pad(k, mult)
            fns[v] = (build(pc, pk, torch.contiguous_format), (pc, pk))
        elif v == "channels_last":
            fns[v] = (build(c, k, torch.channels_last), (c, k))
        else:
            raise b.BenchError(f"unknown conv variant {v!r} ({', '.join(CONV_VARIANTS)})")
    t = b.time_variants({name: f for name, (f, _) in fns.items()}, dev, budget_s)
    orig = t["original"]
    rows = [
        {
            "variant": name,
            "n": n,
            "c": fns[name][1][0],
            "h": h,
            "w": w,
            "k": fns[name][1][1],
            "r": r,
            "dtype": dt_name,
            "device": dev,
            "median_us": tm.median_ns / 1e3,
            "q1_us": tm.q1_ns / 1e3,
            "q3_us": tm.q3_ns / 1e3,
            "iqr_us": tm.iqr_ns / 1e3,
            "repeats": len(tm.samples_ns),
            "speedup": orig.median_ns / tm.median_ns,
            "faster": name != "original" and b.is_faster(orig, tm),
        }
        for name, tm in t.items()
    ]
    return pl.DataFrame(rows, schema=CONV_SCHEMA)


# A CPU elementwise micro-benchmark touching more bytes than this per call is refused.
CPU_MAX_BYTES = 2e8
# Elementwise ops a micro-benchmark can rebuild from a trace's shapes: unary (one tensor),
# binary (two tensors, or a tensor and a scalar), and the row-wise ones on the last axis.
UNARY_OPS = {
    "relu": "relu", "gelu": "nn.functional.gelu", "silu": "nn.functional.silu",
    "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "neg": "neg", "abs": "abs",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "clone": "clone", "contiguous": "clone",
    "copy_": "clone", "to": "clone", "dropout": "clone",
}  # fmt: skip
BINARY_OPS = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "maximum",
    "minimum": "minimum", "pow": "pow", "add_": "add", "mul_": "mul", "div_": "div",
}  # fmt: skip
ROW_OPS = ("softmax", "_softmax", "log_softmax", "layer_norm", "rms_norm")


def _resolve(torch: Any, path: str) -> Callable[..., Any]:
    obj: Any = torch
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return]


def elementwise_variants(
    name: str, shapes: Sequence[Sequence[int]], dtype: str, device: str, *, compile: bool = True
) -> dict[str, Callable[[], Any]]:
    """The elementwise / row-wise op ``name`` (``aten::mul``) on fresh contiguous inputs of
    ``shapes`` (an empty shape is a Python scalar), eager (``original``) and, with
    ``compile``, through ``torch.compile`` (``compiled``: one generated, vectorised kernel;
    a :class:`~opscope.advise._bench.BenchError` when the compiler cannot run here)."""
    torch = b.torch_mod()
    op = name.rsplit("::", maxsplit=1)[-1]
    dt = b.torch_dtype(dtype)
    tensors = [[int(x) for x in s] for s in shapes if s]
    if not tensors:
        raise b.BenchError(f"no tensor shape for {name}")
    size = b.torch_dtype(dtype).itemsize
    nbytes = sum(math.prod(s) for s in tensors) * size * 2
    if device == "cpu" and nbytes > CPU_MAX_BYTES:
        raise b.BenchError(
            f"{name} on {nbytes / 1e9:.1f} GB is too large for a CPU micro-benchmark; "
            "run it on the device"
        )
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(*s, generator=gen).to(device=device, dtype=dt) for s in tensors]
    fn: Callable[[], Any]
    if op in UNARY_OPS:
        f1 = _resolve(torch, UNARY_OPS[op])
        x0 = xs[0]

        def fn() -> Any:
            return f1(x0)

    elif op in BINARY_OPS:
        f2 = _resolve(torch, BINARY_OPS[op])
        # a scalar operand (shape [] in the trace) stays a Python number
        a0 = xs[0]
        a1: Any = xs[1] if len(xs) > 1 else 1.5

        def fn() -> Any:
            return f2(a0, a1)

    elif op in ROW_OPS:
        x0 = xs[0]
        F = torch.nn.functional
        if op in ("softmax", "_softmax"):
            fn = lambda: torch.softmax(x0, dim=-1)  # noqa: E731
        elif op == "log_softmax":
            fn = lambda: torch.log_softmax(x0, dim=-1)  # noqa: E731
        elif op == "layer_norm":
            fn = lambda: F.layer_norm(x0, x0.shape[-1:])  # noqa: E731
        else:
            w = torch.ones(x0.shape[-1], device=device, dtype=dt)
            fn = lambda: x0 * torch.rsqrt(x0.pow(2).mean(-1, keepdim=True) + 1e-6) * w  # noqa: E731
    else:
        raise b.BenchError(f"no micro-benchmark for elementwise op {name!r}")
    if not compile:
        return {"original": fn}
    return {"original": fn, "compiled": _compiled(torch, fn)}


def _compiled(torch: Any, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``torch.compile(fn)``, its first call made here so that a missing compiler (no C++
    toolchain, no Triton) is a :class:`~opscope.advise._bench.BenchError`, not a crash."""
    try:
        cfn = torch.compile(fn, dynamic=False)
        cfn()
    except Exception as e:  # the compiler stack raises many types; any means "cannot compile"
        msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise b.BenchError(f"torch.compile is not available here: {msg}") from None
    return cfn  # type: ignore[no-any-return]


def conv_variants(
    x: Sequence[int],
    w: Sequence[int],
    dtype: str,
    device: str,
    *,
    stride: int = 1,
    padding: int | None = None,
) -> dict[str, Callable[[], Any]]:
    """A 2-D convolution ``x [N, C, H, W] * w [K, C/groups, R, S]`` (groups = C / w[1]:
    depthwise when w[1] is 1; padding ``R // 2`` unless given) in NCHW (``original``) and in
    channels-last (``channels_last``) memory format."""
    torch = b.torch_mod()
    if len(x) != 4 or len(w) != 4 or min(*x, *w) <= 0:
        raise b.BenchError(f"not a 2-D convolution: input {list(x)}, weight {list(w)}")
    n, c, h, wd = (int(v) for v in x)
    k, cg, r, s = (int(v) for v in w)
    if c % cg or k % (c // cg):
        raise b.BenchError(f"channels {c} and weight {list(w)} give no whole number of groups")
    groups = c // cg
    pad = r // 2 if padding is None else padding
    flops = 2.0 * n * k * h * wd * cg * r * s / stride**2
    if device == "cpu" and flops > CPU_MAX_FLOPS:
        raise b.BenchError(
            f"conv of {flops:.2g} FLOP is too large for a CPU micro-benchmark; run it on the device"
        )
    dt = b.torch_dtype(dtype)
    gen = torch.Generator().manual_seed(0)
    F = torch.nn.functional

    def build(fmt: Any) -> Callable[[], Any]:
        xt = torch.randn(n, c, h, wd, generator=gen).to(device=device, dtype=dt)
        wt = torch.randn(k, cg, r, s, generator=gen).to(device=device, dtype=dt)
        xt, wt = xt.contiguous(memory_format=fmt), wt.contiguous(memory_format=fmt)
        return lambda: F.conv2d(xt, wt, stride=stride, padding=pad, groups=groups)

    return {
        "original": build(torch.contiguous_format),
        "channels_last": build(torch.channels_last),
    }


def sdpa_variants(
    shape: Sequence[int], dtype: str, device: str, fix: str
) -> tuple[dict[str, Callable[[], Any]], float]:
    """``F.scaled_dot_product_attention`` on q = k = v of ``shape`` [..., L, d] (``original``)
    and a variant (``fix``) doing a known multiple of its work: ``headdim:D`` (the head dim D,
    the step the kernel computes anyway) or ``batch:N`` (N calls packed into one, along the
    first axis). Returns the callables and the fix's work over the original's (to compare
    rates, not times)."""
    torch = b.torch_mod()
    dt = b.torch_dtype(dtype)
    dims = [int(x) for x in shape]
    if len(dims) < 3 or min(dims) <= 0:
        raise b.BenchError(f"not an attention input shape: {dims}")
    kind, _, arg = fix.partition(":")
    if kind == "headdim":
        fdims, ratio = [*dims[:-1], int(arg)], int(arg) / dims[-1]
    elif kind == "batch":
        fdims, ratio = [dims[0] * int(arg), *dims[1:]], float(int(arg))
    else:
        raise b.BenchError(f"unknown attention variant {fix!r} (headdim:D, batch:N)")
    work = 4.0 * math.prod(fdims[:-2]) * fdims[-2] ** 2 * fdims[-1]
    if device == "cpu" and work > CPU_MAX_FLOPS:
        raise b.BenchError(f"attention of {work:.2g} FLOP is too large for a CPU micro-benchmark")
    gen = torch.Generator().manual_seed(0)
    F = torch.nn.functional

    def build(ds: list[int]) -> Callable[[], Any]:
        q, k, v = (torch.randn(*ds, generator=gen).to(device=device, dtype=dt) for _ in range(3))
        return lambda: F.scaled_dot_product_attention(q, k, v)

    return {"original": build(dims), "fix": build(fdims)}, ratio
