"""Layout: transposed or non-contiguous matmul inputs, and the copies they cost."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.model import Profile

# Host ops that materialise a copy of a tensor.
COPY_OPS = ("aten::contiguous", "aten::clone", "aten::copy_")
# Host ops that make a transposed view.
VIEW_OPS = ("aten::t", "aten::transpose", "aten::permute", "aten::numpy_T", "aten::mT")
# Device kernels that re-lay data out (Ascend TransData / Transpose / AsStrided, CUDA transpose
# and copy kernels).
COPY_KERNELS = r"(?i)transdata|transpose|asstrided|contiguous|copy_kernel|elementwise_copy"
MATMUL_KERNELS = r"(?i)matmul|gemm|sgemm|hgemm|cutlass|ampere_.*_(nn|nt|tn|tt)"
# How many following sibling ops may separate a transposed view from the matmul it feeds
# (`x @ w.t()` issues t then matmul; one more for a reshape in between).
VIEW_LOOKAHEAD = 2


def _contiguous(dims: list[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= max(int(d), 1)
    return list(reversed(out))


def transposed_inputs(dims_s: str | None, strides_s: str | None) -> list[int]:
    """Indexes of inputs whose strides are not the contiguous ones for their shape."""
    dims = c.parse_dims(dims_s) or []
    strides = c.parse_dims(strides_s) or []
    bad = []
    for i, (d, s) in enumerate(zip(dims, strides, strict=False)):
        if len(d) < 2 or len(s) != len(d) or 0 in s:
            continue  # scalars, broadcast/expanded (stride 0) and unknowns are not layouts
        want = _contiguous(d)
        if any(a != b for a, b, n in zip(s, want, d, strict=True) if n > 1):
            bad.append(i)
    return bad


class Layout:
    """Copies and transposed views feeding matmuls."""

    id = "layout-transpose-copy"
    doc = (
        "A matmul fed a transposed or otherwise non-contiguous operand either makes the library "
        "read it strided or forces a copy first: `aten::contiguous` / `aten::clone` / "
        "`aten::copy_` on the host, or TransData / Transpose / AsStrided kernels on Ascend (and "
        "transpose/copy kernels on GPUs) right before the matmul. The copies cost their whole "
        "time plus memory traffic. The rule flags copy ops and copy kernels immediately "
        "followed by (or inside) a matmul, and a transposed view (`weight.t()`, `transpose`, "
        "`permute`) made in the user's own code that feeds the next matmul with non-contiguous "
        "strides (from the trace's `Input Strides`); a view inside `F.linear` is the library's "
        "own and is not flagged. Saving: the copies' time (device kernels when there is a "
        "device), else the view op's own time, removed. Fix: store the weight in the layout "
        "the matmul consumes (pre-transposed, `.contiguous()` once at init) or call `F.linear`, "
        "which takes `[out, in]` weights without a copy."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        steps = c.step_info(profile)
        out = self._host(profile, steps) + self._kernels(profile, steps)
        return out

    def _host(self, profile: Profile, steps: c.StepInfo) -> list[Finding]:
        ops = profile.ops
        if ops.height == 0:
            return []
        par = c.op_parents(profile)
        # the ops with their next siblings one plan, collected once; the copies and views two
        # plans on it collected together (each eager step was a query of fixed cost)
        o = (
            ops.lazy()
            .select(
                "id", "rank", "tid", "ts_ns", "name", "input_dims", "input_types", "input_strides"
            )
            .join(par.lazy(), on="id", how="left")
            .join(c.op_cost(profile).lazy(), on="id", how="left")
            .sort("rank", "tid", "ts_ns", "id")  # id: ops starting together keep one order
        )
        names = o.select(pl.col("id").alias("op_parent"), pl.col("name").alias("parent_name"))
        o = o.join(names, on="op_parent", how="left")
        # the row of the next two siblings (same rank, thread and parent op, in time), then
        # every column gathered from it. Siblings are found by one stable sort on the group key
        # (rows stay in time order within a group) and a shift where the key stays the same:
        # a window per group (`shift().over(...)`) cost 0.15 s on a 40k-op trace, this 0.01 s.
        key = ("rank", "tid", "op_parent")

        def same(k: int) -> pl.Expr:
            return pl.all_horizontal(pl.col(c).eq_missing(pl.col(c).shift(-k)) for c in key)

        o = (
            o.with_row_index("_row")
            .sort(key, maintain_order=True, nulls_last=True)
            .with_columns(
                pl.when(same(k)).then(pl.col("_row").shift(-k)).alias(f"_next{k}") for k in (1, 2)
            )
            .sort("_row")
        )
        o = o.with_columns(
            pl.when(pl.col(f"_next{k}").is_not_null())
            .then(pl.col(col).gather(pl.col(f"_next{k}").fill_null(0)))
            .alias(f"next{k}{suffix}")
            for k in (1, 2)
            for col, suffix in (
                ("name", ""),
                ("id", "_id"),
                ("input_dims", "_dims"),
                ("input_strides", "_strides"),
            )
        ).drop("_row", "_next1", "_next2")
        linked = o.collect(engine="in-memory").lazy()
        mm = list(c.MATMUL_OPS)
        feeds_next = pl.col("next1").is_in(mm) | (
            pl.col("next1").is_in(VIEW_OPS) & pl.col("next2").is_in(mm)
        )
        copies_plan = linked.filter(
            pl.col("name").is_in(COPY_OPS)
            & ~pl.col("parent_name").fill_null("").is_in([*COPY_OPS, "aten::to", "aten::_to_copy"])
            & (
                feeds_next
                # inside a matmul only an explicit contiguous/clone is a layout copy (addmm
                # copies its bias into the output with copy_, which is not one)
                | (pl.col("parent_name").is_in(mm) & (pl.col("name") != "aten::copy_"))
            )
        )
        views_plan = linked.filter(
            pl.col("name").is_in(VIEW_OPS)
            & pl.col("op_parent").is_null()
            & (pl.col("next1").is_in(mm) | pl.col("next2").is_in(mm))
        )
        copies, views = pl.collect_all([copies_plan, views_plan], engine="in-memory")
        findings = []
        for kind, df in (("copy", copies), ("view", views)):
            if df.height == 0:
                continue
            keep = []
            for r in df.iter_rows(named=True):  # flagged ops only
                if kind == "copy":
                    nxt = r["next1"] if r["next1"] in mm else r["next2"]
                    keep.append((r, nxt if nxt in mm else r["parent_name"]))
                    continue
                for k in range(1, VIEW_LOOKAHEAD + 1):
                    if r[f"next{k}"] in mm and self._feeds(
                        r, r[f"next{k}_dims"], r[f"next{k}_strides"]
                    ):
                        keep.append((r, r[f"next{k}"]))
                        break
            if not keep:
                continue
            kept = pl.DataFrame({"id": [r["id"] for r, _ in keep]})
            by_loc = c.group_by_location(profile, kept)
            rows = {r["id"]: (r, m) for r, m in keep}
            for where, ids in by_loc.items():
                rs = [rows[i][0] for i in ids]
                consumers = sorted({rows[i][1] for i in ids})
                # A copy costs its own time plus its kernels; a view only the view op itself.
                ids_cost = [r["id"] for r in rs]
                kern = c.kernels_of(profile, ids_cost)
                cost = float(sum(r["cost_ns"] or 0 for r in rs))
                dims = sorted({str(r["input_dims"]) for r in rs})
                dtypes = sorted({str(r["input_types"]) for r in rs})
                bench = self._bench(rs[0])
                ev: dict[str, Any] = {
                    "operators": sorted({r["name"] for r in rs}) + consumers,
                    "shapes": dims,
                    "dtypes": dtypes,
                    "calls": len(rs),
                    "figures": {
                        "time_us_per_step": round(steps.per_step_us(cost), 3),
                        "copy_kernels": kern.height,
                        "consumer_strides": sorted(
                            {str(r.get("next1_strides")) for r in rs if kind == "view"}
                        ),
                    },
                    "event_ids": ids[:10],
                }
                if bench:
                    ev["bench"] = bench
                if kind == "copy":
                    title = (
                        f"{'/'.join(sorted({r['name'] for r in rs}))} copies an input of "
                        f"{'/'.join(consumers)}"
                    )
                    how = "the copy ops' time (incl. their device kernels) removed"
                    cap = None
                else:
                    title = (
                        f"transposed view ({'/'.join(sorted({r['name'] for r in rs}))}) feeds "
                        f"{'/'.join(consumers)} with non-contiguous strides"
                    )
                    how = (
                        "the view op's own time removed; no copy was observed — the strided "
                        "read's cost inside the matmul is what `opscope verify` measures "
                        "(contiguous vs transposed)"
                    )
                    cap = "low" if kern.height == 0 else None
                fix = (
                    "# store the weight as the matmul uses it, once, or let F.linear do it:\n"
                    "y = F.linear(x, self.weight, self.bias)  # weight [out, in], no copy\n"
                    "# or: self.weight_t = nn.Parameter(w.t().contiguous()); "
                    "y = x @ self.weight_t"
                )
                findings.append(
                    c.make_finding(
                        profile,
                        rule=self.id,
                        title=title,
                        where=where,
                        key=f"{kind}:{dims}",
                        saving_ns=cost,
                        saving_how=how,
                        fix=fix,
                        evidence=ev,
                        cap=cap,
                        steps=steps,
                    )
                )
        return findings

    @staticmethod
    def _feeds(r: dict[str, Any], mm_dims: str | None, mm_strides: str | None) -> bool:
        """The view's output shape is a non-contiguous input of the matmul."""
        src = (c.parse_dims(r["input_dims"]) or [[]])[0]
        if len(src) < 2:
            return False
        dims = c.parse_dims(mm_dims) or []
        bad = transposed_inputs(mm_dims, mm_strides)
        return any(sorted(dims[i]) == sorted(src) for i in bad if i < len(dims))

    @staticmethod
    def _bench(r: dict[str, Any]) -> dict[str, Any] | None:
        src = (c.parse_dims(r["input_dims"]) or [[]])[0]
        nxt = c.parse_dims(r.get("next1_dims")) or []
        types = c.parse_types(r.get("input_types"))
        dtype = (types[0] if types else None) or "float32"
        if len(src) == 2 and nxt and len(nxt[0]) == 2 and nxt[0][1] == src[1]:
            return {
                "op": "matmul",
                "m": nxt[0][0],
                "k": src[1],
                "n": src[0],
                "dtype": dtype,
                "transposed_b": True,
                "fix": "contiguous_b",
            }
        return None

    def _kernels(self, profile: Profile, steps: c.StepInfo) -> list[Finding]:
        k = profile.kernels
        if k.height == 0:
            return []
        k = k.sort("rank", "device", "stream", "ts_ns", "id").with_columns(
            pl.col("name").shift(-1).over("rank", "device", "stream").alias("next_name")
        )
        hit = k.filter(
            pl.col("name").str.contains(COPY_KERNELS)
            & pl.col("next_name").fill_null("").str.contains(MATMUL_KERNELS)
        )
        if hit.height == 0:
            return []
        out = []
        for where, ids in c.group_by_location(profile, hit).items():
            rs = hit.filter(pl.col("id").is_in(ids))
            cost = float(rs.get_column("dur_ns").sum())
            names = sorted(set(rs.get_column("name").to_list()))
            ev = {
                "operators": names[:10],
                "shapes": sorted({str(s) for s in rs.get_column("input_dims").to_list()})[:10],
                "dtypes": sorted({str(s) for s in rs.get_column("input_types").to_list()})[:10],
                "calls": rs.height,
                "consumers": sorted(set(rs.get_column("next_name").to_list()))[:10],
                "figures": {"time_us_per_step": round(steps.per_step_us(cost), 3)},
                "event_ids": ids[:10],
            }
            out.append(
                c.make_finding(
                    profile,
                    rule=self.id,
                    title=f"{rs.height} layout-copy kernels ({', '.join(names[:3])}) right "
                    "before matmul kernels",
                    where=where,
                    key=f"kernels:{json.dumps(names[:5])}",
                    saving_ns=cost,
                    saving_how="the copy kernels' time removed",
                    fix=(
                        "# keep the matmul operand in the layout the kernel consumes:\n"
                        "self.weight_t = nn.Parameter(weight.t().contiguous())  # once\n"
                        "y = x @ self.weight_t  # or F.linear(x, weight, bias)"
                    ),
                    evidence=ev,
                    steps=steps,
                )
            )
        return out


register(Layout())
