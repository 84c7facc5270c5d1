"""Consoles of the kinds a report is drawn on, for comparing opscope's fast tables with rich's own
drawing: each writes to a string, at the width asked."""

from __future__ import annotations

from io import StringIO

from rich.console import Console


def consoles(width: int) -> list[Console]:
    """Recording (no colour), truecolor, safe box, standard colour."""
    return [
        Console(file=StringIO(), width=width, record=True),
        Console(file=StringIO(), width=width, force_terminal=True, color_system="truecolor"),
        Console(file=StringIO(), width=width, legacy_windows=False, safe_box=True),
        Console(file=StringIO(), width=width, force_terminal=True, color_system="standard"),
    ]


class AsciiFile(StringIO):
    """A file whose encoding is not UTF: rich draws the ASCII box on it."""

    encoding = "ascii"  # type: ignore[assignment]


def every_console(width: int) -> list[Console]:
    """:func:`consoles`, then a legacy Windows one and one drawing the ASCII box (the last)."""
    return [
        *consoles(width),
        Console(file=StringIO(), width=width, force_terminal=True, legacy_windows=True),
        Console(file=AsciiFile(), width=width, record=True),
    ]
