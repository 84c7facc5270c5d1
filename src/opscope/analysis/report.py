"""The automated-analysis API: ``Analyzer(path).generate_report() -> Report``.

A :class:`Report` holds the loader's summary and one result per registered analysis (its
``sections``, keyed by analysis name). Results follow a small protocol, :class:`Section`:
``to_json() -> Any`` and ``to_markdown() -> str``, and may set a class attribute ``json_key``
(the key of their part in :meth:`Report.to_json`; the analysis name otherwise). A result without
those methods is rendered generically from its tables. Other engineers' results (findings,
comparison) join a report through ``sections`` the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import polars as pl

from opscope.analysis import registry
from opscope.analysis.hotspots import markdown_table, rows
from opscope.analysis.registry import Options, Result
from opscope.model import Profile


@runtime_checkable
class Section(Protocol):
    """What a report section can do: give its JSON value and its Markdown."""

    def to_json(self) -> Any: ...

    def to_markdown(self) -> str: ...


def section_key(name: str, result: Any) -> str:
    """The key of a section in the report's JSON: its ``json_key`` or its name."""
    key = getattr(type(result), "json_key", None)
    return key if isinstance(key, str) else name


def section_json(result: Any, top: int = 20) -> Any:
    """A section's JSON value (its ``to_json``, else its tables' top rows and scalars)."""
    if isinstance(result, Section):
        return result.to_json()
    if isinstance(result, Result):
        out: dict[str, Any] = {k: rows(v, top) for k, v in result.tables().items()}
        out.update({k: v for k, v in result.scalars().items() if _plain(v)})
        return out
    return result


def section_markdown(name: str, result: Any, top: int = 20) -> str:
    """A section's Markdown (its ``to_markdown``, else a table per DataFrame)."""
    if isinstance(result, Section):
        return result.to_markdown()
    parts = [f"## {name}", ""]
    if isinstance(result, Result):
        for k, v in result.tables().items():
            parts += [f"### {k}", "", markdown_table(v, top), ""]
    return "\n".join(parts)


def _plain(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool | list | dict)


@dataclass(frozen=True)
class Report:
    """The loader summary plus every analysis result, by name."""

    summary: dict[str, Any]
    sections: dict[str, Any] = field(default_factory=dict)
    top: int = 20
    skipped: dict[str, str] = field(default_factory=dict)

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
        ``memory``, ..."""
        out: dict[str, Any] = dict(self.summary)
        out["load"] = dict(self.summary)
        for name, res in self.sections.items():
            out[section_key(name, res)] = section_json(res, self.top)
        if self.skipped:
            out["skipped"] = dict(self.skipped)
        return out

    def with_sections(self, **sections: Any) -> Report:
        """A copy with more sections (e.g. ``findings=advise(profile)``, ``comparison=...``)."""
        return replace(self, sections={**self.sections, **sections})

    def to_html(self, profile: Profile | None = None) -> str:
        """The report as one self-contained, offline HTML page (see :mod:`opscope.report.html`);
        with ``profile``, the page also draws the memory curve."""
        from opscope.report.html import render_html

        return render_html(self.to_json(), profile=profile)

    def to_markdown(self) -> str:
        """The whole report as one Markdown document."""
        s = self.summary
        head = [
            "# opscope report",
            "",
            f"format {s.get('format')}, ranks {s.get('ranks')}, {s.get('events')} events, "
            f"{s.get('ops')} ops, {s.get('kernels')} kernels, {s.get('steps')} steps, "
            f"span {float(s.get('span_us') or 0) / 1000:.3f} ms",
            "",
        ]
        body = [section_markdown(n, r, self.top) for n, r in self.sections.items()]
        return "\n".join(head) + "\n".join(body)


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
        self, top: int = 20, *, only: list[str] | None = None, options: Options | None = None
    ) -> Report:
        """Run the analyses (all registered, or ``only`` these) and return a :class:`Report`.

        An analysis that raises :class:`~opscope.errors.AnalysisError` for this profile is left
        out and named in ``Report.skipped``; any other exception is a bug and propagates.
        """
        from opscope.errors import AnalysisError
        from opscope.ingest.summary import summary

        opts = options or Options(top=top)
        sections: dict[str, Any] = {}
        skipped: dict[str, str] = {}
        for name in only or _ORDER_FIRST + [n for n in registry.names() if n not in _ORDER_FIRST]:
            if name not in registry.names():
                continue
            try:
                sections[name] = registry.run(name, self.profile, opts)
            except AnalysisError as e:
                skipped[name] = str(e)
        return Report(summary=summary(self.profile), sections=sections, top=top, skipped=skipped)


_ORDER_FIRST = ["hotspots", "attribution", "anomalies", "roofline", "breakdown", "memory"]
