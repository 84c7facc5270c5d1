"""Ascend dynamic shapes: operators compiled at run time inside the step, by operator type,
with the input shapes that made them compile.

msprof-analyze's advisor has two checks on this (read for what they test, not copied): its
operator-dispatch check counts ``AscendCL@aclopCompileAndExecute`` calls (an issue from
``MAX_OP_COMPILE_NUM`` = 20 of them in the profile), and its dynamic-shape check flags a run
whose kernels are all ``dynamic`` in the ``OP State`` column of ``kernel_details.csv``; both
advise ``torch_npu.npu.set_compile_mode(jit_compile=False)`` and
``torch_npu.npu.config.allow_internal_format = False``.

opscope's rule takes the compile calls (``COMPILE_EVENTS``: ``aclopCompileAndExecute``, and
``opCompile`` when it stands alone), finds the operator type each compiled — the enclosing
``Dequeue@<type>`` slice of torch_npu's task-queue thread, else the op type of the kernels of
the enclosing host op — and the distinct input shapes of that type's kernels. It fires when
the compile calls take at least ``MIN_STEP_PCT`` of the step or number at least
``MIN_COMPILES`` (msprof-analyze's count). Saving: the device idle the compile calls cause
(the gap from the device's last work before each call returns, or the call's start, to the
next kernel, at most the call's own time: ``overhead.idle_after``), method ``device-idle``;
a compile the device does not wait for saves nothing. The share of kernels whose OP State is
``dynamic`` is reported as evidence, not as a finding of its own: torch_npu 2.1+ runs binary
(dynamic-shape) kernels by default, so "all dynamic" alone is no cost.

``overhead-recompile`` reports the same calls' host time (unbounded by the device idle); this
rule's finding is the per-operator, device-bounded account of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

import polars as pl

from opscope.advise import _common as c
from opscope.advise.finding import Finding
from opscope.advise.rule import register
from opscope.advise.rules.overhead import COMPILE_EVENTS, _named_events
from opscope.model import Profile

# msprof-analyze's operator-dispatch check: an issue from this many compile calls.
MIN_COMPILES: Final = 20
# Or compile calls taking at least this share of the step (opscope's heuristic, as the other
# overhead rules' 1% floor for a finding worth reading).
MIN_STEP_PCT: Final = 1.0
DEQUEUE_PREFIX: Final = "Dequeue@"


def _compile_calls(profile: Profile) -> pl.DataFrame:
    # (the events' rows from the names' and kinds' masks, with the overhead rules' patterns:
    # a filter of the events was a query)
    ev = _named_events(profile, COMPILE_EVENTS)
    return c.outermost(profile, ev) if ev.height else ev


def _op_types(profile: Profile, calls: pl.DataFrame) -> pl.DataFrame:
    """``[id, op_type, host_op]``: the operator type each compile call compiled (from the
    enclosing ``Dequeue@<type>`` slice, else the enclosing host op's kernels) and the enclosing
    host op when there is one."""
    # plans, collected twice at most (each eager step was a query of fixed cost)
    ev = profile.events
    anc = c.ancestors(profile, calls.get_column("id")).lazy().filter(pl.col("hops") > 0)
    anc = anc.join(
        ev.lazy().select(pl.col("id").alias("anc_id"), pl.col("name").alias("anc_name"), "kind"),
        on="anc_id",
        how="left",
    )
    deq = (
        anc.filter(pl.col("anc_name").str.starts_with(DEQUEUE_PREFIX))
        .sort("hops")
        .unique("id", keep="first")
        .select("id", pl.col("anc_name").str.strip_prefix(DEQUEUE_PREFIX).alias("deq_type"))
    )
    host = (
        anc.filter(pl.col("kind") == "cpu_op")
        .sort("hops")
        .unique("id", keep="first")
        .select("id", pl.col("anc_id").alias("host_op"))
    )
    out = (
        calls.lazy()
        .select("id")
        .join(deq, on="id", how="left")
        .join(host, on="id", how="left")
        .collect(engine="in-memory")
    )
    kern = profile.kernels
    typed = kern.get_column("op_id").is_not_null() & kern.get_column("op_type").is_not_null()
    if typed.any() and c.present(out.get_column("host_op")):
        k = kern.filter(typed)
        ktype = (
            c.ancestors(profile, k.get_column("op_id"))
            .lazy()
            .join(k.lazy().select(pl.col("op_id").alias("id"), "op_type"), on="id")
            .group_by("anc_id")
            .agg(pl.col("op_type").mode().first().alias("k_type"))
            .rename({"anc_id": "host_op"})
        )
        plan = out.lazy().join(ktype, on="host_op", how="left")
    else:
        plan = out.lazy().with_columns(pl.lit(None, pl.String).alias("k_type"))
    return plan.select("id", pl.coalesce("deq_type", "k_type").alias("op_type"), "host_op").collect(
        engine="in-memory"
    )


def _compiled_kernels(profile: Profile, calls: pl.DataFrame) -> pl.DataFrame:
    """``calls`` with ``k_dims`` and ``k_op``: the input shapes and host op of the kernel each
    call compiled (the first kernel of its operator type starting after the call starts)."""
    # one plan (the test for kernels with a type from the column)
    if not c.present(profile.kernels.get_column("op_type")):
        return calls.with_columns(
            pl.lit(None, pl.String).alias("k_dims"), pl.lit(None, pl.Int64).alias("k_op")
        )
    k = (
        profile.kernels.lazy()
        .filter(pl.col("op_type").is_not_null())
        .select(
            "rank",
            pl.col("op_type"),
            pl.col("ts_ns").alias("k_ts"),
            pl.col("input_dims").alias("k_dims"),
            pl.col("op_id").alias("k_op"),
        )
        .sort("k_ts")
    )
    return (
        calls.lazy()
        .sort("ts_ns")
        .join_asof(
            k,
            left_on="ts_ns",
            right_on="k_ts",
            by=["rank", "op_type"],
            strategy="forward",
            check_sortedness=False,
        )
        .drop("k_ts")
        .sort("ts_ns")
        .collect(engine="in-memory")
    )


def _dynamic_share(profile: Profile) -> float | None:
    """The share of kernels whose ``OP State`` is ``dynamic`` (None when no kernel says)."""
    # the args column alone as a Series (a filter of the kernels copies all their columns)
    args = profile.kernels.get_column("args")
    args = args.filter(args.is_not_null())
    if args.len() == 0:
        return None
    state = args.str.json_path_match("$['OP State']").str.to_lowercase().alias("s")
    known = state.drop_nulls().filter(state.drop_nulls().is_in(["dynamic", "static"]))
    if known.len() == 0:
        return None
    return float((known == "dynamic").sum()) / known.len()


class AscendDynamicShape:
    """Operators compiled at run time (dynamic shapes), per operator type."""

    id = "ascend-dynamic-shape"
    doc = (
        "On Ascend, an operator run through CANN's `aclop` path is compiled for each new input "
        "shape (`AscendCL@aclopCompileAndExecute`, with `opCompile` inside, on torch_npu's "
        "task-queue thread); while it compiles, the op's kernel cannot start and the device "
        "drains and waits. The rule groups the compile calls by the operator type they "
        "compiled (the enclosing `Dequeue@<type>` slice, or the enclosing host op's kernels), "
        "lists the distinct input shapes of that type's kernels, and fires when the calls take "
        f"at least {MIN_STEP_PCT}% of the step or number at least {MIN_COMPILES} "
        "(msprof-analyze's operator-dispatch threshold). Saving: the device idle the calls "
        "cause (from the device's last work before each call returns to the next kernel, at "
        "most the call's time), never the host time of a compile the device does not wait "
        "for. Fix: `torch_npu.npu.set_compile_mode(jit_compile=False)` and "
        "`torch_npu.npu.config.allow_internal_format = False` (binary kernels, no compile), "
        "and pad inputs to a few fixed shapes (buckets)."
    )

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        if c.target_of(profile, results) != "ascend":
            return []
        calls = _compile_calls(profile)
        if calls.height == 0:
            return []
        steps = c.step_info(profile)
        total = float(calls.get_column("dur_ns").fill_null(0).sum())
        if calls.height < MIN_COMPILES and steps.pct(total) < MIN_STEP_PCT:
            return []
        from opscope.advise.rules.overhead import idle_after

        types = _op_types(profile, calls)
        calls = (
            calls.select("id", "rank", "name", "ts_ns", "dur_ns")
            .join(types, on="id", how="left")
            .with_columns(pl.col("op_type").fill_null("?"))
        )
        calls = _compiled_kernels(profile, calls)
        share = _dynamic_share(profile)
        out = []
        # a frame per op type in one pass (iterating a group_by was a query per group)
        for grp in calls.partition_by("op_type", maintain_order=True):
            op_type = grp.get_column("op_type")[0]
            out.append(self._finding(profile, steps, str(op_type), grp, share, idle_after))
        return out

    def _finding(
        self,
        profile: Profile,
        steps: c.StepInfo,
        op_type: str,
        grp: pl.DataFrame,
        share: float | None,
        idle_after: Any,
    ) -> Finding:
        # column lists in Python, not Series queries (a fixed cost each, per operator type)
        cost = float(sum(d for d in grp.get_column("dur_ns").to_list() if d is not None))
        idle = float(idle_after(profile, grp)) if profile.has_device else 0.0
        # the shapes of the kernels the calls compiled (first seen first), and the user's code
        # that issued them (the compile thread has no Python stack)
        shapes = list(dict.fromkeys(s for s in grp.get_column("k_dims").to_list() if s is not None))
        anchor = [
            *(x for x in grp.get_column("host_op").to_list() if x is not None),
            *(x for x in grp.get_column("k_op").to_list() if x is not None),
        ]
        where_ids = anchor[:1] or grp.get_column("id").to_list()[:1]
        where = next(iter(c.group_by_location(profile, pl.DataFrame({"id": where_ids}))))
        names = sorted(set(grp.get_column("name").to_list()))
        figures: dict[str, Any] = {
            "compiles_per_step": round(grp.height / max(steps.n, 1), 3),
            "compile_us_per_step": round(steps.per_step_us(cost), 3),
            "device_idle_us_per_step": round(steps.per_step_us(idle), 3),
            "distinct_input_shapes": len(shapes),
        }
        if share is not None:
            figures["dynamic_kernel_share"] = round(share, 4)
        shown = ", ".join(_fmt(s) for s in shapes[:4]) + (" ..." if len(shapes) > 4 else "")
        f: Finding = c.make_finding(
            profile,
            rule=self.id,
            title=f"{op_type} compiled at run time {grp.height}× "
            f"({len(shapes)} input shape{'s' if len(shapes) != 1 else ''}"
            f"{': ' + shown if shown else ''})",
            where=where,
            key=f"compile:{op_type}",
            saving_ns=idle,
            saving_how="the device idle the compile calls cause (from the device's last work "
            "before each call returns to the next kernel, at most the call's time); the "
            f"calls' host time is {steps.per_step_us(cost):.1f} µs/step",
            fix="torch_npu.npu.set_compile_mode(jit_compile=False)  # binary kernels, no compile\n"
            "torch_npu.npu.config.allow_internal_format = False\n"
            "# and pad inputs to a few fixed shapes (e.g. sequence lengths to multiples of 128)",
            evidence={
                "operators": [op_type, *names],
                "shapes": shapes[:20],
                "dtypes": [],
                "calls": grp.height,
                "figures": figures,
                "event_ids": grp.get_column("id").to_list()[:10],
                # the compile calls (see advise.overlap): overhead-recompile reports the same
                # calls' host time and counts what is left after this finding
                "op_groups": sorted(grp.get_column("id").to_list()),
                "part_of": ["overhead-recompile", "overhead-device-idle"],
            },
            steps=steps,
            limit_ns=cost,
            limit_what="the compile calls' own time",
            method="device-idle",
        )
        return f


def _fmt(dims: str) -> str:
    """``[[1000,4096],[4096,4096]]`` -> ``[1000x4096, 4096x4096]``."""
    try:
        v = json.loads(dims)
    except ValueError:
        return re.sub(r"\s+", "", dims)
    if not isinstance(v, list):
        return str(v)
    return "[" + ", ".join(c.fmt_shape(s) if isinstance(s, list) else str(s) for s in v) + "]"


register(AscendDynamicShape())
