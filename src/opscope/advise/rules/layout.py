"""Layout: transposed or non-contiguous matmul inputs, and the copies they cost."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.analysis.tree import gather
from opscope.model import Profile

# Host ops that materialise a copy of a tensor.
COPY_OPS = ("aten::contiguous", "aten::clone", "aten::copy_")
# The parent ops inside which a copy is no layout copy (a copy's own steps, a dtype cast).
COPY_PARENTS = (*COPY_OPS, "aten::to", "aten::_to_copy")
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


def _flagged(profile: Profile, cand: Any, next1: Any, next2: Any, parent_at: Any) -> Any:
    """Which of the copy and view ops at positions ``cand`` of ``profile.ops`` (their next two
    siblings at ``next1``/``next2``, -1 for none; their parent op's event at ``parent_at``)
    :meth:`Layout._host` flags: a copy its filter keeps, a view its filter keeps that feeds one
    of those siblings' matmuls (:func:`_feeds`). In Python over these ops' names and shapes, so
    that the rows are built for the flagged ops only, and a profile with none returns before
    the rows' select and the op context. A null name is in no list, as the filters' tests keep
    no null."""
    ops, mm = profile.ops, set(c.MATMUL_OPS)
    name, n1, n2 = (gather(ops.get_column("name"), at).to_list() for at in (cand, next1, next2))
    pname = gather(profile.events.get_column("name"), parent_at).to_list()
    keep = []
    views = []  # (this list's index, the view's position in cand)
    for k, (nm, a, b, pn, pa) in enumerate(
        zip(name, n1, n2, pname, parent_at.tolist(), strict=True)
    ):
        if nm in COPY_OPS:
            feeds = a in mm or (a in VIEW_OPS and b in mm)
            inside = pn in mm and nm != "aten::copy_"
            keep.append((pn or "") not in COPY_PARENTS and (feeds or inside))
        else:  # a view op: made at top level, a sibling matmul next
            keep.append(pa < 0 and (a in mm or b in mm))
            if keep[-1]:
                views.append(k)
    if views:
        # the views' shapes (their rows only): a view whose output no next matmul takes with
        # non-contiguous strides is no finding
        at = np.asarray(views, dtype=np.int64)
        src = gather(ops.get_column("input_dims"), cand[at]).to_list()
        nexts = [
            (
                [name_k[i] for i in views],
                *(gather(ops.get_column(col), nxt[at]).to_list() for col in _NEXT_SHAPE),
            )
            for name_k, nxt in ((n1, next1), (n2, next2))
        ]
        for j, k in enumerate(views):
            keep[k] = any(nm[j] in mm and _feeds(src[j], d[j], s[j]) for nm, d, s in nexts)
    return np.array(keep, dtype=bool)


#: A sibling's columns a view's check reads (:func:`_feeds`).
_NEXT_SHAPE = ("input_dims", "input_strides")


def _feeds(src_dims: str | None, mm_dims: str | None, mm_strides: str | None) -> bool:
    """A view of an input shaped ``src_dims`` is a non-contiguous input of the matmul."""
    src = (c.parse_dims(src_dims) or [[]])[0]
    if len(src) < 2:
        return False
    dims = c.parse_dims(mm_dims) or []
    bad = transposed_inputs(mm_dims, mm_strides)
    return any(sorted(dims[i]) == sorted(src) for i in bad if i < len(dims))


def _linked(profile: Profile) -> pl.DataFrame | None:
    """The copy and view ops the rule flags (see :func:`_flagged`) with their parent op's name
    and their next two siblings (same rank, thread and parent op, in time; the lower id first
    among ops starting together): name, id, input dims and strides of each; by rank, thread,
    time and id; ``None`` when the profile has no such op.

    The siblings found in NumPy over the ops' keys, and only the flagged names' rows built: a
    plan sorting, joining and gathering every op was 15-20 ms on a 40k-op trace."""
    ops = profile.ops
    cand = np.flatnonzero(c.name_mask(profile, "ops", names=[*COPY_OPS, *VIEW_OPS]))
    if not len(cand):
        return None
    low = np.iinfo(np.int64).min  # a null key: equal to itself only, before every value

    def keyed(col: str) -> Any:
        s = ops.get_column(col)
        return (s.fill_null(low) if s.null_count() else s).to_numpy().astype(np.int64)

    up = c.op_parent_positions(profile)[c.event_positions(profile, ops.get_column("id"))]
    ids = c._forest(profile).ids
    parent = np.where(up >= 0, ids[np.maximum(up, 0)], low)
    rank, tid, ts, op_id = keyed("rank"), keyed("tid"), keyed("ts_ns"), keyed("id")
    order = np.lexsort((op_id, ts, parent, tid, rank))
    nxt = {}
    for k in (1, 2):
        a, b = order[:-k], order[k:]
        same = (rank[a] == rank[b]) & (tid[a] == tid[b]) & (parent[a] == parent[b])
        to = np.full(ops.height, -1, dtype=np.int64)
        to[a[same]] = b[same]
        nxt[k] = to[cand]
    keep = _flagged(profile, cand, nxt[1], nxt[2], up[cand])
    if not keep.any():
        return None
    # the flagged ops by rank, thread, time and id (the order the findings take their rows
    # in; the ids are distinct, so it is a total order, nulls first as a sort puts them)
    cand, nxt = cand[keep], {k: v[keep] for k, v in nxt.items()}
    by_time = np.lexsort((op_id[cand], ts[cand], tid[cand], rank[cand]))
    cand, nxt = cand[by_time], {k: v[by_time] for k, v in nxt.items()}
    # one query: the ops' rows and their siblings' columns (the parents' and the costs by
    # position beside them)
    nxt_at = {k: c._null_at(nxt[k]) for k in (1, 2)}
    rows = ops.select(
        *(
            pl.col(col).gather(pl.lit(pl.Series(cand)))
            for col in (
                "id",
                "rank",
                "tid",
                "ts_ns",
                "name",
                "input_dims",
                "input_types",
                "input_strides",
            )
        ),
        *(
            pl.col(col).gather(nxt_at[k]).alias(f"next{k}{suffix}")
            for k in (1, 2)
            for col, suffix in (
                ("name", ""),
                ("id", "_id"),
                ("input_dims", "_dims"),
                ("input_strides", "_strides"),
            )
        ),
    )
    return rows.hstack(c.op_context(profile, cand))


#: The kernels' columns a copy-kernel finding reads.
_KERNEL_COLUMNS = ["id", "rank", "name", "ts_ns", "dur_ns", "input_dims", "input_types"]


def _copy_kernels(profile: Profile) -> pl.DataFrame | None:
    """The layout-copy kernels whose next kernel on their stream (same rank and device, in
    time; the lower id first among kernels starting together) is a matmul, with its name as
    ``next_name``, in that order (by rank, device, stream, time and id); ``None`` when there
    is none. The next kernel found in NumPy, its name matched once per distinct name: a sort of
    every kernel and a window per stream were 8 ms on a 9k-kernel trace."""
    k = profile.kernels
    if k.height == 0:
        return None
    # both patterns in one query (a name_mask each was one)
    copy, mm = c.pattern_masks(profile, "kernels", (COPY_KERNELS, MATMUL_KERNELS))
    if not copy.any():
        return None
    low = np.iinfo(np.int64).min  # a null key: equal to itself only, before every value
    # (the columns as Series: a select, or a fill_null, is a query)
    keys = [c._filled(k.get_column(x), low) for x in ("id", "ts_ns", "stream", "device", "rank")]
    order = np.lexsort(keys)
    a, b = order[:-1], order[1:]
    same = np.ones(len(a), dtype=bool)
    for key in keys[2:]:
        same &= key[a] == key[b]
    nxt = np.full(k.height, -1, dtype=np.int64)
    nxt[a[same]] = b[same]
    rows = order[copy[order] & (nxt[order] >= 0)]
    rows = rows[mm[nxt[rows]]]
    if not len(rows):
        return None
    # the columns the findings read only (a gather of every column, the args' text among
    # them, was most of the rule's time on a 75k-event trace)
    # (the columns indexed: a select, a frame's gather and a with_columns were a query each)
    return pl.DataFrame(
        [
            *(k.get_column(c)[rows] for c in _KERNEL_COLUMNS),
            k.get_column("name")[nxt[rows]].alias("next_name"),
        ]
    )


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
        linked = _linked(profile)
        if linked is None:
            return []
        mm = list(c.MATMUL_OPS)
        # the flagged rows split into copies and views in Python (two filters were a query)
        by_kind: dict[str, list[dict[str, Any]]] = {"copy": [], "view": []}
        for r in linked.iter_rows(named=True):
            by_kind["copy" if r["name"] in COPY_OPS else "view"].append(r)
        findings = []
        for kind, flagged in by_kind.items():
            keep = []
            for r in flagged:
                if kind == "copy":
                    nxt = r["next1"] if r["next1"] in mm else r["next2"]
                    keep.append((r, nxt if nxt in mm else r["parent_name"]))
                    continue
                # the first next matmul the view feeds (_flagged kept views that feed one)
                for k in range(1, VIEW_LOOKAHEAD + 1):
                    if r[f"next{k}"] in mm and _feeds(
                        r["input_dims"], r[f"next{k}_dims"], r[f"next{k}_strides"]
                    ):
                        keep.append((r, r[f"next{k}"]))
                        break
            if not keep:
                continue
            by_loc = c.group_by_location(profile, [r["id"] for r, _ in keep])
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
        hit = _copy_kernels(profile)
        if hit is None:
            return []
        out = []
        for where, ids, rs in c.rows_by_location(profile, hit):
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
