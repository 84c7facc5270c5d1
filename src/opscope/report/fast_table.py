"""A rich :class:`~rich.table.Table` whose plain one-line body rows are drawn without rich's
per-cell machinery.

Rich draws every cell through a Padding, a Text wrap and a line split (~25 us a cell): most of a
small report's terminal rendering, whose story tables hold ~100 cells of plain text each. When a
row's cells are plain :class:`~rich.text.Text` (no style, no spans, one line, no trailing blank,
no tab) that fits its column, rich's segments for it are known: the padding (unstyled
``Style()``), the text justified in the column (no style), the column dividers. Those are
yielded directly; the header (markup strings, the header style) and every other row go through
rich's own code, so the segments (and therefore every rendering: plain text, colours, HTML) are
the same as :class:`~rich.table.Table`'s (tests compare them segment for segment).
"""

from __future__ import annotations

from copy import copy
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.measure import Measurement
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.table import Column

_NULL = Style()


def _plain(cell: object) -> str | None:
    """The text of a cell rich would draw as one unstyled line, or None."""
    if type(cell) is not Text:
        return None
    if cell._spans or cell.style or cell.justify or cell.overflow or cell.no_wrap is not None:
        return None
    if cell.end != "\n" or cell.tab_size is not None:
        return None
    text = cell.plain
    # rich splits on newlines, expands tabs and strips the right of right-justified text
    if not text or "\n" in text or "\t" in text or text[-1].isspace():
        return None
    return text


def _measure_padded(text: Text, extra: int, max_width: int) -> Measurement:
    """``Measurement.get`` of ``Padding(text)`` with ``extra`` columns of padding, without
    building the Padding: Measurement.get, Padding.__rich_measure__, Measurement.get and
    Text.__rich_measure__ folded into their closed form (their normalize/with_maximum steps
    change nothing once the widths are clamped to ``max_width``; a test compares every case)."""
    if max_width < 1:
        return Measurement(0, 0)
    if max_width - extra < 1:
        return Measurement(max_width, max_width)
    plain = text.plain
    lines = plain.splitlines()
    longest = max(cell_len(line) for line in lines) if lines else 0
    if not longest:
        return (
            Measurement(0, 0)
            if extra < 1
            else Measurement(min(extra, max_width), min(extra, max_width))
        )
    words = plain.split()
    shortest = min(max(cell_len(word) for word in words) if words else longest, longest)
    return Measurement(
        min(min(shortest, max_width) + extra, max_width),
        min(min(longest, max_width) + extra, max_width),
    )


class FastTable(Table):
    """:class:`~rich.table.Table`, its plain body rows drawn directly (same segments)."""

    def _simple(self) -> bool:
        """The layouts whose body rows :meth:`_fast_rows` draws as rich would."""
        return bool(
            self.box is not None
            and self.show_header
            and not self.show_footer
            and not self.show_edge
            and not self.pad_edge
            and not self.show_lines
            and not self.leading
            and not self.collapse_padding
            and not self.row_styles
            and self.padding[0] == 0
            and self.padding[2] == 0
            and all(not c.style and c.justify in ("left", "right") for c in self.columns)
            and all(r.style is None and not r.end_section for r in self.rows)
        )

    def add_column(self, header: RenderableType = "", *args: Any, **kwargs: Any) -> None:
        """:meth:`rich.table.Table.add_column`; a header string without markup or emoji codes
        (no ``[``, no ``:``) as the :class:`~rich.text.Text` rich would make of it, so it is
        not parsed as markup at every measure and draw."""
        if isinstance(header, str) and "[" not in header and ":" not in header:
            header = Text(header)
        super().add_column(header, *args, **kwargs)

    def _measure_column(
        self, console: Console, options: ConsoleOptions, column: Column
    ) -> Measurement:
        """Rich's measurement of ``column``; its :class:`~rich.text.Text` cells measured without
        a Padding each (the header, a markup string, and any other cell: rich's own way)."""
        max_width = options.max_width
        if max_width < 1 or column.width is not None or self.collapse_padding:
            return super()._measure_column(console, options, column)
        # without collapse_padding every cell of a column has the same left and right padding
        _, right, _, left = self.padding
        if not self.pad_edge:
            left = 0 if column._index == 0 else left
            right = 0 if column._index == len(self.columns) - 1 else right
        cells: list[object] = list(column.cells)
        if self.show_header:
            cells.insert(0, column.header)
        if self.show_footer:
            cells.append(column.footer)
        mins: list[int] = []
        maxs: list[int] = []
        for cell in cells:
            if type(cell) is Text:
                low, high = _measure_padded(cell, left + right, max_width)
            else:
                low, high = Measurement.get(
                    console,
                    options,
                    Padding(cell, (0, right, 0, left)),  # type: ignore[arg-type]
                )
            mins.append(low)
            maxs.append(high)
        pad = left + right
        measurement = Measurement(
            max(mins) if mins else 1, max(maxs) if maxs else max_width
        ).with_maximum(max_width)
        return measurement.clamp(
            None if column.min_width is None else column.min_width + pad,
            None if column.max_width is None else column.max_width + pad,
        )

    def _fast_rows(self, widths: list[int]) -> list[list[list[Segment]]] | None:
        """Every body row's cells' segments when each cell is plain text that fits, else None."""
        _, pad_right, _, pad_left = self.padding
        n = len(self.columns)
        shapes = []
        for i, (col, width) in enumerate(zip(self.columns, widths, strict=True)):
            left = 0 if i == 0 else pad_left
            right = 0 if i == n - 1 else pad_right
            shapes.append((left, right, width - left - right, col.justify == "right"))
        pads = {k: Segment(" " * k, _NULL) for k in {pad_left, pad_right} if k}
        rows: list[list[list[Segment]]] = []
        for cells in zip(*(c.cells for c in self.columns), strict=True):
            row: list[list[Segment]] = []
            for (left, right, inner, right_justify), cell in zip(shapes, cells, strict=True):
                text = _plain(cell)
                if text is None:
                    return None
                room = inner - cell_len(text)
                if room < 0:  # cut with an ellipsis: rich's own code
                    return None
                segs = [pads[left]] if left else []
                segs.append(Segment(" " * room + text if right_justify else text + " " * room))
                if right:
                    segs.append(pads[right])
                row.append(segs)
            rows.append(row)
        return rows

    def _render(self, console: Console, options: ConsoleOptions, widths: list[int]) -> RenderResult:
        table_style = console.get_style(self.style or "")
        border = table_style + console.get_style(self.border_style or "")
        plain = self.rows and self._simple() and not table_style and not border
        rows = self._fast_rows(widths) if plain else None
        if rows is None:
            yield from super()._render(console, options, widths)
            return
        # the header and its rule: rich's own drawing of this table without its rows
        head = copy(self)
        head.columns = [replace(c, _cells=[]) for c in self.columns]
        head.rows = []
        yield from Table._render(head, console, options, widths)
        assert self.box is not None
        safe = self.safe_box if self.safe_box is not None else console.safe_box
        box = self.box.substitute(options, safe=safe)
        new_line = Segment.line()
        for r, row in enumerate(rows):
            text = box.foot_vertical if r == len(rows) - 1 else box.mid_vertical
            # a blank divider takes the row's background (rows have no style here), as in rich
            div = Segment(text, border if text.strip() else Style.null().background_style + border)
            for i, segs in enumerate(row):
                if i:
                    yield div
                yield from segs
            yield new_line
