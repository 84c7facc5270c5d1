"""The analysis layer computes; the report layer writes. No module under ``opscope.analysis``
imports ``opscope.report`` (at the top or inside a function): formatting lives in report/ and
nothing runs back up (issue 23)."""

from __future__ import annotations

import ast
from pathlib import Path

import opscope

ANALYSIS = Path(opscope.__file__).parent / "analysis"


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            # "from opscope import report" names the package in the imported names
            if node.module == "opscope":
                out += [(node.lineno, f"opscope.{a.name}") for a in node.names]
    return out


def _upward(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"{path.relative_to(ANALYSIS.parent)}:{line}: imports {mod}"
        for line, mod in _imports(tree)
        if mod == "opscope.report" or mod.startswith("opscope.report.")
    ]


def test_no_analysis_module_imports_the_report_layer() -> None:
    files = sorted(ANALYSIS.rglob("*.py"))
    assert len(files) > 20  # the walk found the package (not an empty glob)
    found = [hit for f in files for hit in _upward(f)]
    assert found == []


def test_the_walk_sees_imports_inside_functions(tmp_path: Path) -> None:
    # the check itself can fail: a function-level import and a "from opscope import report"
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f():\n    from opscope.report.fmt import us\n    return us(1.0)\n"
        "from opscope import report\nimport opscope.reportish\n",
        encoding="utf-8",
    )
    tree = ast.parse(bad.read_text(encoding="utf-8"))
    mods = [m for _, m in _imports(tree)]
    assert "opscope.report.fmt" in mods and "opscope.report" in mods
    hits = [m for m in mods if m == "opscope.report" or m.startswith("opscope.report.")]
    assert sorted(hits) == ["opscope.report", "opscope.report.fmt"]  # not opscope.reportish
