"""Every registered rule has its docs page and a row in docs/rules/README.md, and every page
and row names a registered rule (the index is written by hand, so it drifts without this)."""

from __future__ import annotations

import re
from pathlib import Path

from opscope.advise import rules as _rules  # noqa: F401  (registers every rule)
from opscope.advise.rule import rules

DOCS = Path(__file__).resolve().parents[1] / "docs" / "rules"


def test_every_rule_has_a_page_and_an_index_row() -> None:
    ids = set(rules())
    pages = {p.stem for p in DOCS.glob("*.md")} - {"README"}
    index = (DOCS / "README.md").read_text()
    rows = set(re.findall(r"^\| \[`([a-z0-9-]+)`\]\(\1\.md\)", index, re.M))
    assert ids - pages == set(), "rules without a docs page"
    assert pages - ids == set(), "docs pages of no registered rule"
    assert ids ^ rows == set(), "README rows out of step with the registry"


def test_each_page_starts_with_its_rule_id() -> None:
    for rid in rules():
        first = (DOCS / f"{rid}.md").read_text().splitlines()[0]
        assert first == f"# `{rid}`", rid
