"""One op's time counted once: findings of different rules that claim the same op groups.

A tall-skinny GEMM whose K is misaligned is seen by ``gemm-memory-bound`` (its gap to the
memory bound) and by ``shape-alignment`` (its time minus the padded shape's bound): two
explanations of the same gap, whose savings must not add past what the op can lose. Rules that
know which op groups they explain list them in ``evidence["op_groups"]`` (the first op id of each
group of calls of one op at one shape). :func:`resolve_overlaps` gives each op group to the
finding with the best-bounded saving (a saving with a bound before an unknown one, then the
larger) — unless another finding on the same ops has a fix that can be checked (a measured
speedup, a micro-benchmark ``opscope verify`` runs, a saving measured in the profile, or a
concrete code change such as padding) and a saving within :data:`NEAR_SHARE` of it: a bound gap
only says how far the op is from its bound, the checkable fix says what removes it — and
leaves the others what is left: the most any fix on those ops can remove is the
smallest limit among the findings claiming them (the op's gap to its bound, or its time), and
what the first finding claims is counted there. The others keep their place in the list with
``evidence["overlaps"]`` naming the finding their saving was counted in.

A rule whose ops are a part of what another rule's findings explain without listing op groups
(the Ascend rules inside ``comm-exposed``'s exposed communication or ``overhead-recompile``'s
compile calls) names that rule in ``evidence["part_of"]``: a finding of the named rule that
lists no op groups of its own is taken to claim the naming findings' groups plus a remainder of
its own (its other events), and is counted after them: the specific explanation keeps its
saving, the general one what is left of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from opscope.advise._common import severity_for
from opscope.advise.finding import Finding


def _groups(f: Finding) -> frozenset[int]:
    raw = f.evidence.get("op_groups") or ()
    return frozenset(int(g) for g in raw)


def _rank(f: Finding) -> tuple[bool, float, str]:
    return (f.saving_method == "unknown", -f.saving_us, f.id)


# Two savings on the same ops within this share of the larger are the same claim within the
# estimates' own error (the bound's ~10-20%, opscope's heuristic): the checkable fix goes first.
NEAR_SHARE = 0.10
# Rules whose fix is a concrete code change at the op (pad a dimension and slice).
CONCRETE_FIX_RULES = frozenset({"shape-alignment"})


def _checkable(f: Finding) -> int:
    """How well the finding's fix is checked: 2 measured faster by ``opscope verify``, 1 a
    micro-benchmark to run, a saving measured in the profile or a concrete code change, 0 a
    bound gap or an estimate alone."""
    if f.verified_speedup is not None and f.verified_speedup > 1.0:
        return 2
    if f.evidence.get("bench") or f.saving_method == "peer-rate" or f.rule in CONCRETE_FIX_RULES:
        return 1
    return 0


def _order(claimed: list[tuple[int, Finding, frozenset[int]]], implied: set[int]) -> list[int]:
    """Positions of ``claimed`` in the order their savings are counted: :func:`_rank`'s (implied
    findings after the others), except that the next finding gives way to a later one on
    shared ops whose fix is more checkable and whose saving is within :data:`NEAR_SHARE` of
    its own (the best such: most checkable, then by rank)."""
    left = sorted(
        range(len(claimed)), key=lambda p: (claimed[p][0] in implied, *_rank(claimed[p][1]))
    )
    out: list[int] = []
    while left:
        first = left[0]
        i, f, groups = claimed[first]
        rivals = [
            p
            for p in left[1:]
            if claimed[p][2] & groups
            and (claimed[p][0] in implied) == (i in implied)
            and (claimed[p][1].saving_method == "unknown") <= (f.saving_method == "unknown")
            and _checkable(claimed[p][1]) > _checkable(f)
            and claimed[p][1].saving_us >= (1.0 - NEAR_SHARE) * f.saving_us
        ]
        pick = max(rivals, key=lambda p: _checkable(claimed[p][1]), default=first)
        out.append(pick)
        left.remove(pick)
    return out


def _implied(items: list[Finding]) -> dict[int, frozenset[int]]:
    """The groups of findings that list none but whose rule another finding names in
    ``evidence["part_of"]``: the naming findings' groups plus a remainder group of the
    finding's own (a negative number, unique per finding)."""
    named: dict[str, set[int]] = {}
    for f in items:
        for rule in f.evidence.get("part_of") or ():
            named.setdefault(str(rule), set()).update(_groups(f))
    return {
        i: frozenset({*named[f.rule], -(i + 1)})
        for i, f in enumerate(items)
        if f.rule in named and not _groups(f)
    }


def resolve_overlaps(findings: Iterable[Finding]) -> list[Finding]:
    """The findings with each op group's saving counted once (see the module doc); findings
    that claim no op groups are returned unchanged, in their order."""
    items = list(findings)
    implied = _implied(items)
    claimed = [
        (i, f, implied.get(i) or _groups(f))
        for i, f in enumerate(items)
        if i in implied or _groups(f)
    ]
    # kept: (index, finding as counted, its groups)
    kept: list[tuple[int, Finding, frozenset[int]]] = []
    out = dict(enumerate(items))
    # a finding whose groups are implied (the general explanation) after the ones naming it;
    # two implied findings do not count against each other (they shared no op groups before
    # the naming finding, and their rules settle what they share, e.g. comm-exposed's two)
    for i, f, groups in (claimed[p] for p in _order(claimed, set(implied))):
        winners = [(w, g) for j, w, g in kept if g & groups and not (i in implied and j in implied)]
        if not winners:
            kept.append((i, f, groups))
            continue
        counted = sum(w.saving_us for w, _ in winners)
        covered = frozenset().union(*(g for _, g in winners))
        if groups <= covered:
            # every op here is already explained: the tightest limit caps the total
            limits = [x.saving_limit_us for x in (f, *(w for w, _ in winners))]
            cap = min((lim for lim in limits if lim is not None), default=f.saving_us)
            left = max(min(f.saving_us, cap - counted), 0.0)
        else:
            # some ops are this finding's alone: take the others' savings off it (an upper
            # bound on what they counted of the shared ops)
            left = max(f.saving_us - counted, 0.0)
        new = _overlapped(f, [w for w, _ in winners], left)
        out[i] = new
        kept.append((i, new, groups))
    return [out[i] for i in range(len(items))]


def _overlapped(f: Finding, winners: list[Finding], left: float) -> Finding:
    if left >= f.saving_us - 1e-9:
        return replace(f, evidence={**f.evidence, "overlaps": [w.id for w in winners]})
    names = ", ".join(f"{w.id} ({w.rule})" for w in winners)
    pct = f.saving_pct * left / f.saving_us if f.saving_us else 0.0
    # what is left may no longer be worth the rule's grade: graded again, never up (a rule's
    # own cap, e.g. shape-alignment's on a CPU profile, stays)
    order = ("high", "medium", "low")
    sev = max(f.severity, severity_for(pct), key=order.index)
    return replace(
        f,
        severity=sev,  # type: ignore[arg-type]
        saving_us=round(left, 3),
        saving_pct=round(pct, 3),
        saving_how=(
            f"{f.saving_how}; the same ops are explained by finding {names}, whose saving is "
            f"counted there: {left:.1f} of {f.saving_us:.1f} µs/step left here"
        ),
        evidence={
            **f.evidence,
            "overlaps": [w.id for w in winners],
            "saving_before_overlap_us": f.saving_us,
        },
    )
