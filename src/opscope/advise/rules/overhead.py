"""Overhead: launch/dispatch-bound steps, host-device syncs, data-loader stalls, device idle
gaps, dynamic-shape recompiles, AICPU operators and float64 paths."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.analysis.tree import int_values
from opscope.model import Profile

# A kernel shorter than this is dominated by its launch: CUDA launch overhead is ~2-5 µs
# (NVIDIA, "Getting Started with CUDA Graphs"; measured launch rates of 200-400k/s).
LAUNCH_US = 5.0
# Launch-bound: at least this share of kernels are that short, and at least this many per step.
LAUNCH_SHORT_SHARE = 0.5
LAUNCH_MIN_KERNELS = 100
# Host-only profiles: user-level ops shorter than this are eager dispatch overhead (the
# dispatcher + Python binding cost a few µs per op on a CPU — PyTorch's "overhead-bound"
# guidance in the performance tuning guide — and a trivial op recorded with stacks takes
# 10-40 µs on a loaded 2-core VM, measured on this project's CI machines).
DISPATCH_US = 50.0
DISPATCH_MIN_OPS = 200  # per step (opscope's heuristic)
# ...and at least this fraction of the step's user-level ops are that short (the step is made
# of tiny ops; counted, not timed, so that a few ops preempted on a busy host do not hide it;
# opscope's heuristic).
DISPATCH_MIN_TINY_FRACTION = 0.8
SYNC_OPS = (
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::equal",
    "aten::is_nonzero",
    "aten::tolist",
)
SYNC_RUNTIME = r"(?i)(cuda|hip)(Stream|Device|Event)Synchronize|aclrtSynchronize"
DATALOADER = r"^enumerate\(DataLoader\)"
# Data-loader time at least this share of the step is a stall worth fixing (opscope's
# heuristic, the same order as HTA's idle-time breakdown flags; no vendor figure exists).
DATALOADER_MIN_PCT = 10.0
# Device idle (no kernel on any stream) at least this share of the step (opscope's heuristic:
# a fifth of the step is well above launch gaps of a healthy compute-bound step).
IDLE_MIN_PCT = 20.0
RECOMPILE = r"(?i)aclopCompile|opCompile|TorchDynamo.*recompil|CompileFunction"
# CANN's run-time compile calls (AscendCL API slices of the CANN process in trace_view.json):
# ascend-dynamic-shape's, read with this module's patterns (one query for all).
COMPILE_EVENTS = r"^(AscendCL@)?(aclopCompileAndExecute|aclopCompile|opCompile)$"
FLOAT64_TYPES = ("float64",)
AICPU = "(?i)AI_CPU"  # a kernel's core type on Ascend's AICPU
# The event kinds a runtime sync call can have.
_SYNC_KINDS = ["runtime", "driver", "cpu_op", "other"]


def _sync_ops(profile: Profile) -> pl.DataFrame:
    """The sync ops, with ``op_parent``, ``cost_ns`` and ``pname`` (the parent op's name), but
    not one called by another sync op. Syncs nested in other ops (e.g. item inside a user op's
    implementation) count too."""
    import numpy as np

    rows = np.flatnonzero(c.name_mask(profile, "ops", names=SYNC_OPS))
    par, pname, cost = c.op_context(profile, rows)
    if not len(rows):  # the empty table of the columns below (no query to find it empty)
        return profile.ops.clear().with_columns(par, cost, pname.alias("pname"))
    # the rows whose parent is no sync op, taken by position and the three columns added
    # beside them (a gather, the columns and a filter were one query of fixed cost)
    keep = np.flatnonzero([p not in SYNC_OPS for p in pname.to_list()])
    return profile.ops[rows[keep]].hstack([par[keep], cost[keep], pname[keep].alias("pname")])


def _named_events(profile: Profile, pattern: str) -> pl.DataFrame:
    """The events of :data:`_NAMED`'s ``pattern`` (the host-sync, data-loader, recompile and
    dynamic-shape rules' filters), by position: the rules' masks come from one query a profile (a
    filter each was a query of fixed cost), their names' tests over the distinct names on a
    large table and their kinds' from the kinds' codes."""

    def masks() -> dict[str, Any]:
        from opscope.analysis.tree import no_ops

        # (the runtime syncs' pattern only where the host-sync rule reads it: its shortcut
        # returns before when there is no op and no event of a sync's kinds)
        asked = [
            p
            for p in _NAMED
            if p != SYNC_RUNTIME or not (no_ops(profile) and c.absent(profile, *_SYNC_KINDS))
        ]
        hits = dict(zip(asked, c.pattern_masks(profile, "events", asked), strict=True))
        none = np.zeros(0, dtype=np.int64)
        # (the kinds' masks only for a pattern some name matches: none, no row)
        return {
            p: np.flatnonzero(hits[p] & _NAMED[p](profile)) if p in hits and hits[p].any() else none
            for p in _NAMED
        }

    rows = c._memo("overhead.named_events", profile, masks)[pattern]
    if not len(rows):  # (the events' empty slice, not a gather of no row)
        return profile.events.slice(0, 0)
    out: pl.DataFrame = profile.events[rows]
    return out


#: The event name patterns of four rules, with the kinds each keeps (an event without a kind
#: none, as a filter on its kind keeps none).
_NAMED: dict[str, Callable[[Profile], Any]] = {
    SYNC_RUNTIME: lambda p: c.kind_mask(p, *_SYNC_KINDS),
    DATALOADER: lambda p: c.kind_mask_except(p, "python_function"),
    RECOMPILE: lambda p: c.kind_mask_except(p, "python_function"),
    COMPILE_EVENTS: lambda p: c.kind_mask_except(p, "python_function"),
}


_IDLE_HOW = (
    "the device idle each sync causes: from the end of the device work it waited for to the "
    "start of the next kernel (each gap once), at most the time the sync blocked (removing it "
    "moves the later launches earlier by no more); the device work waited on is not saved"
)


def _device_ends(profile: Profile, rank: Any) -> tuple[Any, Any] | None:
    """The rank's kernels (every rank's for a null rank) in start order: their starts and the
    running maximum of their ends; ``None`` when it has none. Memoised per profile and rank:
    :func:`idle_after` runs once per finding's location, and the sort and filter were most of
    its cost (a fixed cost per query that showed on small traces)."""
    by_rank: dict[Any, tuple[Any, Any] | None] = c._memo(
        "overhead.device_ends", profile, lambda: {}
    )
    if rank not in by_rank:
        import numpy as np

        from opscope.analysis.tree import int_values

        # in NumPy (a filter and a sort were a query of fixed cost): the kernels with a rank, a
        # start and a duration, by rank then start (kernels starting together on a rank may
        # come in any order: the running maximum is the same at the last of them, the only
        # place a search lands)
        k = profile.kernels
        kr, ok = int_values(k.get_column("rank"))
        ts, ok_ts = int_values(k.get_column("ts_ns"))
        dur, ok_dur = int_values(k.get_column("dur_ns"))
        keep = ok & ok_ts & ok_dur
        if rank is not None:
            keep &= kr == rank
        at = np.flatnonzero(keep)
        if not len(at):
            by_rank[rank] = None
        else:
            at = at[np.lexsort((ts[at], kr[at]))]
            starts = ts[at]
            by_rank[rank] = (starts, np.maximum.accumulate(starts + dur[at]))
    return by_rank[rank]


def idle_after(profile: Profile, events: pl.DataFrame) -> float:
    """Device idle (ns) that removing blocking host events would recover.

    For each event: the gap on the rank's device (union of streams) from the end of the device
    work before its return (or its start, when none) to the next kernel's start. Removing the
    event shifts the host's later launches earlier by at most the time it blocked, so an event
    recovers at most its own duration of that gap; several events in one gap share it."""
    import numpy as np

    total = 0.0
    # the events' columns once, each rank's rows picked by position (iterating a group_by
    # is a query per group: a fixed cost, and this runs once per finding's location)
    ts_all = events.get_column("ts_ns").to_numpy()
    dur_s = events.get_column("dur_ns")
    dur_all = (dur_s.fill_null(0) if dur_s.null_count() else dur_s).to_numpy()
    rank_of = events.get_column("rank").to_list()
    # ranks in trace order (a group_by's maintain_order): a float sum in another order could
    # differ in its last digit; a null rank is a group of its own, matched to every kernel
    for r in dict.fromkeys(rank_of):
        kr = _device_ends(profile, r)
        if kr is None:
            continue
        starts, ends = kr
        at = np.array([i for i, x in enumerate(rank_of) if x == r], dtype=np.int64)
        ts = ts_all[at]
        dur = dur_all[at]
        idx = np.searchsorted(starts, ts + dur, side="right")
        gaps: dict[int, float] = {}
        waits: dict[int, float] = {}
        for i, a, d in zip(idx.tolist(), ts.tolist(), dur.tolist(), strict=True):
            if i >= len(starts):
                continue  # no later kernel: nothing waits on the host in this profile
            done = max(float(ends[i - 1]), float(a)) if i > 0 else float(a)
            gaps[i] = max(gaps.get(i, 0.0), float(starts[i]) - done)
            waits[i] = waits.get(i, 0.0) + float(d)
        total += sum(min(max(g, 0.0), waits[i]) for i, g in gaps.items())
    return total


class HostSync:
    """Host-device synchronisations inside the step."""

    id = "overhead-host-sync"
    doc = (
        "`tensor.item()`, `.cpu()`, `.tolist()`, `torch.nonzero` and data-dependent Python "
        "`if tensor:` make the host wait until the device has finished everything queued, "
        "then the device waits for the host to queue more: the pipeline drains at every one. "
        "The rule counts these ops (`aten::item`, `aten::_local_scalar_dense`, "
        "`aten::nonzero`, ...) and runtime syncs (`cudaStreamSynchronize`, "
        "`aclrtSynchronizeStream`). Saving, on a device profile: only the device idle the "
        "sync causes — from the end of the device work it waited for to the start of the next "
        "kernel, and at most the time the sync blocked (removing it moves the later launches "
        "earlier by no more) — never the device work waited on (removing the sync would not "
        "make it faster); each idle gap counts once however many syncs fall in it. On a "
        "CPU profile it is the ops' own time (low severity). Fix: keep values on the device "
        "(`torch.where`, masks), log every N steps, or move the check out of the step."
    )

    # a sync op (a host op) or a runtime sync (of those kinds, host ops among them)
    needs = tuple(_SYNC_KINDS)

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        ops = _sync_ops(profile)
        rt = _named_events(profile, SYNC_RUNTIME)
        if ops.height == 0 and rt.height == 0:
            return []
        steps = c.step_info(profile)
        target = c.target_of(profile, results)
        out = []
        # the runtime syncs with their ancestors: the same for every location (one walk), as
        # Python pairs (two queries per location were a fixed cost that showed)
        rt_anc = c.ancestors(profile, rt.get_column("id")) if rt.height else None
        if ops.height:
            if rt_anc is not None:
                a_id, a_anc = rt_anc.get_column("id"), rt_anc.get_column("anc_id")
                pairs = list(zip(a_id.to_list(), a_anc.to_list(), strict=True))
                rt_ids, rt_dur = rt.get_column("id"), rt.get_column("dur_ns")
                rt_rows = list(zip(rt_ids.to_list(), rt_dur.to_list(), strict=True))
            for where, ids, rs in c.rows_by_location(profile, ops):
                # Runtime sync calls issued under these ops are the host's wait.
                wait = 0.0
                if rt_anc is not None:
                    within = set(ids)
                    under = {i for i, a in pairs if a in within}
                    wait = float(sum(d for i, d in rt_rows if i in under and d is not None))
                host_cost = wait or float(rs.get_column("dur_ns").sum())
                idle = idle_after(profile, rs) if profile.has_device else None
                cost = host_cost if idle is None else idle
                names = sorted(set(rs.get_column("name").to_list()))
                out.append(
                    c.make_finding(
                        profile,
                        rule=self.id,
                        title=f"{rs.height} host-device syncs ({', '.join(names)})",
                        where=where,
                        key=",".join(names),
                        saving_ns=cost,
                        saving_how=(
                            _IDLE_HOW
                            if idle is not None
                            else "the sync ops' own time (a host-only profile: no device drain)"
                        ),
                        method="device-idle" if idle is not None else "removed-time",
                        limit_ns=idle if idle is not None else host_cost,
                        limit_what=(
                            "the device idle after the syncs"
                            if idle is not None
                            else "the sync ops' own time"
                        ),
                        fix=(
                            "# keep it on the device instead of branching on a Python value:\n"
                            "x = torch.where(mask, a, b)  # not: if t.item() > 0: ...\n"
                            "# log losses every N steps, not every step"
                        ),
                        evidence=c.evidence(
                            names,
                            rs.height,
                            {
                                "calls_per_step": rs.height / max(steps.n, 1),
                                "us_per_step": round(steps.per_step_us(cost), 3),
                                "host_wait_us_per_step": round(steps.per_step_us(host_cost), 3),
                            },
                            ids,
                        ),
                        cap="low" if target == "cpu" else None,
                        steps=steps,
                    )
                )
        covered = set()
        for f in out:
            covered.update(f.evidence["event_ids"])
        if rt_anc is not None:
            anc = rt_anc.filter(pl.col("anc_id").is_in(ops.get_column("id").implode()))
            lone = rt.filter(~pl.col("id").is_in(anc.get_column("id").implode()))
            for where, ids, rs in c.rows_by_location(profile, lone):
                host_cost = float(rs.get_column("dur_ns").sum())
                idle = idle_after(profile, rs) if profile.has_device else None
                cost = host_cost if idle is None else idle
                names = sorted(set(rs.get_column("name").to_list()))
                out.append(
                    c.make_finding(
                        profile,
                        rule=self.id,
                        title=f"{rs.height} device synchronisations ({', '.join(names[:3])})",
                        where=where,
                        key="rt:" + ",".join(names),
                        saving_ns=cost,
                        saving_how=_IDLE_HOW if idle is not None else "time blocked in the calls",
                        method="device-idle" if idle is not None else "removed-time",
                        limit_ns=cost,
                        limit_what="the device idle after the syncs",
                        fix="# remove explicit synchronize() / .cpu() inside the step",
                        evidence=c.evidence(
                            names,
                            rs.height,
                            {
                                "us_per_step": round(steps.per_step_us(cost), 3),
                                "host_wait_us_per_step": round(steps.per_step_us(host_cost), 3),
                            },
                            ids,
                        ),
                        steps=steps,
                    )
                )
        return out


class LaunchBound:
    """Steps made of many tiny kernels (device) or tiny ops (host only)."""

    id = "overhead-launch-bound"
    doc = (
        "When most kernels run shorter than their own launch (≈5 µs on CUDA, NVIDIA's CUDA "
        "Graphs article), the device waits for the host: the step is launch-bound, and faster "
        f"kernels would not help. Device profiles: ≥ {LAUNCH_SHORT_SHARE:.0%} of kernels "
        f"shorter than {LAUNCH_US:g} µs and ≥ {LAUNCH_MIN_KERNELS} kernels per step; saving = "
        "device idle time between them (what CUDA graphs / torch.compile can recover, an upper "
        f"bound). Host-only profiles: ≥ {DISPATCH_MIN_OPS} user-level ops per step shorter "
        f"than {DISPATCH_US:g} µs, making ≥ {DISPATCH_MIN_TINY_FRACTION:.0%} of its user-level "
        "ops (eager "
        "dispatch overhead); saving = their time (upper bound). Fix: batch the work into "
        "fewer, larger ops (vectorise Python loops), `torch.compile(mode='reduce-overhead')`, "
        "CUDA graphs."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        steps = c.step_info(profile)
        if profile.has_device:
            return self._device(profile, steps)
        ops = c.user_level_ops(profile)
        # the tiny ops by position, counted and summed in NumPy (a filter, a group-by and a
        # sort were a query each); a null duration is no tiny op, as a filter drops it
        dur, known = int_values(ops.get_column("dur_ns"))
        tiny = np.flatnonzero(known & (dur < DISPATCH_US * 1000))
        per_step = len(tiny) / max(steps.n, 1)
        if per_step < DISPATCH_MIN_OPS or len(tiny) < DISPATCH_MIN_TINY_FRACTION * ops.height:
            return []
        total = float(dur[tiny].sum())
        # the five commonest names, equal counts by name (a null name first among them, as a
        # sort puts it)
        counts = Counter(ops.get_column("name")[tiny].to_list())
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0] is not None, kv[0] or ""))[:5]
        loc = c.group_by_location(profile, ops.get_column("id")[tiny].to_list())
        where = max(loc, key=lambda k: len(loc[k]))
        return [
            c.make_finding(
                profile,
                rule=self.id,
                title=f"dispatch-bound: {per_step:.0f} ops per step under {DISPATCH_US:g} µs",
                where=where,
                key="host",
                saving_ns=total,
                saving_how="the tiny ops' total time (upper bound: batched ops are not free)",
                fix=(
                    "# vectorise the Python loop into one op over a stacked tensor:\n"
                    "y = torch.stack(xs).mul_(w).sum(0)  # not: for x in xs: y = y + x * w\n"
                    "model = torch.compile(model)"
                ),
                evidence=c.evidence(
                    [name for name, _ in top],
                    len(tiny),
                    {
                        "tiny_ops_per_step": per_step,
                        "share_of_step_pct": round(steps.pct(total), 2),
                        "threshold_us": DISPATCH_US,
                    },
                    loc[where],
                ),
                steps=steps,
            )
        ]

    @staticmethod
    def _device(profile: Profile, steps: c.StepInfo) -> list[Finding]:
        if c.absent(profile, "kernel"):
            return []  # (the filter below would find none)
        # the counts from Series comparisons (no query); the short kernels' rows filtered only
        # when the rule fires (two filters of every kernel column were a fixed cost each)
        kern = profile.kernels
        is_kernel = kern.get_column("kind") == "kernel"
        n = int(is_kernel.sum())
        if n == 0:
            return []
        is_short = is_kernel & (kern.get_column("dur_ns") < LAUNCH_US * 1000)
        share = int(is_short.sum()) / n
        if share < LAUNCH_SHORT_SHARE or n / max(steps.n, 1) < LAUNCH_MIN_KERNELS:
            return []
        short = kern.filter(is_short)  # (a null comparison drops the row, as the filters did)
        idle = _idle_ns(profile)
        loc = c.group_by_location(profile, short)
        where = max(loc, key=lambda kk: len(loc[kk]))
        return [
            c.make_finding(
                profile,
                rule="overhead-launch-bound",
                title=f"launch-bound: {share:.0%} of {n} kernels under {LAUNCH_US:g} µs",
                where=where,
                key="device",
                saving_ns=idle,
                saving_how="device idle time between kernels (upper bound CUDA graphs recover)",
                fix="model = torch.compile(model, mode='reduce-overhead')  # CUDA graphs",
                evidence=c.evidence(
                    short.group_by("name")
                    .len()
                    .sort(["len", "name"], descending=[True, False])  # equal counts by name
                    .head(5)
                    .get_column("name")
                    .to_list(),
                    short.height,
                    {
                        "kernels": n,
                        "short_kernels": short.height,
                        "short_share": round(share, 4),
                        "threshold_us": LAUNCH_US,
                        "idle_us_per_step": round(steps.per_step_us(idle), 3),
                    },
                    short.get_column("id").to_list(),
                ),
                steps=steps,
            )
        ]


def _idle_ns(profile: Profile) -> float:
    """Time between kernels when none runs on any stream, on the rank whose steps
    :func:`~opscope.advise._common.step_info` measures (the first), of its devices the most
    idle one. When the kernels carry their step, only the gaps between a step's kernels count,
    clipped to the step's window (the host-side ProfilerStep range): never more than the
    steps' time. (A sum over ranks set against one rank's step read "device idle 107% of the
    step" on a two-rank run; the gaps of an asynchronous run's kernels, past the end of a
    short host-side window, read 215%.)"""
    out: float = c._memo("overhead.idle_ns", profile, lambda: _idle_of(profile))
    return out  # two rules ask


def _idle_of(profile: Profile) -> float:
    """:func:`_idle_ns` computed."""
    # the rank and whether its kernels carry steps: one query (a Series step each was one),
    # then one query
    from opscope.advise import _idle
    from opscope.analysis import tree
    from opscope.analysis.tree import int_values

    kern = profile.kernels
    if kern.height <= _idle.IDLE_PY_MAX_ROWS:
        return _idle.idle_py(kern, profile.steps)
    ts, rank, step = (kern.get_column(x) for x in ("ts_ns", "rank", "step"))
    if (
        tree.SHORTCUTS
        and not ts.null_count()
        and not rank.null_count()
        and (rank.min() == rank.max())
    ):
        # every kernel timed, on one rank (or none): the three figures from the columns'
        # counts, without the query
        any_timed, r0, stepped = kern.height > 0, rank.min(), step.len() - step.null_count()
    else:
        timed = pl.col("ts_ns").is_not_null()
        first = pl.col("rank").filter(timed).min()
        mine = timed & pl.when(first.is_null()).then(True).otherwise(pl.col("rank") == first)
        any_timed, r0, stepped = kern.select(
            timed.any(), first, pl.col("step").filter(mine).count()
        ).row(0)
    if not any_timed:
        return 0.0
    # the gaps in NumPy over the rank's timed kernels: a sort, a running maximum per group and
    # the windows by step (as one query, ~0.9 ms on every trace with kernels, most of it the
    # plan's fixed cost; the columns as arrays without a query)
    t, keep = int_values(ts)
    if r0 is not None:
        r, r_ok = int_values(rank)
        keep &= r_ok & (r == r0)
    s_val, s_ok = int_values(step)
    if stepped:
        keep &= s_ok
    t = t[keep]
    if not len(t):
        return 0.0
    d, has_end = (a[keep] for a in int_values(kern.get_column("dur_ns")))
    end = t + d  # where has_end (a null end: no running maximum there)
    dev = int_values(kern.get_column("device"))[0][keep]  # a null device is device 0
    stp = s_val[keep] if stepped else None
    order = np.lexsort((t, dev) if stp is None else (t, stp, dev))
    t, end, has_end, dev = t[order], end[order], has_end[order], dev[order]
    starts = np.ones(len(t), dtype=bool)
    starts[1:] = dev[1:] != dev[:-1]
    if stp is not None:
        stp = stp[order]
        starts[1:] |= stp[1:] != stp[:-1]
    prev_end, prev_ok = _running_max_before(end, has_end, starts)
    lo, hi = prev_end, t
    st = profile.steps
    if stp is not None and st.height:
        w0, ok0, w1, ok1 = _step_windows(st, r0, stp)
        lo = np.where(ok0, np.maximum(lo, w0), lo)
        hi = np.where(ok1, np.minimum(hi, w1), hi)
    # a group's first kernel (or one after a kernel of no end) has no gap before it
    gap = np.where(prev_ok, np.clip(hi - lo, 0, None), 0)
    new_dev = np.flatnonzero(np.r_[True, dev[1:] != dev[:-1]])
    return float(np.add.reduceat(gap, new_dev).max())


def _running_max_before(
    end: np.ndarray, has_end: np.ndarray, first: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For rows in group order (``first``: the row starts its group): the largest ``end`` of
    the group's rows before each row, and whether there is one to read: the previous row's
    running maximum (its cumulative max shifted by one, per group, a null end read as null:
    after such a row, none). Exact: each end as its rank among the distinct ends, offset per
    group so that one running maximum over the column restarts at each group."""
    n = len(end)
    gid = np.cumsum(first) - 1
    values, code = np.unique(end[has_end], return_inverse=True)
    m = max(len(values), 1)
    key = gid * m - 1  # below every value of the group: "none yet"
    key[has_end] += code.reshape(-1) + 1
    run = np.maximum.accumulate(key)
    ok = np.zeros(n, dtype=bool)
    ok[1:] = ~first[1:] & has_end[:-1]
    prev = np.zeros(n, dtype=np.int64)
    at = np.flatnonzero(ok)
    if len(values):
        prev[at] = values[run[at - 1] - gid[at - 1] * m]
    return prev, ok


def _step_windows(
    st: pl.DataFrame, r0: Any, steps: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each row's step window on rank ``r0`` (every rank when None) from the steps table, its
    first row of that step: (start, whether known, end, whether known); unknown where the step
    has no row or the figure is null (the gap then not clipped on that side)."""
    first: dict[int, tuple[Any, Any]] = {}
    cols = (st.get_column(c).to_list() for c in ("rank", "step", "ts_ns", "dur_ns"))
    for r, s_, ts_, d_ in zip(*cols, strict=True):
        if (r0 is None or r == r0) and s_ is not None and s_ not in first:
            first[s_] = (ts_, None if ts_ is None or d_ is None else ts_ + d_)
    n = len(steps)
    w0, w1 = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    ok0, ok1 = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    if not first:
        return w0, ok0, w1, ok1
    keys = np.fromiter(first, dtype=np.int64, count=len(first))
    by = np.argsort(keys, kind="stable")
    at = by[np.minimum(np.searchsorted(keys[by], steps), len(keys) - 1)]
    found = keys[at] == steps
    for col, out, ok in ((0, w0, ok0), (1, w1, ok1)):
        vals = [v[col] for v in first.values()]
        known = np.array([v is not None for v in vals], dtype=bool)
        arr = np.array([0 if v is None else v for v in vals], dtype=np.int64)
        ok[:] = found & known[at]
        out[:] = np.where(ok[:], arr[at], 0)
    return w0, ok0, w1, ok1


class DeviceIdle:
    """Device idle gaps within steps."""

    id = "overhead-device-idle"
    doc = (
        "Time inside a step when no kernel runs on any stream of the device is time the "
        "device waits for the host (Python, data, syncs, launches). The rule sums the gaps "
        "between kernels (union of all streams, per device, within each step when kernels "
        "carry their step, clipped to the step's window; of a multi-rank profile the first "
        "rank, whose steps are the step time, and its most idle device) and fires when they "
        "are ≥ "
        f"{IDLE_MIN_PCT:g}% of step time. Saving: the idle time (an upper bound: some host "
        "work cannot be overlapped). Fix: overlap the host work (prefetch data, avoid syncs, "
        "`torch.compile`, CUDA graphs); see the launch-bound and host-sync findings for the "
        "cause."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        if not profile.has_device:
            return []
        steps = c.step_info(profile)
        idle = _idle_ns(profile)
        if steps.pct(idle) < IDLE_MIN_PCT:
            return []
        return [
            c.make_finding(
                profile,
                rule=self.id,
                title=f"device idle {steps.pct(idle):.0f}% of the step",
                where=(None, None, None),
                key="idle",
                saving_ns=idle,
                saving_how="the device idle time between kernels (upper bound)",
                fix="# overlap host work: DataLoader(num_workers>0, pin_memory=True), no syncs,\n"
                "model = torch.compile(model)",
                evidence=c.evidence(
                    [],
                    0,
                    {
                        "idle_us_per_step": round(steps.per_step_us(idle), 3),
                        "step_us": round(steps.step_ns / 1000, 3),
                    },
                    [],
                ),
                steps=steps,
            )
        ]


class DataLoader:
    """Steps waiting on the data loader."""

    id = "overhead-dataloader"
    doc = (
        "torch's DataLoader marks each batch fetch as an `enumerate(DataLoader)#...__next__` "
        "range. When fetching takes a large share of the step the model waits for data. The "
        f"rule fires when those ranges are ≥ {DATALOADER_MIN_PCT:g}% of step time. Saving: "
        "their time per step (upper bound: with workers prefetching, fetching overlaps the "
        "step). Fix: `num_workers>0`, `pin_memory=True`, `persistent_workers=True`, cheaper "
        "transforms, or pre-processed data."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        dl = _named_events(profile, DATALOADER)
        if dl.height == 0:
            return []
        top = c.outermost(profile, dl)  # nested ranges of the same fetch count once
        steps = c.step_info(profile)
        total = float(top.get_column("dur_ns").sum())
        if steps.pct(total) < DATALOADER_MIN_PCT:
            return []
        where = next(iter(c.group_by_location(profile, top)))
        return [
            c.make_finding(
                profile,
                rule=self.id,
                title=f"data loading takes {steps.pct(total):.0f}% of the step",
                where=where,
                key="dl",
                saving_ns=total,
                saving_how="the data-loader fetch time (upper bound, overlappable with workers)",
                fix="loader = DataLoader(ds, batch_size=bs, num_workers=4, pin_memory=True,\n"
                "                    persistent_workers=True, prefetch_factor=2)",
                evidence=c.evidence(
                    sorted(set(top.get_column("name").to_list()))[:3],
                    top.height,
                    {"fetch_us_per_step": round(steps.per_step_us(total), 3)},
                    top.get_column("id").to_list(),
                ),
                steps=steps,
            )
        ]


class Recompile:
    """Operator compilation inside the steps (dynamic shapes)."""

    id = "overhead-recompile"
    doc = (
        "On Ascend, an operator whose shapes change is compiled again at run time "
        "(`aclopCompileAndExecute` / `opCompile` in the trace); with torch.compile, guards "
        "failing on new shapes recompile the graph. Either costs milliseconds per occurrence "
        "inside the step. The rule fires on any such event. Saving: their time. Fix: make "
        "shapes static (pad batches/sequences to a few buckets), "
        "`torch_npu.npu.set_compile_mode(jit_compile=False)` on Ascend, or "
        "`torch.compile(dynamic=True)` / `mark_dynamic`."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        ev = _named_events(profile, RECOMPILE)
        if ev.height == 0:
            return []
        top = c.outermost(profile, ev)
        steps = c.step_info(profile)
        out = []
        for where, ids, rs in c.rows_by_location(profile, top):
            cost = float(rs.get_column("dur_ns").sum())
            out.append(
                c.make_finding(
                    profile,
                    rule=self.id,
                    title=f"{rs.height} run-time operator compilations "
                    f"({', '.join(sorted(set(rs.get_column('name').to_list()))[:2])})",
                    where=where,
                    key="compile",
                    saving_ns=cost,
                    saving_how="the compile events' time removed",
                    fix="torch_npu.npu.set_compile_mode(jit_compile=False)  # Ascend\n"
                    "# and pad inputs to a few fixed shapes",
                    evidence=c.evidence(
                        sorted(set(rs.get_column("name").to_list())),
                        rs.height,
                        {"us_per_step": round(steps.per_step_us(cost), 3)},
                        ids,
                    ),
                    steps=steps,
                )
            )
        return out


class AscendSlowPaths:
    """AICPU operators and float64 work, on Ascend."""

    id = "overhead-ascend-slow-path"
    doc = (
        "Ascend's AI cores have no float64 units and some operators (and some dtypes of "
        "others) have only AICPU implementations, which run on the NPU's small CPU cores, "
        "orders of magnitude slower, often with extra copies. The rule fires when the target "
        "is Ascend and the profile has kernels on `AI_CPU` (the `Accelerator Core` column) or "
        "ops/kernels with float64 inputs (on a CPU or GPU profile meant for Ascend, the "
        "float64 ops show where the slow path will be). Saving: the time of those kernels "
        "(or ops). Fix: keep tensors in float32/bf16 (`torch.tensor(..., dtype=torch.float32)`"
        ", `.float()`), and replace AICPU-only ops."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        if c.target_of(profile, results) != "ascend":
            return []
        from opscope.analysis import tree

        steps = c.step_info(profile)
        out = []
        kern = profile.kernels
        if tree.SHORTCUTS and not c.present(kern.get_column("core_type")):
            aicpu = None  # no kernel with a core type: none on AI_CPU (the filter finds none)
        elif tree.SHORTCUTS and c.none_match(kern.get_column("core_type"), AICPU):
            aicpu = None  # a few core types, none AI_CPU (tested in Python, not by the filter)
        else:
            aicpu = kern.filter(pl.col("core_type").fill_null("").str.contains(AICPU))
        if aicpu is not None and aicpu.height:
            cost = float(aicpu.get_column("dur_ns").sum())
            names = sorted(set(aicpu.get_column("name").to_list()))
            for where, ids, rs in c.rows_by_location(profile, aicpu):
                cost = float(rs.get_column("dur_ns").sum())
                out.append(
                    c.make_finding(
                        profile,
                        rule=self.id,
                        title=f"{rs.height} AICPU kernels ({names[0]}...)",
                        where=where,
                        key="aicpu",
                        saving_ns=cost,
                        saving_how="the AICPU kernels' time (upper bound)",
                        fix="# use an AI-core operator / dtype instead of the AICPU one",
                        evidence=c.evidence(names[:10], rs.height, {}, ids),
                        steps=steps,
                    )
                )
        if c.present(profile.kernels.get_column("input_types")):
            src = profile.kernels  # (no filter)
        elif tree.no_ops(profile):
            return out  # no op: no user-level op, none with a dtype (the query finds no row)
        else:
            src = c.user_level_ops(profile)
        if tree.SHORTCUTS and not c.present(src.get_column("input_types")):
            return out  # no dtype recorded: no float64 work to find (the query finds no row)
        plan = src.lazy()  # one query (each eager step was one)
        if "cost_ns" not in src.columns:
            plan = plan.with_columns(pl.col("dur_ns").alias("cost_ns"))
        t = (
            plan.filter(pl.col("input_types").is_not_null())
            .select("id", "name", "input_dims", "input_types", "cost_ns")
            .collect(engine="in-memory")
        )
        if t.height:
            f64 = c.has_tensor_dtype(t, FLOAT64_TYPES)
            for where, ids, rs in c.rows_by_location(profile, f64):
                cost = float(rs.get_column("cost_ns").fill_null(0).sum())
                names = sorted(set(rs.get_column("name").to_list()))
                out.append(
                    c.make_finding(
                        profile,
                        rule=self.id,
                        title=f"float64 work ({', '.join(names[:3])}) runs on Ascend's slow path",
                        where=where,
                        key="fp64",
                        saving_ns=cost,
                        saving_how="the float64 ops' time (upper bound)",
                        fix="x = x.float()  # or create it as float32: torch.tensor(v, "
                        "dtype=torch.float32)",
                        evidence={
                            "operators": names,
                            "shapes": sorted(set(map(str, rs.get_column("input_dims"))))[:10],
                            "dtypes": ["float64"],
                            "calls": rs.height,
                            "figures": {"us_per_step": round(steps.per_step_us(cost), 3)},
                            "event_ids": ids[:10],
                        },
                        steps=steps,
                    )
                )
        return out


for _r in (HostSync(), LaunchBound(), DeviceIdle(), DataLoader(), Recompile(), AscendSlowPaths()):
    register(_r)
