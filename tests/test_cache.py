"""The columnar cache beside the trace (``OPSCOPE_CACHE_BESIDE``): reuse, invalidation,
isolation, read-only fallback. The default location is tested in test_cache_location.py."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from opscope.ingest import cache as cache_mod
from opscope.ingest import kineto
from opscope.ingest.kineto import read_kineto


def _write(p: Path, names: list[str]) -> None:
    evs = [
        {"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": 10.0 * i, "dur": 5.0}
        for i, n in enumerate(names)
    ]
    p.write_text(json.dumps({"traceEvents": evs}))


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real = kineto.parse_kineto

    def spy(path: Path, **kw: object) -> object:
        calls.append(path)
        return real(path, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(kineto, "parse_kineto", spy)
    monkeypatch.setenv("XDG_CACHE_HOME", "/nonexistent-never-used")
    # These tests are about the opt-in entry beside the trace (the default is the user cache).
    monkeypatch.setenv("OPSCOPE_CACHE_BESIDE", "1")
    return calls


def test_second_load_reads_cache(tmp_path: Path, counting: list[Path]) -> None:
    p = tmp_path / "a.json"
    _write(p, ["x", "y"])
    first = read_kineto(p)
    second = read_kineto(p)
    assert len(counting) == 1
    assert not first.meta.get("from_cache") and second.meta["from_cache"]
    assert second.events.equals(first.events)
    assert (tmp_path / ".a.json.opscope" / "meta.json").is_file()


def test_touched_file_rebuilds(tmp_path: Path, counting: list[Path]) -> None:
    p = tmp_path / "a.json"
    _write(p, ["x", "y"])
    read_kineto(p)
    _write(p, ["x", "y", "z"])
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    again = read_kineto(p)
    assert len(counting) == 2
    assert again.events.height == 3


def test_other_version_rebuilds(
    tmp_path: Path, counting: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "a.json"
    _write(p, ["x"])
    read_kineto(p)
    monkeypatch.setattr(cache_mod, "__version__", "999.0")
    read_kineto(p)
    assert len(counting) == 2


def test_two_traces_in_one_folder_never_collide(tmp_path: Path, counting: list[Path]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _write(a, ["only_a"])
    _write(b, ["only_b", "b2"])
    # identical size and mtime must still not share an entry
    os.utime(b, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns))
    pa, pb = read_kineto(a), read_kineto(b)
    pa2, pb2 = read_kineto(a), read_kineto(b)
    assert pa2.meta["from_cache"] and pb2.meta["from_cache"]
    assert pa2.events.get_column("name").to_list() == ["only_a"]
    assert pb2.events.get_column("name").to_list() == ["only_b", "b2"]
    assert pa.events.height == 1 and pb.events.height == 2


def test_read_only_folder_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    p = ro / "a.json"
    _write(p, ["x"])
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    try:
        read_kineto(p)
        again = read_kineto(p)
    finally:
        ro.chmod(stat.S_IRWXU)
    assert again.meta["from_cache"]
    assert str(tmp_path / "xdg" / "opscope") in again.meta["cache_path"]
    # even root (for whom os.access says yes) leaves a folder without write bits alone
    assert not (ro / ".a.json.opscope").exists()


def test_unwritable_beside_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Same as above but independent of uid: the beside-location is made unwritable by policy.
    p = tmp_path / "a.json"
    _write(p, ["x"])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(cache_mod, "_writable", lambda d: "xdg" in str(d))
    read_kineto(p)
    again = read_kineto(p)
    assert again.meta["from_cache"]
    assert again.meta["cache_path"].startswith(str(tmp_path / "xdg" / "opscope"))
    assert not (tmp_path / ".a.json.opscope").exists()


def test_no_cache_flag_writes_nothing(tmp_path: Path) -> None:
    p = tmp_path / "a.json"
    _write(p, ["x"])
    read_kineto(p, cache=False)
    assert not (tmp_path / ".a.json.opscope").exists()
