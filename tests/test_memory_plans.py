"""memory(): its five tables from one collect_all of the lazy plans equal the same plan run
step by step on eager frames (what it did before), on planted allocator events and on the
real traces that hold memory events."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from conftest import shared_trace
from opscope.analysis.memory import _places_lazy, _tables, memory
from opscope.analysis.registry import Options
from opscope.ingest.registry import load
from opscope.model import Profile

REAL = [  # below and above memory._OPTIMISE_MIN_ROWS allocator events
    "ascend/small_two_rank/test_rank_0",
    "gpu/tracelens_h100_bert_small.json.gz",
    "gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz",
]


def _check(p: Profile) -> None:
    got = memory(p, Options())
    want = _tables(p.memory, _places_lazy(p).collect())
    names = ("timeline", "peaks", "live_at_peak", "churn", "never_freed")
    for name, w in zip(names, want, strict=True):
        assert_frame_equal(getattr(got, name), w, check_exact=True)


@pytest.mark.parametrize("rel", REAL)
def test_real_traces_plans_equal_the_eager_steps(rel: str) -> None:
    p = load(shared_trace(rel), cache=False)
    if p.memory.height == 0:
        pytest.skip("no memory events")
    _check(p)
    assert memory(p, Options()).timeline.height == p.memory.height


def test_planted_allocations_plans_equal_the_eager_steps() -> None:
    import json
    import tempfile
    from pathlib import Path

    events = [{"ph": "X", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 0, "dur": 50}]
    for i, (ts, b, addr) in enumerate([(1, 100, 1), (2, 300, 2), (3, -100, 1), (4, 50, 3)]):
        events.append(
            {
                "ph": "i",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "s": "t",
                "args": {"Addr": addr, "Bytes": b, "Device Type": 1, "Device Id": 0, "i": i},
            }
        )
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "t.json"
        f.write_text(json.dumps({"traceEvents": events}))
        p = load(f, cache=False)
    assert p.memory.height == 4
    _check(p)
    peaks = memory(p, Options()).peaks
    assert peaks.get_column("peak_allocated").to_list() == [400]
    assert isinstance(peaks, pl.DataFrame)
