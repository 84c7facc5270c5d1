"""The plain text the terminal report is made of without segments (``printed``) is the text of
the segments rich draws: FastText lines (every justification, overflow, style, span, width),
StringTable story tables and FastTable headline tables, on every kind of console; rich's own
drawing where they do not draw themselves; and rows_of's µs rows are to_us' rows whatever the
columns' types."""

from __future__ import annotations

import decimal
import random
from io import StringIO
from typing import Any

import polars as pl
import pytest
from rich.console import Console, ConsoleOptions
from rich.table import Table
from rich.text import Text

from helpers.rich_consoles import every_console
from opscope.report.fast_table import (
    FastTable,
    FastText,
    Line,
    StringColumn,
    StringTable,
    printed,
)

WORDS = ["aten::mm", "[[1,256]]", "矩阵乘法", "e\u0301" * 3, "  lead", "trail ", "", "x" * 30]


def _segment_text(con: Console, renderable: Any, options: ConsoleOptions) -> str:
    return "".join(s.text for s in con.render(renderable, options) if not s.control)


def _print_options(con: Console) -> ConsoleOptions:
    return con.options.update(
        justify=None, overflow=None, height=None, no_wrap=None, markup=None, highlight=None
    )


@pytest.mark.parametrize("width", [80, 20, 6])
def test_fast_text_printed_is_its_segments(width: int) -> None:
    rng = random.Random(width)
    drawn = 0
    for con in every_console(width):
        base = _print_options(con)
        for _ in range(300):
            words = [rng.choice(WORDS) for _ in range(rng.randrange(0, 4))]
            text = FastText(
                " ".join(words),
                style=rng.choice(["", "bold", "dim", "green"]),
                justify=rng.choice([None, "left", "right", "center", "default"]),
                overflow=rng.choice([None, "fold", "ellipsis", "ignore"]),
                end=rng.choice(["\n", "", "!\n"]),
            )
            if rng.random() < 0.3:
                text.stylize("bold", 0, 2)
            options = base.update(justify=rng.choice([None, "left", "default", "full"]))
            got = text.printed(con, options)
            if got is not None:
                drawn += 1
                assert got == _segment_text(con, text, options), (text, options.justify)
            assert printed(con, text, options) == _segment_text(con, text, options)
    assert drawn > 100  # many drawn as text


def _random_table(rng: random.Random) -> StringTable:
    n = rng.randrange(1, 5)
    columns = [
        StringColumn(
            rng.choice(["operator", "% step", "", "矩阵", ":x:"]),
            "right" if i and rng.random() < 0.6 else "left",
            min_width=rng.choice([None, 3, 9]),
            max_width=rng.choice([None, 4, 12, 30]),
        )
        for i in range(n)
    ]
    rows = [[rng.choice(WORDS) for _ in range(n)] for _ in range(rng.randrange(0, 5))]
    title = rng.choice(["Top kernels", "", "A long title " * 8])
    return StringTable(title, rng.choice(["", "device time", "basis; " * 20]), columns, rows)


@pytest.mark.parametrize("width", [200, 80, 30])
def test_string_table_printed_is_rich_tables_text(width: int) -> None:
    rng = random.Random(width)
    drawn = 0
    consoles = every_console(width)
    for _ in range(150):
        tab = _random_table(rng)
        if tab.one_line() and rng.random() < 0.8:
            tab.widths = tab.column_widths()
        for con in consoles:
            options = _print_options(con)
            want = _segment_text(con, tab.rich_table(Table), options)
            got = tab.printed(con, options)
            if got is not None:
                drawn += 1
                assert got == want, (tab.columns, tab.rows, tab.widths)
            assert printed(con, tab, options) == want
    assert drawn > 50


def _headline_table(rng: random.Random) -> FastTable:
    tab = FastTable(box=None, show_header=rng.random() < 0.3, pad_edge=False, padding=(0, 1))
    tab.add_column("label", no_wrap=True, overflow="ellipsis", max_width=rng.choice([10, 40]))
    tab.add_column("time", justify="right", no_wrap=True)
    tab.add_column("bar", no_wrap=rng.random() < 0.8)
    for _ in range(rng.randrange(0, 5)):
        tab.add_row(
            Text("  " + rng.choice(WORDS)),
            rng.choice(["1.2 ms", "14 µs", "[x]", ""]),
            Text("█" * rng.randrange(0, 30), style="cyan"),
        )
    if rng.random() < 0.2:
        tab.title = "a title"
    return tab


@pytest.mark.parametrize("width", [80, 24])
def test_fast_table_printed_is_rich_tables_text(width: int) -> None:
    rng = random.Random(width)
    drawn = 0
    for _ in range(100):
        tab = _headline_table(rng)
        for con in every_console(width):
            options = _print_options(con)
            want = _segment_text(con, tab, options)
            got = tab.printed(con, options)
            if got is not None:
                drawn += 1
                assert got == want
            assert printed(con, tab, options) == want
    assert drawn > 50


def test_printed_on_no_room_and_of_other_renderables() -> None:
    con = Console(file=StringIO(), width=40, record=True)
    options = _print_options(con)
    assert printed(con, FastText("abc"), options.update_width(0)) == ""
    assert printed(con, Text("plain rich", style="bold"), options) == "plain rich\n"
    assert printed(con, "[bold]markup[/]", options) == "markup\n"


def test_rows_of_other_column_types_are_to_us_rows() -> None:
    """Columns float() would take differently from to_us' cast (decimals, booleans) and a
    column of nulls only: the same rows as to_us gives."""
    from opscope.analysis import hotspots as hs

    tables = [
        pl.DataFrame({"a_ns": pl.Series([decimal.Decimal("1.5"), None], dtype=pl.Decimal(10, 1))}),
        pl.DataFrame({"b_ns": [True, None], "k": [1, 2]}),
        pl.DataFrame({"c_ns": [None, None], "c_us": [1.0, 2.0]}),
        pl.DataFrame({"d_ns": [[1.5, None], None], "e_ns": [7, 9]}),
        pl.DataFrame({"f_ns": [[True], None]}),
    ]
    for df in tables:
        assert hs.rows_of([(df, None)]) == [hs.to_us(df).to_dicts()], df.schema


@pytest.mark.parametrize("width", [80, 20, 6])
def test_line_printed_is_its_fast_texts_segments(width: int) -> None:
    """A story Line's text drawn from its string is the text of the segments rich draws of its
    FastText (any words, control codes, styles of parts), and a console draws that FastText."""
    rng = random.Random(width)
    for con in every_console(width):
        options = _print_options(con)
        for _ in range(200):
            parts: list[Any] = [rng.choice([*WORDS, "a\x07b", "\x1b[1m", "x\ny"])]
            if rng.random() < 0.5:
                parts.append((rng.choice(WORDS), rng.choice(["bold", "", "dim"])))
            line = Line(*parts, style=rng.choice(["", "dim", "green"]))
            text = FastText.assemble(*parts, style=line._style)
            want = _segment_text(con, text, options)
            assert line.plain == text.plain
            got = line.printed(con, options)
            assert got is None or got == want, parts
            assert printed(con, line, options) == want
            assert list(con.render(line, options)) == list(con.render(text, options))


def _headline_rows(rng: random.Random) -> list[tuple[str, ...]]:
    bars = rng.random() < 0.7
    rows = []
    for _ in range(rng.randrange(1, 6)):
        cells = [
            "  " + rng.choice([*WORDS, "device idle", "a\x07b", "compute (device kernels)"]),
            rng.choice(["1.2 ms", "14 µs", "[x]", "", "a:b", "3 s "]),
            rng.choice(["29%", "<0.01%", "100%"]),
        ]
        rows.append((*cells, "█" * rng.randrange(0, 30)) if bars else tuple(cells))
    return rows


@pytest.mark.parametrize("width", [80, 40, 24])
def test_headline_table_printed_is_rich_tables_text(width: int) -> None:
    """The headline's shares drawn from their strings are the text rich draws of its table."""
    from opscope.report.terminal import HeadlineTable

    rng = random.Random(width)
    direct = 0
    for _ in range(150):
        rows = _headline_rows(rng)
        for con in every_console(rng.choice([width, width + 10, 30])):
            options = _print_options(con)
            tab = HeadlineTable(rows, width)
            want = _segment_text(con, tab.table(), options)
            direct += tab._printed(options.max_width) is not None
            assert tab.printed(con, options) == want, rows
            assert printed(con, tab, options) == want
            assert list(con.render(tab, options)) == list(con.render(tab.table(), options))
    assert direct > (20 if width > 24 else 5)  # many drawn from the strings (fitting)
