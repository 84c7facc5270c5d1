"""The kinds a rule declares it ``needs`` (``advise.rule``): the engine does not run a rule on a
profile without any event of those kinds, so each declaration must hold: the rule's full path
(``tree.SHORTCUTS`` off, its match called) finds nothing on such profiles. Checked on a rank of
communication events only, a trace of kernels only and a planted profile with every kind but
the needed ones; and the engine's gate is seen to skip the rule."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import opscope
from opscope.advise import _common as c
from opscope.advise import advise
from opscope.advise.rule import can_apply, needs, rules
from opscope.analysis import tree
from opscope.model import Profile
from opscope.model.schema import EVENT_KINDS
from test_report_speed_empty import _kernels_only

ASCEND_DATA = Path("/work/ascend_data")
_COMM_ONLY = ASCEND_DATA / "st/level2/rank_1_ascend_pt"

_DECLARED = sorted(rid for rid, r in rules().items() if needs(r))


def test_needs_are_event_kinds_and_some_rules_declare_them() -> None:
    assert len(_DECLARED) >= 10
    for rid in _DECLARED:
        assert set(needs(rules()[rid])) <= set(EVENT_KINDS), rid


def _planted_without(kinds: tuple[str, ...]) -> Profile:
    """Every other kind of event, named as the rules look for them (a matmul, a copy, a
    softmax, an optimizer step, syncs, compiles, a data-loader fetch), nested under a step."""
    names = [
        "aten::matmul", "aten::add", "aten::softmax", "aten::item", "aten::copy_",
        "Optimizer.step#SGD.step", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        "aclopCompileAndExecute", "cudaStreamSynchronize", "sgemm_128x64", "hcom_allReduce_1",
    ]  # fmt: skip
    rows: list[dict[str, Any]] = []
    for kind in EVENT_KINDS:
        if kind in kinds:
            continue
        for n in names:
            i = len(rows)
            rows.append(
                {
                    "id": i, "rank": 0, "kind": kind, "name": n, "pid": 1,
                    "tid": 1 if kind not in ("kernel", "memcpy", "communication") else 7,
                    "ts_ns": 1000 * i, "dur_ns": 900, "input_dims": "[[64,64],[64,64]]",
                    "input_types": '["float","float"]', "step": 0,
                    "device": 0 if kind in ("kernel", "memcpy", "communication") else None,
                }
            )  # fmt: skip
    ev = pl.DataFrame(rows, schema_overrides={"device": pl.Int32, "step": pl.Int32})
    return Profile.from_tables(events=ev, meta={"format": "kineto"})


def _inputs(tmp_path: Path) -> list[tuple[str, Callable[[], Profile]]]:
    out: list[tuple[str, Callable[[], Profile]]] = [
        ("kernels_only", lambda: opscope.load(_kernels_only(tmp_path / "k.json"), cache=False))
    ]
    if _COMM_ONLY.exists():
        out.append(("comm_only", lambda: opscope.load(_COMM_ONLY, cache=False)))
    return out


@pytest.mark.parametrize("target", [None, "ascend", "nvidia"])
@pytest.mark.parametrize("rid", _DECLARED)
def test_full_path_finds_nothing_without_the_needed_kinds(
    rid: str, target: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rule = rules()[rid]
    ctx = {} if target is None else {"target": target}
    profiles = [("planted", lambda: _planted_without(needs(rule))), *_inputs(tmp_path)]
    checked = 0
    for which, make in profiles:
        monkeypatch.setattr(tree, "SHORTCUTS", True)
        prof = make()
        if not c.absent(prof, *needs(rule)):
            continue
        assert not can_apply(rule, prof)
        monkeypatch.setattr(tree, "SHORTCUTS", False)
        assert can_apply(rule, prof)  # shortcuts off: every rule runs
        assert list(rule.match(make(), ctx)) == [], (rid, which)
        checked += 1
    assert checked >= 2


def test_the_planted_profile_makes_the_rules_fire() -> None:
    """Not vacuous: with every kind present, the planted events give some rule a finding."""
    prof = _planted_without(())
    assert advise(prof).items


def test_the_engine_does_not_run_a_rule_it_can_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prof = opscope.load(_kernels_only(tmp_path / "k.json"), cache=False)
    ran: list[str] = []
    for rid in _DECLARED:
        rule = rules()[rid]
        real = rule.match

        def spy(p: Profile, r: Any, _rid: str = rid, _real: Any = real) -> Any:
            ran.append(_rid)
            return _real(p, r)

        monkeypatch.setattr(rule, "match", spy)
    found = advise(prof)
    assert found.errors == {}
    skipped = {rid for rid in _DECLARED if c.absent(prof, *needs(rules()[rid]))}
    assert skipped and not skipped & set(ran)
    assert set(_DECLARED) - skipped <= set(ran)
