"""Per-step and per-sample series of one recorded run, and its change points.

From ``metrics.jsonl``: step time (``wall_ns``), throughput (``samples_per_s``) and the device
memory peak, one point per step. Steps the profiler was on for (``profiled``) and the profiler's
warm-up steps before each sample and the step after it are left out of these series: the
profiler's own overhead would otherwise read as a periodic slowdown. From each periodic trace:
the time per step of the top operators (inclusive, device time when the trace has device
work, host time otherwise), one point per sample at the sample's first step.

Change points (see :mod:`opscope.trend.changepoints`) come with the steps before and after and the
comparison (:func:`opscope.analysis.compare.compare`) of the nearest traces on both sides.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import polars as pl

from opscope import units
from opscope.errors import AnalysisError, InputError
from opscope.trend import changepoints as cp

TOP_OPS: Final = 5
"""Operators followed per sample: the heaviest over the whole run."""

MAX_COMPARED: Final = 5
"""Change points that get a trace comparison (each loads two traces); the largest shifts first."""

COMPARE_ROWS: Final = 5
"""Operator rows kept from each change point's comparison."""

METRIC_UNITS: Final = {
    "step_time": "us",
    "samples_per_s": "samples/s",
    "mem_allocated_peak": "bytes",
}


@dataclass(frozen=True)
class Trend:
    """The trend of one run.

    ``series``: long table ``metric, step, value, source`` (``source`` is ``"metrics"`` or
    ``"trace"``; step time in µs, op times in µs per step). ``samples``: one row per periodic
    trace, ``trace, rank, first_step, last_step``. ``change_points``: dicts with ``step, metric,
    before, after, ratio, unit, before_steps, after_steps, noise, comparison``.
    """

    run_dir: str
    steps: int
    series: pl.DataFrame
    samples: pl.DataFrame
    change_points: list[dict[str, Any]]
    top_ops: list[str]
    basis: str
    notes: list[str] = field(default_factory=list)

    def values(self, metric: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one series."""
        s = self.series.filter(pl.col("metric") == metric).sort("step")
        return s.get_column("step").to_list(), s.get_column("value").to_list()

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: ``steps``, ``change_points``, ``series``, ``samples``, ..."""
        series: dict[str, Any] = {}
        for metric in self.series.get_column("metric").unique(maintain_order=True).to_list():
            st, vals = self.values(metric)
            series[metric] = {"unit": _unit(metric), "steps": st, "values": vals}
        return {
            "run": self.run_dir,
            "steps": self.steps,
            "basis": self.basis,
            "change_points": self.change_points,
            "series": series,
            "samples": self.samples.to_dicts(),
            "top_ops": self.top_ops,
            "notes": self.notes,
        }


def _unit(metric: str) -> str:
    return METRIC_UNITS.get(metric, "us/step" if metric.startswith("op:") else "")


def read_settings(run_dir: Path) -> dict[str, Any]:
    """``run.json`` of ``run_dir`` (InputError when absent or not JSON)."""
    f = run_dir / "run.json"
    if not f.is_file():
        raise InputError("not an opscope run directory (no run.json)", run_dir)
    try:
        run = json.loads(f.read_text(encoding="utf-8"))
    except ValueError as e:
        raise InputError(f"run.json is not valid JSON ({e})", f) from None
    if not isinstance(run, dict):
        raise InputError("run.json is not a JSON object", f)
    return run


def step_metrics(run_dir: Path) -> pl.DataFrame:
    """Per step (slowest rank): ``step, wall_ns, samples_per_s, mem_allocated_peak, profiled``.

    InputError when ``metrics.jsonl`` is missing or holds no step.
    """
    from opscope.ingest.rundir import read_metrics

    f = run_dir / "metrics.jsonl"
    if not f.is_file():
        raise InputError("run directory has no metrics.jsonl (nothing to trend)", run_dir)
    m = read_metrics(f)
    if m.height == 0:
        raise InputError("metrics.jsonl holds no step", f)
    return (
        m.filter(pl.col("step").is_not_null())
        .group_by("step")
        .agg(
            pl.col("wall_ns").max(),
            pl.col("samples_per_s").sum(),  # samples of all ranks in the step
            pl.col("mem_allocated_peak").max(),
            pl.col("profiled").fill_null(False).any(),
        )
        .sort("step")
    )


def clean_steps(metrics: pl.DataFrame, warmup: int) -> pl.DataFrame:
    """Steps outside the profiler's windows: not profiled, not one of the ``warmup`` steps before
    a profiled window (the profiler is already on during its warm-up), and not the step right
    after one (it pays for stopping the profiler and writing the trace)."""
    prof = metrics.filter(pl.col("profiled")).get_column("step")
    starts = prof.filter(~(prof - 1).is_in(prof.implode()))
    ends = prof.filter(~(prof + 1).is_in(prof.implode()))
    near = pl.concat([ends + 1, *(starts - k for k in range(1, warmup + 1))])
    return metrics.filter(~pl.col("profiled") & ~pl.col("step").is_in(near.implode()))


def sample_ops(trace: Path) -> tuple[pl.DataFrame, str, float | None]:
    """Per op name: the median over the trace's steps of its per-step inclusive time (ns).

    Columns ``name, ns``; the basis (``"device"`` or ``"host"``); the median step time (ns) of
    the trace's ``ProfilerStep`` ranges (None without them).
    """
    from opscope.analysis.hotspots import op_times
    from opscope.ingest import load

    p = load(trace)
    ops = op_times(p).filter(pl.col("step").is_not_null())
    basis = "device" if p.has_device else "host"
    col = "device_ns" if basis == "device" else "dur_ns"
    steps = ops.select("step").unique()
    per = ops.group_by("name", "step").agg(pl.col(col).sum().alias("ns"))
    # An op absent from a step took 0 ns in it: fill the grid before taking the median.
    grid = per.select("name").unique().join(steps, how="cross")
    full = grid.join(per, on=["name", "step"], how="left").with_columns(pl.col("ns").fill_null(0))
    marks = p.events.filter(pl.col("kind") == "step").get_column("dur_ns")
    if marks.len() == 0:
        marks = p.steps.get_column("dur_ns")
    step_ns = float(marks.median()) if marks.len() else None  # type: ignore[arg-type]
    return full.group_by("name").agg(pl.col("ns").median().cast(pl.Float64)), basis, step_ns


def list_samples(run_dir: Path) -> pl.DataFrame:
    """``trace, rank, first_step`` of the run's Kineto traces (lowest rank only)."""
    import re

    from opscope.ingest.rundir import list_traces

    rows = []
    traces = [t for t in list_traces(run_dir) if t[2] == "kineto"]
    rank0 = min((r for r, _, _ in traces), default=0)
    for r, t, _ in traces:
        if r != rank0:
            continue
        m = re.search(r"step_(\d+)", t.name)
        if m is None:
            continue
        rows.append({"trace": str(t), "rank": r, "first_step": int(m.group(1))})
    schema = {"trace": pl.String, "rank": pl.Int32, "first_step": pl.Int32}
    return pl.DataFrame(rows, schema=schema).sort("first_step")


def trend(run_dir: str | os.PathLike[str], *, compare_traces: bool = True) -> Trend:
    """The :class:`Trend` of a recorded run directory (see the module docstring).

    Raises :class:`~opscope.errors.InputError` for a directory without run.json or metrics.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise InputError("not a directory", path)
    run = read_settings(path)
    prof_settings = run.get("profiler") or {}
    warmup = int(prof_settings.get("warmup") or 0)
    active = int(prof_settings.get("active") or 1)
    metrics = step_metrics(path)
    clean = clean_steps(metrics, warmup)
    notes: list[str] = []
    parts = [
        clean.select(
            pl.lit("step_time").alias("metric"),
            pl.col("step").cast(pl.Int32),
            units.us(clean.get_column("wall_ns"), name="value"),
        ),
        clean.select(
            pl.lit("samples_per_s").alias("metric"),
            pl.col("step").cast(pl.Int32),
            pl.col("samples_per_s").cast(pl.Float64).alias("value"),
        ),
        clean.select(
            pl.lit("mem_allocated_peak").alias("metric"),
            pl.col("step").cast(pl.Int32),
            pl.col("mem_allocated_peak").cast(pl.Float64).alias("value"),
        ),
    ]
    samples = list_samples(path)
    per_sample: list[pl.DataFrame] = []
    bases: set[str] = set()
    step_us: list[float | None] = []
    for row in samples.iter_rows(named=True):  # one load per trace, not per event
        ops, basis, step_ns = sample_ops(Path(row["trace"]))
        bases.add(basis)
        step_us.append(units.us_value(step_ns))
        per_sample.append(ops.with_columns(pl.lit(row["first_step"], pl.Int32).alias("step")))
    basis = bases.pop() if len(bases) == 1 else ("mixed" if bases else "none")
    samples = samples.with_columns(
        (pl.col("first_step") + active - 1).cast(pl.Int32).alias("last_step"),
        pl.Series("step_us", step_us, dtype=pl.Float64),
    )
    top: list[str] = []
    if per_sample:
        allops = pl.concat(per_sample)
        top = (
            allops.group_by("name")
            .agg(pl.col("ns").sum())
            .sort(["ns", "name"], descending=[True, False])
            .head(TOP_OPS)
            .get_column("name")
            .to_list()
        )
        grid = pl.DataFrame({"name": top}).join(samples.select("first_step"), how="cross")
        op_series = grid.join(
            allops, left_on=["name", "first_step"], right_on=["name", "step"], how="left"
        ).select(
            (pl.lit("op:") + pl.col("name")).alias("metric"),
            pl.col("first_step").cast(pl.Int32).alias("step"),
            pl.col("ns").fill_null(0).alias("value"),
        )
        parts.append(op_series.with_columns(units.us(op_series.get_column("value"))))
    else:
        notes.append("no periodic traces: operator series omitted")
    series = (
        pl.concat(parts)
        .filter(pl.col("value").is_not_null() & pl.col("value").is_finite())
        .with_columns(
            pl.when(pl.col("metric").str.starts_with("op:"))
            .then(pl.lit("trace"))
            .otherwise(pl.lit("metrics"))
            .alias("source")
        )
    )
    changes = _changes(series, samples)
    if compare_traces:
        _attach_comparisons(changes, samples, notes)
    return Trend(
        run_dir=str(path),
        steps=metrics.height,
        series=series,
        samples=samples,
        change_points=changes,
        top_ops=top,
        basis=basis,
        notes=notes,
    )


def _changes(series: pl.DataFrame, samples: pl.DataFrame) -> list[dict[str, Any]]:
    """Change points of every series.

    An operator's series is searched as its *share* of its sample's step time: a machine that
    gets busier (co-tenants, frequency scaling) slows every operator of a sample alike, which
    leaves the shares where they were, while an operator that really changed moves its share.
    The figures reported are still µs per step (the medians of each segment).
    """
    share_of = dict(
        zip(
            samples.get_column("first_step").to_list(),
            samples.get_column("step_us").to_list(),
            strict=True,
        )
    )
    out: list[dict[str, Any]] = []
    for metric in series.get_column("metric").unique(maintain_order=True).to_list():
        s = series.filter(pl.col("metric") == metric).sort("step")
        steps = s.get_column("step").to_list()
        vals = s.get_column("value").to_numpy()
        m = cp.MIN_SEGMENT_STEPS
        search = vals
        if metric.startswith("op:"):
            m = cp.MIN_SEGMENT_SAMPLES
            denom = np.array([share_of.get(st) or np.nan for st in steps], dtype=np.float64)
            if np.isfinite(denom).all() and (denom > 0).all():
                search = vals / denom
        for c in cp.detect(search, m):
            before = vals[c.before_range[0] : c.before_range[1]]
            after = vals[c.after_range[0] : c.after_range[1]]
            b, a = float(np.median(before)), float(np.median(after))
            if metric.startswith("op:") and not _material(a - b, steps, c, share_of):
                continue
            out.append(
                {
                    "step": steps[c.index],
                    "metric": metric,
                    "unit": _unit(metric),
                    "before": b,
                    "after": a,
                    "ratio": a / b if b else None,
                    "noise": c.noise if search is vals else None,
                    "before_steps": [steps[c.before_range[0]], steps[c.before_range[1] - 1]],
                    "after_steps": [steps[c.after_range[0]], steps[c.after_range[1] - 1]],
                    "comparison": None,
                }
            )
    return sorted(out, key=lambda d: (d["step"], d["metric"]))


MIN_STEP_SHARE = 0.01
"""An operator's change point is reported only when it moves the step by at least this share of
the step time (median over the samples on both sides): a 25 % swing of a 70 µs operator in a
10 ms step is cache noise from a co-tenant, not a regression anyone can act on."""


def _material(
    delta_us: float, steps: list[int], c: cp.ChangePoint, step_us: dict[int, Any]
) -> bool:
    around = [step_us.get(steps[i]) for i in range(c.before_range[0], c.after_range[1])]
    known = [float(x) for x in around if x]
    if not known:
        return True
    return abs(delta_us) >= MIN_STEP_SHARE * float(np.median(known))


def _attach_comparisons(
    changes: list[dict[str, Any]], samples: pl.DataFrame, notes: list[str]
) -> None:
    """Compare the last trace before and the first trace at/after each change point."""
    from opscope.analysis.compare import compare
    from opscope.ingest import load

    def shift(c: dict[str, Any]) -> float:
        r = c["ratio"]
        return abs(r - 1.0) if r else 0.0

    chosen = sorted(changes, key=shift, reverse=True)[:MAX_COMPARED]
    if len(changes) > len(chosen):
        notes.append(f"only the {MAX_COMPARED} largest change points carry a trace comparison")
    cache: dict[tuple[str, str], dict[str, Any]] = {}
    for c in chosen:
        before = samples.filter(pl.col("last_step") < c["step"]).tail(1)
        after = samples.filter(pl.col("first_step") >= c["step"]).head(1)
        if before.height == 0 or after.height == 0:
            continue
        a, b = before.item(0, "trace"), after.item(0, "trace")
        if (a, b) not in cache:
            try:
                comp = compare(load(a), load(b), names=(Path(a).name, Path(b).name))
            except AnalysisError as e:
                cache[(a, b)] = {"before_trace": a, "after_trace": b, "error": str(e)}
            else:
                j = comp.to_json()
                ops = [r for r in j["rows"] if r["kind"] == "op"][:COMPARE_ROWS]
                cache[(a, b)] = {
                    "before_trace": a,
                    "after_trace": b,
                    "basis": j["basis"],
                    "step_time": j["step_time"],
                    "rows": ops,
                }
        c["comparison"] = cache[(a, b)]
