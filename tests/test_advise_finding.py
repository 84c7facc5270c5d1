"""Findings: stable ids, the report JSON shape, Markdown, sorting, the rule registry."""

from __future__ import annotations

from opscope.advise import REPORT_KEYS, Finding, Findings, advise, rules
from opscope.advise.finding import finding_id
from opscope.model import Profile
from opscope.report.sections_md import findings_md

DOCS = __import__("pathlib").Path(__file__).resolve().parents[1] / "docs" / "rules"


def _f(rule: str, saving: float, sev: str = "low") -> Finding:
    return Finding(
        id=finding_id(rule, "a.py", 3, "M", "k"),
        rule=rule,
        severity=sev,  # type: ignore[arg-type]
        title=f"{rule} | x",
        file="a.py",
        line=3,
        module="M",
        saving_us=saving,
        saving_pct=saving / 10,
        saving_how="how",
        fix="y = f(x)",
    )


def test_ids_are_stable_and_distinct() -> None:
    assert finding_id("r", "a.py", 3, "M", "k") == finding_id("r", "a.py", 3, "M", "k")
    assert finding_id("r", "a.py", 3, "M", "k") != finding_id("r", "a.py", 4, "M", "k")
    assert finding_id("r", "a.py", 3, "M", "k") != finding_id("s", "a.py", 3, "M", "k")


def test_report_json_keys_and_order() -> None:
    fs = Findings((_f("a", 1.0), _f("b", 5.0))).replace_items([_f("a", 1.0), _f("b", 5.0)])
    js = fs.to_json()
    assert [list(r) for r in js] == [list(REPORT_KEYS)] * 2
    assert [r["rule"] for r in js] == ["b", "a"]  # by saving
    assert js[0]["saving_us"] == 5.0 and js[0]["verified_speedup"] is None
    full = fs.to_json_full()
    assert full[0]["id"] == fs[0].id and "evidence" in full[0]


def test_markdown_has_rows_and_fixes() -> None:
    md = findings_md(Findings((_f("a", 1.0),)))
    assert md.startswith("## Findings")
    assert "a \\| x" in md and "a.py:3" in md and "```python\ny = f(x)\n```" in md
    assert "No findings." in findings_md(Findings())


def test_every_rule_has_doc_and_docs_page() -> None:
    rs = rules()
    assert len(rs) >= 15
    for rid, r in rs.items():
        assert r.id == rid and len(r.doc) > 200
        page = DOCS / f"{rid}.md"
        assert page.is_file(), page
        assert rid in page.read_text()


def test_empty_profile_has_no_findings() -> None:
    found = advise(Profile.from_tables(meta={"format": "kineto"}))
    assert len(found) == 0 and found.errors == {}


def test_unknown_target_is_an_error() -> None:
    import pytest

    with pytest.raises(ValueError, match="unknown target"):
        from opscope.advise import _common

        _common.target_of(Profile(), {"target": "tpu"})


def test_alignment_saving_from_aligned_peers_in_the_same_profile() -> None:
    import polars as pl
    import pytest

    # two aligned calls of 2*256*512*256 FLOP in 100 µs each, three misaligned calls of
    # 2*256*500*256 FLOP in 300 µs each, one step
    dims_ok, dims_bad = "[[256,512],[512,256]]", "[[256,500],[500,256]]"
    n = 5
    ev = pl.DataFrame(
        {
            "id": list(range(n)),
            "rank": [0] * n,
            "kind": ["cpu_op"] * n,
            "name": ["aten::mm"] * n,
            "ts_ns": [i * 1_000_000 for i in range(n)],
            "dur_ns": [100_000, 100_000, 300_000, 300_000, 300_000],
            "input_dims": [dims_ok, dims_ok, dims_bad, dims_bad, dims_bad],
            "input_types": ['["float","float"]'] * n,
        }
    )
    steps = pl.DataFrame({"rank": [0], "step": [0], "ts_ns": [0], "dur_ns": [10_000_000]})
    prof = Profile.from_tables(meta={"format": "kineto"}, events=ev, steps=steps)
    (f,) = advise(prof, target="ascend").by_rule("shape-alignment")
    rate = 2 * 2 * 256 * 512 * 256 / 200_000  # FLOP per ns of the aligned peers
    want_ns = 900_000 - 3 * 2 * 256 * 500 * 256 / rate
    assert f.saving_us == pytest.approx(want_ns / 1000, abs=1e-3)  # rounded to ns
    assert f.saving_pct == pytest.approx(100 * want_ns / 10_000_000, abs=1e-3)
    assert f.evidence["figures"]["misaligned_dims"] == [500]
    assert f.evidence["bench"]["padded_shape"] == [256, 512, 256]


def test_findings_plug_into_a_report_section() -> None:
    from opscope.analysis.assemble import Report, section_json, section_key
    from opscope.report.markdown import render as render_markdown

    fs = Findings((_f("a", 1.0),))
    assert section_key("advice", fs) == "findings"
    assert section_json(fs) == fs.to_json()
    rep = Report(summary={"format": "kineto"}, sections={"advice": fs})
    assert rep.to_json()["findings"] == fs.to_json()
    assert "## Findings" in render_markdown(rep)


def test_rules_stays_the_function_whatever_is_imported_first() -> None:
    """``opscope.advise.rules`` is the registry function although a subpackage has the same
    name: importing a rule module first (as some tests do), or running the rules (which imports
    every family), once rebound the name to the subpackage, and a later caller got a module."""
    import subprocess
    import sys

    code = (
        "import opscope.advise.rules.gemm\n"
        "import importlib; importlib.import_module('opscope.advise.rules.fusion')\n"
        "from opscope.advise import advise, rules\n"
        "from opscope.model import Profile\n"
        "advise(Profile.from_tables(meta={'format': 'kineto'}))\n"
        "import opscope.advise as a\n"
        "assert callable(rules) and a.rules is rules, a.rules\n"
        "print(len(rules()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip()) == len(rules())
