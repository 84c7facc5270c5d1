"""Anomalies without a group large enough to judge (a partial Ascend rank: a few collectives,
each name once or twice): the empty tables from the schemas equal the full path's, and the
test of "no group judged" is its definition."""

from __future__ import annotations

import random

import pytest

from helpers.spies import count_queries
from helpers.synth import Builder
from opscope.analysis import anomalies, tree
from opscope.model import Profile


def _profile(names: list[str | None], device: bool) -> Profile:
    """One op per name (with a kernel of that name when ``device``), the op named so too."""
    b = Builder()
    for i, name in enumerate(names):
        op = b.op(name or "aten::x", 10.0 * i, 5.0, dims="[[2, 3]]", types="[float]")
        if device:
            b.events[b.kernel("k", 10.0 * i + 1, 3.0 + i % 4, op)]["name"] = name
        else:
            b.events[op]["name"] = name
    return b.build()


def _definition(profile: Profile) -> bool:
    calls = profile.kernels if profile.has_device else profile.ops
    counts = calls.group_by("name").len().get_column("len")
    return calls.height == 0 or int(counts.max()) < anomalies.MIN_CALLS  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("device", [True, False])
def test_no_group_judged_is_its_definition(seed: int, device: bool) -> None:
    rng = random.Random(seed)
    n = rng.choice([1, 2, 3, 15, 64, 65, 140])
    pool = [f"hcom_{i}" for i in range(rng.choice([1, 3, n // 2 + 1, n + 1]))] + [None]
    # each name at most twice (no group) or as drawn (maybe one of three calls)
    names = [rng.choice(pool) for _ in range(n)]
    if seed % 2:
        names = [f"c{i // 2}" if i % 3 else None for i in range(n)]
        names = [v for i, v in enumerate(names) if v is not None or i < 4]
    profile = _profile(names, device)
    assert anomalies.no_group_judged(profile) == _definition(profile)


@pytest.mark.parametrize("device", [True, False])
@pytest.mark.parametrize("n", [2, 15, 80])
def test_slow_calls_without_a_judged_group_equal_the_full_path(
    device: bool, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each name twice (one slow: no group of MIN_CALLS, so not an outlier either way)
    profile = _profile([f"hcom_{i // 2}" for i in range(n)], device)
    assert anomalies.no_group_judged(profile)
    anomalies.slow_calls(profile)  # (the schemas, made once per process; the ops' filters)
    ran = count_queries(monkeypatch)
    fast = anomalies.slow_calls(profile)
    assert ran == []
    monkeypatch.setattr(tree, "SHORTCUTS", False)
    full = anomalies.slow_calls(profile)
    assert ran  # the outliers' query ran
    for a, b in zip(fast, full, strict=True):
        assert a.schema == b.schema and a.equals(b) and a.height == 0


def test_a_group_of_three_calls_takes_the_full_path() -> None:
    profile = _profile(["a", "b", "a", "c", "a"], True)
    assert not anomalies.no_group_judged(profile)
