"""GEMMs whose gap to the performance model's bound has a shape-level cause: too few output
tiles for the SMs/CUs, a last wave mostly empty (wave quantisation), or a tall-skinny shape that
makes the GEMM memory-bound; and elementwise / norm kernels far below the memory bandwidth.

Every saving here is the gap of :mod:`opscope.analysis.model` (measured - lower bound) or the
part of it the cause explains, so never more than the op's own time; no peaks, no finding. Ops
inside a materialised attention span are left to fusion-attention (one claim per op).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.advise.rules.fusion import in_attention_spans
from opscope.analysis import tree as _tree  # its SHORTCUTS switch, read when used
from opscope.model import Profile

GEMM_OPS: Final = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::matmul",
    "aten::linear",
)
# The output tile of a large cuBLAS / hipBLASLt / CANN GEMM: 128x128 is the common tile of the
# big-GEMM kernels (CUTLASS default threadblock shape for sm80/sm90 bf16, hipBLASLt MT128x128,
# Ascend cube baseM/baseN 128); used only when the kernel's grid is not in the trace.
TILE_M: Final = 128
TILE_N: Final = 128
# Few tiles: fewer output tiles than this share of the SMs/CUs leaves the rest idle unless the
# library splits K (opscope's heuristic: half the device idle is worth batching GEMMs).
FEW_TILES_SHARE: Final = 0.5
# Wave quantisation: the tile waves fill less than this share of their slots (the last wave
# mostly empty, e.g. 1.1 waves = 55%); NVIDIA's "Matrix Multiplication Background" guide
# ("wave quantization") shows the same effect.
WAVE_EFFICIENCY_MIN: Final = 0.8
# A GEMM (or elementwise op) counts only when its gap is at least this share of its time and
# of the step (opscope's heuristics: below that the bound's own error, ~10-20%, decides).
GAP_MIN_SHARE: Final = 0.25
STEP_MIN_PCT: Final = 0.5
# Elementwise / norm / softmax kernels reaching under this share of the memory bandwidth
# (opscope's heuristic: a fused, vectorised elementwise kernel reaches 70-90% of the
# datasheet bandwidth on H100/MI300X in vendors' stream benchmarks).
BANDWIDTH_MIN_SHARE: Final = 0.3
# A memory-bound GEMM whose time per call is under this many launch floors is mostly launch
# and ramp-up (opscope's heuristic: a kernel of a few µs on a 1.5 µs floor): CUDA graphs /
# torch.compile(mode="reduce-overhead") remove the launches, batching removes the calls.
LAUNCH_BOUND_FLOORS: Final = 4.0
# What an explicit split-K measured on an NVIDIA H200 (torch 2.11, cuBLAS; speedup of the fix
# over cuBLAS's own kernel, benchmarks/cuda_verify_check.py): not faster. Quoted in the
# findings so that a reader does not take it for the fix.
SPLITK_H200: Final = {"gemm-memory-bound": "8x8192x8192 bf16: 0.91x",
                      "gemm-tiles": "1024x1024x65536 bf16: 0.99x"}  # fmt: skip


def gemm_dims(name: str, dims: list[list[int]]) -> tuple[int, int, int, int] | None:
    """(batch, M, N, K) of a host GEMM op from its input shapes (None when not a plain GEMM)."""
    d = list(dims)
    if name in ("aten::addmm", "aten::baddbmm"):
        d = d[1:]
    if len(d) < 2 or not d[0] or not d[1]:
        return None
    a, b = d[0], d[1]
    if name == "aten::linear":
        if len(b) != 2 or a[-1] != b[1]:
            return None
        return 1, math.prod(a[:-1]), b[0], a[-1]
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch = max(math.prod(a[:-2]), math.prod(b[:-2]), 1)
    return batch, a[-2], b[-1], a[-1]


# The formulas of the fused-attention and convolution calls (attention- and conv-efficiency).
ATTN_FORMULA: Final = r"^(attention|npu_fusion_attention)"
CONV_FORMULA: Final = r"^conv"


def _call_masks(calls: pl.DataFrame) -> dict[str, Any]:
    """The perf model's calls each rule here reads, as boolean arrays over ``calls`` (a null
    is false): each distinct value of a column tested once in Python and the answers read per
    row (a select of the predicates was a query of fixed cost, 0.5 ms on a few hundred calls).
    The formulas' patterns are prefixes."""
    n = calls.height

    def per_row(col: str, test: Any, dtype: Any = bool) -> Any:
        values = calls.get_column(col).to_list()
        hit = {v: test(v) if v is not None else 0 for v in set(values)}
        return np.fromiter(map(hit.__getitem__, values), dtype=dtype, count=n)

    gemm = per_row("name", set(GEMM_OPS).__contains__)
    gemm &= per_row("roof", "matrix".__eq__)
    time_s = calls.get_column("time_ns")
    gemm &= c.valid(time_s)
    with np.errstate(invalid="ignore"):  # (a null time is NaN: not above 0)
        costed = c.valid(calls.get_column("gap_ns")) & (time_s.to_numpy() > 0)
    moe = gemm & per_row("module", lambda m: MOE_RE.search(m) is not None) if gemm.any() else gemm
    # each formula's prefix: 1 attention, 2 convolution, 0 neither
    formula = per_row(
        "formula",
        lambda f: 1 if f.startswith(_ATTN_PREFIXES) else 2 if f.startswith(_CONV_PREFIXES) else 0,
        np.int8,
    )
    return {
        "gemm": gemm & c.valid(calls.get_column("bound_ns")),
        "moe": moe,
        ATTN_FORMULA: (formula == 1) & costed,
        CONV_FORMULA: (formula == 2) & costed,
    }


#: :data:`ATTN_FORMULA` and :data:`CONV_FORMULA` as the prefixes they match.
_ATTN_PREFIXES: Final = ("attention", "npu_fusion_attention")
_CONV_PREFIXES: Final = ("conv",)


def model_calls(profile: Profile, results: Mapping[str, Any], which: str) -> pl.DataFrame:
    """The perf model's calls of ``which`` (a key of :func:`_call_masks`), in their order: the
    four masks once per profile and device (a filter each was a query of fixed cost, four a
    report), the rows gathered by position only where a mask keeps some."""

    def run() -> dict[str, Any]:
        calls = c.perf_model(profile, results).calls
        if calls.height == 0:
            return {}
        return _call_masks(calls)

    masks: dict[str, Any] = c._memo(f"model_calls:{c.device_option(results)}", profile, run)
    calls: pl.DataFrame = c.perf_model(profile, results).calls
    mask = masks.get(which)
    if mask is None or not mask.any():
        return calls.clear()
    return calls[np.flatnonzero(mask)]


def _gemm_calls(profile: Profile, results: Mapping[str, Any]) -> tuple[Any, pl.DataFrame]:
    """The model and its GEMM groups with (batch, M, N, K), tiles and measured time.

    Once per profile and device: three rules (gemm-tiles, gemm-memory-bound, gemm-alignment) ask
    for the same groups, each a dozen queries (filters, attention spans, kernel grids, the shape
    grouping): 0.055 s of a 75k-event trace's report computed three times."""
    out: tuple[Any, pl.DataFrame] = c._memo(
        f"gemm_calls:{c.device_option(results)}", profile, lambda: _gemm_calls_of(profile, results)
    )
    return out


def _gemm_calls_of(profile: Profile, results: Mapping[str, Any]) -> tuple[Any, pl.DataFrame]:
    """:func:`_gemm_calls` computed (no memo)."""
    model = c.perf_model(profile, results)
    if model.calls.height == 0:  # no costed call (no host op): the empty table, no filter
        return model, model.calls
    calls = model_calls(profile, results, "gemm")
    if calls.height:
        calls = calls.filter(~in_attention_spans(profile, calls.get_column("id")))
        moe = {i for g in moe_expert_groups(profile, results) for i in g["ids"]}
        if moe:
            calls = calls.filter(~pl.col("id").is_in(list(moe)))
    if calls.height == 0:
        return model, calls
    grid = _kernel_blocks(profile, calls.get_column("id"))
    calls = calls.join(grid, on="id", how="left")
    return model, c.shape_groups(
        calls,
        pl.col("compute_ns").sum(),
        pl.col("memory_ns").sum(),
        pl.col("flops").sum(),
        pl.col("bytes").sum(),
        pl.col("blocks").max(),
    )


def _kernel_blocks(profile: Profile, ids: pl.Series) -> pl.DataFrame:
    """``[id, blocks]``: the largest grid (thread blocks) of the kernels under each op.

    The kernels' ops walked up in NumPy and the pairs reaching one of ``ids`` kept (the pairs
    of every kernel's op as a table, filtered, joined and grouped: 8-10 ms on a 9k-kernel
    trace)."""
    import numpy as np

    empty = pl.DataFrame(schema={"id": pl.Int64, "blocks": pl.Int64})
    k = profile.kernels
    if "blocks" not in k.columns or k.height == 0:
        return empty
    k = k.select("op_id", "blocks").filter(
        pl.col("op_id").is_not_null() & pl.col("blocks").is_not_null()
    )
    if k.height == 0:
        return empty
    op = k.get_column("op_id").to_numpy().astype(np.int64)
    blocks = k.get_column("blocks").to_numpy()
    forest = c._forest(profile)
    # each kernel's op itself (hops 0), then its ancestors: c.ancestors' pairs
    i, anc, _ = forest.ancestor_pairs(
        c.event_positions(profile, pl.Series(op)), max_depth=c.MAX_WALK - 1
    )
    src = np.concatenate([np.arange(len(op)), i])
    dst = np.concatenate([op, forest.ids[anc]])
    keep = np.isin(dst, ids.to_numpy())
    if not keep.any():
        return empty
    uniq, inv = np.unique(dst[keep], return_inverse=True)
    best = np.full(len(uniq), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(best, inv, blocks[src[keep]])
    return pl.DataFrame(
        {"id": uniq, "blocks": best}, schema={"id": pl.Int64, "blocks": k.schema["blocks"]}
    )


def _finding(
    profile: Profile,
    rule: str,
    rows: list[dict[str, Any]],
    saving_ns: float,
    title: str,
    how: str,
    fix: str,
    figures: dict[str, Any],
    steps: c.StepInfo,
    bench: dict[str, Any] | None = None,
    method: str = "bound-gap",
    extra: dict[str, Any] | None = None,
) -> Finding:
    ids = [i for r in rows for i in r["ids"][:1]]
    locs = c.locate(profile, ids[:1])
    loc = locs.get(ids[0], c.Location(None, None, None, None))
    own = float(sum(r["time_ns"] for r in rows))
    gap = float(sum(r["gap_ns"] or 0.0 for r in rows))
    ev: dict[str, Any] = {
        "operators": sorted({r["name"] for r in rows}),
        "shapes": [r["input_dims"] for r in rows],
        "dtypes": sorted({str(r["dtype"]) for r in rows}),
        "calls": int(sum(r["calls"] for r in rows)),
        "figures": {
            "time_us_per_step": round(steps.per_step_us(own), 3),
            "bound_us_per_step": round(steps.per_step_us(own - gap), 3),
            "gap_us_per_step": round(steps.per_step_us(gap), 3),
            **figures,
        },
        "event_ids": ids[:10],
        # the op groups (first op id of each shape group) explained here: see advise.overlap
        "op_groups": ids,
    }
    if bench:
        ev["bench"] = bench
    ev.update(extra or {})
    f: Finding = c.make_finding(
        profile,
        rule=rule,
        title=title,
        where=(loc.file, loc.line, loc.module),
        key=str(rows[0]["input_dims"]),
        saving_ns=saving_ns,
        saving_how=how,
        fix=fix,
        evidence=ev,
        steps=steps,
        limit_ns=gap,
        limit_what="the gap between the op's time and its lower bound",
        method=method,
    )
    return f


def gap_text(r: dict[str, Any], steps: c.StepInfo) -> str:
    """``measured T µs/step vs bound B µs/step (gap G)`` of a shape group, for saving_how."""
    t, gap = float(r["time_ns"]), float(r["gap_ns"] or 0.0)
    return (
        f"measured {steps.per_step_us(t):.1f} µs/step vs the performance model's bound "
        f"{steps.per_step_us(t - gap):.1f} µs/step (gap {steps.per_step_us(gap):.1f})"
    )


def _significant(r: dict[str, Any], steps: c.StepInfo) -> bool:
    gap = r["gap_ns"] or 0.0
    return gap >= GAP_MIN_SHARE * r["time_ns"] and steps.pct(gap) >= STEP_MIN_PCT


class GemmTiles:
    """GEMMs with too few output tiles for the device, or a mostly empty last wave."""

    id = "gemm-tiles"
    doc = (
        "A GEMM kernel computes its output in tiles, one thread block (CTA / workgroup) per "
        "tile, and each SM/CU runs one tile at a time at full speed. With fewer tiles than "
        f"{FEW_TILES_SHARE:.0%} of the SMs/CUs most of the device idles (a small M×N with a "
        "long K); with 1.1 waves of tiles the last wave runs nearly empty (wave quantisation: "
        f"under {WAVE_EFFICIENCY_MIN:.0%} of the slots used). Tiles come from the kernel's "
        f"grid when the trace has it, else from M and N and a typical {TILE_M}×{TILE_N} tile. "
        "Only compute-side GEMMs (intensity right of the ridge point) whose time is at least "
        f"{GAP_MIN_SHARE:.0%} above the performance model's bound and whose gap is at least "
        f"{STEP_MIN_PCT:g}% of the step are flagged. Saving: the part of the gap the idle "
        "share explains (time × (1 - used share)), never more than the gap: a bound gap, not "
        "a measured fix (the finding says so and gives the measured time and bound). Fix for "
        "few tiles: more output tiles per kernel — batch several such GEMMs into one "
        "(torch.bmm / a grouped GEMM), concatenate GEMMs that share an input along N, or grow "
        "M with a larger batch; an explicit split-K is not offered: on an H200 it was not "
        f"faster than cuBLAS's own kernel choice ({SPLITK_H200['gemm-tiles']}). "
        "Fix for a mostly empty last wave: change M/N by a tile to fill whole waves "
        "(`opscope verify` measures that by rate)."
    )

    # its inputs are host ops (the user-level sequence / the costed calls): none without one
    needs = ("cpu_op",)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        model, g = _gemm_calls(profile, results)
        spec = model.spec
        if g.height == 0 or spec is None or not spec.compute_units:
            return []
        steps = c.step_info(profile)
        sms = int(spec.compute_units)
        out = []
        for r in g.iter_rows(named=True):
            bmnk = gemm_dims(r["name"], r["dims"] or [])
            if bmnk is None or not _significant(r, steps):
                continue
            if (r["memory_ns"] or 0) > (r["compute_ns"] or 0):
                continue  # memory-side: gemm-memory-bound explains it
            b, m, n, k = bmnk
            tiles = int(r["blocks"] or b * math.ceil(m / TILE_M) * math.ceil(n / TILE_N))
            waves = tiles / sms
            used = waves / math.ceil(waves) if tiles else 1.0
            if tiles < FEW_TILES_SHARE * sms:
                kind = f"only {tiles} output tiles for {sms} SMs/CUs"
                fix = (
                    "# more output tiles per kernel: batch the small GEMMs into one\n"
                    "out = torch.bmm(a_stack, b_stack)  # not: [a @ b for a, b in pairs]\n"
                    "# or concatenate GEMMs that share an input along N, one kernel:\n"
                    "y1, y2 = (x @ torch.cat([w1, w2], 1)).split([n1, n2], -1)\n"
                    "# or grow M: a larger batch / more tokens per call"
                )
            elif used < WAVE_EFFICIENCY_MIN:
                kind = f"{waves:.2f} waves of tiles on {sms} SMs/CUs ({used:.0%} of slots used)"
                fix = (
                    f"# {tiles} tiles of {TILE_M}x{TILE_N} on {sms} SMs: a last wave of "
                    f"{tiles - (math.ceil(waves) - 1) * sms}\n"
                    f"# change M or N by a tile so the tiles fill whole waves, e.g. N={n} -> "
                    f"{max(n - TILE_N, TILE_N)}, or batch tokens so M grows"
                )
            else:
                continue
            few = tiles < FEW_TILES_SHARE * sms
            time_ns = float(r["time_ns"])
            saving = time_ns * (1.0 - min(used if tiles >= sms else tiles / sms, 1.0))
            how = (
                "the GEMM's time × the share of SMs/CUs its tiles leave idle, capped at its "
                f"gap to the performance model's bound: {gap_text(r, steps)}"
            )
            if few:
                how += (
                    "; a bound gap, not a measured fix: batching or concatenating GEMMs "
                    "recovers it; an explicit split-K was not faster than cuBLAS's own choice "
                    f"on an H200 ({SPLITK_H200[self.id]})"
                )
            out.append(
                _finding(
                    profile,
                    self.id,
                    [r],
                    saving,
                    f"GEMM {m}x{n}x{k}" + (f" (batch {b})" if b > 1 else "") + f": {kind}",
                    how,
                    fix,
                    {
                        "tiles": tiles,
                        "sms": sms,
                        "waves": round(waves, 3),
                        "grid_from_kernel": r["blocks"] is not None,
                    },
                    steps,
                    # few tiles: no micro-benchmark of the fix (batching needs the other GEMMs)
                    extra={"fix_measured": False} if few else None,
                )
            )
        return out


class GemmMemoryBound:
    """Tall-skinny GEMMs: left of the ridge point, and far from the bandwidth bound."""

    id = "gemm-memory-bound"
    doc = (
        "A GEMM with a small M or N (decode with a few tokens, a per-sample projection, a "
        "batch of 1) does 2·M·N·K FLOPs on M·K + K·N + M·N elements: its intensity falls left "
        "of the ridge point and its bound is the time to read the weights. Flagged when the "
        "performance model puts the GEMM on the memory side and its time is at least "
        f"{GAP_MIN_SHARE:.0%} above that bound (gap ≥ {STEP_MIN_PCT:g}% of the step): GEMM "
        "libraries pick tiles for square shapes, and a tall-skinny one reads its operands "
        "more than once or leaves SMs idle. Saving: the gap (measured - bound), the most any "
        "fix of this GEMM can remove: a bound gap, not a measured fix (the finding gives the "
        "measured time and the bound). Fix: batch the small dimension (more tokens or "
        "samples per call: the weights are read once for all of them), concatenate GEMMs "
        "that share an input (q/k/v projections), or use fp8/int8 weights to halve the "
        f"bytes; a GEMM of under {LAUNCH_BOUND_FLOORS:g} launch floors per call is mostly "
        "launch: CUDA graphs (torch.compile mode='reduce-overhead') remove the launches. "
        "An explicit split-K is not offered: on an H200 it was not faster than cuBLAS's own "
        f"kernel choice ({SPLITK_H200['gemm-memory-bound']})."
    )

    # its inputs are host ops (the user-level sequence / the costed calls): none without one
    needs = ("cpu_op",)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        model, g = _gemm_calls(profile, results)
        if g.height == 0:
            return []
        steps = c.step_info(profile)
        floor = float(model.floor_ns or 0.0)
        out = []
        for r in g.iter_rows(named=True):
            bmnk = gemm_dims(r["name"], r["dims"] or [])
            if bmnk is None or not _significant(r, steps):
                continue
            if (r["memory_ns"] or 0) <= (r["compute_ns"] or 0):
                continue
            _, m, n, k = bmnk
            gbps = r["bytes"] / r["time_ns"]
            per_call = float(r["time_ns"]) / max(int(r["calls"]), 1)
            launch_bound = floor > 0 and per_call < LAUNCH_BOUND_FLOORS * floor
            fix = (
                "# grow the small dimension: one GEMM for many tokens/samples reads the "
                "weights once\ny = torch.cat(xs, 0) @ w  # not: [x @ w for x in xs]\n"
                "# fuse GEMMs that share an input\n"
                "qkv = x @ torch.cat([wq, wk, wv], 0).t()  # one GEMM, not three"
            )
            if launch_bound:
                fix += (
                    "\n# a few µs per call is mostly launch: capture the step in a CUDA graph\n"
                    "step = torch.compile(step, mode='reduce-overhead')"
                )
            out.append(
                _finding(
                    profile,
                    self.id,
                    [r],
                    float(r["gap_ns"] or 0.0),
                    f"tall-skinny GEMM {m}x{n}x{k}: memory-bound, {gbps:.0f} GB/s"
                    + (", launch-bound" if launch_bound else ""),
                    f"the gap between the GEMM's time and its memory-side bound (bytes / "
                    f"bandwidth + launch floor): {gap_text(r, steps)}; a bound gap, not a "
                    "measured fix: batching the small dimension or fusing recovers it; an "
                    "explicit split-K was not faster than cuBLAS's own choice on an H200 "
                    f"({SPLITK_H200[self.id]})",
                    fix,
                    {
                        "achieved_gbps": round(gbps, 1),
                        "intensity": round(r["flops"] / max(r["bytes"], 1), 2),
                        "per_call_us": round(per_call / 1e3, 3),
                        "launch_floor_us": round(floor / 1e3, 3),
                    },
                    steps,
                    extra={"fix_measured": False},
                )
            )
        return out


# MoE: the GEMMs of one expert-layer pattern (module path with the expert index masked) whose
# modules name experts; at least this many experts per step (opscope's heuristic: below 4 a
# loop costs little next to a grouped GEMM's setup).
MOE_MODULE = r"(?i)expert"
MOE_RE = re.compile(MOE_MODULE)
MOE_MIN_EXPERTS: Final = 4


def moe_expert_groups(profile: Profile, results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """GEMM calls of MoE experts run one expert at a time: per (module pattern with the expert
    index masked, weight shape), the calls, their time and their summed FLOPs/bytes."""
    import re

    def run() -> list[dict[str, Any]]:
        model = c.perf_model(profile, results)
        if _tree.SHORTCUTS and model.calls.height == 0:
            return []  # no costed call (the filter below would find none)
        calls = model_calls(profile, results, "moe")
        if calls.height == 0:
            return []
        groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for r in c.shapes_table(calls).iter_rows(named=True):
            bmnk = gemm_dims(r["name"], r["dims"] or [])
            if bmnk is None:
                continue
            r["m"] = bmnk[1]
            pattern = re.sub(r"(?<=[_.])\d+(?=[/.]|$)", "*", r["module"])
            groups.setdefault((pattern, f"{bmnk[3]}x{bmnk[2]}", str(r["dtype"])), []).append(r)
        out = []
        steps = c.step_info(profile)
        for (pattern, kn, dtype), rs in groups.items():
            experts = {r["module"] for r in rs}
            if len(experts) < MOE_MIN_EXPERTS or len(rs) / max(steps.n, 1) < MOE_MIN_EXPERTS:
                continue
            out.append(
                {
                    "pattern": pattern,
                    "kn": kn,
                    "dtype": dtype,
                    "experts": len(experts),
                    "ids": [int(r["id"]) for r in rs],
                    "time_ns": float(sum(r["time_ns"] for r in rs)),
                    "flops": float(sum(r["flops"] or 0 for r in rs)),
                    "bytes": float(sum(r["bytes"] or 0 for r in rs)),
                    "calls": len(rs),
                    "tokens": [int(r["m"]) for r in rs][:64],
                }
            )
        return out

    key = f"moe:{c.device_option(results)}"
    groups: list[dict[str, Any]] = c._memo(key, profile, run)
    return groups


class MoeExpertLoop:
    """MoE experts run as one GEMM per expert instead of one grouped GEMM."""

    id = "moe-expert-loop"
    doc = (
        "A mixture-of-experts layer written as a loop over experts (`for e in experts: "
        "y[idx_e] = expert_e(x[idx_e])`) launches one small GEMM per expert: each has few "
        "tokens (a small M: few tiles, memory-bound on the expert's weights) and its own "
        "launch. A grouped GEMM runs all experts in one kernel. The rule groups the GEMMs "
        "whose module path names experts (`experts.3.w1`, `Expert_3/Linear_0`) by the path "
        "with the expert index masked and the weight shape; with at least "
        f"{MOE_MIN_EXPERTS} experts (and calls per step) it is flagged. Saving: their time "
        "minus the performance model's bound of one grouped GEMM (the summed FLOPs at the "
        "matrix peak or the summed bytes at the bandwidth, plus one launch floor), never more "
        "than their time; the token dispatch (index/scatter ops) is not counted. Fix: a "
        "grouped-GEMM MoE kernel (`torch._grouped_mm`, vLLM/SGLang `fused_moe`, MegaBlocks, "
        "torch_npu `npu_grouped_matmul` on Ascend)."
    )

    # its inputs are host ops (the user-level sequence / the costed calls): none without one
    needs = ("cpu_op",)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        from opscope.analysis.model import bound_ns

        spec = c.perf_model(profile, results).spec
        groups = moe_expert_groups(profile, results)
        if spec is None or not groups:
            return []
        steps = c.step_info(profile)
        out = []
        for g in groups:
            bound = bound_ns(spec, g["flops"], g["bytes"], g["dtype"], "matrix", kernels=1)
            if bound is None:
                continue
            # one grouped GEMM per layer call: as many as the calls of one expert
            layer_calls = max(g["calls"] // max(g["experts"], 1), 1)
            grouped = bound + (layer_calls - 1) * c.perf_model(profile, results).floor_ns
            saving = g["time_ns"] - grouped
            if saving <= 0 or steps.pct(saving) < STEP_MIN_PCT:
                continue
            loc = c.locate(profile, g["ids"][:1]).get(g["ids"][0])
            out.append(
                c.make_finding(
                    profile,
                    rule=self.id,
                    title=(
                        f"MoE: {g['experts']} experts run as {g['calls'] / max(steps.n, 1):.0f} "
                        f"separate GEMMs per step (K×N {g['kn']}): use a grouped GEMM"
                    ),
                    where=(loc.file, loc.line, g["pattern"]) if loc else (None, None, g["pattern"]),
                    key=f"{g['pattern']}:{g['kn']}",
                    saving_ns=saving,
                    saving_how=(
                        "the expert GEMMs' time minus the bound of one grouped GEMM per layer "
                        f"call on {spec.label} (summed FLOPs/bytes at the peaks, one launch floor)"
                    ),
                    fix=(
                        "# one grouped GEMM over all experts instead of a Python loop:\n"
                        "offs = tokens_per_expert.cumsum(0).to(torch.int32)\n"
                        "out = torch._grouped_mm(x_sorted, w_experts, offs=offs)"
                    ),
                    evidence={
                        "operators": ["expert GEMM"],
                        "shapes": [],
                        "dtypes": [g["dtype"]],
                        "calls": g["calls"],
                        "figures": {
                            "experts": g["experts"],
                            "time_us_per_step": round(steps.per_step_us(g["time_ns"]), 3),
                            "grouped_bound_us_per_step": round(steps.per_step_us(grouped), 3),
                            "tokens_per_expert_call": g["tokens"][:16],
                        },
                        "event_ids": g["ids"][:10],
                    },
                    steps=steps,
                    limit_ns=g["time_ns"],
                    limit_what="the expert GEMMs' own time",
                    method="bound-gap",
                )
            )
        return out


_ELEMENTWISE_FORMULA = r"^(elementwise|norm|softmax|reduction)"


class ElementwiseBandwidth:
    """Elementwise / norm / softmax ops far below the memory bandwidth."""

    id = "elementwise-bandwidth"
    doc = (
        "An elementwise, normalisation, softmax or reduction op does a few FLOPs per element: "
        "its bound is reading and writing its tensors at the memory bandwidth (plus one "
        f"launch floor per kernel). An op group reaching under {BANDWIDTH_MIN_SHARE:.0%} of "
        "the bandwidth, whose time is at least "
        f"{GAP_MIN_SHARE:.0%} above that bound and whose gap is ≥ {STEP_MIN_PCT:g}% of the step, "
        "is flagged: a strided or broadcast layout, an unvectorised kernel, or many small "
        "launches. Saving: the gap (measured - bound). Fix: fuse the chain of elementwise ops "
        "(torch.compile generates one vectorised kernel), use the fused norm "
        "(F.layer_norm / torch_npu.npu_rms_norm), make the input contiguous."
    )

    # its inputs are host ops (the user-level sequence / the costed calls): none without one
    needs = ("cpu_op",)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        model = c.perf_model(profile, results)
        if model.spec is None or not model.spec.mem_bw:
            return []
        calls = model.calls.filter(
            pl.col("formula").fill_null("").str.contains(_ELEMENTWISE_FORMULA)
            & pl.col("gap_ns").is_not_null()
            & (pl.col("time_ns") > 0)
        )
        if calls.height:
            calls = calls.filter(~in_attention_spans(profile, calls.get_column("id")))
        if calls.height == 0:
            return []
        steps = c.step_info(profile)
        g = calls.group_by("name", "input_dims", "input_types", maintain_order=True).agg(
            pl.len().alias("calls"),
            pl.col("time_ns").sum().cast(pl.Float64),
            pl.col("gap_ns").sum(),
            pl.col("bytes").sum(),
            pl.col("dtype").first(),
            pl.col("id").sort().alias("ids"),
        )
        bw = float(model.spec.mem_bw)
        out = []
        for r in g.iter_rows(named=True):
            share = (r["bytes"] or 0) / (r["time_ns"] / 1e9) / bw
            if share >= BANDWIDTH_MIN_SHARE or not _significant(r, steps):
                continue
            out.append(
                _finding(
                    profile,
                    self.id,
                    [r],
                    float(r["gap_ns"]),
                    f"{r['name']} at {share:.0%} of memory bandwidth",
                    "the gap between the op's time and its bound (bytes / bandwidth + launch "
                    "floor per kernel)",
                    "model = torch.compile(model)  # fuses elementwise chains into one kernel\n"
                    "x = x.contiguous()  # strided inputs defeat vectorised loads",
                    {"pct_of_bandwidth": round(100 * share, 2)},
                    steps,
                )
            )
        return out


def _torch_dtype(short: str | None) -> str:
    return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(short or "", "float32")


register(GemmTiles())
register(GemmMemoryBound())
register(ElementwiseBandwidth())
register(MoeExpertLoop())
