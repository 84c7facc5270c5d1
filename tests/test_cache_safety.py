"""The columnar cache never serves the wrong profile: one entry per trace, rebuilt when the file,
the schema or opscope changes, and loads still work when the trace's folder is read-only.

Tests run as root in CI, where ``chmod`` does not stop writes; read-only folders are simulated by
patching ``os.access`` (what the cache consults before writing) and, separately, by making every
write under the folder raise ``PermissionError``. A real ``chmod`` variant runs when not root.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from helpers.cache_traces import cpu_trace, event_names, write_json
from opscope.errors import TruncatedTraceError
from opscope.ingest import cache as cache_mod
from opscope.ingest import load
from opscope.model import Profile, schema

pytestmark = pytest.mark.timeout(60)


def _loaded_names(prof: Profile) -> set[str]:
    return set(prof.events.get_column("name").to_list())


@pytest.fixture(autouse=True)
def _user_cache(user_cache: Path) -> Path:
    return user_cache


def test_two_traces_in_one_folder_never_share(tmp_path: Path) -> None:
    d = tmp_path / "data"
    d.mkdir()
    a = write_json(d / "a.json", cpu_trace("alpha", 5))
    b = write_json(d / "b.json", cpu_trace("beta", 7))
    # Same size, same mtime as a, different content: still its own entry (keyed by path too).
    c = write_json(d / "c.json", cpu_trace("gamma", 5))
    os.utime(c, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns))
    assert a.stat().st_size == c.stat().st_size
    first = {p: load(p) for p in (a, b, c)}
    again = {p: load(p) for p in (a, b, c)}
    paths = set()
    for p in (a, b, c):
        assert not first[p].meta.get("from_cache")
        assert again[p].meta.get("from_cache") is True
        assert _loaded_names(again[p]) == event_names(p)
        paths.add(again[p].meta["cache_path"])
    assert len(paths) == 3


def test_multirank_folder_ranks_have_own_entries(tmp_path: Path, _user_cache: Path) -> None:
    d = tmp_path / "job"
    d.mkdir()
    for r in range(2):
        t = cpu_trace(f"rank{r}", 3 + r)
        t["distributedInfo"] = {"rank": r, "world_size": 2}
        write_json(d / f"rank-{r}.json", t)
    p1 = load(d)
    p2 = load(d)
    for prof in (p1, p2):
        for r in range(2):
            names = set(prof.events.filter(prof.events["rank"] == r).get_column("name").to_list())
            assert names == event_names(d / f"rank-{r}.json")
    assert not [x for x in d.iterdir() if x.name.endswith(".opscope")]  # nothing beside
    entries = sorted(x.name.split(".")[0] for x in _user_cache.iterdir())
    assert entries == ["rank-0", "rank-1"]
    assert {Path(p2.meta["rank_sources"][str(r)]).name for r in range(2)} == {
        "rank-0.json",
        "rank-1.json",
    }


def test_changed_file_is_rebuilt(tmp_path: Path) -> None:
    p = write_json(tmp_path / "t.json", cpu_trace("old", 4))
    load(p)
    assert load(p).meta.get("from_cache") is True
    write_json(p, cpu_trace("new", 6))
    prof = load(p)
    assert not prof.meta.get("from_cache")
    assert _loaded_names(prof) == event_names(p)
    # Only the mtime changes (same bytes): rebuilt too, never trusted on size alone.
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert not load(p).meta.get("from_cache")


def test_other_schema_or_opscope_version_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = write_json(tmp_path / "t.json", cpu_trace("v", 4))
    load(p)
    assert load(p).meta.get("from_cache") is True
    monkeypatch.setattr(schema, "SCHEMA_VERSION", schema.SCHEMA_VERSION + 100)
    prof = load(p)
    assert not prof.meta.get("from_cache")
    assert load(p).meta.get("from_cache") is True  # the rebuilt entry has the new version
    entry = Path(load(p).meta["cache_path"])
    stored = json.loads((entry / "meta.json").read_text())
    assert stored["schema_version"] == schema.SCHEMA_VERSION
    monkeypatch.setattr(cache_mod, "__version__", "0.0.0-other")
    assert not load(p).meta.get("from_cache")


def test_damaged_entry_is_rebuilt(tmp_path: Path) -> None:
    p = write_json(tmp_path / "t.json", cpu_trace("dmg", 4))
    load(p)
    entry = Path(load(p).meta["cache_path"])
    (entry / "events.parquet").write_bytes(b"not parquet")
    prof = load(p)
    assert not prof.meta.get("from_cache")
    assert _loaded_names(prof) == event_names(p)
    (entry / "meta.json").write_text("{garbage")
    assert _loaded_names(load(p)) == event_names(p)


def test_salvaged_entry_not_served_to_strict_load(tmp_path: Path) -> None:
    text = json.dumps(cpu_trace("cut", 20))
    p = tmp_path / "cut.json"
    p.write_text(text[: len(text) * 2 // 3])
    salv = load(p, salvage=True)
    assert salv.meta["salvaged"]["events"] > 0
    assert load(p, salvage=True).meta.get("from_cache") is True
    with pytest.raises(TruncatedTraceError):
        load(p)


def _read_only(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    real_access = os.access

    def access(path: Any, mode: int, *a: Any, **k: Any) -> bool:
        if mode & os.W_OK and Path(path).resolve() == folder.resolve():
            return False
        return real_access(path, mode, *a, **k)

    monkeypatch.setattr(os, "access", access)


def test_read_only_folder_uses_user_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _user_cache: Path
) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    p = write_json(d / "t.json", cpu_trace("ro", 5))
    before = sorted(os.listdir(d))
    _read_only(monkeypatch, d)
    prof = load(p)
    assert _loaded_names(prof) == event_names(p)
    assert sorted(os.listdir(d)) == before  # nothing written beside the trace
    again = load(p)
    assert again.meta.get("from_cache") is True
    assert Path(again.meta["cache_path"]).parent == _user_cache


def test_no_writable_place_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _user_cache: Path
) -> None:
    d = tmp_path / "ro2"
    d.mkdir()
    p = write_json(d / "t.json", cpu_trace("nowhere", 5))
    real_save = Profile.save

    def save(self: Profile, directory: Any) -> Path:
        raise PermissionError(13, "Permission denied", str(directory))

    monkeypatch.setattr(Profile, "save", save)
    prof = load(p)
    assert _loaded_names(prof) == event_names(p)
    assert not load(p).meta.get("from_cache")
    monkeypatch.setattr(Profile, "save", real_save)
    assert not [x for x in os.listdir(d) if x.endswith(".opscope")]


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_real_chmod_read_only(tmp_path: Path, _user_cache: Path) -> None:
    d = tmp_path / "chmod"
    d.mkdir()
    p = write_json(d / "t.json", cpu_trace("chmod", 3))
    d.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert _loaded_names(load(p)) == event_names(p)
        assert load(p).meta.get("from_cache") is True
    finally:
        d.chmod(stat.S_IRWXU)
