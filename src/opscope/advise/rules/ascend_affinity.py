"""Ascend affinity APIs: op sequences that torch_npu (or a fused kernel) runs as one operator.

Like msprof-analyze's advisor ("affinity API" check: its ``timeline_fusion_ops`` table of aten
op sequences, matched on the timeline's op names, each with the torch_npu API that replaces
it), the rule matches the user-level aten op sequence of each host thread against a pattern
table and names the fused API. The table (``PATTERNS``) holds the patterns of that table
that no other opscope rule covers:

- ``torch_npu.npu_rotary_mul``: rotary embedding written as ``rotate_half`` (slices, neg,
  cat, then mul/add): msprof-analyze's pattern for CANN 7.0.RC1 and later.
- ``torch_npu.npu_swiglu``: the sigmoid spellings of SwiGLU (``x * sigmoid(x) * y``) after a
  chunk/slice (CANN 7.0.0); ``silu`` followed by ``mul`` is ``fusion-ascend-affinity``'s.
- ``torch_npu.npu_geglu``: chunk/slice then gelu and mul (CANN 8.0.RC1).
- ``torch_npu.npu_add_layer_norm``: a residual add then layer_norm (CANN 8.0.RC1).
- ``torch_npu.npu_group_norm_silu``: group_norm then silu (CANN 8.0.RC1).
- ``torch_npu.npu_scaled_masked_softmax``: scale (mul/div), mask (masked_fill/add), softmax
  (CANN 6.3.RC2), outside materialised attention (``fusion-attention`` claims those spans).

Left to other rules: RMSNorm (``fusion-ascend-affinity``), attention (``fusion-attention``),
matmul + bias add (``fusion-bias-add``), per-parameter optimizer loops
(``fusion-optimizer-foreach``). Not taken from the table: single-op swaps that are not fusions
(``gelu`` -> ``npu_fast_gelu`` changes the numerics), the permute/view pairs of
``npu_confusion_transpose`` (views move no data; ``layout-transpose-copy`` covers copies).

Saving, when the device has peaks: the matched ops' device time minus the performance model's
bound of one fused kernel that reads the largest input once and writes an output of that size
(2 × its bytes at the memory bandwidth, one launch floor): a lower bound on any fused kernel's
traffic, so an upper bound on the saving, never above the ops' own time (the limit). Without
peaks: the time of all but the most expensive op of the match (one fused op stays).
Threshold: a match whose saving is at least ``MIN_STEP_PCT`` of the step (opscope's heuristic:
below that the bound's own error decides).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.advise.rules.ascend_groups import op_groups
from opscope.model import Profile


@dataclass(frozen=True)
class Pattern:
    """Op sequences and the fused API that replaces them. Each sequence is a tuple of parts:
    an op name or ``(a|b)`` alternatives, optionally followed by ``?``, ``+`` or ``{m,n}``."""

    api: str
    sequences: tuple[tuple[str, ...], ...]
    fix: str

    @property
    def regex(self) -> str:
        """A regular expression over ``name;`` tokens matching any of the sequences."""
        return "|".join("".join(_part(p) for p in seq) for seq in self.sequences)

    @property
    def shown(self) -> str:
        """The sequences for people: ``add → (layer_norm|native_layer_norm)``."""
        return "; ".join(" → ".join(seq) for seq in self.sequences)


def _part(p: str) -> str:
    m = re.fullmatch(r"\(?([\w|]+)\)?([*+?]|\{\d+,\d+\})?", p)
    if m is None:
        raise ValueError(p)
    return f"(?:(?:{m.group(1)});){m.group(2) or ''}"


SPLIT = "(slice|chunk|split|narrow|split_with_sizes)"
PATTERNS: Final[tuple[Pattern, ...]] = (
    Pattern(
        "torch_npu.npu_rotary_mul",
        (("(mul)?", SPLIT + "+", "neg", "cat", "(mul){0,2}", "add"),),
        "q = torch_npu.npu_rotary_mul(q, cos, sin)  # was: q * cos + rotate_half(q) * sin",
    ),
    Pattern(
        "torch_npu.npu_swiglu",
        (
            (SPLIT, "sigmoid", "mul", "mul"),
            (SPLIT, "mul", "sigmoid", "mul"),
            (SPLIT, "mul", "mul", "sigmoid"),
        ),
        "y = torch_npu.npu_swiglu(x, dim=-1)  # was: a, b = x.chunk(2, -1); a * sigmoid(a) * b",
    ),
    Pattern(
        "torch_npu.npu_geglu",
        ((SPLIT, "gelu", "mul"), (SPLIT, "mul", "gelu")),
        "y = torch_npu.npu_geglu(x, dim=-1, approximate=1)[0]  # was: a, b = x.chunk(2, -1); "
        "gelu(a) * b",
    ),
    Pattern(
        "torch_npu.npu_add_layer_norm",
        (("add", "(layer_norm|native_layer_norm)"),),
        "y, _, _, x = torch_npu.npu_add_layer_norm(x, residual, ln.weight, ln.bias, ln.eps, "
        "additional_output=True)  # was: x = x + residual; y = ln(x)",
    ),
    Pattern(
        "torch_npu.npu_group_norm_silu",
        (("(group_norm|native_group_norm)", "silu"),),
        "y = torch_npu.npu_group_norm_silu(x, gn.weight, gn.bias, gn.num_groups, gn.eps)[0]",
    ),
    Pattern(
        "torch_npu.npu_scaled_masked_softmax",
        (("(mul|div)", "(masked_fill|add)", "(softmax|_softmax|_safe_softmax)"),),
        "p = torch_npu.npu_scaled_masked_softmax(scores, mask, scale)  # was: "
        "softmax(scores * scale + mask)",
    ),
)
# A match counts when its saving is at least this share of the step (opscope's heuristic: the
# performance model's bound is good to ~10-20%; below 0.5% of the step it decides nothing).
MIN_STEP_PCT: Final = 0.5
# Ops that neither start nor break a pattern: views and no-op casts between the pattern's
# ops in eager code (``x.float()`` on a float tensor, ``view`` before ``layer_norm``).
TRANSPARENT: Final = frozenset({"view", "_unsafe_view", "reshape", "expand", "unsqueeze"})


def _token(name: str) -> str:
    """``aten::masked_fill_`` -> ``masked_fill`` (in-place variants match their op)."""
    base = name.removeprefix("aten::")
    return base[:-1] if base.endswith("_") and not base.endswith("__") else base


def _matches(names: list[str]) -> list[tuple[Pattern, list[int]]]:
    """(pattern, positions in ``names``) of every non-overlapping match, first pattern first."""
    keep = [i for i, n in enumerate(names) if _token(n) not in TRANSPARENT]
    toks = [_token(names[i]) if names[i].startswith("aten::") else "#" for i in keep]
    text = "".join(f"{t};" for t in toks)
    starts = []
    pos = 0
    for t in toks:
        starts.append(pos)
        pos += len(t) + 1
    used: set[int] = set()
    out: list[tuple[Pattern, list[int]]] = []
    for pat in PATTERNS:
        for m in re.finditer(f"(?:{pat.regex})", text):
            if m.end() == m.start():
                continue
            a = bisect.bisect_left(starts, m.start())
            b = bisect.bisect_left(starts, m.end())  # one past the last token
            if starts[a] != m.start() or any(i in used for i in range(a, b)):
                continue  # not on a token boundary, or an earlier pattern took these ops
            used.update(range(a, b))
            out.append((pat, keep[a:b] if b > a else []))
    return out


def _fused_bound_ns(spec: Any, dims: list[str | None], types: list[str | None]) -> float | None:
    """The bound of one fused kernel: 2 × the largest input's bytes at the bandwidth, one
    launch floor (None without peaks or shapes)."""
    from opscope.analysis.model import bound_ns

    if spec is None:
        return None
    best = 0.0
    dtype = None
    for d, t in zip(dims, types, strict=True):
        shapes = c.parse_dims(d) or []
        names = c.parse_types(t)
        for i, s in enumerate(shapes):
            if not s:
                continue
            dt = names[i] if i < len(names) else None
            size = c.DTYPE_BYTES.get(dt or "", 0)
            if not size:
                continue
            n = float(size)
            for x in s:
                n *= x
            if n > best:
                best, dtype = n, dt
    if best <= 0:
        return None
    return bound_ns(spec, None, 2.0 * best, c.SHORT_DTYPE.get(dtype or "", None), "memory")


class AscendAffinityApi:
    """Op sequences that a torch_npu fused (affinity) API runs as one operator."""

    id = "ascend-affinity-api"
    doc = (
        "torch_npu ships fused 'affinity' APIs for op sequences that otherwise run as several "
        "small vector kernels, each reading and writing the whole tensor: "
        "`npu_rotary_mul` (rotate_half rotary embedding), `npu_swiglu` (sigmoid spellings), "
        "`npu_geglu`, `npu_add_layer_norm` (residual add + LayerNorm), `npu_group_norm_silu`, "
        "`npu_scaled_masked_softmax` (scale, mask, softmax outside materialised attention). "
        "Like msprof-analyze's affinity-API check, the rule (only when the target is Ascend) "
        "matches each thread's user-level aten op sequence against that pattern table (views "
        "between the ops are skipped). Saving, with device peaks: the ops' device time minus "
        "the bound of one fused kernel moving 2× the largest input's bytes (a lower bound on "
        "its traffic), never above the ops' time; without peaks, all but the most expensive "
        f"op. A match counts from {MIN_STEP_PCT}% of the step."
    )

    # its inputs are host ops (the user-level sequence / the costed calls): none without one
    needs = ("cpu_op",)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        if c.target_of(profile, results) != "ascend":
            return []
        hits = _hits(profile, results)
        if not hits:
            return []
        spec = c.perf_model(profile, results).spec
        steps = c.step_info(profile)
        by_id = {h["id"]: h for h in hits}
        out = []
        for pat in PATTERNS:
            mine = [h for h in hits if h["pat"] is pat]
            if not mine:
                continue
            frame = pl.DataFrame({"id": [h["id"] for h in mine]})
            for where, ids in c.group_by_location(profile, frame).items():
                mine_hs = [by_id[i] for i in ids]
                groups = op_groups(profile, results, [i for h in mine_hs for i in h["ids"]])
                f = self._finding(profile, steps, spec, pat, where, mine_hs, groups)
                if f is not None:
                    out.append(f)
        return out

    def _finding(
        self,
        profile: Profile,
        steps: c.StepInfo,
        spec: Any,
        pat: Pattern,
        where: tuple[str | None, int | None, str | None],
        hs: list[dict[str, Any]],
        groups: list[int],
    ) -> Finding | None:
        span = float(sum(h["span"] for h in hs))
        if all(h["fused"] is not None for h in hs):
            fused = float(sum(h["fused"] for h in hs))
            saving, method = max(span - fused, 0.0), "bound-gap"
            how = (
                "the ops' device time minus the bound of one fused kernel per call (2× the "
                f"largest input's bytes at {spec.label}'s bandwidth, one launch floor: "
                f"{steps.per_step_us(fused):.1f} µs/step)"
            )
        else:
            fused = None
            saving = float(sum(h["span"] - h["keep"] for h in hs))
            method = "removed-time"
            how = "the time of all but the most expensive op of each match (no device peaks)"
        if steps.pct(saving) < MIN_STEP_PCT:
            return None
        ops = max((h["ops"] for h in hs), key=len)
        short = [o.removeprefix("aten::") for o in ops]
        f: Finding = c.make_finding(
            profile,
            rule=self.id,
            title=f"{' → '.join(short)}: use {pat.api}",
            where=where,
            key=pat.api,
            saving_ns=saving,
            saving_how=how,
            fix=pat.fix,
            evidence={
                "operators": ops,
                "shapes": sorted({str(h["dims"]) for h in hs}),
                "dtypes": [],
                "calls": len(hs),
                "figures": {
                    "ops_us_per_step": round(steps.per_step_us(span), 3),
                    "fused_bound_us_per_step": None
                    if fused is None
                    else round(steps.per_step_us(fused), 3),
                    "ops_per_match": len(ops),
                },
                "event_ids": [i for h in hs for i in h["ids"]][:10],
                # the op groups of the matched ops (see advise.overlap): an
                # elementwise-bandwidth finding on the same ops is counted once
                "op_groups": groups,
            },
            steps=steps,
            limit_ns=span,
            limit_what="the matched ops' own time",
            method=method,
        )
        return f


def affinity_op_ids(profile: Profile, results: Mapping[str, Any]) -> list[int]:
    """The host ops of every pattern match (what this rule claims; other rules leave them)."""
    return [i for h in _hits(profile, results) for i in h["ids"]]


def _hits(profile: Profile, results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every pattern match outside attention spans, computed once per profile and device."""
    name = f"ascend_affinity:{c.device_option(results)}"
    hits: list[dict[str, Any]] = c._memo(name, profile, lambda: _find(profile, results))
    return hits


def _find(profile: Profile, results: Mapping[str, Any]) -> list[dict[str, Any]]:
    ops = c.user_level_ops(profile)
    if ops.height == 0:
        return []
    spec = c.perf_model(profile, results).spec
    hits: list[dict[str, Any]] = []
    # a frame per thread in one pass (iterating a group_by was a query per group)
    for grp in ops.partition_by("rank", "tid", maintain_order=True):
        names = grp.get_column("name").to_list()
        if not any(n.startswith("aten::") for n in names):
            continue
        ids = grp.get_column("id").to_list()
        cost = grp.get_column("cost_ns").fill_null(0).to_list()
        dims = grp.get_column("input_dims").to_list()
        types = grp.get_column("input_types").to_list()
        for pat, pos in _matches(names):
            hits.append(
                {
                    "pat": pat,
                    "id": ids[pos[0]],
                    "ids": [ids[i] for i in pos],
                    "ops": [names[i] for i in pos],
                    "span": float(sum(cost[i] for i in pos)),
                    "keep": max((cost[i] for i in pos), default=0.0),
                    "fused": _fused_bound_ns(spec, [dims[i] for i in pos], [types[i] for i in pos]),
                    "dims": dims[pos[0]],
                }
            )
    return _outside_attention(profile, hits) if hits else hits


def _outside_attention(profile: Profile, hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The matches none of whose ops is in a materialised attention span (fusion-attention's)."""
    from opscope.advise.rules.fusion import attention_spans

    claimed = {i for r in attention_spans(profile) for i in r["span_ids"]}
    if not claimed:
        return hits
    return [h for h in hits if not claimed.intersection(h["ids"])]


register(AscendAffinityApi())
