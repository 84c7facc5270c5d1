"""The pieces made for report speed (issue 19) against slow references: the per-profile memo
with arguments, the roofline's owner / direct-descendant walks against the per-depth joins they
replaced (a plain-Python walk over planted trees), and the terminal's table-width bound against
rich's own drawing."""

from __future__ import annotations

import random

import polars as pl
import pytest
from rich import box
from rich.table import Table
from rich.text import Text

from opscope.analysis.roofline import _owners, _with_direct_descendant
from opscope.analysis.tree import per_profile_args
from opscope.model import Profile
from opscope.report.terminal import _drawn_width, _widest


def test_per_profile_args_memoises_per_profile_and_arguments() -> None:
    calls: list[tuple[int, str | None]] = []

    @per_profile_args
    def f(p: Profile, name: str | None) -> int:
        calls.append((id(p), name))
        return len(calls)

    a, b = Profile(), Profile()
    assert f(a, "H100") == f(a, "H100") == 1
    assert f(a, None) == 2  # other arguments: computed afresh
    assert f(b, "H100") == 3  # another Profile object
    assert f(a, "H100") == 1 and f(a, None) == 2
    assert len(calls) == 3


def _ops(rows: list[tuple[int, int | None, int | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows, schema={"id": pl.Int64, "parent_id": pl.Int64, "depth": pl.Int64}, orient="row"
    )


def _reference(
    rows: list[tuple[int, int | None, int | None]], costed: list[bool], direct: list[bool]
) -> tuple[list[int | None], list[bool]]:
    """Owner and 'direct op below' by plain recursion: a link counts only to an op whose depth
    (null read as 0) is smaller than the child's, as the per-depth joins processed them."""
    by_id = {r[0]: k for k, r in enumerate(rows)}
    depth = [r[2] or 0 for r in rows]

    def parent(k: int) -> int | None:
        p = rows[k][1]
        if p is None or p not in by_id or depth[by_id[p]] >= depth[k]:
            return None
        return by_id[p]

    owners: list[int | None] = []
    for k in range(len(rows)):
        best = rows[k][0] if costed[k] else None
        q = parent(k)
        while q is not None:
            if costed[q]:
                best = rows[q][0]
            q = parent(q)
        owners.append(best)
    below = [False] * len(rows)
    for k in range(len(rows)):
        if direct[k]:
            q = parent(k)
            while q is not None:
                below[q] = True
                q = parent(q)
    return owners, below


def test_owner_and_direct_below_on_a_planted_tree() -> None:
    # 1 (costed) > 2 > 3 (costed): 3's owner is the outermost, 1; 4's parent 1 sits at the
    # same depth, so the link does not count (the per-depth join never saw it); 5's parent is no
    # op (a python frame): the chain ends there; 6 has a null depth (read as 0)
    rows = [(1, None, 0), (2, 1, 1), (3, 2, 2), (4, 1, 0), (5, 99, 3), (6, 3, None)]
    costed = pl.Series([True, False, True, True, False, True])
    direct = pl.Series([False, False, True, True, False, False])
    owners = dict(_owners(_ops(rows), costed).iter_rows())
    assert owners == {1: 1, 2: 1, 3: 1, 4: 4, 5: None, 6: 6}
    below = _with_direct_descendant(_ops(rows), direct).to_list()
    assert below == [True, True, False, False, False, False]


@pytest.mark.parametrize("seed", range(6))
def test_owner_and_direct_below_match_the_reference_on_random_trees(seed: int) -> None:
    rng = random.Random(seed)
    n = 300
    ids = rng.sample(range(10_000), n)
    rows: list[tuple[int, int | None, int | None]] = []
    depth: dict[int, int] = {}
    for i, x in enumerate(ids):
        r = rng.random()
        if i == 0 or r < 0.1:
            p, d = None, 0
        elif r < 0.15:
            p, d = 20_000 + i, rng.randrange(0, 5)  # a parent that is no op
        else:
            p = ids[rng.randrange(max(0, i - 8), i)]
            # mostly one level down; sometimes an inconsistent depth (same or shallower)
            d = depth[p] + 1 if rng.random() < 0.85 else max(0, depth[p] - rng.randrange(0, 2))
        depth[x] = d
        rows.append((x, p, None if rng.random() < 0.03 else d))
    rng.shuffle(rows)
    costed = [rng.random() < 0.3 for _ in rows]
    direct = [c and rng.random() < 0.5 for c in costed]
    want_owner, want_below = _reference(rows, costed, direct)
    got_owner = dict(_owners(_ops(rows), pl.Series(costed)).iter_rows())
    assert [got_owner[r[0]] for r in rows] == want_owner
    assert _with_direct_descendant(_ops(rows), pl.Series(direct)).to_list() == want_below


def _table(cells: list[list[str]], last_justify: str, max_width: int | None) -> Table:
    tab = Table(
        title=Text("A title that is longer than some of the tables it heads", style="bold"),
        caption=Text("device time; % of the step; 12 more rows: --full"),
        title_justify="left",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        expand=False,
    )
    tab.add_column("name", no_wrap=True, overflow="ellipsis", max_width=max_width)
    tab.add_column("calls", justify="right", no_wrap=True, min_width=5)
    tab.add_column("where", justify=last_justify, no_wrap=True, overflow="ellipsis")  # type: ignore[arg-type]
    for row in cells:
        tab.add_row(*(Text(c) for c in row))
    return tab


@pytest.mark.parametrize("last_justify", ["left", "right"])
@pytest.mark.parametrize("max_width", [None, 6, 30])
def test_widest_bounds_the_drawn_width(last_justify: str, max_width: int | None) -> None:
    rng = random.Random(7)
    words = ["aten::mm", "日本語カーネル", "x", "", "void at::native::kernel<float>", "[[1,2]]"]
    for _ in range(20):
        cells = [
            [rng.choice(words), str(rng.randrange(10 ** rng.randrange(1, 6))), rng.choice(words)]
            for _ in range(rng.randrange(0, 6))
        ]
        tab = _table(cells, last_justify, max_width)
        assert _widest(tab) >= _drawn_width(tab)
