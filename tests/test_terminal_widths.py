"""story_table's width: for a table of one-line texts the bound `_widest` is rich's drawn width
(so rich's layout is not asked: a spy), equal to `_drawn_width` on random tables; tables with a
markup header or a text of several lines still ask rich; the terminal text of real traces is
the one drawn when rich is always asked."""

from __future__ import annotations

import random

import pytest
from rich import box
from rich.table import Table
from rich.text import Text

from conftest import shared_trace
from opscope.report import terminal
from opscope.report.fast_table import FastTable, StringTable
from opscope.report.terminal import _PROBE_WIDTH, _drawn_width, _one_line_texts, _widest

WORDS = [
    "aten::mm",
    "日本語カーネル",
    "x",
    "",
    "void at::native::kernel<float>",
    "[[1,2]]",
    "é" * 9,
]


def _table(rng: random.Random, cls: type[Table], header: str | None = None) -> Table:
    tab = cls(
        title=Text("A title", style="bold"),
        caption=Text("device time"),
        box=rng.choice([box.SIMPLE_HEAD, None]),
        show_edge=False,
        pad_edge=False,
        expand=False,
        show_header=rng.random() < 0.8,
    )
    name = header if header is not None else Text("name")  # a str: rich parses it as markup
    tab.add_column(name, no_wrap=True, overflow="ellipsis", max_width=rng.choice([None, 6, 30]))
    tab.add_column(
        Text("calls"), justify="right", no_wrap=True, min_width=rng.choice([None, 5, 12])
    )
    tab.add_column(Text("where"), no_wrap=True, overflow="ellipsis")
    for _ in range(rng.randrange(1, 6)):
        n = rng.choice([1, 10, 400])
        tab.add_row(Text(rng.choice(WORDS) * n), Text(str(rng.randrange(10**6))), Text("w"))
    return tab


@pytest.mark.parametrize("cls", [Table, FastTable])
def test_one_line_texts_widest_is_drawn_width(cls: type[Table]) -> None:
    rng = random.Random(11)
    for _ in range(200):
        tab = _table(rng, cls)
        assert _one_line_texts(tab)
        assert min(_PROBE_WIDTH, _widest(tab)) == _drawn_width(tab)


def test_other_cells_are_not_one_line_texts() -> None:
    rng = random.Random(3)
    tab = _table(rng, Table, header="[bold]name[/]")  # markup: rich measures what it draws
    assert tab.show_header and not _one_line_texts(tab)
    tab = _table(random.Random(3), Table)
    tab.add_row(Text("two\nlines"), Text("1"), Text("w"))
    assert not _one_line_texts(tab)


def test_real_reports_same_text_and_rich_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import opscope
    from opscope.report.build import build_report

    asked: list[int] = []
    real = terminal._drawn_width

    def spy(tab: Table) -> int:
        asked.append(1)
        return real(tab)

    for rel in ["multi_rank/hta_sampled_128rank_job/rank-1.json.gz", "gpu/hta_triton_a100.json.gz"]:
        report = build_report(opscope.load(shared_trace(rel), cache=False), top=20)
        for full in (False, True):
            monkeypatch.setattr(terminal, "_drawn_width", spy)
            fast = terminal.render_terminal(report, full=full)
            assert asked == []  # every story table is one-line texts
            # every story table measured and drawn by rich, as one not of one-line texts
            monkeypatch.setattr(StringTable, "one_line", lambda self: False)
            slow = terminal.render_terminal(report, full=full)
            monkeypatch.undo()
            assert fast == slow
            if full:
                assert asked  # the tables did need shrinking: rich was asked on that path
            asked.clear()


@pytest.mark.parametrize("width", [200, 80, 40, 12])
def test_known_widths_are_rich_layout(width: int) -> None:
    """A FastTable given its one-line texts' column widths draws what rich's Table draws, at
    any console width (taken where they fit, rich's layout where they do not)."""
    from io import StringIO

    from rich.console import Console

    rng = random.Random(width)
    taken = 0
    for _ in range(150):
        state = rng.getstate()
        slow = _table(rng, Table)
        rng.setstate(state)
        fast = _table(rng, FastTable)  # the same table, drawn by FastTable
        assert isinstance(fast, FastTable)
        fast.known_widths = terminal._column_widths(fast)
        for con in (
            Console(file=StringIO(), width=width, record=True),
            Console(file=StringIO(), width=width, force_terminal=True, color_system="truecolor"),
        ):
            assert list(con.render(fast)) == list(con.render(slow))
        fits = sum(fast.known_widths) + terminal._separators(fast) <= width
        taken += fits
    assert taken  # some tables fit: the widths were taken


def test_story_tables_take_their_known_widths(monkeypatch: pytest.MonkeyPatch) -> None:
    import opscope
    from opscope.report.build import build_report

    measured: list[int] = []
    real = Table._calculate_column_widths

    def spy(self: Table, *a: object) -> object:
        measured.append(len(self.columns))
        return real(self, *a)  # type: ignore[arg-type]

    rel = "multi_rank/hta_sampled_128rank_job/rank-1.json.gz"
    report = build_report(opscope.load(shared_trace(rel), cache=False), top=20)
    # rich's layout for every table: the widths never taken, no table drawn from its strings
    monkeypatch.setattr(FastTable, "_calculate_column_widths", Table._calculate_column_widths)
    monkeypatch.setattr(StringTable, "__rich_console__", lambda self, c, o: iter([self.table()]))
    want = terminal.render_terminal(report)
    monkeypatch.undo()
    monkeypatch.setattr(Table, "_calculate_column_widths", spy)
    got = terminal.render_terminal(report)
    monkeypatch.undo()
    assert got == want
    # no table asks rich's layout (the headline's and the story's know their widths)
    assert measured == []
