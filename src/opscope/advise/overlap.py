"""One op's time counted once: findings of different rules that claim the same op groups.

A tall-skinny GEMM whose K is misaligned is seen by ``gemm-memory-bound`` (its gap to the
memory bound) and by ``shape-alignment`` (its time minus the padded shape's bound): two
explanations of the same gap, whose savings must not add past what the op can lose. Rules that
know which op groups they explain list them in ``evidence["op_groups"]`` (the first op id of each
group of calls of one op at one shape). :func:`resolve_overlaps` gives each op group to the
finding with the best-bounded saving (a saving with a bound before an unknown one, then the
larger) and leaves the others what is left: the most any fix on those ops can remove is the
smallest limit among the findings claiming them (the op's gap to its bound, or its time), and
what the first finding claims is counted there. The others keep their place in the list with
``evidence["overlaps"]`` naming the finding their saving was counted in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from opscope.advise.finding import Finding


def _groups(f: Finding) -> frozenset[int]:
    raw = f.evidence.get("op_groups") or ()
    return frozenset(int(g) for g in raw)


def _rank(f: Finding) -> tuple[bool, float, str]:
    return (f.saving_method == "unknown", -f.saving_us, f.id)


def resolve_overlaps(findings: Iterable[Finding]) -> list[Finding]:
    """The findings with each op group's saving counted once (see the module doc); findings
    that claim no op groups are returned unchanged, in their order."""
    items = list(findings)
    claimed = [(i, f, _groups(f)) for i, f in enumerate(items) if _groups(f)]
    # kept: (finding as counted, its groups)
    kept: list[tuple[Finding, frozenset[int]]] = []
    out = dict(enumerate(items))
    for i, f, groups in sorted(claimed, key=lambda t: _rank(t[1])):
        winners = [(w, g) for w, g in kept if g & groups]
        if not winners:
            kept.append((f, groups))
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
        kept.append((new, groups))
    return [out[i] for i in range(len(items))]


def _overlapped(f: Finding, winners: list[Finding], left: float) -> Finding:
    if left >= f.saving_us - 1e-9:
        return replace(f, evidence={**f.evidence, "overlaps": [w.id for w in winners]})
    names = ", ".join(f"{w.id} ({w.rule})" for w in winners)
    pct = f.saving_pct * left / f.saving_us if f.saving_us else 0.0
    return replace(
        f,
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
