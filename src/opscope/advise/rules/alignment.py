"""Shape alignment of matmul, convolution and attention dimensions, per device and dtype."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.model import Profile

# NVIDIA Tensor Cores: dims in multiples of 8 elements (16 bytes) for fp16/bf16 and of 4 (16
# bytes) for tf32 — NVIDIA "Matrix Multiplication Background User's Guide" and the cuBLAS
# documentation ("Tensor Core usage requirements").
NVIDIA_MULTIPLE = {"float16": 8, "bfloat16": 8, "float32": 4}
# Ascend cube units: the seed article's rule — hidden dims in multiples of 128.
ASCEND_MULTIPLE = 128
# Ascend inner (last, contiguous) axis: multiples of 256 elements (msprof-analyze advisor's
# AI-core matmul rule) and of 512 bytes (one burst of the MTE2 load path).
ASCEND_INNER_ELEMS = 256
ASCEND_INNER_BYTES = 512
# Ascend flash attention: head dim and sequence length multiples of 128 (FlashAttentionScore
# tiling in the CANN operator docs).
ASCEND_FA_MULTIPLE = 128
# CPU profiles (usually meant for a GPU/NPU later): the seed's generic 128 rule, low severity.
CPU_MULTIPLE = 128

_HOST_MM = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
_HOST_CONV = ("aten::convolution",)
_HOST_ATTN = ("aten::scaled_dot_product_attention",)
_KERNEL_MM = r"(?i)matmul|gemm"
_KERNEL_FA = r"(?i)flashattention"

# An aligned row as a peer of flagged ones: (its position among the aligned rows, FLOPs per
# call, FLOPs over its calls, time)
_Peer = tuple[int, float, float, Any]


def _mkn(name: str, dims: list[list[int]]) -> tuple[int, int, int, int] | None:
    """(batch, m, k, n) of a host matmul op from its input shapes."""
    d = [x for x in dims if x]
    if name in ("aten::addmm", "aten::baddbmm"):
        d = d[1:] if len(d) >= 3 else d
    if len(d) < 2:
        return None
    a, b = d[0], d[1]
    if len(a) == 2 and len(b) == 2 and a[1] == b[0]:
        return 1, a[0], a[1], b[1]
    if len(a) == 3 and len(b) == 3 and a[2] == b[1]:
        return a[0], a[1], a[2], b[2]
    return None


def kernel_mkn(dims: list[list[int]]) -> tuple[int, int, int] | None:
    """(m, k, n) of an Ascend MatMul kernel ``x1;x2[;bias]`` (either operand may be transposed)."""
    d = [x for x in dims if len(x) == 2]
    if len(d) < 2:
        return None
    (a0, a1), (b0, b1) = d[0], d[1]
    if a1 == b0:
        return a0, a1, b1
    if a1 == b1:
        return a0, a1, b0
    if a0 == b0:
        return a1, a0, b1
    if a0 == b1:
        return a1, a0, b0
    return None


def candidate_key(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """The candidates' order: by time, longest first, then by op name and shape text (nulls
    last), a total order, so that the benchmarked shape and the findings' order do not depend
    on the order the rows were grouped in."""
    key: list[Any] = []
    for k in ("cost_ns", "name", "input_dims", "input_types", "dev"):
        v = r.get(k)
        if k == "cost_ns":
            key += [v is None, -v if v is not None else 0]
        else:
            key += [v is None, v if v is not None else ""]
    return tuple(key)


def candidate_order(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` (one row per op, shapes, dtypes) in :func:`candidate_key`'s order."""
    rows = sorted(df.iter_rows(named=True), key=candidate_key)
    return pl.DataFrame(rows, schema=df.schema) if rows else df


def _group_key(group: tuple[tuple[Any, Any, Any], list[Any]]) -> tuple[Any, ...]:
    """:func:`candidate_key` of a group of :meth:`Alignment._candidates` (``((name, dims,
    types), [cost, ids])``), read straight from it: its time, name and shape text are never
    null (costs filled, rows without either dropped) and ``dev`` is the same for every group,
    so only the dtypes text can be null."""
    (name, dims, types), (ns, _) = group
    return -ns, name, dims, types is None, types if types is not None else ""


def _matmul_shape(r: Mapping[str, Any]) -> tuple[int, ...] | None:
    """A candidate's matmul shape, parsed once for its checks and its FLOPs: ``(m, k, n)`` of
    a kernel (:func:`kernel_mkn`), ``(batch, m, k, n)`` of a host matmul op (:func:`_mkn`);
    none for other ops or shapes."""
    dims = r["dims"] or []
    if r["dev"]:
        return kernel_mkn(dims)
    return _mkn(r["name"], dims) if r["name"] in _HOST_MM else None


def _sorted(ids: list[Any]) -> list[Any]:
    """``ids`` ascending, nulls first (a Polars sort's order)."""
    if None not in ids:
        return sorted(ids)
    return [None] * ids.count(None) + sorted(i for i in ids if i is not None)


class Alignment:
    """Matmul / conv / attention dims that are not multiples of what the target's units want."""

    id = "shape-alignment"
    doc = (
        "Matrix units process tiles: a matmul, convolution or attention whose dimensions are not "
        "multiples of the tile wastes the padded part of the last tile and can fall back to "
        "slower kernels. NVIDIA Tensor Cores want multiples of 8 elements in fp16/bf16 and 4 in "
        "tf32 (16 bytes; NVIDIA's matrix-multiplication guide); Ascend's cube units want hidden "
        "dims in multiples of 128 (the seed's rule), inner axes in multiples of 256 elements "
        "(msprof-analyze) and of 512 bytes, and flash-attention head dims and sequence lengths "
        "in multiples of 128 (BNSD: the last two axes of q; BSH/SBH: the hidden axis and the "
        "longer leading axis). A CPU profile gets the seed's generic 128 rule at low severity, "
        "since it is usually meant for an accelerator later (pass target= to pick one). Dims "
        "smaller than the multiple are not flagged (padding them costs more than it saves). "
        "Fix: pad the dimension (e.g. a layer's out_features) to the multiple shown and slice "
        "the result; `opscope verify` measures the padded shape on the present device. Saving: "
        "the flagged calls' time at the FLOP/s the same operator (same dtype, within 8× the "
        "work per call) reaches on aligned shapes in the same profile, when it reaches more; "
        "else, on a device with peaks, the flagged calls' time minus the performance model's "
        "bound of the padded shape (padded FLOPs and bytes at the peaks, one launch floor per "
        "call); else not estimated. Never more than the flagged calls' own time."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        from opscope.analysis.tree import no_ops

        target = c.target_of(profile, results)
        if no_ops(profile) and not c.present(profile.kernels.get_column("input_dims")):
            return []  # no shape on any kernel, no host op: no candidate (the queries find none)
        rows = self._candidates(profile)
        if not rows:
            return []
        steps = c.step_info(profile)
        flagged: list[dict[str, Any]] = []
        aligned: list[dict[str, Any]] = []
        for r in rows:  # one row per distinct (op, shapes, dtypes)
            shape = _matmul_shape(r)
            v = self._violations(target, r, shape)
            r["flops"] = self._flops(r, shape)
            if v:
                flagged.append({**r, **v})
            elif r["flops"] and r["cost_ns"]:
                aligned.append(r)
        if not flagged:
            return []
        peers_of = self._peers_by_op(aligned)
        # the first id of each flagged group, from the rows (a frame built from these dicts only
        # to read this column back was 8 ms of a 4.8k-event rank's report, profiled)
        ids = [i for r in flagged for i in r["ids"][:1]]
        locs = c.locate(profile, ids)
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for r in flagged:
            loc = locs.get(r["ids"][0], c.Location(None, None, None, None))
            key = (loc.file, loc.line, loc.module, tuple(sorted(r["bad"])))
            groups.setdefault(key, []).append(r)
        out = []
        for (file, line, module, bad), rs in groups.items():
            multiple = max(r["multiple"] for r in rs)
            total_ns = float(sum(r["cost_ns"] for r in rs))
            calls = int(sum(r["calls"] for r in rs))
            pads = {d: c.pad_up(d, multiple) for d in bad}
            pad_txt = ", ".join(f"{d} → {p}" for d, p in pads.items())
            dtype = rs[0]["dtype"]
            cap = "low" if target == "cpu" else "medium"
            bench = self._bench(rs, multiple)
            saving_ns, how = self._estimate(rs, peers_of, total_ns)
            method = "peer-rate"
            if saving_ns <= 0 and target != "cpu":
                saving_ns, how = self._from_bound(profile, results, rs, multiple, total_ns)
                method = "bound-gap"
            if saving_ns <= 0:
                method = "unknown"
                how = (
                    "not estimated from the profile: no aligned shape of the same operator "
                    "ran faster here; "
                    f"{steps.per_step_us(total_ns):.1f} µs/step is at stake — "
                    "`opscope verify` measures the padded shape"
                )
            ev = {
                "operators": sorted({r["name"] for r in rs}),
                "shapes": [r["input_dims"] for r in rs],
                "dtypes": sorted({str(r["dtype"]) for r in rs}),
                "calls": calls,
                "figures": {
                    "time_us_per_step": round(steps.per_step_us(total_ns), 3),
                    "pct_of_step": round(steps.pct(total_ns), 3),
                    "misaligned_dims": list(bad),
                    "multiple": multiple,
                    "padded": pads,
                },
                "rule_set": rs[0]["rule_set"],
                "target": target,
                "event_ids": [r["ids"][0] for r in rs][:10],
                # the op groups explained here (first op id of each): see advise.overlap
                "op_groups": sorted(r["ids"][0] for r in rs),
            }
            if bench:
                ev["bench"] = bench
            fix = (
                f"# pad {pad_txt} (multiple of {multiple} for {rs[0]['rule_set']}), then slice\n"
                + "".join(
                    f"layer = nn.Linear(in_features, {p})  # was {d}\ny = layer(x)[..., :{d}]\n"
                    for d, p in list(pads.items())[:1]
                )
            )
            out.append(
                c.make_finding(
                    profile,
                    rule=self.id,
                    title=(
                        f"{'/'.join(ev['operators'])} dims {', '.join(map(str, bad))} not a "
                        f"multiple of {multiple} ({dtype}, {target})"
                    ),
                    where=(file, line, module),
                    key=f"{bad}:{multiple}",
                    saving_ns=max(saving_ns, 0.0),
                    saving_how=how,
                    fix=fix,
                    evidence=ev,
                    severity=c.severity_for(steps.pct(total_ns), cap),
                    steps=steps,
                    limit_ns=total_ns,
                    limit_what="the flagged calls' own time",
                    method=method,
                )
            )
        return out

    @staticmethod
    def _flops(r: dict[str, Any], shape: tuple[int, ...] | None) -> float:
        """FLOPs per call of a matmul row of :func:`_matmul_shape` ``shape`` (0 when the
        shape is not a plain matmul)."""
        if shape is None:
            return 0.0
        if r["dev"]:
            return 2.0 * shape[0] * shape[1] * shape[2]
        return 2.0 * shape[0] * shape[1] * shape[2] * shape[3]

    @staticmethod
    def _peers_by_op(aligned: list[dict[str, Any]]) -> dict[tuple[str, str], list[_Peer]]:
        """The aligned rows as :meth:`_estimate` reads them, by (op name, dtype), each list in
        the rows' order (a scan of every aligned row of the op per flagged group, reading
        their dicts, was 0.4 ms on a rank with 31 findings)."""
        peers_of: dict[tuple[str, str], list[_Peer]] = {}
        for k, a in enumerate(aligned):
            dtype = (a["dtypes"] or [None])[0] or "float32"
            flops = a["flops"]
            peers_of.setdefault((a["name"], dtype), []).append(
                (k, flops, flops * a["calls"], a["cost_ns"])
            )
        return peers_of

    @staticmethod
    def _estimate(
        rs: list[dict[str, Any]],
        peers_of: Mapping[tuple[str, str], list[_Peer]],
        total_ns: float,
    ) -> tuple[float, str]:
        """Saving if the flagged calls ran at the FLOP/s the same operator (same dtype, work
        within 8× per call) reaches on aligned shapes in this profile."""
        flops = sum(r["flops"] * r["calls"] for r in rs)
        if not flops or total_ns <= 0:
            return 0.0, ""
        per_call = flops / max(sum(r["calls"] for r in rs), 1)
        names, dtypes = {r["name"] for r in rs}, {r["dtype"] for r in rs}
        mine = [peers_of[(n, d)] for n in names for d in dtypes if (n, d) in peers_of]
        if not mine:
            return 0.0, ""
        # the aligned rows of these ops and dtypes within the work's range, in the rows' order
        # (the sums below add in it; positions are distinct, so the tuples sort by them)
        low, high = per_call / 8, per_call * 8
        near = [[p for p in ps if low <= p[1] <= high] for ps in mine]
        peers = near[0] if len(near) == 1 else sorted(p for ps in near for p in ps)
        if not peers:
            return 0.0, ""
        rate = sum(p[2] for p in peers) / sum(p[3] for p in peers)
        mine_rate = flops / total_ns
        if rate <= mine_rate:
            return 0.0, ""
        saving = total_ns - flops / rate
        return saving, (
            f"at the FLOP/s the same operator reaches on aligned shapes in this profile "
            f"({rate / 1e3:.3g} vs {mine_rate / 1e3:.3g} TFLOP/s over {len(peers)} shapes)"
        )

    @staticmethod
    def _from_bound(
        profile: Profile,
        results: Mapping[str, Any],
        rs: list[dict[str, Any]],
        multiple: int,
        total_ns: float,
    ) -> tuple[float, str]:
        """Saving if the flagged calls ran, padded to the multiple, at the performance model's
        lower bound (padded FLOPs and bytes against the device's peaks): the gap the padding
        can close. Nothing when the device has no peaks."""
        from opscope.analysis.model import bound_ns

        spec = c.perf_model(profile, results).spec
        if spec is None:
            return 0.0, ""
        bound = 0.0
        for r in rs:
            mkn = r.get("mkn")
            dims = r["dims"] or []
            if not mkn or r["dev"]:
                return 0.0, ""
            bmkn = _mkn(r["name"], dims)
            batch = bmkn[0] if bmkn else 1
            bad = set(r["bad"])
            m, k, n = (c.pad_up(d, multiple) if d in bad else d for d in mkn)
            size = c.DTYPE_BYTES.get(r["dtype"], 2)
            flops = 2.0 * batch * m * n * k
            nbytes = float(batch * (m * k + k * n + m * n) * size)
            dt = c.SHORT_DTYPE.get(r["dtype"], r["dtype"])
            b = bound_ns(spec, flops, nbytes, dt, "matrix")
            if b is None:
                return 0.0, ""
            bound += b * r["calls"]
        if bound >= total_ns:
            return 0.0, ""
        return total_ns - bound, (
            f"measured minus the padded shape's lower bound on {spec.label} "
            f"({bound / 1e3:.1f} µs over the profile, padded FLOPs and bytes at the peaks)"
        )

    @staticmethod
    def _bench(rs: list[dict[str, Any]], multiple: int) -> dict[str, Any] | None:
        for r in rs:
            if r.get("mkn"):
                m, k, n = r["mkn"]
                bad = set(r["bad"])
                return {
                    "op": "matmul",
                    "m": m,
                    "k": k,
                    "n": n,
                    "dtype": r["dtype"],
                    "fix": "padded",
                    "pad_to": multiple,
                    # only the misaligned dims are padded (M=32 stays 32)
                    "padded_shape": [c.pad_up(d, multiple) if d in bad else d for d in (m, k, n)],
                }
        return None

    @staticmethod
    def _candidates(profile: Profile) -> list[dict[str, Any]]:
        """Distinct (name, input_dims, input_types) of matmul-like work, with calls, cost, ids
        (sorted) and the parsed dims and dtypes, in :func:`candidate_key`'s order.

        Grouped in Python over the few hundred calls (a filter, a join with the costs, a
        group_by, the shapes' joins and a sort were six queries, 2.5 ms on a 4.8k-event rank)."""
        kern = c.kernels_with(
            profile,
            "input_dims",
            lambda: (
                c.name_match(profile, "kernels", pattern=_KERNEL_MM)
                | c.name_match(profile, "kernels", pattern=_KERNEL_FA)
            ),
        )
        if kern.height:
            # Ascend kernel rows carry their own shapes: the device's view is the truth.
            dev = True
            src = [kern.get_column(x) for x in ("name", "input_dims", "input_types", "id")]
            cost = kern.get_column("dur_ns")
        else:
            from opscope.advise.rules.fusion import in_attention_spans

            dev = False
            ops = profile.ops
            names = [*_HOST_MM, *_HOST_CONV, *_HOST_ATTN]
            at = np.flatnonzero(c.name_mask(profile, "ops", names=names))
            dims = ops.get_column("input_dims")[at]
            # (these rows' strings only: a Series' is_not_null is a query)
            if dims.null_count():
                at = at[np.array([d is not None for d in dims.to_list()], dtype=bool)]
            if len(at):
                # fusion-attention claims the matmuls of a materialised attention span
                at = at[~in_attention_spans(profile, ops.get_column("id")[at]).to_numpy()]
            src = [ops.get_column(x)[at] for x in ("name", "input_dims", "input_types", "id")]
            cost = c.op_costs_at(profile, at)
        groups: dict[tuple[Any, Any, Any], list[Any]] = {}
        for name, dims, types, i, ns in zip(
            *(s.to_list() for s in src), c._filled(cost, 0).tolist(), strict=True
        ):
            g = groups.get((name, dims, types))
            if g is None:
                groups[(name, dims, types)] = [ns, [i]]
            else:
                g[0] += ns
                g[1].append(i)
        # each distinct dtypes text parsed once (the rows share it: read only)
        types_of = {t: c.parse_types(t) for t in {k[2] for k in groups}}
        rows = [
            {
                "name": name,
                "input_dims": dims,
                "input_types": types,
                "dev": dev,
                "calls": len(ids),
                "cost_ns": ns,
                "ids": _sorted(ids),
                # (cached parses, shared: read only)
                "dims": c.parse_dims(dims),
                "dtypes": types_of[types],
            }
            for (name, dims, types), (ns, ids) in sorted(groups.items(), key=_group_key)
        ]
        return rows

    def _violations(
        self, target: str, r: dict[str, Any], shape: tuple[int, ...] | None
    ) -> dict[str, Any] | None:
        """The row's misaligned dims (``shape``: its :func:`_matmul_shape`), none if none."""
        dims: list[list[int]] = r["dims"] or []
        types = [t for t in (r["dtypes"] or []) if t]
        dtype = types[0] if types else "float32"
        name: str = r["name"]
        bad: set[int] = set()
        mkn: tuple[int, int, int] | None = None
        if not r["dev"] and name in _HOST_MM:
            if shape is None:
                return None
            mkn = (shape[1], shape[2], shape[3])
            axes = list(mkn)
        elif not r["dev"] and name in _HOST_CONV:
            if len(dims) < 2 or len(dims[0]) < 3 or len(dims[1]) < 2:
                return None
            axes = [dims[0][1], dims[1][0]]  # in and out channels
        elif not r["dev"] and name in _HOST_ATTN:
            if not dims or len(dims[0]) < 2:
                return None
            axes = [dims[0][-1], dims[0][-2]]  # head dim, sequence length
        else:
            axes = []
        if target in {"nvidia", "amd"}:
            mult = NVIDIA_MULTIPLE.get(dtype)
            if mult is None:
                return None
            if r["dev"]:
                axes = list(shape) if shape else []
            bad = {a for a in axes if a >= mult and a % mult}
            rule_set = f"tensor cores ({c.SHORT_DTYPE.get(dtype, dtype)})"
        elif target == "ascend":
            mult = ASCEND_MULTIPLE
            rule_set = "Ascend cube"
            if r["dev"]:
                bad, mult, rule_set, mkn = self._ascend_kernel(name, dims, dtype, shape)
            else:
                bad = {a for a in axes if a >= mult and a % mult}
        else:
            mult = CPU_MULTIPLE
            rule_set = "generic 128 rule (CPU profile)"
            bad = {a for a in axes if a >= mult and a % mult}
        if not bad:
            return None
        return {
            "bad": sorted(bad),
            "multiple": mult,
            "dtype": dtype,
            "rule_set": rule_set,
            "mkn": list(mkn) if mkn else None,
        }

    @staticmethod
    def _ascend_kernel(
        name: str, dims: list[list[int]], dtype: str, km: tuple[int, ...] | None
    ) -> tuple[set[int], int, str, tuple[int, int, int] | None]:
        size = c.DTYPE_BYTES.get(dtype, 2)
        if "flashattention" in name.lower():
            q = dims[0] if dims else []
            # BNSD: (S, D) are the last two; BSH / SBH: H·D is last, S the longer leading dim.
            axes = q[-2:] if len(q) == 4 else ([max(q[:2]), q[-1]] if len(q) == 3 else [])
            m = ASCEND_FA_MULTIPLE
            return {a for a in axes if a >= m and a % m}, m, "Ascend flash attention", None
        inner = math.lcm(ASCEND_INNER_ELEMS, max(ASCEND_INNER_BYTES // size, 1))
        bad_inner: set[int] = set()
        bad_outer: set[int] = set()
        mats = [d for d in dims if len(d) >= 2][:2]
        for i, d in enumerate(mats):
            if d[-1] >= inner and d[-1] % inner:
                bad_inner.add(d[-1])
            if i == 1 and d[-2] >= ASCEND_MULTIPLE and d[-2] % ASCEND_MULTIPLE:
                bad_outer.add(d[-2])
        rule_set = f"Ascend cube (128; inner axis {inner} elements / {ASCEND_INNER_BYTES} B)"
        mult = inner if bad_inner else ASCEND_MULTIPLE
        mkn = (km[0], km[1], km[2]) if km else None
        return bad_inner | bad_outer, mult, rule_set, mkn


# The output tile of the big GEMM kernels (CUTLASS / cuBLAS sm80-sm90 bf16 128x128 threadblock,
# hipBLASLt MT128x128; gemm.py's TILE_M/TILE_N): a dim that is a multiple of 8 but not of 128
# leaves its last row/column of tiles partly empty. Powers of two from 128 up are always whole.
TILE: int = 128


# Work per call of an aligned peer GEMM: within this factor of the flagged one (as
# shape-alignment's peers: the same kernel family, not a tiny or huge GEMM of other efficiency).
PEER_WORK_RATIO: int = 8


class NonPow2:
    """GEMM dims aligned for the tensor cores but not a whole number of 128-element tiles."""

    id = "gemm-non-pow2"
    doc = (
        "GEMM kernels compute the output in tiles of 128×128 (CUTLASS/cuBLAS sm80-sm90 and "
        "hipBLASLt's big-GEMM tiles): a dimension that is a multiple of 8 (so shape-alignment "
        "is satisfied) but not of 128 — a non-power-of-two size such as 4104, 1000 or 3080 — "
        "leaves the last row or column of tiles partly empty (tile quantisation, NVIDIA's "
        "matrix-multiplication guide). Whether that costs anything is the library's and the "
        "device's matter: on an NVIDIA H200 (torch 2.11, cuBLAS) 4104³ bf16 ran at ~97% of the "
        "FLOP/s of 4224³, and padding it to 4224 was slower (0.95×), since the padded shape "
        "runs the same 33 tiles. Flagged on NVIDIA/AMD targets (Ascend's cube rule is already "
        "128: shape-alignment covers it) for compute-side GEMMs with M, N or K ≥ 128 and not "
        "a multiple of 128 whose time is at least 25% above the performance model's bound "
        "(gap ≥ 0.5% of the step). Saving: measured in the profile only — the flagged calls' "
        "time at the FLOP/s the same operator reaches on whole-tile shapes (every dim a "
        f"multiple of 128, same dtype, within {PEER_WORK_RATIO}× the work per call) in the "
        "same profile, capped at the gap; no such shape: unknown (saving 0, low severity; "
        "`opscope verify` measures the FLOP/s of the whole-tile shape on the present device); "
        "whole-tile shapes as fast: no finding. Fix: pick sizes that are multiples of 128 "
        "(hidden sizes, vocabularies, batch×tokens), e.g. 4096 instead of 4104; padding to "
        "4224 does not help, it computes the same tiles."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        from opscope.advise.rules.gemm import (
            _finding,
            _gemm_calls,
            _significant,
            _torch_dtype,
            gap_text,
            gemm_dims,
        )

        target = c.target_of(profile, results)
        if target not in ("nvidia", "amd"):
            return []
        model, g = _gemm_calls(profile, results)
        spec = model.spec
        if g.height == 0 or spec is None:
            return []
        steps = c.step_info(profile)
        rows = [(r, gemm_dims(r["name"], r["dims"] or [])) for r in g.iter_rows(named=True)]
        whole = [
            (r, bmnk)
            for r, bmnk in rows
            if bmnk is not None
            and all(d % TILE == 0 for d in bmnk[1:])
            and r["flops"]
            and r["time_ns"]
            and (r["memory_ns"] or 0) <= (r["compute_ns"] or 0)
        ]
        out = []
        for r, bmnk in rows:
            if bmnk is None or not _significant(r, steps):
                continue
            if (r["memory_ns"] or 0) > (r["compute_ns"] or 0):
                continue  # memory-side: gemm-memory-bound explains it
            batch, m, n, k = bmnk
            dtype = _torch_dtype(r["dtype"])  # the model's short name (bf16) as torch's
            mult = NVIDIA_MULTIPLE.get(dtype, 8)
            bad = sorted({d for d in (m, n, k) if d >= TILE and d % TILE and d % mult == 0})
            if not bad or any(d >= mult and d % mult for d in (m, n, k)):
                continue  # nothing to pad, or misaligned: shape-alignment's finding
            time_ns = float(r["time_ns"])
            flops = float(r["flops"] or 0.0)
            per_call = flops / max(int(r["calls"]), 1)
            peers = [
                p
                for p, _ in whole
                if p["name"] == r["name"]
                and p["dtype"] == r["dtype"]
                and per_call / PEER_WORK_RATIO
                <= p["flops"] / max(int(p["calls"]), 1)
                <= per_call * PEER_WORK_RATIO
            ]
            mine = flops / time_ns if time_ns > 0 else 0.0
            how = gap_text(r, steps)
            if peers:
                rate = sum(p["flops"] for p in peers) / sum(p["time_ns"] for p in peers)
                if rate <= mine or not flops:
                    continue  # whole-tile shapes run no faster here: no penalty measured
                saving = min(time_ns - flops / rate, float(r["gap_ns"] or 0.0))
                method = "peer-rate"
                how = (
                    f"at the FLOP/s the same operator reaches on whole-tile shapes in this "
                    f"profile ({rate / 1e3:.3g} vs {mine / 1e3:.3g} TFLOP/s over {len(peers)} "
                    f"shape{'s' if len(peers) > 1 else ''}), capped at the gap; {how}"
                )
            else:
                saving, method = 0.0, "unknown"
                how = (
                    "not estimated: no whole-tile shape of the same operator ran in this "
                    "profile, and a non-multiple of 128 costs nothing on some devices (an H200 "
                    "ran 4104³ bf16 at ~97% of 4224³'s FLOP/s); `opscope verify` measures the "
                    f"whole-tile shape's rate here. {how}, which this may or may not explain"
                )
            pads = ", ".join(f"{d} → {c.pad_up(d, TILE)}" for d in bad)
            down = ", ".join(f"{d} → {max(d // TILE * TILE, TILE)}" for d in bad)
            tiles_used = math.prod(d / c.pad_up(d, TILE) for d in bad)
            bench = None
            if batch == 1:
                pm, pn, pk = (c.pad_up(d, TILE) if d in bad else d for d in (m, n, k))
                # by rate: the padded shape's FLOP/s against the original's (the penalty per
                # FLOP; padding itself adds the work back, see the doc)
                bench = {"op": "matmul", "m": m, "k": k, "n": n, "fix": "padded",
                         "dtype": dtype, "pad_to": TILE, "padded_shape": [pm, pk, pn],
                         "compare": "rate"}  # fmt: skip
            out.append(
                _finding(
                    profile,
                    self.id,
                    [r],
                    max(saving, 0.0),
                    f"GEMM {m}x{n}x{k}: dims {', '.join(map(str, bad))} not a multiple of "
                    f"the {TILE}-element tile",
                    how,
                    f"# pick whole {TILE}-element tiles ({down}, or {pads}) when choosing the "
                    f"model's sizes:\n# padding {bad[0]} to {c.pad_up(bad[0], TILE)} and "
                    "slicing computes the same tiles and does not help\n"
                    f"hidden = {max(bad[0] // TILE * TILE, TILE)}  # was {bad[0]}",
                    {"tile": TILE, "non_tile_dims": bad, "tile_fill": round(tiles_used, 4)},
                    steps,
                    bench,
                    method=method,
                    extra={"penalty_measured": method == "peer-rate"},
                )
            )
        return out


register(Alignment())
register(NonPow2())
