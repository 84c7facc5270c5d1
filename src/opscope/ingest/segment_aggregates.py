"""Per-segment aggregates of the out-of-core load (issue 24; docs/lazy-analyses.md).

While :mod:`opscope.ingest.window_link` writes each linked segment, :class:`Collector` takes
that segment's partial tables for ``hotspots`` and ``breakdown`` from the frame it holds
anyway; at the end they are merged (small group-bys of the partials) and written into the
entry as ``aggregates/<table>.parquet``, listed in ``meta["out_of_core"]["aggregates"]``.
:mod:`opscope.analysis.stored_aggregates` turns them into the analyses' results without
reading the events.

Why each partial is exact (the cut rule of window_link: no event spans a cut, and the records
of one flow, correlation, external id and sequence number stay on one side):

- **ops and kernels** (per name, name + shapes, kernel type, step + name): an op's children,
  the kernels it launched and its descendants' kernels lie in its segment, so its self and
  device times are the in-memory ones; counts, integer sums, minima and maxima merge exactly.
  The mean is stored as the integer sum and the count of non-null durations: Polars' mean of an
  integer column is that quotient (checked by the equality tests);
- **time base**: the first start and last end per rank;
- **attribution** (modules, source lines): a backward op's forward op comes through a
  ``fwdbwd`` flow or its sequence number, neither of which crosses a cut; each segment checks
  that every ``fwd_id`` it holds is its own (else the charges are not stored and the analysis
  recomputes them). Charges are keyed by the provisional stack id, renumbered at the end;
- **breakdown**: a step window is a ``step`` event, so it lies in one segment with every event
  overlapping it; each segment computes the steps and streams rows of its own windows with the
  analysis' own code. The launch queue is zero at a cut (a launch call and its work are on one
  side), so its area, maximum and busy time per stream add up across segments. The step
  statistics depend on the windows alone and are recomputed at read time;
- the **queued-before-profiling** fix applied at the end (some device work's step becomes
  null) is applied to the partials too, from those rows of the written events.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from opscope.model import Profile, kinds
from opscope.model.profile import WRITE_OPTIONS

ENV = "OPSCOPE_OOC_AGGREGATES"
"""Set to ``0`` to write no aggregates (the analyses then recompute: a comparison run)."""

VERSION = 1
"""Format of the stored aggregates (its ``version``)."""

FOLDER = "aggregates"
"""The entry's sub-folder holding them."""

# name -> its key columns; every table also holds ``calls``, ``total_ns``, ``self_ns``,
# ``n_dur`` (non-null durations: the mean's count), ``min_ns``, ``max_ns`` (and, for ops,
# ``device_ns``, ``device_self_ns``)
OP_KEYS: dict[str, list[str]] = {
    "ops": ["name"],
    "op_shapes": ["name", "input_dims", "input_types"],
}
KERNEL_KEYS: dict[str, list[str]] = {
    "kernels": ["name"],
    "kernel_types": ["op_type", "core_type"],
}
CHARGE_KEYS = ["stack_id", "module", "is_backward", "device"]
QUEUE_KEYS = ["rank", "device", "stream"]


def enabled() -> bool:
    """Whether the out-of-core load writes the aggregates (``$OPSCOPE_OOC_AGGREGATES``)."""
    return os.environ.get(ENV, "1") != "0"


def _sums(device: bool) -> list[pl.Expr]:
    out = [
        pl.len().cast(pl.Int64).alias("calls"),
        pl.col("dur_ns").sum().alias("total_ns"),
        pl.col("self_ns").sum().alias("self_ns"),
        pl.col("dur_ns").count().cast(pl.Int64).alias("n_dur"),
        pl.col("dur_ns").min().alias("min_ns"),
        pl.col("dur_ns").max().alias("max_ns"),
    ]
    if device:
        out += [pl.col("device_ns").sum(), pl.col("device_self_ns").sum()]
    return out


def _merge_sums(device: bool) -> list[pl.Expr]:
    out = [
        pl.col("calls", "total_ns", "self_ns", "n_dur").sum(),
        pl.col("min_ns").min(),
        pl.col("max_ns").max(),
    ]
    if device:
        out.append(pl.col("device_ns", "device_self_ns").sum())
    return out


_STEP_SUMS = [
    pl.len().cast(pl.Int64).alias("calls"),
    pl.col("dur_ns").sum().alias("total_ns"),
    pl.col("self_ns").sum().alias("self_ns"),
]


@dataclass
class Collector:
    """The partial tables of every segment so far (see the module doc)."""

    parts: dict[str, list[pl.DataFrame]] = field(default_factory=dict)
    has_device: bool = False
    attribution_exact: bool = True
    breakdown: bool = True
    segments: int = 0
    error: str | None = None  # why none are stored (the load itself went on)

    def _put(self, name: str, df: pl.DataFrame) -> None:
        self.parts.setdefault(name, []).append(df)

    def _failed(self, exc: Exception) -> None:
        # The aggregates only spare the analyses a recomputation: an unexpected failure here
        # must not fail a load that is correct without them. It is kept in the entry's meta
        # (``aggregates.error``), and the analyses take their usual path.
        self.error = f"{type(exc).__name__}: {exc}"
        self.parts.clear()

    def add(self, ev: pl.DataFrame, steps: pl.DataFrame, offset: int) -> None:
        """One linked segment: its events (final ids from ``offset``, provisional stack ids),
        conformed to the events schema; ``steps``: the whole trace's steps table."""
        self.segments += 1
        if not ev.height or self.error is not None:
            return
        try:
            self._add(ev, steps, offset)
        except Exception as exc:  # (see _failed)
            self._failed(exc)

    def _add(self, ev: pl.DataFrame, steps: pl.DataFrame, offset: int) -> None:
        from opscope.analysis import hotspots as hs

        p = Profile.from_tables(events=ev, steps=steps)
        kern = p.kernels.with_columns(pl.col("dur_ns").alias("self_ns"))
        self.has_device = self.has_device or kern.height > 0
        ops = hs.op_times(p)
        for name, keys in OP_KEYS.items():
            self._put(name, ops.group_by(keys).agg(_sums(True)))
        self._put("kernels", kern.group_by("name").agg(_sums(False)))
        self._put(
            "kernel_types",
            kern.filter(pl.col("op_type").is_not_null())
            .group_by(KERNEL_KEYS["kernel_types"])
            .agg(_sums(False)),
        )
        self._put(
            "per_step",
            pl.concat(
                [
                    ops.group_by("step", "name")
                    .agg(_STEP_SUMS)
                    .with_columns(pl.lit("op").alias("what")),
                    kern.group_by("step", "name")
                    .agg(_STEP_SUMS)
                    .with_columns(pl.lit("kernel").alias("what")),
                ]
            ),
        )
        self._put(
            "time_base",
            ev.group_by("rank").agg(
                pl.col("ts_ns").min().alias("t0"),
                (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("t1"),
            ),
        )
        if self.attribution_exact:
            fwd = ev.get_column("fwd_id").drop_nulls()
            if fwd.len() and not bool(((fwd >= offset) & (fwd < offset + ev.height)).all()):
                self.attribution_exact = False  # (a forward op in another segment)
                self.parts.pop("charges", None)
            else:
                self._put("charges", _charges(p))
        if self.breakdown:
            if steps.height:
                self._breakdown(p, ev)
            else:  # one window per rank spans every segment: not per segment
                self.breakdown = False
                for name in ("bd_steps", "bd_streams", "bd_queue"):
                    self.parts.pop(name, None)

    def _breakdown(self, p: Profile, ev: pl.DataFrame) -> None:
        from opscope.analysis import breakdown as bd

        inp = bd._inputs(p)
        lo, hi = ev.get_column("ts_ns").min(), ev.get_column("ts_ns").max()
        # this segment's windows: those whose step event it holds (segments are disjoint in
        # time, so each window's start falls in one segment's [first, last] start)
        own = inp.win.filter(pl.col("w0").is_between(lo, hi))
        if own.height:
            res = bd._breakdown_of(dataclasses.replace(inp, win=own, has_dev=True), per_trace=False)
            self._put("bd_steps", res.steps)
            self._put("bd_streams", res.streams)
        self._put("bd_queue", _queue_parts(inp.dev, inp.win))

    def finish(
        self,
        folder: Path,
        *,
        final_stacks: np.ndarray,
        early: np.ndarray,
        events_file: Path,
        had_steps: bool,
    ) -> dict[str, Any] | None:
        """Merge the partials, apply the end's fixes, write ``folder/aggregates/*.parquet``;
        returns ``meta["out_of_core"]["aggregates"]`` (None, nothing written, for a trace
        without events; ``{"error": ...}`` when they failed: none stored).
        ``final_stacks``: the final id of each provisional stack id; ``early``: ids of the
        queued-before-profiling work (their step becomes null); ``events_file``: the written
        events, before that fix."""
        if self.error is None:
            try:
                return self._finish(folder, final_stacks, early, events_file, had_steps)
            except Exception as exc:  # (see _failed)
                self._failed(exc)
                shutil.rmtree(folder / FOLDER, ignore_errors=True)
        return {"error": self.error, "segments": self.segments}

    def _finish(
        self,
        folder: Path,
        final_stacks: np.ndarray,
        early: np.ndarray,
        events_file: Path,
        had_steps: bool,
    ) -> dict[str, Any] | None:
        if "ops" not in self.parts:
            return None
        if early.size:
            self._unstep(early, events_file, had_steps)
        out: dict[str, pl.DataFrame] = {}
        for name, keys in {**OP_KEYS, **KERNEL_KEYS}.items():
            device = name in OP_KEYS
            out[name] = _merged(self.parts.get(name), keys, _merge_sums(device))
        per_step = _merged(
            self.parts.get("per_step"),
            ["what", "step", "name"],
            [pl.col("calls", "total_ns", "self_ns").sum()],
        )
        out["per_step"] = per_step.filter(pl.col("calls") > 0) if early.size else per_step
        out["time_base"] = _merged(
            self.parts.get("time_base"), ["rank"], [pl.col("t0").min(), pl.col("t1").max()]
        )
        if self.attribution_exact and "charges" in self.parts:
            ch = _merged(self.parts["charges"], CHARGE_KEYS, [pl.col("time_ns", "n").sum()])
            ch = ch.filter(pl.col("n") > 0) if early.size else ch
            if final_stacks.size:
                prov = ch.get_column("stack_id")
                idx = prov.fill_null(0).to_numpy()
                mapped = pl.Series("stack_id", final_stacks[idx], dtype=pl.Int64)
                ch = ch.with_columns(pl.when(prov.is_null()).then(None).otherwise(mapped))
            out["charges"] = ch
        if self.breakdown and "bd_queue" in self.parts:
            for name in ("bd_steps", "bd_streams"):
                if name in self.parts:
                    out[name] = pl.concat(self.parts[name], how="vertical_relaxed")
            out["bd_queue"] = _merged(
                self.parts["bd_queue"],
                QUEUE_KEYS,
                [pl.col("area").sum(), pl.col("max").max(), pl.col("busy").sum()],
            )
        d = folder / FOLDER
        d.mkdir(exist_ok=True)
        files = {}
        for name, df in out.items():
            path = d / f"{name}.parquet"
            df.write_parquet(path, **WRITE_OPTIONS)
            files[name] = path.stat().st_size
        return {
            "version": VERSION,
            "tables": files,
            "has_device": self.has_device,
            "attribution": self.attribution_exact and "charges" in out,
            "breakdown": self.breakdown and "bd_queue" in out,
            "segments": self.segments,
        }

    def _unstep(self, early: np.ndarray, events_file: Path, had_steps: bool) -> None:
        """The queued-before-profiling fix: these device rows' step becomes null (their
        per-step rows move to the null step; with steps, their charges are dropped, as
        ``attribution.charges`` drops device work of no op and no step)."""
        rows = (
            pl.scan_parquet(events_file)
            .filter(pl.col("id").is_in(pl.Series(early, dtype=pl.Int64).implode()))
            .filter(pl.col("kind").is_in(kinds.DEVICE_WORK))
            .select("step", "name", "dur_ns", "op_id")
            .collect()
        )
        if not rows.height:
            return
        dur = pl.col("dur_ns")
        old = rows.group_by("step", "name").agg(
            (-pl.len().cast(pl.Int64)).alias("calls"),
            (-dur.sum()).alias("total_ns"),
            (-dur.sum()).alias("self_ns"),
        )
        new = rows.group_by("name").agg(
            pl.len().cast(pl.Int64).alias("calls"),
            dur.sum().alias("total_ns"),
            dur.sum().alias("self_ns"),
        )
        new = new.select(pl.lit(None, rows.schema["step"]).alias("step"), pl.all())
        for df in (old, new):
            self._put("per_step", df.with_columns(pl.lit("kernel").alias("what")))
        if had_steps and "charges" in self.parts:
            gone = rows.filter(pl.col("op_id").is_null() & pl.col("step").is_not_null())
            if gone.height:
                self._put(
                    "charges",
                    gone.select(
                        pl.lit(None, pl.Int64).alias("stack_id"),
                        pl.lit(None, pl.String).alias("module"),
                        pl.lit(False).alias("is_backward"),
                        pl.lit(True).alias("device"),
                        (-dur.sum()).alias("time_ns"),
                        (-pl.len().cast(pl.Int64)).alias("n"),
                    ),
                )


def collector() -> Collector | None:
    """A new :class:`Collector`, or None when :func:`enabled` says not to write them."""
    return Collector() if enabled() else None


def _merged(parts: list[pl.DataFrame] | None, keys: list[str], aggs: list[pl.Expr]) -> pl.DataFrame:
    """The partials summed per ``keys`` (null keys are a group, as in the analyses)."""
    if not parts:
        return pl.DataFrame()
    df = pl.concat(parts, how="vertical_relaxed")
    return df.group_by(keys).agg(aggs).sort(keys, nulls_last=True)


def _charges(p: Profile) -> pl.DataFrame:
    """``attribution.charges`` of one segment, keyed by stack id instead of the user frame
    (the stacks are numbered at the end): summed time and count per :data:`CHARGE_KEYS`."""
    from opscope.analysis.attribution import charge_rows

    # one query on the eager calls' engine (each eager step was a query of its own)
    return (
        charge_rows(p, ["stack_id", "module"])
        .group_by(CHARGE_KEYS)
        .agg(pl.col("time_ns").sum(), pl.len().cast(pl.Int64).alias("n"))
        .collect(engine="in-memory")
    )


def _queue_parts(dev: pl.DataFrame, win: pl.DataFrame) -> pl.DataFrame:
    """``breakdown.queue_lengths``' sums of one segment over the whole trace's range per rank:
    ``area`` (queue length x time), ``max`` (longest queue over a non-empty stretch; null when
    none) and ``busy`` (time with work queued) per stream. The queue is empty at a cut (every
    launch call and its work are on one side), so the stretch from a segment's last point to the
    next segment's first adds nothing but a zero length."""
    out_schema = {
        "rank": pl.Int32, "device": pl.Int32, "stream": pl.Int64,
        "area": pl.Int64, "max": pl.Int64, "busy": pl.Int64,
    }  # fmt: skip
    if not dev.height or not win.height:
        return pl.DataFrame(schema=out_schema)
    from opscope.analysis.breakdown import queue_stretches

    rng = (
        win.lazy()
        .group_by("rank")
        .agg(pl.col("w0").min().alias("r0"), pl.col("w1").max().alias("r1"))
    )
    lane = list(QUEUE_KEYS)
    return (
        queue_stretches(dev.lazy(), rng, lane)
        .group_by(lane)
        .agg(
            (pl.col("q") * pl.col("len")).sum().alias("area"),
            pl.col("q").filter(pl.col("len") > 0).max().alias("max"),
            pl.col("len").filter(pl.col("q") > 0).sum().alias("busy"),
        )
        .select([pl.col(c).cast(t) for c, t in out_schema.items()])
        .collect(engine="in-memory")
    )
