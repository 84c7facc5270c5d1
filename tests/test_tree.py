"""The array walks of the event tree (opscope.analysis.tree) against brute force on random forests,
and the per-profile memo."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import polars as pl
import pytest

from opscope.analysis.tree import Forest, gather, per_profile
from opscope.model import Profile


def random_forest(rng: random.Random, n: int) -> tuple[list[int], list[int | None]]:
    """Ids in shuffled order (not positions), parents earlier in creation order, some roots, some
    parents outside the set."""
    ids = rng.sample(range(10 * n), n)
    parents: list[int | None] = []
    for i in range(n):
        r = rng.random()
        if i == 0 or r < 0.1:
            parents.append(None)
        elif r < 0.15:
            parents.append(10 * n + i)  # a parent that is not in the set
        else:
            parents.append(ids[rng.randrange(max(0, i - 6), i)])
    order = list(range(n))
    rng.shuffle(order)
    return [ids[i] for i in order], [parents[i] for i in order]


def chain(ids: list[int], parents: list[int | None], i: int) -> list[int]:
    """Positions of the ancestors of position i, nearest first."""
    pos = {x: k for k, x in enumerate(ids)}
    out = []
    p = parents[i]
    while p is not None and p in pos:
        out.append(pos[p])
        p = parents[pos[p]]
    return out


@pytest.mark.parametrize("seed", range(8))
def test_walks_match_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    n = 300
    ids, parents = random_forest(rng, n)
    f = Forest.of(
        pl.DataFrame(
            {"id": ids, "parent_id": parents}, schema=[("id", pl.Int64), ("parent_id", pl.Int64)]
        )
    )
    has = np.array([rng.random() < 0.3 for _ in range(n)])
    vals = np.array([rng.randrange(0, 5) * 100 for _ in range(n)], dtype=np.int64)
    up_self, up = f.nearest_up(has), f.nearest_up(has, include_self=False)
    down = f.nearest_down(has)
    dsum = f.descendant_sum(vals)
    above = f.has_ancestor(has)
    anc = [chain(ids, parents, i) for i in range(n)]
    start = np.array([*range(n), -1], dtype=np.int64)  # -1: an id not in the set
    i_, a_, h_ = f.ancestor_pairs(start, max_depth=3)
    got = sorted(zip(i_.tolist(), a_.tolist(), h_.tolist(), strict=True))
    assert got == sorted((i, a, h + 1) for i in range(n) for h, a in enumerate(anc[i][:3]))
    for i in range(n):
        hits = [a for a in anc[i] if has[a]]
        assert up[i] == (hits[0] if hits else -1)
        assert up_self[i] == (i if has[i] else up[i])
        assert above[i] == bool(hits)
        desc = [(anc[j].index(i) + 1, j) for j in range(n) if i in anc[j]]
        assert dsum[i] == sum(vals[j] for _, j in desc)
        cands = sorted((d, j) for d, j in desc if has[j])
        want = i if has[i] else (cands[0][1] if cands else -1)
        assert down[i] == want  # nearest, then first in the set


def test_positions_and_cycles_end() -> None:
    f = Forest.of(
        pl.DataFrame(
            {"id": [5, 7, 9], "parent_id": [7, 5, None]},
            schema=[("id", pl.Int64), ("parent_id", pl.Int64)],
        )
    )
    assert f.positions(pl.Series([9, 4, None, 5], dtype=pl.Int64)).tolist() == [2, -1, -1, 0]
    # 5 <-> 7 is a cycle: walks stop instead of spinning
    assert f.nearest_up(np.array([False, False, True])).tolist() == [-1, -1, 2]
    assert f.descendant_sum(np.array([1, 0, 0], dtype=np.int64)).tolist()[2] == 0


def test_per_profile_computes_once_per_profile_object() -> None:
    calls: list[int] = []

    @per_profile
    def count(p: Profile) -> int:
        calls.append(1)
        return p.events.height

    a, b = Profile(), Profile()
    assert count(a) == count(a) == 0
    assert len(calls) == 1
    count(b)
    assert len(calls) == 2  # another Profile object, even an equal one, is computed afresh


def test_gather_keeps_the_dtype_even_from_an_empty_column() -> None:
    # an Ascend rank with no host events: the looked-up column must still join as Int64
    got = gather(pl.Series("stack_id", [], dtype=pl.Int64), np.array([-1, -1], dtype=np.int64))
    assert got.dtype == pl.Int64 and got.to_list() == [None, None]
    got = gather(pl.Series("m", ["a", "b"]), np.array([1, -1, 0], dtype=np.int64))
    assert got.to_list() == ["b", None, "a"]


@pytest.mark.parametrize(
    "values,dtype",
    [
        ([5, None, 7, 9], pl.Int64),
        (["a", None, "c", "d"], pl.String),
        (["a", "b", None, "a"], pl.Categorical),
        ([1.5, float("nan"), None, -2.0], pl.Float64),
        ([True, None, False, True], pl.Boolean),
    ],
)
def test_gather_equals_plain_indexing_with_nulls_at_minus_one(
    values: list[Any], dtype: Any
) -> None:
    """Null where the position is -1, the value (null included) elsewhere, name and dtype kept:
    plain Python indexing is the reference; all positions valid takes the other branch."""
    s = pl.Series("col", values, dtype=dtype)
    for at in ([3, -1, 0, 2, -1, 1], [0, 1, 2, 3, 3], [-1, -1], []):
        got = gather(s, np.array(at, dtype=np.int64))
        assert got.name == "col" and got.dtype == s.dtype
        want = [None if i < 0 else values[i] for i in at]
        assert got.to_list() == want or (  # NaN != NaN: compare its place instead
            [repr(x) for x in got.to_list()] == [repr(x) for x in want]
        ), at


@pytest.mark.parametrize("seed", range(6))
def test_positions_by_table_equal_the_sorted_search(seed: int) -> None:
    """The id-indexed table (dense ids) and the sort-and-search give the same positions: the
    first where an id repeats, -1 for a null, an absent or an out-of-range id; and the table is
    the path taken for dense ids, the search for repeated, negative or sparse ones."""
    from opscope.analysis import tree

    rng = np.random.default_rng(seed)
    taken: list[str] = []
    real = tree._positions_sorted

    def spy(ids: Any, want: Any, null: Any) -> Any:
        taken.append("sorted")
        return real(ids, want, null)

    cases = [
        (rng.permutation(400)[:300], "table"),  # row numbers, some dropped, shuffled
        (np.concatenate([rng.permutation(50), [7, 3]]), "sorted"),  # repeated ids
        (rng.permutation(300) - 5, "sorted"),  # negative ids
        (rng.choice(10**9, 200, replace=False), "sorted"),  # sparse ids
    ]
    for raw, path in cases:
        ids = raw.astype(np.int64)
        want = rng.integers(int(ids.min()) - 20, int(ids.max()) + 20, 500)
        null = rng.random(500) < 0.1
        taken.clear()
        tree._positions_sorted = spy  # type: ignore[assignment]
        try:
            got = tree._positions(ids, want, null)
        finally:
            tree._positions_sorted = real  # type: ignore[assignment]
        assert taken == ([] if path == "table" else ["sorted"])
        assert got.tolist() == real(ids, want, null).tolist()
        first: dict[int, int] = {}
        for k, x in enumerate(ids.tolist()):
            first.setdefault(x, k)
        assert got.tolist() == [
            -1 if nul else first.get(w, -1) for w, nul in zip(want.tolist(), null, strict=True)
        ]


@pytest.mark.parametrize("seed", range(6))
def test_nearest_up_by_jumps_equals_the_walk(seed: int) -> None:
    """Pointer doubling gives the one-step walk's answer, with and without the event itself,
    for any depth cut; it is the path taken on a shallow forest, and it hands a forest it cannot
    finish within the cut (a deep chain, a cycle) to the walk, whose cut it keeps."""
    rng = random.Random(seed)
    n = 400
    ids, parents = random_forest(rng, n)
    # a chain of 300 under the first root and a cycle of three, so some walks are long or endless
    chain_ids = list(range(10 * n + n, 10 * n + n + 300))
    ids += chain_ids
    parents += [ids[0], *chain_ids[:-1]]
    ids += [1, 2, 3]
    parents += [2, 3, 1]
    f = Forest.of(
        pl.DataFrame(
            {"id": ids, "parent_id": parents}, schema=[("id", pl.Int64), ("parent_id", pl.Int64)]
        )
    )
    m = len(ids)
    shallow = Forest.of(
        pl.DataFrame(
            {"id": ids[:n], "parent_id": parents[:n]},
            schema=[("id", pl.Int64), ("parent_id", pl.Int64)],
        )
    )
    for density in (0.0, 0.02, 0.3):
        has = np.array([rng.random() < density for _ in range(m)])
        for include_self in (True, False):
            for depth in (1, 2, 3, 7, 64, 200, 256):
                want = f._walk_up(has, include_self=include_self, max_depth=depth)
                got = f.nearest_up(has, include_self=include_self, max_depth=depth)
                assert got.tolist() == want.tolist(), (density, include_self, depth)
            sh = has[:n]
            jumped = shallow._jump_up(sh, include_self, 256)
            assert jumped is not None  # taken: the random forest is a few levels deep
            assert jumped.tolist() == shallow._walk_up(sh, include_self=include_self).tolist()
    # the chain is 300 deep: no mark within 256 steps of its end is not a "none" by jumps
    assert f._jump_up(np.zeros(m, dtype=bool), True, 256) is None
