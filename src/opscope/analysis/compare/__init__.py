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

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import polars as pl

from opscope import units
from opscope.analysis.compare.figures import (
    HEAVY_TOP,
    device_label,
    device_spec,
    heavy_rows,
    operator_roofline,
)
from opscope.analysis.compare.side import Side, as_profile
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
from opscope.analysis.compare.summary import (
    EXPLAIN_TOP,
    SUMMARY_ROWS,
    data_loading_change,
    explain_step,
    summary_rows,
)
from opscope.analysis.registry import Result
from opscope.errors import AnalysisError
from opscope.model import Profile, kinds

ROW_KINDS: Final = ("semantic", "op", "op_shape", "kernel", "module", "line")
"""Row kinds; ``semantic`` rows are keyed by what the work is (:mod:`.semantic`)."""

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
      lower_is_better, speedup, verdict, noise_us, per_step``
      (:data:`opscope.analysis.compare.summary.SUMMARY_SCHEMA`); every label says what its
      figures cover. :mod:`opscope.report.compare_render` writes them.
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
    pa, src_a = as_profile(a)
    pb, src_b = as_profile(b)
    sa = Side.build(pa, names[0], src_a)
    sb = Side.build(pb, names[1], src_b)
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
    roofline, roof_notes = operator_roofline(rows, sa, sb)
    notes.extend(roof_notes)
    specs = [device_spec(sa.profile, devices[0]), device_spec(sb.profile, devices[1])]
    dev_names = (device_label(sa.profile, devices[0]), device_label(sb.profile, devices[1]))
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
    summary = summary_rows(step, sides, heavy, spe, data_loading_change(sa, sb, testable))
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


# Matching -----------------------------------------------------------------------------------


def _match(
    kind: str,
    *,
    fa: pl.DataFrame,
    fb: pl.DataFrame,
    sa: Side,
    sb: Side,
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


def _step_change(sa: Side, sb: Side, testable: bool) -> StepChange:
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


__all__: Sequence[str] = (
    "ALPHA",
    "EXPLAIN_TOP",
    "HEAVY_TOP",
    "MAD_SCALE",
    "MIN_REL_CHANGE",
    "MIN_STEPS",
    "MW_EXACT_MAX",
    "NOISE_K",
    "SUMMARY_ROWS",
    "Comparison",
    "compare",
    "step_time_change",
)
