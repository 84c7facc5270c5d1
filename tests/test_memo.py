"""The per-owner memo behind ``tree.per_profile`` and the rules' ``_memo``."""

from __future__ import annotations

import gc
from dataclasses import replace

from helpers.synth import training
from opscope.advise import _common
from opscope.analysis import tree


class _Owner:
    pass


def test_computes_once_per_owner_and_key() -> None:
    memo = tree.Memo(8)
    a, b = _Owner(), _Owner()
    calls: list[str] = []

    def make(tag: str) -> object:
        calls.append(tag)
        return object()

    first = memo.get("k", a, lambda: make("a"))
    assert memo.get("k", a, lambda: make("a again")) is first
    # the same key for another live owner (as an id reused by a new object would be) computes
    other = memo.get("k", b, lambda: make("b"))
    assert other is not first
    assert calls == ["a", "b"]


def test_a_dead_owner_is_dropped_and_the_size_is_bounded() -> None:
    memo = tree.Memo(3)
    owners = [_Owner() for _ in range(5)]
    for i, o in enumerate(owners):
        memo.get(i, o, lambda i=i: i)  # type: ignore[misc]
    assert list(memo._values) == [2, 3, 4]  # the oldest went first
    del owners[3]
    gc.collect()
    memo.get(9, owners[0], lambda: 9)
    assert list(memo._values) == [2, 4, 9]  # the dead owner's entry went, nothing else


def test_rules_memo_is_keyed_on_the_events_table() -> None:
    prof = training(steps=1).profile
    calls: list[int] = []

    def compute() -> list[int]:
        calls.append(1)
        return [len(calls)]

    v = _common._memo("test-memo", prof, compute)
    # a copy of the Profile with the same events shares the value; other events compute afresh
    assert _common._memo("test-memo", replace(prof), compute) is v
    fresh = replace(prof, events=prof.events.clone())
    assert _common._memo("test-memo", fresh, compute) == [2]
    assert calls == [1, 1]
