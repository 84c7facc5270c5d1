"""Anomalies: calls far slower than their own group, and shapes far below their op's efficiency.

**Slow calls.** Calls are grouped by (name, input shapes, dtypes): kernels (with their launching
op's shapes) when the profile has device work, host ops otherwise. Within a group of at least
:data:`MIN_CALLS`, a call is an outlier when it is all of

- above ``median + Z * spread`` (:data:`Z`), with ``spread = max(1.4826 * MAD,
  MIN_REL_SPREAD * median)`` so that a group of identical durations (MAD 0) does not flag noise;
- at least :data:`MIN_RATIO` times the median (the minimum effect size);
- at least :data:`MIN_EXCESS_NS` longer than the median (below that nobody can act on it).

A host op whose excess is mostly (≥ half) the excess of outlier ops nested in it is not reported
itself: the nested one is the cause. A group of host ops needs :data:`MIN_OUTLIERS_HOST`
outliers (one slow host call may be a preemption), a kernel group :data:`MIN_OUTLIERS_DEVICE`.
A group is reported only when its outliers are unlikely
under the rate of outliers in the *other* groups (binomial tail < :data:`ALPHA`): on a real
machine a preempted thread makes an isolated call slow anywhere, and that background rate must not
read as an anomaly; on a profile with no outliers elsewhere, any outlier is reported.

**Inefficient shapes.** Per op name, each (shapes, dtypes) group's achieved rate (FLOP/s, else
bytes/s, from :func:`opscope.analysis.flops.op_costs`, else the trace's ``flops``) is compared with
the best rate of the op's other shapes that are no larger (fewer FLOPs or bytes per call): a
larger shape running :data:`EFF_RATIO` times slower per FLOP than a smaller one is anomalous; a
small shape running slowly is just latency. Rates use the ops' device time, so this part
needs device work: host durations of ops on a loaded CPU are set by scheduling more than by the
shape (we measured a 0.5 MFLOP matmul at 10 ms per call on a 2-core machine at load 9).
Groups whose calls average under :data:`MIN_EFF_DUR_NS` are not judged.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import polars as pl

from opscope.analysis import tree as _tree  # its SHORTCUTS switch, read when used
from opscope.analysis.flops import host_op_costs
from opscope.analysis.hotspots import op_times, rows_of
from opscope.analysis.registry import Options, Result, analysis
from opscope.analysis.tree import host_forest, no_ops
from opscope.model import Profile

#: Robust z-score above which a call is far outside its group (5 MADs: ~1e-6 for a normal).
Z = 5.0
#: The minimum effect size: an outlier takes at least 3x its group's median (a loaded machine
#: makes identical small calls vary 2x; the cases worth finding are 5-20x).
MIN_RATIO = 3.0
#: Floor of the spread, relative to the median, so identical durations (MAD 0) need a real jump.
MIN_REL_SPREAD = 0.05
#: Below this excess over the median (10 µs) a slow call is not worth anyone's time.
MIN_EXCESS_NS = 10_000
#: A median and MAD need a few calls to mean anything.
MIN_CALLS = 3
#: Outlier calls a host-op group needs: the OS deschedules a host thread at random, so one slow
#: host call can't be told from a preemption; a device kernel is not preempted, one is enough.
MIN_OUTLIERS_HOST = 2
MIN_OUTLIERS_DEVICE = 1
#: Significance of a group's outlier count against the background rate of the other groups.
ALPHA = 1e-3
#: A shape is inefficient when its rate is below this fraction of a no-larger shape's (5x slower).
EFF_RATIO = 0.2
#: Shapes whose calls average under 20 µs are latency-bound; their rate says nothing.
MIN_EFF_DUR_NS = 20_000

_GROUP = ["what", "name", "input_dims", "input_types"]


@dataclass(frozen=True)
class Anomalies(Result):
    """``groups``: one row per anomalous group; ``calls``: its outlier calls (``event_id``);
    ``efficiency``: shapes far below the efficiency of their op's other shapes."""

    groups: pl.DataFrame
    calls: pl.DataFrame
    efficiency: pl.DataFrame
    top: int = 20

    def to_json(self) -> list[dict[str, Any]]:
        """One dict per anomalous group: name, input_shapes, calls, outlier_calls, median_us,
        outlier_median_us, steps (plus kind, input_types, ts_us of the outliers); then the
        inefficient shapes with ``"kind": "efficiency"``."""
        out, eff = rows_of([(self.groups, self.top), (self.efficiency, self.top)])
        for r in eff:
            out.append({"kind": "efficiency", **r})
        return out


def _binom_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), for any ``n`` without overflow.

    Sums the probability terms of the smaller side in log space: ``log pmf(k)`` from
    :func:`math.lgamma`, then the neighbours by the ratio ``pmf(i+1)/pmf(i)``, stopping once the
    rest of the (geometrically shrinking) tail is below 1e-17 of the sum. The upper side is summed
    when ``k`` is past the mode, else ``1 - P(X <= k-1)``: either way every term shrinks away from
    ``k``, and the subtraction from 1 happens only when the result is at least about a half.
    """
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    q = 1.0 - p
    odds = p / q
    upper = k > (n + 1) * p - 1  # pmf(i+1) <= pmf(i) for every i >= k
    i = k if upper else k - 1
    log_first = (
        math.lgamma(n + 1)
        - math.lgamma(i + 1)
        - math.lgamma(n - i + 1)
        + i * math.log(p)
        + (n - i) * math.log1p(-p)
    )
    total, term = 1.0, 1.0  # relative to pmf(i)
    while True:
        if upper:
            if i >= n:
                break
            ratio = (n - i) / (i + 1) * odds
            i += 1
        else:
            if i <= 0:
                break
            ratio = i / (n - i + 1) / odds
            i -= 1
        term *= ratio
        total += term
        # the ratios keep shrinking, so the rest is at most term * ratio / (1 - ratio)
        if ratio < 1.0 and term * ratio / (1.0 - ratio) < 1e-17 * total:
            break
    side = math.exp(log_first + math.log(total))
    return min(1.0, side) if upper else max(0.0, 1.0 - side)


def _calls(profile: Profile) -> pl.LazyFrame:
    """The calls judged: id, what, name, input_dims, input_types, step, ts_ns, dur_ns (a plan:
    slow_calls' queries start from it)."""
    # Profile.ops and Profile.kernels are filtered once per profile (a filter of the events
    # copies all their columns)
    return _calls_of(profile.kernels if profile.has_device else None, profile.ops)


def _calls_of(kernels: pl.DataFrame | None, ops_: pl.DataFrame) -> pl.LazyFrame:
    """:func:`_calls` of the device work ``kernels`` (None: a profile without) and the host
    ops ``ops_``."""
    if kernels is not None:
        ops = ops_.lazy().select(pl.col("id").alias("op_id"), "input_dims", "input_types")
        return (
            kernels.lazy()
            .select("id", "name", "op_id", "step", "ts_ns", "dur_ns")
            .join(ops, on="op_id", how="left")
            .with_columns(pl.lit("kernel").alias("what"))
            .drop("op_id")
        )
    return ops_.lazy().select(
        "id",
        pl.lit("op").alias("what"),
        "name",
        "input_dims",
        "input_types",
        "step",
        "ts_ns",
        "dur_ns",
    )


#: The columns :func:`_calls` reads of the device work and of the host ops.
_KERNEL_READ: Final = ("id", "name", "op_id", "step", "ts_ns", "dur_ns")
_OP_READ: Final = ("id", "name", "input_dims", "input_types", "step", "ts_ns", "dur_ns")


def no_group_judged(profile: Profile) -> bool:
    """Whether no group of calls has :data:`MIN_CALLS` calls: none has as many calls of one
    name (a group is one name's calls of one shape, a null name one group too). Counted in
    Python over the first names, so that a trace of repeated names answers after a few rows;
    past them, too few distinct names for the calls answers (each holding at most
    ``MIN_CALLS - 1``), else every name is counted (no query: a Series' unique counts is one)."""
    names = (profile.kernels if profile.has_device else profile.ops).get_column("name")
    if len(names) > _FIRST_NAMES:
        if _too_many(names.head(_FIRST_NAMES).to_list()):
            return False
        if names.n_unique() * (MIN_CALLS - 1) < len(names):
            return False
    return not _too_many(names.to_list())


def _too_many(names: list[Any]) -> bool:
    """Whether a value of ``names`` occurs :data:`MIN_CALLS` times."""
    seen: dict[Any, int] = {}
    for v in names:
        k = seen[v] = seen.get(v, 0) + 1
        if k >= MIN_CALLS:
            return True
    return False


_FIRST_NAMES = 64

_CallsKey = tuple[bool, _tree.SchemaKey, _tree.SchemaKey]


def _calls_key(profile: Profile) -> _CallsKey:
    """What the schema of :func:`_calls` depends on: whether the profile has device work, the
    types of the columns it reads of the device work and of the ops."""
    ops = profile.ops
    if profile.has_device:
        k = profile.kernels
        return (
            True,
            tuple((c, k.get_column(c).dtype) for c in _KERNEL_READ),
            tuple((c, ops.get_column(c).dtype) for c in ("id", "input_dims", "input_types")),
        )
    return False, (), tuple((c, ops.get_column(c).dtype) for c in _OP_READ)


@functools.cache
def _outliers_schema(key: _CallsKey) -> _tree.SchemaKey:
    """The schema of :func:`slow_calls`' outliers (without ``_judged``) for calls of ``key``."""
    device, kern, ops = key
    calls = _calls_of(
        pl.DataFrame(schema=dict(kern)) if device else None, pl.DataFrame(schema=dict(ops))
    )
    schema = _outliers(calls).schema
    return tuple((c, t) for c, t in schema.items() if c != "_judged")


def slow_calls(profile: Profile) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(groups, calls) of significant slow outliers, as described in the module doc."""
    # One query to the outliers: each call's group statistics as window expressions over its
    # group (a group-by joined back on four keys computed the calls twice: 8 ms on a 75k-event
    # trace), and the count of calls in groups large enough to judge as a column of every row.
    # The groups without an outlier are never read again: a group is reported for its
    # outliers, and the background rate needs only the totals.
    if _tree.SHORTCUTS and no_group_judged(profile):
        # no group large enough to judge (a trace of a few unique collectives): the empty
        # tables from the schemas, without the query that finds no outlier (~0.8 ms)
        g_key, c_key = _empty_schemas(_outliers_schema(_calls_key(profile)))
        return _tree.empty_frame(g_key), _tree.empty_frame(c_key)
    out = _outliers(_calls(profile))
    total_n = int(out.get_column("_judged")[0]) if out.height else 0
    # (the frame rebuilt without the column: a drop is a query)
    out = pl.DataFrame([c for c in out.get_columns() if c.name != "_judged"])
    if out.height and not profile.has_device:
        out = _without_nested(profile, out)
    keep = []
    if out.height:
        # the outliers per group (their count, the group's calls) in Python over the outliers
        # (a group_by was a query; which group is judged first changes nothing: the tables
        # below are sorted)
        per: dict[tuple[Any, ...], list[int]] = {}
        for key, n in zip(
            zip(*(out.get_column(c).to_list() for c in _GROUP), strict=True),
            out.get_column("n").to_list(),
            strict=True,
        ):
            got = per.get(key)
            if got is None:
                per[key] = [1, n]
            else:
                got[0] += 1
        total_k = out.height
        min_k = MIN_OUTLIERS_DEVICE if profile.has_device else MIN_OUTLIERS_HOST
        for key, (k, n) in per.items():
            if k < min_k:
                continue
            rest_n = total_n - n
            p0 = (total_k - k) / rest_n if rest_n else 0.0
            if _binom_tail(int(k), int(n), p0) < ALPHA:
                keep.append(dict(zip(_GROUP, key, strict=True)))
    if not keep and no_outliers_shortcut():
        # no group reported (most profiles): the plans' empty tables, their schemas resolved
        # once per process (tests/test_anomalies.py runs both ways)
        g_key, c_key = _empty_schemas(_tree.schema_key(out.schema))
        return _tree.empty_frame(g_key), _tree.empty_frame(c_key)
    if keep and _tree.SHORTCUTS:
        # the few outliers of the reported groups in Python (the plans were ~0.5 ms of queries
        # of fixed cost; they run with the shortcuts off, tests/test_anomalies.py compares)
        return _report_tables(out, keep)
    if not keep:
        kept = out.clear().lazy()
    else:
        kept = out.lazy().join(
            pl.DataFrame(keep, schema={k: out.schema[k] for k in _GROUP}).lazy(),
            on=_GROUP,
            nulls_equal=True,
        )
    groups, calls = pl.collect_all(
        list(_report_plans(kept)), engine="in-memory", optimizations=_tree.EAGER_FLAGS
    )
    return groups, calls


def _report_tables(
    out: pl.DataFrame, keep: list[dict[str, Any]]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`_report_plans`' tables of the outliers ``out`` of the groups ``keep``: each
    group's figures (medians of durations, sums of half-nanosecond excesses: exact floats in any
    order) and its outliers, in the plans' orders (the groups by excess descending, then their
    keys, nulls last; the calls by start and id) and schemas."""
    g_key, c_key = _empty_schemas(_tree.schema_key(out.schema))
    wanted = {tuple(k[c] for c in _GROUP) for k in keep}
    cols = {c: out.get_column(c).to_list() for c in (*_GROUP, "n", "med", "excess", "dur_ns")}
    cols |= {c: out.get_column(c).to_list() for c in ("step", "ts_ns", "id")}
    by_key: dict[tuple[Any, ...], list[int]] = {}
    for i, key in enumerate(zip(*(cols[c] for c in _GROUP), strict=True)):
        if key in wanted:
            by_key.setdefault(key, []).append(i)

    def nulls_first(v: Any) -> tuple[bool, Any]:
        return (v is not None, v if v is not None else 0)

    groups = []
    for key, at in by_key.items():
        dur = sorted(cols["dur_ns"][i] for i in at)
        half = len(dur) // 2
        median = float(dur[half]) if len(dur) % 2 else (dur[half - 1] + dur[half]) / 2
        steps = sorted({cols["step"][i] for i in at}, key=nulls_first)
        ts = sorted((cols["ts_ns"][i] for i in at), key=nulls_first)
        excess = sum(cols["excess"][i] for i in at)
        groups.append(
            (*key, cols["n"][at[0]], len(at), cols["med"][at[0]], median, excess, steps, ts)
        )
    # (the keys are unique: Python's order of strings is Polars', by code point)
    groups.sort(key=lambda g: (-g[8], *((v is None, v or "") for v in (g[1], g[0], g[2], g[3]))))
    rows = [i for at in by_key.values() for i in at]
    rows.sort(key=lambda i: (nulls_first(cols["ts_ns"][i]), cols["id"][i]))
    calls = pl.DataFrame([out.get_column(_CALL_SOURCE[c]).alias(c) for c, _ in c_key])
    calls = calls[pl.Series(rows, dtype=pl.UInt32)]  # (a UInt32 index: no conversion)
    return pl.DataFrame(groups, schema=dict(g_key), orient="row"), calls


#: The column of the outliers that each column of the reported calls is.
_CALL_SOURCE: Final = {
    "event_id": "id", "kind": "what", "name": "name", "input_shapes": "input_dims",
    "input_types": "input_types", "step": "step", "ts_ns": "ts_ns", "dur_ns": "dur_ns",
    "typical_ns": "med",
}  # fmt: skip


@functools.cache
def _empty_schemas(key: _tree.SchemaKey) -> tuple[_tree.SchemaKey, _tree.SchemaKey]:
    """The schemas of :func:`_report_plans`' tables for outliers of schema ``key``."""
    g, c = _report_plans(pl.LazyFrame(schema=dict(key)))
    return _tree.schema_key(g.collect_schema()), _tree.schema_key(c.collect_schema())


def _report_plans(kept: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """The plans of the reported groups and of their outlier calls, from the outliers of the
    reported groups."""
    aggs, calls = _report_columns()
    groups_plan = (
        kept.group_by(_GROUP)
        .agg(*aggs)
        .rename({"what": "kind", "input_dims": "input_shapes"})
        # ties by every group key: group_by's row order varies with the thread count
        .sort(
            ["excess_ns", "name", "kind", "input_shapes", "input_types"],
            descending=[True, False, False, False, False],
            nulls_last=True,
        )
    )
    return groups_plan, kept.select(*calls).sort("ts_ns", "event_id")


@functools.cache
def _report_columns() -> tuple[tuple[pl.Expr, ...], tuple[pl.Expr | str, ...]]:
    """(:func:`_report_plans`' group aggregates, its calls' columns), built once per process."""
    aggs = (
        pl.col("n").first().alias("calls"),
        pl.len().alias("outlier_calls"),
        pl.col("med").first().alias("median_ns"),
        pl.col("dur_ns").median().alias("outlier_median_ns"),
        pl.col("excess").sum().alias("excess_ns"),
        pl.col("step").unique().sort().alias("steps"),
        pl.col("ts_ns").sort().alias("ts_ns"),
    )
    calls = (
        pl.col("id").alias("event_id"),
        pl.col("what").alias("kind"),
        "name",
        pl.col("input_dims").alias("input_shapes"),
        "input_types",
        "step",
        "ts_ns",
        "dur_ns",
        pl.col("med").alias("typical_ns"),
    )
    return aggs, calls


def _without_nested(profile: Profile, out: pl.DataFrame) -> pl.DataFrame:
    """The host outliers ``out`` less those whose excess is mostly (at least half) the summed
    excess of the outliers nested in them (at any depth): the nested one is the cause.

    Walks up from the outliers only, over the profile's host forest (built once per profile:
    :func:`opscope.analysis.tree.host_forest`), in NumPy (the filter of the events, a forest
    of its own and three joins, a group-by and a filter were ~3 ms of a 2.5k-event report;
    every (event, ancestor) pair of the host tree was 0.14 s on a 138k-event trace). The
    excesses are whole or half nanoseconds (a duration less a median of durations): their sums
    are exact in any order."""
    _, forest = host_forest(profile)
    pos = forest.positions(out.get_column("id"))
    idx, anc, _ = forest.ancestor_pairs(pos)
    # each forest position's outlier (-1: none), so that each pair whose ancestor is an
    # outlier credits it with the nested one's excess
    which = np.full(len(forest) + 1, -1, dtype=np.int64)
    which[np.where(pos >= 0, pos, len(forest))] = np.arange(len(pos))
    which[len(forest)] = -1
    to = which[anc]
    excess = out.get_column("excess").to_numpy()
    inner = np.zeros(len(pos), dtype=np.float64)
    np.add.at(inner, to[to >= 0], excess[idx[to >= 0]])
    keep = pl.Series(inner < 0.5 * excess)
    return pl.DataFrame([c.filter(keep) for c in out.get_columns()])  # (a frame's is a query)


def _outliers(c: pl.LazyFrame) -> pl.DataFrame:
    """The outlier calls of ``c`` (:func:`_calls`) with their group's ``n``, ``med`` and
    ``mad``, the excess over the median, and ``_judged``: the calls in groups large enough to
    judge (on every row). One query."""
    # The groups too small to judge dropped before their medians (a whole group goes or stays:
    # the medians of those kept are the same), the spread from the median column, not a second
    # median per group: 1.5 -> 1.0 ms on a 1.2k-call trace (hta_sampled rank-0)
    n, judged, med, mad, count, hit, excess = _outlier_columns()
    return (
        c.with_columns(n)
        .filter(judged)
        .with_columns(med)
        .with_columns(mad)
        .with_columns(count)
        .filter(hit)
        .with_columns(excess)
        # the eager calls' optimisations: the plan reads the columns it needs already (the
        # default passes were ~0.2 ms of its 1.5-3 ms)
        .collect(engine="in-memory", optimizations=_tree.EAGER_FLAGS)
    )


@functools.cache
def _outlier_columns() -> tuple[pl.Expr, ...]:
    """:func:`_outliers`' steps: the group's calls, the judged groups, the median, the median
    absolute deviation, the judged calls, the outlier test and the excess; built once per
    process (~30 expressions of Python each report)."""
    dur, by = pl.col("dur_ns"), _GROUP
    spread = pl.max_horizontal(1.4826 * pl.col("mad"), MIN_REL_SPREAD * pl.col("med"))
    return (
        pl.len().over(by).alias("n"),
        pl.col("n") >= MIN_CALLS,
        dur.median().over(by).alias("med"),
        (dur - pl.col("med")).abs().median().over(by).alias("mad"),
        pl.len().alias("_judged"),
        (dur > pl.col("med") + Z * spread)
        & (dur >= MIN_RATIO * pl.col("med"))
        & (dur - pl.col("med") >= MIN_EXCESS_NS),
        (dur - pl.col("med")).alias("excess"),
    )


def no_outliers_shortcut() -> bool:
    """Whether :func:`slow_calls` skips its last query when no group is reported (the
    analyses' shortcuts switch, :data:`opscope.analysis.tree.SHORTCUTS`)."""
    return _tree.SHORTCUTS


def inefficient_shapes(profile: Profile) -> pl.DataFrame:
    """Shapes of an op running far below a no-larger shape of the same op (see module doc)."""
    if no_ops(profile):
        # no op, no shape to judge (a trace of kernels only): the empty table without the
        # dozen fixed-cost queries that would find it empty
        return _tree.empty_frame(_EFFICIENCY_KEY)
    # each metric's rows one query with the groups' plan (each eager step was a query). Each
    # op's FLOPs and bytes: the roofline engineer's formulas, else the trace's flops. By
    # position, not two joins on id: the op times, the op costs and the ops are the same
    # rows in the same order (each is the cached cpu_op rows, row for row)
    costs, ops = host_op_costs(profile), profile.ops
    if _tree.SHORTCUTS and not any(
        df.get_column(c).null_count() < df.height
        for df, c in ((costs, "flops"), (ops, "flops"), (costs, "bytes"))
    ):
        # no op with FLOPs or bytes (ops recorded without shapes: alexnet cuda_sync's): no
        # rate to compare, the empty table without the three queries that find none (from
        # the columns' null counts: no query)
        return _tree.empty_frame(_EFFICIENCY_KEY)
    t = (
        op_times(profile)
        .lazy()
        .with_columns(
            pl.col("device_ns").alias("time_ns"),
            pl.coalesce(pl.lit(costs.get_column("flops")), pl.lit(ops.get_column("flops"))),
            pl.lit(costs.get_column("bytes")),
        )
        .filter(pl.col("time_ns") > 0)
    )
    g = (
        t.group_by("name", "input_dims", "input_types")
        .agg(
            pl.len().alias("calls"),
            pl.col("time_ns").sum(),
            pl.col("flops").sum().alias("flops"),
            pl.col("bytes").sum().alias("bytes"),
            pl.col("flops").mean().alias("flops_per_call"),
            pl.col("bytes").mean().alias("bytes_per_call"),
        )
        .filter(pl.col("time_ns") / pl.col("calls") >= MIN_EFF_DUR_NS)
        # each metric's rate beside it: the rows of both metrics from one query (a query per
        # metric grouped the ops again: ~0.9 ms each on a 2.4k-op trace)
        .with_columns(
            (pl.col(m) / pl.col("time_ns") * 1e9).alias(f"rate_{m}") for m in ("flops", "bytes")
        )
        .sort("name", "input_dims", "input_types", nulls_last=True)
    )
    groups = g.collect(engine="in-memory")
    # the columns read as lists, once (a dict per group, to_dicts', and a copy of it per metric
    # were most of the Python here: ~1 ms of 525 groups on hta_sampled rank-0)
    col = {c: groups.get_column(c).to_list() for c in _GROUP_COLUMNS}
    out: list[dict[str, Any]] = []
    for metric, size in (("flops", "flops_per_call"), ("bytes", "bytes_per_call")):
        # the groups of one name are contiguous in the sorted rows: split them in Python (each
        # group of a group_by iterated is a query of its own, a fixed cost per op name); a
        # metric's rows are those where it is above 0 (a null is not)
        by_name: dict[Any, list[int]] = {}
        for i, (name, v) in enumerate(zip(col["name"], col[metric], strict=True)):
            if v is not None and v > 0:
                by_name.setdefault(name, []).append(i)
        rate, sizes = col[f"rate_{metric}"], col[size]
        for at in by_name.values():
            if len(at) < 2:
                continue
            refs = _reference_rates([sizes[i] for i in at], [rate[i] for i in at])
            for i, best in zip(at, refs, strict=True):
                if best is not None and rate[i] < EFF_RATIO * best:
                    out.append(
                        {
                            "name": col["name"][i],
                            "input_shapes": col["input_dims"][i],
                            "input_types": col["input_types"][i],
                            "metric": metric,
                            "calls": col["calls"][i],
                            "rate": rate[i],
                            "reference_rate": best,
                            "ratio": rate[i] / best,
                            "time_ns": col["time_ns"][i],
                        }
                    )
        if out:
            break  # judge by FLOP/s where FLOPs are known; bytes/s only otherwise
    # by time, largest first, then the shape's keys, nulls last (equal times: the groups above
    # come in no fixed order): the keys are unique (one metric, one row per group), so Python's
    # sort gives Polars' order (strings by code point, as UTF-8 bytes compare) without a query
    out.sort(key=_efficiency_order)
    return pl.DataFrame(out, schema=_EFFICIENCY_SCHEMA)


#: The columns of :func:`inefficient_shapes`' groups read in Python.
_GROUP_COLUMNS: Final = (
    "name", "input_dims", "input_types", "calls", "time_ns", "flops", "bytes", "flops_per_call",
    "bytes_per_call", "rate_flops", "rate_bytes",
)  # fmt: skip


def _efficiency_order(r: dict[str, Any]) -> tuple[Any, ...]:
    """The sort key of an efficiency row: time descending, then name, shapes, types (nulls
    last) and metric."""
    keys = (r["name"], r["input_shapes"], r["input_types"])
    return (-r["time_ns"], *((v is None, v or "") for v in keys), r["metric"])


def _reference_rates(sizes: list[Any], rates: list[Any]) -> list[Any]:
    """Per shape of one op (its size per call and its rate), the highest rate of the op's
    other shapes no larger (None when there is none). By one sort of the sizes, a running
    maximum over the smaller ones and the two best of each size (the pairwise loop it replaces
    was quadratic in an op's shapes: ~1 ms of a 4.8k-event rank's report)."""
    order = sorted(range(len(sizes)), key=sizes.__getitem__)
    out: list[Any] = [None] * len(sizes)
    below: Any = None  # the best rate of the sizes smaller than the current one
    i = 0
    while i < len(order):
        j = i
        while j < len(order) and sizes[order[j]] == sizes[order[i]]:
            j += 1
        same = order[i:j]
        same_rates = [rates[k] for k in same]
        # the best of the other shapes of this size: the best one's is the second best
        first = max(range(len(same_rates)), key=same_rates.__getitem__)
        top = same_rates[first]
        second = max(same_rates[:first] + same_rates[first + 1 :], default=None)
        for n, k in enumerate(same):
            other = second if n == first else top
            if other is None or below is None:
                out[k] = below if other is None else other
            else:
                out[k] = max(other, below)
        below = top if below is None else max(below, top)
        i = j
    return out


_EFFICIENCY_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "name": pl.String,
    "input_shapes": pl.String,
    "input_types": pl.String,
    "metric": pl.String,
    "calls": pl.UInt32,
    "rate": pl.Float64,
    "reference_rate": pl.Float64,
    "ratio": pl.Float64,
    "time_ns": pl.Int64,
}
_EFFICIENCY_KEY: Final = _tree.schema_key(_EFFICIENCY_SCHEMA)


@analysis("anomalies")
def anomalies(profile: Profile, options: Options) -> Anomalies:
    """Slow outlier calls and inefficient shapes: see :class:`Anomalies`."""
    groups, calls = slow_calls(profile)
    return Anomalies(
        groups=groups, calls=calls, efficiency=inefficient_shapes(profile), top=options.top
    )
