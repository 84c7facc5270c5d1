"""StringTable draws what rich's own Table of the same strings draws: the same segments (so the
same plain text, colours and exports) on planted tables (wide characters, markup-like names,
blank, trailing and cut cells, tabs and newlines, markup headers, long captions, no rows), with
the widths it is given or without; its column widths are rich's layout; the cells that fit are
drawn without rich (a spy). render_terminal's text without a console is what printing it and
exporting the record gives."""

from __future__ import annotations

import itertools
import random
from io import StringIO

import pytest
from rich.console import Console, Group
from rich.control import Control
from rich.table import Table
from rich.text import Text

from conftest import shared_trace
from helpers.rich_consoles import every_console
from helpers.spies import cells_drawn_by_rich
from opscope.report import terminal
from opscope.report.fast_table import StringColumn, StringTable

NAMES = [
    "aten::mm",
    "[[1,256]]",
    "<lambda>[...]",
    "[bold]not markup[/]",
    ":smile: no emoji",
    "void at::native::elementwise_kernel<128, 4>",
    "矩阵乘法",
    "e\u0301" * 5,  # combining accents: fewer cells than characters
    "  indented",
    "",
    "trailing ",
    "tab\there",
    "two\nlines",
    "x" * 60,
]
HEADERS = ["operator", "% step", "", "[bold]b[/]", ":smile: x", "a:b", "矩阵", "bytes [MB]"]
CAPTIONS = ["", "device time", "host time, including child operators; " * 4]


def _random_table(rng: random.Random) -> StringTable:
    n = rng.randrange(1, 5)
    columns = []
    for i in range(n):
        fixed = i > 0 and rng.random() < 0.6
        columns.append(
            StringColumn(
                rng.choice(HEADERS[:3]) if rng.random() < 0.8 else rng.choice(HEADERS),
                "right" if fixed else "left",
                min_width=rng.choice([None, 3, 9]) if fixed else None,
                max_width=None if fixed else rng.choice([None, 4, 12, 30]),
            )
        )
    rows = [
        [rng.choice(NAMES[:3]) if rng.random() < 0.7 else rng.choice(NAMES) for _ in range(n)]
        for _ in range(rng.randrange(0, 5))
    ]
    return StringTable(rng.choice(["Top kernels", "", "A long title " * 8]), rng.choice(CAPTIONS),
                       columns, rows)  # fmt: skip


def _render(renderable: object, con: Console) -> list[object]:
    return list(con.render(renderable))  # type: ignore[arg-type]


@pytest.mark.parametrize("width", [200, 80, 40, 12])
def test_same_segments_as_rich(width: int) -> None:
    rng = random.Random(width)
    direct = 0
    consoles = every_console(width)
    assert consoles[-1].options.ascii_only
    for _ in range(150):
        tab = _random_table(rng)
        want = {id(c): _render(tab.rich_table(Table), c) for c in consoles}
        # without widths, rich's own; with rich's widths (where they are rich's: one-line
        # texts), from the strings where they fit
        assert all(_render(tab, c) == want[id(c)] for c in consoles)
        if tab.one_line():
            tab.widths = tab.column_widths()
            for con in consoles:
                assert _render(tab, con) == want[id(con)], (tab.columns, tab.rows, width)
            direct += bool(tab.rows) and sum(tab.widths) + len(tab.widths) - 1 <= width
    assert direct  # some tables were drawn from their strings


def test_every_name_in_every_column() -> None:
    for name, header, caption in itertools.product(NAMES, HEADERS, CAPTIONS[:2]):
        columns = [
            StringColumn(header, "left", max_width=20),
            StringColumn("calls", "right", min_width=5),
            StringColumn("where", "left"),
        ]
        rows = [["aten::mm", "1", "x.py:1"], [name, name, name], ["b", "22", ""]]
        tab = StringTable("Top operators", caption, columns, rows)
        if tab.one_line():
            tab.widths = tab.column_widths()
        for con in every_console(60)[:4]:
            assert _render(tab, con) == _render(tab.rich_table(Table), con), (name, header)


def test_column_widths_are_rich_layout() -> None:
    """Where one_line holds, column_widths is rich's own layout of the table on a console wide
    enough (rich's _calculate_column_widths, an independent computation)."""
    rng = random.Random(5)
    con = Console(file=StringIO(), width=1000)
    checked = 0
    for _ in range(300):
        tab = _random_table(rng)
        if not tab.one_line():
            continue
        rich = tab.rich_table(Table)
        seps = len(tab.columns) - 1
        want = rich._calculate_column_widths(con, con.options.update_width(1000 - seps))
        assert tab.column_widths() == want, (tab.columns, tab.rows)
        checked += 1
    assert checked > 100


def test_fitting_plain_cells_drawn_without_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table of plain cells that fit: no cell drawn through rich's Padding, no Table built;
    a blank cell and a cut one are drawn by rich, in a table still drawn from its strings."""

    def no_table(self: StringTable) -> object:
        raise AssertionError("rich's table built")

    columns = [StringColumn("operator", "left", max_width=9), StringColumn("total", "right")]
    plain = StringTable("T", "c", columns, [["aten::mm", "1.0 ms"], ["aten::add", "22 ms"]])
    odd = StringTable("T", "c", columns, [["aten::mm", ""], ["aten::addmm_", "2 ms"]])
    for tab, rich_cells in [(plain, 0), (odd, 2)]:
        tab.widths = tab.column_widths()
        want = _render(tab.rich_table(Table), every_console(80)[1])
        monkeypatch.setattr(StringTable, "table", no_table)
        with cells_drawn_by_rich() as drawn:
            got = _render(tab, every_console(80)[1])
        monkeypatch.undo()
        assert got == want
        assert len(drawn) == rich_cells


def test_narrower_console_is_rich_layout() -> None:
    """Widths that do not fit the console it is drawn on: rich's own layout of the table."""
    columns = [StringColumn("operator", "left"), StringColumn("total", "right", min_width=6)]
    tab = StringTable("Top", "basis of it all", columns, [["aten::convolution", "1.0 ms"]])
    tab.widths = tab.column_widths()
    for width in [25, 24, 10, 3]:
        for con in every_console(width)[:4]:
            assert _render(tab, con) == _render(tab.rich_table(Table), con), width


def _printed(parts: list[object]) -> str:
    con = Console(file=StringIO(), width=80, height=25, record=True)
    con.print(Group(*parts))  # type: ignore[arg-type]
    return con.export_text()


def test_printed_text_is_the_print() -> None:
    con = Console(file=StringIO(), width=80, height=25, record=True)
    for parts in [
        [Text("a line", style="bold"), Text("x " * 70), Text("矩阵 " * 30)],
        [],
        [Text("y" * 100, no_wrap=True, overflow="ignore"), Text("z")],  # print crops it
        [Text("矩" * 50, no_wrap=True, overflow="ignore")],
        [Control.bell(), Text("z"), Text("a\tb")],  # the export leaves the bell out
    ]:
        assert terminal._printed_text(con, parts) == _printed(parts)  # type: ignore[arg-type]
    assert _printed([Text("y" * 100, no_wrap=True, overflow="ignore")]) == "y" * 80 + "\n"
    assert con.export_text() == ""  # nothing was printed on it


@pytest.mark.parametrize(
    "rel",
    [
        "multi_rank/hta_sampled_128rank_job/rank-0.json.gz",
        "ascend/small_two_rank/test_rank_0",
        "gpu/tracelens_h100_bert_small.json.gz",
    ],
)
def test_report_text_is_the_printed_report(rel: str) -> None:
    import opscope
    from opscope.report.build import build_report

    report = build_report(opscope.load(shared_trace(rel), cache=False), top=20)
    for full in (False, True):
        con = Console(file=StringIO(), width=80, height=25, record=True)
        terminal.render_terminal(report, con, full=full)
        assert terminal.render_terminal(report, full=full) == con.export_text()


@pytest.mark.parametrize("width", [200, 80, 40, 12])
def test_printed_text_is_riches(width: int) -> None:
    """The text printed() makes of a table without its segments (its cells measured and drawn
    from their strings; blank, cut, wide and multi-line ones by rich) is the text of rich's own
    table's segments."""
    from opscope.report.fast_table import printed

    rng = random.Random(100 + width)
    made = 0
    for _ in range(200):
        tab = _random_table(rng)
        if tab.one_line():
            tab.widths = tab.column_widths()
        for con in every_console(width)[:1] + every_console(width)[-1:]:
            want = "".join(s.text for s in con.render(tab.rich_table(Table)) if not s.control)
            made += tab.printed(con, con.options) is not None
            assert printed(con, tab, con.options) == want, (tab.columns, tab.rows, width)
    assert made  # some were made from the strings
