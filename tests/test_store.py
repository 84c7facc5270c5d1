"""The run store on DuckDB: summaries checked against the raw run files, the slower-run flag
through compare, two concurrent writer processes, a newer-version store, bad input."""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from opscope.cli.app import main
from opscope.errors import StoreError
from opscope.trend import store as store_mod
from opscope.trend.store import SCHEMA_VERSION, open_store

duckdb = pytest.importorskip("duckdb")
sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from trend_runs import recorded  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.getbasetemp()
    return {n: recorded(base, n) for n in ("steady", "slow")}


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def clean_median_us(run: Path) -> float:
    """Median wall µs of the steps the profiler did not touch, from metrics.jsonl."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]
    prof = {r["step"] for r in rows if r["profiled"]}
    skip = prof | {s - 1 for s in prof if s - 1 not in prof} | {s + 1 for s in prof}
    return statistics.median(r["wall_ns"] / 1000.0 for r in rows if r["step"] not in skip)


def raw_op_totals(run: Path) -> Counter[str]:
    """Summed cpu_op duration (µs) per name over every trace of the run, from the raw JSON."""
    tot: Counter[str] = Counter()
    for f in sorted((run / "rank0").glob("*.pt.trace.json.gz")):
        for e in json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]:
            if e.get("cat") == "cpu_op" and e.get("ph") == "X":
                tot[e["name"]] += float(e["dur"])
    return tot


def check_round_trip(url: str, runs: dict[str, Path]) -> None:
    """Shared by the DuckDB and PostgreSQL tests."""
    steady, slow = runs["steady"], runs["slow"]
    with open_store(url) as s:
        a = s.add(steady, tag="first")
        b = s.add(steady, tag="again")
        c = s.add(slow, tag="slow")
    with open_store(url) as s:  # a fresh connection reads what was committed
        rows = s.list()
        tr = s.trend(model=a["model_hash"][:12])
    assert [r["id"] for r in rows] == [a["id"], b["id"], c["id"]]
    assert [r["tag"] for r in rows] == ["first", "again", "slow"]
    r = rows[0]
    run_json = json.loads((steady / "run.json").read_text())
    model_json = json.loads((steady / "model.json").read_text())
    assert r["git_commit"] == (run_json.get("git") or {}).get("commit")
    assert r["model_hash"] == model_json["structure_hash"]
    assert r["device_kind"] == run_json["device"]["kind"] == "cpu"
    assert r["settings"] == run_json["profiler"]
    assert r["steps"] == len((steady / "metrics.jsonl").read_text().splitlines())
    assert r["step_median_us"] == pytest.approx(clean_median_us(steady))
    tot = raw_op_totals(steady)
    top = max(tot, key=lambda k: tot[k])
    assert r["top_ops"][0]["name"] == top
    assert r["top_ops"][0]["total_us"] == pytest.approx(tot[top], rel=1e-3)
    assert r["top_lines"] and all("total_us" in x for x in r["top_lines"])
    # the flag: the same run again is within noise, the slow one is slower beyond it
    assert rows[0]["prev_id"] is None and rows[0]["slower"] is None
    assert rows[1]["prev_id"] == a["id"] and rows[1]["slower"] is False
    assert rows[2]["prev_id"] == b["id"] and rows[2]["slower"] is True
    assert rows[2]["verdict"] == "loss"
    expect = (clean_median_us(slow) / clean_median_us(steady) - 1.0) * 100.0
    assert rows[2]["change_pct"] == pytest.approx(expect)
    # compare() of the two runs' traces names the planted matmuls among the operators that moved
    mm = next(x for x in rows[2]["changes"] if x["key"] == "aten::mm")
    assert mm["after_us"] > 2 * mm["before_us"]
    assert [x["value"] for x in tr] == [x["step_median_us"] for x in rows]
    assert [x["slower"] for x in tr] == [None, False, True]


def concurrent_writers(url: str, run: Path, tmp: Path) -> None:
    """Two processes add a run at the same time: both rows land, ids distinct."""
    cmd = [sys.executable, "-m", "opscope", "store", "add", str(run), "--store", url]
    procs = [
        subprocess.Popen(
            [*cmd, "--tag", f"w{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    with open_store(url) as s:
        rows = s.list()
    w = [r for r in rows if r["tag"] in ("w0", "w1")]
    assert sorted(r["tag"] for r in w) == ["w0", "w1"]
    assert len({r["id"] for r in rows}) == len(rows)
    # each writer's summary is whole
    assert all(r["step_median_us"] == pytest.approx(clean_median_us(run)) for r in w)


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
    code, out, _ = _cli(capsys, "store", "add", str(runs["steady"]), "--tag", "t1", "--json")
    assert code == 0
    assert json.loads(out)["tag"] == "t1"
    assert (tmp_path / "xdg" / "opscope" / "runs.duckdb").is_file()
    code, out, _ = _cli(capsys, "store", "list", "--json")
    assert [r["tag"] for r in json.loads(out)] == ["t1"]
    code, out, _ = _cli(capsys, "store", "trend", "--json", "--metric", "samples_per_s")
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
    code, out, err = _cli(capsys, "store", "list", "--store", str(path))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert f"schema {SCHEMA_VERSION + 98} > {SCHEMA_VERSION}" in err


def test_not_a_store_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"this is not a database" * 100)
    code, out, err = _cli(capsys, "store", "list", "--store", str(bad))
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
    code, _, err = _cli(capsys, "store", "add", str(empty), "--store", url)
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
