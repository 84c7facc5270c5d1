"""Malformed Kineto input through the CLI: one line on stderr, exit 2, never a traceback."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from opscope.errors import CorruptArchiveError, InputError, TruncatedTraceError
from opscope.ingest.kineto import parse_kineto


def _events(n: int) -> list[dict[str, object]]:
    return [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"aten::op{i}",
            "pid": 1,
            "tid": 1,
            "ts": 1000.5 + 10 * i,
            "dur": 5.25,
            "args": {"External id": i},
        }
        for i in range(n)
    ]


def _trace(n: int = 20) -> bytes:
    return json.dumps({"schemaVersion": 1, "traceEvents": _events(n)}, indent=1).encode()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "opscope", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


def _assert_one_line_error(r: subprocess.CompletedProcess[str], path: Path, words: str) -> None:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    assert path.name in lines[0]
    assert words in lines[0].lower()


CASES = {
    "empty": (b"", "empty"),
    "garbage": (b"\x00\x01garbage that is not json", "not a json trace"),
    "number": (b"42", "not a json trace"),
    "no_trace_events": (b'{"schemaVersion": 1}', "no traceevents"),
    "events_not_array": (b'{"traceEvents": {"a": 1}}', "expected an array"),
    "invalid_middle": (_trace(5).replace(b'"ph"', b'"ph" ::', 1), "not valid json"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_cli(tmp_path: Path, case: str) -> None:
    data, words = CASES[case]
    p = tmp_path / f"{case}.json"
    p.write_bytes(data)
    _assert_one_line_error(_cli("load", str(p), "--no-cache"), p, words)


def test_truncated_without_and_with_salvage(tmp_path: Path) -> None:
    full = _trace(20)
    cut = full.index(b'"aten::op13"') + 3  # inside event 13
    p = tmp_path / "killed.json"
    p.write_bytes(full[:cut])
    r = _cli("load", str(p), "--no-cache")
    _assert_one_line_error(r, p, "truncated")
    assert f"truncated at byte {cut}" in r.stderr
    assert "13 complete events" in r.stderr
    assert "--salvage" in r.stderr
    r = _cli("load", str(p), "--no-cache", "--salvage", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["events"] == 13 and out["ops"] == 13
    assert out["salvaged"]["events"] == 13
    with pytest.raises(TruncatedTraceError):
        parse_kineto(p)
    prof = parse_kineto(p, salvage=True)
    assert prof.events.get_column("name").to_list() == [f"aten::op{i}" for i in range(13)]


def test_truncated_gzip_salvage(tmp_path: Path) -> None:
    data = gzip.compress(_trace(2000))
    p = tmp_path / "killed.json.gz"
    p.write_bytes(data[: len(data) * 2 // 3])
    _assert_one_line_error(_cli("load", str(p), "--no-cache"), p, "gzip")
    prof = parse_kineto(p, salvage=True)
    n = prof.meta["salvaged"]["events"]
    assert 0 < n < 2000
    assert prof.events.get_column("name").to_list() == [f"aten::op{i}" for i in range(n)]


def test_corrupt_gzip(tmp_path: Path) -> None:
    p = tmp_path / "bad.json.gz"
    p.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 200)
    _assert_one_line_error(_cli("load", str(p), "--no-cache"), p, "gzip")
    q = tmp_path / "notgz.json.gz"
    q.write_bytes(_trace(3))
    with pytest.raises(CorruptArchiveError):
        parse_kineto(q)


def test_gzip_bomb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "bomb.json.gz"
    with gzip.open(p, "wb") as f:
        f.write(b'{"traceEvents": [')
        f.write(b" " * (64 * 1024 * 1024))
        f.write(b"]}")
    monkeypatch.setenv("OPSCOPE_MAX_DECOMPRESSED", str(16 * 1024 * 1024))
    with pytest.raises(CorruptArchiveError, match="bomb"):
        parse_kineto(p)
    env_r = subprocess.run(
        [sys.executable, "-m", "opscope", "load", str(p), "--no-cache"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OPSCOPE_MAX_DECOMPRESSED": str(16 * 1024 * 1024)},
    )
    _assert_one_line_error(env_r, p, "bomb")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    p = tmp_path / "nope.json"
    _assert_one_line_error(_cli("load", str(p)), p, "no such file")


def test_odd_fields_are_tolerated_and_counted(tmp_path: Path) -> None:
    evs = _events(6)
    evs[0]["dur"] = -3  # negative duration
    evs[1]["ts"] = "oops"  # wrong type
    evs[2]["args"] = {"External id": "x", "Sequence number": 4}  # wrong arg type
    del evs[3]["dur"]  # missing duration
    evs.append({"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 5000, "dur": 1})  # no name
    evs.append({"ph": "Z", "name": "weird phase"})
    p = tmp_path / "odd.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    prof = parse_kineto(p)
    odd = prof.meta["oddities"]
    assert odd["negative duration (clamped to 0)"] == 1
    assert odd["slice without ts (dropped)"] == 1
    assert odd["slice without dur (0 used)"] == 1
    assert odd["slice without name"] == 1
    assert odd["unsupported phase"] == 1
    assert odd["odd field types"] == 2
    ev = prof.events
    assert ev.height == 6
    assert ev.get_column("dur_ns").min() == 0
    row = ev.filter(ev.get_column("name") == "aten::op2").row(0, named=True)
    assert row["external_id"] is None and row["seq"] == 4
    r = _cli("load", str(p), "--no-cache", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["oddities"] == odd


def test_bare_array_and_compact_json(tmp_path: Path) -> None:
    p = tmp_path / "arr.json"
    p.write_text(json.dumps(_events(4), separators=(",", ":")))
    prof = parse_kineto(p)
    assert prof.events.height == 4
    assert prof.events.get_column("ts_ns").to_list() == [1000500, 1010500, 1020500, 1030500]
    assert isinstance(InputError("x"), Exception)
