"""Fusion: separate bias adds, separate activations, hand-written attention, per-parameter
optimizer loops, and Ascend affinity APIs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.model import Profile

ADD_OPS = ("aten::add", "aten::add_")
ACTIVATIONS = (
    "aten::relu",
    "aten::relu_",
    "aten::gelu",
    "aten::silu",
    "aten::silu_",
    "aten::sigmoid",
    "aten::tanh",
    "aten::leaky_relu",
)
LINEAR_OPS = ("aten::linear", "aten::addmm", "aten::matmul", "aten::mm")
SOFTMAX_OPS = ("aten::softmax", "aten::_softmax", "aten::_safe_softmax")
BMM_OPS = ("aten::matmul", "aten::bmm", "aten::baddbmm")
# The ops that may sit between QKᵀ and softmax, and softmax and ·V, and that SDPA absorbs or
# makes unnecessary: views and layout changes (HF: view/permute/transpose/contiguous; timm:
# reshape/unbind/transpose), scale (div/mul), mask (add/masked_fill/where), dropout, casts.
ATTN_PASSTHROUGH = frozenset(
    f"aten::{n}"
    for n in (
        "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "contiguous", "clone",
        "expand", "unsqueeze", "squeeze", "flatten", "unflatten", "as_strided", "slice",
        "select", "unbind", "to", "_to_copy", "type_as", "copy_", "detach", "float", "half",
        "bfloat16", "div", "div_", "mul", "mul_", "add", "add_", "sub", "sub_", "masked_fill",
        "masked_fill_", "where", "dropout", "native_dropout", "feature_dropout", "empty",
        "empty_like", "empty_strided", "zeros", "ones", "full", "fill_",
    )
)  # fmt: skip
# At most this many ops on each side of the softmax (a bound on the search, far above any
# real layout: HF BERT/ViT put 2-6 ops between, CLIP/OWL 2-3).
ATTN_MAX_BETWEEN = 64
# A per-parameter optimizer loop: at least this many per-tensor update ops in one
# Optimizer.step and no foreach/fused op (torch's own foreach path issues one op per kind;
# opscope's heuristic: a loop over at least a few parameters).
FOREACH_MIN_OPS = 8
OPT_PREFIX = "Optimizer.step#"
RMSNORM_SEQ = ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul")


def _seq(profile: Profile) -> pl.DataFrame:
    """The user-level ops with their position in their thread; once per profile (four rules
    read it: a window query each)."""
    out: pl.DataFrame = c._memo("fusion.seq", profile, lambda: _positions(profile))
    return out


def _positions(profile: Profile) -> pl.DataFrame:
    # the user-level ops as they are: sorted by rank, thread and time, so one thread's ops
    # are consecutive rows (see _shifted)
    return c.user_level_ops(profile)


def _shifted(col: str, k: int) -> pl.Expr:
    """``col`` of the op ``k`` rows later (``k`` < 0: earlier) in the same thread, null past
    the thread's ends: ``shift(-k).over("rank", "tid")`` on the sorted
    sequence, where a thread's ops are consecutive (a window per thread cost 0.8 ms a rule on
    a 10k-op sequence, this 0.1 ms)."""
    same = pl.all_horizontal(pl.col(g).eq_missing(pl.col(g).shift(-k)) for g in ("rank", "tid"))
    return pl.when(same).then(pl.col(col).shift(-k))


def _pairs(profile: Profile) -> tuple[Any, Any]:
    """Rows of :func:`_seq` (ascending): a matmul/mm whose next op on its thread is an add
    (fusion-bias-add), an activation whose previous op on its thread is a linear layer
    (fusion-activation). Once a profile, in NumPy over the names' tests and the threads' keys
    (a select of the shifted sequence was a query, 0.6 ms on a 500-op sequence); the rules read
    the pairs' columns by position."""
    import numpy as np

    from opscope.analysis.tree import int_values

    def run() -> tuple[Any, Any]:
        s = _seq(profile)
        if s.height < 2:  # no op with a neighbour on its thread
            none = np.zeros(0, dtype=np.int64)
            return none, none
        names = s.get_column("name").to_list()

        def named(wanted: tuple[str, ...]) -> Any:
            return np.fromiter(map(set(wanted).__contains__, names), dtype=bool, count=len(names))

        # whether each row and the next are on one thread (rank and tid equal, a null equal
        # to a null: what the shifted columns' eq_missing tests)
        same = np.ones(len(names) - 1, dtype=bool)
        for col in ("rank", "tid"):
            v, known = int_values(s.get_column(col))
            same &= (known[:-1] == known[1:]) & (~known[:-1] | (v[:-1] == v[1:]))
        bias = named(("aten::matmul", "aten::mm"))[:-1] & same & named(ADD_OPS)[1:]
        act = named(ACTIVATIONS)[1:] & same & named(LINEAR_OPS)[:-1]
        return np.flatnonzero(bias), np.flatnonzero(act) + 1

    out: tuple[Any, Any] = c._memo("fusion.pairs", profile, run)
    return out


def _rows_at(s: pl.DataFrame, at: Any, cols: dict[str, str], shift: int = 0) -> list[list[Any]]:
    """The values of ``cols`` (a row's key -> its column) at the rows ``at + shift`` of ``s``,
    as lists (a Series indexed: no query)."""
    return [s.get_column(col)[at + shift].to_list() for col in cols.values()]


def _shapes(s: str | None) -> list[list[int]]:
    return c.parse_dims(s) or []


class BiasAdd:
    """A matmul followed by a separate add of a 1-D bias."""

    id = "fusion-bias-add"
    doc = (
        "`y = x @ W.t(); y += b` runs the matmul, writes y, then reads and writes y again for the "
        "bias add: an extra elementwise pass (an extra kernel on a device). `F.linear(x, W, b)` "
        "(or `torch.addmm(b, x, W.t())`) folds the bias into the GEMM's epilogue. The rule "
        "flags a user-level `aten::matmul`/`aten::mm` whose next op is an `aten::add`/`add_` of "
        "a 1-D tensor matching the last dim of the matmul's output. Saving: the bias add's time "
        "(its kernels on a device, its host time on CPU) removed. Threshold: none — any "
        "occurrence is reported; severity follows its share of step time."
    )

    # its inputs are host ops (the user-level sequence / the costed calls): none without one
    needs = ("cpu_op",)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        at = _pairs(profile)[0]
        if not len(at):
            return []
        s = _seq(profile)
        here = {k: k for k in ("id", "name", "input_dims", "input_types")}
        nxt = {"n_name": "name", "n_id": "id", "n_dims": "input_dims", "n_cost": "cost_ns"}
        keys = [*here, *nxt]
        cand = [
            dict(zip(keys, v, strict=True))
            for v in zip(*_rows_at(s, at, here), *_rows_at(s, at, nxt, 1), strict=True)
        ]
        keep = []
        for r in cand:
            mm, add = _shapes(r["input_dims"]), _shapes(r["n_dims"])
            if (
                len(mm) >= 2
                and len(add) >= 2
                and mm[1]
                and len(add[1]) == 1
                and add[1][0] == mm[1][-1]
            ):
                keep.append(r)
        if not keep:
            return []
        steps = c.step_info(profile)
        rows = {r["id"]: r for r in keep}
        out = []
        for where, ids in c.group_by_location(profile, list(rows)).items():
            rs = [rows[i] for i in ids]
            cost = float(sum(r["n_cost"] or 0 for r in rs))
            mm = _shapes(rs[0]["input_dims"])
            types = c.parse_types(rs[0]["input_types"])
            dtype = (types[0] if types else None) or "float32"
            ev: dict[str, Any] = {
                "operators": [rs[0]["name"], rs[0]["n_name"]],
                "shapes": sorted({r["input_dims"] for r in rs}),
                "dtypes": [dtype],
                "calls": len(rs),
                "figures": {"bias_add_us_per_step": round(steps.per_step_us(cost), 3)},
                "event_ids": [r["n_id"] for r in rs][:10],
            }
            if len(mm[0]) == 2 and len(mm[1]) == 2:
                ev["bench"] = {
                    "op": "matmul",
                    "m": mm[0][0],
                    "k": mm[0][1],
                    "n": mm[1][1],
                    "dtype": dtype,
                    "bias": True,
                    "fix": "linear",
                }
            out.append(
                c.make_finding(
                    profile,
                    rule=self.id,
                    title=f"separate bias add after {rs[0]['name']} (fuse with F.linear)",
                    where=where,
                    key="bias",
                    saving_ns=cost,
                    saving_how="the bias add's time removed (F.linear fuses it into the GEMM)",
                    fix="y = F.linear(x, self.weight, self.bias)  # was: x @ weight.t(); x += bias",
                    evidence=ev,
                    steps=steps,
                )
            )
        return out


class Activation:
    """A separate activation right after a linear layer."""

    id = "fusion-activation"
    doc = (
        "An activation (`relu`, `gelu`, `silu`, ...) applied as its own op right after a linear "
        "layer reads and writes the whole output once more. A compiler (`torch.compile`) or a "
        "fused GEMM epilogue (`torch._addmm_activation` for relu/gelu, cuBLASLt) applies it "
        "while the output is still in registers. The rule flags a user-level activation whose "
        "input has the shape of the output of the user-level linear/matmul op just before it. "
        "Saving: the activation's time removed (an upper bound: the fused epilogue is not "
        "free). No threshold; severity follows the share of step time."
    )

    # its inputs are host ops (the user-level sequence / the costed calls): none without one
    needs = ("cpu_op",)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        at = _pairs(profile)[1]
        if not len(at):
            return []
        s = _seq(profile)
        here = {k: k for k in ("id", "name", "input_dims", "input_types", "cost_ns")}
        prev = {"p_name": "name", "p_dims": "input_dims"}
        keys = [*here, *prev]
        cand = [
            dict(zip(keys, v, strict=True))
            for v in zip(*_rows_at(s, at, here), *_rows_at(s, at, prev, -1), strict=True)
        ]
        pairs = [(r["p_name"], r["p_dims"], r["input_dims"]) for r in cand]
        ok = set()
        for p_name, p_dims, a_dims in set(pairs):
            p, a = _shapes(p_dims), _shapes(a_dims)  # once per distinct shape pair
            mats = [d for d in p if len(d) >= 2]
            if not a or len(mats) < 2:
                continue
            if p_name == "aten::linear":
                out_shape = [*mats[0][:-1], mats[1][0]]
            else:
                out_shape = [*mats[-2][:-1], mats[-1][-1]]
            if a[0] == out_shape:
                ok.add((p_name, p_dims, a_dims))
        # the candidates whose shapes fit, in their order (a semi join on the three columns,
        # nulls equal, and the distinct pairs' query were two queries)
        keep = [r for r, pair in zip(cand, pairs, strict=True) if pair in ok]
        if not keep:
            return []
        steps = c.step_info(profile)
        rows = {r["id"]: r for r in keep}
        out = []
        for where, ids in c.group_by_location(profile, list(rows)).items():
            rs = [rows[i] for i in ids]
            cost = float(sum(r["cost_ns"] or 0 for r in rs))
            acts = sorted({r["name"] for r in rs})
            out.append(
                c.make_finding(
                    profile,
                    rule=self.id,
                    title=f"separate {'/'.join(a.removeprefix('aten::') for a in acts)} after "
                    f"{'/'.join(sorted({r['p_name'] for r in rs}))}",
                    where=where,
                    key="act:" + ",".join(acts),
                    saving_ns=cost,
                    saving_how="the activation's time removed (upper bound)",
                    fix=(
                        "model = torch.compile(model)  # fuses the activation into the epilogue\n"
                        "# or for relu/gelu: torch._addmm_activation(bias, x, weight.t())"
                    ),
                    evidence={
                        "operators": [*sorted({r["p_name"] for r in rs}), *acts],
                        "shapes": sorted({r["input_dims"] for r in rs}),
                        "dtypes": sorted({str(r["input_types"]) for r in rs}),
                        "calls": len(rs),
                        "figures": {"activation_us_per_step": round(steps.per_step_us(cost), 3)},
                        "event_ids": ids[:10],
                    },
                    steps=steps,
                )
            )
        return out


class Attention:
    """softmax(QKᵀ)V written by hand (any number of view/reshape/scale/mask/dropout ops
    between the matmuls and the softmax)."""

    id = "fusion-attention"
    doc = (
        "Attention written as `softmax(q @ k.transpose(-2, -1) * scale) @ v` materialises the "
        "[L, L] score matrix, reads it back for the softmax and again for the second matmul. "
        "`F.scaled_dot_product_attention` runs it as one fused (flash / memory-efficient) "
        "kernel. The rule flags a user-level softmax whose nearest batched matmul before it "
        "produces its scores and whose nearest batched matmul after it consumes them, with only "
        "pass-through ops between (view / reshape / permute / transpose / contiguous / to, "
        "scale, mask, dropout: any number of them, as in the HF and timm layouts, "
        f"at most {ATTN_MAX_BETWEEN} on each side), all in the softmax's module when the trace "
        "has modules, and shapes that agree (the scores' last dim is the second matmul's "
        "inner dim). Saving, when the device has peaks: the time of the whole span (both "
        "matmuls, the softmax and everything between) minus the performance model's bound of "
        "one fused kernel (4·B·H·Lq·Lk·d FLOPs at the matrix peak, q/k/v/o bytes), never more "
        "than the span's time; without peaks, the softmax and the ops between the matmuls "
        "(an estimate that leaves the matmuls' own time in place)."
    )

    # its inputs are host ops (the user-level sequence / the costed calls): none without one
    needs = ("cpu_op",)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        keep = attention_spans(profile)
        if not keep:
            return []
        steps = c.step_info(profile)
        spec = c.perf_model(profile, results).spec
        rows = {r["id"]: r for r in keep}
        out = []
        # one finding per attention implementation, not per layer: module paths differ only
        # in layer indices (Owlv2EncoderLayer_1, layer.0.attention) for the same code
        by_code: dict[tuple[str | None, int | None, str | None], list[int]] = {}
        for (file, line, module), ids in c.group_by_location(
            profile, pl.DataFrame({"id": list(rows)})
        ).items():
            mod = re.sub(r"([_.])\d+(?=[/.]|$)", r"\1*", module) if module else None
            by_code.setdefault((file, line, mod), []).extend(ids)
        for where, ids in by_code.items():
            rs = [rows[i] for i in ids]
            span = float(sum(r["span_ns"] for r in rs))
            between = float(sum(r["between_ns"] for r in rs))
            r0 = rs[0]
            fused = _fused_bound(spec, rs)
            if fused is not None and fused < span:
                saving, method = span - fused, "bound-gap"
                how = (
                    "the span's time (both matmuls, softmax and the ops between) minus the "
                    f"bound of one fused attention kernel on {spec.label if spec else '?'} "
                    f"({steps.per_step_us(fused):.1f} µs/step)"
                )
            else:
                saving, method = between, "removed-time"
                how = "the softmax and the scale/mask ops between the matmuls removed"
            ev: dict[str, Any] = {
                "operators": ["matmul", r0["name"], "matmul"],
                "shapes": sorted({r["input_dims"] for r in rs}),
                "dtypes": sorted({str(r["input_types"]) for r in rs}),
                "calls": len(ids),
                "figures": {
                    "softmax_and_between_us_per_step": round(steps.per_step_us(between), 3),
                    "span_us_per_step": round(steps.per_step_us(span), 3),
                    "ops_between": max(r["n_between"] for r in rs),
                },
                "event_ids": ids[:10],
            }
            if r0["bhld"] is not None:
                bh, lq, lk, d = r0["bhld"]
                ev["bench"] = {
                    "op": "attention",
                    "shape": [*bh, lq, d],
                    "kv_len": lk,
                    "dtype": r0["dtype"] or "float32",
                    "fix": "sdpa",
                }
            out.append(
                c.make_finding(
                    profile,
                    rule=self.id,
                    title="hand-written softmax(QKᵀ)V: use scaled_dot_product_attention",
                    where=where,
                    key="sdpa",
                    saving_ns=saving,
                    saving_how=how,
                    fix="out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
                    evidence=ev,
                    steps=steps,
                    limit_ns=span,
                    limit_what="the attention span's own time",
                    method=method,
                )
            )
        return out


def attention_spans(profile: Profile) -> list[dict[str, Any]]:
    """Every materialised attention span (softmax between a QKᵀ and a ·V matmul) of the
    profile: the softmax's id, costs, shapes and ``span_ids`` (the user-level ops from the
    first matmul to the second), computed once per profile."""

    def run() -> list[dict[str, Any]]:
        s = _seq(profile)
        names = s.get_column("name")
        # (comparisons: a Series' is_in is a query)
        if s.height == 0 or not any(bool((names == n).any()) for n in SOFTMAX_OPS):
            return []
        s = s.with_columns(pl.col("cost_ns").fill_null(0))
        out: list[dict[str, Any]] = []
        # spans in trace order; a frame per thread in one pass (a group_by iterated was a
        # query per group)
        for grp in s.partition_by("rank", "tid", maintain_order=True):
            out += _attention_spans(grp)
        return out

    spans: list[dict[str, Any]] = c._memo("attention_spans", profile, run)
    return spans


def in_attention_spans(profile: Profile, ids: pl.Series) -> pl.Series:
    """Which of ``ids`` (host ops) are, or run inside, an op of a materialised attention span:
    the fusion-attention finding claims their time, other rules leave it."""
    span = [i for r in attention_spans(profile) for i in r["span_ids"]]
    if not span:
        return pl.Series("covered", [False] * ids.len(), pl.Boolean)
    anc = c.ancestors(profile, ids).filter(pl.col("anc_id").is_in(span))
    covered = set(anc.get_column("id").to_list())
    return pl.Series("covered", [i in covered for i in ids.to_list()], pl.Boolean)


def _attention_spans(grp: pl.DataFrame) -> list[dict[str, Any]]:
    """The softmax calls of one thread's op sequence that sit between a QKᵀ and a ·V matmul."""
    import numpy as np

    names = grp.get_column("name").to_list()
    is_mm = np.array([n in BMM_OPS for n in names])
    passthrough = np.array([n in ATTN_PASSTHROUGH for n in names])
    cum_block = np.concatenate([[0], np.cumsum(~passthrough & ~is_mm)])
    cost = grp.get_column("cost_ns").to_numpy().astype(float)
    cum_cost = np.concatenate([[0.0], np.cumsum(cost)])
    dims = grp.get_column("input_dims").to_list()
    types = grp.get_column("input_types").to_list()
    mods = grp.get_column("module").to_list() if "module" in grp.columns else [None] * len(names)
    ids = grp.get_column("id").to_list()
    mm_pos = np.flatnonzero(is_mm)
    out: list[dict[str, Any]] = []
    if mm_pos.size < 2:
        return out
    for i in (j for j, n in enumerate(names) if n in SOFTMAX_OPS):
        k = int(np.searchsorted(mm_pos, i))
        if k == 0 or k >= mm_pos.size:
            continue
        a, b = int(mm_pos[k - 1]), int(mm_pos[k])
        if i - a - 1 > ATTN_MAX_BETWEEN or b - i - 1 > ATTN_MAX_BETWEEN:
            continue
        # anything else between (another softmax, a norm, a linear) breaks the pattern
        if cum_block[b] - cum_block[a + 1] != 1:  # only the softmax itself
            continue
        own = mods[i]
        if own is not None and not all(_inside(mods[j], own) for j in range(a, b + 1)):
            continue  # a matmul of another module (the layer's Dropout child is fine)
        sm = _shapes(dims[i])
        q = _shapes(dims[a])
        pv = _shapes(dims[b])
        if not sm or not sm[0] or len(pv) < 2 or not pv[0] or not pv[1] or len(q) < 2:
            continue
        scores = sm[0]
        if pv[0][-1] != scores[-1] or len(pv[1]) < 2 or pv[1][-2] != scores[-1]:
            continue  # the second matmul does not consume the softmax's output
        d = pv[1][-1]
        bh = list(pv[1][:-2])
        lq = scores[-2] if len(scores) >= 2 else 1
        dt = c.parse_types(types[b])
        out.append(
            {
                "id": ids[i],
                "name": names[i],
                "input_dims": dims[i],
                "input_types": types[i],
                "span_ns": float(cum_cost[b + 1] - cum_cost[a]),
                "between_ns": float(cum_cost[b] - cum_cost[a + 1]),
                "n_between": int(b - a - 2),
                "span_ids": ids[a : b + 1],
                "bhld": (bh, lq, scores[-1], d) if bh else None,
                "dtype": dt[0] if dt else None,
            }
        )
    return out


def _inside(module: str | None, parent: str) -> bool:
    """``module`` is ``parent`` or one of its submodules (``.../Dropout_2``), or unknown."""
    return (
        module is None
        or module == parent
        or (
            module[len(parent) : len(parent) + 1]
            in (
                "/",
                ".",
            )
            and module.startswith(parent)
        )
    )


def _fused_bound(spec: Any, rs: list[dict[str, Any]]) -> float | None:
    """The performance model's bound of one fused attention kernel per flagged call."""
    from math import prod

    from opscope.analysis.model import bound_ns

    if spec is None:
        return None
    total = 0.0
    for r in rs:
        if r["bhld"] is None:
            return None
        bh, lq, lk, d = r["bhld"]
        n = prod(bh)
        size = c.DTYPE_BYTES.get(r["dtype"] or "float32", 4)
        flops = 4.0 * n * lq * lk * d
        nbytes = float(size * n * (2 * lq * d + 2 * lk * d))
        b = bound_ns(spec, flops, nbytes, c.SHORT_DTYPE.get(r["dtype"] or "", "fp32"), "matrix")
        if b is None:
            return None
        total += b
    return total


class Foreach:
    """Optimizer steps that loop over parameters one op at a time."""

    id = "fusion-optimizer-foreach"
    doc = (
        "An optimizer without `foreach=True` / `fused=True` issues a few ops per parameter "
        "tensor on every step; with hundreds of parameters the step is dominated by per-op "
        "overhead (and on a device, by launches). The foreach implementation issues one "
        "multi-tensor op per kind; the fused one a single kernel. The rule looks inside "
        f"`{OPT_PREFIX}*` ranges: at least {FOREACH_MIN_OPS} per-tensor ops and no `_foreach_` "
        "or `_fused_` op. Saving: not estimated from the profile (the foreach ops were not "
        "run); `opscope verify` times both on the parameter shapes seen."
    )

    # the optimizer step is an annotation or an op (and its updates ops)
    needs = ("user_annotation", "cpu_op")

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        import numpy as np

        ev_ = profile.events
        # the annotations' rows from the kinds' codes and the names' mask (a filter of the
        # events, every column gathered, was 1.2 ms on a 4.8k-event trace)
        ann_rows = np.flatnonzero(
            c.kind_mask(profile, "user_annotation", "cpu_op")
            & c.name_where(profile, "events", lambda n: n.startswith(OPT_PREFIX))
        )
        if not len(ann_rows):
            return []
        # the walk up from the ops under an annotation only (every op's ancestors were a
        # table of 400k pairs on a 40k-op trace); as deep as c.ancestors walks
        forest = c._forest(profile)
        ann_at = c.event_positions(profile, ev_.get_column("id")[ann_rows])
        is_ann = np.zeros(len(forest), dtype=bool)
        is_ann[ann_at] = True
        under = forest.nearest_up(is_ann, include_self=False, max_depth=c.MAX_WALK - 1) >= 0
        ops_at = c.event_positions(profile, profile.ops.get_column("id"))
        rows = np.flatnonzero((ops_at >= 0) & under[np.maximum(ops_at, 0)])
        loops = _optimizer_loops(profile, rows, ops_at[rows], is_ann)
        if loops is None:
            return []
        from opscope.advise.rules.ascend_optimizer import npu_fix

        anns, n, first_ids, dims = loops
        steps = c.step_info(profile)
        # the loops' annotations in the events' order
        mine = ann_rows[np.isin(forest.ids[ann_at], anns)]
        names = ev_.get_column("name")[mine]
        opt = str(names[0]).removeprefix(OPT_PREFIX).split(".")[0]
        total = float(ev_.get_column("dur_ns")[mine].sum())
        shapes = []
        for d in dims:
            sh = _shapes(d)
            if sh and sh[0] and sh[0] not in shapes:
                shapes.append(sh[0])
        where = next(iter(c.group_by_location(profile, first_ids[:1])))
        per_step = sum(n) / len(n)
        return [
            c.make_finding(
                profile,
                rule=self.id,
                title=f"{opt} updates parameters one tensor at a time "
                f"({int(per_step)} ops per step)",
                where=where,
                key=opt,
                saving_ns=0.0,
                saving_how=(
                    f"not estimated from the profile: the optimizer step takes "
                    f"{steps.per_step_us(total / max(len(mine), 1) * steps.n):.1f} µs; "
                    "`opscope verify` times foreach vs the loop"
                ),
                fix=npu_fix(opt)
                if c.target_of(profile, results) == "ascend"
                else f"opt = torch.optim.{opt}(model.parameters(), lr=lr, foreach=True)  "
                "# or fused=True on CUDA",
                evidence={
                    "operators": [f"{OPT_PREFIX}{opt}.step"],
                    "shapes": [c.fmt_shape(s) for s in shapes[:20]],
                    "dtypes": [],
                    "calls": int(sum(n)),
                    "figures": {
                        "ops_per_step": per_step,
                        "step_us": round(total / max(len(mine), 1) / 1000, 3),
                    },
                    "bench": {
                        "op": "optimizer",
                        "optimizer": opt,
                        "shapes": shapes[:64],
                        "dtype": "float32",
                        "fix": "foreach",
                    },
                    "event_ids": first_ids[:10],
                },
                severity=c.severity_for(steps.pct(total / max(len(mine), 1) * steps.n), "medium"),
                steps=steps,
            )
        ]


def _optimizer_loops(
    profile: Profile, rows: Any, at: Any, is_ann: Any
) -> tuple[list[int], list[int], list[int], list[str | None]] | None:
    """The per-parameter loops among the ops at ``rows`` of ``profile.ops`` (their events at
    ``at``, each under an annotation of ``is_ann``): per annotation above them (within
    ``c.MAX_WALK - 1`` hops), the ops directly under it (whose nearest op parent is none of
    ``rows``' ops), when they are at least ``FOREACH_MIN_OPS`` and none is a foreach or fused
    op. ``(annotation ids, ops each, first op id each, the first loop's add_/mul_ input dims)``
    by annotation id, the ops in id order; ``None`` when there is no loop.

    In NumPy over the (op, annotation) pairs (the ancestors' table joined with every op and
    grouped per annotation was 4 ms on a 4.8k-event trace)."""
    import numpy as np

    if not len(rows):
        return None
    forest = c._forest(profile)
    i, anc, _ = forest.ancestor_pairs(at, max_depth=c.MAX_WALK - 1)
    hit = is_ann[anc]
    i, anc = i[hit], anc[hit]
    # inside: the ops with an annotation above them; direct: those whose op parent is not one
    inside = np.zeros(len(forest), dtype=bool)
    inside[at[np.unique(i)]] = True
    up = c.op_parent_positions(profile)[at]
    direct = (up < 0) | ~inside[np.maximum(up, 0)]
    keep = direct[i]
    i, anc = i[keep], anc[keep]
    if not len(i):
        return None
    ops = profile.ops
    op_ids = ops.get_column("id").to_numpy()[rows]
    ann_ids = forest.ids[anc]
    order = np.lexsort((op_ids[i], ann_ids))
    i, ann_ids = i[order], ann_ids[order]
    anns, start, n = np.unique(ann_ids, return_index=True, return_counts=True)
    # the names' tests from the profile's distinct names (a query over these ops' names was
    # a fixed cost)
    vec = c.name_where(profile, "ops", lambda n: "_foreach_" in n or "_fused_" in n)[rows]
    upd = c.name_mask(profile, "ops", names=["aten::add_", "aten::mul_"])[rows]
    vectorised = np.add.reduceat(vec[i].astype(np.int64), start) > 0
    loop = (n >= FOREACH_MIN_OPS) & ~vectorised
    if not loop.any():
        return None
    first = int(np.flatnonzero(loop)[0])
    span = i[start[first] : start[first] + n[first]]
    dims_at = rows[span[upd[span]]]
    dims = ops.get_column("input_dims")[dims_at].to_list()
    return (
        [int(x) for x in anns[loop]],
        [int(x) for x in n[loop]],
        [int(x) for x in op_ids[i[start[loop]]]],
        dims,
    )


class AscendAffinity:
    """Hand-written RMSNorm / SwiGLU on Ascend, which has fused affinity APIs."""

    id = "fusion-ascend-affinity"
    doc = (
        "On Ascend, torch_npu ships fused 'affinity' operators for patterns that otherwise run "
        "as several small vector kernels: `torch_npu.npu_rms_norm` for RMSNorm written as "
        "`x * rsqrt(x.pow(2).mean(-1) + eps) * w`, and `torch_npu.npu_swiglu` for "
        "`silu(a) * b`. The rule (only when the target is Ascend) flags the user-level op "
        "sequence pow → mean → add → rsqrt → mul, and silu followed by mul. Saving: the time "
        "of the ops in the pattern except one (the fused op stays)."
    )

    # its inputs are host ops (the user-level sequence / the costed calls): none without one
    needs = ("cpu_op",)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        if c.target_of(profile, results) != "ascend":
            return []
        s = _seq(profile)
        if s.height == 0:
            return []
        shifted = s.with_columns(
            *[_shifted("name", k).alias(f"n{k}") for k in range(5)],
            *[_shifted("cost_ns", k).alias(f"c{k}") for k in range(5)],
        )
        rms = shifted.filter(
            pl.all_horizontal(
                [pl.col(f"n{k}").str.strip_suffix("_") == RMSNORM_SEQ[k] for k in range(5)]
            )
        )
        swi = shifted.filter(
            pl.col("n0").is_in(["aten::silu", "aten::silu_"]) & (pl.col("n1") == "aten::mul")
        )
        steps = c.step_info(profile)
        out = []
        for df, n, api, fix in (
            (rms, 5, "npu_rms_norm", "y = torch_npu.npu_rms_norm(x, self.weight, epsilon=eps)[0]"),
            (swi, 2, "npu_swiglu", "y = torch_npu.npu_swiglu(torch.cat([a, b], -1), dim=-1)"),
        ):
            if df.height == 0:
                continue
            for where, ids, rs in c.rows_by_location(profile, df):
                cost = float(
                    rs.select(
                        pl.sum_horizontal([pl.col(f"c{k}").fill_null(0) for k in range(1, n)])
                    )
                    .to_series()
                    .sum()
                )
                out.append(
                    c.make_finding(
                        profile,
                        rule=self.id,
                        title=f"hand-written pattern: use torch_npu.{api}",
                        where=where,
                        key=api,
                        saving_ns=cost,
                        saving_how=f"the time of {n - 1} of the pattern's {n} ops removed",
                        fix=fix,
                        evidence={
                            "operators": [str(rs.get_column(f"n{k}")[0]) for k in range(n)],
                            "shapes": sorted(set(map(str, rs.get_column("input_dims")))),
                            "dtypes": sorted(set(map(str, rs.get_column("input_types")))),
                            "calls": rs.height,
                            "figures": {"us_per_step": round(steps.per_step_us(cost), 3)},
                            "event_ids": ids[:10],
                        },
                        steps=steps,
                    )
                )
        return out


for _r in (BiasAdd(), Activation(), Attention(), Foreach(), AscendAffinity()):
    register(_r)
