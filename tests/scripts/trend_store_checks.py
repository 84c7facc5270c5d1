"""Checks shared by the DuckDB and PostgreSQL store tests; expected figures come from the raw
run files (metrics.jsonl, run.json, model.json, the trace JSON) parsed with the stdlib."""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from trend_runs import recorded

from opscope.cli.app import main
from opscope.trend.store import open_store


def both_runs(base: Path) -> dict[str, Path]:
    """The steady and the slow recorded run (recorded once per test session)."""
    return {n: recorded(base, n) for n in ("steady", "slow")}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``opscope ARGS`` run in-process."""
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
