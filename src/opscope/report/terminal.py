"""The terminal renderer: a report as a story (see :mod:`opscope.report.story`).

First the headline (step time and where it goes), then the top findings (where, saving per step,
the fix in one line), then the top operators, kernels and source lines, and the other tables only
when they say something; ``full=True`` (``opscope report --full``) draws every table. Every line
fits the console's width: names are cut with an ellipsis (paths from the left, keeping the file
and line), never folded into fragments.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache, partial
from io import StringIO
from typing import Any, cast

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.control import strip_control_codes
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from opscope.analysis.assemble import Report, SectionError, guarded
from opscope.report import fmt
from opscope.report.base import renderer
from opscope.report.fast_table import (
    FastTable,
    Line,
    StringColumn,
    StringTable,
    clamped_width,
    printed,
)
from opscope.report.story import Headline, Story, StoryFinding, StoryTable, story_of

_SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}
_FIXED = {"us", "pct", "int", "bytes", "num", "auto"}


def _fit_width(width: int, fixed: list[int], flexible: int) -> int:
    """The width each of ``flexible`` text columns gets when the others take ``fixed``."""
    # no edges, one space of padding between columns (two per column, counted generously)
    used = sum(fixed) + 2 * (len(fixed) + flexible)
    return max(8, (width - used) // max(1, flexible))


def story_table(t: StoryTable, width: int) -> StringTable | FastTable:
    """One story table drawn to fit ``width`` columns (text cells cut, numbers kept whole)."""
    cells = [[t.cell(r, c) for c in t.columns] for r in t.rows]
    widths = [
        max([len(c.header)] + [len(row[i]) for row in cells]) for i, c in enumerate(t.columns)
    ]
    while len(t.columns) > 2:  # columns that cannot fit at all go (the first ones say most)
        fixed = [w for w, c in zip(widths, t.columns, strict=True) if c.kind in _FIXED]
        flex = [i for i, c in enumerate(t.columns) if c.kind not in _FIXED]
        if sum(fixed) + 2 * len(t.columns) + 12 * len(flex) <= width:
            break
        t = replace(t, columns=t.columns[:-1])
        cells = [row[:-1] for row in cells]
        widths = widths[:-1]
    fixed = [w for w, c in zip(widths, t.columns, strict=True) if c.kind in _FIXED]
    flex = [i for i, c in enumerate(t.columns) if c.kind not in _FIXED]
    room = _fit_width(width, fixed, len(flex))
    for _ in range(4):  # rich's own layout decides the last few columns: measure, then shrink
        tab = _table(t, cells, widths, room)
        # measured from its strings: when rich's widest layout of the table already fits, the
        # drawn width (at most that) fits too, and the decision is made
        columns = tab.column_widths()
        exact = tab.one_line()
        drawn = sum(columns) + len(columns) - 1
        if drawn > width:  # the bound is the width itself when rich measures what it counts
            drawn = min(_PROBE_WIDTH, drawn) if exact else _drawn_width(tab.table())
        if drawn <= width or room <= 8:
            if exact and drawn <= width:
                # rich's own widths of this table wherever it fits: drawn from its strings
                tab.widths = columns
                return tab
            return tab.table()
        room = max(8, room - (drawn - width + len(flex) - 1) // max(1, len(flex)))
    return _table(t, cells, widths, room).table()


def _separators(tab: Table) -> int:
    return len(tab.columns) - 1 if tab.box else 0


def _widest(tab: Table) -> int:
    """An upper bound of :func:`_drawn_width` without drawing: rich's widths of an unexpanded
    table (each column its longest cell plus padding, clamped to its min/max width), plus the
    separators; the title and caption are wrapped to the table's width."""
    return sum(_column_widths(tab)) + _separators(tab)


def _column_widths(tab: Table) -> list[int]:
    """Each column's longest cell plus padding, clamped to its min/max width: rich's widths
    of an unexpanded table that fits, when its cells are one-line texts."""
    n = len(tab.columns)
    left, right = tab.padding[3], tab.padding[1]
    out = []
    for i, col in enumerate(tab.columns):
        pad = (0 if i == 0 and not tab.pad_edge else left) + (
            0 if i == n - 1 and not tab.pad_edge else right
        )
        texts = [col.header, *col.cells] if tab.show_header else list(col.cells)
        longest = max((_cell_len(x) for x in texts), default=0)
        out.append(clamped_width(longest, pad, col.min_width, col.max_width))
    return out


def _one_line_texts(tab: Table) -> bool:
    """Whether every cell (and shown header) of ``tab`` is a one-line Text: rich measures
    those by their cells, as :func:`_widest` counts them, so that the bound is
    :func:`_drawn_width` itself (up to its 1000 columns; a markup string or a text of several
    lines is measured otherwise)."""
    for col in tab.columns:
        for x in [col.header, *col.cells] if tab.show_header else col.cells:
            if not isinstance(x, Text) or len(x.plain.splitlines()) > 1:
                return False
    return True


def _cell_len(x: object) -> int:
    if isinstance(x, Text):
        return x.cell_len
    return cell_len(str(x))


def _drawn_width(tab: Table) -> int:
    """The width of ``tab`` drawn on 1000 columns, without drawing it (drawing it to measure
    its longest line cost more than the rest of a small report's table): rich's own column
    widths plus one separator between columns, the title and caption wrapped to them; at most
    the 1000 columns. Equal to the drawn width on every story table of the shared traces."""
    probe = _probe()
    widths = tab._calculate_column_widths(probe, probe.options)
    return min(_PROBE_WIDTH, sum(widths) + (len(widths) - 1 if tab.box else 0))


_PROBE_WIDTH = 1000


@cache
def _probe() -> Console:
    """The console :func:`_drawn_width` measures on: one, not one a table (it only measures,
    never prints). Its height is given so that ``options`` does not ask the OS for the
    terminal's size at each call (rich asks whenever a width or height is not given); no
    renderable here reads the height."""
    return Console(width=_PROBE_WIDTH, height=25, file=StringIO())


def _table(t: StoryTable, cells: list[list[str]], widths: list[int], room: int) -> StringTable:
    flex = [i for i, c in enumerate(t.columns) if c.kind not in _FIXED]
    # a text column narrower than its share gives the rest to the others
    spare = sum(max(0, room - widths[i]) for i in flex)
    wide = [i for i in flex if widths[i] > room]
    room_wide = room + (spare // len(wide) if wide else 0)
    columns = [
        StringColumn(
            c.header,
            "right" if c.kind in _FIXED and c.kind != "num" else "left",
            min_width=widths[i] if c.kind in _FIXED else None,
            max_width=None if c.kind in _FIXED else min(widths[i], room_wide),
        )
        for i, c in enumerate(t.columns)
    ]
    clips = [
        partial(fmt.clip_left, width=room_wide)
        if c.kind == "path"
        else None
        if c.kind in _FIXED
        else partial(fmt.clip, width=room_wide)
        for c in t.columns
    ]
    rows = [
        [x if cut is None else cut(x) for x, cut in zip(row, clips, strict=True)] for row in cells
    ]
    caption = t.basis + (f"; {t.more} more rows: --full" if t.more else "")
    return StringTable(t.title, caption, columns, rows)


def headline(h: Headline, width: int) -> list[RenderableType]:
    """The headline: what was profiled, the step time, and where it goes."""
    what = " · ".join(
        x
        for x in (
            h.source,
            h.format,
            f"{h.ranks} rank{'s' if h.ranks != 1 else ''}",
        )
        if x
    )
    out: list[RenderableType] = [
        Line(("opscope report", "bold"), f" · {what}"),
        Line(("Step time ", "bold"), h.step_text()),
    ]
    if h.parts:
        kind = "device" if h.device else "host"
        out.append(Line(f"Where it goes ({kind} time, % {h.basis}):"))
        label_w = max(len(p.label) for p in h.parts) + 2
        bar_w = max(0, min(30, width - label_w - 22))
        rows = []
        for p in h.parts:
            for depth, q in [(0, p)] + [(1, d) for d in p.detail]:
                bar = "█" * round(bar_w * min(100.0, max(0.0, q.pct)) / 100) if bar_w else ""
                cells = [("  " * (depth + 1)) + q.label, fmt.us(q.us), fmt.pct(q.pct)]
                rows.append((*cells, bar) if bar_w else tuple(cells))
        out.append(HeadlineTable(rows, width))
    for n in h.notes:
        out.append(Line(f"  {n}", style="dim"))
    return out


class HeadlineTable:
    """Where the step goes: a row per share (its label, time, percentage and, with room, a bar),
    the FastTable :meth:`table` made only when a console draws it; a plain-text report's text
    of it drawn from its strings (making the table and drawing it was ~0.15 ms of a small
    report's ~0.8). Tests compare the text with rich's drawing of :meth:`table`."""

    def __init__(self, rows: list[tuple[str, ...]], width: int) -> None:
        self.rows = rows
        self.width = width
        self._table: FastTable | None = None

    def table(self) -> FastTable:
        """The table rich draws (the label cut with an ellipsis, numbers right-justified)."""
        if self._table is not None:
            return self._table
        width = self.width
        tab = FastTable(box=None, show_header=False, pad_edge=False, padding=(0, 1))
        tab.add_column(no_wrap=True, overflow="ellipsis", max_width=max(10, width - 24))
        tab.add_column(justify="right", no_wrap=True)
        tab.add_column(justify="right", no_wrap=True)
        bars = bool(self.rows) and len(self.rows[0]) > 3
        if bars:
            tab.add_column(no_wrap=True)
        for label, us, pct, *bar in self.rows:
            cells: list[RenderableType] = [Text(label), us, pct]
            tab.add_row(*cells, *([Text(bar[0], style="cyan")] if bars else []))
        if _one_line_texts(tab):  # rich's widths of it, where they fit: not measured again
            columns = _column_widths(tab)
            if sum(columns) + _separators(tab) <= width:
                tab.known_widths = columns
        self._table = tab
        return tab

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        return [self.table()]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table())

    def printed(self, console: Console, options: ConsoleOptions) -> str | None:
        """The text rich draws of :meth:`table` (FastTable.printed's), from the strings where
        every cell is a one-line text that fits rich's widths (each column's longest cell and
        its padding, within the label's limit); else the table's own."""
        text = self._printed(options.max_width)
        return printed(console, self.table(), options) if text is None else text

    def _printed(self, room: int) -> str | None:
        rows = self.rows
        n = len(rows[0]) if rows else 0
        if not n or any("[" in r[i] or ":" in r[i] for r in rows for i in (1, 2)):
            return None  # (a markup string: rich parses it)
        sizes = [[_text_len(x) for x in r] for r in rows]
        if any(x is None for r in sizes for x in r):
            return None
        pads = [int(i > 0) + int(i < n - 1) for i in range(n)]
        label_max = max(10, self.width - 24)
        widths = [
            clamped_width(
                max(cast(int, r[i]) for r in sizes), pads[i], None, label_max if i == 0 else None
            )
            for i in range(n)
        ]
        if sum(widths) > min(self.width, room):
            return None
        out: list[str] = []
        for r, size in zip(rows, sizes, strict=True):
            line = ""
            for i, (x, k) in enumerate(zip(r, size, strict=True)):
                left, right = int(i > 0), int(i < n - 1)
                blank = widths[i] - left - right - cast(int, k)
                if blank < 0:
                    return None  # (cut with an ellipsis: rich's)
                body = " " * blank + x if i in (1, 2) else x + " " * blank
                line += " " * left + body + " " * right
            out.append(line + "\n")
        return "".join(out)


def _text_len(x: str) -> int | None:
    """The cells of a one-line text rich draws as it is (none for one of several lines, a tab or
    a trailing blank: rich splits, expands or strips those); 0 for an empty one (its cell is
    its padding's blanks)."""
    if not x:
        return 0
    if x.isascii() and x.isprintable():
        return None if x[-1] == " " else len(x)
    if "\n" in x or "\t" in x or x[-1].isspace() or strip_control_codes(x) != x:
        return None  # (rich's Text drops control codes)
    return cell_len(x)


def finding_lines(f: StoryFinding, width: int) -> list[Line]:
    """A finding in three short lines: title; where and saving; the fix."""
    title = Line(
        (f"{f.rank}. ", "bold"),
        (f"[{f.severity}] ", _SEVERITY_STYLE.get(f.severity, "")),
        (fmt.clip(f.title, width - 6 - len(f.severity)), "bold"),
    )
    saving = (
        f"saves ≈ {fmt.us(f.saving_us)}/step ({fmt.pct(f.saving_pct)} of the step)"
        if f.saving_us
        else "saving not estimated"
    )
    where = fmt.clip_left(f.where, max(10, width - len(saving) - 8)) if f.where else ""
    out = [title, Line("   " + " · ".join(x for x in (where, saving) if x))]
    if f.fix:
        out.append(Line("   fix: " + fmt.clip(f.fix, width - 8), style="green"))
    return out


def draw_story(story: Story, width: int) -> list[RenderableType]:
    """Every renderable of the story, in order."""
    out: list[RenderableType] = headline(story.headline, width)
    for w in story.warnings:
        out.append(Line(w, style="yellow"))
    out.append(Line())
    if story.findings:
        n = len(story.findings) + story.more_findings
        out.append(Line(f"Top findings ({len(story.findings)} of {n}, by saving)", style="bold"))
        for f in story.findings:
            out += finding_lines(f, width)
        if story.more_findings:
            out.append(Line(f"   … {story.more_findings} more: opscope report --full", style="dim"))
    else:
        out.append(Line("No findings.", style="green"))
    for t in story.tables:
        out.append(Line())
        out.append(story_table(t, width))
    return out


@renderer("terminal")
def render_terminal(
    report: Report, console: Console | None = None, *, full: bool = False, **_: Any
) -> str:
    """Print ``report``'s story on ``console`` (returns ""), or return it as text when none is
    given (80 columns). ``full``: every table.

    A part that cannot be drawn is a warning line, as is every section that failed before
    (``report.errors``); the last line counts them.
    """
    width = console.width if console is not None else _WIDTH
    errors: list[SectionError] = list(report.errors)
    data = guarded("json", report.to_json, errors)
    if data is not None:  # a section whose value cannot be made fails here, in every rendering
        errors += [SectionError(**e) for e in data["errors"][len(report.errors) :]]
    shown_errors = len(errors)
    # one print of everything below, not one per part: the same lines (each part renders as
    # if printed alone), without rich's per-print overhead (~30% of the drawing)
    parts: list[RenderableType] = []
    story = guarded("story", partial(story_of, report, full=full, data=data), errors)
    if story is not None:
        parts += guarded("story", partial(draw_story, story, width), errors) or []
        for name in story.extra:
            res = report.sections.get(name)
            md = guarded(name, partial(_extra, res), errors)
            if md is not None:
                parts.append(md)
        if story.hidden and not full:
            shown = "; ".join(story.hidden)
            parts.append(Line(f"\nNot shown (--full shows every table): {shown}", style="dim"))
    for e in errors[shown_errors:]:
        parts.append(Text(f"warning: {e.line()}", style="yellow"))
    for name, why in report.skipped.items():
        parts.append(Text(f"{name}: skipped ({why})", style="dim"))
    if console is None and not errors:  # nothing to print: the text without printing it
        return _printed_text(_plain_console(), parts)
    # the height given: rich asks the OS for the terminal's size at each print otherwise
    # (~3 failing ioctls); nothing drawn here reads the height (only rich's alt screen does)
    out = console or Console(file=StringIO(), width=_WIDTH, height=25, record=True)
    # (nothing was printed before: the warnings first, as the sections' own lines were made)
    for e in errors[:shown_errors]:
        out.print(Text(f"warning: {e.line()}", style="yellow"))
    if parts:
        out.print(Group(*parts))
    if errors:
        out.print(
            f"[yellow]{len(errors)} report section(s) failed; the others are complete.[/]",
            highlight=False,
        )
    return "" if console is not None else out.export_text()


_WIDTH = 80  # a report's text without a console


@cache
def _plain_console() -> Console:
    """The console a report's text is drawn on without a console of its caller's: one, not one
    a rendering (making it was ~5% of a small report's drawing). It is only read (its width,
    options, styles and box characters, set when it is made from its file and size, not the
    environment's colours), never printed on: a rendering with something to print (a failed
    section's warning) prints on a console of its own."""
    return Console(file=StringIO(), width=_WIDTH, height=25, record=True)


def _printed_text(out: Console, parts: list[RenderableType]) -> str:
    """What ``out.print(Group(*parts))`` then ``out.export_text()`` give, without printing
    (rich's print splits and crops every line, buffers, records and writes each segment, and
    the export joins them again): the text of the segments it renders, each line cropped to
    ``out``'s width as print crops it, control codes left out as the export leaves them."""
    if not parts:
        return ""
    # print's options (Console.print with its defaults)
    options = out.options.update(
        justify=None, overflow=None, height=None, no_wrap=None, markup=None, highlight=None
    )
    # (a Group yields its parts: each rendered with those options); the text of each, without
    # its segments where it draws its text itself (the story's lines and tables: the same text)
    text = "".join([printed(out, part, options) for part in parts])
    width = out.width
    if all(cell_len(line) <= width for line in text.split("\n")):
        return text
    segments = [s for part in parts for s in out.render(part, options)]
    lines = Segment.split_and_crop_lines(segments, width, pad=False)  # (print's crop)
    return "".join([s.text for line in lines for s in line if not s.control])


def _extra(res: Any) -> RenderableType:
    """The comparison, drawn by its own renderer."""
    from opscope.report.compare_render import render_rich

    return render_rich(res)
