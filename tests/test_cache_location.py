"""Where the cache lives: the user cache folder by default (keyed by path, size, mtime and schema
version, bounded in size), beside the trace only when asked, old ``.opscope`` folders beside a
trace ignored, read-only trace folders fine."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import shared_trace
from helpers.cache_traces import cpu_trace, event_names, write_json
from opscope.cli.app import main
from opscope.ingest import cache as cache_mod
from opscope.ingest import load
from opscope.model import schema


def _beside(p: Path) -> list[Path]:
    return [x for x in p.parent.iterdir() if x.name.endswith(".opscope")]


def test_default_is_the_user_cache_keyed_by_path_size_mtime(
    tmp_path: Path, user_cache: Path
) -> None:
    d = tmp_path / "data"
    d.mkdir()
    p = write_json(d / "t.json", cpu_trace("a", 3))
    first, again = load(p), load(p)
    assert not first.meta.get("from_cache") and again.meta["from_cache"] is True
    entry = Path(again.meta["cache_path"])
    assert entry.parent == user_cache
    assert _beside(p) == []  # nothing written beside the user's trace
    key = json.loads((entry / "meta.json").read_text())["cache_key"]
    st = p.stat()
    assert (key["size"], key["mtime_ns"]) == (st.st_size, st.st_mtime_ns)
    assert key["schema_version"] == schema.SCHEMA_VERSION
    assert key["path_hash"] == cache_mod.cache_key(p)["path_hash"]
    # The same bytes at another path are another entry.
    q = d / "copy.json"
    shutil.copy2(p, q)
    assert not load(q).meta.get("from_cache")


def test_opscope_cache_dir_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forced = tmp_path / "forced"
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(forced))
    p = write_json(tmp_path / "t.json", cpu_trace("a", 2))
    load(p)
    assert Path(load(p).meta["cache_path"]).parent == forced


def test_old_entry_beside_the_trace_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_cache: Path
) -> None:
    a = write_json(tmp_path / "a.json", cpu_trace("alpha", 3))
    b = write_json(tmp_path / "b.json", cpu_trace("beta", 4))
    # Plant, beside a.json, an entry with a's exact key but b's content: served only in
    # beside mode, so a default load that returned beta's names would have read it.
    planted = load(b, cache=False).with_meta(cache_key=cache_mod.cache_key(a))
    planted.save(tmp_path / ".a.json.opscope")
    got = load(a)
    assert not got.meta.get("from_cache")
    assert set(got.events.get_column("name").to_list()) == event_names(a)
    monkeypatch.setenv("OPSCOPE_CACHE_BESIDE", "1")
    beside = load(a)
    assert beside.meta["from_cache"] and beside.meta["cache_path"].endswith(".a.json.opscope")
    assert set(beside.events.get_column("name").to_list()) == event_names(b)


def test_cli_cache_beside_writes_beside(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    user_cache: Path,
) -> None:
    monkeypatch.setenv("OPSCOPE_CACHE_BESIDE", "0")  # restored after the CLI sets it to 1
    p = write_json(tmp_path / "t.json", cpu_trace("a", 2))
    assert main(["load", str(p), "--json"]) == 0
    assert _beside(p) == []
    q = write_json(tmp_path / "u.json", cpu_trace("b", 2))
    assert main(["load", str(q), "--json", "--cache-beside"]) == 0
    assert [x.name for x in _beside(q)] == [".u.json.opscope"]
    capsys.readouterr()


def test_read_only_shared_trace_loads_and_caches_in_user_cache(user_cache: Path) -> None:
    src = shared_trace("gpu/hta_amd_mi250_minitoy.json.gz")
    before = sorted(x.name for x in src.parent.iterdir())
    load(src)
    again = load(src)
    assert again.meta["from_cache"] is True
    assert Path(again.meta["cache_path"]).parent == user_cache
    assert sorted(x.name for x in src.parent.iterdir()) == before  # nothing written there


def test_user_cache_is_bounded_oldest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user_cache: Path
) -> None:
    paths = [write_json(tmp_path / f"t{i}.json", cpu_trace(f"p{i}", 20)) for i in range(3)]
    entries = []
    for i, p in enumerate(paths[:2]):
        load(p)
        (entry,) = cache_mod.candidates(p)
        entries.append(entry)
        os.utime(entry / "meta.json", (1_000_000 + i, 1_000_000 + i))  # last use: t0 then t1
    sizes = [sum(f.stat().st_size for f in e.rglob("*") if f.is_file()) for e in entries]
    # Room for two entries of this size, not three: the least recently used (t0) goes.
    monkeypatch.setenv("OPSCOPE_CACHE_MAX_BYTES", str(sum(sizes) + max(sizes) // 2))
    load(paths[2])
    (third,) = cache_mod.candidates(paths[2])
    assert not entries[0].exists()
    assert entries[1].is_dir() and third.is_dir()
    # A hit counts as a use: t1 is reused, so t2's entry is now the oldest.
    assert load(paths[1]).meta["from_cache"] is True
    os.utime(third / "meta.json", (1_000_000, 1_000_000))
    load(paths[0])
    assert entries[1].is_dir() and not third.exists()


def test_eviction_keeps_the_entry_just_written(tmp_path: Path, user_cache: Path) -> None:
    p = write_json(tmp_path / "t.json", cpu_trace("a", 5))
    load(p)
    (entry,) = cache_mod.candidates(p)
    assert cache_mod.evict(user_cache, keep=entry, limit=0) == []
    assert entry.is_dir()
    assert cache_mod.evict(user_cache, limit=0) == [entry]
