"""FastTable draws exactly what rich's Table draws: the same segments (so the same plain text,
colours and exports), the same column measurements, on planted tables that take its shortcuts
and on ones that must not (markup-like names, wide characters, cells cut with an ellipsis,
styles, other boxes), and on every story table of a real trace, with a spy that the shortcuts
are taken where they apply."""

from __future__ import annotations

import itertools
from io import StringIO

import pytest
from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.style import Style
from rich.table import Table
from rich.text import Text

from conftest import shared_trace
from helpers.rich_consoles import consoles
from helpers.spies import cells_drawn_by_rich
from opscope.report import fast_table
from opscope.report.fast_table import FastTable, _measure_padded

NAMES = [
    "aten::mm",
    "[[1,256]]",  # not markup: drawn as written
    "<lambda>[...]",
    "void at::native::elementwise_kernel<128, 4>",
    "矩阵乘法",  # two cells a character
    "  indented",
    "",
    "trailing ",
    "tab\there",
    "two\nlines",
    "x" * 60,
]


def _pair(**kw: object) -> tuple[Table, Table]:
    return Table(**kw), FastTable(**kw)  # type: ignore[arg-type]


def _segments(tab: Table, console: Console) -> list[object]:
    return list(console.render(tab))


def _fill(tabs: tuple[Table, Table], rows: list[list[object]], justify: list[str]) -> None:
    for tab in tabs:
        for i, j in enumerate(justify):
            tab.add_column(
                f"col{i}",
                justify=j,  # type: ignore[arg-type]
                no_wrap=True,
                overflow="ellipsis",
                min_width=6 if j == "right" else None,
                max_width=None if j == "right" else 24,
            )
        for row in rows:
            tab.add_row(*[Text(c) if isinstance(c, str) else c for c in row])


STORY = {
    "title": Text("Top kernels", style="bold"),
    "caption": Text("device time; 3 more rows: --full"),
    "title_justify": "left",
    "caption_justify": "left",
    "box": box.SIMPLE_HEAD,
    "show_edge": False,
    "pad_edge": False,
    "expand": False,
}


@pytest.mark.parametrize("width", [80, 40, 12, 200])
def test_plain_rows_same_segments_and_shortcut_taken(
    width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [[n, f"{i * 1.5:.1f} us", f"{i}%"] for i, n in enumerate([*NAMES[:3], "b"])]
    tabs = _pair(**STORY)
    _fill(tabs, rows, ["left", "right", "right"])
    fast = []
    orig = FastTable._fast_rows

    def spy(self: FastTable, *args: object) -> object:
        out = orig(self, *args)  # type: ignore[arg-type]
        fast.append(out is not None)
        return out

    monkeypatch.setattr(FastTable, "_fast_rows", spy)
    for con in consoles(width):
        assert _segments(tabs[1], con) == _segments(tabs[0], con)
    if width >= 40:  # every cell fits: the body rows are drawn directly
        assert fast and all(fast)


@pytest.mark.parametrize("name", NAMES)
def test_every_kind_of_name_same_segments(name: str) -> None:
    rows = [["short", "1 us"], [name, "2 us"], [name + "]", "3 us"]]
    for width, kw in itertools.product([80, 30, 10], [STORY, dict(STORY, box=box.ROUNDED)]):
        tabs = _pair(**kw)
        _fill(tabs, rows, ["left", "right"])
        for con in consoles(width):
            assert _segments(tabs[1], con) == _segments(tabs[0], con), (name, width)


def test_other_cells_and_layouts_same_segments() -> None:
    styled = Text("styled", style="red")
    spans = Text.assemble(("a", "bold"), "b")
    rows: list[list[object]] = [["plain", "1"], [styled, "2"], [spans, "3"], ["[b]str[/b]", "4"]]
    layouts = [
        STORY,
        dict(STORY, show_edge=True),
        dict(STORY, pad_edge=True),
        dict(STORY, box=None),
        dict(STORY, show_header=False),
        dict(STORY, show_lines=True),
        dict(STORY, row_styles=["dim", ""]),
        dict(STORY, border_style="blue"),
        dict(STORY, style="on black"),
        dict(STORY, collapse_padding=True),
        dict(STORY, padding=(0, 2)),
        dict(STORY, leading=1),
        dict(STORY, header_style="red on blue"),
        dict(STORY, header_style=""),
        dict(STORY, header_style=Style(bold=True, link="https://example.com")),
        dict(STORY, box=None, header_style="italic"),
    ]
    for kw in layouts:
        tabs = _pair(**kw)
        _fill(tabs, rows, ["left", "right"])
        for con in consoles(60):
            assert _segments(tabs[1], con) == _segments(tabs[0], con), kw


def test_exports_identical() -> None:
    tabs = _pair(**STORY)
    _fill(tabs, [[n, "1.0 ms"] for n in NAMES], ["left", "right"])
    out = []
    for tab in tabs:
        con = Console(file=StringIO(), width=70, record=True, force_terminal=True)
        con.print(tab)
        out.append((con.export_text(clear=False), con.export_text(styles=True, clear=False)))
        out[-1] += (con.export_html(),)
    assert out[0] == out[1]


@pytest.mark.parametrize("text", [*NAMES, "a b  cc", " ", "  "])
def test_measure_padded_is_rich_measure(text: str) -> None:
    con = Console(file=StringIO(), width=80)
    for max_width, (left, right) in itertools.product(
        [0, 1, 2, 3, 5, 40, 1000], [(0, 0), (0, 1), (1, 0), (1, 1), (2, 3)]
    ):
        opts = con.options.update_width(max_width)
        want = Measurement.get(con, opts, Padding(Text(text), (0, right, 0, left)))
        assert _measure_padded(Text(text), left + right, max_width) == want


def test_column_measure_is_rich_measure() -> None:
    tabs = _pair(**STORY)
    _fill(tabs, [[n, "1 us", Text("x", style="bold")] for n in NAMES], ["left", "right", "left"])
    for tab in tabs:
        tab.columns[0].header = "[bold]name[/]"  # a markup header: measured by rich
    con = Console(file=StringIO(), width=80)
    for width in [0, 1, 4, 30, 80, 1000]:
        opts = con.options.update_width(width)
        for a, b in zip(tabs[0].columns, tabs[1].columns, strict=True):
            assert tabs[1]._measure_column(con, opts, b) == tabs[0]._measure_column(con, opts, a)


def test_story_tables_of_a_real_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    import opscope
    from opscope.report import terminal
    from opscope.report.build import build_report

    path = shared_trace("gpu/tracelens_h100_bert_small.json.gz")
    report = build_report(opscope.load(path, cache=False), top=20)
    taken = []
    orig = FastTable._fast_rows

    def spy(self: FastTable, *args: object) -> object:
        out = orig(self, *args)  # type: ignore[arg-type]
        taken.append(out is not None)
        return out

    monkeypatch.setattr(FastTable, "_fast_rows", spy)
    for full, width in itertools.product([False, True], [80, 120, 50]):
        fast_text = terminal.render_terminal(report, _con(width), full=full)
        con = _con(width)
        terminal.render_terminal(report, con, full=full)
        fast_out = con.export_text(styles=True)
        # every table rich's own: the headline's and the story's (not drawn from strings)
        monkeypatch.setattr(terminal, "FastTable", Table)
        monkeypatch.setattr(
            fast_table.StringTable, "__rich_console__", lambda s, c, o: iter([s.rich_table(Table)])
        )
        con = _con(width)
        terminal.render_terminal(report, con, full=full)
        assert con.export_text(styles=True) == fast_out
        monkeypatch.undo()
        monkeypatch.setattr(FastTable, "_fast_rows", spy)
        assert fast_text == ""
    assert any(taken)


def _con(width: int) -> Console:
    return Console(file=StringIO(), width=width, record=True, force_terminal=True)


@pytest.mark.parametrize(
    "header", ["time", "% of step", "", "bytes [MB]", "[bold]b[/]", ":smile: x", "a:b", "矩阵"]
)
def test_headers_same_segments(header: str) -> None:
    tabs = _pair(**STORY)
    for tab in tabs:
        tab.add_column(header, no_wrap=True, overflow="ellipsis")
        tab.add_column("us", justify="right", no_wrap=True)
        tab.add_row(Text("aten::mm"), Text("1.0"))
    # only a header without markup or emoji codes is made a Text
    plain = "[" not in header and ":" not in header
    assert isinstance(tabs[1].columns[0].header, Text) == plain
    for width in [80, 6, 3]:
        for con in [*consoles(width), Console(file=StringIO(), width=width, emoji=False)]:
            assert _segments(tabs[1], con) == _segments(tabs[0], con), (header, width)


def test_default_console_height_changes_nothing() -> None:
    """render_terminal's own console has its height given (rich asks the OS for it otherwise):
    the text is the one drawn on a console whose height rich asks for, at any height."""
    import opscope
    from opscope.report.build import build_report
    from opscope.report.terminal import render_terminal

    path = shared_trace("gpu/tracelens_h100_bert_small.json.gz")
    report = build_report(opscope.load(path, cache=False), top=20)
    text = render_terminal(report)
    for height in [None, 3, 100]:
        con = Console(file=StringIO(), width=80, height=height, record=True)
        render_terminal(report, con)
        assert con.export_text() == text


@pytest.mark.parametrize("highlight", [False, True])
def test_string_cells_same_segments(highlight: bool) -> None:
    """Headline-like tables: no box, no header, string cells (plain, markup, emoji codes,
    numbers a highlighting column colours), a styled bar."""
    cells = ["1.2 ms", "[b]x[/b]", ":smile:", "12.5%", "", "0x1f 3.0", "a b"]
    kw = {"box": None, "show_header": False, "pad_edge": False, "padding": (0, 1)}
    tabs = _pair(**kw)
    for tab in tabs:
        tab.add_column(no_wrap=True, overflow="ellipsis", max_width=12)
        tab.add_column(justify="right", no_wrap=True, highlight=highlight)
        tab.add_column(no_wrap=True)
        for c in cells:
            tab.add_row(Text("  label " + c), c, Text("███", style="cyan"))
    for width in [80, 20, 8]:
        for con in consoles(width):
            assert _segments(tabs[1], con) == _segments(tabs[0], con), width


def test_plain_header_and_rows_drawn_directly() -> None:
    """A story table of plain cells that fit, its header included: no cell drawn by rich (a
    spy on the Padding rich draws each cell in), the segments rich's; with styled column
    headers too."""
    rows = [["aten::mm", "1.0 ms"], ["aten::add", "22.5 ms"]]
    for header_style in [None, "underline"]:
        tabs = _pair(**STORY)
        _fill(tabs, rows, ["left", "right"])
        for tab in tabs:
            tab.columns[1].header_style = header_style or ""
        for con in consoles(80):
            with cells_drawn_by_rich() as drawn:
                got = _segments(tabs[1], con)
            assert drawn == []
            assert got == _segments(tabs[0], con)


TEXTS = [
    *NAMES,
    "e\u0301" * 30,  # combining accents: fewer cells than characters
    "x" * 79,
    "x" * 80,
    "x" * 81,
    "trailing   ",
    "   ",
    "a " * 50,
]


def _texts(cls: type[Text]) -> list[Text]:
    out: list[Text] = []
    for t in TEXTS:
        out += [
            cls(t),
            cls(t, style="bold"),
            cls(t, style="green", end=""),
            cls(t, justify="right"),
            cls(t, justify="left"),
            cls(t, overflow="ellipsis"),
            cls(t, no_wrap=True, overflow="ignore"),
            cls.assemble(("1. ", "bold"), ("[high] ", "red"), (t, "bold")),
            cls.assemble("  ", (t, "dim"), " · saves", style="italic"),
        ]
    return out


@pytest.mark.parametrize("justify", [None, "left", "center", "default"])
def test_fast_text_same_segments(justify: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """FastText draws what Text draws, any text, style and justification; the one-line texts
    that fit are drawn without Text.wrap (a spy)."""
    wrapped: list[str] = []
    real = Text.wrap

    def spy(self: Text, *a: object, **k: object) -> object:
        wrapped.append(self.plain)
        return real(self, *a, **k)  # type: ignore[arg-type]

    for width in [80, 40, 3]:
        for con in consoles(width):
            opts = con.options.update(justify=justify)  # type: ignore[arg-type]
            for slow, fast in zip(_texts(Text), _texts(fast_table.FastText), strict=True):
                want = list(con.render(slow, opts))
                monkeypatch.setattr(Text, "wrap", spy)
                wrapped.clear()
                got = list(con.render(fast, opts))
                monkeypatch.undo()
                assert got == want, (fast.plain, width)
                eff = fast.justify or justify or "default"
                fits = fast_table.cell_len(fast.plain) <= width and len(fast.plain) <= width
                simple = "\n" not in fast.plain and "\t" not in fast.plain
                if fits and simple and eff in ("default", "left") and fast.overflow != "ignore":
                    assert wrapped == [], (fast.plain, width)


def test_story_lines_are_fast_text() -> None:
    import opscope
    from opscope.report import terminal
    from opscope.report.build import build_report
    from opscope.report.story import story_of

    path = shared_trace("gpu/tracelens_h100_bert_small.json.gz")
    report = build_report(opscope.load(path, cache=False), top=20)
    parts = terminal.draw_story(story_of(report), 80)
    # the story's lines made as FastText only when a console draws them
    assert not [p for p in parts if isinstance(p, Text)]
    lines = [p for p in parts if isinstance(p, fast_table.Line)]
    assert lines and all(type(p.text()) is fast_table.FastText for p in lines)
    # the story's tables drawn from their strings, with rich's widths (they fit 80 columns)
    tables = [p for p in parts if isinstance(p, fast_table.StringTable)]
    assert tables and all(t.widths is not None for t in tables)


def test_styled_cells_same_segments_and_drawn_directly() -> None:
    """Cells of one style (the headline's bars), in columns with and without a style of their
    own, under styled headers: rich's segments; those that fit drawn without rich (a spy on
    the Padding rich draws a cell in), a link drawn by rich."""
    styles: list[object] = ["cyan", "bold red", Style(italic=True), "none", "on blue"]
    for col_style, header_style in itertools.product(["", "blue", "on red"], [None, "green"]):
        tabs = _pair(**{**STORY, "header_style": header_style})
        for tab in tabs:
            tab.add_column(Text("bar", style="magenta"), no_wrap=True, style=col_style)
            tab.add_column("us", justify="right", no_wrap=True, style=col_style)
            for st in styles:
                tab.add_row(Text("███", style=st), Text("1.5", style=st))  # type: ignore[arg-type]
        for con in consoles(60):
            want = _segments(tabs[0], con)
            with cells_drawn_by_rich() as drawn:
                got = _segments(tabs[1], con)
            assert got == want, (col_style, header_style)
            assert drawn == []
    tabs = _pair(**STORY)
    for tab in tabs:
        tab.add_column("link", no_wrap=True)
        tab.add_row(Text("x", style="link https://example.com"))
    con = consoles(60)[1]
    with cells_drawn_by_rich() as drawn:
        _segments(tabs[1], con)
    assert len(drawn) == 1  # the link: rich's (its link is made anew at each drawing)
