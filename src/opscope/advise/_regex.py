"""A few names tested against the rules' name patterns in Python's ``re``, without a Polars
query (whose fixed cost, ~65 µs plus ~20 µs a pattern, was most of a small profile's tests).

Polars' ``str.contains`` is Rust's ``regex``; Python's ``re`` answers the same only where both
give a construct the same meaning. :func:`portable` admits the patterns made of such
constructs only — literal ASCII characters, escaped metacharacters, ``.``, ``\\d``, groups
(``(...)``, ``(?:...)``), alternation, ``^``/``$`` and one greedy or lazy ``*``/``+``/``?``
after an atom, with ``(?i)`` at the very start — and :func:`plain` the names on which they
agree: ASCII (Unicode case folding, ``\\d`` and ``.`` differ only beyond it) and without a
newline (Python's ``$`` also matches before a final one). Anything else goes to Polars
(tests/test_advise_regex.py compares both engines on every rule's pattern).
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Sequence
from typing import Any

import numpy as np

#: At most this many name-pattern tests in Python (~0.35 µs each; above, Polars' query of
#: fixed cost is faster).
PY_MAX_TESTS = 128

_LITERAL = frozenset(string.ascii_letters + string.digits + " _@:,/#%&=<>!'\"~;-")
_ESCAPED = frozenset(".^$*+?()[]{}|\\")
_ATOM = _LITERAL | {")", "."}  # a character that ends an atom (a repeat may follow)


@functools.lru_cache(maxsize=256)
def portable(pattern: str) -> bool:
    """Whether ``pattern`` uses only constructs that Rust's ``regex`` and Python's ``re`` read
    alike (see the module doc)."""
    s = pattern.removeprefix("(?i)")
    i, after_atom = 0, False
    while i < len(s):
        ch = s[i]
        if ch == "\\":
            nxt = s[i + 1 : i + 2]
            if not nxt or not (nxt in _ESCAPED or nxt == "d"):
                return False
            i, after_atom = i + 2, True
            continue
        if ch in "*+?":
            if not after_atom:  # a repeat of a repeat (possessive in Python 3.11) or nothing
                return False
            i += 2 if s[i + 1 : i + 2] == "?" else 1
            after_atom = False
            continue
        if s.startswith("(?:", i):
            i, after_atom = i + 3, False
            continue
        if ch == "(":
            if s[i + 1 : i + 2] == "?":  # other groups and flags: not admitted
                return False
            after_atom = False
        elif ch in "|^$":
            after_atom = False
        elif ch in _ATOM:
            after_atom = True
        else:
            return False
        i += 1
    return True


def plain(names: Sequence[str | None]) -> bool:
    """Whether every name (a null aside) is ASCII without a newline."""
    return all(n is None or (n.isascii() and "\n" not in n) for n in names)


def py_hits(names: Sequence[str | None], patterns: Sequence[str]) -> list[Any] | None:
    """Per pattern, whether each name matches it (false for a null), as :func:`re.search`
    finds it; ``None`` when Python may not answer for Polars (a pattern not
    :func:`portable`, a name not :func:`plain`, too many tests, or a pattern ``re`` rejects)."""
    if len(names) * len(patterns) > PY_MAX_TESTS or not all(map(portable, patterns)):
        return None
    if not plain(names):
        return None
    out = []
    for p in patterns:
        try:
            search = re.compile(p).search
        except re.error:  # Polars says why
            return None
        hit = (n is not None and search(n) is not None for n in names)
        out.append(np.fromiter(hit, dtype=bool, count=len(names)))
    return out
