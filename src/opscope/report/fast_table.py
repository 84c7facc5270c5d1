"""A rich :class:`~rich.table.Table` whose one-line rows are drawn without rich's per-row
machinery, and a :class:`~rich.text.Text` drawn without its wrapping when it is one line that
fits.

Rich draws every cell through a Padding, a Text wrap and a line split (~25 us a cell), and
measures each through a Padding: most of a small report's terminal rendering, whose story tables
hold ~100 cells of plain text each. A cell of plain :class:`~rich.text.Text` (no style, no spans,
one line, no trailing blank, no tab) that fits its left- or right-justified column has known
segments: the padding, the text justified in the column, each with the cell's style (the
header's styles in the header row; without one, ``Style()`` and no style); those are made
directly, any other cell is drawn by rich's own cell drawing, and the dividers and the rule under
the header are rich's. Any table with a multi-line row, row styles, lines between rows, box
edges or a footer goes through rich's own code; a table whose maker knows rich's column widths
for it (``known_widths``) is not measured again where they fit. :class:`FastText` (a story's
lines, a table's title and caption) skips :meth:`~rich.text.Text.wrap` when there is nothing to
wrap. The segments (and so every rendering: plain text, colours, HTML) are rich's: tests
compare them segment for segment, and every story table of the 49 reference inputs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from rich._wrap import divide_line
from rich.box import SIMPLE_HEAD
from rich.cells import cell_len, set_cell_size
from rich.control import strip_control_codes
from rich.measure import Measurement
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

_JOIN = Text("\n")  # rich's separator of wrapped lines (Text.__rich_console__)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rich.box import Box
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.table import Column

_NULL = Style()
T = TypeVar("T", bound=Table)


def _plain(cell: object) -> tuple[str, str | Style] | None:
    """The text and style of a cell rich would draw as one line of one style, or None."""
    if type(cell) is not Text:
        return None
    if cell._spans or cell.justify or cell.overflow or cell.no_wrap is not None:
        return None
    if cell.end != "\n" or cell.tab_size is not None:
        return None
    text = cell.plain
    # rich splits on newlines, expands tabs and strips the right of right-justified text (and
    # draws an empty text as no segment)
    if not text or "\n" in text or "\t" in text or text[-1].isspace():
        return None
    return text, cell.style


def _direct_cell(
    console: Console, shape: Any, cell_style: Style, text: str, style: str | Style
) -> list[Segment] | None:
    """The segments rich draws for a cell of one line of ``text`` in ``style`` that fits its
    left- or right-justified column (``shape``: FastTable._fast_rows'), or None when it does
    not fit or its style is a link (rich makes a new link of it at each drawing)."""
    left, right, width, justify = shape[:4]
    room = width - left - right - cell_len(text)
    if room < 0 or cell_style.link or justify not in ("left", "right"):
        return None
    # the text justified in its column is one segment of its own style (none: no style), the
    # Padding's blanks are unstyled; rich applies the cell's style (when it has one) to each
    text_style = console.get_style(style, default=_NULL) if style else None
    if text_style is not None and text_style.link:
        return None
    if cell_style:
        pad_style, text_style = cell_style, cell_style + text_style
    else:
        pad_style = _NULL
    segs = [Segment(" " * left, pad_style)] if left else []
    body = " " * room + text if justify == "right" else text + " " * room
    segs.append(Segment(body, text_style))
    if right:
        segs.append(Segment(" " * right, pad_style))
    return segs


def _unmarked(text: str) -> bool:
    """Whether rich draws ``text`` as ``Text(text)``: no markup tag, no emoji code."""
    return "[" not in text and ":" not in text


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
    """:class:`~rich.table.Table`, its one-line body rows drawn directly (same segments)."""

    #: The column widths rich's layout gives this table (padding included) wherever they fit,
    #: when its maker knows them (terminal.story_table: one-line texts, measured by their
    #: cells): taken instead of measuring every cell again at each drawing.
    known_widths: list[int] | None = None

    def _calculate_column_widths(self, console: Console, options: ConsoleOptions) -> list[int]:
        known = self.known_widths
        if (
            known is not None
            and len(known) == len(self.columns)
            and sum(known) <= options.max_width  # rich's layout keeps each column's widest
            and not self.expand
            and self.min_width is None
            and all(c.width is None for c in self.columns)
        ):
            return list(known)
        return super()._calculate_column_widths(console, options)

    def _simple(self) -> bool:
        """The layouts whose body rows :meth:`_fast_rows` draws as rich would: one-line rows,
        no row styles, no lines between rows, no footer, no edge padding, no box edges."""
        return bool(
            not self.show_footer
            and not (self.box is not None and self.show_edge)  # edges: rich's own code
            and not self.pad_edge
            and not self.show_lines
            and not self.leading
            and not self.collapse_padding
            and not self.row_styles
            and self.padding[0] == 0
            and self.padding[2] == 0
            and all(r.style is None and not r.end_section for r in self.rows)
        )

    def add_column(self, header: RenderableType = "", *args: Any, **kwargs: Any) -> None:
        """:meth:`rich.table.Table.add_column`; a header string without markup or emoji codes
        (no ``[``, no ``:``) as the :class:`~rich.text.Text` rich would make of it, so it is
        not parsed as markup at every measure and draw."""
        if isinstance(header, str) and _unmarked(header):
            header = Text(header)
        super().add_column(header, *args, **kwargs)

    def add_row(self, *renderables: RenderableType | None, **kwargs: Any) -> None:
        """:meth:`rich.table.Table.add_row`; a string cell without markup or emoji codes in a
        column that does not highlight as the :class:`~rich.text.Text` rich makes of it (drawn
        directly when it fits, instead of parsed and wrapped)."""
        cells = list(renderables)
        for i, cell in enumerate(cells):
            plain = isinstance(cell, str) and _unmarked(cell)
            if plain and i < len(self.columns) and not self.columns[i].highlight:
                cells[i] = Text(cell)  # type: ignore[arg-type]
        super().add_row(*cells, **kwargs)

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

    def _fast_rows(
        self, console: Console, options: ConsoleOptions, widths: list[int]
    ) -> list[list[list[Segment]]] | None:
        """The header's (when shown) and every body row's cells' segments, or None when a cell
        takes more than one line.

        A plain text cell that fits its left- or right-justified column is drawn directly; any
        other (styled, cut with an ellipsis, centred) is drawn by rich as in
        :meth:`rich.table.Table._render` (its padding, options and style)."""
        _, pad_right, _, pad_left = self.padding
        n = len(self.columns)
        get_style = console.get_style
        row_style = get_style(Style.null())  # no row styles here (see _simple)
        table_header = get_style(self.header_style or "")
        shapes = []
        for i, (col, width) in enumerate(zip(self.columns, widths, strict=True)):
            left = 0 if i == 0 else pad_left
            right = 0 if i == n - 1 else pad_right
            cell_options = options.update(
                width=width,
                justify=col.justify,
                no_wrap=col.no_wrap,
                overflow=col.overflow,
                height=None,
                highlight=col.highlight,
            )
            styles = (
                get_style(col.style or "") + row_style,
                table_header + get_style(col.header_style),
            )
            shapes.append((left, right, width, col.justify, styles, cell_options))
        rows: list[list[list[Segment]]] = []
        if self.show_header:  # rich draws the header as a row styled by the header styles
            header = self._fast_row(console, shapes, [c.header for c in self.columns], 1)
            if header is None:
                return None
            rows.append(header)
        for cells in zip(*(c.cells for c in self.columns), strict=True):
            row = self._fast_row(console, shapes, cells, 0)
            if row is None:
                return None
            rows.append(row)
        return rows

    @staticmethod
    def _fast_row(
        console: Console, shapes: list[Any], cells: Any, which: int
    ) -> list[list[Segment]] | None:
        """One row's cells' segments (``which`` picks the cell style: 0 body, 1 header)."""
        row: list[list[Segment]] = []
        for shape, cell in zip(shapes, cells, strict=True):
            cell_style = shape[4][which]
            plain = _plain(cell)
            segs = None if plain is None else _direct_cell(console, shape, cell_style, *plain)
            if segs is None:
                segs = _rich_cell(console, shape, cell_style, cell)
                if segs is None:
                    return None
            row.append(segs)
        return row

    def printed(self, console: Console, options: ConsoleOptions) -> str | None:
        """The text of what rich draws of this table where :meth:`_render` draws its rows itself
        and rich draws nothing else (no box, no title or caption, no fixed width), as
        Table.__rich_console__ lays it out; else None."""
        if (
            not self.columns
            or not self.rows
            or self.box is not None
            or self.width is not None
            or self.title
            or self.caption
            or not self._simple()
        ):
            return None
        # (no box: no extra width for edges or dividers)
        widths = self._calculate_column_widths(console, options.update_width(options.max_width))
        render_options = options.update(width=sum(widths), highlight=self.highlight, height=None)
        rows = self._fast_rows(console, render_options, widths)
        if rows is None:
            return None
        return "".join(["".join([s.text for c in row for s in c]) + "\n" for row in rows])

    def _render(self, console: Console, options: ConsoleOptions, widths: list[int]) -> RenderResult:
        table_style = console.get_style(self.style or "")
        border = table_style + console.get_style(self.border_style or "")
        rows = self._fast_rows(console, options, widths) if self.rows and self._simple() else None
        if rows is None:
            yield from super()._render(console, options, widths)
            return
        if self.box is None:
            yield from _unboxed(rows)
            return
        safe = self.safe_box if self.safe_box is not None else console.safe_box
        box = self.box.substitute(options, safe=safe)
        box = box if self.show_header else box.get_plain_headed_box()
        yield from _boxed(rows, box, border, widths, self.show_header, self.show_edge)


_WORD = re.compile(r"\s*\S+\s*")  # rich._wrap's words: a word and the blanks after it


def _divided(line: str, width: int, fold: bool) -> list[int]:
    """``divide_line(line, width, fold=fold)``: for a line of printable ASCII (a cell a
    character) whose words fit the width, its steps with lengths for cells (its cell_len of
    each word, ~40% of a caption's drawing); any other line divided by rich."""
    if not (line.isascii() and line.isprintable()):
        return divide_line(line, width, fold=fold)
    breaks: list[int] = []
    offset = 0
    for word in _WORD.finditer(line):
        start, end = word.span()
        size = len(word.group().rstrip())
        if width - offset >= size:
            offset += end - start
        elif size > width:  # (folded or cropped: rich's)
            return divide_line(line, width, fold=fold)
        elif offset and start:
            breaks.append(start)
            offset = end - start
    return breaks


def _fitted(piece: str, width: int, pad: bool, overflow: str) -> str:
    """A divided line as Text.wrap ends it: rstrip_end, the left justification's truncate
    with padding, then truncate."""
    if len(piece) > width:  # rstrip_end: trailing blanks past the width (in characters)
        blanks = len(piece) - len(piece.rstrip())
        piece = piece[: len(piece) - min(blanks, len(piece) - width)] if blanks else piece
    for padded in (pad, False) if pad else (False,):
        size = cell_len(piece)
        if size > width:
            piece = (
                set_cell_size(piece, width - 1) + "…"
                if overflow == "ellipsis"
                else set_cell_size(piece, width)
            )
        if padded and size < width:
            piece += " " * (width - size)
    return piece


def _unboxed(rows: list[list[list[Segment]]]) -> Iterable[Segment]:
    new_line = Segment.line()
    for row in rows:
        for segs in row:
            yield from segs
        yield new_line


def _boxed(
    rows: list[list[list[Segment]]],
    box: Box,
    border: Style,
    widths: list[int],
    show_header: bool,
    show_edge: bool,
) -> Iterable[Segment]:
    """Rows of cells' segments between ``box``'s dividers (no edges), as rich's Table draws
    them: the header first, when shown, and the rule under it."""
    new_line = Segment.line()
    total = len(rows)
    for k, row in enumerate(rows):
        place = 0 if k == 0 else (2 if k == total - 1 else 1)
        divider = (box.head_vertical, box.mid_vertical, box.foot_vertical)[place]
        # a blank divider takes the row's background (rows have no style here), as in rich
        div = Segment(
            divider, border if divider.strip() else Style.null().background_style + border
        )
        for i, segs in enumerate(row):
            if i:
                yield div
            yield from segs
        yield new_line
        if k == 0 and show_header:  # the rule under the header
            yield Segment(box.get_row(widths, "head", edge=show_edge), border)
            yield new_line


class FastText(Text):
    """:class:`~rich.text.Text` whose one line that fits is drawn as rich draws it without
    wrapping it first (a split, a line division, a justification and a truncation, each copying
    the text: ~25 us a line, a story has ~30)."""

    def _one_line(self, options: ConsoleOptions) -> tuple[str, int, int] | None:
        """(justification, width, cells) when this is one line that fits, drawn here; else
        None (rich's own drawing)."""
        justify = self.justify or options.justify or "default"
        overflow = self.overflow or options.overflow or "fold"
        width = options.max_width
        plain = self.plain
        size = cell_len(plain)
        if (
            justify not in ("default", "left")
            or overflow == "ignore"  # rich neither justifies nor cuts then
            or "\n" in plain
            or "\t" in plain
            or size > width
            or len(plain) > width  # (rich trims blanks past the width counted in characters)
        ):
            return None
        return justify, width, size

    def printed(self, console: Console, options: ConsoleOptions) -> str | None:
        """The text of the segments drawn on ``options`` (the line, then its end; padded to the
        width when left-justified, with spans or not), or None where rich draws it."""
        return _text_printed(
            self.plain, self.end, options, self.justify, self.overflow, self.no_wrap
        )

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterable[Segment]:
        fits = self._one_line(options)
        if fits is None:
            yield from super().__rich_console__(console, options)
            return
        justify, width, size = fits
        overflow = self.overflow or options.overflow or "fold"
        plain = self.plain
        if self._spans:
            line: Text = self
            if justify == "left" and size < width:  # padded to the width, as rich's justify
                line = self.copy()
                line.truncate(width, overflow=overflow, pad=True)
            # what Text.__rich_console__ draws of its one wrapped line
            yield from _JOIN.join([line]).render(console, end=self.end)
            return
        # without spans, that join's render is the line in the text's style (when it has one,
        # as a span of the join: none where the line is empty), then the end
        if justify == "left" and size < width:
            plain += " " * (width - size)
        if not self.style:
            yield Segment(plain)
        elif plain:
            yield Segment(plain, console.get_style(self.style, default=_NULL))
        if self.end:
            yield Segment(self.end)


def _text_printed(
    plain: str,
    end: str,
    options: ConsoleOptions,
    justify: str | None = None,
    overflow: str | None = None,
    no_wrap: bool | None = None,
) -> str | None:
    """:meth:`FastText.printed` of a text of ``plain`` (its justify, overflow and no_wrap):
    one line that fits as it is, any other as :func:`_wrapped` draws it."""
    just = justify or options.justify or "default"
    width = options.max_width
    if (
        just in ("default", "left")
        and (overflow or options.overflow) != "ignore"
        and "\n" not in plain
        and "\t" not in plain
        and len(plain) <= width  # (rich trims blanks past the width counted in characters)
    ):
        size = len(plain) if plain.isascii() and plain.isprintable() else cell_len(plain)
        if size <= width:
            return plain + (" " * (width - size) if just == "left" else "") + end
    return _wrapped(plain, end, options, justify, overflow, no_wrap)


def _wrapped(
    plain: str,
    end: str,
    options: ConsoleOptions,
    justify: str | None,
    overflow: str | None,
    no_wrap: bool | None,
) -> str | None:
    """The text rich draws of a text on several lines (Text.wrap's steps on the plain string:
    each line divided where rich's divide_line says, its blanks past the width trimmed, padded
    when left-justified, cut to the width), without its Text copies (a caption's three lines
    were ~50 us); None where it draws otherwise (tabs, no wrapping, other justifications)."""
    justify = justify or options.justify or "default"
    overflow = overflow or options.overflow or "fold"
    no_wrap = no_wrap if no_wrap is not None else options.no_wrap
    width = options.max_width
    if justify not in ("default", "left") or overflow == "ignore" or no_wrap or "\t" in plain:
        return None
    out: list[str] = []
    for line in plain.split("\n"):  # (Text.split with blanks allowed)
        offsets = _divided(line, width, overflow == "fold")
        for a, b in zip([0, *offsets], [*offsets, len(line)], strict=True):
            out.append(_fitted(line[a:b], width, justify == "left", overflow))
    return "\n".join(out) + end


class Line:
    """A line of the story: ``FastText.assemble(*parts, style=style)``, made only when a console
    draws it; a plain-text report's text of it is drawn from its string (~3-5 us a line less:
    a story has ~25)."""

    __slots__ = ("_parts", "_style", "_text", "plain")

    def __init__(self, *parts: str | tuple[str, str], style: str = "") -> None:
        self._parts = parts
        self._style = style
        self._text: FastText | None = None
        #: The text's plain string (Text drops control codes from what it is given).
        self.plain = strip_control_codes(
            "".join([p if isinstance(p, str) else p[0] for p in parts])
        )

    def text(self) -> FastText:
        """The FastText a console draws."""
        if self._text is None:
            text = FastText.assemble(*self._parts, style=self._style)
            self._text = cast(FastText, text)  # (assemble makes its own class)
        return self._text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        return [self.text()]

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.text())

    def printed(self, console: Console, options: ConsoleOptions) -> str | None:
        """:meth:`FastText.printed` of :meth:`text`, without making it."""
        return _text_printed(self.plain, "\n", options)


@dataclass(frozen=True)
class StringColumn:
    """A column of a :class:`StringTable`: its header, its justification and rich's limits of
    its width (padding not included)."""

    header: str
    justify: Literal["left", "right"]
    min_width: int | None = None
    max_width: int | None = None


class StringTable:
    """A story table of strings, drawn as rich draws :meth:`table` without building it.

    The layout is terminal.story_table's: a bold title and a caption, both on the left; the
    SIMPLE_HEAD box without edges; one space between columns; cells of one line, never wrapped,
    cut with an ellipsis. Rich's Table of it makes a Text of every cell, measures each again at
    every drawing and draws it through its layout (most of a small report's terminal time).
    Given rich's column widths (``widths``: its maker knows them, see :meth:`column_widths`),
    its plain cells that fit are drawn directly and any other cell by rich, as FastTable draws
    them; without widths, without rows, with less room than the widths or with a cell of several
    lines, rich's own :meth:`table` is drawn. Tests compare the segments with rich's.
    """

    def __init__(
        self,
        title: str,
        caption: str,
        columns: Sequence[StringColumn],
        rows: list[list[str]],
    ) -> None:
        self.title = title
        self.caption = caption
        self.columns = tuple(columns)
        self.rows = rows
        #: Rich's widths of :meth:`table`'s columns (padding included), when its maker knows
        #: they fit the width it is drawn on.
        self.widths: list[int] | None = None
        self._table: FastTable | None = None

    def table(self) -> FastTable:
        """The same table as rich draws it (given its known widths)."""
        if self._table is None:
            self._table = self.rich_table(FastTable)
        self._table.known_widths = self.widths
        return self._table

    def rich_table(self, cls: type[T]) -> T:
        """The table as a ``cls`` (a :class:`~rich.table.Table`): what :meth:`table` draws."""
        tab = cls(
            title=FastText(self.title, style="bold"),
            caption=FastText(self.caption),
            title_justify="left",
            caption_justify="left",
            box=SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            expand=False,
        )
        for c in self.columns:
            tab.add_column(
                c.header,
                justify=c.justify,
                no_wrap=True,
                overflow="ellipsis",
                min_width=c.min_width,
                max_width=c.max_width,
            )
        for row in self.rows:
            # Text, not str: a trace's names ("[[1,256]]", "<lambda>[...]") are not markup
            tab.add_row(*[Text(x) for x in row])
        return tab

    def column_widths(self) -> list[int]:
        """Each column's longest cell or header plus its padding, clamped to its limits: rich's
        widths of :meth:`table` wherever they fit, when :meth:`one_line` (as
        terminal._column_widths measures the Table, here from the strings)."""
        n = len(self.columns)
        out = []
        for i, col in enumerate(self.columns):
            pad = (i > 0) + (i < n - 1)  # one space a side, none at the table's edges
            longest = max([cell_len(col.header), *(cell_len(r[i]) for r in self.rows)])
            out.append(clamped_width(longest, pad, col.min_width, col.max_width))
        return out

    def one_line(self) -> bool:
        """Whether every header and cell is a one-line Text in :meth:`table` (a header with
        markup or an emoji code is a string rich parses)."""
        return all(
            _unmarked(c.header) and len(c.header.splitlines()) <= 1 for c in self.columns
        ) and all(len(x.splitlines()) <= 1 for row in self.rows for x in row)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # a list, not a generator: its ~100-300 segments are not resumed one by one
        widths = self.widths
        n = len(self.columns)
        if widths is None or not self.rows or not n or sum(widths) + n - 1 > options.max_width:
            return [self.table()]
        # Table.__rich_console__'s options for its annotations and its rows
        render_options = options.update(width=sum(widths) + n - 1, highlight=False, height=None)
        rows = self._drawn_rows(console, render_options, widths)
        if rows is None:
            return [self.table()]
        out: list[Segment] = []
        annotation = render_options.update(justify="left")
        if self.title:
            out += console.render(FastText(self.title, style="bold"), annotation)
        get_style = console.get_style
        border = get_style("") + get_style("")  # the table's style and its border style: none
        box = SIMPLE_HEAD.substitute(render_options, safe=console.safe_box)
        out += _boxed(rows, box, border, widths, True, False)
        if self.caption:
            out += console.render(FastText(self.caption), annotation)
        return out

    def printed(self, console: Console, options: ConsoleOptions) -> str | None:
        """The text of what :meth:`__rich_console__` draws where it draws the rows itself (the
        title, the rows between the box's dividers, the caption), without its segments and
        styles (a plain-text report's); None where rich's table is drawn."""
        widths = self.widths
        n = len(self.columns)
        if widths is None or not self.rows or not n or sum(widths) + n - 1 > options.max_width:
            return None
        render_options = options.update(width=sum(widths) + n - 1, highlight=False, height=None)
        rows = self._rows_text(console, render_options, widths)
        if rows is None:  # (a cell of several lines)
            return None
        out: list[str] = []
        annotation = render_options.update(justify="left")
        if self.title:
            out.append(printed(console, FastText(self.title, style="bold"), annotation))
        box = SIMPLE_HEAD.substitute(render_options, safe=console.safe_box)
        out += _boxed_text(rows, box, widths, True, False)  # type: ignore[arg-type]
        if self.caption:
            out.append(printed(console, FastText(self.caption), annotation))
        return "".join(out)

    def _rows_text(
        self, console: Console, options: ConsoleOptions, widths: list[int]
    ) -> list[list[str]] | None:
        """The texts of :func:`_string_row`'s cells, the header's then each row's (a cell rich
        draws: the text of its segments; None when one takes several lines). A cell of printable
        ASCII is measured by its length, and the shapes rich draws a cell with are made only
        for a cell it draws (the story's tables have one or none: ~10 us a table)."""
        n = len(self.columns)
        geometry = [
            (int(i > 0), int(i < n - 1), width, col.justify)
            for i, (col, width) in enumerate(zip(self.columns, widths, strict=True))
        ]
        shapes: list[Any] | None = None
        out: list[list[str]] = []
        for k, cells in enumerate([[c.header for c in self.columns], *self.rows]):
            row: list[str] = []
            for i, text in enumerate(cells):
                left, right, width, justify = geometry[i]
                plain = text.isascii() and text.isprintable()  # (one cell a character)
                room = width - left - right - (len(text) if plain else cell_len(text))
                if plain and room >= 0 and (not text or text[-1] != " "):
                    # (a blank cell: rich draws no text, the cell is its padding's blanks)
                    body = " " * room + text if justify == "right" else text + " " * room
                    row.append(" " * left + body + " " * right)
                    continue
                if plain or room < 0 or "\n" in text or "\t" in text or text[-1].isspace():
                    # rich draws it (cut, ending in a blank, of several lines, ...)
                    shapes = shapes or self._shapes(console, options, widths)
                    segs = _rich_cell(console, shapes[i], shapes[i][4][int(k == 0)], Text(text))
                    if segs is None:
                        return None
                    row.append("".join([s.text for s in segs]))
                    continue
                body = " " * room + text if justify == "right" else text + " " * room
                row.append(" " * left + body + " " * right)
            out.append(row)
        return out

    def _shapes(self, console: Console, options: ConsoleOptions, widths: list[int]) -> list[Any]:
        """Each column's (left, right, width, justify, (body style, header style), options)."""
        get_style = console.get_style
        # the body's cell style: the column's style and the row's (none); the header's: the
        # table's header style and the column's
        styles = (
            get_style("") + get_style(Style.null()),
            get_style("table.header") + get_style(""),
        )
        n = len(self.columns)
        shapes = []
        for i, (col, width) in enumerate(zip(self.columns, widths, strict=True)):
            cell_options = options.update(
                width=width,
                justify=col.justify,
                no_wrap=True,
                overflow="ellipsis",
                height=None,
                highlight=False,
            )
            left, right = (0 if i == 0 else 1), (0 if i == n - 1 else 1)
            shapes.append((left, right, width, col.justify, styles, cell_options))
        return shapes

    def _drawn_rows(
        self, console: Console, options: ConsoleOptions, widths: list[int]
    ) -> list[list[list[Segment]]] | None:
        """The header's and every row's cells' segments (FastTable._fast_rows of :meth:`table`),
        or None when a cell takes more than one line."""
        shapes = self._shapes(console, options, widths)
        header = _string_row(console, shapes, [c.header for c in self.columns], 1)
        if header is None:
            return None
        out = [header]
        for cells in self.rows:
            row = _string_row(console, shapes, cells, 0)
            if row is None:
                return None
            out.append(row)
        return out


def _string_row(
    console: Console, shapes: list[Any], cells: Sequence[str], which: int
) -> list[list[Segment]] | None:
    """FastTable._fast_row of a row of strings (each the Text rich would make of it): as
    _direct_cell draws a text without a style, its cell's style looked at once for the row."""
    cell_style = shapes[0][4][which]  # (the same for every cell of the row)
    direct = not cell_style.link
    pad_style, text_style = (cell_style, cell_style) if cell_style else (_NULL, None)
    row: list[list[Segment]] = []
    for shape, text in zip(shapes, cells, strict=True):
        left, right, width, justify = shape[0], shape[1], shape[2], shape[3]
        room = width - left - right - cell_len(text)
        if (
            room < 0 or not direct or not text or "\n" in text or "\t" in text or text[-1].isspace()
        ):  # rich draws it (cut, blank, of several lines, ...)
            segs = _rich_cell(console, shape, cell_style, Text(text))
            if segs is None:
                return None
            row.append(segs)
            continue
        body = Segment(" " * room + text if justify == "right" else text + " " * room, text_style)
        segs = [Segment(" " * left, pad_style), body] if left else [body]
        if right:
            segs.append(Segment(" " * right, pad_style))
        row.append(segs)
    return row


def _boxed_text(
    rows: list[list[str]], box: Box, widths: list[int], show_header: bool, show_edge: bool
) -> list[str]:
    """The text of :func:`_boxed`'s segments, line by line."""
    out: list[str] = []
    total = len(rows)
    for k, row in enumerate(rows):
        place = 0 if k == 0 else (2 if k == total - 1 else 1)
        divider = (box.head_vertical, box.mid_vertical, box.foot_vertical)[place]
        out.append(divider.join(row) + "\n")
        if k == 0 and show_header:
            out.append(box.get_row(widths, "head", edge=show_edge) + "\n")
    return out


def printed(console: Console, renderable: RenderableType, options: ConsoleOptions) -> str:
    """The text of ``console.render(renderable, options)``'s segments, control codes left out
    (as a recorded console's export leaves them): drawn as text where ``renderable`` has a
    ``printed`` of its own for these options."""
    if options.max_width < 1:  # (rich renders nothing then)
        return ""
    # (the story's lines and tables, and any renderable with a ``printed`` of its own)
    own = getattr(renderable, "printed", None)
    text = own(console, options) if callable(own) else None
    if text is None:
        text = "".join([s.text for s in console.render(renderable, options) if not s.control])
    return text


def _rich_cell(
    console: Console, shape: Any, cell_style: Style, cell: RenderableType
) -> list[Segment] | None:
    """The segments of a cell drawn by rich, as Table._render draws it (in its Padding, with its
    options and style), or None when it takes more than one line."""
    left, right, width, _, _, cell_options = shape
    padded = Padding(cell, (0, right, 0, left))
    lines = console.render_lines(padded, cell_options, style=cell_style)
    if len(lines) != 1:
        return None
    return Segment.set_shape(lines, width, 1)[0]


def clamped_width(longest: int, pad: int, min_width: int | None, max_width: int | None) -> int:
    """A column's width as rich lays out an unexpanded table that fits: its longest cell plus
    its padding, within its min and max widths (each plus the padding), at least 1."""
    width = longest + pad
    if min_width is not None:
        width = max(width, min_width + pad)
    if max_width is not None:
        width = min(width, max_width + pad)
    return max(1, width)
