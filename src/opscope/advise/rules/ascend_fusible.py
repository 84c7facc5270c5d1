"""Ascend fusible kernel sequences: the same short run of memory-bound kernels, again and again.

msprof-analyze's advisor has a "fusible operator" check (read for what it tests, not copied):
over ``kernel_details.csv`` in order, every run of 2 to 10 kernels (its rule file's
``min_length``/``max_length``) keyed by name and shapes; a run that occurs more than 5 times
(``sequence_count_threshold``) is reported when its memory-transfer (MTE) time is above 80% of
its AI-core time (``mte_threshold``: MTE-bound) or its kernels fill under 40% of its wall time
(``host_threshold``: host-bound), and it takes over 1% of the step
(``sequence_duration_threshold``). Its MTE time is max(aic_mte2, aiv_mte2) + max(aic_fixpipe,
aiv_mte3). It gives no saving.

opscope's rule takes both halves. MTE-bound: runs of ``MIN_LEN``..``MAX_LEN`` kernels keyed by
op type and input shapes, with no kernel (type and shapes) twice in a run (a repeat marks the
next turn of the loop the run sits in), occurring more than ``MIN_COUNT`` times, whose MTE time
is over ``MTE_SHARE`` of their AI-core + AI-vector time; unlike msprof-analyze, every kernel of
a run must itself be MTE-bound and use no cube time (``aic_mac_time``): a matmul or attention
kernel keeps its MTE pipes busy while it computes (mac and mte2 ratios both ~0.8 on real 910B
GEMMs), it is compute and stays a kernel of its own. The MTE time adds the read and write
pipes, which overlap, so the share can pass 100%. It needs the PMU columns of a Level1/Level2
profile (``aic_metrics=PipeUtilization``, the default). Runs are taken largest saving first,
each kernel in one run at most; kernels of ops another fusion rule already claims
(``ascend-affinity-api`` matches, materialised attention spans) are left out.

Host-bound (msprof-analyze's ``host_threshold``): runs of vector kernels (no cube time, not
AICPU, no PMU columns needed) occurring more than ``MIN_COUNT`` times whose kernels are busy
under ``HOST_SHARE`` of the run's wall time (first kernel's start to last kernel's end): the
device waits for the host to launch each kernel. Saving: that idle inside the runs (wall time
less kernel time), which one launch for the run does not have, method ``device-idle``; the
same idle is ``overhead-device-idle``'s and ``overhead-launch-bound``'s, which count what is
left (``evidence.part_of``, :mod:`opscope.advise.overlap`).

Saving of an MTE-bound run, with device peaks: the run's kernel time minus the bound of one
fused kernel that reads the run's external inputs and writes its last output (an input of a
kernel that has the shape of the previous kernel's output is taken as that output, read again:
internal), at the memory bandwidth, plus one launch floor; never above the run's kernel time.
Without peaks: all but the costliest kernel of each run. A run counts from ``MIN_STEP_PCT`` of
the step."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

import numpy as np
import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.advise.rules.ascend_groups import op_groups
from opscope.advise.rules.ascend_optimizer import npu_fix
from opscope.analysis import tree
from opscope.model import Profile

# msprof-analyze's fusible-operator rule file: runs of 2 to 10 kernels, more than 5 times.
MIN_LEN: Final = 2
MAX_LEN: Final = 10
MIN_COUNT: Final = 5
# The same file's MTE-bound threshold: MTE time over 80% of the kernels' core time.
MTE_SHARE: Final = 0.8
# A run counts when its saving is at least this share of the step (opscope's heuristic, as
# ascend-affinity-api: below it the bound's own error decides).
MIN_STEP_PCT: Final = 0.5
# The same file's host-bound threshold: the run's kernels busy under 40% of its wall time
# (first kernel's start to last kernel's end): the device waits for the host between them.
HOST_SHARE: Final = 0.4
# Kernels whose output size depends on the data: the host reads it back before the next op can
# be issued, so the idle around them is a sync, which fusing the run does not remove.
DATA_DEPENDENT: Final = frozenset(
    {"NonZero", "MaskedSelect", "Unique", "UniqueV2", "UniqueWithCountsAndSorting"}
)
# At most this many device rows are checked for a repeated kernel in Python before the plan
# (a cheap test on small exports; on large ones the plan's own cost dwarfs the check's saving).
REPEATS_CHECK_MAX: Final = 4096
_MTE_IN = ("aic_mte2_time(us)", "aiv_mte2_time(us)")
_MTE_OUT = ("aic_fixpipe_time(us)", "aiv_mte3_time(us)")
_BUSY = ("aicore_time(us)", "aiv_time(us)")
_CUBE = "aic_mac_time(us)"  # time on the cube (matrix) unit: a compute kernel


def _pmu(profile: Profile) -> pl.DataFrame | None:
    """``[id, mte_ns, busy_ns, cube_ns]`` per kernel from the PMU columns (None without)."""
    m = profile.kernel_metrics
    want = [*_MTE_IN, *_MTE_OUT, *_BUSY, _CUBE]
    if m.height == 0 or not m.get_column("metric").is_in(list(_BUSY)).any():
        return None
    wide = (
        m.filter(pl.col("metric").is_in(want))
        .pivot(on="metric", index="event_id", values="value", aggregate_function="first")
        .rename({"event_id": "id"})
    )
    missing = [col for col in want if col not in wide.columns]
    if missing:  # one query for all (a with_columns per column was a query each)
        wide = wide.with_columns(pl.lit(0.0).alias(col) for col in missing)
    return wide.select(
        pl.col("id").cast(pl.Int64),
        (
            (
                pl.max_horizontal([pl.col(x).fill_null(0.0) for x in _MTE_IN])
                + pl.max_horizontal([pl.col(x).fill_null(0.0) for x in _MTE_OUT])
            )
            * 1e3
        ).alias("mte_ns"),
        (pl.sum_horizontal([pl.col(x).fill_null(0.0) for x in _BUSY]) * 1e3).alias("busy_ns"),
        (pl.col(_CUBE).fill_null(0.0) * 1e3).alias("cube_ns"),
    )


def _repeats(profile: Profile) -> bool:
    """Whether some compute kernel (by :meth:`AscendFusibleSequence._rank`'s key: op type and
    input shapes) occurs more than ``MIN_COUNT`` times on a rank: every run, of either half,
    starts with such a kernel. Counted in Python over the kernels' columns (for a small table:
    the PMU pivot and the plan were six queries of fixed cost)."""
    k = profile.kernels
    cols = [k.get_column(x).to_list() for x in ("kind", "rank", "op_type", "input_dims")]
    counts = Counter(
        (rank, f"{op_type}|{dims}")
        for kind, rank, op_type, dims in zip(*cols, strict=True)
        if kind == "kernel" and op_type is not None
    )
    return any(n > MIN_COUNT for n in counts.values())


def _nbytes(dims: list[list[int]], types: list[str | None]) -> list[float]:
    out = []
    for i, s in enumerate(dims):
        size = c.DTYPE_BYTES.get((types[i] if i < len(types) else None) or "", 0)
        n = float(size)
        for x in s:
            n *= x
        out.append(n if s else 0.0)
    return out


def _out_shape(args: str | None) -> tuple[list[list[int]], list[str | None]]:
    """The kernel's output shapes and dtypes from its args (``Output Shapes`` text)."""
    import json

    if not args:
        return [], []
    try:
        a = json.loads(args)
    except ValueError:
        return [], []
    dims = c.parse_dims(a.get("Output Shapes")) or []
    types = [c.norm_dtype(t) for t in str(a.get("Output Data Types") or "").split(";")]
    return dims, types


def _fused_bytes(run: list[dict[str, Any]]) -> float | None:
    """External inputs of the run plus its last output (None when shapes are missing)."""
    total = 0.0
    prev_out: list[list[int]] = []
    for j, k in enumerate(run):
        dims = c.parse_dims(k["input_dims"]) or []
        types = c.parse_types(k["input_types"])
        if not dims:
            return None
        sizes = _nbytes(dims, types)
        internal = -1
        if j > 0 and prev_out:
            internal = next((i for i, d in enumerate(dims) if d == prev_out[0]), -1)
        total += sum(s for i, s in enumerate(sizes) if i != internal)
        prev_out, _ = _out_shape(k["args"])
        if not prev_out:
            prev_out = [dims[0]]
    out_dims, out_types = _out_shape(run[-1]["args"])
    if not out_dims:
        return None
    if not any(out_types):
        out_types = c.parse_types(run[-1]["input_types"])[:1] * len(out_dims)
    return total + sum(_nbytes(out_dims, out_types))


def _claimed(profile: Profile, results: Mapping[str, Any], op_ids: pl.Series) -> set[int]:
    """Kernel op ids under ops that ascend-affinity-api matches or attention spans hold."""
    from opscope.advise.rules.ascend_affinity import affinity_op_ids
    from opscope.advise.rules.fusion import attention_spans

    held = set(affinity_op_ids(profile, results))
    held |= {i for r in attention_spans(profile) for i in r["span_ids"]}
    if not held:
        return set()
    anc = c.ancestors(profile, op_ids).filter(pl.col("anc_id").is_in(list(held)))
    return set(anc.get_column("id").to_list())


class AscendFusibleSequence:
    """Runs of memory-bound kernels that repeat: candidates for one fused kernel."""

    id = "ascend-fusible-sequence"
    doc = (
        "A short run of kernels that repeats many times and spends most of its time moving "
        "data (MTE: the AI core's memory-transfer units) writes each intermediate tensor to "
        "HBM and reads it back; one fused kernel (a torch_npu fused op, a custom Ascend C "
        "kernel, or torchair / torch.compile graph fusion) moves only the run's inputs and "
        "output. Like msprof-analyze's fusible-operator check, the rule takes runs of "
        f"{MIN_LEN}-{MAX_LEN} kernels keyed by op type and input shapes that occur more than "
        f"{MIN_COUNT} times, every kernel a vector kernel (no cube time) with its MTE time over "
        f"{MTE_SHARE:.0%} of its core time (the PMU columns of a Level1/Level2 profile). "
        "Saving, with device peaks: the run's time minus the bound of one fused kernel reading "
        "the run's external inputs and writing its last output at the memory bandwidth, never "
        "above the run's time; without peaks, "
        f"all but the costliest kernel. A run counts from {MIN_STEP_PCT}% of the step. "
        "Host-bound runs (msprof-analyze's other half: vector kernels, no PMU columns needed, "
        f"busy under {HOST_SHARE:.0%} of the run's wall time, the device waiting for the host "
        "to launch each) are flagged too; saving: the device idle inside the runs, which one "
        "launch for the run does not have."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        if c.target_of(profile, results) != "ascend" or not profile.has_device:
            return []
        if c.fewer(profile, MIN_LEN * (MIN_COUNT + 1), "kernel"):
            # too few compute kernels for a run repeated more than MIN_COUNT times (the plan
            # below keeps some of them, and returns on fewer than that before its findings)
            return []
        if tree.SHORTCUTS and profile.kernels.height <= REPEATS_CHECK_MAX and not _repeats(profile):
            return []  # no kernel repeats often enough to start a run (the plan finds none)
        pmu = _pmu(profile)
        plan = (  # one query
            profile.kernels.lazy()
            .filter((pl.col("kind") == "kernel") & pl.col("op_type").is_not_null())
            .sort("rank", "ts_ns")
        )
        if pmu is not None:
            plan = plan.join(pmu.lazy(), on="id", how="left")
        else:  # no PMU columns: no MTE-bound runs, the host-bound ones still show
            plan = plan.with_columns(
                *[pl.lit(None, pl.Float64).alias(x) for x in ("mte_ns", "busy_ns", "cube_ns")]
            )
        k = plan.collect(engine="in-memory")
        if k.height < MIN_LEN * (MIN_COUNT + 1):
            return []
        claimed = _claimed(profile, results, k.get_column("op_id").drop_nulls())
        spec = c.perf_model(profile, results).spec
        steps = c.step_info(profile)
        out = []
        # a frame per rank in one pass (iterating a group_by was a query per group)
        for grp in k.partition_by("rank", maintain_order=True):
            out += self._rank(profile, results, steps, spec, grp, claimed)
        return out

    def _rank(
        self,
        profile: Profile,
        results: Mapping[str, Any],
        steps: c.StepInfo,
        spec: Any,
        k: pl.DataFrame,
        claimed: set[int],
    ) -> list[Finding]:
        from opscope.analysis.model import bound_ns

        rows = k.select(
            "id", "op_id", "op_type", "input_dims", "input_types", "args", "dur_ns", "ts_ns",
            pl.col("core_type").fill_null(""),
            pl.col("mte_ns").fill_null(0.0), pl.col("busy_ns").fill_null(0.0),
            pl.col("cube_ns").fill_null(0.0),
        ).to_dicts()  # fmt: skip
        keys = [f"{r['op_type']}|{r['input_dims']}" for r in rows]
        code = {key: i for i, key in enumerate(dict.fromkeys(keys))}
        codes = np.array([code[x] for x in keys], dtype=np.int64)
        # only memory-bound vector kernels make a run (a kernel that uses the cube is a
        # matmul or attention: its MTE pipes overlap its compute, it stays a kernel of its
        # own), and none another fusion rule already claims
        blocked = np.array([r["op_id"] in claimed or not _memory_bound(r) for r in rows])
        n = len(rows)
        cl = codes.tolist()
        runs = _find_runs(cl, blocked)

        def prefix(col: str) -> Any:
            return np.concatenate([[0.0], np.cumsum([float(r[col]) for r in rows])])

        p_mte, p_busy, p_dur = prefix("mte_ns"), prefix("busy_ns"), prefix("dur_ns")
        dur = np.array([float(r["dur_ns"]) for r in rows])
        cands = []
        for key, all_starts in runs.items():
            length = len(key)
            if len(set(key)) < length:
                continue  # a kernel twice in the run: it spans two turns of the loop
            starts = _non_overlapping(all_starts, length)
            if len(starts) <= MIN_COUNT:
                continue
            st = np.asarray(starts)
            mte = float((p_mte[st + length] - p_mte[st]).sum())
            busy = float((p_busy[st + length] - p_busy[st]).sum())
            if busy <= 0 or mte / busy <= MTE_SHARE:
                continue
            exec_ns = float((p_dur[st + length] - p_dur[st]).sum())
            if steps.pct(exec_ns) < MIN_STEP_PCT:
                continue  # the saving is at most the run's time
            nbytes = _fused_bytes(rows[starts[0] : starts[0] + length])
            fused = None
            if spec is not None and nbytes:
                fused = bound_ns(spec, None, nbytes, None, "memory")
            if fused is not None:
                saving = max(exec_ns - fused * len(starts), 0.0)
            else:  # all but the costliest kernel of each occurrence
                costliest = dur[st[:, None] + np.arange(length)].max(axis=1).sum()
                saving = exec_ns - float(costliest)
            cands.append((saving, key, starts, exec_ns, fused, mte / busy))
        # largest saving first; each kernel in one run
        cands.sort(key=lambda x: (-x[0], -len(x[1])))
        taken = np.zeros(n, dtype=bool)
        out = []
        for saving, key, starts, exec_ns, fused, share in cands:
            length = len(key)
            if any(taken[i : i + length].any() for i in starts):
                continue
            if steps.pct(saving) < MIN_STEP_PCT:
                continue
            for i in starts:
                taken[i : i + length] = True
            f = self._finding(profile, steps, rows, key, starts, exec_ns, fused, share, saving)
            # the op groups of the run's host ops (see advise.overlap): an elementwise-bandwidth
            # finding on the same ops is counted once
            groups = _run_groups(profile, results, rows, starts, length)
            out.append(replace(f, evidence={**f.evidence, "op_groups": groups}))
        out += self._host_bound(profile, results, steps, rows, cl, claimed, taken)
        return out

    def _host_bound(
        self,
        profile: Profile,
        results: Mapping[str, Any],
        steps: c.StepInfo,
        rows: list[dict[str, Any]],
        cl: list[int],
        claimed: set[int],
        taken: Any,
    ) -> list[Finding]:
        """msprof-analyze's host-bound half: repeated runs of vector kernels (no cube time, not
        AICPU) busy under ``HOST_SHARE`` of the run's wall time; kernels of MTE-bound runs and
        of ops other fusion rules claim are left out. Saving: the device idle inside the runs
        (wall time minus kernel time), which one launch for the run does not have."""
        blocked = taken | np.array(
            [
                r["op_id"] in claimed or r["cube_ns"] > 0 or "AI_CPU" in str(r["core_type"])
                for r in rows
            ],
            dtype=bool,
        )
        runs = _find_runs(cl, blocked)
        ts = np.array([float(r["ts_ns"]) for r in rows])
        end = ts + np.array([float(r["dur_ns"]) for r in rows])
        p_dur = np.concatenate([[0.0], np.cumsum(end - ts)])
        cands = []
        for key, all_starts in runs.items():
            length = len(key)
            if len(set(key)) < length:
                continue
            starts = _non_overlapping(all_starts, length)
            if len(starts) <= MIN_COUNT:
                continue
            st = np.asarray(starts)
            last = end[st[:, None] + np.arange(length)].max(axis=1)
            wall = float((last - ts[st]).sum())
            busy = float((p_dur[st + length] - p_dur[st]).sum())
            if wall <= 0 or busy / wall >= HOST_SHARE:
                continue
            cands.append((wall - busy, key, starts, wall, busy))
        cands.sort(key=lambda x: (-x[0], -len(x[1])))
        used = np.zeros(len(rows), dtype=bool)
        out = []
        for idle, key, starts, wall, busy in cands:
            length = len(key)
            if any(used[i : i + length].any() for i in starts) or steps.pct(idle) < MIN_STEP_PCT:
                continue
            for i in starts:
                used[i : i + length] = True
            run = rows[starts[0] : starts[0] + length]
            types = [str(r["op_type"]) for r in run]
            anchor = [r["op_id"] for r in run if r["op_id"] is not None][:1] or [run[0]["id"]]
            where = next(iter(c.group_by_location(profile, pl.DataFrame({"id": anchor}))))
            sync = sorted(DATA_DEPENDENT.intersection(types))
            fix = (
                "# the host launches these kernels slower than the device runs them: one op\n"
                "# (a torch_npu fused API, or graph mode, which launches no op per call)\n"
                "import torchair\n"
                "model = torch.compile(model, backend=torchair.get_npu_backend())"
            )
            if sync:
                # the host waits for the data-dependent size: a sync, not launches
                fix = (
                    f"# {', '.join(sync)} has a data-dependent output size: the host reads it "
                    "back (a sync) before the next op\n"
                    "y = torch.where(mask, x, torch.zeros_like(x))  # was: x[mask] / nonzero"
                )
            f: Finding = c.make_finding(
                profile,
                rule=self.id,
                title=f"{' → '.join(types)} runs {len(starts)}×, host-bound (kernels busy "
                f"{busy / wall:.0%} of the run's time): "
                + (f"{sync[0]} syncs with the host" if sync else "launch one op instead"),
                where=where,
                key="host:" + "|".join(f"{r['op_type']}:{r['input_dims']}" for r in run),
                saving_ns=idle,
                saving_how="the device idle inside the runs (first kernel's start to last "
                "kernel's end, less the kernels' time): the device waits for the host to "
                "launch each kernel, and one fused op launches once",
                fix=fix,
                evidence={
                    "operators": types,
                    "shapes": [str(r["input_dims"]) for r in run],
                    "dtypes": [],
                    "calls": len(starts),
                    "figures": {
                        "run_wall_us_per_step": round(steps.per_step_us(wall), 3),
                        "kernel_us_per_step": round(steps.per_step_us(busy), 3),
                        "busy_share": round(busy / wall, 4),
                        "kernels_per_run": length,
                    },
                    "event_ids": [rows[i]["id"] for i in starts][:10],
                    # see advise.overlap: the op groups, and the device idle that
                    # overhead-device-idle / overhead-launch-bound count too
                    "op_groups": _run_groups(profile, results, rows, starts, length),
                    "part_of": ["overhead-device-idle", "overhead-launch-bound"],
                },
                steps=steps,
                limit_ns=wall,
                limit_what="the runs' wall time",
                method="device-idle",
            )
            out.append(f)
        return out

    def _finding(
        self,
        profile: Profile,
        steps: c.StepInfo,
        rows: list[dict[str, Any]],
        key: tuple[int, ...],
        starts: list[int],
        exec_ns: float,
        fused: float | None,
        share: float,
        saving: float,
    ) -> Finding:
        length = len(key)
        run = rows[starts[0] : starts[0] + length]
        types = [str(r["op_type"]) for r in run]
        anchor = [r["op_id"] for r in run if r["op_id"] is not None][:1] or [run[0]["id"]]
        where = next(iter(c.group_by_location(profile, pl.DataFrame({"id": anchor}))))
        fix = (
            "# one fused op instead of the run, e.g. a torch_npu fused API, or graph mode:\n"
            "import torchair\n"
            "model = torch.compile(model, backend=torchair.get_npu_backend())"
        )
        opt = _optimizer_of(profile, anchor[0])
        if opt is not None:
            # a per-parameter update inside the optimizer step: the fused optimizer is the fix
            fix = f"# the run is {opt}'s per-parameter update\n" + npu_fix(opt)
        if fused is not None:
            method = "bound-gap"
            how = (
                "the run's kernel time minus the bound of one fused kernel per occurrence "
                "(the run's external inputs and last output at the memory bandwidth, one "
                f"launch floor: {steps.per_step_us(fused * len(starts)):.1f} µs/step)"
            )
        else:
            method = "removed-time"
            how = "all but the costliest kernel of each occurrence (no device peaks or shapes)"
        f: Finding = c.make_finding(
            profile,
            rule=self.id,
            title=f"{' → '.join(types)} runs {len(starts)}×, memory-bound "
            f"(MTE {min(share, 1.0):.0%} of core time): fuse into one kernel",
            where=where,
            key="seq:" + "|".join(f"{r['op_type']}:{r['input_dims']}" for r in run),
            saving_ns=saving,
            saving_how=how,
            fix=fix,
            evidence={
                "operators": types,
                "shapes": [str(r["input_dims"]) for r in run],
                "dtypes": [],
                "calls": len(starts),
                "figures": {
                    "run_us_per_step": round(steps.per_step_us(exec_ns), 3),
                    "mte_share": round(share, 4),
                    "fused_bound_us_per_step": None
                    if fused is None
                    else round(steps.per_step_us(fused * len(starts)), 3),
                    "kernels_per_run": length,
                },
                "event_ids": [rows[i]["id"] for i in starts][:10],
            },
            steps=steps,
            limit_ns=exec_ns,
            limit_what="the run's kernel time",
            method=method,
        )
        return f


def _optimizer_of(profile: Profile, op_id: int) -> str | None:
    """The optimizer class whose ``Optimizer.step#<Name>.step`` range holds ``op_id``."""
    from opscope.advise.rules.fusion import OPT_PREFIX

    anc = c.ancestors(profile, pl.Series([op_id], dtype=pl.Int64)).join(
        profile.events.select(pl.col("id").alias("anc_id"), "name"), on="anc_id"
    )
    names = anc.filter(pl.col("name").str.starts_with(OPT_PREFIX)).get_column("name")
    if names.len() == 0:
        return None
    return str(names[0]).removeprefix(OPT_PREFIX).split(".")[0]


def _run_groups(
    profile: Profile,
    results: Mapping[str, Any],
    rows: list[dict[str, Any]],
    starts: list[int],
    length: int,
) -> list[int]:
    """The op groups of a run's host ops (see advise.overlap), or, with no host ops (a kernel
    table alone), the run's kernels themselves."""
    ks = [rows[i + j] for i in starts for j in range(length)]
    ops = [r["op_id"] for r in ks if r["op_id"] is not None]
    return op_groups(profile, results, ops) if ops else sorted(int(r["id"]) for r in ks)


def _find_runs(cl: list[int], blocked: Any) -> dict[tuple[int, ...], list[int]]:
    """Every run of ``MIN_LEN``..``MAX_LEN`` unblocked kernels (by key code) occurring more than
    ``MIN_COUNT`` times, with its start positions. Level by level, extending only runs that
    occur often enough (a run occurs at most as often as its prefix): near-linear on real and
    random traces."""
    n = len(cl)
    nb = np.concatenate([[0], np.cumsum(blocked)]).tolist()  # blocked kernels before i
    runs: dict[tuple[int, ...], list[int]] = {}
    level: dict[tuple[int, ...], list[int]] = {}
    for i in range(n):
        if not blocked[i]:
            level.setdefault((cl[i],), []).append(i)
    for length in range(MIN_LEN, MAX_LEN + 1):
        nxt: dict[tuple[int, ...], list[int]] = {}
        for key, starts in level.items():
            if len(starts) <= MIN_COUNT:
                continue
            for i in starts:
                j = i + length - 1
                if j < n and nb[j + 1] == nb[i]:
                    nxt.setdefault((*key, cl[j]), []).append(i)
        level = {k: v for k, v in nxt.items() if len(v) > MIN_COUNT}
        runs.update(level)
        if not level:
            break
    return runs


def _memory_bound(r: dict[str, Any]) -> bool:
    """A vector kernel (no cube time) with its MTE time over ``MTE_SHARE`` of its core time."""
    busy = float(r["busy_ns"])
    return busy > 0 and float(r["cube_ns"]) <= 0 and float(r["mte_ns"]) / busy > MTE_SHARE


def _non_overlapping(starts: list[int], length: int) -> list[int]:
    """The occurrences of a run that do not overlap an earlier one (``aaa`` holds one ``aa``)."""
    out: list[int] = []
    for s in starts:
        if not out or s >= out[-1] + length:
            out.append(s)
    return out


register(AscendFusibleSequence())
