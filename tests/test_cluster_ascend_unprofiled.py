"""Links to ranks that were not profiled: a collective's matrix names every peer of its group,
so a partly profiled job has links whose far end left no output. msprof-analyze drops them;
opscope keeps them, marked "(not profiled)", and keeps the bytes between profiled ranks apart
(the figure msprof-analyze's matrix sums)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from test_cluster_ascend import _link, _no_colls, _steps

ST_LEVEL2 = Path(os.environ.get("OPSCOPE_ASCEND_DATA", "/work/ascend_data")) / "st" / "level2"
MB64 = 64 << 20


def test_planted_links_to_unprofiled_ranks_are_kept_and_marked() -> None:
    from opscope.analysis.cluster import aggregate
    from opscope.analysis.cluster_ascend import matrix_totals
    from opscope.report.cluster_html import to_html

    # Ranks 0 and 1 profiled (they have steps and wrote the links); 5 and 7 only named as peers.
    links = pl.DataFrame(
        [
            _link(0, 1, "HCCS", 20.0),
            _link(1, 0, "HCCS", 20.0),
            _link(0, 5, "HCCS", 20.0),
            _link(1, 7, "RDMA", 10.0),
            _link(0, 0, "LOCAL", 50.0),  # a self link: not in the matrix
        ]
    )
    res = aggregate(_steps({0: 1.0, 1: 1.0}), _no_colls(), links)
    rows = {(m["src_rank"], m["dst_rank"]): m for m in res.to_json()["matrix"]}
    assert sorted(rows) == [(0, 1), (0, 5), (1, 0), (1, 7)]
    assert {k: (m["dst_profiled"], m["dst_label"]) for k, m in rows.items()} == {
        (0, 1): (True, "rank 1"),
        (0, 5): (False, "rank 5 (not profiled)"),
        (1, 0): (True, "rank 0"),
        (1, 7): (False, "rank 7 (not profiled)"),
    }
    assert matrix_totals(res.links, [0, 1]) == {
        "profiled_bytes": 2 * MB64,
        "unprofiled_bytes": 2 * MB64,
        "unprofiled_ranks": [5, 7],
    }
    page = to_html(res)
    assert "<th>5 (not profiled)</th>" in page and "<th>7 (not profiled)</th>" in page
    assert f"Bytes between profiled ranks: {2 * MB64:,}" in page
    assert f"to ranks not profiled (5, 7): {2 * MB64:,}" in page


def test_every_rank_profiled_marks_nothing() -> None:
    from opscope.analysis.cluster import aggregate
    from opscope.analysis.cluster_ascend import matrix_totals

    links = pl.DataFrame([_link(0, 1, "HCCS", 20.0), _link(1, 0, "HCCS", 20.0)])
    res = aggregate(_steps({0: 1.0, 1: 1.0}), _no_colls(), links)
    assert all(m["dst_profiled"] for m in res.to_json()["matrix"])
    assert matrix_totals(res.links)["unprofiled_ranks"] == []


@pytest.fixture(scope="module")
def two_of_four(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Ranks 0 and 2 of msinsight's 4-rank Megatron run (pp 2 x dp 2), as if 1 and 3 had not
    been profiled."""
    from opscope.cluster import run_cluster

    if not ST_LEVEL2.is_dir():
        pytest.skip(f"msinsight st/level2 not found at {ST_LEVEL2}")
    run = tmp_path_factory.mktemp("two_of_four")
    for r in (0, 2):
        shutil.copytree(ST_LEVEL2 / f"rank_{r}_ascend_pt", run / f"rank_{r}_ascend_pt")
    return run_cluster(run, workers=0, cache=False)


def test_real_partly_profiled_run_equals_msprof_analyze(two_of_four: Any) -> None:
    """msprof-analyze 26.2.0 (``cluster -m all``) on these two ranks: links 0->2 over HCCS
    639,107,168 B and 2->0 639,107,216 B, nothing else. On all four ranks its matrix has 0->1
    1,127,447,136 B, 0->3 96 B, 2->1 96 B and 2->3 1,127,450,208 B: the links opscope keeps
    here, marked, with the same bytes."""
    from opscope.analysis.cluster_ascend import matrix_totals

    m = {(r["src_rank"], r["dst_rank"]): r for r in two_of_four.to_json()["matrix"]}
    profiled = {k: r["size_bytes"] for k, r in m.items() if r["dst_profiled"]}
    marked = {k: r["size_bytes"] for k, r in m.items() if not r["dst_profiled"]}
    assert profiled == {(0, 2): 639_107_168, (2, 0): 639_107_216}
    assert marked == {(0, 1): 1_127_447_136, (0, 3): 96, (2, 1): 96, (2, 3): 1_127_450_208}
    assert {m[k]["dst_label"] for k in marked} == {"rank 1 (not profiled)", "rank 3 (not profiled)"}
    assert matrix_totals(two_of_four.links, [0, 2]) == {
        "profiled_bytes": 639_107_168 + 639_107_216,
        "unprofiled_bytes": 1_127_447_136 + 96 + 96 + 1_127_450_208,
        "unprofiled_ranks": [1, 3],
    }


def test_group_indices_without_metadata_map_through_self_links() -> None:
    """No parallel_group_info: a group's index i is the rank that wrote the self link "i-i" in
    it. Rank 1 writes self links (in group W) but none in group H, so index 1 of H is not
    rank 1: that end is an unknown unprofiled rank. Index 5 of W, which no profiled rank
    claims, is taken as written (the world group: local = global)."""
    from opscope.analysis.cluster import aggregate
    from opscope.analysis.cluster_ascend import UNKNOWN_RANK
    from opscope.report.cluster_html import to_html

    def row(rank: int, group: str, src: int, dst: int, tr: str = "HCCS") -> dict[str, Any]:
        return _link(src, dst, tr, 20.0) | {"rank": rank, "group": group, "mapped": False}

    links = pl.DataFrame(
        [
            row(0, "W", 0, 0, "LOCAL"),
            row(0, "W", 0, 1),
            row(0, "W", 0, 5),
            row(1, "W", 1, 1, "LOCAL"),
            row(1, "W", 1, 0),
            row(0, "H", 0, 0, "LOCAL"),
            row(0, "H", 0, 1, "RDMA"),
            row(1, "K", 0, 0, "LOCAL"),  # rank 1 is index 0 of K: its "0-1" leaves rank 1
            row(1, "K", 0, 1, "RDMA"),
        ]
    )
    res = aggregate(_steps({0: 1.0, 1: 1.0}), _no_colls(), links)
    got = {
        (m["src_rank"], m["dst_rank"], m["transport"]): m["dst_label"]
        for m in res.to_json()["matrix"]
    }
    assert got == {
        (0, 1, "HCCS"): "rank 1",
        (0, 5, "HCCS"): "rank 5 (not profiled)",
        (1, 0, "HCCS"): "rank 0",
        (0, UNKNOWN_RANK, "RDMA"): "unknown rank (not profiled)",
        (1, UNKNOWN_RANK, "RDMA"): "unknown rank (not profiled)",
    }
    assert "<th>? (not profiled)</th>" in to_html(res)
