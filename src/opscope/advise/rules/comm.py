"""Communication: collectives the compute does not hide (exposed), and many small messages."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.model import Profile

# Exposed communication (no compute kernel running) at least this share of the step (opscope's
# heuristic: HTA's comm/comp overlap report treats < 5-10% exposed as well overlapped).
EXPOSED_MIN_PCT: Final = 5.0
# A collective shorter than this is latency-bound: NCCL's ring/tree latency is ~5-20 µs per
# operation inside a node (NCCL tests' small-message rows), so messages this short cost their
# fixed latency, not bandwidth (bucket them).
SMALL_MSG_US: Final = 20.0
SMALL_MSG_MIN_PER_STEP: Final = 20  # and at least this many per step (opscope's heuristic)


def _exposed(profile: Profile) -> tuple[float, float]:
    """(communication ns, communication ns with no other kernel running), summed over steps of
    the first rank (the breakdown analysis' figures)."""
    from opscope.analysis.breakdown import breakdown
    from opscope.analysis.registry import Options

    st = breakdown(profile, Options()).steps
    if st.height == 0 or "communication_ns" not in st.columns:
        return 0.0, 0.0
    # the first rank's sums of the two columns (every row when no rank is known); the rows
    # picked by a filter only when several ranks are there (each is a query of fixed cost)
    rank = st.get_column("rank")
    r0 = rank.min()
    if r0 is not None and (rank.null_count() or rank.max() != r0):
        st = st.filter(pl.col("rank") == r0)
    cols = ("communication_ns", "communication_not_overlapped_ns")
    sums = [st.get_column(c).sum() for c in cols]  # (a sum leaves out the nulls)
    return float(sums[0]), float(sums[1])


def by_count(names: list[Any]) -> list[Any]:
    """The distinct names, the most frequent first, equal counts by name (a missing name first,
    where a sort puts nulls): ``group_by("name").len().sort(["len", "name"], descending=[True,
    False])``'s order, counted in Python (the group-by and sort were a query)."""
    count = Counter(names)
    return sorted(count, key=lambda n: (-count[n], n is not None, n or ""))


class CommExposed:
    """Collectives that run with no compute to hide them, or in many small messages."""

    id = "comm-exposed"
    doc = (
        "A collective (all-reduce, all-gather, reduce-scatter, all-to-all) that runs while no "
        "compute kernel runs leaves the device's compute idle: that *exposed* time is on the "
        f"step's critical path. Flagged when it is ≥ {EXPOSED_MIN_PCT:g}% of the step (the "
        "breakdown's communication_not_overlapped_ns, first rank); and separately when ≥ "
        f"{SMALL_MSG_MIN_PER_STEP} collectives per step are shorter than {SMALL_MSG_US:g} µs "
        "(latency-bound small messages). Saving: for small messages the exposed part of their "
        "time (their share of the communication times the exposed communication), for the "
        "exposed finding the rest of the exposed time (an upper bound: overlap needs "
        "independent compute): the same exposed time is never claimed twice. Fix: "
        "overlap (DDP bucket_cap_mb / gradient_as_bucket_view, FSDP forward/backward prefetch, "
        "async_op=True with the wait later), bucket small tensors into one collective "
        "(torch.cat / DDP buckets), fewer parameter groups."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        # the collectives' three columns read as Series by the kinds' mask (a filter of
        # every column of the events is a query of fixed cost)
        mask = c.kind_mask(profile, "communication")
        if not mask.any():
            return []
        ev = profile.events
        ids, names_k, durs = (ev.get_column(n) for n in ("id", "name", "dur_ns"))
        if not mask.all():  # (every event a collective: the columns as they are)
            keep = pl.Series(mask)
            ids, names_k, durs = ids.filter(keep), names_k.filter(keep), durs.filter(keep)
        steps = c.step_info(profile)
        comm, exposed = _exposed(profile)
        out: list[Finding] = []
        small_f: Finding | None = None
        small_saving = 0.0
        # how many are small counted over the durations' array (a null one is not small, as a
        # filter drops it); their rows taken only when there are enough to flag
        n_small = int((durs.to_numpy() < SMALL_MSG_US * 1000).sum())
        if n_small / max(steps.n, 1) >= SMALL_MSG_MIN_PER_STEP and comm > 0:
            comm_k = pl.DataFrame([ids, names_k, durs])
            small = comm_k.filter(pl.col("dur_ns") < SMALL_MSG_US * 1000)
            # the small messages' share of the exposed time: what bucketing can remove
            small_ns = float(small.get_column("dur_ns").sum())
            small_saving = exposed * small_ns / comm
            small_f = c.make_finding(
                profile,
                rule=self.id,
                title=(
                    f"{small.height / max(steps.n, 1):.0f} collectives per step under "
                    f"{SMALL_MSG_US:g} µs (latency-bound messages)"
                ),
                where=(None, None, None),
                key="small",
                saving_ns=small_saving,
                saving_how="the small collectives' share of the exposed communication",
                fix="# bucket small tensors into one collective\n"
                "flat = torch.cat([t.flatten() for t in tensors]); dist.all_reduce(flat)",
                evidence=c.evidence(
                    small.group_by("name")
                    .len()
                    .sort(["len", "name"], descending=[True, False])  # the most frequent first
                    .get_column("name")
                    .to_list()[:5],
                    small.height,
                    {"small_us_per_step": round(steps.per_step_us(small_ns), 3)},
                    small.get_column("id").to_list(),
                ),
                steps=steps,
                limit_ns=exposed,
                limit_what="the exposed communication time",
                method="device-idle",
            )
            out.append(small_f)
        if exposed > 0 and steps.pct(exposed) >= EXPOSED_MIN_PCT:
            names = by_count(names_k.to_list())[:5]
            # the small messages' share is the small-message finding's (bucketing removes it):
            # counted there, so that the two never claim the same exposed time twice
            rest = max(exposed - small_saving, 0.0)
            how = "the communication time with no compute kernel running (upper bound: " + (
                "overlapping it needs independent compute)"
            )
            if small_f:
                how += (
                    f", less the small messages' {steps.per_step_us(small_saving):.1f} µs/step "
                    f"counted in finding {small_f.id}"
                )
            out.append(
                c.make_finding(
                    profile,
                    rule=self.id,
                    title=f"exposed communication: {steps.pct(exposed):.0f}% of the step",
                    where=(None, None, None),
                    key="exposed",
                    saving_ns=rest,
                    saving_how=how,
                    fix="model = DDP(model, bucket_cap_mb=25, gradient_as_bucket_view=True)\n"
                    "# FSDP: backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch",
                    evidence={
                        **c.evidence(
                            names,
                            ids.len(),
                            {
                                "comm_us_per_step": round(steps.per_step_us(comm), 3),
                                "exposed_us_per_step": round(steps.per_step_us(exposed), 3),
                            },
                            ids.to_list(),
                        ),
                        **({"overlaps": [small_f.id]} if small_f else {}),
                    },
                    steps=steps,
                    limit_ns=exposed,
                    limit_what="the exposed communication time",
                    method="device-idle",
                )
            )
        return out


register(CommExposed())
