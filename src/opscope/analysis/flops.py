"""FLOP and byte models per operator call, from recorded input shapes, dtypes and arguments.

Our own formulas (documented in ``docs/roofline.md``), applied once per *unique*
``(name, input_dims, input_types, concrete_inputs)`` and joined back to the events, so the cost of
a profile with millions of calls is the cost of its few thousand distinct shapes.

- :func:`op_costs` — host operators (Kineto ``cpu_op`` rows, Ascend operator rows).
- :func:`ascend_kernel_costs` — Ascend kernel rows (``MatMulV2``, ``Conv2D``, ...), whose
  ``input_dims`` come from ``kernel_details.csv``'s ``Input Shapes``.

``flops`` and ``bytes`` are null when the operator has no formula here (``formula`` says
``"unknown"``). ``bytes`` is the minimum DRAM traffic: every input read once, the output written
once. ``roof`` says which compute peak applies: ``"matrix"`` (tensor/cube units: matmul,
convolution, attention), ``"vector"`` (elementwise, reductions, norms) or ``"memory"`` (copies,
gathers: bytes only).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any, Final, NamedTuple

import msgspec
import numpy as np
import polars as pl

from opscope.analysis import tree
from opscope.analysis.tree import per_profile
from opscope.model import Profile, dtypes
from opscope.model.dtypes import SCALAR_TYPE_CODES

# FLOPs per output element of elementwise operators. Simple arithmetic is 1 (torch's own counter
# counts add and mul as numel). Transcendentals are costed as the few FMAs their fast
# approximations take; the exact figure matters little because these operators sit far left of
# the ridge point (memory-bound) on every device.
_ELEMENTWISE: Final[dict[str, int]] = {
    "add": 1,
    "sub": 1,
    "rsub": 1,
    "mul": 1,
    "div": 1,
    "neg": 1,
    "abs": 1,
    "relu": 1,
    "relu6": 1,
    "leaky_relu": 2,
    "hardtanh": 2,
    "threshold": 1,
    "threshold_backward": 1,
    "clamp": 2,
    "clamp_min": 1,
    "clamp_max": 1,
    "maximum": 1,
    "minimum": 1,
    "where": 1,
    "masked_fill": 1,
    "eq": 1,
    "ne": 1,
    "lt": 1,
    "le": 1,
    "gt": 1,
    "ge": 1,
    "sign": 1,
    "reciprocal": 1,
    "square": 1,
    "sqrt": 2,
    "rsqrt": 2,
    "exp": 4,
    "exp2": 4,
    "log": 4,
    "log1p": 4,
    "pow": 4,
    "sin": 4,
    "cos": 4,
    "tanh": 6,
    "sigmoid": 5,
    "silu": 6,
    "gelu": 8,
    "erf": 6,
    "hardswish": 4,
    "hardsigmoid": 3,
    "mish": 10,
    "softplus": 6,
    "elu": 5,
    "addcmul": 3,
    "addcdiv": 3,
    "lerp": 3,
    "gelu_backward": 10,
    "sigmoid_backward": 2,
    "tanh_backward": 2,
    "silu_backward": 8,
    "hardswish_backward": 4,
    "native_dropout": 2,
    "dropout": 2,
    "native_dropout_backward": 1,
    "bernoulli": 2,
    "fill": 0,
    "zero": 0,
    "zeros_like": 0,
    "ones_like": 0,
    "full_like": 0,
}
_COMPARISONS: Final = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})

# FLOPs per input element of reductions (one add/compare each; var/std/norm also square).
_REDUCTIONS: Final[dict[str, int]] = {
    "sum": 1,
    "mean": 1,
    "max": 1,
    "min": 1,
    "amax": 1,
    "amin": 1,
    "argmax": 1,
    "argmin": 1,
    "prod": 1,
    "all": 1,
    "any": 1,
    "var": 3,
    "std": 3,
    "var_mean": 3,
    "std_mean": 3,
    "norm": 2,
    "linalg_vector_norm": 2,
    "logsumexp": 6,
}

# Normalisations: FLOPs per element. layer norm: mean (1) + variance (2) + normalise (2) +
# affine (2) ~ 7; RMS norm: square-sum (2) + scale (1) + weight (1) = 4; batch norm in training
# computes the statistics like layer norm; group norm likewise.
_NORMS: Final[dict[str, int]] = {
    "layer_norm": 7,
    "native_layer_norm": 7,
    "rms_norm": 4,
    "_fused_rms_norm": 4,
    "fused_rms_norm": 4,
    "npu_rms_norm": 4,
    "batch_norm": 7,
    "native_batch_norm": 7,
    "_native_batch_norm_legit": 7,
    "_native_batch_norm_legit_no_training": 4,
    "cudnn_batch_norm": 7,
    "miopen_batch_norm": 7,
    "_batch_norm_impl_index": 7,
    "instance_norm": 7,
    "group_norm": 7,
    "native_group_norm": 7,
}
_NORM_BACKWARD: Final[dict[str, int]] = {
    "native_layer_norm_backward": 10,
    "native_batch_norm_backward": 10,
    "cudnn_batch_norm_backward": 10,
    "miopen_batch_norm_backward": 10,
    "_batch_norm_impl_index_backward": 10,
    "native_group_norm_backward": 10,
    "_fused_rms_norm_backward": 6,
    "npu_rms_norm_backward": 6,
}

_COPIES: Final = frozenset({"copy_", "clone", "_to_copy", "_copy_from", "_copy_from_and_resize"})
_GATHERS: Final = frozenset({"embedding", "index_select", "npu_embedding"})

_CONV_FORWARD: Final = frozenset(
    {
        "conv1d",
        "conv2d",
        "conv3d",
        "convolution",
        "_convolution",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "mkldnn_convolution",
        "cudnn_convolution",
        "cudnn_convolution_transpose",
        "miopen_convolution",
        "thnn_conv2d",
        "_slow_conv2d_forward",
        "slow_conv3d",
        "slow_conv3d_forward",
        "_nnpack_spatial_convolution",
        "npu_convolution",
    }
)

# Attention entry points: name -> layout of q/k/v ("bhsd": [B, H, S, D]; "bshd": [B, S, H, D]).
_ATTENTION: Final[dict[str, str]] = {
    "scaled_dot_product_attention": "bhsd",
    "_scaled_dot_product_flash_attention": "bhsd",
    "_scaled_dot_product_efficient_attention": "bhsd",
    "_scaled_dot_product_cudnn_attention": "bhsd",
    "_scaled_dot_product_attention_math": "bhsd",
    "_scaled_dot_product_flash_attention_for_cpu": "bhsd",
    "_scaled_dot_product_fused_attention_overrideable": "bhsd",
    "_flash_attention_forward": "bshd",
    "_efficient_attention_forward": "bshd",
}
_ATTENTION_BACKWARD: Final[dict[str, str]] = {
    "_scaled_dot_product_flash_attention_backward": "bhsd",
    "_scaled_dot_product_efficient_attention_backward": "bhsd",
    "_scaled_dot_product_cudnn_attention_backward": "bhsd",
    "_scaled_dot_product_flash_attention_for_cpu_backward": "bhsd",
    "_flash_attention_backward": "bshd",
    "_efficient_attention_backward": "bshd",
}
# Backward of matmul-like work: grad of each operand is one matmul of the forward's size, so 2x
# (torch.utils.flop_counter uses the same factor).
BACKWARD_FACTOR: Final = 2


class Cost(NamedTuple):
    """The modelled cost of one operator call."""

    # a named tuple, not a frozen dataclass: one or two are built per distinct call (~560 on a
    # 4.8k-event rank), where the dataclass's field-by-field __init__ cost 0.35 us more each

    flops: int | None
    bytes: int | None
    formula: str
    dtype: str | None = None  # dtype class of the compute: "fp32", "bf16", ...
    roof: str | None = None  # "matrix", "vector" or "memory"


UNKNOWN: Final = Cost(None, None, "unknown")
#: A Cost or a tensor built from the tuple of its fields (its class's __new__ is a Python call
#: more, once per distinct call or tensor argument).
_new: Final = tuple.__new__


class _Tensor(NamedTuple):
    # a named tuple, not a frozen dataclass: built once per tensor argument of every distinct
    # call (~2k on a 4.8k-event rank), where the dataclass's field-by-field __init__ was a third
    # of the tensors' time
    # numel and nbytes stored, not properties: the formulas read them several times per
    # distinct call, each read a Python call and a math.prod
    shape: tuple[int, ...]
    size: int  # element size in bytes
    dtype: str
    numel: int
    nbytes: int


def _tensor(shape: tuple[int, ...], size: int, dtype: str) -> _Tensor:
    """A tensor argument of this shape, element size and dtype class."""
    numel = math.prod(shape)
    return tuple.__new__(_Tensor, (shape, size, dtype, numel, numel * size))


@functools.lru_cache(maxsize=1 << 10)
def dtype_info(type_name: str | None) -> tuple[int, str] | None:
    """``(element size in bytes, peak class)`` for a profiler dtype string, else None.

    Accepts every spelling :mod:`opscope.model.dtypes` knows: Kineto's ``"float"``,
    ``"c10::BFloat16"``, Ascend's ``"FLOAT16"``, ``"DT_BF16"``...
    """
    # cached: a pure function of the spelling, of which a trace has a handful, asked for every
    # tensor argument of every distinct call
    d = dtypes.lookup(type_name)
    return (d.itemsize, d.peak) if d is not None else None


def _decode(text: str | None) -> Any:
    if text is None or text == "":
        return None
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None


_INT: Final = frozenset({int})


def _is_shape(x: Any) -> bool:
    # a decoded JSON list whose entries are all ints: by their exact type (a JSON true or false
    # decodes to a bool, whose type is not int), in one C-level pass, not a generator of two
    # isinstance checks per entry (asked for every argument of every distinct call)
    return isinstance(x, list) and (not x or _INT.issuperset(map(type, x)))


def _infos(types: Any) -> list[tuple[int, str] | None]:
    """Per argument of decoded "Input type" ``types``, its :func:`dtype_info` (None for a
    non-string)."""
    if not isinstance(types, list):
        return []
    return [dtype_info(t) if type(t) is str else None for t in types]


def _tensors_of(dims: Any, infos: list[tuple[int, str] | None]) -> list[_Tensor | None]:
    """One entry per argument: a tensor (shape, element size) or None for non-tensors, from
    the decoded "Input Dims" and the arguments' dtypes as :func:`_infos` gives them."""
    if not isinstance(dims, list):
        return []
    nt = len(infos)
    out: list[_Tensor | None] = []
    new, ints, prod = tuple.__new__, _INT, math.prod
    for i, d in enumerate(dims):
        info = infos[i] if i < nt else None
        # _is_shape inline (every entry an int: int(v) was the identity), the tensor built as
        # the tuple it is (its class's __new__ is one Python call more per argument)
        if info is None or type(d) is not list or (d and not ints.issuperset(map(type, d))):
            out.append(None)
        else:
            shape = tuple(d)
            numel = prod(shape)
            out.append(new(_Tensor, (shape, info[0], info[1], numel, numel * info[0])))
    return out


#: "Input Dims" whose every argument is a shape: a list of lists of JSON integers (msgspec's
#: int refuses a bool and a float, as :func:`_is_shape` does), each as the tuple a tensor keeps.
_SHAPES: Final = msgspec.json.Decoder(list[tuple[int, ...]])


#: Per dtype (as :func:`dtype_info` gives it), the tensors of each shape already made (one
#: :func:`op_costs` call's: a shape recurs across its distinct calls, 341 of 1762 tensor
#: arguments distinct on a 4.8k-event rank).
_TensorMemo = dict[tuple[int, str], dict[tuple[int, ...], _Tensor]]


def _arg_tensors(
    dims: str | None, infos: list[tuple[int, str] | None], memo: _TensorMemo
) -> list[_Tensor | None]:
    """``_tensors_of(_decode(dims), infos)``: by one typed decode when every argument is a
    shape (the checks per entry and the copies to tuples done by msgspec), else as that."""
    if not dims:
        return []
    try:
        shapes = _SHAPES.decode(dims)
    except msgspec.DecodeError:  # (a list of tensors, a string... among the arguments)
        return _tensors_of(_decode(dims), infos)
    if len(infos) < len(shapes):
        infos = infos + [None] * (len(shapes) - len(infos))
    out: list[_Tensor | None] = []
    add = out.append
    for sh, info in zip(shapes, infos, strict=False):
        if info is None:
            add(None)
            continue
        made = memo.get(info)
        if made is None:
            made = memo[info] = {}
        t = made.get(sh)
        if t is None:
            n = math.prod(sh)
            t = made[sh] = _new(_Tensor, (sh, info[0], info[1], n, n * info[0]))
        add(t)
    return out


_PY_JSON: Final = {"True": "true", "False": "false", "None": "null"}


def _concrete(concrete: Any, i: int) -> Any:
    """Argument ``i`` of "Concrete Inputs", parsed ("[1, 1]" -> [1, 1], "True" -> True)."""
    if not isinstance(concrete, list) or i >= len(concrete):
        return None
    v = concrete[i]
    if not isinstance(v, str):
        return v
    s = v.strip()
    if s == "":
        return None
    if s in ("True", "False"):
        return s == "True"
    if s.startswith("["):  # Python reprs of lists: "[False, True, True]", "[1, 1]"
        js = re.sub(r"\b(True|False|None)\b", lambda m: _PY_JSON[m.group(1)], s)
        s_json = js.replace("'", '"')
    else:
        s_json = s
    try:
        return msgspec.json.decode(s_json)
    except msgspec.DecodeError:
        return s


def _broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    # the common case, operands of one shape beside scalars (shape ()), is that shape (what
    # the fold below gives for dims >= 0: max(x, x), or 0 for a 0; a () leaves a shape of such
    # dims as it is), without the per-dim fold (an elementwise op with a scalar operand: most
    # of the fold's calls)
    shaped = [sh for sh in shapes if sh]
    if not shaped:
        return ()
    first = shaped[0]
    if all(sh == first for sh in shaped) and min(first) >= 0:
        return first

    def two(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        n = max(len(a), len(b))
        a2 = (1,) * (n - len(a)) + a
        b2 = (1,) * (n - len(b)) + b
        return tuple(max(x, y) if min(x, y) != 0 else 0 for x, y in zip(a2, b2, strict=True))

    return reduce(two, shapes, ())


#: The dtype classes :func:`_first_float` prefers.
_FLOAT_CLASSES: Final = frozenset({"fp64", "fp32", "fp16", "bf16", "fp8"})


def _first_float(ts: Sequence[_Tensor | None]) -> _Tensor | None:
    for t in ts:
        if t is not None and t.dtype in _FLOAT_CLASSES:
            return t
    return next((t for t in ts if t is not None), None)


def base_name(name: str) -> str:
    """The operator's own name: ``"aten::addmm"`` -> ``"addmm"``, ``"npu::x"`` -> ``"x"``.

    Overloads (``"aten::add.Tensor"``) lose their suffix.
    """
    n = name.rsplit("::", 1)[-1].strip()
    if "." in n:
        n = n.split(".", 1)[0]
    return n


# Matmul family ----------------------------------------------------------------------------------


_MATMUL_AB: Final = frozenset({"mm", "bmm", "matmul", "linear", "npu_linear"})
_LINEAR: Final = frozenset({"linear", "npu_linear"})


def _matmul(ts: list[_Tensor | None], name: str) -> Cost:
    # one Cost built of the operands' sums, not a Cost renamed (the formula's name) and a list
    # of the operands summed and searched by helpers: ~270 of the 560 distinct calls of a
    # 4.8k-event rank are matmuls
    tens = [t for t in ts if t is not None]
    extra: _Tensor | None = None  # the operand read besides a and b: a bias, addmm's input
    if name in _MATMUL_AB:
        if len(tens) < 2:
            return UNKNOWN
        a, b = tens[0], tens[1]
        if len(tens) > 2 and name in _LINEAR:
            extra = tens[2]
    else:  # _addmm_activation, addmm, baddbmm, addbmm: (input, mat1, mat2)
        if len(tens) < 3:
            return UNKNOWN
        a, b = tens[1], tens[2]
        # (_addmm_activation's third operand read is mat2's slot, as linear's bias is)
        extra = tens[2] if name == "_addmm_activation" else tens[0]
    sa, sb = a.shape, b.shape
    batch = out_batch = 1
    if name in _LINEAR:
        if not sa or len(sb) != 2 or sa[-1] != sb[1]:
            return UNKNOWN
        k = sa[-1]
        m, n = a.numel // max(k, 1) if k else 0, sb[0]
        formula = "linear: 2*M*N*K"
    elif not sa or not sb:
        return UNKNOWN
    elif len(sa) == 1 and len(sb) == 1:
        if sa[0] != sb[0]:
            return UNKNOWN
        m, n, k = 1, 1, sa[0]
        formula = "dot: 2*K"
    else:
        sa2 = (1, sa[0]) if len(sa) == 1 else sa
        sb2 = (sb[0], 1) if len(sb) == 1 else sb
        m, k = sa2[-2], sa2[-1]
        k2, n = sb2[-2], sb2[-1]
        if k != k2:
            return UNKNOWN
        if len(sa2) > 2 or len(sb2) > 2:  # (no batch dims: a batch of 1)
            batch = out_batch = math.prod(_broadcast([sa2[:-2], sb2[:-2]]))
        if name == "addbmm":  # sums over the batch: the output is [M, N]
            out_batch = 1
            formula = "addbmm: 2*B*M*N*K"
        else:
            formula = f"{name}: {'2*M*N*K' if batch == 1 else '2*B*M*N*K'}"
    # every operand read once, the output written once; the compute's dtype the first
    # floating operand's (a, b, then the extra), else a's
    nbytes = a.nbytes + b.nbytes + out_batch * m * n * a.size
    dtype = a.dtype if a.dtype in _FLOAT_CLASSES or b.dtype not in _FLOAT_CLASSES else b.dtype
    if extra is not None:
        nbytes += extra.nbytes
        if dtype not in _FLOAT_CLASSES and extra.dtype in _FLOAT_CLASSES:
            dtype = extra.dtype
    return _new(Cost, (2 * batch * m * n * k, nbytes, formula, dtype, "matrix"))


# Convolution ------------------------------------------------------------------------------------


def _as_list(v: Any, n: int, default: int) -> list[int]:
    if isinstance(v, bool) or v is None:
        return [default] * n
    if isinstance(v, int):
        return [v] * n
    if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
        return [int(x) for x in v] * (n if len(v) == 1 else 1) if len(v) in (1, n) else []
    return []


# Where stride / padding / dilation / transposed / output_padding sit in each signature.
_CONV_ARGS: Final[dict[str, dict[str, int]]] = {
    "conv1d": {"stride": 3, "padding": 4, "dilation": 5, "groups": 6},
    "conv2d": {"stride": 3, "padding": 4, "dilation": 5, "groups": 6},
    "conv3d": {"stride": 3, "padding": 4, "dilation": 5, "groups": 6},
    "convolution": {
        "stride": 3,
        "padding": 4,
        "dilation": 5,
        "transposed": 6,
        "out_pad": 7,
        "groups": 8,
    },
    "_convolution": {
        "stride": 3,
        "padding": 4,
        "dilation": 5,
        "transposed": 6,
        "out_pad": 7,
        "groups": 8,
    },
    "conv_transpose1d": {
        "stride": 3,
        "padding": 4,
        "out_pad": 5,
        "dilation": 7,
        "groups": 6,
        "T": 1,
    },
    "conv_transpose2d": {
        "stride": 3,
        "padding": 4,
        "out_pad": 5,
        "dilation": 7,
        "groups": 6,
        "T": 1,
    },
    "conv_transpose3d": {
        "stride": 3,
        "padding": 4,
        "out_pad": 5,
        "dilation": 7,
        "groups": 6,
        "T": 1,
    },
    "mkldnn_convolution": {"padding": 3, "stride": 4, "dilation": 5},
    "cudnn_convolution": {"padding": 2, "stride": 3, "dilation": 4},
    "miopen_convolution": {"padding": 3, "stride": 4, "dilation": 5},
    "cudnn_convolution_transpose": {
        "padding": 2,
        "out_pad": 3,
        "stride": 4,
        "dilation": 5,
        "groups": 6,
        "T": 1,
    },
    "thnn_conv2d": {"stride": 4, "padding": 5},
    "_slow_conv2d_forward": {"stride": 4, "padding": 5},
    "slow_conv3d": {"stride": 4, "padding": 5},
    "slow_conv3d_forward": {"stride": 4, "padding": 5},
    "_nnpack_spatial_convolution": {"padding": 3, "stride": 4},
    "npu_convolution": {"stride": 3, "padding": 4, "dilation": 5},
}


def conv_output_spatial(
    spatial: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int] | str,
    dilation: Sequence[int],
    *,
    transposed: bool = False,
    output_padding: Sequence[int] | None = None,
) -> list[int]:
    """Output spatial sizes of a convolution (PyTorch's formulas, ``padding="same"`` too)."""
    if isinstance(padding, str):
        if padding == "same":
            return list(spatial)
        padding = [0] * len(spatial)
    out_pad = output_padding or [0] * len(spatial)
    if transposed:
        return [
            (i - 1) * s - 2 * p + d * (k - 1) + op + 1
            for i, k, s, p, d, op in zip(
                spatial, kernel, stride, padding, dilation, out_pad, strict=True
            )
        ]
    return [
        (i + 2 * p - d * (k - 1) - 1) // s + 1
        for i, k, s, p, d in zip(spatial, kernel, stride, padding, dilation, strict=True)
    ]


def _conv_flops(x: _Tensor, w: _Tensor, out_spatial: Sequence[int], transposed: bool) -> int:
    if transposed:
        # weight [C_in, C_out/g, *k]: every input element scatters into C_out/g * prod(k) outputs
        return 2 * x.numel * w.shape[1] * math.prod(w.shape[2:])
    # weight [C_out, C_in/g, *k]: every output element is a dot product of C_in/g * prod(k)
    return 2 * x.shape[0] * w.shape[0] * math.prod(out_spatial) * math.prod(w.shape[1:])


def _conv(ts: list[_Tensor | None], concrete: Any, name: str) -> Cost:
    if len(ts) < 2 or ts[0] is None or ts[1] is None:
        return UNKNOWN
    x, w = ts[0], ts[1]
    nd = len(x.shape) - 2
    if nd < 1 or len(w.shape) != nd + 2:
        return UNKNOWN
    spec = _CONV_ARGS.get(name, {})
    transposed = bool(spec.get("T")) or (
        "transposed" in spec and _concrete(concrete, spec["transposed"]) is True
    )
    if concrete is None:
        # stride and padding change the output size by 4x or more: guessing them would give
        # figures beyond the device's peak (old traces record no Concrete Inputs)
        return Cost(None, None, "conv: stride/padding not recorded (no Concrete Inputs)")
    stride = _as_list(_concrete(concrete, spec["stride"]) if "stride" in spec else None, nd, 1)
    pad_raw = _concrete(concrete, spec["padding"]) if "padding" in spec else None
    padding: list[int] | str = (
        pad_raw if isinstance(pad_raw, str) and pad_raw in ("same", "valid") else []
    )
    if not padding:
        padding = _as_list(pad_raw, nd, 0)
    dil = _as_list(_concrete(concrete, spec["dilation"]) if "dilation" in spec else None, nd, 1)
    out_pad = _as_list(_concrete(concrete, spec["out_pad"]) if "out_pad" in spec else None, nd, 0)
    if not stride or not dil or (isinstance(padding, list) and not padding) or not out_pad:
        return UNKNOWN
    out_sp = conv_output_spatial(
        x.shape[2:],
        w.shape[2:],
        stride,
        padding,
        dil,
        transposed=transposed,
        output_padding=out_pad,
    )
    if any(v <= 0 for v in out_sp):
        return UNKNOWN
    # transposed weights are [C_in, C_out/g, *k]: C_out needs the groups argument
    groups = _concrete(concrete, spec["groups"]) if "groups" in spec else None
    groups = groups if isinstance(groups, int) and not isinstance(groups, bool) else 1
    c_out = w.shape[1] * max(groups, 1) if transposed else w.shape[0]
    flops = _conv_flops(x, w, out_sp, transposed)
    bias = ts[2] if len(ts) > 2 and ts[2] is not None else None
    out_bytes = x.shape[0] * c_out * math.prod(out_sp) * x.size
    nbytes = x.nbytes + w.nbytes + (bias.nbytes if bias else 0) + out_bytes
    label = f"conv{nd}d{'_transpose' if transposed else ''}: 2*N*Cout*prod(out)*Cin/g*prod(k)"
    return Cost(flops, nbytes, label, x.dtype, "matrix")


def _conv_backward(ts: list[_Tensor | None], concrete: Any) -> Cost:
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    #                      transposed, output_padding, groups, output_mask)
    if len(ts) < 3 or ts[0] is None or ts[1] is None or ts[2] is None:
        return UNKNOWN
    g, x, w = ts[0], ts[1], ts[2]
    transposed = _concrete(concrete, 7) is True
    fwd = _conv_flops(x, w, g.shape[2:], transposed)
    mask = _concrete(concrete, 10)
    if not (isinstance(mask, list) and len(mask) >= 2):
        mask = [True, True, True]
    n_grads = int(bool(mask[0])) + int(bool(mask[1]))
    nbytes = g.nbytes + x.nbytes + w.nbytes
    nbytes += (x.nbytes if mask[0] else 0) + (w.nbytes if mask[1] else 0)
    return Cost(
        fwd * n_grads,
        nbytes,
        f"convolution_backward: {n_grads} x forward conv FLOPs (output_mask)",
        x.dtype,
        "matrix",
    )


# Attention --------------------------------------------------------------------------------------


def _attn_dims(
    q: _Tensor, k: _Tensor, v: _Tensor, layout: str
) -> tuple[int, int, int, int, int] | None:
    """(batch*heads, Lq, Lk, Dqk, Dv) from q/k/v of one layout."""
    if len(q.shape) < 3 or len(k.shape) != len(q.shape) or len(v.shape) != len(q.shape):
        return None
    if layout == "bhsd":
        bh = math.prod(q.shape[:-2])
        return bh, q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    if layout == "bshd" and len(q.shape) == 4:
        return q.shape[0] * q.shape[2], q.shape[1], k.shape[1], q.shape[3], v.shape[3]
    return None


def _attention(ts: list[_Tensor | None], concrete: Any, name: str, backward: bool) -> Cost:
    tens = [t for t in ts if t is not None]
    off = 1 if backward else 0  # backward: (grad_out, q, k, v, out, ...)
    if len(tens) < 3 + off:
        return UNKNOWN
    q, k, v = tens[off], tens[off + 1], tens[off + 2]
    layout = (_ATTENTION_BACKWARD if backward else _ATTENTION)[name]
    dims = _attn_dims(q, k, v, layout)
    if dims is None:
        return UNKNOWN
    bh, lq, lk, dqk, dv = dims
    flops = 2 * bh * lq * lk * dqk + 2 * bh * lq * lk * dv  # Q @ K^T and P @ V
    causal = False
    if name == "scaled_dot_product_attention":
        causal = _concrete(concrete, 5) is True
    elif name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_cudnn_attention"):
        causal = _concrete(concrete, 4) is True
    label = "attention: 2*B*H*Lq*Lk*(Dqk+Dv)"
    if causal:
        flops //= 2
        label += " / 2 (causal)"
    out_bytes = bh * lq * dv * q.size
    nbytes = q.nbytes + k.nbytes + v.nbytes + out_bytes
    if backward:
        flops *= BACKWARD_FACTOR
        nbytes = 2 * nbytes + out_bytes  # reads q,k,v,out,grad_out; writes dq,dk,dv
        label = f"attention backward: {BACKWARD_FACTOR} x ({label.split(': ', 1)[1]})"
    return Cost(flops, nbytes, label, q.dtype, "matrix")


def _npu_fusion_attention(ts: list[_Tensor | None], concrete: Any, backward: bool) -> Cost:
    # npu_fusion_attention(query, key, value, head_num, input_layout, ...)
    # npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, ...)
    tens = [t for t in ts[:3] if t is not None]
    if len(tens) < 3:
        return UNKNOWN
    q, k, v = tens
    layout = _concrete(concrete, 5 if backward else 4)
    heads = _concrete(concrete, 4 if backward else 3)
    layout = layout.upper() if isinstance(layout, str) else None
    sq = sk = hq = hv = 0
    if layout in ("BSH", "SBH") and len(q.shape) == 3:
        si = 1 if layout == "BSH" else 0
        bi = 1 - si
        sq, sk, hq, hv = q.shape[si], k.shape[si], q.shape[2], v.shape[2]
        b = q.shape[bi]
        if isinstance(heads, int) and heads > 0 and k.shape[2] != q.shape[2]:
            hv = v.shape[2] * (q.shape[2] // max(k.shape[2], 1))  # GQA: per query head
        flops = 2 * b * sq * sk * hq + 2 * b * sq * sk * hv
    elif layout in ("BNSD", "BSND") and len(q.shape) == 4:
        if layout == "BNSD":
            b, n, sq, d = q.shape
            sk, dv = k.shape[2], v.shape[3]
        else:
            b, sq, n, d = q.shape
            sk, dv = k.shape[1], v.shape[3]
        flops = 2 * b * n * sq * sk * d + 2 * b * n * sq * sk * dv
    else:
        return UNKNOWN
    nbytes = q.nbytes + k.nbytes + v.nbytes + q.nbytes
    label = f"npu_fusion_attention ({layout}): 2*B*N*Sq*Sk*(D+Dv)"
    if backward:
        flops *= BACKWARD_FACTOR
        nbytes *= 2
        label = f"npu_fusion_attention_grad: {BACKWARD_FACTOR} x forward"
    return Cost(flops, nbytes, label, q.dtype, "matrix")


# Memory-bound families --------------------------------------------------------------------------


def _elementwise(ts: list[_Tensor | None], name: str) -> Cost:
    return _elementwise_rule(name)(ts, None)


@functools.lru_cache(maxsize=1 << 10)
def _elementwise_rule(name: str) -> _Rule:
    """The elementwise formula of operator ``name`` (its base name), what depends on the name
    settled once."""
    b = name.rstrip("_")
    per = _ELEMENTWISE[b]
    compares = b in _COMPARISONS  # writes bools, one byte each
    fills = b in ("fill", "zero", "zeros_like", "ones_like", "full_like")  # only writes
    formula = f"elementwise: {per} x numel"

    def rule(ts: list[_Tensor | None], concrete: str | None) -> Cost:
        tens = [t for t in ts if t is not None]
        if not tens:
            return UNKNOWN
        out_numel = math.prod(_broadcast([t.shape for t in tens]))
        ref = _first_float(tens) or tens[0]
        reads = 0 if fills else sum(t.nbytes for t in tens)
        nbytes = reads + out_numel * (1 if compares else ref.size)
        return _new(Cost, (per * out_numel, nbytes, formula, ref.dtype, "vector"))

    return rule


def _reduction(ts: list[_Tensor | None], concrete: Any, name: str) -> Cost:
    x = ts[0] if ts else None
    if x is None:
        return UNKNOWN
    per = _REDUCTIONS[name]
    dim = _concrete(concrete, 1)
    if isinstance(dim, int) and not isinstance(dim, bool):
        dim = [dim]
    if isinstance(dim, list) and dim and x.shape and all(isinstance(d, int) for d in dim):
        try:
            reduced = math.prod(x.shape[d] for d in dim)
        except IndexError:
            reduced = x.numel
        out_numel = x.numel // max(reduced, 1)
    else:
        out_numel = 1
    return Cost(
        per * x.numel,
        x.nbytes + out_numel * x.size,
        f"reduction: {per} x numel(input)",
        x.dtype,
        "vector",
    )


def _softmax(ts: list[_Tensor | None], name: str) -> Cost:
    tens = [t for t in ts if t is not None]
    if not tens:
        return UNKNOWN
    if name.endswith("_backward_data"):
        # (grad_output, output, dim, input_dtype): grad_in = y * (g - sum(g * y))
        g = tens[0]
        return Cost(
            4 * g.numel,
            sum(t.nbytes for t in tens[:2]) + g.nbytes,
            "softmax backward: 4 x numel",
            g.dtype,
            "vector",
        )
    x = tens[0]
    # max, subtract, exp, sum, divide
    return Cost(5 * x.numel, 2 * x.nbytes, "softmax: 5 x numel", x.dtype, "vector")


def _norm(ts: list[_Tensor | None], name: str) -> Cost:
    tens = [t for t in ts if t is not None]
    if not tens:
        return UNKNOWN
    x = tens[0]
    if name in _NORM_BACKWARD:
        per = _NORM_BACKWARD[name]
        # grad_out + input (+ stats, weights); writes grad_input (+ grads of weights)
        nbytes = sum(t.nbytes for t in tens) + x.nbytes
        return Cost(per * x.numel, nbytes, f"norm backward: {per} x numel", x.dtype, "vector")
    per = _NORMS[name]
    nbytes = sum(t.nbytes for t in tens) + x.nbytes
    return Cost(per * x.numel, nbytes, f"norm: {per} x numel", x.dtype, "vector")


def _gather(ts: list[_Tensor | None], name: str) -> Cost:
    if name == "index_select":
        # (self, dim, index): rows of self picked by index
        x = ts[0] if ts else None
        idx = next((t for t in ts[1:] if t is not None), None)
        if x is None or idx is None or not x.shape:
            return UNKNOWN
        row = x.numel // max(x.shape[0], 1)
        rows = idx.numel * row * x.size
        return Cost(0, idx.nbytes + 2 * rows, "gather: index + 2 x rows", x.dtype, "memory")
    # embedding(weight [V, D], indices)
    w = ts[0] if ts else None
    idx = ts[1] if len(ts) > 1 else None
    if w is None or idx is None or len(w.shape) != 2:
        return UNKNOWN
    rows = idx.numel * w.shape[1] * w.size
    return Cost(0, idx.nbytes + 2 * rows, "embedding: index + 2 x rows", w.dtype, "memory")


def _embedding_backward(ts: list[_Tensor | None]) -> Cost:
    # embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
    g = ts[0] if ts else None
    idx = ts[1] if len(ts) > 1 else None
    if g is None or idx is None:
        return UNKNOWN
    return Cost(
        g.numel, 2 * g.nbytes + idx.nbytes, "embedding backward: scatter-add", g.dtype, "memory"
    )


def _copy(ts: list[_Tensor | None], concrete: Any, name: str) -> Cost:
    tens = [t for t in ts if t is not None]
    if not tens:
        return UNKNOWN
    if name == "copy_" and len(tens) >= 2:
        dst, src = tens[0], tens[1]
        return Cost(0, src.nbytes + dst.nbytes, "copy: read src + write dst", src.dtype, "memory")
    x = tens[0]
    out_size = x.size
    if name == "_to_copy":
        code = _concrete(concrete, 1)
        if isinstance(code, int) and not isinstance(code, bool) and code in SCALAR_TYPE_CODES:
            info = dtype_info(SCALAR_TYPE_CODES[code])
            if info is not None:
                out_size = info[0]
    return Cost(0, x.nbytes + x.numel * out_size, "copy: read + write", x.dtype, "memory")


def cost(name: str, input_dims: str | None, input_types: str | None, concrete: str | None) -> Cost:
    """The modelled cost of one call of operator ``name`` with these recorded arguments.

    ``input_dims``, ``input_types`` and ``concrete`` are the compact JSON strings of the events
    table. Autograd node names (``MmBackward0``) have no formula here: their cost comes from the
    forward op (see :func:`op_costs`).
    """
    return _cost(name, _decode(input_dims), _infos(_decode(input_types)), concrete)


#: A formula of the decoded tensors and the "Concrete Inputs" text (decoded by the formulas
#: that read it).
_Rule = Callable[[list[_Tensor | None], str | None], Cost]


def _cost(name: str, dims: Any, infos: list[tuple[int, str] | None], concrete: str | None) -> Cost:
    """:func:`cost` of the decoded dims and dtypes (as :func:`_infos` gives them)."""
    rule = _rule(name)
    if rule is None:
        return UNKNOWN
    ts = _tensors_of(dims, infos)
    if not ts:
        return UNKNOWN
    return rule(ts, concrete)


@functools.lru_cache(maxsize=1 << 14)
def _rule(name: str) -> _Rule | None:
    """The formula for operator ``name``, None when it has none (UNKNOWN for any arguments):
    chosen once per name (its base name and a dozen family tests were most of a distinct
    call's dispatch), the concrete inputs decoded only by the formulas that read them."""
    b = base_name(name)
    if b in ("mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "npu_linear"):
        return lambda ts, c: _matmul(ts, b)
    if b == "_addmm_activation":
        return lambda ts, c: _matmul(ts, b)
    if b in _CONV_FORWARD:
        return lambda ts, c: _conv(ts, _decode(c), b)
    if b in ("convolution_backward", "npu_convolution_backward"):
        return lambda ts, c: _conv_backward(ts, _decode(c))
    if b in _ATTENTION:
        return lambda ts, c: _attention(ts, _decode(c), b, backward=False)
    if b in _ATTENTION_BACKWARD:
        return lambda ts, c: _attention(ts, _decode(c), b, backward=True)
    if b in ("npu_fusion_attention", "npu_fusion_attention_grad"):
        grad = b.endswith("_grad")
        return lambda ts, c: _npu_fusion_attention(ts, _decode(c), backward=grad)
    if b in ("_softmax", "softmax", "_log_softmax", "log_softmax", "_safe_softmax"):
        return lambda ts, c: _softmax(ts, b)
    if b in ("_softmax_backward_data", "_log_softmax_backward_data"):
        return lambda ts, c: _softmax(ts, b)
    if b in _NORMS or b in _NORM_BACKWARD:
        return lambda ts, c: _norm(ts, b)
    if b in _REDUCTIONS:
        return lambda ts, c: _reduction(ts, _decode(c), b)
    if b in _GATHERS:
        return lambda ts, c: _gather(ts, b)
    if b == "embedding_dense_backward":
        return lambda ts, c: _embedding_backward(ts)
    if b in _COPIES:
        return lambda ts, c: _copy(ts, _decode(c), b)
    if b == "dropout":
        # eval-mode dropout returns its input: no work to cost
        return lambda ts, c: UNKNOWN if _concrete(_decode(c), 2) is False else _elementwise(ts, b)
    if b.rstrip("_") in _ELEMENTWISE:
        return _elementwise_rule(b)
    return None


# The base names :func:`cost` has a formula for (its branches, in the same terms): any other
# name is UNKNOWN whatever its arguments, so op_costs skips decoding them. On a 138k-event
# MTIA trace 10k of the 12k unique (name, shapes, dtypes, concrete inputs) keys are such ops
# (as_strided, select, view...), unique only by their concrete inputs.
_FORMULA_NAMES: Final = frozenset(
    {
        *("mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "npu_linear"),
        "_addmm_activation",
        *_CONV_FORWARD,
        "convolution_backward",
        "npu_convolution_backward",
        *_ATTENTION,
        *_ATTENTION_BACKWARD,
        "npu_fusion_attention",
        "npu_fusion_attention_grad",
        *("_softmax", "softmax", "_log_softmax", "log_softmax", "_safe_softmax"),
        *("_softmax_backward_data", "_log_softmax_backward_data"),
        *_NORMS,
        *_NORM_BACKWARD,
        *_REDUCTIONS,
        *_GATHERS,
        "embedding_dense_backward",
        *_COPIES,
    }
)


@functools.lru_cache(maxsize=1 << 14)
def has_formula(name: str) -> bool:
    """Whether :func:`cost` can give operator ``name`` a cost (for some arguments); when not,
    it is UNKNOWN for every call."""
    b = base_name(name)
    return b in _FORMULA_NAMES or b.rstrip("_") in _ELEMENTWISE


def is_autograd_node(name: str) -> bool:
    """``"MmBackward0"``, ``"autograd::engine::evaluate_function: MmBackward0"`` style names."""
    n = name.rsplit(" ", 1)[-1]
    return "::" not in n and n[:-1].endswith("Backward") and n[-1:].isdigit()


# Forward ops whose gradient needs no arithmetic of its own (identity / pass-through).
_PASSTHROUGH_BACKWARD: Final = frozenset(
    {
        "add",
        "add_",
        "sub",
        "sub_",
        "rsub",
        "neg",
        "clone",
        "copy_",
        "_to_copy",
        "contiguous",
        "to",
        "dropout",
        "native_dropout",
        "fill_",
        "zero_",
        "zeros_like",
        "ones_like",
    }
)
_COST_SCHEMA: Final = {
    "flops": pl.Int64,
    "bytes": pl.Int64,
    "formula": pl.String,
    "dtype": pl.String,
    "roof": pl.String,
}
_KEY: Final = ("name", "input_dims", "input_types", "concrete_inputs")


def _cost_frame(costs: Sequence[Cost]) -> pl.DataFrame:
    """``costs`` as a table of :data:`_COST_SCHEMA`, one row each in order."""
    # the fields' columns by one transposition (zip), not a pass over the costs per field
    fields = list(zip(*costs, strict=True)) if costs else [()] * len(_COST_SCHEMA)
    return pl.DataFrame(
        [
            pl.Series(name, values, dtype=dtype)
            for (name, dtype), values in zip(_COST_SCHEMA.items(), fields, strict=True)
        ]
    )


def _cost_table(keys: pl.DataFrame, fn: Callable[..., Cost], cols: Sequence[str]) -> pl.DataFrame:
    """Apply ``fn`` to every row of ``keys`` (one per unique shape: a loop over groups)."""
    # the key columns as they are when they are the frame's (op_costs'), without a select (a
    # query of fixed cost)
    picked = keys if keys.columns == list(cols) else keys.select(cols)
    return keys.hstack(_cost_frame([fn(*r) for r in picked.iter_rows()]))


@per_profile
def host_op_costs(profile: Profile) -> pl.DataFrame:
    """:func:`op_costs` of the profile's host operators (``cpu_op`` rows), computed once per
    Profile (roofline and anomalies both need it)."""
    return op_costs(profile.ops)  # the cached host-op rows, not another filter of the events


def op_costs(events: pl.DataFrame) -> pl.DataFrame:
    """FLOPs and bytes of every event, by our formulas.

    Returns one row per input row: ``id``, ``flops`` (Int64, null when unknown), ``bytes``
    (Int64, null when unknown), ``formula`` (the formula's name, ``"unknown"`` when none),
    ``dtype`` (dtype class of the compute, e.g. ``"bf16"``) and ``roof`` (``"matrix"``,
    ``"vector"`` or ``"memory"``: which peak applies).

    Costs are computed once per unique ``(name, input_dims, input_types, concrete_inputs)`` and
    gathered back to its rows. Autograd nodes (``MmBackward0``...) are costed as
    :data:`BACKWARD_FACTOR` times their forward op (``fwd_id``), when that link is present.
    """
    ev = events
    if tree.SHORTCUTS and ev.height == 0:
        # no rows, no costs: the result's schema without a dozen fixed-cost queries (a
        # trace without host ops: the small Ascend exports)
        return pl.DataFrame(schema={"id": ev.schema["id"], **_COST_SCHEMA})
    for c in (*_KEY, "fwd_id"):
        if c not in ev.columns:
            ev = ev.with_columns(
                pl.lit(None, dtype=pl.Int64 if c == "fwd_id" else pl.String).alias(c)
            )
    # the distinct names once: the formulas' and the autograd nodes' tests both read them
    names = ev.get_column("name").unique().to_list()
    # only names with a formula are costed call by call; the others get no key and read
    # UNKNOWN (null flops, bytes, dtype and roof; formula "unknown"), a null name too (its
    # key's formula lookup raised)
    costed = [n for n in names if n is not None and has_formula(n)]
    # Autograd nodes: cost of the forward op times the backward factor.
    # in Python over the unique names, not map_elements: the same names (nulls skipped), without
    # Polars' bytecode inspection of the function (4 ms on its first call in a process)
    node_names = [n for n in names if n is not None and is_autograd_node(n)]
    # each costed row (and each autograd node's) with its key, the position of the key's first
    # row: the costs go back to the rows by position (a gather per column), not by a join on
    # the four string keys (13 of the 20 ms of this function on a 75k-event trace). A window,
    # with the eager calls' optimisations (tree.collect), not a group-by of the rows' lists
    # and their explode: two queries were one (1.1 -> 0.6 ms on hta_sampled rank-0)
    picked = tree.collect(
        ev.lazy()
        .select(*_KEY, "fwd_id")
        .with_row_index("row")
        .filter(pl.col("name").is_in(costed + node_names, nulls_equal=True))
        .select("row", "fwd_id", pl.col("row").first().over(_KEY).alias("first"))
    )
    first, key_of = np.unique(picked.get_column("first").to_numpy(), return_inverse=True)
    key_of = key_of.reshape(-1).astype(np.int64, copy=False)
    first = first.astype(np.int64, copy=False)
    rows = picked.get_column("row").to_numpy().astype(np.int64)
    # the costs of the keys, then UNKNOWN: the cost of every row of no key
    key_names = ev.get_column("name")[first].to_list()
    nodes = frozenset(node_names)
    # each distinct "Input type" decoded once (a trace has a few dozen: 70 of 562 keys on
    # hta_sampled rank-0), not once per key
    types = ev.get_column("input_types")[first].to_list()
    infos = {t: _infos(_decode(t)) for t in set(types)}
    # _cost's steps inline, its formula chosen once per distinct name (a node has none)
    rules = {n: None if n in nodes else _rule(n) for n in set(key_names)}
    memo: _TensorMemo = {}
    found: list[Cost] = []
    for n, d, t, c in zip(
        key_names,
        ev.get_column("input_dims")[first].to_list(),
        types,
        ev.get_column("concrete_inputs")[first].to_list(),
        strict=True,
    ):
        rule = rules[n]
        ts = _arg_tensors(d, infos[t], memo) if rule is not None else None
        found.append(rule(ts, c) if rule is not None and ts else UNKNOWN)
    n_keys = len(found)
    found.append(UNKNOWN)
    at = np.full(ev.height, n_keys, dtype=np.int64)
    at[rows] = key_of
    if nodes:
        # only forward ops whose backward is real work: a gradient of add / clone / copy is
        # passed through (or summed over broadcast dims), not recomputed; a null name is never
        # a forward op here. Judged per key (its name, after the last "::", before the first
        # "."; its cost known), not on every row: a row of no key has no cost
        # (the name's test once per distinct name)
        passes = {n: n.split("::")[-1].split(".")[0] in _PASSTHROUGH_BACKWARD for n in rules}
        forward = np.array(
            [
                not passes[n] and (c.flops is not None or c.bytes is not None)
                for n, c in zip(key_names, found, strict=False)
            ]
            + [False],
            dtype=bool,
        )
        # by position, in NumPy: each node's forward op is the row whose id is its fwd_id (ids
        # are unique)
        is_node = np.array([n in nodes for n in key_names], dtype=bool)[key_of]
        node_rows = rows[is_node]
        link, linked = tree.int_values(picked.get_column("fwd_id"))
        src = tree._positions(
            ev.get_column("id").to_numpy().astype(np.int64, copy=False),
            link[is_node],
            ~linked[is_node],
        )
        hit = src >= 0
        hit[hit] = forward[at[src[hit]]]
        if hit.any():
            # the nodes' costs: their forward key's, derived (a row of the table each, after
            # UNKNOWN), gathered with the rest (a gather and a scatter per column were two
            # queries and five copies)
            fwd_keys, of = np.unique(at[src[hit]], return_inverse=True)
            found.extend(
                Cost(
                    None if c.flops is None else c.flops * BACKWARD_FACTOR,
                    None if c.bytes is None else c.bytes * BACKWARD_FACTOR,
                    f"backward: {BACKWARD_FACTOR} x forward ({c.formula})",
                    c.dtype,
                    c.roof,
                )
                for c in (found[k] for k in fwd_keys.tolist())
            )
            at[node_rows[hit]] = n_keys + 1 + of.reshape(-1)
    # each column indexed by the rows' cost positions (a select of gathers is a query)
    table = _cost_frame(found)
    return pl.DataFrame([ev.get_column("id"), *(c[at] for c in table.get_columns())])


# Ascend kernels ---------------------------------------------------------------------------------


def _parse_ascend_shapes(text: str | None) -> list[list[int]] | None:
    """Compact JSON ``[[8192,4096],[4096,512]]`` or the CSV's ``"8192,4096;4096,512"``."""
    if text is None:
        return None
    t = text.strip().strip('"').strip()
    if t.startswith("["):
        v = _decode(t)
        if isinstance(v, list) and all(_is_shape(x) for x in v):
            return [list(x) for x in v]
        return None
    out: list[list[int]] = []
    for part in t.split(";"):
        p = part.strip()
        if p == "":
            out.append([])
            continue
        try:
            out.append([int(x) for x in p.split(",") if x.strip() != ""])
        except ValueError:
            return None
    return out


def _parse_ascend_types(text: str | None, n: int) -> list[str]:
    if text is None:
        return ["float"] * n
    t = text.strip()
    if t.startswith("["):
        v = _decode(t)
        return [str(x) for x in v] if isinstance(v, list) else ["float"] * n
    return [x.strip() for x in t.split(";")]


# Ascend kernel types ("Type" column / name stem) -> our operator family.
_ASCEND_MATMUL: Final = frozenset(
    {
        "MatMul",
        "MatMulV2",
        "MatMulV3",
        "BatchMatMul",
        "BatchMatMulV2",
        "BatchMatMulV3",
        "GEMM",
        "MatMulCommon",
        "QuantBatchMatmulV3",
        "WeightQuantBatchMatmulV2",
    }
)
_ASCEND_CONV: Final = frozenset({"Conv2D", "Conv3D", "Conv2DV2", "Conv3DV2"})
_ASCEND_ELEMENTWISE: Final[dict[str, str]] = {
    "Add": "add",
    "AddV2": "add",
    "Sub": "sub",
    "Mul": "mul",
    "RealDiv": "div",
    "Div": "div",
    "Relu": "relu",
    "ReluV2": "relu",
    "Gelu": "gelu",
    "FastGelu": "gelu",
    "Sigmoid": "sigmoid",
    "Swish": "silu",
    "Silu": "silu",
    "Tanh": "tanh",
    "Exp": "exp",
    "Sqrt": "sqrt",
    "Rsqrt": "rsqrt",
    "Neg": "neg",
    "Abs": "abs",
    "Maximum": "maximum",
    "Minimum": "minimum",
    "ZerosLike": "zero",
    "Fill": "fill",
    "Cast": "add",
    "Muls": "mul",
    "Adds": "add",
    "GeluGrad": "gelu_backward",
    "ReluGrad": "threshold_backward",
    "ReluGradV2": "threshold_backward",
}
_ASCEND_COPY: Final = frozenset(
    {
        "TransData",
        "Transpose",
        "TransposeD",
        "Identity",
        "TensorMove",
        "ViewCopy",
        "Slice",
        "StridedSlice",
        "ConcatD",
        "Concat",
        "AsStrided",
    }
)


def _ascend_matmul(shapes: list[list[int]], types: list[str], out: list[int] | None) -> Cost:
    if len(shapes) < 2 or len(shapes[0]) < 2 or len(shapes[1]) < 2:
        return UNKNOWN
    a, b = shapes[0], shapes[1]
    info = dtype_info(types[0] if types else None) or (2, "fp16")
    size = info[0]
    batch = math.prod(_broadcast([tuple(a[:-2]), tuple(b[:-2])]))
    best: tuple[int, int, int] | None = None
    # The kernel's shapes carry no transpose flags: pick the (transpose_a, transpose_b) reading
    # whose contraction dims agree (and whose result matches the output shape, when recorded).
    for ta in (False, True):
        for tb in (False, True):
            m, ka = (a[-1], a[-2]) if ta else (a[-2], a[-1])
            kb, n = (b[-1], b[-2]) if tb else (b[-2], b[-1])
            if ka != kb:
                continue
            if out is not None and len(out) >= 2 and (out[-2], out[-1]) != (m, n):
                continue
            best = (m, n, ka)
            break
        if best is not None:
            break
    if best is None:
        return UNKNOWN
    m, n, k = best
    nbytes = sum(math.prod(s) for s in shapes[:3]) * size + batch * m * n * size
    return Cost(2 * batch * m * n * k, nbytes, "ascend matmul: 2*B*M*N*K", info[1], "matrix")


def ascend_kernel_cost(
    kernel_type: str,
    input_shapes: str | None,
    input_types: str | None,
    output_shapes: str | None = None,
) -> Cost:
    """Cost of one Ascend kernel by its ``Type`` (``MatMulV2``, ``Conv2D``, ``Add``...) and its
    ``Input Shapes`` / ``Input Data Types`` (CSV text or our compact JSON)."""
    shapes = _parse_ascend_shapes(input_shapes)
    if not shapes:
        return UNKNOWN
    types = _parse_ascend_types(input_types, len(shapes))
    outs = _parse_ascend_shapes(output_shapes)
    out0 = outs[0] if outs else None
    t = kernel_type.strip()
    if t in _ASCEND_MATMUL:
        return _ascend_matmul(shapes, types, out0)
    tens = [
        _tensor(tuple(s), *(dtype_info(types[i] if i < len(types) else None) or (4, "fp32")))
        for i, s in enumerate(shapes)
    ]
    ts: list[_Tensor | None] = list(tens)
    if t in _ASCEND_CONV:
        # Ascend kernels see NCHW/NDHWC layouts after TransData: only trust the output shape.
        if out0 is None or len(tens) < 2 or len(out0) != len(tens[0].shape):
            return UNKNOWN
        x, w = tens[0], tens[1]
        flops = 2 * out0[0] * math.prod(out0[1:]) * math.prod(w.shape[1:])
        nbytes = x.nbytes + w.nbytes + math.prod(out0) * x.size
        return Cost(flops, nbytes, "ascend conv: 2*numel(out)*prod(weight[1:])", x.dtype, "matrix")
    if t in _ASCEND_ELEMENTWISE:
        return _elementwise(ts, _ASCEND_ELEMENTWISE[t])
    if t in ("SoftmaxV2", "Softmax", "LogSoftmaxV2"):
        return _softmax(ts, "softmax")
    if t in ("LayerNorm", "LayerNormV3", "LayerNormV4"):
        return _norm(ts, "layer_norm")
    if t in ("RmsNorm",):
        return _norm(ts, "rms_norm")
    if t in ("ReduceSum", "ReduceSumD", "ReduceMean", "ReduceMeanD", "ReduceMax", "ReduceMaxD"):
        x = tens[0]
        return Cost(x.numel, x.nbytes, "reduction: numel(input)", x.dtype, "vector")
    if t in ("FlashAttentionScore", "FlashAttentionScoreGrad"):
        # (query, key, value, ...) in BSH layout: the layout is not in kernel_details.csv.
        q, k = tens[0], tens[1] if len(tens) > 1 else None
        if k is None or len(q.shape) != 3 or len(k.shape) != 3:
            return UNKNOWN
        flops = 4 * q.shape[0] * q.shape[1] * k.shape[1] * q.shape[2]
        f = BACKWARD_FACTOR if t.endswith("Grad") else 1
        return Cost(
            f * flops,
            f * 2 * (q.nbytes + 2 * k.nbytes),
            "ascend flash attention (BSH)",
            q.dtype,
            "matrix",
        )
    if t in _ASCEND_COPY:
        nbytes = sum(x.nbytes for x in tens)
        out_b = math.prod(out0) * tens[0].size if out0 else tens[0].nbytes
        return Cost(0, nbytes + out_b, "copy: read + write", tens[0].dtype, "memory")
    return UNKNOWN


def ascend_kernel_costs(kernels: pl.DataFrame, type_col: str = "name") -> pl.DataFrame:
    """Costs of Ascend kernel rows: ``id, flops, bytes, formula, dtype, roof`` per input row.

    The kernel type is read from ``op_type`` (or ``args``'s ``"Type"``; ``"Output Shapes"`` from
    ``args`` when present), else from ``type_col`` (kernel names like
    ``aclnnMatmul_MatMulCommon_MatMulV2`` end with the type).
    One evaluation per unique (type, shapes, dtypes, output shapes).
    """
    lf = kernels.lazy()
    missing = [
        pl.lit(None, dtype=pl.String).alias(c)
        for c in ("input_dims", "input_types", "args", "op_type")
        if c not in kernels.columns
    ]
    if missing:
        lf = lf.with_columns(missing)
    args = pl.col("args")
    cols = ["_type", "input_dims", "input_types", "_out"]
    # the rows' keys one query, their distinct keys one, the costs back on the rows one (a
    # query per step, five, were a fixed cost on a small Ascend export)
    rows = tree.collect(
        lf.select(
            "id",
            pl.coalesce(
                pl.col("op_type").replace("N/A", None),
                args.str.json_path_match("$.Type").replace("N/A", None),
                pl.col(type_col).str.split("_").list.last(),
            ).alias("_type"),
            "input_dims",
            "input_types",
            args.str.json_path_match("$['Output Shapes']").alias("_out"),
        )
    )
    keys = pl.DataFrame([rows.get_column(c) for c in cols]).unique()
    table = _cost_table(keys, lambda t, i, ty, o: ascend_kernel_cost(t or "", i, ty, o), cols)
    return tree.collect(
        rows.lazy()
        .join(table.lazy(), on=cols, how="left", nulls_equal=True)
        .select("id", *_COST_SCHEMA)
    )
