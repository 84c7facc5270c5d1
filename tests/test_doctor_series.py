"""The doctor's launch and kernel-origin checks by Series masks (and the kernel-origin check
without the linker's queries when every kernel has its launch), and the last-step check without
its count query on one-step traces, give the checks the DataFrame queries gave: the queries are
kept here as the reference, compared on real traces and on copies with launches unlinked,
kernels orphaned and null names, and with one step or several."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from opscope.doctor import checks
from opscope.doctor.checks import UNLINKED_LAUNCH_WARN, Check
from opscope.ingest import link, load
from opscope.model import Profile

_QUEUED = link.queued_before_profiling  # the linker's, not the spy a test puts in its place

TRACES = [
    "gpu/hta_triton_a100.json.gz",
    "ascend/small_two_rank/test_rank_0",
    "multi_rank/hta_sampled_128rank_job/rank-1.json.gz",
]


def _launch_links_ref(profile: Profile) -> list[Check]:
    """check_launch_links as DataFrame filters (before the Series masks)."""
    if not profile.has_device:
        return []
    ev = profile.events
    launches = ev.filter(
        pl.col("kind").is_in(["runtime", "driver"]) & pl.col("name").str.contains(checks._LAUNCH_RE)
    )
    linked = profile.kernels.get_column("launch_id").drop_nulls().unique()
    unl = launches.filter(~pl.col("id").is_in(linked.implode()))
    n_l, n_u = launches.height, unl.height
    odd = dict(profile.meta.get("oddities") or {})
    evidence: dict[str, Any] = {
        "launches": n_l,
        "launches_without_device_activity": n_u,
        "kernels": profile.kernels.height,
        "kernels_without_launch": int(profile.kernels.get_column("launch_id").is_null().sum()),
        "flows_not_bound": int(odd.get("flow not bound to events", 0)),
    }
    if n_u:
        top = unl.group_by("name").len().sort(["len", "name"], descending=[True, False]).head(5)
        evidence["unlinked_by_name"] = {str(n): int(c) for n, c in top.iter_rows()}
    frac = n_u / n_l if n_l else 0.0
    evidence["fraction"] = round(frac, 4)
    status = "warning" if n_l and frac > UNLINKED_LAUNCH_WARN else "ok"
    return [Check("incomplete.kernels", status, "", evidence)]


def _origins_ref(profile: Profile) -> dict[str, Any] | None:
    """check_kernel_origins' evidence with the linker always asked."""
    k = profile.kernels
    if k.is_empty():
        return None
    ev_all = profile.events
    queued = ev_all.filter(pl.Series(_QUEUED(ev_all))).get_column("id")
    early = int(k.get_column("id").is_in(queued.implode()).sum())
    orphans = int(k.get_column("launch_id").is_null().sum()) - early
    flows = profile.flows.get_column("kind").cast(pl.String)
    return {
        "kernels": k.height,
        "kernels_without_launch": orphans,
        "queued_before_profiling": early,
        "fraction": round(orphans / k.height, 4),
        "ac2g_flows": int((flows == "ac2g").sum()),
    }


def _variants(p: Profile) -> list[Profile]:
    """The profile, and copies with every other device row's launch lost (its launch unlinked
    and the kernel orphaned; the first one's too) and with some names null."""
    out = [p]
    ev = p.events
    row = pl.int_range(pl.len())
    dev = pl.col("kind").is_in(["kernel", "memcpy", "memset", "communication"])
    nth = dev.cast(pl.Int64).cum_sum()
    cut = ev.with_columns(
        pl.when(dev & (nth % 2 == 1)).then(None).otherwise(pl.col("launch_id")).alias("launch_id")
    )
    out.append(replace(p, events=cut))
    nulls = cut.with_columns(
        pl.when(row % 3 == 0).then(None).otherwise(pl.col("name")).alias("name")
    )
    out.append(replace(p, events=nulls))
    return out


@pytest.mark.parametrize("rel", TRACES)
def test_launch_links_as_the_queries(rel: str) -> None:
    seen_warning = False
    for p in _variants(load(shared_trace(rel), cache=False)):
        got, want = checks.check_launch_links(p), _launch_links_ref(p)
        assert [(c.id, c.status, c.evidence) for c in got] == [
            (c.id, c.status, c.evidence) for c in want
        ]
        seen_warning |= any(c.status == "warning" for c in got)
    if rel.startswith("gpu"):
        assert seen_warning  # the cut copies exercise the unlinked names


@pytest.mark.parametrize("rel", TRACES)
def test_kernel_origins_as_the_queries(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = _QUEUED
    asked: list[int] = []

    def spy(events: pl.DataFrame, *a: Any, **k: Any) -> Any:
        asked.append(events.height)
        return real(events, *a, **k)

    monkeypatch.setattr(link, "queued_before_profiling", spy)
    seen: set[tuple[bool, bool]] = set()
    for p in _variants(load(shared_trace(rel), cache=False)):
        asked.clear()
        got = checks.check_kernel_origins(p)
        want = _origins_ref(p)
        flows = [c for c in got if c.id == "incomplete.flows"]
        assert (flows[0].evidence if flows else None) == want
        if not p.kernels.is_empty():
            orphaned = int(p.kernels.get_column("launch_id").is_null().sum())
            ev = p.events
            routed = ev.select(pl.col("launch_id", "op_id").is_not_null().any()).row(0)
            # the linker is asked only when some kernel has no launch and some row has a route
            assert asked == ([ev.height] if orphaned and any(routed) else [])
            seen.add((bool(orphaned), any(routed)))
    if rel.startswith("ascend"):
        assert (True, False) in seen  # nothing routed at all: the linker not asked
    else:
        assert {(True, True), (False, True)} <= seen


def _last_step_ref(profile: Profile) -> list[Check]:
    """check_last_step with its count query always run (before the one-step shortcut)."""
    if not profile.has_device or profile.steps.is_empty():
        return []
    per = (
        profile.kernels.lazy()
        .filter(pl.col("step").is_not_null())
        .group_by("rank", "step")
        .len()
        .collect(engine="in-memory")
    )
    per_rank: dict[Any, dict[Any, int]] = {}
    for r, step, n in per.select("rank", "step", "len").iter_rows():
        per_rank.setdefault(r, {})[step] = n
    cut: dict[str, Any] = {}
    for rank, steps in checks._step_times(profile).items():
        nums = [s for s, _ in steps]
        if len(nums) < 2:
            continue
        counts = per_rank.get(rank, {})
        last = nums[-1]
        median_prev = checks._median([float(counts.get(s, 0)) for s in nums[:-1]])
        if median_prev > 0 and counts.get(last, 0) < 0.5 * median_prev:
            cut[str(rank)] = {
                "last_step": last,
                "device_ops_in_last_step": int(counts.get(last, 0)),
                "median_device_ops_in_earlier_steps": median_prev,
            }
    if cut:
        return [Check("incomplete.last_step", "warning", "", {"ranks": cut})]
    if profile.steps.height >= 2:
        return [Check("incomplete.last_step", "ok", "")]
    return []


def _one_step_each(p: Profile) -> list[Profile]:
    """The profile, and copies whose steps are the first of each rank only / the first twice
    (the last step then without kernels: a cut trace)."""
    steps = p.steps.sort("rank", "step")
    first = steps.group_by("rank", maintain_order=True).head(1)
    again = first.with_columns(pl.col("step") + 1)
    return [p, replace(p, steps=first), replace(p, steps=pl.concat([first, again]))]


@pytest.mark.parametrize("rel", TRACES)
def test_last_step_as_the_query(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    collected: list[int] = []
    real = pl.LazyFrame.collect

    def spy(self: pl.LazyFrame, *a: Any, **k: Any) -> Any:
        collected.append(1)
        return real(self, *a, **k)

    for p in _one_step_each(load(shared_trace(rel), cache=False)):
        want = _last_step_ref(p)
        checks._step_times(p)  # (memoised: its own query is not the one watched)
        monkeypatch.setattr(pl.LazyFrame, "collect", spy)
        got = checks.check_last_step(p)
        monkeypatch.undo()
        assert [(c.id, c.status, c.evidence) for c in got] == [
            (c.id, c.status, c.evidence) for c in want
        ]
        # the kernels per step counted in NumPy (a query before, only when a rank had 2+
        # steps): no query either way
        assert collected == []


def test_step_times_in_python_equal_the_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """_step_times from the step rows in Python (no query) equals the filter-and-sort query it
    replaced: steps without a duration or number left out, ranks in order with a null rank
    first (as rank 0), steps in order; rows with the same (rank, step) in table order."""
    from types import SimpleNamespace

    from helpers.spies import count_queries

    def reference(steps: pl.DataFrame) -> dict[int, list[tuple[int, int]]]:
        st = (
            steps.lazy()
            .filter(pl.col("dur_ns").is_not_null() & pl.col("step").is_not_null())
            .sort("rank", "step")
            .select("rank", "step", "dur_ns")
            .collect(engine="in-memory")
        )
        out: dict[int, list[tuple[int, int]]] = {}
        for r, s, d in st.iter_rows():
            out.setdefault(int(r if r is not None else 0), []).append((int(s), int(d)))
        return out

    schema = {"rank": pl.Int32, "step": pl.Int64, "dur_ns": pl.Int64}
    cases = [
        {"rank": [1, 0, 1, None, 0, 2], "step": [5, 3, 4, 7, None, 1],
         "dur_ns": [10, 20, None, 40, 50, 60]},
        {"rank": [], "step": [], "dur_ns": []},
    ]  # fmt: skip
    for case in cases:
        steps = pl.DataFrame(case, schema=schema)
        want = reference(steps)
        ran = count_queries(monkeypatch)
        assert checks._step_times.__wrapped__(SimpleNamespace(steps=steps)) == want
        assert ran == []
        monkeypatch.undo()
    assert reference(pl.DataFrame(cases[0], schema=schema)) == {
        0: [(7, 40), (3, 20)], 1: [(5, 10)], 2: [(1, 60)]
    }  # fmt: skip
    same = pl.DataFrame({"rank": [0, 0, 0], "step": [1, 1, 0], "dur_ns": [5, 6, 7]}, schema=schema)
    ran = count_queries(monkeypatch)
    got = checks._step_times.__wrapped__(SimpleNamespace(steps=same))
    assert ran == []
    assert got == {0: [(0, 7), (1, 5), (1, 6)]}
    same = same.reverse()
    assert checks._step_times.__wrapped__(SimpleNamespace(steps=same)) == {
        0: [(0, 7), (1, 6), (1, 5)]
    }
