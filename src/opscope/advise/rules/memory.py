"""Memory: fragmentation, allocation churn, tensors kept alive across steps."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.analysis import tree
from opscope.model import Profile

MiB = 1 << 20
# Fragmentation: at the allocated peak, reserved ≥ this ratio × allocated and the gap ≥ this
# many bytes (PyTorch's CUDA caching allocator notes: reserved-but-unallocated memory is what
# `expandable_segments` reclaims; below ~1.25× it is normal rounding).
FRAG_RATIO = 1.5
FRAG_MIN_BYTES = 64 * MiB
# Churn: bytes allocated per step ≥ this many times the peak allocated, with ≥ this many
# allocations per step — the same memory is requested over and over.
CHURN_RATIO = 20.0
CHURN_MIN_ALLOCS = 1000
CHURN_MIN_BYTES = 1 * MiB  # per step: tiny scalar wrappers are not worth a finding
# Kept alive: allocated memory at the end of each step grows by ≥ this much every step
# (opscope's heuristic: above allocator rounding noise).
GROWTH_MIN_BYTES = 1 * MiB


def _dev_mem(profile: Profile) -> pl.DataFrame:
    """Memory events of one device: the busiest accelerator if any, else the CPU (once per
    profile: three rules ask, and its four queries were a fixed cost on small traces)."""
    out: pl.DataFrame = c._memo("memory.dev_mem", profile, lambda: _busiest(profile))
    return out


def _busiest(profile: Profile) -> pl.DataFrame:
    m = profile.memory
    if m.height == 0:
        return m
    if m.get_column("device_type").null_count() or m.get_column("device").null_count():
        m = m.with_columns(pl.col("device_type").fill_null(-1), pl.col("device").fill_null(-1))
    # the events per (device_type, device) counted in Python over the few devices' pairs (a
    # group-by, its sort and a filter were three queries of fixed cost): an accelerator
    # first, then the most events, then the lower (device_type, device), a total order
    pairs = list(zip(*(m.get_column(k).to_list() for k in ("device_type", "device")), strict=True))
    counts = Counter(pairs)
    best = min(counts, key=lambda k: (not k[0] > 0, -counts[k], k))
    if counts[best] == m.height:
        return m  # one device holds every event (the filter would keep them all)
    return m.filter((pl.col("device_type") == best[0]) & (pl.col("device") == best[1]))


class Fragmentation:
    """Reserved memory far above allocated at the peak."""

    id = "memory-fragmentation"
    doc = (
        "The caching allocator keeps freed blocks reserved for reuse; when block sizes vary, "
        "reserved memory grows well above what is allocated, and large requests fail or force "
        "`cudaFree`/re-reservation (slow, synchronising). The rule looks at the allocated "
        f"peak: reserved ≥ {FRAG_RATIO:g}× allocated and the gap ≥ {FRAG_MIN_BYTES // MiB} "
        "MiB. Saving: not a time estimate (the profile does not time the allocator); the "
        "figure is the wasted memory. Fix: "
        "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (or `PYTORCH_NPU_ALLOC_CONF` on "
        "Ascend), fixed shapes, fewer differently-sized temporaries."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        m = _dev_mem(profile)
        if m.height == 0 or not c.present(m.get_column("total_reserved")):
            return []
        # an equal peak twice: the first in time (and in trace order at one instant)
        peak = m.sort(
            ["total_allocated", "ts_ns"],
            descending=[True, False],
            nulls_last=True,
            maintain_order=True,
        ).row(0, named=True)
        alloc, res = peak["total_allocated"] or 0, peak["total_reserved"] or 0
        if alloc <= 0 or res < FRAG_RATIO * alloc or res - alloc < FRAG_MIN_BYTES:
            return []
        where: tuple[str | None, int | None, str | None] = (None, None, None)
        if peak.get("op_id") is not None:
            where = next(iter(c.group_by_location(profile, pl.DataFrame({"id": [peak["op_id"]]}))))
        return [
            c.make_finding(
                profile,
                rule=self.id,
                title=f"fragmentation: {res / MiB:.0f} MiB reserved for {alloc / MiB:.0f} MiB "
                "allocated at the peak",
                where=where,
                key="frag",
                saving_ns=0.0,
                saving_how=f"memory, not time: {(res - alloc) / MiB:.0f} MiB reserved but unused",
                fix="# in the environment, before the process starts:\n"
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                evidence=c.evidence(
                    [],
                    0,
                    {
                        "allocated_bytes": alloc,
                        "reserved_bytes": res,
                        "ratio": round(res / alloc, 3),
                    },
                    [peak["op_id"]] if peak.get("op_id") is not None else [],
                ),
                severity="medium",
            )
        ]


class Churn:
    """The same memory allocated and freed many times per step."""

    id = "memory-alloc-churn"
    doc = (
        "Each allocation costs an allocator call (and on a device, sometimes a sync); a step "
        "that allocates many times its peak memory in many small requests is spending time "
        "on temporaries. The rule fires when the bytes allocated per step are ≥ "
        f"{CHURN_RATIO:g}× the step's working set (its allocated peak above the memory "
        "allocated when it starts), at least 1 MiB, and there are ≥ "
        f"{CHURN_MIN_ALLOCS} allocations per step. Saving: not estimated (allocator calls "
        "are not timed in the trace); "
        "figures give the counts. Fix: in-place ops (`add_`, `out=`), preallocated buffers, "
        "fusing elementwise chains (`torch.compile`)."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        m = _dev_mem(profile)
        if m.height == 0:
            return []
        steps = c.step_info(profile)
        if tree.SHORTCUTS and m.height / max(steps.n, 1) < CHURN_MIN_ALLOCS:
            return []  # fewer events than the allocations per step it needs (so fewer allocs)
        allocs = m.filter(pl.col("bytes") > 0)
        n = allocs.height / max(steps.n, 1)
        bytes_step = float(allocs.get_column("bytes").sum()) / max(steps.n, 1)
        # The step's own working set: its peak above what was allocated when it began (other
        # live memory of the process is not the step's churn).
        ws = (
            m.filter(pl.col("step").is_not_null())
            .sort("ts_ns", maintain_order=True)  # first(): trace order at one instant
            .group_by("step")
            .agg(
                (
                    pl.col("total_allocated").max()
                    - (pl.col("total_allocated").first() - pl.col("bytes").first())
                ).alias("ws")
            )
        )
        peak = float(ws.get_column("ws").median() or 0) if ws.height else 0.0  # type: ignore[arg-type]
        if ws.height == 0:
            peak = float(m.get_column("total_allocated").max() or 0)  # type: ignore[arg-type]
        peak = max(peak, 1.0)
        if n < CHURN_MIN_ALLOCS or bytes_step < max(CHURN_RATIO * peak, CHURN_MIN_BYTES):
            return []
        # sorted: the location order (and max()'s pick among equal counts) follows by_op's rows
        by_op = allocs.filter(pl.col("op_id").is_not_null()).group_by("op_id").len().sort("op_id")
        where: tuple[str | None, int | None, str | None] = (None, None, None)
        if by_op.height:
            loc = c.group_by_location(profile, by_op.rename({"op_id": "id"}))
            n_of = dict(zip(by_op.get_column("op_id"), by_op.get_column("len"), strict=True))
            counts = {k: sum(int(n_of[i]) for i in v) for k, v in loc.items()}
            where = max(counts, key=lambda k: counts[k])
        return [
            c.make_finding(
                profile,
                rule=self.id,
                title=f"allocation churn: {n:.0f} allocations, {bytes_step / MiB:.1f} MiB per step "
                f"({bytes_step / peak:.0f}× the peak)",
                where=where,
                key="churn",
                saving_ns=0.0,
                saving_how="not estimated: the trace does not time the allocator",
                fix="y.add_(x)  # in place, or torch.add(a, b, out=buf) into a preallocated buffer",
                evidence=c.evidence(
                    [],
                    allocs.height,
                    {
                        "allocs_per_step": n,
                        "bytes_per_step": bytes_step,
                        "peak_allocated": peak,
                        "ratio": round(bytes_step / peak, 2),
                    },
                    [],
                ),
                severity="low",
                steps=steps,
            )
        ]


class KeptAlive:
    """Memory that stays allocated step after step."""

    id = "memory-kept-alive"
    doc = (
        "Memory still allocated at the end of a step that was not there at the end of the "
        "previous one, step after step, is tensors kept past their last use: typically "
        "`losses.append(loss)` (which also keeps each step's autograd graph), caches keyed by "
        "step, or references held in a list. The rule fires when allocated memory at step "
        f"ends grows by ≥ {GROWTH_MIN_BYTES // MiB} MiB at every step (at least 2 steps). It "
        "points at the op whose allocations are still live at the last step end. Saving: "
        "memory, not time. Fix: keep Python numbers (`loss.item()` every N steps) or "
        "`.detach()`, and drop references when done."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        m = _dev_mem(profile)
        if m.height == 0 or not c.present(m.get_column("step")):
            return []
        ends = (
            m.filter(pl.col("step").is_not_null())
            .sort("ts_ns", maintain_order=True)  # last(): trace order at one instant
            .group_by("step", maintain_order=True)
            .agg(pl.col("total_allocated").last())
            .sort("step")
        )
        if ends.height < 3:
            return []
        growth = ends.get_column("total_allocated").diff().drop_nulls()
        if growth.len() < 2 or growth.min() < GROWTH_MIN_BYTES:  # type: ignore[operator]
            return []
        # Allocations never freed inside the profile, made in a step before the last.
        freed = m.filter(pl.col("bytes") < 0).select("addr").unique()
        kept = m.filter(
            (pl.col("bytes") > 0)
            & ~pl.col("addr").is_in(freed.get_column("addr").implode())
            & (pl.col("step") < ends.get_column("step").max())
        )
        where: tuple[str | None, int | None, str | None] = (None, None, None)
        by_op = (
            kept.filter(pl.col("op_id").is_not_null())
            .group_by("op_id")
            .agg(pl.col("bytes").sum())
            .sort("op_id")  # the location order (max()'s pick among equal sizes) follows it
        )
        if by_op.height:
            loc = c.group_by_location(profile, by_op.rename({"op_id": "id"}))
            sizes = {
                k: int(by_op.filter(pl.col("op_id").is_in(v)).get_column("bytes").sum())
                for k, v in loc.items()
            }
            where = max(sizes, key=lambda k: sizes[k])
        g = float(growth.mean())  # type: ignore[arg-type]
        return [
            c.make_finding(
                profile,
                rule=self.id,
                title=f"memory grows {g / MiB:.1f} MiB every step (tensors kept past their use)",
                where=where,
                key="kept",
                saving_ns=0.0,
                saving_how="memory, not time: the growth per step",
                fix="history.append(loss.item())  # not the tensor (which keeps its graph)",
                evidence=c.evidence(
                    [],
                    kept.height,
                    {
                        "growth_bytes_per_step": g,
                        "step_end_allocated": ends.get_column("total_allocated").to_list(),
                    },
                    by_op.get_column("op_id").to_list(),
                ),
                severity="medium",
            )
        ]


for _r in (Fragmentation(), Churn(), KeptAlive()):
    register(_r)
