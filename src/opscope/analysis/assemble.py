"""Assembling the analyses into one value: ``Analyzer(path).generate_report() -> Report``.

(What the renderers draw, and the whole report with findings and source, is built by
:func:`opscope.report.build.build_report`; this module holds the analyses' part and the section
protocol, nothing that formats.)

A :class:`Report` holds the loader's summary and one result per registered analysis (its
``sections``, keyed by analysis name). Results are data and follow a small protocol,
:class:`Section`: ``to_json() -> Any``, and may set a class attribute ``json_key`` (the key of
their part in :meth:`Report.to_json`; the analysis name otherwise). A result without ``to_json``
(or whose class sets ``generic_json = True``) is written generically from its tables. Markdown
and HTML are written in report/ (:mod:`opscope.report.sections_md` picks each result's renderer
by its class; a class without one is drawn as its tables). Other engineers' results (findings,
comparison) join a report through ``sections`` the same way.

A section that fails never costs the report the others: an analysis, rule or renderer that
raises is recorded as a :class:`SectionError` (section, exception type, one-line message) in
``Report.errors``, listed under ``"errors"`` in the JSON and as a warning line in every rendering.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol, TypeVar, runtime_checkable

import polars as pl

from opscope.analysis import registry
from opscope.analysis.hotspots import rows_of
from opscope.analysis.registry import Options, Result
from opscope.analysis.threads import Outcome, outcome_of, run_each, sized_for
from opscope.model import Profile


@runtime_checkable
class Section(Protocol):
    """What a report section gives: its JSON value. (Its Markdown is written in report/, by
    :mod:`opscope.report.sections_md`, chosen by the result's class.)"""

    def to_json(self) -> Any: ...


def section_key(name: str, result: Any) -> str:
    """The key of a section in the report's JSON: its ``json_key`` or its name."""
    key = getattr(type(result), "json_key", None)
    return key if isinstance(key, str) else name


def section_json(result: Any, top: int = 20) -> Any:
    """A section's JSON value: its ``to_json``, else (or when its class sets ``generic_json``)
    its tables' top rows and scalars."""
    # (what isinstance of the runtime-checkable Section checks, without its ~15 µs a section)
    if hasattr(result, "to_json") and not getattr(type(result), "generic_json", False):
        return result.to_json()
    if isinstance(result, Result):
        tables = result.tables()
        converted = rows_of([(v, top) for v in tables.values()])  # (one call: a query each)
        out: dict[str, Any] = dict(zip(tables, converted, strict=True))
        out.update({k: v for k, v in result.scalars().items() if _plain(v)})
        return out
    return result


@dataclass(frozen=True)
class SectionError:
    """A report section that raised: where, the exception's type and its one-line message."""

    section: str
    type: str
    message: str

    @classmethod
    def of(cls, section: str, exc: BaseException) -> SectionError:
        """The record of ``exc`` raised while producing ``section``."""
        return cls(section, type(exc).__name__, one_line(str(exc)))

    def to_json(self) -> dict[str, str]:
        """``{"section", "type", "message"}``."""
        return {"section": self.section, "type": self.type, "message": self.message}

    def line(self) -> str:
        """The warning line shown in the terminal, Markdown and HTML reports."""
        return f"section {self.section} failed: {self.type}: {self.message}"


def one_line(text: str, limit: int = 200) -> str:
    """``text``'s first line, cut to ``limit`` characters."""
    first = (text.strip().splitlines() or [""])[0]
    return first if len(first) <= limit else first[: limit - 1] + "…"


T = TypeVar("T")


def taken(section: str, outcome: Outcome[T], errors: list[SectionError]) -> T | None:
    """``outcome``'s value, or ``None`` with its failure appended to ``errors`` (one section must
    never take the report down)."""
    if outcome.error is not None:
        errors.append(SectionError.of(section, outcome.error))
        return None
    return outcome.value


def guarded(section: str, fn: Callable[[], T], errors: list[SectionError]) -> T | None:
    """``fn()``, or ``None`` with the failure appended to ``errors`` (:class:`KeyboardInterrupt`
    and friends still propagate)."""
    return taken(section, outcome_of(fn), errors)


def _plain(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool | list | dict)


@dataclass(frozen=True)
class Report:
    """The loader summary plus every analysis result, by name.

    Its text forms are written in :mod:`opscope.report` (analysis never imports it):
    ``opscope.report.markdown.render(report)``, ``opscope.report.html.render_html(report)``,
    ``opscope.report.base.render(report, "terminal" | "json" | "markdown")``.
    """

    summary: dict[str, Any]
    sections: dict[str, Any] = field(default_factory=dict)
    top: int = 20
    skipped: dict[str, str] = field(default_factory=dict)
    errors: tuple[SectionError, ...] = ()
    #: The profile the sections were computed from (for the memory curve and the source view).
    profile: Profile | None = field(default=None, repr=False, compare=False)
    #: :meth:`to_json`'s value, made once per Report (the terminal rendering reads it and the
    #: JSON rendering writes it: each section's rows were made twice); a copy (``replace``,
    #: :meth:`with_sections`) starts empty.
    _json: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __getitem__(self, name: str) -> Any:
        return self.sections[name]

    def tables(self) -> dict[str, pl.DataFrame]:
        """Every table of every section, keyed ``"<section>.<table>"``."""
        out: dict[str, pl.DataFrame] = {}
        for name, res in self.sections.items():
            if isinstance(res, Result):
                for k, v in res.tables().items():
                    out[f"{name}.{k}"] = v
        return out

    def to_json(self) -> dict[str, Any]:
        """The summary keys at the top level (and again under ``"load"``), then one key per
        section: ``hotspots``, ``sources``, ``anomalies``, ``roofline``, ``breakdown``,
        ``memory``, ...; ``"errors"``: one ``{"section", "type", "message"}`` per section that
        failed (analysis, rule or this rendering), empty when none did.

        Made once per Report; each call returns a new outer dict, ``"load"``, ``"skipped"`` and
        ``"errors"`` (what the HTML page adds to or replaces), the sections' values shared (its
        readers do not change them)."""
        if not self._json:
            self._json.update(self._make_json())
        out = dict(self._json)
        for key in ("load", "skipped"):
            if key in out:
                out[key] = dict(out[key])
        out["errors"] = list(out["errors"])
        return out

    def _make_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.summary)
        out["load"] = dict(self.summary)
        errors = list(self.errors)
        for name, res in self.sections.items():
            failed = len(errors)
            val = guarded(name, partial(section_json, res, self.top), errors)
            if len(errors) == failed:
                out[section_key(name, res)] = val
        if self.skipped:
            out["skipped"] = dict(self.skipped)
        out["errors"] = [e.to_json() for e in errors]
        return out

    def with_errors(self, *errors: SectionError) -> Report:
        """A copy with more failed sections recorded."""
        return replace(self, errors=(*self.errors, *errors))

    def with_sections(self, **sections: Any) -> Report:
        """A copy with more sections (e.g. ``findings=advise(profile)``, ``comparison=...``)."""
        return replace(self, sections={**self.sections, **sections})


class Analyzer:
    """Runs every registered analysis on a profile (a path is loaded with :func:`opscope.load`)."""

    def __init__(
        self, path_or_profile: str | os.PathLike[str] | Profile, *, salvage: bool = False
    ) -> None:
        if isinstance(path_or_profile, Profile):
            self.profile = path_or_profile
        else:
            from opscope.ingest import load

            self.profile = load(path_or_profile, salvage=salvage)

    def generate_report(
        self,
        top: int = 20,
        *,
        only: list[str] | None = None,
        options: Options | None = None,
        counted: Profile | None = None,
    ) -> Report:
        """Run the analyses (all registered, or ``only`` these) and return a :class:`Report`.

        The summary's loader counts are taken from ``counted`` when given (a copy of the
        profile holding only the columns they need, for one whose events stay on disk), else
        from the profile itself.

        An analysis that raises :class:`~opscope.errors.AnalysisError` for this profile is left
        out and named in ``Report.skipped``; one that raises anything else is a bug, but it costs
        the report only its own section: it is recorded in ``Report.errors``.
        """
        from opscope.errors import AnalysisError
        from opscope.ingest.summary import summary

        opts = options or Options(top=top)
        sections: dict[str, Any] = {}
        skipped: dict[str, str] = {}
        errors: list[SectionError] = []
        order = only or _ORDER_FIRST + [n for n in registry.names() if n not in _ORDER_FIRST]
        names = [n for n in order if n in registry.names()]
        # started longest first (on threads, the last to start sets the end), taken in order
        start = sorted(range(len(names)), key=lambda i: names[i] not in _START_FIRST)
        parts: list[Callable[[], Any]] = [
            partial(registry.run, names[i], self.profile, opts) for i in start
        ]
        parts.append(partial(summary, counted or self.profile))
        with sized_for(self.profile.height("events")):
            *started, head_done = run_each(parts)
        done = [started[start.index(i)] for i in range(len(names))]
        for name, out in zip(names, done, strict=True):
            if out.error is None:
                sections[name] = out.value
            elif isinstance(out.error, AnalysisError):
                skipped[name] = str(out.error)
            else:
                errors.append(SectionError.of(name, out.error))
        head = taken("summary", head_done, errors) or {}
        return Report(
            summary=head,
            sections=sections,
            top=top,
            skipped=skipped,
            errors=tuple(errors),
            profile=self.profile,
        )


_ORDER_FIRST = ["hotspots", "attribution", "anomalies", "roofline", "breakdown", "memory"]
# The analyses that take longest on real traces (the critical path was ~30% of a report's
# analysis time on the 75k-event A100 trace, and when it started last the other thread sat idle
# for most of it).
_START_FIRST = frozenset({"critical_path", "roofline"})
