"""The exact call-site line of every op (``opscope.profile(lines=True)``, ``record --lines``).

A real CPU run of tests/scripts/two_lines.py, whose matmul, bias add and linear layer sit on
three lines of one ``forward``: each op, and each backward op through its forward op, must be
charged to its own line; without ``lines`` all of them go to one line (torch.profiler names a
frame by its function's first line), which is what the feature fixes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

import opscope
from opscope.analysis.attribution import resolve_ops
from opscope.model import Profile
from opscope.model.usercode import is_model_file

SCRIPT = Path(__file__).parent / "scripts" / "two_lines.py"


def _marker_lines() -> dict[str, int]:
    out = {}
    for i, text in enumerate(SCRIPT.read_text().splitlines(), start=1):
        if "# LINE:" in text:
            out[text.split("# LINE:")[1].strip()] = i
    return out


def _record(tmp: Path, lines: bool) -> Profile:
    pytest.importorskip("torch")
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import two_lines
    finally:
        sys.path.remove(str(SCRIPT.parent))
    out = tmp / ("lines" if lines else "plain")
    with opscope.profile(out, wait=0, warmup=1, active=2, lines=lines) as p:
        two_lines.train(3, p)
    return opscope.load(out, cache=False)


def _line_of(prof: Profile) -> pl.DataFrame:
    """Per host op: name, is_backward, the file and line it is charged to."""
    res = resolve_ops(prof)
    return res.join(prof.events.select("id", "name"), on="id").select(
        "name", "is_backward", "file", "line", "top_level"
    )


@pytest.fixture(scope="module")
def with_lines(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    return _record(tmp_path_factory.mktemp("callsites"), lines=True)


def test_each_forward_op_is_charged_to_its_own_line(with_lines: Profile) -> None:
    want = _marker_lines()
    got = _line_of(with_lines).filter(pl.col("top_level") & ~pl.col("is_backward"))
    in_script = got.filter(pl.col("file").str.ends_with("two_lines.py"))

    def lines_of(op: str) -> set[int]:
        return set(in_script.filter(pl.col("name") == op).get_column("line").to_list())

    assert lines_of("aten::matmul") == {want["matmul"]}
    assert lines_of("aten::add") == {want["bias"]}
    assert lines_of("aten::linear") == {want["head"]}
    # the annotations themselves are frames now, never ops
    assert not with_lines.ops.filter(pl.col("name").str.starts_with("opscope.line")).height


def test_backward_ops_follow_their_forward_line(with_lines: Profile) -> None:
    want = _marker_lines()
    bwd = _line_of(with_lines).filter(
        pl.col("is_backward") & pl.col("file").str.ends_with("two_lines.py")
    )
    names = {n: set(g.get_column("line").to_list()) for (n,), g in bwd.group_by("name")}
    mm_bwd = [n for n in names if n.startswith("MmBackward")]
    assert mm_bwd, sorted(names)
    assert set().union(*(names[n] for n in mm_bwd)) <= {want["matmul"], want["head"]}
    add_bwd = [n for n in names if n.startswith("AddBackward")]
    assert add_bwd and all(names[n] == {want["bias"]} for n in add_bwd)


def test_without_lines_every_op_goes_to_one_line(tmp_path: Path) -> None:
    """The control: torch.profiler's own frames give one line for the whole forward."""
    got = _line_of(_record(tmp_path, lines=False)).filter(
        pl.col("top_level")
        & ~pl.col("is_backward")
        & pl.col("name").is_in(["aten::matmul", "aten::add", "aten::linear"])
        & pl.col("file").str.ends_with("two_lines.py")
    )
    assert got.height > 0
    assert got.get_column("line").n_unique() == 1


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("train.py", True),
        ("/home/me/proj/model.py", True),
        ("torch/nn/modules/linear.py", False),
        ("/usr/lib/python3.11/site-packages/torch/nn/functional.py", False),
        ("/usr/lib/python3.11/site-packages/transformers/models/vit/modeling_vit.py", True),
        ("transformers/models/vit/modeling_vit.py", True),
        ("timm/models/vision_transformer.py", True),
        ("/opt/venv/lib/python3.12/site-packages/accelerate/accelerator.py", False),
        ("/opt/venv/lib/python3.12/site-packages/somelib/x.py", False),
        ("/usr/lib/python3.11/threading.py", False),
        ("threading.py", False),
        ("multiprocessing/pool.py", False),
        ("/work/src/opscope/record/callsites.py", False),
        ("opscope/demo/model.py", True),
        ("<built-in method matmul>", False),
        ("", False),
    ],
)
def test_model_code_rule(path: str, model: bool) -> None:
    assert is_model_file(path) is model


def test_model_code_rule_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = "/opt/venv/lib/python3.12/site-packages/somelib/x.py"
    monkeypatch.setenv("OPSCOPE_MODEL_PACKAGES", "somelib")
    assert is_model_file(lib)
    monkeypatch.setenv("OPSCOPE_FRAMEWORK_PACKAGES", "mytools")
    monkeypatch.delenv("OPSCOPE_MODEL_PACKAGES")
    assert not is_model_file(lib)
    assert not is_model_file("mytools/helpers.py")
    assert is_model_file("transformers/models/bert/modeling_bert.py")


def test_run_directory_carries_the_model_source(with_lines: Profile) -> None:
    """sources/ holds two_lines.py; the blocks show each marked line with its own time."""
    from opscope.analysis.attribution import charged_lines
    from opscope.analysis.source_view import captured_sources, source_blocks

    src = captured_sources(with_lines)
    mine = [p for p in src if p.endswith("two_lines.py")]
    assert len(mine) == 1
    text, truncated = src[mine[0]]
    assert text == SCRIPT.read_text().splitlines() and not truncated
    lines = charged_lines(with_lines)
    blocks = [b for b in source_blocks(with_lines, lines) if b.path == mine[0]]
    shown = {ln.line: ln for b in blocks for ln in b.lines}
    want = _marker_lines()
    script_rows = lines.filter(pl.col("file").str.ends_with("two_lines.py"))
    for key in ("matmul", "bias", "head"):
        ln = shown[want[key]]
        assert "# LINE:" + key in ln.text
        row = script_rows.filter(pl.col("line") == want[key])
        assert ln.fwd_ns == int(row.get_column("fwd_ns").sum()) > 0
        assert ln.bwd_ns == int(row.get_column("bwd_ns").sum()) > 0


def test_source_capture_is_bounded_and_redacted(tmp_path: Path) -> None:
    from opscope.record.sources import capture

    a = tmp_path / "a.py"
    a.write_text('HF_TOKEN = "hf_secret_value"\nx = 1\n' + "y = 2\n" * 100)
    b = tmp_path / "b.py"
    b.write_text("z = 3\n" * 10)
    idx = capture(tmp_path / "run", [str(a), str(b)], per_file=64, total=80)
    copy = (tmp_path / "run" / "sources" / idx["files"][str(a.resolve())]["copy"]).read_text()
    assert "hf_secret_value" not in copy and '"<redacted>"' in copy
    assert idx["files"][str(a.resolve())]["truncated"]
    assert len(copy.encode()) <= 64 + len("<redacted>")
    assert idx["skipped"] == [str(b)]  # past the total cap


def test_viewer_event_details_show_the_code_with_line_times(with_lines: Profile) -> None:
    """The viewer's details of an op: the code around its line, each line's fwd/bwd time equal
    to attribution's, the op's own line marked."""
    from opscope.analysis.attribution import charged_lines
    from opscope.report.viewer.query import TimelineIndex

    want = _marker_lines()
    idx = TimelineIndex(with_lines)
    op = with_lines.ops.filter(pl.col("name") == "aten::add")
    ids = [
        i
        for i in op.get_column("id").to_list()
        if (ev := idx.event(int(i))) and ev["source"] and ev["source"]["line"] == want["bias"]
    ]
    assert ids
    ev = idx.event(int(ids[0]))
    assert ev is not None
    sc = ev["source_code"]
    assert sc is not None and sc["line"] == want["bias"]
    rows = {r["line"]: r for r in sc["lines"]}
    assert "# LINE:bias" in rows[want["bias"]]["text"]
    assert "# LINE:matmul" in rows[want["matmul"]]["text"]
    lines = charged_lines(with_lines).filter(pl.col("file") == ev["source"]["file"])
    for key in ("matmul", "bias", "head"):
        got = rows[want[key]]
        row = lines.filter(pl.col("line") == want[key])
        assert got["fwd_us"] == int(row.get_column("fwd_ns").sum()) / 1e3
        assert got["bwd_us"] == int(row.get_column("bwd_ns").sum()) / 1e3


def test_viewer_page_shows_the_code_of_a_selected_op(with_lines: Profile) -> None:
    from pathlib import Path as _P

    if not _P("/usr/bin/chromium").exists():
        pytest.skip("Debian chromium not installed at /usr/bin/chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    from opscope.report.viewer import make_server

    want = _marker_lines()
    srv = make_server(with_lines, overlays=False)
    srv.start_background()
    matmul = with_lines.ops.filter(pl.col("name") == "aten::matmul").get_column("id").to_list()
    try:
        with sync_api.sync_playwright() as pw:
            b = pw.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--headless=new", "--no-sandbox"]
            )
            page = b.new_page(viewport={"width": 1400, "height": 800})
            page.goto(srv.url)
            page.wait_for_function("window.__opscope && window.__opscope.S")
            page.evaluate(f"window.__opscope.select({int(matmul[0])})")
            page.wait_for_selector("#details table.code tr.here")
            here = page.locator("#details table.code tr.here td.txt").text_content()
            lineno = page.locator("#details table.code tr.here td.ln").text_content()
            b.close()
    finally:
        srv.shutdown()
        srv.server_close()
    assert here is not None and "# LINE:matmul" in here
    assert lineno == str(want["matmul"])
