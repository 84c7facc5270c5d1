"""The run store on DuckDB: summaries checked against the raw run files, the slower-run flag
through compare, two concurrent writer processes, a newer-version store, bad input."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

from opscope.errors import StoreError
from opscope.trend import store as store_mod
from opscope.trend.store import SCHEMA_VERSION, open_store

duckdb = pytest.importorskip("duckdb")
sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from trend_store_checks import both_runs, check_round_trip, cli, concurrent_writers  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return both_runs(tmp_path_factory.getbasetemp())


def test_duckdb_round_trip_and_flag(tmp_path: Path, runs: dict[str, Path]) -> None:
    check_round_trip(str(tmp_path / "s.duckdb"), runs)


def test_duckdb_concurrent_writers(tmp_path: Path, runs: dict[str, Path]) -> None:
    concurrent_writers(str(tmp_path / "s.duckdb"), runs["steady"], tmp_path)


def test_default_store_under_xdg_data_home(
    tmp_path: Path,
    runs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("OPSCOPE_STORE", raising=False)
    code, out, _ = cli(capsys, "store", "add", str(runs["steady"]), "--tag", "t1", "--json")
    assert code == 0
    assert json.loads(out)["tag"] == "t1"
    assert (tmp_path / "xdg" / "opscope" / "runs.duckdb").is_file()
    code, out, _ = cli(capsys, "store", "list", "--json")
    assert [r["tag"] for r in json.loads(out)] == ["t1"]
    code, out, _ = cli(capsys, "store", "trend", "--json", "--metric", "samples_per_s")
    rows = [json.loads(x) for x in (runs["steady"] / "metrics.jsonl").read_text().splitlines()]
    sps = statistics.median(r["samples_per_s"] for r in rows)
    assert json.loads(out)["runs"][0]["value"] == pytest.approx(sps)


def test_newer_store_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.duckdb"
    with open_store(str(path)):
        pass
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO schema_version VALUES (?)", [SCHEMA_VERSION + 98])
    con.close()
    with (
        pytest.raises(StoreError, match=rf"newer opscope \(schema {SCHEMA_VERSION + 98} > "),
        open_store(str(path)),
    ):
        pass
    code, out, err = cli(capsys, "store", "list", "--store", str(path))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert f"schema {SCHEMA_VERSION + 98} > {SCHEMA_VERSION}" in err


def test_not_a_store_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"this is not a database" * 100)
    code, out, err = cli(capsys, "store", "list", "--store", str(bad))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and str(bad) in err


def test_run_without_metrics_writes_nothing(
    tmp_path: Path, runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path / "s.duckdb")
    with open_store(url) as s:
        s.add(runs["steady"])
    empty = tmp_path / "run"
    empty.mkdir()
    (empty / "run.json").write_text("{}")
    code, _, err = cli(capsys, "store", "add", str(empty), "--store", url)
    assert code == 2 and "metrics.jsonl" in err and len(err.strip().splitlines()) == 1
    with open_store(url) as s:
        assert len(s.list()) == 1


def test_failed_insert_rolls_back(
    tmp_path: Path, runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "s.duckdb")
    real = store_mod.summarise

    def broken(run_dir: Any) -> dict[str, Any]:
        d = real(run_dir)
        d["steps"] = "not a number"  # the INSERT fails inside the transaction
        return d

    monkeypatch.setattr(store_mod, "summarise", broken)
    with pytest.raises(StoreError), open_store(url) as s:
        s.add(runs["steady"])
    with open_store(url) as s:
        assert s.list() == []
