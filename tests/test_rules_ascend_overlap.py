"""advise/overlap.py's ``part_of``: a rule whose findings list no op groups (comm-exposed,
overhead-recompile, overhead-device-idle) is taken to claim the groups of the findings that
name it, plus a remainder of its own; it is counted after them and keeps what is left."""

from __future__ import annotations

from opscope.advise.finding import Finding
from opscope.advise.overlap import resolve_overlaps


def _f(fid: str, rule: str, saving: float, limit: float | None, **ev: object) -> Finding:
    return Finding(
        id=fid,
        rule=rule,
        severity="medium",
        title=fid,
        evidence=dict(ev),
        saving_us=saving,
        saving_pct=saving / 10,
        saving_how="h",
        saving_method="device-idle",
        saving_limit_us=limit,
    )


def test_the_specific_finding_keeps_its_saving_the_general_one_the_rest() -> None:
    general = _f("g", "comm-exposed", 100.0, 100.0)
    specific = _f("s", "ascend-comm-packet", 30.0, 40.0, op_groups=[7, 8], part_of=["comm-exposed"])
    out = {f.id: f for f in resolve_overlaps([general, specific])}
    assert out["s"].saving_us == 30.0 and "overlaps" not in out["s"].evidence
    # its remainder is its own: not capped by the specific finding's limit (40)
    assert out["g"].saving_us == 70.0
    assert out["g"].evidence["overlaps"] == ["s"]
    assert out["g"].evidence["saving_before_overlap_us"] == 100.0
    assert "finding s (ascend-comm-packet)" in out["g"].saving_how


def test_a_general_finding_smaller_than_the_specific_one_keeps_nothing() -> None:
    general = _f("g", "overhead-recompile", 20.0, 50.0)
    specific = _f(
        "s", "ascend-dynamic-shape", 25.0, 25.0, op_groups=[1], part_of=["overhead-recompile"]
    )
    out = {f.id: f for f in resolve_overlaps([general, specific])}
    assert (out["s"].saving_us, out["g"].saving_us) == (25.0, 0.0)


def test_two_general_findings_do_not_count_against_each_other() -> None:
    """comm-exposed's small-message and exposed findings settle what they share in their rule;
    each gives up only what the naming finding counted."""
    small = _f("a", "comm-exposed", 10.0, 100.0)
    exposed = _f("b", "comm-exposed", 60.0, 100.0)
    idle = _f("c", "overhead-device-idle", 50.0, 500.0)
    spec = _f(
        "s",
        "ascend-comm-packet",
        5.0,
        5.0,
        op_groups=[3],
        part_of=["comm-exposed", "overhead-device-idle"],
    )
    out = {f.id: f for f in resolve_overlaps([small, exposed, idle, spec])}
    assert [out[i].saving_us for i in "abcs"] == [5.0, 55.0, 45.0, 5.0]
    assert all(out[i].evidence["overlaps"] == ["s"] for i in "abc")


def test_a_finding_with_its_own_op_groups_is_not_a_partner() -> None:
    """A named rule's finding that lists op groups is resolved on them as before."""
    other = _f("o", "comm-exposed", 50.0, 50.0, op_groups=[99])
    spec = _f("s", "ascend-comm-packet", 5.0, 5.0, op_groups=[3], part_of=["comm-exposed"])
    out = resolve_overlaps([other, spec])
    assert [f.saving_us for f in out] == [50.0, 5.0]
    assert all("overlaps" not in f.evidence for f in out)


def test_without_part_of_nothing_changes() -> None:
    fs = [_f("g", "comm-exposed", 100.0, 100.0), _f("s", "x", 30.0, 40.0, op_groups=[7])]
    assert resolve_overlaps(fs) == fs
