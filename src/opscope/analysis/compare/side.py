"""One side of a comparison: a profile reduced to its steps and the in-step ops and kernels,
with the figures the summary reads (step times, device busy and idle, peak memory)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from opscope import units
from opscope.analysis.compare import semantic
from opscope.analysis.compare.stats import MAD_SCALE
from opscope.ingest import link
from opscope.model import Profile, kinds

_DEVICE_WORK: Final = kinds.DEVICE_WORK


def as_profile(x: Profile | str | os.PathLike[str]) -> tuple[Profile, str]:
    if isinstance(x, Profile):
        sources = x.meta.get("sources") or []
        return x, str(sources[0]) if sources else "profile"
    from opscope.ingest import load

    return load(x), os.fspath(x)


@dataclass(frozen=True)
class Side:
    """One profile reduced to what the comparison needs: steps and in-step ops and kernels.

    The nesting comes from :func:`opscope.analysis.hotspots.ancestor_pairs` and the line /
    module each op and kernel is charged to from
    :func:`opscope.analysis.attribution.charges`, so compare's figures are the report's.
    """

    profile: Profile
    name: str
    source: str
    steps: pl.DataFrame  # step, dur_ns (slowest rank), sorted by step
    step_source: str
    ops: pl.DataFrame  # in-step cpu_ops: id, rank, name, dims, step, dur_ns, module, line
    kernels: pl.DataFrame  # in-step device work: id, name, step, dur_ns, op_id, rank, device, ts
    charged: pl.DataFrame  # in-step charges: device, time_ns, step, module, line
    windows: pl.DataFrame  # rank, start_ns, end_ns (first step start to last step end)

    @property
    def n_steps(self) -> int:
        return max(self.steps.height, 1)

    @classmethod
    def build(cls, p: Profile, name: str, source: str) -> Side:
        from opscope.analysis.attribution import charges, resolve_ops

        windows, step_source = _step_windows(p)
        ev = _assign_steps(p.events, windows, step_source)
        steps = (
            windows.group_by("step")
            .agg(pl.col("dur_ns").max())
            .sort("step")
            .select("step", "dur_ns")
        )
        ev = ev.filter(pl.col("step").is_not_null())
        step_of = ev.select("id", "step")
        line = (
            pl.when(pl.col("file").is_not_null())
            .then(pl.col("file") + pl.lit(":") + pl.col("line").cast(pl.String))
            .alias("line")
        )
        where = resolve_ops(p).select("id", "module", line)
        ops = (
            ev.filter(pl.col("kind") == "cpu_op")
            .drop("module")  # the resolved one: nearest above, or the forward op's
            .join(where, on="id", how="left")
            .select(
                "id",
                "rank",
                "name",
                pl.col("input_dims").fill_null("[]").alias("dims"),
                pl.col("input_types").alias("types"),
                "step",
                "dur_ns",
                "module",
                "line",
                pl.col("is_backward").fill_null(False),
            )
        )
        charged = (
            charges(p)
            .join(step_of, left_on="event_id", right_on="id")
            .select("device", "time_ns", "step", "module", line)
        )
        kernels = ev.filter(pl.col("kind").is_in(list(_DEVICE_WORK))).select(
            "id",
            "rank",
            "name",
            "step",
            "dur_ns",
            "op_id",
            "ts_ns",
            pl.coalesce("device", "pid").alias("device"),
            "kind",
            pl.col("is_backward").fill_null(False),
        )
        win = windows.group_by("rank").agg(
            pl.col("ts_ns").min().alias("start_ns"),
            (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("end_ns"),
        )
        return cls(p, name, source, steps, step_source, ops, kernels, charged, win)

    # Event-level frames: key, fallback, step, t_ns, calls --------------------------------------

    def frame(self, kind: str, basis: str) -> pl.DataFrame:
        """Every contribution to a row of ``kind``: ``key, fallback, step, t_ns, calls``."""
        ops = self.ops
        none = pl.lit(None, dtype=pl.String)
        one = pl.lit(1, dtype=pl.Int64).alias("calls")
        if kind == "kernel":
            # The outermost operator around the launch is what two devices' traces share
            # (aten::linear on both, where CUDA goes on to aten::addmm and Ascend to aclnnMatmul).
            outer = (
                self.kernel_ancestors.join(
                    ops.select(pl.col("id").alias("anc_id"), "name", "module", "line"), on="anc_id"
                )
                .sort("dist")
                .group_by("kernel_id")
                .last()
                .select(
                    pl.col("kernel_id").alias("id"),
                    (
                        pl.lit("via ")
                        + pl.col("name")
                        + pl.coalesce(pl.lit(" @ ") + pl.coalesce("module", "line"), pl.lit(""))
                    ).alias("fallback"),
                )
            )
            return self.kernels.join(outer, on="id", how="left").select(
                pl.col("name").alias("key"),
                "fallback",
                "step",
                pl.col("dur_ns").alias("t_ns"),
                one,
            )
        if kind in ("op", "op_shape"):
            # no line and no module: match the operator's unmatched shapes by name alone
            anchor = pl.coalesce(pl.lit(" @ ") + pl.coalesce("line", "module"), pl.lit(""))
            key = pl.col("name") if kind == "op" else pl.col("name") + pl.lit(" ") + pl.col("dims")
            fallback = (
                pl.col("name") + anchor + pl.lit(" (shape changed)") if kind == "op_shape" else none
            )
            calls = ops.select(
                key.alias("key"),
                fallback.alias("fallback"),
                "step",
                (pl.col("dur_ns") if basis == "host" else pl.lit(0, dtype=pl.Int64)).alias("t_ns"),
                one,
            )
            if basis == "host":
                return calls
            # Device time, inclusive: a kernel counts for every op around its launch, but once
            # per key, so that recursion (aten::sum inside aten::sum) does not count it twice.
            kern = self.kernels.select(
                pl.col("id").alias("kernel_id"), pl.col("step").alias("kstep"), "dur_ns"
            )
            dev = (
                self.kernel_ancestors.join(
                    ops.rename({"id": "anc_id", "dur_ns": "op_ns", "step": "op_step"}), on="anc_id"
                )
                .select("kernel_id", key.alias("key"), fallback.alias("fallback"))
                .unique(subset=["kernel_id", "key"], keep="first")
                .join(kern, on="kernel_id")
                .select(
                    "key",
                    "fallback",
                    pl.col("kstep").alias("step"),
                    pl.col("dur_ns").alias("t_ns"),
                    pl.lit(0, dtype=pl.Int64).alias("calls"),
                )
            )
            return pl.concat([calls, dev], how="vertical")
        col = {"module": "module", "line": "line"}[kind]
        # a fixed twin is often a renamed root class (VisionModel_0/Linear_11 vs
        # FixedVisionModel_0/Linear_11): match the path below the root when the full one fails
        below_root = (
            pl.when(pl.col(col).str.contains("/"))
            .then(pl.lit("…/") + pl.col(col).str.replace(r"^[^/]*/", ""))
            .otherwise(None)
        )
        fallback_m = below_root if kind == "module" else none
        ch = self.charged.filter(pl.col(col).is_not_null())
        host = ch.filter(~pl.col("device")).select(
            pl.col(col).alias("key"),
            fallback_m.alias("fallback"),
            "step",
            (pl.col("time_ns") if basis == "host" else pl.lit(0, dtype=pl.Int64)).alias("t_ns"),
            one,
        )
        if basis == "host":
            return host
        dev = ch.filter(pl.col("device")).select(
            pl.col(col).alias("key"),
            fallback_m.alias("fallback"),
            "step",
            pl.col("time_ns").alias("t_ns"),
            pl.lit(0, dtype=pl.Int64).alias("calls"),
        )
        return pl.concat([host, dev], how="vertical")

    @functools.cached_property
    def annotated_ops(self) -> pl.DataFrame:
        """In-step ops with their semantic ``cls, size, dtype`` (see :mod:`.semantic`)."""
        return semantic.annotate_ops(self.ops)

    def anchors(self, basis: str) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Semantic attribution: ``(work, anchors)``.

        ``work``: one row per charged piece of time — ``anchor_id`` (null for a kernel with no
        classified op around it), ``step``, ``t_ns``, and the key parts ``module, is_backward,
        cls, name, size, dtype``. ``anchors``: one row per anchor op — ``anchor_id, step`` and
        the same key parts (its calls).
        """
        ann = self.annotated_ops
        parts = ["module", "is_backward", "cls", "name", "size", "dtype"]
        classified = ann.filter(pl.col("cls").is_not_null())
        if basis == "device":
            from opscope.analysis.flops import host_op_costs

            costed = host_op_costs(self.profile).select(
                pl.col("id").alias("anc_id"),
                (pl.col("flops").is_not_null() | pl.col("bytes").is_not_null()).alias("costed"),
            )
            chain = self.kernel_ancestors.join(
                classified.select(pl.col("id").alias("anc_id"), "cls", "size"), on="anc_id"
            ).join(costed, on="anc_id", how="left")
            # the class of the innermost classified op around the launch...
            inner = chain.sort("dist").group_by("kernel_id").first().select("kernel_id", "cls")
            # ...charged to the outermost op of that class whose problem size is known
            anchor = (
                chain.join(inner, on=["kernel_id", "cls"])
                .with_columns(
                    pl.col("size").is_not_null().alias("sized"),
                    pl.col("costed").fill_null(False),
                )
                # sized first (the key needs it), then costed (the roofline figures need it)
                .sort(
                    "kernel_id",
                    "sized",
                    "costed",
                    pl.when(pl.col("sized")).then(-pl.col("dist")).otherwise(pl.col("dist")),
                    descending=[False, True, True, False],
                )
                .group_by("kernel_id")
                .first()
                .select("kernel_id", pl.col("anc_id").alias("anchor_id"))
            )
            k = self.kernels.select(
                pl.col("id").alias("kernel_id"),
                "name",
                "kind",
                "op_id",
                "step",
                "dur_ns",
                pl.col("is_backward").alias("k_bwd"),
            ).join(anchor, on="kernel_id", how="left")
            launcher = ann.select(
                pl.col("id").alias("op_id"),
                pl.col("module").alias("l_module"),
                pl.col("is_backward").alias("l_bwd"),
            )
            k = k.join(launcher, on="op_id", how="left")
            kcls = {
                (n, kd): semantic.kernel_class(n, kd)
                for n, kd in k.filter(pl.col("anchor_id").is_null())
                .select("name", "kind")
                .unique()
                .rows()
            }
            orphan = (
                k.filter(pl.col("anchor_id").is_null())
                .with_columns(
                    pl.struct("name", "kind")
                    .map_elements(lambda r: kcls[(r["name"], r["kind"])], return_dtype=pl.String)
                    .alias("cls")
                )
                .select(
                    pl.lit(None, dtype=pl.Int64).alias("anchor_id"),
                    "step",
                    pl.col("dur_ns").alias("t_ns"),
                    pl.col("l_module").alias("module"),
                    pl.coalesce("l_bwd", "k_bwd").alias("is_backward"),
                    "cls",
                    "name",
                    pl.lit(None, dtype=pl.String).alias("size"),
                    pl.lit(None, dtype=pl.String).alias("dtype"),
                )
                if kcls
                else None
            )
            a_parts = ann.select(pl.col("id").alias("anchor_id"), *parts)
            anchored = (
                k.filter(pl.col("anchor_id").is_not_null())
                .select("anchor_id", "step", pl.col("dur_ns").alias("t_ns"))
                .join(a_parts, on="anchor_id")
            )
            work = anchored if orphan is None else pl.concat([anchored, orphan], how="vertical")
            used = anchored.select("anchor_id").unique()
        else:
            pairs = self.op_ancestors.join(
                classified.select(pl.col("id").alias("anc_id"), pl.col("cls").alias("a_cls")),
                on="anc_id",
            )
            real_anc = pairs.filter(pl.col("a_cls") != "other").select("id").unique()
            any_anc = pairs.select("id").unique()
            # an "other" op above real work is a wrapper, not the work
            real_desc = (
                self.op_ancestors.join(
                    classified.filter(pl.col("cls") != "other").select("id"), on="id"
                )
                .select(pl.col("anc_id").alias("id"))
                .unique()
            )
            real = classified.filter(pl.col("cls") != "other").join(real_anc, on="id", how="anti")
            other = (
                classified.filter(pl.col("cls") == "other")
                .join(any_anc, on="id", how="anti")
                .join(real_desc, on="id", how="anti")
            )
            tops = pl.concat([real, other], how="vertical")
            work = tops.select(
                pl.col("id").alias("anchor_id"), "step", pl.col("dur_ns").alias("t_ns"), *parts
            )
            used = work.select("anchor_id")
        anchors = used.join(
            ann.select(pl.col("id").alias("anchor_id"), "step", *parts), on="anchor_id"
        )
        return work, anchors

    @functools.cached_property
    def op_ancestors(self) -> pl.DataFrame:
        """(id, anc_id, dist) over the in-step host ops."""
        from opscope.analysis.hotspots import ancestor_pairs

        host = self.profile.events.filter(~pl.col("kind").is_in(list(_DEVICE_WORK)))
        return ancestor_pairs(host.select("id", "parent_id")).join(
            self.ops.select("id"), on="id", how="semi"
        )

    def semantic_frame(self, basis: str, strip: bool) -> pl.DataFrame:
        """Every contribution to a semantic row: ``key, fallback, step, t_ns, calls`` (and
        ``anchor_id``: the op it is charged to, for the roofline figures)."""
        work, anchors = self.anchors(basis)
        module = semantic.strip_root(pl.col("module")) if strip else pl.col("module")
        pas = pl.when(pl.col("is_backward")).then(pl.lit("bwd")).otherwise(pl.lit("fwd"))
        key = semantic.label(
            module, pas, pl.col("cls"), pl.col("name"), pl.col("size"), pl.col("dtype")
        )
        fb = semantic.fallback_label(module, pas, pl.col("cls"), pl.col("name"))
        timed = work.select(
            key.alias("key"),
            fb.alias("fallback"),
            "step",
            pl.col("t_ns").cast(pl.Int64),
            # work with no anchor op (a compiled graph's kernels) counts its launches
            pl.col("anchor_id").is_null().cast(pl.Int64).alias("calls"),
            "anchor_id",
        )
        counted = anchors.select(
            key.alias("key"),
            fb.alias("fallback"),
            "step",
            pl.lit(0, dtype=pl.Int64).alias("t_ns"),
            pl.lit(1, dtype=pl.Int64).alias("calls"),
            pl.col("anchor_id").cast(pl.Int64),
        )
        if basis == "host":  # the work rows are the anchors themselves
            return timed.with_columns(pl.lit(1, dtype=pl.Int64).alias("calls"))
        return pl.concat(
            [timed.with_columns(pl.col("anchor_id").cast(pl.Int64)), counted], how="vertical"
        )

    @functools.cached_property
    def kernel_ancestors(self) -> pl.DataFrame:
        """(kernel_id, anc_id, dist) for the launching op (dist 0) and every event above it."""
        from opscope.analysis.hotspots import ancestor_pairs

        host = self.profile.events.filter(~pl.col("kind").is_in(list(_DEVICE_WORK)))
        pairs = ancestor_pairs(host.select("id", "parent_id"), include_self=True)
        return (
            self.kernels.filter(pl.col("op_id").is_not_null())
            .select(pl.col("id").alias("kernel_id"), pl.col("op_id").alias("id"))
            .join(pairs, on="id")
            .select("kernel_id", "anc_id", "dist")
        )

    # Side-level figures -------------------------------------------------------------------------

    def device_busy_idle_ns(self) -> tuple[int, int] | None:
        """Busy (union of device work) and idle time within the step window, over devices.

        All the device work that runs in the window counts, not only the rows' (those of a
        step): work queued before profiling began has no launch in the trace and so no step,
        yet the device runs it in the first step (733 kernels, 35 ms, on kineto's ResNet-50
        sample), as the breakdown counts it."""
        if self.kernels.height == 0:
            return None
        work = self.profile.kernels.select(
            pl.col("rank").fill_null(0).cast(pl.Int32),
            pl.coalesce("device", "pid").alias("device"),
            "ts_ns",
            "dur_ns",
        )
        k = (
            work.join(self.windows, on="rank", how="inner")
            .select(
                "rank",
                "device",
                pl.max_horizontal("ts_ns", "start_ns").alias("s"),
                pl.min_horizontal(pl.col("ts_ns") + pl.col("dur_ns"), "end_ns").alias("e"),
                (pl.col("end_ns") - pl.col("start_ns")).alias("window"),
            )
            .filter(pl.col("e") > pl.col("s"))
            .sort("rank", "device", "s")
        )
        if k.height == 0:
            return 0, int(self.windows.select((pl.col("end_ns") - pl.col("start_ns")).sum()).item())
        k = k.with_columns(
            pl.col("e").cum_max().shift(1).over(["rank", "device"]).alias("prev_e")
        ).with_columns(
            (pl.col("prev_e").is_null() | (pl.col("s") > pl.col("prev_e"))).cum_sum().alias("g")
        )
        busy = int(
            k.group_by("g").agg((pl.col("e").max() - pl.col("s").min()).alias("b"))["b"].sum()
        )
        window = int(k.unique(subset=["rank", "device"])["window"].sum())
        return busy, max(window - busy, 0)

    def peak_mem_bytes(self) -> int | None:
        mem = self.profile.memory.get_column("total_allocated").drop_nulls()
        if mem.len():
            return int(mem.max())  # type: ignore[arg-type]
        met = self.profile.metrics.get_column("mem_allocated_peak").drop_nulls()
        if met.len():
            return int(met.max())  # type: ignore[arg-type]
        return None

    @property
    def metrics_wall_us(self) -> float | None:
        w = self.profile.metrics.get_column("wall_ns").drop_nulls()
        return None if w.len() == 0 else float(w.median()) / 1000.0  # type: ignore[arg-type]

    def summary_row(self, scale: float) -> dict[str, Any]:
        d = self.steps.get_column("dur_ns").cast(pl.Float64)
        med = float(d.median()) if d.len() else 0.0  # type: ignore[arg-type]
        mad = float((d - med).abs().median()) * MAD_SCALE if d.len() else 0.0  # type: ignore[arg-type]
        sps = self.profile.metrics.get_column("samples_per_s").drop_nulls()
        busy_idle = self.device_busy_idle_ns()
        return {
            "name": self.name,
            "source": self.source,
            "steps": self.steps.height,
            "step_source": self.step_source,
            "step_median_us": med / 1000.0,
            "step_mad_us": mad / 1000.0,
            "step_min_us": float(d.min()) / 1000.0 if d.len() else 0.0,  # type: ignore[arg-type]
            "step_max_us": float(d.max()) / 1000.0 if d.len() else 0.0,  # type: ignore[arg-type]
            "samples_per_s": float(sps.median()) if sps.len() else None,  # type: ignore[arg-type]
            "metrics_wall_us": self.metrics_wall_us,
            # ns / (1000 * steps): one division (units), not two roundings
            "device_busy_us": None
            if busy_idle is None
            else units.us_value(busy_idle[0], per=scale),
            "device_idle_us": None
            if busy_idle is None
            else units.us_value(busy_idle[1], per=scale),
            "peak_mem_bytes": self.peak_mem_bytes(),
        }


def _step_windows(p: Profile) -> tuple[pl.DataFrame, str]:
    """``rank, step, ts_ns, dur_ns`` of every step, and where they came from."""
    cols = [
        pl.col("rank").fill_null(0).cast(pl.Int32),
        pl.col("step").cast(pl.Int64),
        pl.col("ts_ns").cast(pl.Int64),
        pl.col("dur_ns").cast(pl.Int64),
    ]
    st = p.steps.filter(pl.col("step").is_not_null() & pl.col("dur_ns").is_not_null())
    if st.height:
        return st.select(cols), "steps table"
    ev = p.events.filter(pl.col("kind") == "step")
    if ev.height:
        ev = ev.with_columns(
            pl.coalesce(
                pl.col("step").cast(pl.Int64),
                pl.col("name").str.extract(r"#(\d+)", 1).cast(pl.Int64, strict=False),
            ).alias("step")
        ).filter(pl.col("step").is_not_null())
        if ev.height:
            return ev.select(cols), "ProfilerStep events"
    e = p.events.filter(pl.col("ts_ns").is_not_null())
    span = e.group_by(pl.col("rank").fill_null(0).cast(pl.Int32)).agg(
        pl.lit(0, dtype=pl.Int64).alias("step"),
        pl.col("ts_ns").min().alias("ts_ns"),
        ((pl.col("ts_ns") + pl.col("dur_ns").fill_null(0)).max() - pl.col("ts_ns").min()).alias(
            "dur_ns"
        ),
    )
    return span.select(cols), "trace span"


def _assign_steps(ev: pl.DataFrame, windows: pl.DataFrame, source: str) -> pl.DataFrame:
    """Events with ``step`` (Int64) set: the loader's, else by time inside a step window."""
    ev = ev.with_columns(pl.col("rank").fill_null(0).cast(pl.Int32))
    if source == "trace span":
        return ev.with_columns(pl.lit(0, dtype=pl.Int64).alias("step"))
    if ev.get_column("step").null_count() < ev.height:
        return ev.with_columns(pl.col("step").cast(pl.Int64))
    # the step holding each event's start: the linker's one rule (ingest.link.step_of_times)
    step = link.step_of_times(windows, ev.get_column("rank"), ev.get_column("ts_ns"))
    host = ev.with_columns(step.cast(pl.Int64).alias("step"))
    # device events run on another clock domain: take the step of the op that launched them
    op_step = host.select(pl.col("id").alias("op_id"), pl.col("step").alias("op_step"))
    return (
        host.join(op_step, on="op_id", how="left")
        .with_columns(
            pl.when(pl.col("kind").is_in(list(_DEVICE_WORK)))
            .then(pl.col("op_step"))
            .otherwise(pl.col("step"))
            .alias("step")
        )
        .drop("op_step")
        .sort("id")
    )
