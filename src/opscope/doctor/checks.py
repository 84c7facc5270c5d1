"""The checks behind ``opscope doctor``: can this profile's numbers be trusted?

Every check is a pure function of a :class:`~opscope.model.Profile` (its tables and ``meta``:
``trace_meta`` for the trace's own flags, ``run`` for a run directory's ``run.json``, the
``metrics`` table for ``metrics.jsonl``). A check that has nothing to look at (no run.json, no
steps, no frequency counter) returns nothing rather than a hollow "ok".

Statuses: ``error`` when conclusions drawn from the profile are likely wrong (truncated trace,
missing ranks); ``warning`` when they need care (noisy steps, warm-up left
in, an option off); ``ok`` otherwise. The thresholds are the named constants below, each with why.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import polars as pl

from opscope.advise._common import (
    NAME_INDEX_MIN_ROWS,
    kind_counts,
    kind_mask,
    name_mask,
    present,
)
from opscope.analysis.tree import per_profile
from opscope.ingest.summary import header_world_size
from opscope.model import Profile
from opscope.model.kinds import DEVICE_KINDS
from opscope.redact import REDACTED, secret_names

Status = Literal["ok", "warning", "error"]
_RANK: Final = {"ok": 0, "warning": 1, "error": 2}

# -- thresholds -----------------------------------------------------------------------------------

#: Coefficient of variation of step times above which steps are "unstable". 10 %: on a quiet
#: machine steady-state training steps vary by a few percent; beyond 10 % a 5-10 % optimisation
#: cannot be told from noise with a handful of steps.
STEP_CV_WARN: Final = 0.10
#: Relative spread (max / min - 1) of the mean step time across repeat cycles. Same reasoning as
#: :data:`STEP_CV_WARN`: two repeats that differ by more than 10 % measured different conditions.
REPEAT_SPREAD_WARN: Final = 0.10
#: The first step is "warm-up" when it is this many times the median of the others. 1.5x: lazy
#: init, cuDNN/ACL autotuning and allocator growth typically make first steps 2-10x slower, while
#: ordinary noise stays well under 1.5x.
WARMUP_RATIO: Final = 1.5
#: Fewest steps needed for spread / warm-up statistics; with two steps a CV says nothing.
MIN_STEPS_FOR_STATS: Final = 3
#: Profiled steps slower than unprofiled ones by more than this fraction: the profiler itself
#: distorts the picture (with_stack and profile_memory commonly cost 10-30 % on small ops).
OVERHEAD_WARN: Final = 0.20
#: Fraction of kernel launches (runtime calls) with no device activity tolerated before warning.
#: A few percent can be launches at the very edge of the trace window; more means lost activity
#: records (a full CUPTI / msprof buffer) and missing device time.
UNLINKED_LAUNCH_WARN: Final = 0.05
#: Free disk at record time below this is "nearly full": a multi-GB trace may not have fit.
DISK_LOW_BYTES: Final = 2 * 1024**3
#: Compressed trace bytes per active step assumed when judging free disk (the recorder's own
#: pre-flight estimate, ``opscope.record.rundir.EST_TRACE_BYTES_PER_STEP``).
EST_TRACE_BYTES_PER_STEP: Final = 32 * 1024 * 1024
#: A clock below this fraction of the highest sampled clock is a frequency drop (thermal or power
#: capping). 0.9: DVFS steps on Ascend 910 are ~100 MHz of ~1800 MHz, so one step down is ~5 %.
FREQ_DROP_RATIO: Final = 0.9

#: Largest world size taken at face value (the largest jobs run ~10^5 ranks); beyond it the
#: header is garbage, and listing the missing ranks would exhaust memory.
MAX_WORLD_SIZE: Final = 1 << 20

#: Runtime / driver calls that launch device work (CUDA, HIP, Ascend task launches).
_LAUNCH_RE: Final = r"(?i)(launch|memcpy|memset)"
# the columns through which the linker routes device work to what issued it
_ROUTES: Final = ("launch_id", "op_id")


@dataclass(frozen=True)
class Check:
    """One question about the profile and its answer."""

    id: str
    status: Status
    title: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    action: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (evidence values are JSON data)."""
        return {
            "id": self.id,
            "status": self.status,
            "title": self.title,
            "evidence": dict(self.evidence),
            "action": self.action,
        }


@dataclass(frozen=True)
class Diagnosis:
    """Every check run on one profile, in a stable order (by group, then as run)."""

    source: str | None
    checks: tuple[Check, ...]

    @property
    def status(self) -> Status:
        """The worst status of any check (``ok`` when none ran)."""
        worst: Status = "ok"
        for c in self.checks:
            if _RANK[c.status] > _RANK[worst]:
                worst = c.status
        return worst

    @property
    def problems(self) -> list[Check]:
        """Checks that are not ok, errors first."""
        bad = [c for c in self.checks if c.status != "ok"]
        return sorted(bad, key=lambda c: -_RANK[c.status])

    def to_json(self) -> dict[str, Any]:
        """``{"source", "status", "checks": [...]}``."""
        return {
            "source": self.source,
            "status": self.status,
            "checks": [c.to_json() for c in self.checks],
        }


# -- known version combinations -------------------------------------------------------------------

#: torch / torch_npu / CANN versions known to lose stacks, shapes or memory. Only entries with a
#: public source; ``lo``/``hi`` are inclusive ``major.minor`` bounds of the package version.
KNOWN_VERSION_ISSUES: Final[tuple[Mapping[str, Any], ...]] = (
    {
        "package": "torch",
        "lo": (2, 0),
        "hi": (2, 2),
        "loses": "stacks",
        "what": "profiler.export_stacks() writes no stacks unless verbose experimental_config "
        "is set (the Chrome trace's python_function events are not affected)",
        "fix": "profile(..., experimental_config=torch._C._profiler._ExperimentalConfig("
        "verbose=True))",
        "source": "pytorch/pytorch#100253 (reported on 2.0.1, 2.1.0, 2.2.0)",
    },
)


def _version_tuple(v: object) -> tuple[int, int] | None:
    if not isinstance(v, str):
        return None
    parts = v.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def known_issues(versions: Mapping[str, Any], loses: str) -> list[Mapping[str, Any]]:
    """Entries of :data:`KNOWN_VERSION_ISSUES` matching ``versions`` that lose ``loses``."""
    out = []
    for issue in KNOWN_VERSION_ISSUES:
        v = _version_tuple(versions.get(str(issue["package"])))
        if v is not None and issue["loses"] == loses and issue["lo"] <= v <= issue["hi"]:
            out.append(issue)
    return out


# -- helpers --------------------------------------------------------------------------------------


def _headers(profile: Profile) -> dict[int, dict[str, Any]]:
    """Each rank's top-level trace metadata. Multi-rank readers nest ``{rank: {rank: header}}``;
    both shapes are accepted."""
    out: dict[int, dict[str, Any]] = {}
    tm = profile.meta.get("trace_meta") or {}
    if not isinstance(tm, Mapping):
        return out
    for k, raw in tm.items():
        v = raw
        if isinstance(raw, Mapping) and len(raw) == 1:
            ((ik, iv),) = raw.items()
            if str(ik).lstrip("-").isdigit() and (iv is None or isinstance(iv, Mapping)):
                v = iv
        if isinstance(v, Mapping) and str(k).lstrip("-").isdigit():
            out[int(k)] = dict(v)
    return out


def _run(profile: Profile) -> dict[str, Any]:
    run = profile.meta.get("run")
    return dict(run) if isinstance(run, Mapping) else {}


def _option(header: Mapping[str, Any], name: str) -> bool | None:
    """A profiler option as the trace records it: True / False, None when it says nothing."""
    if name in header:
        v = header[name]
        return bool(v) if isinstance(v, bool | int | float) else None
    info = header.get("profiler_info")
    if isinstance(info, Mapping):
        common = (info.get("config") or {}).get("common_config") or {}
        if isinstance(common, Mapping) and name in common:
            return bool(common[name])
    return None


@per_profile  # three checks ask: once per profile (its queries were a fixed cost per check)
def _step_times(profile: Profile) -> dict[int, list[tuple[int, int]]]:
    """``{rank: [(step, dur_ns), ...]}`` in step order, steps with a duration only (shared by
    the checks that read it: not to be changed by them)."""
    steps = profile.steps
    # the few step rows in Python (the filter and sort were a query of fixed cost): in (rank,
    # step) order, a null rank first as the query's sort put it; rows with the same (rank, step)
    # in table order (the stable sort's; the query's sort left their order open)
    cols = (steps.get_column(c).to_list() for c in ("rank", "step", "dur_ns"))
    rows = [(r, s, d) for r, s, d in zip(*cols, strict=True) if s is not None and d is not None]
    rows.sort(key=lambda x: (x[0] is not None, x[0] or 0, x[1]))
    out: dict[int, list[tuple[int, int]]] = {}
    for rank, step, dur in rows:
        out.setdefault(int(rank if rank is not None else 0), []).append((int(step), int(dur)))
    return out


def _cv(values: Sequence[float]) -> float:
    n = len(values)
    mean = sum(values) / n
    if mean <= 0:
        return 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return math.sqrt(var) / mean


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return float(s[n // 2]) if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


# -- incomplete data ------------------------------------------------------------------------------


def check_truncated(profile: Profile) -> list[Check]:
    """A salvaged (truncated) trace: events after the cut are missing."""
    salv = profile.meta.get("salvaged")
    if not salv:
        return [Check("incomplete.truncated", "ok", "trace is complete (not truncated)")]
    ev = dict(salv) if isinstance(salv, Mapping) else {"salvaged": salv}
    return [
        Check(
            "incomplete.truncated",
            "error",
            "trace was truncated; only the events before the cut were recovered",
            ev,
            "Re-record and let the profiler finish writing (do not kill the process during "
            "export; check free disk). Totals from this trace undercount the missing tail.",
        )
    ]


def check_requested_steps(profile: Profile) -> list[Check]:
    """Fewer profiled steps than the run asked for (run.json) or than the trace holds."""
    run = _run(profile)
    settings = run.get("profiler") or {}
    if not run or not isinstance(settings, Mapping) or settings.get("every") is not None:
        return []
    if settings.get("every_epochs") is not None:
        return []
    try:
        requested = int(settings.get("active", 0)) * max(int(settings.get("repeat", 1)), 1)
    except (TypeError, ValueError):
        return []
    if requested <= 0:
        return []
    steps_info = run.get("steps") or {}
    profiled = steps_info.get("profiled") if isinstance(steps_info, Mapping) else None
    n_profiled = len(profiled) if isinstance(profiled, list) else None
    per_rank = profile.steps.group_by("rank").len().sort("rank")
    in_trace = {int(r): int(n) for r, n in per_rank.iter_rows()}
    got = min(in_trace.values()) if in_trace else 0
    evidence: dict[str, Any] = {
        "requested_active_steps": requested,
        "profiled_steps_in_run_json": n_profiled,
        "steps_in_trace_per_rank": {str(k): v for k, v in in_trace.items()},
        "run_status": run.get("status"),
    }
    short = got < requested or (n_profiled is not None and n_profiled < requested)
    if not short and run.get("status") in (None, "completed"):
        return [
            Check(
                "incomplete.steps", "ok", f"all {requested} requested steps were profiled", evidence
            )
        ]
    total = steps_info.get("total") if isinstance(steps_info, Mapping) else None
    return [
        Check(
            "incomplete.steps",
            "warning",
            f"fewer steps than requested: {got} in the trace, {requested} requested",
            {**evidence, "steps_run": total},
            "Run at least skip_first + wait + warmup + active x repeat steps (the script ended "
            "early or failed: see run.json status/exit_code), or lower --active/--repeat.",
        )
    ]


def check_last_step(profile: Profile) -> list[Check]:
    """The trace stops before the last step's device work (kernels missing after the cut)."""
    if not profile.has_device or profile.steps.is_empty():
        return []
    step_times = _step_times(profile)
    # the kernels per step of each rank as dicts (a filter per rank was a query each); none
    # asked when no rank has an earlier step to compare its last with (a one-step trace)
    per_rank: dict[Any, dict[Any, int]] = {}
    if any(len(steps) >= 2 for steps in step_times.values()):
        per_rank = _kernels_per_step(profile.kernels)
    out: list[Check] = []
    cut: dict[str, Any] = {}
    for rank, steps in step_times.items():
        nums = [s for s, _ in steps]
        if len(nums) < 2:
            continue
        counts = per_rank.get(rank, {})
        last = nums[-1]
        earlier = [int(counts.get(s, 0)) for s in nums[:-1]]
        median_prev = _median([float(x) for x in earlier])
        if median_prev > 0 and counts.get(last, 0) < 0.5 * median_prev:
            cut[str(rank)] = {
                "last_step": last,
                "device_ops_in_last_step": int(counts.get(last, 0)),
                "median_device_ops_in_earlier_steps": median_prev,
            }
    if cut:
        out.append(
            Check(
                "incomplete.last_step",
                "warning",
                "trace stops before the last step's device work",
                {"ranks": cut},
                "Drop the last step from comparisons, or record one more active step so the "
                "profiler flushes the device activity of the step you care about.",
            )
        )
    elif profile.steps.height >= 2:
        out.append(Check("incomplete.last_step", "ok", "last step has its device work"))
    return out


def _kernels_per_step(kernels: pl.DataFrame) -> dict[int | None, dict[int, int]]:
    """``{rank: {step: kernels}}`` of the device work with a step, a null rank a key of its
    own (None)."""
    from opscope.analysis.tree import int_values

    # counted in NumPy (the filter and group-by were a query of fixed cost), each (known rank,
    # rank, step) as one integer from the codes of the distinct ranks and steps (a unique over
    # the stacked columns sorted them as structured rows: ~0.6 ms on 2.4k kernels)
    rank, known = int_values(kernels.get_column("rank"))
    step, stepped = int_values(kernels.get_column("step"))
    ranks, rank_code = np.unique(rank[stepped], return_inverse=True)
    steps, step_code = np.unique(step[stepped], return_inverse=True)
    key = (known[stepped] * len(ranks) + rank_code) * len(steps) + step_code
    keys, n_per = np.unique(key, return_counts=True)
    rank_key, step_at = np.divmod(keys, len(steps))
    has_rank, rank_at = np.divmod(rank_key, len(ranks))
    out: dict[int | None, dict[int, int]] = {}
    columns = (has_rank, ranks[rank_at], steps[step_at], n_per)
    for has, r, step_no, n in zip(*(c.tolist() for c in columns), strict=True):
        out.setdefault(r if has else None, {})[step_no] = n
    return out


def check_launch_links(profile: Profile) -> list[Check]:
    """Kernel launches whose device activity is missing, and flows that bound to nothing."""
    if not profile.has_device:
        return []
    ev = profile.events
    # the launches as an array mask over the events, then Series filters: not DataFrame
    # filters over every event column (a fixed cost of ~0.15 ms a query, and a copy of every
    # column of the matching rows), nor comparisons of the kind column (a query each); the
    # names' regex once per distinct name on a large trace (the rules' name codes), else on
    # the runtime calls' names only (false for a missing name, which a filter drops)
    runtime = kind_mask(profile, "runtime", "driver")
    if not runtime.any():  # no runtime call: no launch (a device-only export)
        at = runtime
    elif ev.height >= NAME_INDEX_MIN_ROWS:
        at = runtime & name_mask(profile, "events", pattern=_LAUNCH_RE)
    else:
        hit = ev.get_column("name").filter(pl.Series(runtime)).str.contains(_LAUNCH_RE)
        at = runtime.copy()
        at[runtime] = (hit.fill_null(False) if hit.null_count() else hit).to_numpy()
    launch = pl.Series(at) if runtime.any() else None
    ids = None if launch is None else ev.get_column("id").filter(launch)
    n_l = 0 if ids is None else ids.len()
    if ids is not None and n_l:
        # in NumPy: a missing launch id reads NaN, equal to no id (ids are row numbers, far
        # below 2**53: exact as floats)
        lid = profile.kernels.get_column("launch_id").to_numpy()
        unlinked = pl.Series(~np.isin(ids.to_numpy(), lid))
        n_u = int(unlinked.sum())
    else:  # no launch, none unlinked (three queries fewer: an Ascend kernel export)
        n_u = 0
    odd = dict(profile.meta.get("oddities") or {})
    unbound = int(odd.get("flow not bound to events", 0))
    evidence: dict[str, Any] = {
        "launches": n_l,
        "launches_without_device_activity": n_u,
        "kernels": profile.kernels.height,
        "kernels_without_launch": profile.kernels.get_column("launch_id").null_count(),
        "flows_not_bound": unbound,
    }
    if n_u and launch is not None:
        unl = ev.get_column("name").filter(launch).filter(unlinked).to_frame("name")
        top = unl.group_by("name").len().sort(["len", "name"], descending=[True, False]).head(5)
        evidence["unlinked_by_name"] = {str(n): int(c) for n, c in top.iter_rows()}
    frac = n_u / n_l if n_l else 0.0
    evidence["fraction"] = round(frac, 4)
    if n_l and frac > UNLINKED_LAUNCH_WARN:
        return [
            Check(
                "incomplete.kernels",
                "warning",
                f"{n_u} of {n_l} launches ({frac:.0%}) have no device activity in the trace",
                evidence,
                "Device activity records were lost or not enabled: record with the device "
                "activity on (activities=[CPU, CUDA] / ProfilerActivity.NPU), fewer active steps "
                "per trace so the activity buffer does not overflow. Device time is undercounted.",
            )
        ]
    return [Check("incomplete.kernels", "ok", "launches have their device activity", evidence)]


def check_kernel_origins(profile: Profile) -> list[Check]:
    """Device work with no launching call: the correlation ids / ac2g flows are missing, so
    kernels cannot be charged to the operators and source lines that issued them."""
    k = profile.kernels
    if k.is_empty():
        return []
    from opscope.ingest.link import queued_before_profiling

    no_launch = k.get_column("launch_id").null_count()  # (kept by the column: no query)
    ev_all = profile.events
    routed = ev_all.height * 2 - sum(ev_all.get_column(c).null_count() for c in _ROUTES)
    early = 0
    if no_launch and routed:
        # the warm-up step's kernels on a device that lags the host: no launch to expect (the
        # linker's one rule; they hold no step). Only work without a launch can be one, and
        # only before the first work with one (a launch or an op): a profile whose kernels all
        # have their launch, or where no row has either, skips the linker's queries.
        # on_device's rule through the profile's kind codes (once a profile, where on_device
        # reads the kind column again), and the ids in NumPy (ids are never null): no query
        placed = ~np.isnan(ev_all.get_column("device").to_numpy())  # (a null reads NaN)
        is_dev = kind_mask(profile, *DEVICE_KINDS) | placed
        ids = ev_all.get_column("id").to_numpy()
        queued = ids[queued_before_profiling(ev_all, is_dev)]
        early = int(np.isin(k.get_column("id").to_numpy(), queued).sum())
    orphans = no_launch - early
    frac = orphans / k.height
    ev = {
        "kernels": k.height,
        "kernels_without_launch": orphans,
        "queued_before_profiling": early,
        "fraction": round(frac, 4),
        "ac2g_flows": (
            int((profile.flows.get_column("kind") == "ac2g").sum()) if profile.flows.height else 0
        ),
    }
    if early:
        notes = [
            Check(
                "queued.before.profiling",
                "ok",
                f"{early} kernels ran before the first profiled kernel with no launch in the "
                "trace: work queued before profiling began (the warm-up step), left out of steps",
                ev,
                "Nothing to do: the device ran behind the host when the profiler's active window "
                "opened. They count in device-wide kernel totals, in no step.",
            )
        ]
    else:
        notes = []
    if frac > UNLINKED_LAUNCH_WARN:
        return [
            *notes,
            Check(
                "incomplete.flows",
                "warning",
                f"{orphans} of {k.height} kernels ({frac:.0%}) have no launching call",
                ev,
                "Record host and device together (activities=[CPU, CUDA] or [CPU, NPU]); on "
                "Ascend keep trace_view.json (export_type text). Unlinked kernels count in device "
                "totals but not in per-operator or per-line attribution.",
            ),
        ]
    return [*notes, Check("incomplete.flows", "ok", "kernels are linked to their launches", ev)]


def check_ranks(profile: Profile) -> list[Check]:
    """Ranks missing from a multi-rank run (world size from distributedInfo or run.json)."""
    present = sorted(set(profile.ranks))
    world: int | None = None
    src = None
    for h in _headers(profile).values():
        w = header_world_size(h)
        if w is not None:
            world = max(world or 0, w)
            src = "distributedInfo.world_size"
    rw = _run(profile).get("world_size")
    if isinstance(rw, int) and rw > (world or 0):
        world, src = rw, "run.json world_size"
    if world is None and len(present) <= 1:
        return []
    if world is not None and not 0 < world <= MAX_WORLD_SIZE:
        world = None  # garbage in the header: judge by gaps in the ranks present only
        if len(present) <= 1:
            return []
    expected = set(range(world)) if world else set(range(min(present), max(present) + 1))
    missing = sorted(expected - set(present))
    evidence: dict[str, Any] = {
        "world_size": world,
        "world_size_from": src,
        "ranks_present": present,
        "ranks_missing": len(missing),
        "first_missing": missing[:16],
    }
    sources = profile.meta.get("sources") or []
    if missing and world and len(present) == 1 and len(sources) == 1:
        # One rank's own trace opened on its own: most likely on purpose; say how to get the rest.
        return [
            Check(
                "incomplete.ranks",
                "ok",
                f"rank {present[0]} of {world}; open the directory for all ranks",
                evidence,
                "Load the folder holding every rank's trace to see stragglers and imbalance.",
            )
        ]
    if missing:
        return [
            Check(
                "incomplete.ranks",
                "error",
                f"{len(missing)} of {world or len(expected)} ranks are missing",
                evidence,
                "Load the folder holding every rank's trace (rank{R}/ or *rank-R* files). "
                "Straggler and imbalance analyses only see the ranks present.",
            )
        ]
    return [Check("incomplete.ranks", "ok", f"all {len(present)} ranks present", evidence)]


def check_disk(profile: Profile) -> list[Check]:
    """Free disk at record time (run.json ``disk_free_bytes``)."""
    run = _run(profile)
    free = run.get("disk_free_bytes")
    if not isinstance(free, int):
        return []
    settings = run.get("profiler") or {}
    active = 1
    if isinstance(settings, Mapping):
        try:
            active = max(int(settings.get("active", 1)) * max(int(settings.get("repeat", 1)), 1), 1)
        except (TypeError, ValueError):
            active = 1
    need = active * EST_TRACE_BYTES_PER_STEP
    evidence = {"disk_free_bytes": free, "estimated_trace_bytes": need, "low_mark": DISK_LOW_BYTES}
    if free < max(DISK_LOW_BYTES, 2 * need):
        return [
            Check(
                "incomplete.disk",
                "warning",
                f"disk was nearly full when recording ({free / 2**30:.2f} GiB free)",
                evidence,
                "Free space or record to another disk (opscope record --out DIR); a full disk "
                "truncates traces and drops samples.",
            )
        ]
    return [Check("incomplete.disk", "ok", f"{free / 2**30:.1f} GiB free at record time", evidence)]


# -- missing stacks / shapes / memory -------------------------------------------------------------

_OPTIONS: Final = (
    # (check id, option, what it captures, "loses" key of KNOWN_VERSION_ISSUES)
    ("missing.stacks", "with_stack", "call stacks (source lines)", "stacks"),
    ("missing.shapes", "record_shapes", "input shapes", "shapes"),
    ("missing.memory", "profile_memory", "memory events", "memory"),
)


def _data_counts(profile: Profile) -> dict[str, int]:
    ops = profile.ops  # cached for the analyses and rules: not a second filter of the events
    dims = ops.get_column("input_dims")
    # (no comparison of an op table without shapes: each is a query of fixed cost)
    # (a null compares to null, which the sum leaves out: is_not_null was a query)
    shapes = int((dims != "[]").sum()) if present(dims) else 0
    return {
        # the kinds counted once a profile, not compared row by row here
        "with_stack": kind_counts(profile).get("python_function", 0) + profile.stacks.height,
        "record_shapes": shapes,
        "profile_memory": profile.memory.height,
        "_ops": ops.height,
    }


def check_options(profile: Profile) -> list[Check]:
    """Which of with_stack / record_shapes / profile_memory was off, and how to turn it on."""
    counts = _data_counts(profile)
    if counts["_ops"] == 0 and profile.events.is_empty():
        return []
    headers = _headers(profile)
    run = _run(profile)
    settings = run.get("profiler") if isinstance(run.get("profiler"), Mapping) else {}
    versions = run.get("versions") if isinstance(run.get("versions"), Mapping) else {}
    vendor = "ascend" if profile.meta.get("format") == "ascend" else "torch"
    out: list[Check] = []
    for cid, opt, what, loses in _OPTIONS:
        flags = {str(r): _option(h, opt) for r, h in headers.items()}
        if isinstance(settings, Mapping) and opt in settings:
            flags["run.json"] = bool(settings[opt])
        n = counts[opt]
        evidence: dict[str, Any] = {"option": opt, "recorded_flag": flags, "rows": n}
        issues = known_issues(versions or {}, loses)
        if issues:
            evidence["known_version_issues"] = [dict(i) for i in issues]
        if n > 0:
            out.append(Check(cid, "ok", f"{what} present ({n} rows)", evidence))
            continue
        on = [k for k, v in flags.items() if v]
        if on:
            title = f"no {what} although {opt} was on"
            action = (
                f"{opt}=True was set but nothing was recorded: check the known version issues "
                "in the evidence; on Ascend also check the profiler level and that parsing "
                "finished."
            )
        else:
            said = "off" if any(v is False for v in flags.values()) else "not set"
            title = f"no {what}: {opt} was {said}"
            api = "torch_npu.profiler.profile" if vendor == "ascend" else "torch.profiler.profile"
            action = f"{api}(..., {opt}=True) (opscope record turns it on by default)"
        out.append(Check(cid, "warning", title, evidence, action))
    return out


# -- unstable data --------------------------------------------------------------------------------


def check_step_spread(profile: Profile) -> list[Check]:
    """Step-time coefficient of variation, and spread of the mean across repeat cycles."""
    out: list[Check] = []
    per_rank: dict[str, Any] = {}
    worst = 0.0
    repeats: dict[str, Any] = {}
    worst_rep = 0.0
    for rank, steps in _step_times(profile).items():
        durs = [float(d) for _, d in steps]
        if len(durs) >= 2 and durs[0] > WARMUP_RATIO * _median(durs[1:]):
            durs = durs[1:]  # warm-up is reported by its own check; do not count it twice
        if len(durs) >= MIN_STEPS_FOR_STATS:
            cv = _cv(durs)
            worst = max(worst, cv)
            per_rank[str(rank)] = {
                "steps": len(durs),
                "cv": round(cv, 4),
                "mean_us": round(sum(durs) / len(durs) / 1e3, 3),
            }
        # Repeat cycles: runs of consecutive step numbers.
        cycles: list[list[float]] = []
        prev = None
        for s, d in steps:
            if prev is None or s != prev + 1:
                cycles.append([])
            cycles[-1].append(float(d))
            prev = s
        if len(cycles) >= 2:
            means = [sum(c) / len(c) for c in cycles]
            spread = max(means) / min(means) - 1 if min(means) > 0 else 0.0
            worst_rep = max(worst_rep, spread)
            repeats[str(rank)] = {
                "cycles": len(cycles),
                "mean_us": [round(m / 1e3, 3) for m in means],
                "spread": round(spread, 4),
            }
    if per_rank:
        ev = {"per_rank": per_rank, "threshold_cv": STEP_CV_WARN}
        if worst > STEP_CV_WARN:
            out.append(
                Check(
                    "unstable.steps",
                    "warning",
                    f"step times vary by {worst:.0%} (coefficient of variation)",
                    ev,
                    "Profile more steps (--active), close other work on the machine, "
                    "fix clocks/power mode, and compare medians rather than one step.",
                )
            )
        else:
            out.append(Check("unstable.steps", "ok", f"step times stable (CV {worst:.1%})", ev))
    if repeats:
        ev = {"per_rank": repeats, "threshold": REPEAT_SPREAD_WARN}
        if worst_rep > REPEAT_SPREAD_WARN:
            out.append(
                Check(
                    "unstable.repeats",
                    "warning",
                    f"repeat cycles differ by {worst_rep:.0%} in mean step time",
                    ev,
                    "Conditions changed between repeats (data loading, other jobs, "
                    "clocks): compare one cycle with itself or record more repeats.",
                )
            )
        else:
            out.append(
                Check("unstable.repeats", "ok", f"repeat cycles agree within {worst_rep:.1%}", ev)
            )
    return out


def check_warmup(profile: Profile) -> list[Check]:
    """First step much slower than the median of the rest: warm-up left in the profile."""
    slow: dict[str, Any] = {}
    seen = False
    for rank, steps in _step_times(profile).items():
        if len(steps) < MIN_STEPS_FOR_STATS:
            continue
        seen = True
        first_step, first = steps[0]
        med = _median([float(d) for _, d in steps[1:]])
        if med > 0 and first > WARMUP_RATIO * med:
            slow[str(rank)] = {
                "step": first_step,
                "first_us": round(first / 1e3, 3),
                "median_others_us": round(med / 1e3, 3),
                "ratio": round(first / med, 3),
            }
    if slow:
        return [
            Check(
                "unstable.warmup",
                "warning",
                "first profiled step is warm-up (much slower than the rest)",
                {"ranks": slow, "ratio_threshold": WARMUP_RATIO},
                "Leave warm-up out: schedule(wait=1, warmup=1+, ...) or skip_first=N "
                "(opscope record --warmup N / --skip-first N); analyses over all steps "
                "overstate one-time costs.",
            )
        ]
    if seen:
        return [Check("unstable.warmup", "ok", "no warm-up step left in")]
    return []


def check_overhead(profile: Profile) -> list[Check]:
    """Profiler overhead: profiled vs unprofiled step wall times from metrics.jsonl."""
    if profile.metrics.is_empty():
        return []  # no metrics.jsonl (a bare trace): nothing to filter
    m = profile.metrics.filter(pl.col("wall_ns").is_not_null() & (pl.col("wall_ns") > 0))
    if m.is_empty():
        return []
    # The first step of every rank is warm-up in any run; it would inflate the unprofiled side.
    first = m.group_by("rank").agg(pl.col("step").min().alias("_first"))
    m = m.join(first, on="rank", how="left").filter(pl.col("step") != pl.col("_first"))
    prof = [float(x) for x in m.filter(pl.col("profiled")).get_column("wall_ns").to_list()]
    plain = [float(x) for x in m.filter(~pl.col("profiled")).get_column("wall_ns").to_list()]
    if not prof or not plain:
        return []
    mp, mu = _median(prof), _median(plain)
    overhead = mp / mu - 1 if mu > 0 else 0.0
    ev = {
        "profiled_steps": len(prof),
        "unprofiled_steps": len(plain),
        "median_profiled_us": round(mp / 1e3, 3),
        "median_unprofiled_us": round(mu / 1e3, 3),
        "overhead": round(overhead, 4),
        "threshold": OVERHEAD_WARN,
    }
    if overhead > OVERHEAD_WARN:
        return [
            Check(
                "unstable.overhead",
                "warning",
                f"profiler overhead ~{overhead:.0%}: profiled steps are slower",
                ev,
                "Host-side times are inflated; turn off what you do not need "
                "(with_stack, profile_memory, record_shapes) for timing runs, and trust "
                "the unprofiled metrics for end-to-end step time.",
            )
        ]
    return [Check("unstable.overhead", "ok", f"profiler overhead ~{overhead:.0%}", ev)]


def check_processes(profile: Profile) -> list[Check]:
    """Other processes on the device at record time (run.json ``device_processes``)."""
    dp = _run(profile).get("device_processes")
    if not isinstance(dp, Mapping):
        return []
    procs = dp.get("processes")
    if not isinstance(procs, list):
        return []
    if procs:
        return [
            Check(
                "unstable.processes",
                "warning",
                f"{len(procs)} other process(es) on the device while recording",
                {"processes": procs[:16], "reason": dp.get("reason")},
                "Record on an idle device: other processes share compute and memory "
                "bandwidth, so kernel times are not representative.",
            )
        ]
    if dp.get("reason"):
        return []  # the tool to ask was missing: nothing known
    return [Check("unstable.processes", "ok", "no other processes on the device")]


def check_clock(profile: Profile) -> list[Check]:
    """Clock-frequency drops (Ascend ``AI Core Freq`` counter)."""
    if profile.counters.is_empty():
        return []  # no counter at all: nothing to filter
    c = profile.counters.filter(pl.col("name").str.contains(r"(?i)\bfreq"))
    if c.is_empty():
        return []
    g = (
        c.group_by("rank", "name")
        .agg(
            pl.col("value").min().alias("min"),
            pl.col("value").max().alias("max"),
            pl.len().alias("samples"),
        )
        .sort("rank", "name")
    )
    drops = {}
    allv = {}
    for rank, name, lo, hi, n in g.iter_rows():
        allv[f"{rank}/{name}"] = {"min": lo, "max": hi, "samples": n}
        if hi and lo is not None and lo < FREQ_DROP_RATIO * hi:
            drops[f"{rank}/{name}"] = {"min": lo, "max": hi, "samples": n}
    if drops:
        return [
            Check(
                "unstable.clock",
                "warning",
                "device clock dropped while recording",
                {"counters": drops, "ratio_threshold": FREQ_DROP_RATIO},
                "Thermal or power capping slowed the device: check cooling and power "
                "mode (npu-smi info), and compare runs at the same clock.",
            )
        ]
    return [Check("unstable.clock", "ok", "device clock steady", {"counters": allv})]


# -- secrets --------------------------------------------------------------------------------------


def check_secrets(profile: Profile) -> list[Check]:
    """The trace file carries secret-looking variables (hidden by opscope, still in the file)."""
    tm = profile.meta.get("trace_meta") or {}
    names = secret_names(tm)
    if not names:
        return []
    return [
        Check(
            "data.secrets",
            "warning",
            f"trace metadata holds {len(names)} secret-looking variable(s)",
            {"names": names[:32], "shown_as": REDACTED},
            "opscope hides their values in every output; the trace file itself still "
            "holds them: scrub or rotate before sharing it.",
        )
    ]


# -- entry points ---------------------------------------------------------------------------------

CHECKS: Final[tuple[Callable[[Profile], list[Check]], ...]] = (
    check_truncated,
    check_requested_steps,
    check_last_step,
    check_launch_links,
    check_kernel_origins,
    check_ranks,
    check_disk,
    check_options,
    check_step_spread,
    check_warmup,
    check_overhead,
    check_processes,
    check_clock,
    check_secrets,
)


def diagnose(
    profile_or_path: Profile | str | os.PathLike[str], *, salvage: bool = True
) -> Diagnosis:
    """Run every check on a Profile, or on the profile at a path (loaded with ``salvage`` so that
    a truncated trace is diagnosed rather than refused).

    Raises :class:`~opscope.errors.InputError` when the path cannot be read at all.
    """
    if isinstance(profile_or_path, Profile):
        profile = profile_or_path
        sources = profile.meta.get("sources") or []
        source = str(sources[0]) if len(sources) == 1 else None
    else:
        from opscope.errors import CorruptArchiveError, TruncatedTraceError
        from opscope.ingest import load

        source = os.fspath(profile_or_path)
        try:  # a strict load first: it shares the cache entry of ``opscope load``
            profile = load(Path(source))
        except (TruncatedTraceError, CorruptArchiveError):  # a cut .gz is a CorruptArchiveError
            if not salvage:
                raise
            profile = load(Path(source), salvage=True)
    checks: list[Check] = []
    for fn in CHECKS:
        checks.extend(fn(profile))
    return Diagnosis(source=source, checks=tuple(checks))


def doctor_warnings(profile: Profile) -> list[str]:
    """One line per failing check (errors first), for the top of ``opscope report``."""
    return [f"{c.status}: {c.title} [{c.id}]" for c in diagnose(profile).problems]
