"""A trace over the memory budget loads through the streaming scanner into the same Profile.

``memory_budget=1`` forces the out-of-core branch (phase 1: the ``.json.gz`` text is inflated
through a bounded window, the tables are built as before); every table must equal the default
in-memory load's, on every shared trace.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import SHARED_TRACES
from opscope.ingest import fastscan, kineto, outofcore
from test_out_of_core_spill import assert_same_windowed

pytestmark = pytest.mark.skipif(
    not fastscan.available(), reason="the compiled scanner is switched off (OPSCOPE_SCANNER)"
)

SHARED = sorted(
    str(p.relative_to(SHARED_TRACES))
    for sub in ("gpu", "compare", "multi_rank")
    for p in (SHARED_TRACES / sub).glob("**/*.json*")
    if SHARED_TRACES.is_dir() and not any(part.startswith(".") for part in p.parts)
)


def _count_streams(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = fastscan.scan_stream

    def spy(*a: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(fastscan, "scan_stream", spy)
    return calls


@pytest.mark.parametrize("rel", SHARED or ["(none)"])
def test_shared_trace_same_profile_over_budget(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = SHARED_TRACES / rel
    if not path.is_file():
        pytest.skip(f"shared trace not found: {path}")
    monkeypatch.delenv(outofcore.ENV, raising=False)
    ref = kineto.parse_kineto(path)
    calls = _count_streams(monkeypatch)
    # many windows even for small traces (1 MiB on the 10+ MB texts: still 30+)
    big = path.stat().st_size > 1_000_000
    monkeypatch.setattr(fastscan, "WINDOW_BYTES", 1 << 20 if big else 1 << 18)
    got = kineto.parse_kineto(path, memory_budget=1)
    assert calls == [1], "the budget sends the trace down the streaming path"
    assert got.events.height > 0
    assert_same_windowed(got, ref)


def _trace(tmp_path: Path, n: int = 400) -> Path:
    evs = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 9}", "pid": 1, "tid": 1 + i % 2}
        | {"ts": 10 * i, "dur": 5, "args": {"External id": i}}
        for i in range(n)
    ]
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": evs}).encode()))
    return p


def test_default_budget_keeps_the_in_memory_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(outofcore.ENV, raising=False)
    p = _trace(tmp_path)
    calls = _count_streams(monkeypatch)
    kineto.parse_kineto(p)
    assert calls == []
    monkeypatch.setenv(outofcore.ENV, "1K")  # the environment's budget (what --memory-budget sets)
    kineto.parse_kineto(p)
    assert calls == [1]


def test_estimate_reads_the_gzip_trailer(tmp_path: Path) -> None:
    p = _trace(tmp_path, 3000)
    inflated = len(gzip.decompress(p.read_bytes()))
    compressed = p.stat().st_size
    assert outofcore.text_size(p) == max(inflated, compressed * outofcore.GZ_RATIO_GUESS)
    peak = int(outofcore.text_size(p) * (outofcore.PEAK_PER_TEXT_BYTE + 1))
    assert outofcore.estimated_peak(p) == peak
    assert outofcore.over_budget(p, peak - 1) and not outofcore.over_budget(p, peak)
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.decompress(p.read_bytes()))
    assert outofcore.text_size(plain) == inflated


@pytest.mark.parametrize(
    ("text", "want"),
    [("123", 123), ("4G", 4 << 30), ("512m", 512 << 20), ("1.5GiB", 3 << 29), ("2kb", 2048)],
)
def test_parse_budget(text: str, want: int) -> None:
    assert outofcore.parse_budget(text) == want


@pytest.mark.parametrize("text", ["", "lots", "-1G", "0", "4X"])
def test_bad_budget_is_a_typed_error(text: str) -> None:
    with pytest.raises(outofcore.BudgetError, match="not a size"):
        outofcore.parse_budget(text)


def test_cli_load_with_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opscope.cli.app import app

    monkeypatch.delenv(outofcore.ENV, raising=False)
    p = _trace(tmp_path)
    runner = CliRunner()
    base = runner.invoke(app, ["load", str(p), "--json", "--no-cache"])
    calls = _count_streams(monkeypatch)
    got = runner.invoke(app, ["load", str(p), "--json", "--no-cache", "--memory-budget", "1K"])
    assert base.exit_code == 0 and got.exit_code == 0, got.output
    assert calls == [1]
    strip = ("elapsed_s", "load_s", "seconds")
    a, b = json.loads(base.stdout), json.loads(got.stdout)
    assert {k: v for k, v in a.items() if k not in strip} == {
        k: v for k, v in b.items() if k not in strip
    }


def test_cli_bad_budget_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from opscope.cli.app import main

    assert main(["load", str(_trace(tmp_path)), "--memory-budget", "lots"]) == 2
    err = capsys.readouterr().err
    assert "not a size" in err and "Traceback" not in err


@pytest.mark.parametrize("before", [None, "2G"])
def test_cli_budget_is_for_that_command_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: str | None
) -> None:
    """``--memory-budget`` reaches the command's loads (and its worker processes, through the
    environment) but not a later command in the same process: the environment is restored."""
    from opscope.cli.app import main

    if before is None:
        monkeypatch.delenv(outofcore.ENV, raising=False)
    else:
        monkeypatch.setenv(outofcore.ENV, before)
    seen: list[str | None] = []
    real = outofcore.over_budget

    def spy(path: object, memory_budget: int | None = None) -> bool:
        seen.append(os.environ.get(outofcore.ENV))
        return real(path, memory_budget)  # type: ignore[arg-type]

    monkeypatch.setattr(outofcore, "over_budget", spy)
    p = _trace(tmp_path)
    assert main(["load", str(p), "--json", "--no-cache", "--memory-budget", "1K"]) == 0
    assert os.environ.get(outofcore.ENV) == before
    assert seen and set(seen) == {"1024"}
