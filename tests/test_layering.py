"""The analysis layer computes; the report layer writes (issue 23). No module under
``opscope.analysis`` (nor advise, doctor, cluster, ingest) imports ``opscope.report`` (at the top
or inside a function), and none of them defines a Markdown or HTML renderer (a function or method
named ``to_markdown``, ``to_html``, ``markdown_table``, ``*_md``, ``*_html``...): formatting lives
in report/ and nothing runs back up."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import opscope
from helpers.synth import training
from opscope.analysis import Analyzer
from opscope.analysis.registry import Result
from opscope.report.sections_md import RENDERERS, renderer

PACKAGE = Path(opscope.__file__).parent
ANALYSIS = PACKAGE / "analysis"
#: The layers that compute or read: data only, no text rendering.
DATA_LAYERS = ("analysis", "advise", "doctor", "cluster", "ingest")
#: A name that says it renders Markdown or HTML: to_markdown, to_html, markdown_table,
#: render_html, findings_md, ... (a whole word of the snake_case name, so "html_escape" counts
#: and "htmlish"/"cmd" do not).
RENDER_NAME = re.compile(r"(?:^|_)(?:markdown|html|md)(?:_|$)")


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


def _renderers(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every function or method (at any depth) whose name says it renders."""
    return [
        (node.lineno, node.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and RENDER_NAME.search(node.name)
    ]


def _layer_files(layer: str) -> list[Path]:
    files = sorted((PACKAGE / layer).rglob("*.py"))
    assert files, layer  # the walk found the package (not an empty glob)
    return files


def test_no_analysis_module_imports_the_report_layer() -> None:
    files = sorted(ANALYSIS.rglob("*.py"))
    assert len(files) > 20  # the walk found the package (not an empty glob)
    found = [hit for f in files for hit in _upward(f)]
    assert found == []


@pytest.mark.parametrize("layer", DATA_LAYERS)
def test_data_layers_do_not_import_the_report_layer(layer: str) -> None:
    assert [hit for f in _layer_files(layer) for hit in _upward(f)] == []


@pytest.mark.parametrize("layer", DATA_LAYERS)
def test_data_layers_define_no_markdown_or_html_renderer(layer: str) -> None:
    found = [
        f"{f.relative_to(PACKAGE)}:{line}: def {name}"
        for f in _layer_files(layer)
        for line, name in _renderers(ast.parse(f.read_text(encoding="utf-8"), filename=str(f)))
    ]
    assert found == []


def test_the_renderer_walk_sees_methods_and_nested_functions() -> None:
    # the check itself can fail: a method, a nested helper, a module function; not look-alikes
    src = (
        "class Memory:\n    def to_json(self): ...\n    def to_markdown(self): ...\n"
        "def outer():\n    def _peaks_html(x): ...\n"
        "async def to_html(r): ...\n"
        "def markdown_table(df): ...\n"
        "def cmd(): ...\ndef htmlish(): ...\ndef to_json(): ...\n"
    )
    names = sorted(n for _, n in _renderers(ast.parse(src)))
    assert names == ["_peaks_html", "markdown_table", "to_html", "to_markdown"]


def test_each_renderer_names_a_real_class() -> None:
    # the renderers are looked up by class name: a renamed or moved class must fail here, not
    # fall back silently to the generic tables
    import importlib

    for qual in RENDERERS:
        mod, _, cls = qual.rpartition(".")
        t = getattr(importlib.import_module(mod), cls)
        assert f"{t.__module__}.{t.__qualname__}" == qual


def test_every_analysis_section_of_a_report_has_its_renderer() -> None:
    rep = Analyzer(training(steps=3, layers=2).profile).generate_report(top=5)
    results = {n: r for n, r in rep.sections.items() if isinstance(r, Result)}
    assert {"hotspots", "breakdown", "memory", "roofline", "critical_path"} <= set(results)
    # utilisation has no Markdown of its own: the generic tables draw it
    missing = sorted(n for n, r in results.items() if renderer(r) is None)
    assert missing == ["utilisation"]


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
