"""A rank that cannot be read is reported and skipped by every cluster engine, never fatal.

The shared 128-rank job's two sampled ranks plus a third rank file that is corrupt: the analysis
must equal the one over the two good ranks alone, and list the bad rank with its reason.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import shared_trace
from opscope.cluster import run_cluster
from opscope.errors import InputError
from opscope.report.sections_md import cluster_md


@pytest.fixture
def run_with_bad_rank(tmp_path: Path) -> tuple[Path, Path]:
    src = shared_trace("multi_rank/hta_sampled_128rank_job")
    good = tmp_path / "good"
    good.mkdir()
    for f in ("rank-0.json.gz", "rank-1.json.gz"):
        shutil.copy(src / f, good / f)
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    (bad / "rank-2.json").write_text('{"traceEvents": [{"ph": "X", "name": ')  # cut short
    return good, bad


@pytest.mark.parametrize("workers", [0, 2])
def test_a_corrupt_rank_is_skipped_and_reported(
    run_with_bad_rank: tuple[Path, Path], workers: int, user_cache: Path
) -> None:
    good, bad = run_with_bad_rank
    want = run_cluster(good, workers=0, cache=False)
    got = run_cluster(bad, workers=workers, cache=False)
    assert [r for r, _ in got.failed] == [2]
    assert "rank-2.json" in got.failed[0][1] or "JSON" in got.failed[0][1]
    assert got.ranks.equals(want.ranks)
    assert got.collectives.sort(got.collectives.columns).equals(
        want.collectives.sort(want.collectives.columns)
    )
    out = got.to_json()
    assert out["failed_ranks"][0]["rank"] == 2
    assert "could not be read" in cluster_md(got)


def test_ray_engine_skips_a_corrupt_rank(run_with_bad_rank: tuple[Path, Path]) -> None:
    pytest.importorskip("ray")
    good, bad = run_with_bad_rank
    want = run_cluster(good, workers=0, cache=False)
    got = run_cluster(bad, engine="ray", workers=2, cache=False)
    assert [r for r, _ in got.failed] == [2]
    assert got.ranks.equals(want.ranks)


def test_no_readable_rank_is_an_error(tmp_path: Path) -> None:
    for r in (0, 1):
        (tmp_path / f"rank-{r}.json").write_text(json.dumps({"traceEvents": 5}))
    with pytest.raises(InputError, match="no rank could be read"):
        run_cluster(tmp_path, workers=0, cache=False)
