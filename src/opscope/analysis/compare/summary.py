"""What a comparison says first: the rows that explain the step change, and the summary
table's headline figures (as numbers; :mod:`opscope.report.compare_render` writes them)."""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from opscope.analysis.compare.side import Side
from opscope.analysis.compare.stats import StepChange, step_time_change
from opscope.errors import AnalysisError

SUMMARY_ROWS: Final = 5
"""How many matched operators with a significant change the summary names."""

EXPLAIN_TOP: Final = 5
"""How many semantic rows the headline names as explaining the step-time change."""

SUMMARY_SCHEMA: Final[dict[str, pl.DataType | type[pl.DataType]]] = {
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


def data_loading_change(sa: Side, sb: Side, testable: bool) -> dict[str, Any] | None:
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


def summary_rows(
    step: StepChange,
    sides: pl.DataFrame,
    heavy: pl.DataFrame,
    steps_per_epoch: int | None,
    data_loading: dict[str, Any] | None = None,
) -> pl.DataFrame:
    """The headline rows as numbers (see :data:`SUMMARY_SCHEMA`); the renderers in
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
    return pl.DataFrame(out, schema=SUMMARY_SCHEMA)
