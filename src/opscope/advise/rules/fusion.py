"""Fusion: separate bias adds, separate activations, hand-written attention, per-parameter
optimizer loops, and Ascend affinity APIs."""

from __future__ import annotations

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
# The ops between QKᵀ and softmax, and softmax and ·V, that SDPA also absorbs (scale, mask,
# dropout): the window searched on each side of the softmax (the ops of the textbook
# formulation: scale, mask, dropout, plus one).
ATTN_WINDOW = 4
# A per-parameter optimizer loop: at least this many per-tensor update ops in one
# Optimizer.step and no foreach/fused op (torch's own foreach path issues one op per kind;
# opscope's heuristic: a loop over at least a few parameters).
FOREACH_MIN_OPS = 8
OPT_PREFIX = "Optimizer.step#"
RMSNORM_SEQ = ("aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul")


def _seq(profile: Profile) -> pl.DataFrame:
    ops = c.user_level_ops(profile)
    grp = ["rank", "tid"]
    return ops.with_columns(
        pl.int_range(pl.len()).over(grp).alias("pos"),
    )


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

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        s = _seq(profile)
        if s.height == 0:
            return []
        s = s.with_columns(
            pl.col("name").shift(-1).over("rank", "tid").alias("n_name"),
            pl.col("id").shift(-1).over("rank", "tid").alias("n_id"),
            pl.col("input_dims").shift(-1).over("rank", "tid").alias("n_dims"),
            pl.col("cost_ns").shift(-1).over("rank", "tid").alias("n_cost"),
        )
        cand = s.filter(
            pl.col("name").is_in(["aten::matmul", "aten::mm"]) & pl.col("n_name").is_in(ADD_OPS)
        )
        keep = []
        for r in cand.iter_rows(named=True):
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
        for where, ids in c.group_by_location(profile, pl.DataFrame({"id": list(rows)})).items():
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

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        s = _seq(profile)
        if s.height == 0:
            return []
        s = s.with_columns(
            pl.col("name").shift(1).over("rank", "tid").alias("p_name"),
            pl.col("input_dims").shift(1).over("rank", "tid").alias("p_dims"),
        )
        cand = s.filter(pl.col("name").is_in(ACTIVATIONS) & pl.col("p_name").is_in(LINEAR_OPS))
        ok = []
        for p_name, p_dims, a_dims in cand.select("p_name", "p_dims", "input_dims").unique().rows():
            p, a = _shapes(p_dims), _shapes(a_dims)  # once per distinct shape pair
            mats = [d for d in p if len(d) >= 2]
            if not a or len(mats) < 2:
                continue
            if p_name == "aten::linear":
                out_shape = [*mats[0][:-1], mats[1][0]]
            else:
                out_shape = [*mats[-2][:-1], mats[-1][-1]]
            if a[0] == out_shape:
                ok.append((p_name, p_dims, a_dims))
        okdf = pl.DataFrame(
            ok,
            schema={"p_name": pl.String, "p_dims": pl.String, "input_dims": pl.String},
            orient="row",
        )
        keep = list(
            cand.join(
                okdf, on=["p_name", "p_dims", "input_dims"], how="semi", nulls_equal=True
            ).iter_rows(named=True)
        )
        if not keep:
            return []
        steps = c.step_info(profile)
        rows = {r["id"]: r for r in keep}
        out = []
        for where, ids in c.group_by_location(profile, pl.DataFrame({"id": list(rows)})).items():
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
    """softmax(QKᵀ)V written by hand."""

    id = "fusion-attention"
    doc = (
        "Attention written as `softmax(q @ k.transpose(-2, -1) * scale) @ v` materialises the "
        "[L, L] score matrix, reads it back for the softmax and again for the second matmul. "
        "`F.scaled_dot_product_attention` runs it as one fused (flash / memory-efficient) "
        "kernel. The rule flags a user-level softmax with a batched matmul within "
        f"{ATTN_WINDOW} ops before it and another within {ATTN_WINDOW} ops after it. Saving: "
        "the time of the softmax and the ops between the two matmuls removed (an estimate that "
        "leaves the matmuls' own time in place)."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        s = _seq(profile)
        if s.height == 0:
            return []
        g = ["rank", "tid"]
        w = range(1, ATTN_WINDOW + 1)
        is_mm = pl.col("name").is_in(BMM_OPS)
        cost_e = pl.col("cost_ns").fill_null(0)
        # Distance to the nearest batched matmul before / after each op, and the cost of the
        # ops in between, all from shifted columns (no per-call scan of the op sequence).
        sh = s.with_columns(
            pl.min_horizontal([pl.when(is_mm.shift(k).over(g)).then(k) for k in w]).alias(
                "mm_before"
            ),
            pl.min_horizontal([pl.when(is_mm.shift(-k).over(g)).then(k) for k in w]).alias(
                "mm_after"
            ),
            *[cost_e.shift(k).over(g).alias(f"cb{k}") for k in w],
            *[cost_e.shift(-k).over(g).alias(f"ca{k}") for k in w],
            *[pl.col("input_dims").shift(-k).over(g).alias(f"da{k}") for k in w],
        )
        sm = sh.filter(
            pl.col("name").is_in(SOFTMAX_OPS)
            & pl.col("mm_before").is_not_null()
            & pl.col("mm_after").is_not_null()
        )
        keep: list[tuple[dict[str, Any], float, str]] = []
        for r in sm.iter_rows(named=True):  # flagged softmax calls only
            between = (
                (r["cost_ns"] or 0)
                + sum(r[f"cb{k}"] or 0 for k in range(1, r["mm_before"]))
                + sum(r[f"ca{k}"] or 0 for k in range(1, r["mm_after"]))
            )
            keep.append((r, float(between), r[f"da{r['mm_after']}"]))
        if not keep:
            return []
        steps = c.step_info(profile)
        rows = {r["id"]: (r, cost, q) for r, cost, q in keep}
        out = []
        for where, ids in c.group_by_location(profile, pl.DataFrame({"id": list(rows)})).items():
            cost = float(sum(rows[i][1] for i in ids))
            r0 = rows[ids[0]][0]
            scores = (_shapes(r0["input_dims"]) or [[]])[0]
            pv = _shapes(rows[ids[0]][2])
            ev: dict[str, Any] = {
                "operators": ["matmul", r0["name"], "matmul"],
                "shapes": sorted({rows[i][0]["input_dims"] for i in ids}),
                "dtypes": sorted({str(rows[i][0]["input_types"]) for i in ids}),
                "calls": len(ids),
                "figures": {"softmax_and_between_us_per_step": round(steps.per_step_us(cost), 3)},
                "event_ids": ids[:10],
            }
            if len(pv) >= 2 and len(pv[1]) >= 3 and len(scores) >= 3:
                v = pv[1]
                ev["bench"] = {
                    "op": "attention",
                    "shape": [*v[:-2], scores[-2], v[-1]],
                    "kv_len": v[-2],
                    "dtype": "float32",
                    "fix": "sdpa",
                }
            out.append(
                c.make_finding(
                    profile,
                    rule=self.id,
                    title="hand-written softmax(QKᵀ)V: use scaled_dot_product_attention",
                    where=where,
                    key="sdpa",
                    saving_ns=cost,
                    saving_how="the softmax and the scale/mask ops between the matmuls removed",
                    fix="out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)",
                    evidence=ev,
                    steps=steps,
                )
            )
        return out


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

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        ev_ = profile.events
        ann = ev_.filter(
            pl.col("name").str.starts_with(OPT_PREFIX)
            & pl.col("kind").is_in(["user_annotation", "cpu_op"])
        )
        if ann.height == 0:
            return []
        anc = c.ancestors(profile, profile.ops.get_column("id")).filter(
            pl.col("anc_id").is_in(ann.get_column("id").implode()) & (pl.col("hops") > 0)
        )
        inside = profile.ops.join(anc.select("id", "anc_id"), on="id").join(
            c.op_parents(profile), on="id", how="left"
        )
        # Ops directly under the annotation (their nearest host op parent is outside it).
        direct = inside.filter(
            ~pl.col("op_parent").is_in(inside.get_column("id").implode())
            | pl.col("op_parent").is_null()
        )
        per = direct.group_by("anc_id").agg(
            pl.len().alias("n"),
            pl.col("name").str.contains("_foreach_|_fused_").any().alias("vectorised"),
            pl.col("id").first().alias("first_id"),
            pl.col("input_dims")
            .filter(pl.col("name").is_in(["aten::add_", "aten::mul_"]))
            .alias("dims"),
        )
        loops = per.filter((pl.col("n") >= FOREACH_MIN_OPS) & ~pl.col("vectorised"))
        if loops.height == 0:
            return []
        steps = c.step_info(profile)
        names = ann.filter(pl.col("id").is_in(loops.get_column("anc_id").implode()))
        opt = names.get_column("name").to_list()[0].removeprefix(OPT_PREFIX).split(".")[0]
        total = float(names.get_column("dur_ns").sum())
        shapes = []
        for d in loops.get_column("dims").to_list()[0]:
            sh = _shapes(d)
            if sh and sh[0] and sh[0] not in shapes:
                shapes.append(sh[0])
        where = next(
            iter(c.group_by_location(profile, pl.DataFrame({"id": loops.get_column("first_id")})))
        )
        return [
            c.make_finding(
                profile,
                rule=self.id,
                title=f"{opt} updates parameters one tensor at a time "
                f"({int(loops.get_column('n').mean())} ops per step)",  # type: ignore[arg-type]
                where=where,
                key=opt,
                saving_ns=0.0,
                saving_how=(
                    f"not estimated from the profile: the optimizer step takes "
                    f"{steps.per_step_us(total / max(names.height, 1) * steps.n):.1f} µs; "
                    "`opscope verify` times foreach vs the loop"
                ),
                fix=f"opt = torch.optim.{opt}(model.parameters(), lr=lr, foreach=True)  "
                "# or fused=True on CUDA",
                evidence={
                    "operators": [f"{OPT_PREFIX}{opt}.step"],
                    "shapes": [c.fmt_shape(s) for s in shapes[:20]],
                    "dtypes": [],
                    "calls": int(loops.get_column("n").sum()),
                    "figures": {
                        "ops_per_step": float(loops.get_column("n").mean()),  # type: ignore[arg-type]
                        "step_us": round(total / max(names.height, 1) / 1000, 3),
                    },
                    "bench": {
                        "op": "optimizer",
                        "optimizer": opt,
                        "shapes": shapes[:64],
                        "dtype": "float32",
                        "fix": "foreach",
                    },
                    "event_ids": loops.get_column("first_id").to_list()[:10],
                },
                severity=c.severity_for(
                    steps.pct(total / max(names.height, 1) * steps.n), "medium"
                ),
                steps=steps,
            )
        ]


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

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        if c.target_of(profile, results) != "ascend":
            return []
        s = _seq(profile)
        if s.height == 0:
            return []
        shifted = s.with_columns(
            *[pl.col("name").shift(-k).over("rank", "tid").alias(f"n{k}") for k in range(5)],
            *[pl.col("cost_ns").shift(-k).over("rank", "tid").alias(f"c{k}") for k in range(5)],
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
            for where, ids in c.group_by_location(profile, df).items():
                rs = df.filter(pl.col("id").is_in(ids))
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
