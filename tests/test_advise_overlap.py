"""advise.overlap: on shared op groups, a finding whose fix can be checked (measured faster, a
micro-benchmark to run, a saving measured in the profile, a concrete code change) is counted
before a bound gap or estimate when their savings are within 10%; otherwise the larger first.
Hand-made findings, expected savings by hand arithmetic."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from opscope.advise.finding import Finding
from opscope.advise.overlap import NEAR_SHARE, resolve_overlaps


def _f(
    fid: str,
    saving: float,
    limit: float,
    groups: list[int],
    method: str = "bound-gap",
    rule: str | None = None,
    **extra: Any,
) -> Finding:
    ev: dict[str, Any] = {"op_groups": groups}
    speedup = extra.pop("verified_speedup", None)
    ev.update(extra)
    return Finding(
        id=fid, rule=rule or fid, severity="low", title=fid, saving_us=saving,
        saving_pct=saving / 10, saving_limit_us=limit, saving_method=method, evidence=ev,
        verified_speedup=speedup,
    )  # fmt: skip


def _by_id(found: list[Finding]) -> dict[str, Finding]:
    return {f.id: f for f in resolve_overlaps(found)}


def test_margin_is_ten_percent() -> None:
    assert NEAR_SHARE == 0.10


def test_benchmarkable_fix_within_the_margin_goes_first() -> None:
    """gap 40 (bound gap, no benchmark) vs 37 with a benchmark on the same group, limit 41:
    37 >= 0.9 x 40, so the benchmarked one keeps 37 and the gap keeps min(40, 41 - 37) = 4."""
    gap = _f("gap", 40.0, 41.0, [1])
    bench = _f("bench", 37.0, 50.0, [1], bench={"op": "matmul"})
    out = _by_id([gap, bench])
    assert out["bench"].saving_us == 37.0 and "overlaps" not in out["bench"].evidence
    assert out["gap"].saving_us == pytest.approx(4.0)
    assert out["gap"].evidence["overlaps"] == ["bench"]
    assert out["gap"].evidence["saving_before_overlap_us"] == 40.0


def test_outside_the_margin_the_larger_goes_first() -> None:
    """35 < 0.9 x 40: the bound gap keeps 40; the benchmarked one gets min(35, 41 - 40) = 1."""
    gap = _f("gap", 40.0, 41.0, [1])
    bench = _f("bench", 35.0, 50.0, [1], bench={"op": "matmul"})
    out = _by_id([gap, bench])
    assert out["gap"].saving_us == 40.0 and "overlaps" not in out["gap"].evidence
    assert out["bench"].saving_us == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("kind", "kwargs"),
    [
        ("peer-rate", {"method": "peer-rate"}),
        ("concrete fix", {"rule": "shape-alignment"}),
        ("measured faster", {"verified_speedup": 1.5}),
    ],
)
def test_other_checkable_fixes_go_first(kind: str, kwargs: dict[str, Any]) -> None:
    gap = _f("gap", 40.0, 41.0, [1])
    other = _f("other", 38.0, 50.0, [1], **kwargs)
    out = _by_id([gap, other])
    assert out["other"].saving_us == 38.0, kind
    assert out["gap"].saving_us == pytest.approx(3.0), kind


def test_measured_faster_beats_a_benchmark_yet_to_run() -> None:
    """Three on one group: 40 bench (not run), 39 measured faster, 50 bound gap (limit 60).
    Neither 40 nor 39 is within 10% of 50 (45 needed): the gap goes first and keeps 50; then
    40 (bench) would go next but 39 (measured) is within its margin and more checkable."""
    gap = _f("gap", 50.0, 60.0, [1])
    bench = _f("bench", 40.0, 60.0, [1], bench={"op": "matmul"})
    meas = _f("meas", 39.0, 60.0, [1], verified_speedup=2.0)
    out = _by_id([gap, bench, meas])
    assert out["gap"].saving_us == 50.0
    # meas: min(39, 60 - 50) = 10; bench: min(40, 60 - 60) = 0
    assert out["meas"].saving_us == pytest.approx(10.0)
    assert out["meas"].evidence["overlaps"] == ["gap"]
    assert out["bench"].saving_us == pytest.approx(0.0)
    assert out["bench"].evidence["overlaps"] == ["gap", "meas"]


def test_not_faster_and_unknown_do_not_go_first() -> None:
    """A fix measured not faster (0.9x) is no more checkable than a bound gap, and an unknown
    saving never goes before a bounded one, benchmark or not."""
    gap = _f("gap", 40.0, 41.0, [1])
    slow = _f("slow", 39.0, 50.0, [1], verified_speedup=0.9)
    out = _by_id([gap, slow])
    assert out["gap"].saving_us == 40.0 and out["slow"].saving_us == pytest.approx(1.0)
    unk = _f("unk", 39.0, 50.0, [1], method="unknown", bench={"op": "matmul"})
    out = _by_id([gap, unk])
    assert out["gap"].saving_us == 40.0 and out["unk"].saving_us == pytest.approx(1.0)


def test_disjoint_groups_are_untouched() -> None:
    gap = _f("gap", 40.0, 41.0, [1])
    bench = _f("bench", 39.0, 50.0, [2], bench={"op": "matmul"})
    out = _by_id([gap, bench])
    assert out["gap"] is gap and out["bench"] is bench


def test_what_is_left_is_graded_again_never_up() -> None:
    """A high finding (40 µs/step, 8% of the step) left with 2 µs (0.4%) after a benchmarked one
    on its ops is low; a low finding (unknown method, counted after a bounded one on one of
    its two groups) left with 5% (the threshold of "high") stays low."""
    gap = replace(_f("gap", 40.0, 41.0, [1]), severity="high", saving_pct=8.0)
    bench = _f("bench", 39.0, 50.0, [1], bench={"op": "matmul"})
    out = _by_id([gap, bench])
    assert out["gap"].saving_us == pytest.approx(2.0)  # min(40, 41 - 39)
    assert out["gap"].saving_pct == pytest.approx(8.0 * 2.0 / 40.0)
    assert out["gap"].severity == "low"
    big = replace(_f("big", 100.0, 200.0, [1, 2], method="unknown"), saving_pct=10.0)
    out = _by_id([_f("first", 50.0, 200.0, [1]), big])
    assert out["big"].saving_pct == pytest.approx(5.0) and out["big"].severity == "low"
