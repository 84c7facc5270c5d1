"""FastText's text of several lines (a table's caption, the report's last note) is what rich
draws: the text of the segments of the same Text, for wrapped words, words longer than the
width, blanks at the ends of lines, blank lines, wide characters, each justification and
overflow it takes, and the cases it leaves to rich."""

from __future__ import annotations

import itertools
import random
from io import StringIO

import pytest
from rich.console import Console
from rich.text import Text

from opscope.report.fast_table import FastText

WORDS = ["device", "time;", "%", "of", "all", "kernel", "(kernels", "on", "parallel", "矩阵",
         "x" * 23, "", " ", "  ", "--full", "a…b", "\n", "\n\n"]  # fmt: skip


def _rich_text(console: Console, text: Text, **options: object) -> str:
    opts = console.options.update(**options)  # type: ignore[arg-type]
    return "".join(s.text for s in console.render(text, opts) if not s.control)


@pytest.mark.parametrize("seed", range(60))
def test_wrapped_text_is_riches(seed: int) -> None:
    rng = random.Random(seed)
    plain = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 30)))
    if seed % 5 == 0:
        plain = "\n" + plain + rng.choice(["", " ", "\n"])
    console = Console(file=StringIO(), width=80, height=25)
    for width, justify, overflow, end in itertools.product(
        [1, 2, 7, 23, 50, 80], [None, "left", "default"], [None, "fold", "crop", "ellipsis"],
        ["\n", ""],
    ):  # fmt: skip
        options = {"width": width, "justify": justify, "overflow": overflow}
        opts = console.options.update(**options)  # type: ignore[arg-type]
        fast = FastText(plain, style="dim", end=end).printed(console, opts)
        assert fast is not None
        assert fast == _rich_text(console, Text(plain, style="dim", end=end), **options)


def test_others_left_to_rich() -> None:
    console = Console(file=StringIO(), width=20, height=25)
    long = "word " * 10
    for text, opts in [
        (FastText(long, justify="center"), {}),
        (FastText(long), {"justify": "right"}),
        (FastText(long), {"no_wrap": True}),
        (FastText(long, overflow="ignore"), {}),
        (FastText("a\tb " * 9), {}),
    ]:
        assert text.printed(console, console.options.update(**opts)) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(40))
def test_ascii_lines_divided_as_rich_divides(seed: int) -> None:
    from rich._wrap import divide_line

    from opscope.report.fast_table import _divided

    rng = random.Random(seed)
    words = ["a", "of", "kernel;", "(x)", "y" * 9, "z" * 31, " ", "   ", "矩阵", "é", "\t"]
    for _ in range(50):
        line = "".join(rng.choice(words) + rng.choice(["", " ", "  "]) for _ in range(30))
        if rng.random() < 0.7:  # mostly printable ASCII: the lines divided here
            line = "".join(c for c in line if c.isascii() and c.isprintable())
        for width, fold in itertools.product([1, 3, 8, 30, 80], [True, False]):
            assert _divided(line, width, fold) == divide_line(line, width, fold=fold)
