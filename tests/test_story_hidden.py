"""The default story names the tables it leaves for --full without building them: its hidden
titles are those of the tables the full story shows for the same sections, in order."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import shared_trace
from opscope.report.story import build_story


def _expected_hidden(data: dict[str, Any]) -> list[str]:
    shown = {t.id for t in build_story(data).tables}
    ranks = data.get("ranks")
    many = isinstance(ranks, list) and len(ranks) > 1
    out = []
    for t in build_story(data, full=True).tables:
        if t.id in shown or t.id == "breakdown.steps":  # the steps: named below
            continue
        if t.id.startswith("cluster.") and not many:  # one rank: not even mentioned
            continue
        out.append(t.title)
    steps = (data.get("breakdown") or {}).get("steps") or []
    if len([r for r in steps if isinstance(r, dict)]) > 1:
        out.append("Step breakdown: steps")
    return out


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "ascend/small_two_rank/test_rank_0",
        "gpu/tracelens_h100_bert_small.json.gz",
    ],
)
def test_hidden_titles_are_the_full_storys_tables(rel: str) -> None:
    import opscope
    from opscope.report.build import build_report

    data = build_report(opscope.load(shared_trace(rel), cache=False), top=20).to_json()
    hidden = list(build_story(data).hidden)
    assert hidden and hidden == _expected_hidden(data)


def test_planted_sections_hidden_as_their_tables() -> None:
    data: dict[str, Any] = {
        "ranks": [0],
        "memory": {"peaks": [{"rank": 0, "bytes": 1}], "empty": [], "scalars": [1, 2], "n": 3},
        "roofline": [{"name": "mm", "time_us": 1.0}, 7],
        "utilisation": {"kernels": [{"name": "k"}], "streams": [{"stream": 7}]},
        "trend": [],
        "cluster": {"ranks": [{"rank": 0}]},
        "custom_section": [{"a": 1}],
    }
    hidden = list(build_story(data).hidden)
    assert hidden == _expected_hidden(data)
    assert hidden == [
        "Memory: peaks",
        "Roofline",
        "Device utilisation: kernels",
        "Device utilisation: streams",
        "Custom section",
    ]
