"""Helpers shared by the rules: device, steps, shapes and dtypes, op costs, source locations.

Private to :mod:`opscope.advise`. Source locations are the report's attribution
(:func:`opscope.analysis.attribution.resolve_ops`): a finding and the report name one line.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import polars as pl

from opscope.advise._regex import PY_MAX_TESTS, py_hits
from opscope.advise.finding import Finding, finding_id
from opscope.analysis.small_frames import codes_in_order
from opscope.analysis.tree import Memo, gather, int_values, not_null
from opscope.model import Profile, dtypes, kinds

MAX_WALK = 48  # deepest op nesting followed when walking parent links

# Per-profile results shared by the rules of one advise() run: keyed by the helper's name and
# the events table's identity (the rules run on threads: each is computed once, the others wait).
# A report's rules hold ~27-31 values (75k-event trace: 31); one more than the memo holds would
# evict one still needed and compute it again (tests/test_report_memos.py).
_MEMO = Memo(64)


def _memo(name: str, profile: Profile, fn: Any) -> Any:
    return _MEMO.get((name, id(profile.events)), profile.events, fn)


#: Bytes per element and display name by canonical dtype name (:mod:`opscope.model.dtypes`).
DTYPE_BYTES: dict[str, int] = {n: d.itemsize for n, d in dtypes.DTYPES.items()}
SHORT_DTYPE: dict[str, str] = {n: d.short for n, d in dtypes.DTYPES.items()}


def norm_dtype(t: str | None) -> str | None:
    """The canonical (torch) dtype name of a trace's spelling: ``"c10::BFloat16"`` (Kineto) and
    ``"DT_BF16"`` (Ascend) are ``"bfloat16"``; what is no dtype (``"Scalar"``) stays, lower case."""
    if not t:
        return None
    return dtypes.canonical(t) or t.strip().lower()


def parse_dims(s: str | None) -> list[list[int]] | None:
    """Shapes from compact JSON ``[[256,1024],[1024]]`` or Ascend's ``"256,1024;1024"``.

    Cached (the same strings repeat across calls): callers must not mutate the result."""
    return _parse_dims(s)


@functools.lru_cache(maxsize=1 << 16)
def _parse_dims(s: str | None) -> list[list[int]] | None:
    if s is None:
        return None
    s = s.strip().strip('"').strip()
    if not s or s.upper() == "N/A":
        return None
    if s.startswith("["):
        try:
            v = json.loads(s)
        except ValueError:
            return None
        out: list[list[int]] = []
        for d in v if isinstance(v, list) else []:
            if isinstance(d, list) and all(isinstance(x, int) for x in d):
                out.append([int(x) for x in d])
            else:
                out.append([])  # scalars, tensor lists: no shape
        return out
    out = []
    for part in s.split(";"):
        try:
            out.append([int(x) for x in part.split(",") if x.strip()])
        except ValueError:
            out.append([])
    return out


def parse_types(s: str | None) -> list[str | None]:
    """Dtypes from compact JSON ``["float","float"]`` or Ascend's ``DT_BF16;DT_BF16``.

    A new list each call (callers may change it) of a cached parse: the same strings repeat
    across a report's rules (a JSON decode per distinct pair per rule was ~0.7 ms a rule on a
    4.8k-event rank)."""
    return list(_parse_types(s))


@functools.lru_cache(maxsize=1 << 16)
def _parse_types(s: str | None) -> tuple[str | None, ...]:
    if s is None:
        return ()
    s = s.strip()
    if s.startswith("["):
        try:
            v = json.loads(s)
        except ValueError:
            return ()
        return tuple(norm_dtype(x) if isinstance(x, str) else None for x in v)
    return tuple(norm_dtype(x) for x in s.split(";"))


# Devices -------------------------------------------------------------------------------------

#: The devices advice can target (not device-activity kinds: those are in opscope.model.kinds).
TARGET_DEVICES = ("cpu", "nvidia", "amd", "ascend")


def device_kind(profile: Profile) -> str:
    """``"cpu"``, ``"nvidia"``, ``"amd"`` or ``"ascend"``: the device the profile ran on."""
    out: str = _memo("device_kind", profile, lambda: _device_kind(profile))
    return out


def _device_kind(profile: Profile) -> str:
    if profile.meta.get("format") == "ascend":
        return "ascend"
    dev = profile.devices
    if dev.height:
        vendors = [str(v).lower() for v in dev.get_column("vendor").drop_nulls().to_list()]
        for v in ("ascend", "nvidia", "amd"):
            if v in vendors:
                return v
        names = " ".join(str(n).lower() for n in dev.get_column("name").drop_nulls().to_list())
        if "ascend" in names:
            return "ascend"
        if any(w in names for w in ("nvidia", "tesla", "a100", "h100", "v100", "geforce")):
            return "nvidia"
        if any(w in names for w in ("amd", "instinct", "mi250", "mi300", "radeon")):
            return "amd"
    if profile.has_device:
        # both patterns in one query (a Series' str.contains is one each), over the distinct
        # names on a large table
        ascend, amd = (
            bool(hit.any())
            for hit in pattern_masks(
                profile,
                "kernels",
                (ASCEND_KERNELS, AMD_KERNELS),
            )
        )
        if ascend:
            return "ascend"
        if amd:
            return "amd"
        return "nvidia"
    return "cpu"


def device_name(profile: Profile) -> str | None:
    """The first non-CPU device name of the profile, if any (once a profile)."""

    def run() -> str | None:
        # in Python over the few devices (a filter of them was a query); a null vendor is no CPU
        dev = profile.devices
        vendors, names = (dev.get_column(c).to_list() for c in ("vendor", "name"))
        gpu = [n for v, n in zip(vendors, names, strict=True) if v != "cpu" and n is not None]
        return str(gpu[0]) if gpu else None

    out: str | None = _memo("device_name", profile, run)
    return out


def _kind_codes(profile: Profile) -> tuple[Any, dict[str, int]]:
    """Each event's kind as its code (-1 for none) and the code of each kind name, once a
    profile: a kind's mask is then an array comparison, where a comparison of the kind
    column with a name (or a filter of the events by kind) is a query of fixed cost."""

    def run() -> tuple[Any, dict[str, int]]:
        from opscope.ingest.link import kind_codes

        kind = profile.events.get_column("kind")
        if not isinstance(kind.dtype, pl.Enum):  # not the model's Enum: its names as one
            text = kind.cast(pl.String)
            kind = text.cast(pl.Enum(text.drop_nulls().unique(maintain_order=True)))
        if kind.null_count():
            codes, cats = kind_codes(kind)
            codes = np.where(codes == len(cats), -1, codes)  # (a null kind: no kind's code)
        else:  # the Enum's codes as they are (a fill_null and a cast were ~0.1 ms of queries)
            cats = kind.dtype.categories.to_list()  # type: ignore[attr-defined]
            codes = kind.to_physical().to_numpy().astype(np.int64)
        return codes, {str(n): i for i, n in enumerate(cats)}

    out: tuple[Any, dict[str, int]] = _memo("kind_codes", profile, run)
    return out


def kind_mask(profile: Profile, *kind_names: str) -> Any:
    """Per event, whether its kind is one of ``kind_names`` (a boolean array; false for an
    event without a kind, as a filter drops it)."""
    codes, at = _kind_codes(profile)
    # (the kinds the profile holds only: an isin of a few codes was ~25 µs)
    held = kind_counts(profile)
    want = [at[k] for k in kind_names if k in held]
    if not want:
        return np.zeros(len(codes), dtype=bool)
    if len(want) == 1:
        return codes == want[0]
    return np.isin(codes, np.array(want, dtype=np.int64))


def kind_mask_except(profile: Profile, *kind_names: str) -> Any:
    """Per event, whether it has a kind and it is none of ``kind_names`` (a boolean array; a
    filter on the kind differing from a name drops an event without a kind)."""
    codes, at = _kind_codes(profile)
    held = kind_counts(profile)
    drop = [at[k] for k in kind_names if k in held]
    if len(drop) <= 1:  # (none or one the profile holds: a comparison, not an isin)
        return (codes >= 0) & (codes != (drop[0] if drop else -1))
    return (codes >= 0) & ~np.isin(codes, np.array(drop, dtype=np.int64))


def kind_counts(profile: Profile) -> dict[str, int]:
    """How many events of each kind the profile holds (kinds it has none of: absent)."""

    def run() -> dict[str, int]:
        codes, at = _kind_codes(profile)
        n = np.bincount(codes[codes >= 0], minlength=len(at))
        return {k: int(n[i]) for k, i in at.items() if n[i]}

    out: dict[str, int] = _memo("kind_counts", profile, run)
    return out


def absent(profile: Profile, *kind_names: str) -> bool:
    """Whether the profile holds no event of any of ``kind_names`` (and the shortcuts,
    :data:`opscope.analysis.tree.SHORTCUTS`, are on): a rule that reads only those events
    finds nothing, and returns before its queries."""
    return fewer(profile, 1, *kind_names)


def fewer(profile: Profile, n: int, *kind_names: str) -> bool:
    """Whether the profile holds fewer than ``n`` events of ``kind_names`` together (and the
    shortcuts are on): a rule that needs at least ``n`` of them returns before its queries."""
    from opscope.analysis import tree

    if not tree.SHORTCUTS:
        return False
    counts = kind_counts(profile)
    return sum(counts.get(k, 0) for k in kind_names) < n


#: Kernel names only Ascend's (and AMD's) libraries give: the device of a profile without one
#: named.
ASCEND_KERNELS = r"(?i)aclnn|aicore|MatMulV\d"
AMD_KERNELS = r"(?i)^(void )?(hip|rocm|ck_|Cijk_)"


def target_of(profile: Profile, results: Mapping[str, Any]) -> str:
    """The device the advice is for: ``results["target"]`` or the profile's own device."""
    t = results.get("target")
    if t in (None, "", "auto"):
        return device_kind(profile)
    t = str(t).lower()
    aliases = {"cuda": "nvidia", "gpu": "nvidia", "npu": "ascend", "rocm": "amd", "hip": "amd"}
    t = aliases.get(t, t)
    if t not in TARGET_DEVICES:
        raise ValueError(f"unknown target device {t!r} (one of {', '.join(TARGET_DEVICES)})")
    return t


# Steps ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepInfo:
    """How many steps the profile holds and how long one takes (ns)."""

    n: int
    step_ns: float

    def per_step_us(self, total_ns: float) -> float:
        """A profile-wide total (ns) as µs per step."""
        return total_ns / max(self.n, 1) / 1000.0

    def pct(self, total_ns: float) -> float:
        """A profile-wide total (ns) as % of step time."""
        if self.step_ns <= 0:
            return 0.0
        return 100.0 * total_ns / max(self.n, 1) / self.step_ns


def step_info(profile: Profile) -> StepInfo:
    """Steps from the ``steps`` table (first rank), else the whole span counts as one step."""
    out: StepInfo = _memo("step_info", profile, lambda: _step_info(profile))
    return out


def _step_info(profile: Profile) -> StepInfo:
    st = profile.steps
    if st.height:
        rank = st.get_column("rank")
        r0 = rank.min()
        # (Series reads: a filter and a drop_nulls are queries of fixed cost, and a table of
        # one rank's steps without a missing duration, the usual one, needs neither)
        if r0 is not None and (rank.null_count() or rank.max() != r0):
            st = st.filter(pl.col("rank") == r0)
        dur = st.get_column("dur_ns")
        if dur.null_count():
            dur = dur.drop_nulls()
        if dur.len():
            return StepInfo(int(dur.len()), float(dur.mean()))  # type: ignore[arg-type]
    ev = profile.events
    if ev.height == 0:
        return StepInfo(1, 0.0)
    if not absent(profile, "step"):
        steps = ev.filter(pl.col("kind") == "step")
        if steps.height:
            return StepInfo(steps.height, float(steps.get_column("dur_ns").mean()))  # type: ignore[arg-type]
    span = ev.select((pl.col("ts_ns") + pl.col("dur_ns")).max() - pl.col("ts_ns").min()).item()
    return StepInfo(1, float(span or 0))


# Costs ---------------------------------------------------------------------------------------


def ancestors(profile: Profile, ids: pl.Series | None = None) -> pl.DataFrame:
    """``[id, anc_id, hops]``: each of ``ids`` (default every event) with each of its ancestors
    (and itself at hops 0), up to ``MAX_WALK - 1`` hops."""
    forest = _forest(profile)
    if ids is None:
        start = profile.events.get_column("id")
    elif not ids.null_count():
        # the distinct ids in NumPy (a Series' unique is a query; its order is none in
        # particular either)
        start = pl.Series(ids.name, np.unique(ids.cast(pl.Int64).to_numpy()), dtype=pl.Int64)
    else:
        start = ids.cast(pl.Int64).unique()
    i, anc, hops = forest.ancestor_pairs(event_positions(profile, start), max_depth=MAX_WALK - 1)
    own = start.to_numpy()
    if start.null_count() == 0 and start.dtype == pl.Int64:
        # the ids themselves (hops 0) then their ancestors, as arrays: one frame built, not two
        # and their concatenation (three fixed-cost queries per call)
        return pl.DataFrame(
            {
                "id": np.concatenate([own, own[i]]),
                "anc_id": np.concatenate([own, forest.ids[anc]]),
                "hops": np.concatenate([np.zeros(len(own), np.int32), hops.astype(np.int32)]),
            },
            schema={"id": pl.Int64, "anc_id": pl.Int64, "hops": pl.Int32},
        )
    return pl.concat(
        [
            pl.DataFrame({"id": start, "anc_id": start}).with_columns(pl.lit(0).alias("hops")),
            pl.DataFrame(
                {"id": own[i], "anc_id": forest.ids[anc], "hops": hops.astype(np.int32)},
                schema={"id": pl.Int64, "anc_id": pl.Int64, "hops": pl.Int32},
            ),
        ]
    )


def _forest(profile: Profile) -> Any:
    """The parent links of every event as arrays (:class:`opscope.analysis.tree.Forest`)."""
    from opscope.analysis.tree import Forest

    def run() -> Forest:
        # Forest.of with the parents found through the events' index (their ids are their
        # positions on a loaded trace: no sort of every id, 2-3 ms on a 75k-event trace)
        ev = profile.events
        ids = ev.get_column("id").to_numpy().astype(np.int64, copy=False)
        return Forest(ids, event_positions(profile, ev.get_column("parent_id")))

    return _memo("forest", profile, run)


@dataclass(frozen=True)
class _Index:
    """Positions of an id column by value: the column's own when its ids are its positions
    (every loaded trace's events), else its stable sort order (the first row of a repeated
    id, as :meth:`Forest.positions` finds it)."""

    n: int
    order: Any  # None when dense
    keys: Any

    @classmethod
    def of(cls, ids: pl.Series) -> _Index:
        if ids.null_count() == 0 and _dense(ids):
            return cls(ids.len(), None, None)
        arr = (ids.fill_null(-1) if ids.null_count() else ids).to_numpy().astype(np.int64)
        # a null id is found by no lookup: its key is past every real one's reach
        order = np.argsort(arr, kind="stable")
        keys = arr[order]
        if ids.null_count():
            nulls = ids.is_null().to_numpy()[order]
            order, keys = order[~nulls], keys[~nulls]
        return cls(ids.len(), order, keys)

    def find(self, wanted: Any) -> Any:
        """The position of each of ``wanted`` (int64 array), -1 where absent."""
        want = np.asarray(wanted, dtype=np.int64)
        if self.order is None:
            return np.where((want >= 0) & (want < self.n), want, -1)
        out = np.full(len(want), -1, dtype=np.int64)
        if not len(self.keys):
            return out
        at = np.searchsorted(self.keys, want)
        at_c = np.minimum(at, len(self.keys) - 1)
        found = (at < len(self.keys)) & (self.keys[at_c] == want)
        out[found] = self.order[at_c[found]]
        return out


def _dense(ids: pl.Series) -> bool:
    return bool(np.array_equal(ids.to_numpy(), np.arange(ids.len(), dtype=np.int64)))


def event_positions(profile: Profile, ids: pl.Series) -> Any:
    """The row of each of ``ids`` in ``profile.events`` (its :func:`_forest` position), -1 for
    a null id or one not there: :meth:`Forest.positions` without its sort of every id on each
    call (5-7 calls a report, 1 ms each on a 75k-event trace)."""
    index: _Index = _memo("event_index", profile, lambda: _Index.of(profile.events["id"]))
    if not ids.null_count():
        return index.find(ids.to_numpy())
    known = not_null(ids)
    found = np.full(len(ids), -1, dtype=np.int64)
    found[known] = index.find(ids.filter(pl.Series(known)).to_numpy())
    return found


def _filled(s: pl.Series, fill: int) -> Any:
    """An integer column as int64, ``fill`` where null, without a query."""
    values, known = int_values(s)
    return values if known.all() else np.where(known, values, fill)


def outermost(profile: Profile, events: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``events`` not nested inside another row of ``events`` (so nested ranges
    of the same thing count once)."""
    ids = events.get_column("id")
    if ids.null_count():
        anc = ancestors(profile, ids).filter(
            (pl.col("hops") > 0) & pl.col("anc_id").is_in(ids.implode())
        )
        return events.filter(~pl.col("id").is_in(anc.get_column("id").implode()))
    # the same walk as :func:`ancestors` in NumPy, without building its table (five queries,
    # a fixed cost per call): the ids with an ancestor among the ids are the nested ones
    forest = _forest(profile)
    own = np.unique(ids.to_numpy().astype(np.int64))
    i, anc_at, _ = forest.ancestor_pairs(
        event_positions(profile, pl.Series(own)), max_depth=MAX_WALK - 1
    )
    nested = own[i][np.isin(forest.ids[anc_at], own)]
    if not len(nested):
        return events
    # the rows kept by position (a filter is a query)
    out: pl.DataFrame = events[np.flatnonzero(~np.isin(ids.to_numpy(), nested))]
    return out


def op_cost(profile: Profile) -> pl.DataFrame:
    """``[id, cost_ns]`` per host op: device kernel time it issued (itself and the ops it calls),
    when the profile has a device; else its own inclusive host duration."""
    out: pl.DataFrame = _memo("op_cost", profile, lambda: _op_cost(profile))
    return out


def _op_cost(profile: Profile) -> pl.DataFrame:
    from opscope.analysis.tree import no_ops

    if no_ops(profile):  # no op, no cost (every path below gives an Int64 ``cost_ns``)
        return pl.DataFrame(schema={"id": profile.ops.schema["id"], "cost_ns": pl.Int64})
    # (the columns as Series and arrays: a select, a fill_null or a filter query is a fixed cost)
    op_ids = profile.ops.get_column("id")
    if not profile.has_device:
        dur_ns = _filled(profile.ops.get_column("dur_ns"), 0)
        return pl.DataFrame([op_ids, pl.Series("cost_ns", dur_ns, dtype=pl.Int64)])
    if not present(profile.kernels.get_column("op_id")):
        zero = np.zeros(len(op_ids), dtype=np.int64)
        return pl.DataFrame([op_ids, pl.Series("cost_ns", zero, dtype=pl.Int64)])
    # each kernel's time added to its op and the op's ancestors (c.ancestors' walk) in NumPy
    # (a group-by, the ancestor table, its join and group-by and a join with every op were
    # 5-7 ms on the 75k-event trace): the kernels of an op, their durations (null: 0)
    k_op = profile.kernels.get_column("op_id")
    launched = not_null(k_op)
    dur = _filled(profile.kernels.get_column("dur_ns"), 0)[launched]
    forest = _forest(profile)
    at = event_positions(profile, k_op.filter(pl.Series(launched)))
    i, anc, _ = forest.ancestor_pairs(at, max_depth=MAX_WALK - 1)
    total = np.zeros(len(forest), dtype=np.int64)
    np.add.at(total, at[at >= 0], dur[at >= 0])
    np.add.at(total, anc, dur[i])
    op_at = event_positions(profile, op_ids)
    cost = np.where(op_at >= 0, total[np.maximum(op_at, 0)], 0) if len(total) else op_at * 0
    return pl.DataFrame([op_ids, pl.Series("cost_ns", cost, dtype=pl.Int64)])


def kernels_of(profile: Profile, op_ids: Sequence[int]) -> pl.DataFrame:
    """Device kernels issued by the given ops or the ops they call (their op or one of its
    ancestors, up to ``MAX_WALK - 1`` hops, among ``op_ids``), in the kernels' order."""
    if not profile.has_device or not op_ids:
        return profile.kernels.head(0)

    def pairs() -> tuple[Any, Any, Any, Any]:
        # the launched kernels' rows and ops, and their ops' (kernel, ancestor id) pairs: what
        # c.ancestors' table of them held, as arrays (its filters and joins were three queries
        # a call)
        k_op = profile.kernels.get_column("op_id")
        rows = np.flatnonzero(not_null(k_op))
        op = _filled(k_op, -1)[rows]
        forest = _forest(profile)
        i, anc, _ = forest.ancestor_pairs(
            event_positions(profile, pl.Series(op, dtype=pl.Int64)), max_depth=MAX_WALK - 1
        )
        return rows, op, i, forest.ids[anc]

    rows, op, i, anc_ids = _memo("kernel_op_pairs", profile, pairs)
    want = np.asarray(list(op_ids), dtype=np.int64)
    hit = np.isin(op, want)
    hit[i[np.isin(anc_ids, want)]] = True
    out: pl.DataFrame = profile.kernels[rows[hit]]
    return out


# Locations -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Location:
    """Where an event came from in the user's code."""

    file: str | None
    line: int | None
    function: str | None
    module: str | None


def locate(profile: Profile, ids: Sequence[int]) -> dict[int, Location]:
    """The user's file, line, function and module for each event id: the report's attribution
    (:func:`opscope.analysis.attribution.resolve_ops`), so a finding names the line the report
    charges its events to.

    A device event goes to the op that launched it (``op_id``; none without one, as in the
    report), a host event to the nearest op at or above it (the op whose time the report
    charges it in); the report's rule then takes a backward op to the forward op it
    differentiates and that op to the innermost user frame of its stack. A host event under no
    op (a runtime call made straight from Python, a Python frame) gets the innermost user frame
    of its own stack, the same last step.
    """
    if not ids:
        return {}
    from opscope.analysis import tree

    # each id once, deduplicated in Python (a unique() is one more fixed-cost query per call)
    uniq = list(dict.fromkeys(ids))
    keys = ("file", "line", "function", "module")
    pairs: Iterable[tuple[Any, tuple[Any, ...]]]
    if tree.SHORTCUTS:
        # the places of the asked ids only: their rows of the per-event inputs, and the op's
        # and the stack's places found by position (the whole events-long table, joined with
        # every op's place, was 11-16 ms once a report on a 75k-event trace, for the few
        # hundred ids the rules ask)
        pairs = zip(uniq, _places(profile, uniq), strict=True)
    else:
        table: pl.DataFrame = _memo("locations", profile, lambda: _locations(profile))
        want = pl.DataFrame({"id": uniq}, schema={"id": pl.Int64})
        j = want.join(table, on="id", how="left")
        pairs = zip(
            j.get_column("id").to_list(),
            zip(*(j.get_column(k).to_list() for k in keys), strict=True),
            strict=True,
        )
    # one Location per distinct place (a rule may ask for 100k ids of a few hundred lines:
    # building each was most of the time)
    places: dict[tuple[Any, ...], Location] = {}
    out: dict[int, Location] = {}
    for i, key in pairs:
        loc = places.get(key)
        if loc is None:
            loc = places[key] = Location(*key)
        out[int(i)] = loc
    return out


def _dense_ids(table: pl.DataFrame) -> bool:
    """Whether ``table``'s ``id`` column is 0, 1, ... (each row's id its position)."""
    ids = table.get_column("id")
    return ids.null_count() == 0 and _dense(ids)


def _places(profile: Profile, ids: list[int]) -> list[tuple[Any, ...]]:
    """(file, line, function, module) of each of ``ids``, as :func:`_locations` gives them (an
    id not among the events unplaced): the event's row of :func:`_place_inputs`, then the
    charged op's row of ``resolve_ops`` or, under no op, its stack's user frame."""
    from opscope.analysis.attribution import resolve_ops

    if _nowhere(profile):
        return [(None, None, None, None)] * len(ids)  # the walks and look-ups would find none
    inp: pl.DataFrame = _memo("place_inputs", profile, lambda: _place_inputs(profile))
    op_at, alone_at, stack_at = _memo("place_arrays", profile, lambda: _place_arrays(inp))
    # (the index's look-up of the ids as an array: no Series built for a few ids)
    index: _Index = _memo("event_index", profile, lambda: _Index.of(profile.events["id"]))
    at = index.find(np.asarray(ids, dtype=np.int64))
    known = at >= 0
    at0 = np.where(known, at, 0) if len(op_at) else np.zeros(0, dtype=np.int64)
    # the charged op (-1: none) and whether the event is under no op; an id not among the
    # events is unplaced (no op, no stack)
    op = np.where(known, op_at[at0], -1) if len(op_at) else np.full(len(at), -1)
    alone = np.where(known, alone_at[at0], True) if len(op_at) else np.ones(len(at), bool)
    res = resolve_ops(profile)
    res_index: _Index = _memo("resolve_index", profile, lambda: _Index.of(res["id"]))
    keys = ("file", "line", "function", "module")
    placed = list(zip(*_gather_lists(res, res_index.find(op), keys), strict=True))
    if alone.any():
        # under no op: the event's own stack's user frame and its own module
        frames: pl.DataFrame = _memo("user_frames", profile, lambda: _user_frames(profile))
        fr_index: _Index = _memo(
            "user_frames_index", profile, lambda: _Index.of(frames["stack_id"])
        )
        own = _gather_lists(
            frames,
            fr_index.find(np.where(known, stack_at[at0], -1) if len(op_at) else op),
            ("file", "line", "function"),
        )
        (mods,) = _gather_lists(inp, at, ("own_module",))
        own_rows = zip(*own, mods, strict=True)
        placed = [o if a else p for p, o, a in zip(placed, own_rows, alone, strict=True)]
    return placed


def _place_arrays(inp: pl.DataFrame) -> tuple[Any, Any, Any]:
    """Per event, from :func:`_place_inputs`: the charged op's id (its launcher for a device
    event, else the op at or above it; -1 for none), whether it is under no op (a host
    event without one), its own stack (-1 for none): arrays, so that each :func:`locate` is
    one query."""
    launcher, enclosing, own_stack = (
        _filled(inp.get_column(c), -1) for c in ("launcher", "enclosing", "own_stack")
    )
    dev = inp.get_column("dev").to_numpy()
    op = np.where(dev, launcher, enclosing).astype(np.int64)
    return op, (op < 0) & ~dev, own_stack


#: Up to this many positions, :func:`_gather_lists` reads each value by position in Python:
#: gathering a column by a NumPy array builds a Series (~50 µs a column, most of a finding's
#: :func:`locate` of its one id, a few dozen times a report); above, the gathers pay.
_SCALAR_GATHER_MAX = 32


def _gather_lists(df: pl.DataFrame, at: Any, cols: Sequence[str]) -> list[list[Any]]:
    """Each of ``cols`` of ``df`` at the positions ``at`` as a list, None where -1: for a few
    positions each value read by position in Python, else each column gathered by the array
    (a null appended for the -1s) and listed (no query either way)."""
    at = np.asarray(at, dtype=np.int64)
    if len(at) > _SCALAR_GATHER_MAX:
        return [gather(df.get_column(c), at).to_list() for c in cols]
    pos = at.tolist()
    out = []
    for c in cols:
        col = df.get_column(c)
        out.append([col[i] if i >= 0 else None for i in pos])
    return out


def _user_frames(profile: Profile) -> pl.DataFrame:
    from opscope.analysis.attribution import user_frames

    return user_frames(profile)


def _place_inputs(profile: Profile) -> pl.DataFrame:
    """Per event (the events' order): ``id``, ``dev`` (a device event), ``launcher`` (its
    ``op_id``), ``enclosing`` (the nearest op at or above it), ``own_stack`` and
    ``own_module`` (the nearest stack and module at or above it): what its place is found
    from."""
    ev = profile.events
    forest = _forest(profile)
    is_op, is_dev, has_stack, has_module = _event_masks(profile)
    # the three walks' rows gathered by position (a select of their gathers was a query)
    return pl.DataFrame(
        [
            ev.get_column("id"),
            pl.Series("dev", is_dev),
            ev.get_column("op_id").alias("launcher"),
            gather(ev.get_column("id"), _nearest_up(forest, is_op)).alias("enclosing"),
            gather(ev.get_column("stack_id"), _nearest_up(forest, has_stack)).alias("own_stack"),
            gather(ev.get_column("module"), _nearest_up(forest, has_module)).alias("own_module"),
        ]
    )


def _event_masks(profile: Profile) -> tuple[Any, Any, Any, Any]:
    """Per event: whether it is a host op, a device event, has a stack, has a module (one
    query, once a profile)."""

    def run() -> tuple[Any, Any, Any, Any]:
        # the kinds from their codes (a cast of every event's kind to text was most of it)
        # (a select of the columns' is_not_null was a query)
        ev = profile.events
        has_stack = not_null(ev.get_column("stack_id"))
        module = ev.get_column("module")
        if module.null_count() == 0:
            has_module = np.ones(ev.height, dtype=bool)
        elif module.null_count() == ev.height:
            has_module = np.zeros(ev.height, dtype=bool)
        else:
            has_module = module.is_not_null().to_numpy()
        is_op = kind_mask(profile, "cpu_op")
        return is_op, kind_mask(profile, *kinds.DEVICE_KINDS), has_stack, has_module

    out: tuple[Any, Any, Any, Any] = _memo("event_masks", profile, run)
    return out


def _locations(profile: Profile) -> pl.DataFrame:
    """``[id, file, line, function, module]`` for every event (see :func:`locate`)."""
    from opscope.analysis.attribution import resolve_ops, user_frames

    ev = profile.events
    if _nowhere(profile):
        # no op, no stack, no module: no event has a place (the small Ascend exports), and the
        # walks and joins below would find every one of them null
        st = profile.stacks.schema
        return ev.select("id").with_columns(
            pl.lit(None, st["file"]).alias("file"),
            pl.lit(None, st["line"]).alias("line"),
            pl.lit(None, st["function"]).alias("function"),
            pl.lit(None, ev.schema["module"]).alias("module"),
        )
    # one plan from here, collected once (each join and select was a query of fixed cost)
    inp: pl.DataFrame = _memo("place_inputs", profile, lambda: _place_inputs(profile))
    base = inp.lazy().with_columns(
        pl.when(pl.col("dev")).then(pl.col("launcher")).otherwise(pl.col("enclosing")).alias("op")
    )
    keys = ["file", "line", "function", "module"]
    charged = resolve_ops(profile).lazy().select(pl.col("id").alias("op"), *keys)
    own = user_frames(profile).lazy().rename({"stack_id": "own_stack"})
    j = base.join(charged, on="op", how="left").join(
        own.rename({k: f"own_{k}" for k in keys[:3]}), on="own_stack", how="left"
    )
    # under no op: the event's own stack (device events without a launcher stay unplaced)
    alone = pl.col("op").is_null() & ~pl.col("dev")
    return j.select(
        "id",
        *(pl.when(alone).then(pl.col(f"own_{k}")).otherwise(pl.col(k)).alias(k) for k in keys),
    ).collect(engine="in-memory")


def _nowhere(profile: Profile) -> bool:
    """No op, no stack, no module: no event has a place (the small Ascend exports)."""
    from opscope.analysis.tree import no_ops

    ev = profile.events
    return (
        no_ops(profile)
        and profile.stacks.height == 0
        and ev.get_column("module").null_count() == ev.height
    )


def _nearest_up(forest: Any, has: Any) -> Any:
    """``forest.nearest_up(has)``, without walking every event to its root when nothing has it
    (traces without stacks or modules: 40 ms a walk on a 138k-event trace)."""
    if not has.any():
        return np.full(len(forest), -1, dtype=np.int64)
    return forest.nearest_up(has)


def valid(s: pl.Series) -> Any:
    """Per row of a numeric column, whether it is not null (a boolean array), without a query
    where NumPy's copy tells: its NaNs are its nulls when it holds as many as the null count
    Polars keeps (a float column's own NaN, not null, asks ``is_not_null``)."""
    if s.null_count() == 0:
        return np.ones(len(s), dtype=bool)
    arr = s.to_numpy()
    if arr.dtype.kind == "f":
        nan = np.isnan(arr)
        if int(nan.sum()) == s.null_count():
            return ~nan
    return s.is_not_null().to_numpy()


def present(s: pl.Series) -> int:
    """How many values of ``s`` are not null: from its null count, which Polars keeps (a
    ``drop_nulls``/``is_not_null`` on the Series is a query of fixed cost)."""
    return s.len() - s.null_count()


def kernels_with(profile: Profile, column: str, match: Callable[[], pl.Expr]) -> pl.DataFrame:
    """The kernels whose ``column`` is set and that ``match()`` keeps; none, without building
    the predicate or running the filter (often a regex over every kernel name:
    :func:`name_match` tests the names when called), when no kernel carries ``column`` at all:
    a GPU trace's kernels never carry shapes or dtypes, an Ascend export's do."""
    from opscope.analysis import tree

    if tree.SHORTCUTS and not present(profile.kernels.get_column(column)):
        return profile.kernels.head(0)
    return profile.kernels.filter(pl.col(column).is_not_null() & match())


def op_parents(profile: Profile) -> pl.DataFrame:
    """``[id, op_parent]``: each host op's nearest enclosing host op (null at top level)."""
    out: pl.DataFrame = _memo("op_parents", profile, lambda: _op_parents(profile))
    return out


def _op_parents(profile: Profile) -> pl.DataFrame:
    from opscope.analysis.tree import no_ops

    ev = profile.events
    if no_ops(profile):  # no op, no parent to find (the empty table, without the walk)
        return pl.DataFrame(schema={"id": profile.ops.schema["id"], "op_parent": ev.schema["id"]})

    up = op_parent_positions(profile)
    par = pl.DataFrame([ev.get_column("id"), gather(ev.get_column("id"), up).alias("op_parent")])
    return profile.ops.select("id").join(par, on="id", how="left")


def op_parent_positions(profile: Profile) -> Any:
    """Per event (by position): the position of its nearest enclosing host op (not itself),
    -1 at top level: :func:`op_parents` as an array, for rules that look up a few rows."""

    def run() -> Any:
        is_op = _event_masks(profile)[0]
        return _forest(profile).nearest_up(is_op, include_self=False, max_depth=MAX_WALK)

    return _memo("op_parent_positions", profile, run)


def op_context(profile: Profile, rows: Any) -> list[pl.Series]:
    """For the host ops at positions ``rows`` of ``profile.ops``: ``op_parent`` (the nearest
    enclosing op's id), ``parent_name`` (its name) and ``cost_ns`` (:func:`op_cost`), what
    joins of the ops with :func:`op_parents`, :func:`op_cost` and the ops' names give them,
    looked up by position (one query, not three joins over every op)."""
    ops = profile.ops
    ids = ops.get_column("id").to_numpy()[rows]
    ev = profile.events.schema
    if not len(ids):  # no row: the empty columns, without the two queries
        return [
            pl.Series("op_parent", [], ev["id"]),
            pl.Series("parent_name", [], ev["name"]),
            pl.Series("cost_ns", [], op_cost(profile).schema["cost_ns"]),
        ]
    up = np.asarray(
        op_parent_positions(profile)[event_positions(profile, pl.Series(ids))], dtype=np.int64
    )
    # the parents' columns from the events, the costs from their table's column, each indexed
    # (a select of their gathers was a query)
    ev_ = profile.events
    return [
        gather(ev_.get_column("id"), up).alias("op_parent"),
        gather(ev_.get_column("name"), up).alias("parent_name"),
        op_costs_at(profile, rows),
    ]


def op_costs_at(profile: Profile, rows: Any) -> pl.Series:
    """``cost_ns`` (:func:`op_cost`) of the host ops at positions ``rows`` of ``profile.ops``,
    null for an op without one: what a left join of those ops with :func:`op_cost` gives, by
    position (no query)."""
    ids = profile.ops.get_column("id").to_numpy()[rows]
    cost = op_cost(profile)
    index: _Index = _memo("op_cost_index", profile, lambda: _Index.of(cost["id"]))
    return gather(cost.get_column("cost_ns"), np.asarray(index.find(ids), dtype=np.int64))


def _null_at(at: Any) -> pl.Expr:
    """Positions for a gather, a null gathered where -1."""
    at = np.asarray(at, dtype=np.int64)
    if bool((at >= 0).all()):
        return pl.lit(pl.Series(at, dtype=pl.Int64))
    # through a float NaN (exact: positions are far below 2**53); a masked array cost 0.2 ms
    # to convert on a few rows
    return pl.lit(pl.Series(np.where(at >= 0, at, np.nan), nan_to_null=True, dtype=pl.Int64))


#: Tables with at least this many rows are "large": the doctor's launch check tests their names
#: through :func:`name_mask` (each distinct name once); the rules always do.
NAME_INDEX_MIN_ROWS = 8192


#: Tables of at most this many rows have their names' codes found in Python (faster below it).
NAME_CODES_PY_MAX_ROWS = 512


def name_match(
    profile: Profile,
    table: str,
    *,
    names: Sequence[str] | None = None,
    pattern: str | None = None,
) -> pl.Expr:
    """A predicate on ``profile.<table>`` (``"events"``, ``"ops"``, ``"kernels"``): its
    name is one of ``names`` and matches the regex ``pattern`` (either optional); false where
    the name is null (what a filter on ``is_in``/``str.contains`` keeps): the mask of
    :func:`name_mask` as a literal."""
    return pl.lit(pl.Series("hit", name_mask(profile, table, names=names, pattern=pattern)))


def name_mask(
    profile: Profile,
    table: str,
    *,
    names: Sequence[str] | None = None,
    pattern: str | None = None,
) -> Any:
    """:func:`name_match` as a boolean array over the table's rows: each distinct name of the
    profile tested once, its answer spread by the rows' codes (:func:`_name_codes`, once a
    profile). A regex over the 75k names of an events table was 4 ms a rule, over its 400
    distinct names 0.1 ms; over a small table's rows a query of 0.2-0.6 ms where the distinct
    names' is 0.05 ms, and a names-only test of a few hundred distinct names in Python beats
    one of every row."""
    if getattr(profile, table).height == 0:
        return np.zeros(0, dtype=bool)
    uniq, codes = _memo(f"name_codes:{table}", profile, lambda: _name_codes(profile, table))
    hit = None if pattern is None else _pattern_hits(uniq, [pattern])[0]
    if names is not None:
        wanted = {n for n in names if n is not None}
        every: list[str | None] = _memo(f"name_list:{table}", profile, uniq.to_list)
        is_in = np.fromiter((n in wanted for n in every), dtype=bool, count=len(every))
        hit = is_in if hit is None else hit & is_in
    if hit is None:  # no test: every row, a null name too (a filter on lit(True) keeps it)
        return np.ones(len(codes), dtype=bool)
    return hit[codes]


def name_where(profile: Profile, table: str, test: Callable[[str], bool]) -> Any:
    """Per row of ``profile.<table>``, whether its name passes ``test`` (false for a null
    name): :func:`name_mask` with a test in Python, for a prefix or a substring (a regex is a
    query, of fixed cost, even over the distinct names)."""
    if getattr(profile, table).height == 0:
        return np.zeros(0, dtype=bool)
    uniq, codes = _memo(f"name_codes:{table}", profile, lambda: _name_codes(profile, table))
    every: list[str | None] = _memo(f"name_list:{table}", profile, uniq.to_list)
    hit = np.fromiter((n is not None and test(n) for n in every), dtype=bool, count=len(every))
    return hit[codes]


def pattern_masks(profile: Profile, table: str, patterns: Sequence[str]) -> list[Any]:
    """Per pattern, a boolean array: whether each row's name of ``profile.<table>`` matches
    the regex (false for a null name), what :func:`name_mask` gives each, from one query over
    the distinct names."""
    if getattr(profile, table).height == 0:
        return [np.zeros(0, dtype=bool) for _ in patterns]
    uniq, codes = _memo(f"name_codes:{table}", profile, lambda: _name_codes(profile, table))
    return [hit[codes] for hit in _pattern_hits(uniq, patterns)]


def none_match(values: pl.Series, pattern: str) -> bool:
    """Whether no value of the string Series ``values`` matches ``pattern`` (a null none), found
    in Python over its few distinct values; False when it may hold one, or Python may not say
    (:func:`opscope.advise._regex.py_hits`), and the caller's filter decides."""
    if values.len() > NAME_CODES_PY_MAX_ROWS:
        return False
    distinct = list(dict.fromkeys(values.to_list()))
    hits = py_hits(distinct, [pattern])
    return hits is not None and not hits[0].any()


def _pattern_hits(uniq: pl.Series, patterns: Sequence[str]) -> list[Any]:
    """Per pattern, whether each of the distinct names ``uniq`` matches it (false for null)."""
    if not patterns:
        return []
    if uniq.len() * len(patterns) <= PY_MAX_TESTS:
        hits = py_hits(uniq.to_list(), patterns)
        if hits is not None:
            return hits
    got = pl.DataFrame([uniq]).select(
        pl.col(uniq.name).str.contains(p).fill_null(False).alias(f"test{i}")
        for i, p in enumerate(patterns)
    )
    return [s.to_numpy() for s in got.get_columns()]


def _name_codes(profile: Profile, table: str) -> tuple[pl.Series, Any]:
    """The distinct names of ``profile.<table>`` (a null among them when a name is null) and
    each row's position among them. The ops and kernels are rows of the events: their codes
    are the events' at their rows (one set of codes a profile, not one a table)."""
    if table != "events":
        uniq, codes = _memo("name_codes:events", profile, lambda: _name_codes(profile, "events"))
        rows = event_positions(profile, getattr(profile, table).get_column("id"))
        if bool((rows >= 0).all()):
            return uniq, codes[rows]
    names = getattr(profile, table).get_column("name")
    if names.len() <= NAME_CODES_PY_MAX_ROWS:
        # a few names: their distinct ones in Python, in order of appearance (the cast and
        # arrays below are ~0.15 ms of fixed cost; the order of the distinct names is no
        # caller's concern, each tests them and spreads the answers by the codes)
        codes, first = codes_in_order(names.to_list())
        return pl.Series(names.name, first, dtype=names.dtype), codes
    # each name's id in the string cache, one to one with the strings (a null: one past the
    # others), its distinct ones found in NumPy by the ids' values (a Series' unique and
    # fill_null were queries of fixed cost, a NumPy unique a sort of every row)
    ids = names.cast(pl.Categorical).to_physical()
    null = names.null_count() > 0
    arr = ids.to_numpy()
    if null:
        arr = np.where(np.isnan(arr), np.nanmax(arr, initial=-1) + 1, arr)
    arr = arr.astype(np.int64)
    size = int(arr.max()) + 1
    seen = np.zeros(size, dtype=bool)
    seen[arr] = True
    distinct = np.flatnonzero(seen)
    code_of = np.zeros(size, dtype=np.int64)
    code_of[distinct] = np.arange(len(distinct))
    row_of = np.zeros(size, dtype=np.int64)
    row_of[arr] = np.arange(len(arr))  # a row of each distinct id (any: they hold one name)
    return names[row_of[distinct]], code_of[arr]


def shapes_table(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with ``dims`` (list of shapes) and ``dtypes`` (list of names) parsed, per unique
    input string (never per event)."""
    # one query: each distinct string parsed once in Python, each row's parsed value's JSON
    # text decoded natively beside the rows (the distinct strings' query and a plan joining
    # their parses back were two, the joins ~0.3 ms each). Polars builds a nested column from
    # Python lists one inner Series per row (2.8 ms for 170 rows of shapes), from their text in
    # one native decode (0.4 ms)
    enc = msgspec.json.encode
    cols = []
    for col, name, parse in (
        ("input_dims", "dims", parse_dims),
        ("input_types", "dtypes", parse_types),
    ):
        values = df.get_column(col).to_list()
        text: dict[Any, str | None] = {}
        for v in set(values):
            got = parse(v)
            text[v] = None if got is None else enc(got).decode()
        cols.append(pl.Series(name, [text[v] for v in values], pl.String))
    parsed = pl.DataFrame(cols).select(
        pl.col("dims").str.json_decode(pl.List(pl.List(pl.Int64))),
        pl.col("dtypes").str.json_decode(pl.List(pl.String)),
    )
    return df.hstack(parsed.get_columns())


def shape_groups(calls: pl.DataFrame, *extra: pl.Expr) -> pl.DataFrame:
    """The perf model's ``calls`` grouped by op and input shapes/types (first-seen order):
    ``calls`` (count), ``time_ns`` (float), ``bound_ns``, ``gap_ns`` summed, the ``extra``
    aggregations, ``dtype`` (first), ``ids`` (sorted), then :func:`shapes_table`'s columns."""
    g = calls.group_by("name", "input_dims", "input_types", maintain_order=True).agg(
        pl.len().alias("calls"),
        pl.col("time_ns").sum().cast(pl.Float64),
        pl.col("bound_ns").sum(),
        pl.col("gap_ns").sum(),
        *extra,
        pl.col("dtype").first(),
        pl.col("id").sort().alias("ids"),
    )
    return shapes_table(g)


MATMUL_OPS = (
    "aten::mm",
    "aten::matmul",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::linear",
    "aten::addmv",
    "aten::mv",
    "aten::dot",
)
LEAF_MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def fmt_shape(shape: Sequence[int]) -> str:
    """``[256, 1024]`` as ``"256x1024"``."""
    return "x".join(str(int(x)) for x in shape) if shape else "scalar"


def pad_up(x: int, multiple: int) -> int:
    """``x`` rounded up to a multiple of ``multiple``."""
    return -(-int(x) // multiple) * multiple


def severity_for(pct: float, cap: str | None = None) -> str:
    """``high`` ≥ 5 % of step time, ``medium`` ≥ 1 %, else ``low`` (then capped at ``cap``)."""
    sev = "high" if pct >= 5.0 else "medium" if pct >= 1.0 else "low"
    order = ["high", "medium", "low"]
    if cap is not None and order.index(sev) < order.index(cap):
        sev = cap
    return sev


def user_level_ops(profile: Profile) -> pl.DataFrame:
    """Host ops called directly from Python (no enclosing host op), in order per thread, with
    ``op_parent`` and their cost; the sequence the user's code issued."""
    out: pl.DataFrame = _memo("user_level_ops", profile, lambda: _user_level_ops(profile))
    return out


def _user_level_ops(profile: Profile) -> pl.DataFrame:
    from opscope.analysis.tree import no_ops

    if no_ops(profile):
        # the empty op table with the two columns the joins below add: op_parents' (an event
        # id) and op_cost's (Int64), from the events' empty slice (not those tables built)
        ev = profile.events
        extra = [pl.Series("op_parent", [], ev.schema["id"]), pl.Series("cost_ns", [], pl.Int64)]
        return ev.slice(0, 0).hstack(extra)
    ops = profile.ops
    costs = op_cost(profile)  # a row per op, in the ops' order (each of its paths builds it so)
    # the ops with no enclosing op, by position (what joins with op_parents and op_cost and a
    # filter on the parent found, each join over every op): an op not found among the events
    # has no parent found either
    at = event_positions(profile, ops.get_column("id"))
    top = np.flatnonzero((at < 0) | (op_parent_positions(profile)[np.maximum(at, 0)] < 0))
    # by rank, thread, time and id, nulls first as a sort puts them (the id last: two
    # top-level ops starting together on a thread in a defined order), in NumPy and the rows
    # gathered by position (a plan filtering and sorting the ops was a query of fixed cost)
    keys = []
    for col in ("id", "ts_ns", "tid", "rank"):
        values, known = int_values(ops.get_column(col))
        keys += [values[top], known[top]]
    rows = top[np.lexsort(keys)]
    # (the null column from NaNs: an extend_constant of a null was a query)
    null = np.full(len(rows), np.nan)
    parent = pl.Series("op_parent", null, nan_to_null=True, dtype=ops.get_column("id").dtype)
    return ops[rows].hstack([parent, costs.get_column("cost_ns")[rows]])


def group_by_location(
    profile: Profile, df: pl.DataFrame | Sequence[int], id_col: str = "id"
) -> dict[tuple[str | None, int | None, str | None], list[int]]:
    """Ids of ``df`` (a frame's ``id_col``, or the ids themselves) grouped by the user's (file,
    line, module) they come from, in their order."""
    from opscope.analysis import tree

    got = df.get_column(id_col).to_list() if isinstance(df, pl.DataFrame) else df
    ids = [int(x) for x in got]
    out: dict[tuple[str | None, int | None, str | None], list[int]] = {}
    if tree.SHORTCUTS and ids:
        # each id's place as :func:`locate` finds it, without its Location per place and its
        # map per id (a few thousand ids on a CPU trace's dispatch finding)
        for i, (file, line, _, module) in zip(ids, _places(profile, ids), strict=True):
            out.setdefault((file, line, module), []).append(i)
        return out
    locs = locate(profile, ids)
    nowhere = Location(None, None, None, None)  # one default, not one built per id
    for i in ids:
        loc = locs.get(i, nowhere)
        out.setdefault((loc.file, loc.line, loc.module), []).append(i)
    return out


def rows_by_location(
    profile: Profile, df: pl.DataFrame
) -> list[tuple[tuple[str | None, int | None, str | None], list[int], pl.DataFrame]]:
    """:func:`group_by_location` of ``df`` (by ``id``) with each location's rows, what
    ``df.filter(pl.col("id").is_in(ids))`` gives (the rows in their order): ``df`` itself when
    one location holds them all, else a partition of it (a filter per location was a query
    each, a fixed cost that showed on small traces)."""
    groups = group_by_location(profile, df)
    if len(groups) <= 1:
        return [(where, ids, df) for where, ids in groups.items()]
    at = {i: g for g, ids in enumerate(groups.values()) for i in ids}
    key = pl.Series("__location", [at[int(i)] for i in df.get_column("id").to_list()])
    parts = df.with_columns(key).partition_by(
        "__location", maintain_order=True, include_key=False, as_dict=True
    )
    return [(where, ids, parts[(g,)]) for g, (where, ids) in enumerate(groups.items())]


def make_finding(
    profile: Profile,
    *,
    rule: str,
    title: str,
    where: tuple[str | None, int | None, str | None],
    key: str,
    saving_ns: float,
    saving_how: str,
    fix: str,
    evidence: dict[str, Any],
    cap: str | None = None,
    severity: str | None = None,
    steps: StepInfo | None = None,
    limit_ns: float | None = None,
    limit_what: str = "",
    method: str = "",
) -> Any:
    """A :class:`~opscope.advise.finding.Finding` at ``where`` with the saving per step.

    ``limit_ns`` is the most the fix can remove (profile-wide, like ``saving_ns``): the op's
    own time for op fixes, the device idle for host-side fixes; the step always limits. The
    saving is clipped to it and ``saving_how`` says so when it was."""
    si = steps or step_info(profile)
    step_total = si.step_ns * max(si.n, 1)
    # the lower of the step and limit_ns, the step on a tie (none without either)
    lim: float | None = None
    if step_total > 0:
        lim, what = step_total, "the step time"
    if limit_ns is not None:
        own = max(float(limit_ns), 0.0)
        if lim is None or own < lim:
            lim, what = own, limit_what or "the time the fix can remove"
    limit_us = None
    if lim is not None:
        if saving_ns > lim:
            saving_ns = lim
            saving_how = f"{saving_how}; capped at {what}"
        limit_us = round(si.per_step_us(lim), 3)
    saving_us = si.per_step_us(saving_ns)
    pct = si.pct(saving_ns)
    sev = severity or severity_for(pct, cap)
    file, line, module = where
    return Finding(
        id=finding_id(rule, file, line, module, key),
        rule=rule,
        severity=sev,  # type: ignore[arg-type]
        title=title,
        evidence=evidence,
        file=file,
        line=None if line is None else int(line),
        module=module,
        saving_us=round(saving_us, 3),
        saving_pct=round(pct, 3),
        saving_how=saving_how,
        saving_method=method or "removed-time",
        saving_limit_us=limit_us,
        fix=fix,
    )


def has_tensor_dtype(df: pl.DataFrame, wanted: Sequence[str]) -> pl.DataFrame:
    """Rows of ``df`` (with ``input_dims``/``input_types``) having a tensor input (ndim ≥ 1,
    not a Python scalar) of one of the ``wanted`` dtypes; checked once per distinct pair."""
    # the pairs as Python tuples, each distinct one tested once, the rows kept by a mask (in
    # their order, a missing value equal to a missing one): what the distinct pairs' query
    # and a semi join on them gave, in one filter (none when every row or no row is kept)
    rows = list(
        zip(
            df.get_column("input_dims").to_list(),
            df.get_column("input_types").to_list(),
            strict=True,
        )
    )
    hits = set()
    for dims_s, types_s in set(rows):
        dims = parse_dims(dims_s) or []
        types = parse_types(types_s)
        if any(t in wanted and i < len(dims) and len(dims[i]) > 0 for i, t in enumerate(types)):
            hits.add((dims_s, types_s))
    if not hits:
        return df.clear()
    keep = [r in hits for r in rows]
    return df if all(keep) else df.filter(pl.Series(keep, dtype=pl.Boolean))


def evidence(
    operators: list[str],
    calls: int,
    figures: dict[str, Any],
    event_ids: list[int] | None = None,
) -> dict[str, Any]:
    """A finding's evidence for rules about time or memory rather than shapes (no shapes or
    dtypes), with at most ten example event ids."""
    ev: dict[str, Any] = {
        "operators": operators,
        "shapes": [],
        "dtypes": [],
        "calls": calls,
        "figures": figures,
    }
    if event_ids is not None:
        ev["event_ids"] = event_ids[:10]
    return ev


# Performance model ---------------------------------------------------------------------------


def device_option(results: Mapping[str, Any]) -> str | None:
    """The device named for peaks (``results["target_name"]``, from ``--device``), if any."""
    name = results.get("target_name") or results.get("device_name")
    return str(name) if name else None


def perf_model(profile: Profile, results: Mapping[str, Any]) -> Any:
    """The :class:`~opscope.analysis.model.PerfModel` of the profile (peaks of the device
    named by ``--device`` when given), computed once per profile and device."""
    from opscope.analysis.model import perf_model as run
    from opscope.analysis.registry import Options

    name = device_option(results)
    return _memo(f"perf_model:{name}", profile, lambda: run(profile, Options(device_name=name)))
