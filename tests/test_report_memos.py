"""A report computes each shared intermediate once: no value of the per-profile memo
(``tree.per_profile``) or the rules' memo (``advise._common._memo``) is computed twice while one
report is built, which an evicted entry (a memo too small for a report's intermediates) would do."""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

import pytest

import opscope
from conftest import shared_trace
from opscope.advise import _common
from opscope.analysis import threads, tree
from opscope.report.build import build_report

TRACES = (
    "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
    "compare/hta_trace_diff_control_a100_rank3of8.json.gz",
    "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
)


def _counted(memo: tree.Memo, counts: Counter[Hashable], monkeypatch: pytest.MonkeyPatch) -> None:
    """Count each computation by key and owner object. A key holds the owner's id, and an id
    can be reused by a new object once its owner is gone: a computation for the new owner is
    counted apart (its owner's generation at that id), not as a second one of the same value."""
    get = memo.get
    owners: dict[int, tuple[weakref.ref[Any], int]] = {}

    def generation(owner: object) -> int:
        held = owners.get(id(owner))
        if held is not None and held[0]() is owner:
            return held[1]
        gen = 0 if held is None else held[1] + 1
        owners[id(owner)] = (weakref.ref(owner), gen)
        return gen

    def counting(key: Hashable, owner: object, compute: Callable[[], Any]) -> Any:
        def once() -> Any:
            counts[(key, generation(owner))] += 1
            return compute()

        return get(key, owner, once)

    monkeypatch.setattr(memo, "get", counting)


@pytest.mark.parametrize("rel", TRACES)
def test_no_intermediate_is_computed_twice(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # two threads asking for the same intermediates, also on the traces a report would run in
    # one thread (fewer events than threads.SERIAL_BELOW_EVENTS)
    monkeypatch.setenv(threads.THREADS_ENV, "2")
    path = shared_trace(rel)
    counts: Counter[Hashable] = Counter()
    _counted(tree._MEMO, counts, monkeypatch)
    _counted(_common._MEMO, counts, monkeypatch)
    build_report(opscope.load(path, cache=False))
    assert len(counts) >= 20  # the memos are in use (the report's shared intermediates)
    assert {k: n for k, n in counts.items() if n > 1} == {}
    assert tree._LOCKS == {}  # every key's lock gone with its last user (none kept, none leaked)


def test_a_memo_smaller_than_a_report_computes_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # the check above can fail: with the rules' memo cut to a few entries, values are evicted
    # while still needed and computed again
    path = shared_trace(TRACES[0])
    monkeypatch.setattr(_common, "_MEMO", tree.Memo(4))
    counts: Counter[Hashable] = Counter()
    _counted(_common._MEMO, counts, monkeypatch)
    build_report(opscope.load(path, cache=False))
    assert any(n > 1 for n in counts.values())
