"""The Rule protocol, the rule registry and :func:`advise`, which runs every rule.

A rule is any object with an ``id``, a one-paragraph ``doc`` and ``match(profile, results)``.
``results`` is a mapping of analysis results by name (``"hotspots"``, ``"roofline"``, ...) that
rules may use when present; rules must work from the Profile alone. Two reserved keys carry
options: ``"target"`` (the device the advice is for: ``"cpu"``, ``"nvidia"``, ``"amd"``,
``"ascend"``; default the profile's own device) and ``"target_name"`` (a device name such as
``"H100"`` for peak look-ups).

A rule may also declare ``needs``: event kinds (:data:`opscope.model.schema.EVENT_KINDS`) of
which a profile must hold at least one for the rule to find anything (its findings all come
from such events, or from tables built only from them). :func:`advise` does not run a rule
whose needs the profile lacks, from the kinds' counts (once a profile), where its own queries
on those empty inputs would each cost a fixed ~0.1 ms to find nothing (tests/test_rule_needs.py
checks each declaration against the full path). ``opscope.analysis.tree.SHORTCUTS`` off runs
every rule.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, Protocol, runtime_checkable

from opscope.advise.finding import SEVERITIES, Finding
from opscope.model import Profile

RULE_MODULES: tuple[str, ...] = (
    "opscope.advise.rules.alignment",
    "opscope.advise.rules.layout",
    "opscope.advise.rules.fusion",
    "opscope.advise.rules.precision",
    "opscope.advise.rules.overhead",
    "opscope.advise.rules.memory",
    "opscope.advise.rules.gemm",
    "opscope.advise.rules.efficiency",
    "opscope.advise.rules.comm",
)


@runtime_checkable
class Rule(Protocol):
    """What every rule provides (and, optionally, ``needs``: see the module doc)."""

    id: str
    doc: str

    def match(self, profile: Profile, results: Mapping[str, Any]) -> list[Finding]:
        """The findings of this rule on ``profile`` (empty when it does not apply)."""
        ...


_RULES: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    """Add ``rule`` to the registry (ids are unique)."""
    if rule.id in _RULES and _RULES[rule.id] is not rule:
        raise ValueError(f"rule {rule.id!r} registered twice")
    _RULES[rule.id] = rule
    return rule


def rules() -> dict[str, Rule]:
    """Every registered rule by id (importing the built-in rule modules first)."""
    for mod in RULE_MODULES:
        importlib.import_module(mod)
    return dict(sorted(_RULES.items()))


def _sort_key(f: Finding) -> tuple[float, int, str]:
    return (-f.saving_us, SEVERITIES.index(f.severity), f.id)


@dataclass(frozen=True)
class Findings:
    """The findings of a run of :func:`advise`, sorted by estimated saving (largest first).

    Usable as a Report section: :meth:`to_json` gives the ``"findings"`` list of
    ``opscope report --json``; its Markdown is :func:`opscope.report.sections_md.findings_md`.
    """

    json_key: ClassVar[str] = "findings"  # its key in Report.to_json()

    items: tuple[Finding, ...] = ()
    errors: Mapping[str, str] = field(default_factory=dict)  # rule id -> why it could not run

    title: str = "Findings"

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Finding:
        return self.items[i]

    def by_rule(self, rule_id: str) -> list[Finding]:
        """The findings of one rule."""
        return [f for f in self.items if f.rule == rule_id]

    def get(self, finding_id: str) -> Finding | None:
        """The finding with this id (or a unique id prefix), else ``None``."""
        hits = [f for f in self.items if f.id == finding_id or f.id.startswith(finding_id)]
        return hits[0] if len(hits) == 1 else None

    def replace_items(self, items: Iterable[Finding]) -> Findings:
        """A copy holding ``items`` (re-sorted)."""
        return Findings(tuple(sorted(items, key=_sort_key)), self.errors, self.title)

    def to_json(self) -> list[dict[str, Any]]:
        """``[{"rule", "severity", "title", "file", "line", "module", "saving_us",
        "saving_pct", "fix", "verified_speedup"}]``, sorted by saving."""
        return [f.to_report_json() for f in self.items]

    def to_json_full(self) -> list[dict[str, Any]]:
        """Every field of every finding (ids, evidence, verification)."""
        return [f.to_json() for f in self.items]


def advise(
    profile: Profile,
    results: Mapping[str, Any] | None = None,
    *,
    target: str | None = None,
    only: Iterable[str] | None = None,
) -> Findings:
    """Run every registered rule (or those in ``only``) and return the findings by saving.

    ``target`` is the device the advice is for (see the module doc); default the profile's own.
    A rule that raises is recorded in ``Findings.errors``, not fatal.
    """
    ctx: dict[str, Any] = dict(results or {})
    if target is not None:
        ctx["target"] = target
    elif ctx.get("target_name") and ctx.get("target") in (None, "", "auto"):
        # a device named for peaks (--device MI300X) is also the device the advice is for
        from opscope.analysis.devices import check_device_name

        vendor = check_device_name(str(ctx["target_name"])).vendor
        if vendor in ("cpu", "nvidia", "amd", "ascend"):
            ctx["target"] = vendor
    from opscope.advise._common import target_of

    target_of(profile, ctx)  # an unknown target is the caller's error, raised here
    selected = rules()
    if only is not None:
        wanted = set(only)
        unknown = wanted - set(selected)
        if unknown:
            raise KeyError(f"unknown rules: {sorted(unknown)}")
        selected = {k: v for k, v in selected.items() if k in wanted}
    found: dict[str, Finding] = {}
    errors: dict[str, str] = {}
    from opscope.analysis.threads import run_each, sized_for

    held = _held_kinds(profile)  # (once, not a memo's look-up a rule)
    selected = {rid: r for rid, r in selected.items() if _applies(r, held)}
    # on threads (analysis/threads.py); outcomes in the rules' order, so the same findings
    with sized_for(profile.height("events")):
        outcomes = run_each([partial(_matched, r, profile, ctx) for r in selected.values()])
    for rid, out in zip(selected, outcomes, strict=True):
        matched, error = out.value or ([], out.error)
        for f in matched:  # those a rule gave before it failed are kept, as they always were
            found.setdefault(f.id, f)
        if error is not None:
            # odd input (or a bug) in one rule must not cost the report the other rules' findings
            errors[rid] = f"{type(error).__name__}: {error}"
    from opscope.advise.overlap import resolve_overlaps

    # one op's time counted once when two rules explain the same ops (advise/overlap.py)
    items = resolve_overlaps(_clamp(f, profile) for f in found.values())
    return Findings(tuple(sorted(items, key=_sort_key)), errors)


def needs(rule: Rule) -> tuple[str, ...]:
    """The event kinds ``rule`` declares it needs (empty: it runs on every profile)."""
    return tuple(getattr(rule, "needs", ()))


def can_apply(rule: Rule, profile: Profile) -> bool:
    """False when ``profile`` holds no event of any kind ``rule`` needs (and the shortcuts are
    on): its findings would be none."""
    return _applies(rule, _held_kinds(profile))


def _held_kinds(profile: Profile) -> Mapping[str, int] | None:
    """The events of each kind the profile holds (:func:`~opscope.advise._common.kind_counts`),
    ``None`` with the shortcuts off (every rule applies)."""
    from opscope.advise._common import kind_counts
    from opscope.analysis import tree

    return kind_counts(profile) if tree.SHORTCUTS else None


def _applies(rule: Rule, held: Mapping[str, int] | None) -> bool:
    """:func:`can_apply` from the kinds held (``None``: every rule applies)."""
    wanted = getattr(rule, "needs", ())
    return held is None or not wanted or any(held.get(k, 0) > 0 for k in wanted)


def _matched(
    rule: Rule, profile: Profile, ctx: dict[str, Any]
) -> tuple[list[Finding], Exception | None]:
    """The findings ``rule`` gives (drawn out here, on the thread that runs it), and the
    exception that ended them, if one did."""
    out: list[Finding] = []
    try:
        for f in rule.match(profile, ctx):
            out.append(f)
    except Exception as e:
        return out, e
    return out, None


def _clamp(f: Finding, profile: Profile) -> Finding:
    """No claim above what the fix can remove: a saving above its limit (or the step, for a
    finding made without one) is cut to it, and ``saving_how`` says so."""
    from dataclasses import replace

    from opscope.advise._common import step_info

    limit = f.saving_limit_us
    if limit is None:
        si = step_info(profile)
        limit = si.step_ns / 1e3 if si.step_ns > 0 else None
    if limit is None or f.saving_us <= limit:
        return f
    pct = f.saving_pct * limit / f.saving_us if f.saving_us else 0.0
    return replace(
        f,
        saving_us=round(limit, 3),
        saving_pct=round(pct, 3),
        saving_how=f"{f.saving_how}; capped at {limit:.1f} µs/step",
        saving_limit_us=limit,
    )
