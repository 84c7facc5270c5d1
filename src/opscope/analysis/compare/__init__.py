"""Compare two profiles: the step time, what explains its change, row by row, significance.

:func:`compare` matches the rows of two profiles by what the work *is* (``semantic`` rows:
module path, fwd/bwd, op class and problem size, dtype — across op names, kernel names, devices
and vendors; see :mod:`.semantic`), and by operator, operator + input shapes, kernel,
``nn.Module`` path and the user's source line, and says for each matched row how much faster or
slower it got and whether that change is larger than the step-to-step noise. The headline is
the median step's change with its noise band, then the rows that explain it
(:func:`explain_step`), then the heaviest matched rows with their achieved bandwidth and
FLOP/s and their share of each side's device peak (:func:`heavy_rows`).

Time basis
    When both profiles hold device kernels, rows are charged with *device* time: a kernel counts
    for every operator that encloses its launch (inclusive, like ``key_averages``' device total),
    once per row key (recursion is not counted twice), for the module and the source line of the
    operator that launched it, and for itself. Otherwise rows are charged with *host* time:
    inclusive operator time for operator rows (as ``key_averages``' CPU total), and the time of
    each top-level operator for its module and line rows. Lines and modules are those of
    :func:`opscope.analysis.attribution.charges` (backward work goes to its forward op's line),
    so they equal the report's.

Steps
    Each side's steps come from its ``steps`` table; if that is empty, from its ``ProfilerStep``
    events; if it has none, the whole trace span is one step. Only events inside a step count.
    When the two sides have different step counts every figure is a per-step average, otherwise
    a total over the steps (``Comparison.normalisation`` says which).

Significance (:mod:`.stats`, documented in ``docs/compare.md``)
    A change is *significant* when the relative change is at least :data:`MIN_REL_CHANGE` and,
    with at least :data:`MIN_STEPS` steps on each side, the shift of the per-step medians
    exceeds the noise band printed with it: :data:`NOISE_K` pooled scaled MADs. The
    Mann-Whitney U p-value is reported, not used. With fewer steps a change of at least
    :data:`MIN_REL_CHANGE` is *untested*; a smaller one is noise.

Matching that survives a fix
    Kernels whose names have no counterpart (a CUDA trace against an Ascend one, a new GEMM
    kernel) are matched through their host operator: the outermost operator around the launch
    and its module (``match == "host op"``). Operator + shape rows whose exact shapes have no
    counterpart (the fixed model's padded dims) are matched by operator name and source line
    (else module) (``match == "shape changed"``). Module paths that differ only in the root
    (``VisionModel_0/...`` vs ``FixedVisionModel_0/...``) match below it (``"root renamed"``).
    Semantic rows whose problem size or dtype has no counterpart (1000 padded to 1024) match by
    module + pass + class (``"shape changed"``); when the two sides' module roots differ, their
    module paths are taken below the root.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import polars as pl

from opscope import units
from opscope.analysis.compare import semantic
from opscope.analysis.compare.stats import (
    ALPHA,
    MAD_SCALE,
    MIN_REL_CHANGE,
    MIN_STEPS,
    MW_EXACT_MAX,
    NOISE_K,
    StepChange,
    significance,
    stats,
    step_time_change,
)
from opscope.analysis.registry import Result
from opscope.errors import AnalysisError
from opscope.ingest import link
from opscope.model import Profile, kinds

HEAVY_TOP: Final = 10
"""How many of the heaviest matched operators get achieved FLOP/s and bandwidth figures."""

SUMMARY_ROWS: Final = 5
"""How many matched operators with a significant change the summary names."""

ROW_KINDS: Final = ("semantic", "op", "op_shape", "kernel", "module", "line")
"""Row kinds; ``semantic`` rows are keyed by what the work is (:mod:`.semantic`)."""

EXPLAIN_TOP: Final = 5
"""How many semantic rows the headline names as explaining the step-time change."""

_DEVICE_WORK: Final = kinds.DEVICE_WORK

_ROW_SCHEMA: Final[dict[str, pl.DataType | type[pl.DataType]]] = {
    "key": pl.String,
    "kind": pl.String,
    "match": pl.String,
    "before_us": pl.Float64,
    "after_us": pl.Float64,
    "delta_us": pl.Float64,
    "speedup": pl.Float64,
    "calls_before": pl.Int64,
    "calls_after": pl.Int64,
    "significant": pl.Boolean,
    "verdict": pl.String,
    "noise_us": pl.Float64,
    "p_value": pl.Float64,
}
_ONE_SIDE_SCHEMA: Final[dict[str, pl.DataType | type[pl.DataType]]] = {
    "key": pl.String,
    "kind": pl.String,
    "us": pl.Float64,
    "calls": pl.Int64,
}
_SUMMARY_SCHEMA: Final[dict[str, pl.DataType | type[pl.DataType]]] = {
    "metric": pl.String,
    "unit": pl.String,  # "us", "bytes", "per_s" (samples/s) or "fraction" (of a peak)
    "before": pl.Float64,
    "after": pl.Float64,
    "lower_is_better": pl.Boolean,
    "speedup": pl.Float64,  # before / after, for the time rows that carry a verdict
    "verdict": pl.String,  # "gain", "loss", "noise", "untested"; null: no test for this row
    "noise_us": pl.Float64,
    "per_step": pl.Boolean,  # the noise band is per step while the figures are totals
}
"""The ``summary`` table: one row per headline metric, figures as numbers (the label says what
they cover; the renderers write them in human units with the change)."""


@dataclass(frozen=True)
class Comparison(Result):
    """Before/after comparison of two profiles (see the module docstring for the rules).

    Tables:

    - ``sides``: one row per side — ``name, source, steps, step_source, step_median_us,
      step_mad_us, step_min_us, step_max_us, samples_per_s, metrics_wall_us, device_busy_us,
      device_idle_us, peak_mem_bytes``.
    - ``rows``: matched rows — ``key, kind, match, before_us, after_us, delta_us, speedup,
      calls_before, calls_after, significant, verdict, noise_us, p_value``; ``kind`` is one of
      :data:`ROW_KINDS`, ``match`` is ``"exact"``, ``"shape changed"``, ``"host op"`` or
      ``"root renamed"``, ``speedup = before / after`` (> 1 is faster), ``verdict`` is
      ``"gain"``, ``"loss"``, ``"noise"`` or ``"untested"``; sorted by ``|delta_us|``.
    - ``added`` / ``removed``: rows only in the after / before profile — ``key, kind, us, calls``.
    - ``roofline``: achieved FLOP/s and bandwidth of the heaviest matched operators —
      ``key, before_tflops, after_tflops, before_gbps, after_gbps`` and, when the device peaks
      are known, ``before_flops_util, after_flops_util, before_bw_util, after_bw_util``
      (fractions of the peak).
    - ``summary``: the headline figures as numbers — ``metric, unit, before, after,
      lower_is_better, speedup, verdict, noise_us, per_step`` (:data:`_SUMMARY_SCHEMA`); every
      label says what its figures cover. :mod:`opscope.report.compare_render` writes them.
    - ``heavy``: the heaviest matched semantic rows with their roofline figures — ``key,
      match, before_us, after_us, speedup, verdict, before_gbps, after_gbps, before_tflops,
      after_tflops, before_flops_util, after_flops_util, before_bw_util, after_bw_util``
      (utilisation null: no peak for that side's device).
    - ``explain``: the step-time change split into the rows that explain it — ``key, side,
      kind, delta_us`` per step; the top gains and losses among semantic rows, then the other
      matched rows, the rows on one side only, and the rest (idle gaps, overlap, host time):
      the ``delta_us`` sum to ``step_after_us - step_before_us`` exactly.

    Scalars: ``names``, ``basis`` (``"device"``/``"host"``), ``normalisation``, the step-time
    figures ``step_before_us, step_after_us, step_speedup, step_significant, step_noise_us,
    step_p_value, step_verdict``, ``steps_per_epoch`` (when known), ``warnings`` (the sides ran
    on different devices) and ``notes`` (what was omitted and why).
    """

    #: In a report (the demo's) its JSON is the tables' top rows; :meth:`to_json` is the
    #: ``opscope compare --json`` document.
    generic_json: ClassVar[bool] = True

    sides: pl.DataFrame
    rows: pl.DataFrame
    added: pl.DataFrame
    removed: pl.DataFrame
    roofline: pl.DataFrame
    summary: pl.DataFrame
    heavy: pl.DataFrame = field(default_factory=pl.DataFrame)
    explain: pl.DataFrame = field(default_factory=pl.DataFrame)
    names: tuple[str, str] = ("before", "after")
    basis: str = "host"
    normalisation: str = ""
    step_before_us: float = 0.0
    step_after_us: float = 0.0
    step_speedup: float | None = None
    step_significant: bool | None = None
    step_noise_us: float | None = None
    step_p_value: float | None = None
    step_verdict: str = "untested"
    steps_per_epoch: int | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def step_regression_pct(self) -> float:
        """How much slower the after side's median step is, in percent (negative: faster)."""
        if self.step_before_us <= 0:
            return 0.0
        return (self.step_after_us / self.step_before_us - 1.0) * 100.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (times in microseconds)."""
        return {
            "names": list(self.names),
            "basis": self.basis,
            "normalisation": self.normalisation,
            "step_time": {
                "before_us": self.step_before_us,
                "after_us": self.step_after_us,
                "speedup": self.step_speedup,
                "significant": self.step_significant,
                "noise_us": self.step_noise_us,
                "p_value": self.step_p_value,
                "verdict": self.step_verdict,
                "regression_pct": self.step_regression_pct,
            },
            "sides": self.sides.to_dicts(),
            "rows": self.rows.to_dicts(),
            "added": self.added.to_dicts(),
            "removed": self.removed.to_dicts(),
            "roofline": self.roofline.to_dicts(),
            "summary": self.summary.to_dicts(),
            "heavy": self.heavy.to_dicts(),
            "explain": self.explain.to_dicts(),
            "steps_per_epoch": self.steps_per_epoch,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }


def compare(
    a: Profile | str | os.PathLike[str],
    b: Profile | str | os.PathLike[str],
    *,
    names: tuple[str, str] = ("before", "after"),
    devices: tuple[str | None, str | None] = (None, None),
    steps_per_epoch: int | None = None,
) -> Comparison:
    """Compare profile ``a`` (before) with ``b`` (after).

    ``a`` and ``b`` are Profiles or paths (read with :func:`opscope.load`; an unreadable one
    raises its :class:`~opscope.errors.InputError`). ``devices`` names each side's device for
    its peaks when the profile does not (or names it wrongly); ``steps_per_epoch`` (else the
    profiles' ``meta["steps_per_epoch"]``) turns the median step into an epoch time. Raises
    :class:`~opscope.errors.AnalysisError` when the two have no operator and no semantic row in
    common.
    """
    pa, src_a = _as_profile(a)
    pb, src_b = _as_profile(b)
    sa = _Side.build(pa, names[0], src_a)
    sb = _Side.build(pb, names[1], src_b)
    notes: list[str] = []
    warnings: list[str] = []

    basis = "device" if (sa.kernels.height and sb.kernels.height) else "host"
    if basis == "host" and (sa.kernels.height or sb.kernels.height):
        notes.append("only one side has device kernels: rows compare host time")

    if sa.n_steps == sb.n_steps:
        scale_a = scale_b = 1.0
        normalisation = f"totals over {sa.n_steps} step(s) each"
    else:
        scale_a, scale_b = float(sa.n_steps), float(sb.n_steps)
        normalisation = f"per-step averages ({sa.n_steps} vs {sb.n_steps} steps)"
    testable = sa.n_steps >= MIN_STEPS and sb.n_steps >= MIN_STEPS
    if not testable:
        notes.append(
            f"fewer than {MIN_STEPS} steps on a side: changes of {MIN_REL_CHANGE:.0%} or more "
            "are 'untested', not tested against step-to-step noise"
        )
    strip = _roots_differ(sa.ops, sb.ops)

    matched: list[pl.DataFrame] = []
    added: list[pl.DataFrame] = []
    removed: list[pl.DataFrame] = []
    resolved: dict[str, tuple[pl.DataFrame, pl.DataFrame]] = {}
    for kind in ROW_KINDS:
        if kind == "semantic":
            fa, fb = sa.semantic_frame(basis, strip), sb.semantic_frame(basis, strip)
        else:
            fa, fb = sa.frame(kind, basis), sb.frame(kind, basis)
        m, add, rem = _match(
            kind,
            fa=fa,
            fb=fb,
            sa=sa,
            sb=sb,
            scale_a=scale_a,
            scale_b=scale_b,
            testable=testable,
            resolved=resolved,
        )
        matched.append(m)
        added.append(add)
        removed.append(rem)
    rows = pl.concat(matched, how="vertical")
    if rows.filter(pl.col("kind").is_in(["op", "semantic"])).height == 0:
        raise AnalysisError(f"no common operators between {src_a} and {src_b}")
    rows = rows.sort(pl.col("delta_us").abs(), "key", descending=[True, False])
    add_df = pl.concat(added, how="vertical").sort("us", "key", descending=[True, False])
    rem_df = pl.concat(removed, how="vertical").sort("us", "key", descending=[True, False])

    step = _step_change(sa, sb, testable)
    roofline, roof_notes = _roofline(rows, sa, sb)
    notes.extend(roof_notes)
    specs = [_device_spec(sa.profile, devices[0]), _device_spec(sb.profile, devices[1])]
    dev_names = (_device_label(sa.profile, devices[0]), _device_label(sb.profile, devices[1]))
    if dev_names[0] != dev_names[1]:
        warnings.append(
            f"the two sides ran on different devices ({dev_names[0]} vs {dev_names[1]}): "
            "a change may be the device's, not the code's"
        )
    heavy, heavy_notes = heavy_rows(
        rows,
        resolved.get("semantic"),
        (sa, sb),
        (scale_a, scale_b),
        (specs[0][0], specs[1][0]),
    )
    for side, (spec, why) in zip((sa, sb), specs, strict=True):
        if spec is None:
            heavy_notes.append(f"{side.name}: utilisation n/a: {why}")
    notes.extend(n for n in heavy_notes if n not in notes)
    sides = pl.DataFrame([sa.summary_row(scale_a), sb.summary_row(scale_b)])
    sides = sides.with_columns(pl.Series("device", list(dev_names), dtype=pl.String))
    if sa.metrics_wall_us is None and sb.metrics_wall_us is None:
        notes.append("no run metrics (metrics.jsonl): samples/s and wall step time omitted")
    explain = explain_step(step, rows, add_df, rem_df, (sa.n_steps, sb.n_steps), scale_a == 1.0)
    spe = (
        steps_per_epoch
        or _meta_int(sa.profile, "steps_per_epoch")
        or _meta_int(sb.profile, "steps_per_epoch")
    )
    summary = _summary(step, sides, heavy, spe, _data_loading_change(sa, sb, testable))
    return Comparison(
        sides=sides,
        rows=rows,
        added=add_df,
        removed=rem_df,
        roofline=roofline,
        summary=summary,
        heavy=heavy,
        explain=explain,
        names=names,
        basis=basis,
        normalisation=normalisation,
        step_before_us=step.before_us,
        step_after_us=step.after_us,
        step_speedup=step.speedup,
        step_significant=step.significant,
        step_noise_us=step.noise_us,
        step_p_value=step.p_value,
        step_verdict=step.verdict,
        steps_per_epoch=spe,
        warnings=tuple(warnings),
        notes=tuple(notes),
    )


def _meta_int(p: Profile, key: str) -> int | None:
    v = p.meta.get(key)
    if v is None and key == "steps_per_epoch":
        # a run directory's run.json: the training DataLoader's length, saved by the recorder
        run = p.meta.get("run")
        steps = run.get("steps") if isinstance(run, dict) else None
        v = steps.get("per_epoch") if isinstance(steps, dict) else None
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None


def _roots_differ(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    """True when the two sides' module trees have different roots (a renamed model class):
    semantic keys then use the path below the root."""

    def roots(ops: pl.DataFrame) -> set[str]:
        m = ops.get_column("module").drop_nulls()
        return set(m.str.split("/").list.first().unique().to_list())

    ra, rb = roots(a), roots(b)
    return bool(ra and rb and not ra & rb)


# One side -----------------------------------------------------------------------------------


def _as_profile(x: Profile | str | os.PathLike[str]) -> tuple[Profile, str]:
    if isinstance(x, Profile):
        sources = x.meta.get("sources") or []
        return x, str(sources[0]) if sources else "profile"
    from opscope.ingest import load

    return load(x), os.fspath(x)


@dataclass(frozen=True)
class _Side:
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
    def build(cls, p: Profile, name: str, source: str) -> _Side:
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
        """Busy (union of device work) and idle time within the step window, over devices."""
        if self.kernels.height == 0:
            return None
        k = (
            self.kernels.join(self.windows, on="rank", how="inner")
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


# Matching -----------------------------------------------------------------------------------


def _match(
    kind: str,
    *,
    fa: pl.DataFrame,
    fb: pl.DataFrame,
    sa: _Side,
    sb: _Side,
    scale_a: float,
    scale_b: float,
    testable: bool,
    resolved: dict[str, tuple[pl.DataFrame, pl.DataFrame]] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Matched, added and removed rows of one kind (``resolved[kind]``: both sides' frames
    with their final ``key`` and ``match``)."""
    label = {
        "op_shape": "shape changed",
        "semantic": "shape changed",
        "kernel": "host op",
        "module": "root renamed",
    }.get(kind, "exact")
    common = set(fa.get_column("key").unique().to_list()) & set(
        fb.get_column("key").unique().to_list()
    )

    def fallbacks(f: pl.DataFrame) -> set[str]:
        un = f.filter(~pl.col("key").is_in(list(common)) & pl.col("fallback").is_not_null())
        return set(un.get_column("fallback").unique().to_list())

    fcommon = fallbacks(fa) & fallbacks(fb)

    def resolve(f: pl.DataFrame) -> pl.DataFrame:
        in_common = pl.col("key").is_in(list(common))
        in_fb = pl.col("fallback").is_in(list(fcommon)) & pl.col("fallback").is_not_null()
        return f.with_columns(
            pl.when(in_common)
            .then(pl.col("key"))
            .when(in_fb)
            .then(pl.col("fallback"))
            .otherwise(pl.col("key"))
            .alias("key"),
            pl.when(in_common)
            .then(pl.lit("exact"))
            .when(in_fb)
            .then(pl.lit(label))
            .otherwise(pl.lit(None, dtype=pl.String))
            .alias("match"),
        )

    ra, rb = resolve(fa), resolve(fb)
    if resolved is not None:
        resolved[kind] = (ra, rb)
    tot_a = _totals(ra, scale_a)
    tot_b = _totals(rb, scale_b)
    mat_a = tot_a.filter(pl.col("match").is_not_null())
    mat_b = tot_b.filter(pl.col("match").is_not_null())
    per_key = stats(
        _per_step(ra.filter(pl.col("match").is_not_null()), sa.steps),
        _per_step(rb.filter(pl.col("match").is_not_null()), sb.steps),
        sa.n_steps,
        sb.n_steps,
    )
    m = (
        mat_a.join(mat_b.drop("match"), on="key", how="inner", suffix="_b")
        .join(per_key, on="key", how="left")
        .filter((pl.col("us") > 0) | (pl.col("us_b") > 0))
    )
    m = significance(
        m.rename(
            {
                "us": "before_us",
                "us_b": "after_us",
                "calls": "calls_before",
                "calls_b": "calls_after",
            }
        ),
        testable,
    ).with_columns(pl.lit(kind).alias("kind"))
    rows = m.select([pl.col(c).cast(t) for c, t in _ROW_SCHEMA.items()])

    def one_side(t: pl.DataFrame) -> pl.DataFrame:
        return (
            t.filter(pl.col("match").is_null() & (pl.col("us") > 0))
            .with_columns(pl.lit(kind).alias("kind"))
            .select([pl.col(c).cast(d) for c, d in _ONE_SIDE_SCHEMA.items()])
        )

    return rows, one_side(tot_b), one_side(tot_a)


def _totals(f: pl.DataFrame, scale: float) -> pl.DataFrame:
    """Per (key, match): time in µs (total, or per step when ``scale`` is the step count), calls."""
    t = f.group_by("key", "match").agg(
        pl.col("t_ns").sum().alias("us"),
        pl.col("calls").sum().cast(pl.Int64).alias("calls"),
    )
    # the summed ns / (1000 * steps): one division of exact parts (units), not a query's product
    return t.with_columns(units.us(t.get_column("us"), per=scale))


def _per_step(f: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per key and step: its time ``v`` (ns), 0 in the steps where it does not run."""
    keys = f.select("key").unique()
    grid = keys.join(steps.select("step"), how="cross")
    per = f.group_by("key", "step").agg(pl.col("t_ns").sum().cast(pl.Float64).alias("v"))
    return (
        grid.join(per, on=["key", "step"], how="left")
        .with_columns(pl.col("v").fill_null(0.0))
        .select("key", "v")
    )


def _step_change(sa: _Side, sb: _Side, testable: bool) -> StepChange:
    """The median step time of each side and whether it changed beyond the noise."""
    r = step_time_change(
        sa.steps.get_column("dur_ns").cast(pl.Float64).to_list(),
        sb.steps.get_column("dur_ns").cast(pl.Float64).to_list(),
        testable,
    )
    return StepChange(
        before_us=r["before_us"],
        after_us=r["after_us"],
        speedup=r["speedup"],
        significant=r["significant"],
        noise_us=r["noise_us"],
        p_value=r["p_value"],
        verdict=r["verdict"],
    )


# Roofline figures of the heaviest matched operators -----------------------------------------


def _roofline(rows: pl.DataFrame, sa: _Side, sb: _Side) -> tuple[pl.DataFrame, list[str]]:
    notes: list[str] = []
    empty = pl.DataFrame(
        schema={
            "key": pl.String,
            "before_tflops": pl.Float64,
            "after_tflops": pl.Float64,
            "before_gbps": pl.Float64,
            "after_gbps": pl.Float64,
        }
    )
    from opscope.analysis.flops import op_costs

    heavy = (
        rows.filter((pl.col("kind") == "op") & (pl.col("match") == "exact"))
        .with_columns(pl.max_horizontal("before_us", "after_us").alias("w"))
        .sort("w", descending=True)
        .head(HEAVY_TOP)
    )
    if heavy.height == 0:
        return empty, notes
    keys = heavy.get_column("key").to_list()
    per_side: list[pl.DataFrame] = []
    for side, col in ((sa, "before_us"), (sb, "after_us")):
        spec, why = _device_spec(side.profile)
        if spec is None:
            notes.append(f"{side.name}: utilisation n/a: {why}")
        ids = side.ops.filter(pl.col("name").is_in(keys)).select("id", "name")
        ev = side.profile.events.join(ids.select("id"), on="id", how="semi")
        costs: pl.DataFrame = op_costs(ev)
        agg = (
            ids.join(costs, on="id", how="left")
            .group_by("name")
            .agg(
                # null, not 0, when no call of the operator has a cost formula
                pl.when(pl.col("flops").is_not_null().any()).then(pl.col("flops").sum()),
                pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()),
                # the dtype and unit (matrix / vector) most of the operator's calls use
                pl.col("dtype").drop_nulls().mode().first().alias("dtype"),
                pl.col("roof").drop_nulls().mode().first().alias("roof"),
            )
            .join(
                heavy.select(pl.col("key").alias("name"), pl.col(col).alias("us")),
                on="name",
            )
        )
        peak_flops = [
            None if spec is None else spec.peak(d, r)
            for d, r in zip(agg["dtype"].to_list(), agg["roof"].to_list(), strict=True)
        ]
        per_side.append(
            agg.with_columns(
                pl.Series("peak_flops", peak_flops, dtype=pl.Float64),
                pl.lit(None if spec is None else spec.mem_bw, dtype=pl.Float64).alias("peak_bw"),
            ).select(
                pl.col("name").alias("key"),
                (pl.col("flops") / pl.col("us") / 1e6).alias("tflops"),
                (pl.col("bytes") / pl.col("us") / 1e3).alias("gbps"),
                (pl.col("flops") / pl.col("us") * 1e6 / pl.col("peak_flops")).alias("flops_util"),
                (pl.col("bytes") / pl.col("us") * 1e6 / pl.col("peak_bw")).alias("bw_util"),
            )
        )
    out = (
        per_side[0]
        .join(per_side[1], on="key", how="inner", suffix="_b")
        .select(
            "key",
            pl.col("tflops").alias("before_tflops"),
            pl.col("tflops_b").alias("after_tflops"),
            pl.col("gbps").alias("before_gbps"),
            pl.col("gbps_b").alias("after_gbps"),
            pl.col("flops_util").alias("before_flops_util"),
            pl.col("flops_util_b").alias("after_flops_util"),
            pl.col("bw_util").alias("before_bw_util"),
            pl.col("bw_util_b").alias("after_bw_util"),
        )
    )
    out = (
        out.filter(pl.col("before_tflops").is_not_null() | pl.col("before_gbps").is_not_null())
        .join(heavy.select("key", "w"), on="key")
        .sort("w", descending=True)
        .drop("w")
    )
    util = ["before_flops_util", "after_flops_util", "before_bw_util", "after_bw_util"]
    if all(out.get_column(c).null_count() == out.height for c in util):
        out = out.drop(util)
    return out, notes


def _device_spec(p: Profile, override: str | None = None) -> tuple[Any, str]:
    """The roofline engineer's peaks for the profile's (first) device, or for ``override``,
    and where they come from."""
    from opscope.analysis import devices

    if override:
        return devices.resolve(override)
    dev = p.devices.filter(pl.col("vendor").fill_null("") != "cpu")
    if dev.height == 0:
        return devices.resolve(None, vendor="cpu")
    d = dev.row(0, named=True)
    return devices.resolve(
        d["name"],
        vendor=d["vendor"],
        compute_units=d["compute_units"],
        memory_bytes=d["memory_bytes"],
    )


def _device_label(p: Profile, override: str | None) -> str:
    """The device a side ran on, as its profile (or ``--device``) names it."""
    if override:
        return override
    dev = p.devices.filter(pl.col("vendor").fill_null("") != "cpu")
    if dev.height:
        name = dev.row(0, named=True)["name"]
        return str(name) if name else "unnamed device"
    return "cpu" if not p.has_device else "unnamed device"


_HEAVY_SCHEMA: Final[dict[str, pl.DataType | type[pl.DataType]]] = {
    "key": pl.String,
    "match": pl.String,
    "before_us": pl.Float64,
    "after_us": pl.Float64,
    "speedup": pl.Float64,
    "verdict": pl.String,
    "noise_us": pl.Float64,
    "before_gbps": pl.Float64,
    "after_gbps": pl.Float64,
    "before_tflops": pl.Float64,
    "after_tflops": pl.Float64,
    "before_flops_util": pl.Float64,
    "after_flops_util": pl.Float64,
    "before_bw_util": pl.Float64,
    "after_bw_util": pl.Float64,
}


def heavy_rows(
    rows: pl.DataFrame,
    frames: tuple[pl.DataFrame, pl.DataFrame] | None,
    sides: tuple[_Side, _Side],
    scales: tuple[float, float],
    specs: tuple[Any, Any],
) -> tuple[pl.DataFrame, list[str]]:
    """Time, achieved GB/s and TFLOP/s and their share of the device's peaks, before and after,
    for the :data:`HEAVY_TOP` heaviest matched semantic rows.

    FLOPs and bytes are :func:`opscope.analysis.flops.op_costs` of the row's anchor operators
    (the roofline's per-op models) over the same steps as the row's time. A utilisation is null
    where that side's peak is unknown.
    """
    notes: list[str] = []
    heavy = (
        rows.filter(pl.col("kind") == "semantic")
        .with_columns(pl.max_horizontal("before_us", "after_us").alias("w"))
        .sort("w", "key", descending=[True, False])
        .head(HEAVY_TOP)
    )
    if heavy.height == 0 or frames is None:
        return pl.DataFrame(schema=_HEAVY_SCHEMA), notes
    from opscope.analysis.flops import op_costs

    keys = heavy.select("key")
    figures: list[pl.DataFrame] = []
    for side, frame, scale, spec in zip(sides, frames, scales, specs, strict=True):
        anchors = (
            frame.filter(pl.col("match").is_not_null() & pl.col("anchor_id").is_not_null())
            .join(keys, on="key", how="semi")
            .select("key", "anchor_id")
            .unique()
        )
        ev = side.profile.events.join(
            anchors.select(pl.col("anchor_id").alias("id")), on="id", how="semi"
        )
        costs = op_costs(ev).rename({"id": "anchor_id"})
        agg = (
            anchors.join(costs, on="anchor_id", how="left")
            .group_by("key")
            .agg(
                # null, not 0, when no anchor of the row has a cost formula
                pl.when(pl.col("flops").is_not_null().any()).then(pl.col("flops").sum()),
                pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()),
                pl.col("dtype").drop_nulls().mode().first().alias("dtype"),
                pl.col("roof").drop_nulls().mode().first().alias("roof"),
            )
        )
        peaks = [
            None if spec is None else spec.peak(d, r)
            for d, r in zip(agg["dtype"].to_list(), agg["roof"].to_list(), strict=True)
        ]
        figures.append(
            agg.with_columns(
                (pl.col("flops").cast(pl.Float64) / scale).alias("flops"),
                (pl.col("bytes").cast(pl.Float64) / scale).alias("bytes"),
                pl.Series("peak_flops", peaks, dtype=pl.Float64),
                pl.lit(None if spec is None else spec.mem_bw, dtype=pl.Float64).alias("peak_bw"),
            ).select("key", "flops", "bytes", "peak_flops", "peak_bw")
        )
    out = heavy.join(figures[0], on="key", how="left").join(
        figures[1], on="key", how="left", suffix="_b"
    )

    def rate(work: str, us: str, unit: float) -> pl.Expr:
        return pl.when(pl.col(us) > 0).then(pl.col(work) / pl.col(us) * 1e6 / unit)

    out = out.with_columns(
        rate("bytes", "before_us", 1e9).alias("before_gbps"),
        rate("bytes_b", "after_us", 1e9).alias("after_gbps"),
        rate("flops", "before_us", 1e12).alias("before_tflops"),
        rate("flops_b", "after_us", 1e12).alias("after_tflops"),
    ).with_columns(
        (pl.col("before_tflops") * 1e12 / pl.col("peak_flops")).alias("before_flops_util"),
        (pl.col("after_tflops") * 1e12 / pl.col("peak_flops_b")).alias("after_flops_util"),
        (pl.col("before_gbps") * 1e9 / pl.col("peak_bw")).alias("before_bw_util"),
        (pl.col("after_gbps") * 1e9 / pl.col("peak_bw_b")).alias("after_bw_util"),
    )
    return out.select([pl.col(c).cast(t) for c, t in _HEAVY_SCHEMA.items()]), notes


_EXPLAIN_SCHEMA: Final[dict[str, pl.DataType | type[pl.DataType]]] = {
    "key": pl.String,  # the semantic row's key; null for the aggregate rows
    "side": pl.String,  # "both" (matched), "before" / "after" (one side only); null: aggregate
    "kind": pl.String,  # "row", "other_matched", "other_one_side", "residual"
    "delta_us": pl.Float64,
}


def explain_step(
    step: StepChange,
    rows: pl.DataFrame,
    added: pl.DataFrame,
    removed: pl.DataFrame,
    n_steps: tuple[int, int],
    totals: bool,
) -> pl.DataFrame:
    """The median step's change split over what explains it (per step, µs).

    The :data:`EXPLAIN_TOP` semantic rows (matched, added or removed) with the largest change
    per step come first (``kind`` ``row``, with its ``key`` and ``side``), then the other
    matched rows (``other_matched``), the other rows on one side only (``other_one_side``) and
    the rest (``residual``: idle gaps, overlap between streams, the difference between a median
    step and the mean of the rows): the sum is the step change.
    """
    na, nb = float(n_steps[0]), float(n_steps[1])
    sem = rows.filter(pl.col("kind") == "semantic")
    # (key, side, delta per step)
    per: list[tuple[str, str, float]] = []
    for r in sem.iter_rows(named=True):
        d = r["after_us"] / nb - r["before_us"] / na if totals else r["after_us"] - r["before_us"]
        per.append((r["key"], "both", d))
    one_sided: list[tuple[str, str, float]] = []
    for df, side, sign, n in ((added, "after", 1.0, nb), (removed, "before", -1.0, na)):
        for r in df.filter(pl.col("kind") == "semantic").iter_rows(named=True):
            one_sided.append((r["key"], side, sign * r["us"] / (n if totals else 1.0)))
    ranked = sorted(per + one_sided, key=lambda x: (-abs(x[2]), x[0], x[1]))
    top = [x for x in ranked[:EXPLAIN_TOP] if x[2] != 0.0]
    shown = {(k, s) for k, s, _ in top}
    out: list[dict[str, Any]] = [
        {"key": k, "side": s, "kind": "row", "delta_us": d} for k, s, d in top
    ]
    rest_m = sum(d for k, s, d in per if (k, s) not in shown)
    rest_o = sum(d for k, s, d in one_sided if (k, s) not in shown)
    out.append({"key": None, "side": None, "kind": "other_matched", "delta_us": rest_m})
    out.append({"key": None, "side": None, "kind": "other_one_side", "delta_us": rest_o})
    total = step.after_us - step.before_us
    covered = sum(float(r["delta_us"]) for r in out)
    out.append({"key": None, "side": None, "kind": "residual", "delta_us": total - covered})
    return pl.DataFrame(out, schema=_EXPLAIN_SCHEMA)


# Summary ------------------------------------------------------------------------------------


def _row(
    metric: str,
    unit: str,
    before: float | None,
    after: float | None,
    *,
    lower_is_better: bool = True,
    speedup: float | None = None,
    verdict: str | None = None,
    noise_us: float | None = None,
    per_step: bool = False,
) -> dict[str, Any]:
    return {
        "metric": metric,
        "unit": unit,
        "before": before,
        "after": after,
        "lower_is_better": lower_is_better,
        "speedup": speedup,
        "verdict": verdict,
        "noise_us": noise_us,
        "per_step": per_step,
    }


def _data_loading_change(sa: _Side, sb: _Side, testable: bool) -> dict[str, Any] | None:
    """The median per-step DataLoader time of each side (the breakdown's ``data_loading_ns``:
    host time in DataLoader calls) under the step time's significance rule; None when neither
    side loads data in its steps.

    It is host time, often outside any device row: ``num_workers=0 -> 4`` moved no kernel, and
    the step change it made was only the "not in any row" residual without this row."""
    from opscope.analysis.registry import Options, run

    per_step: list[list[float]] = []
    for side in (sa, sb):
        try:
            res = run("breakdown", side.profile, Options())
        except AnalysisError:
            return None
        col = res.steps.get_column("data_loading_ns").drop_nulls()  # type: ignore[attr-defined]
        per_step.append(col.cast(pl.Float64).to_list())
    if not (any(per_step[0]) or any(per_step[1])):
        return None
    return step_time_change(per_step[0], per_step[1], testable)


def _summary(
    step: StepChange,
    sides: pl.DataFrame,
    heavy: pl.DataFrame,
    steps_per_epoch: int | None,
    data_loading: dict[str, Any] | None = None,
) -> pl.DataFrame:
    """The headline rows as numbers (see :data:`_SUMMARY_SCHEMA`); the renderers in
    :mod:`opscope.report.compare_render` write them as text."""
    out: list[dict[str, Any]] = []
    a, b = sides.row(0, named=True), sides.row(1, named=True)
    verdict = step.verdict
    out.append(
        _row(
            "step time (median of the profiled steps)",
            "us",
            step.before_us,
            step.after_us,
            speedup=step.speedup,
            verdict=verdict,
            noise_us=step.noise_us,
        )
    )
    if steps_per_epoch:
        out.append(
            _row(
                f"epoch time ({steps_per_epoch} steps × median step)",
                "us",
                step.before_us * steps_per_epoch,
                step.after_us * steps_per_epoch,
                speedup=step.speedup,
                verdict=verdict,
            )
        )
    if data_loading is not None:
        r = data_loading
        out.append(
            _row(
                "data loading (host, median of the profiled steps)",
                "us",
                r["before_us"],
                r["after_us"],
                speedup=r["speedup"],
                verdict=r["verdict"],
                noise_us=r["noise_us"],
            )
        )
    # (label, column, unit, lower is better); device idle only beside device busy
    pairs: list[tuple[str, str, str, bool]] = [
        ("wall step time (run metrics, median)", "metrics_wall_us", "us", True),
        ("samples/s (run metrics, median)", "samples_per_s", "per_s", False),
        ("device busy (all profiled steps)", "device_busy_us", "us", True),
        ("device idle (all profiled steps)", "device_idle_us", "us", True),
        ("peak memory", "peak_mem_bytes", "bytes", True),
    ]
    for label, col, unit, lower in pairs:
        known = "device_busy_us" if col == "device_idle_us" else col
        if a[known] is not None and b[known] is not None:
            out.append(_row(label, unit, float(a[col]), float(b[col]), lower_is_better=lower))
    # the heaviest semantic rows that changed: the key says exactly what the figures cover
    changed = heavy.filter(pl.col("verdict").is_in(["gain", "loss", "untested"]))
    for r in changed.head(SUMMARY_ROWS).iter_rows(named=True):
        out.append(
            _row(
                r["key"],
                "us",
                r["before_us"],
                r["after_us"],
                speedup=r["speedup"],
                verdict=r["verdict"],
                noise_us=r["noise_us"],
                per_step=True,
            )
        )
    if changed.height:
        r = changed.row(0, named=True)
        for metric, col in (
            ("bandwidth utilisation", "bw_util"),
            ("FLOP/s utilisation", "flops_util"),
        ):
            x, y = r[f"before_{col}"], r[f"after_{col}"]
            if x is None and y is None:
                continue
            out.append(_row(f"{metric} ({r['key']})", "fraction", x, y, lower_is_better=False))
    return pl.DataFrame(out, schema=_SUMMARY_SCHEMA)


__all__: Sequence[str] = (
    "ALPHA",
    "MAD_SCALE",
    "MIN_REL_CHANGE",
    "MIN_STEPS",
    "MW_EXACT_MAX",
    "NOISE_K",
    "Comparison",
    "compare",
    "step_time_change",
)
