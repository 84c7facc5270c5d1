"""A cache hit is opened lazily: it must serve exactly what a fresh parse gives, rebuild damaged or
other-layout entries, and import no reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import shared_trace
from opscope.ingest import cache as cache_mod
from opscope.ingest import load
from opscope.model import Profile, schema
from opscope.model.tablefile import TableFile

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _user_cache(user_cache: Path) -> Path:
    return user_cache


def _trace(prefix: str, n: int) -> dict[str, Any]:
    ev: list[dict[str, Any]] = []
    for i in range(n):
        ev.append(
            {"ph": "X", "cat": "cpu_op", "name": f"{prefix}::op{i % 3}", "pid": 1, "tid": 1,
             "ts": 100.0 + 10 * i, "dur": 4.0, "args": {"External id": i}}
        )  # fmt: skip
        ev.append(
            {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7,
             "ts": 102.0 + 10 * i, "dur": 1.0, "args": {"External id": i, "device": 0}}
        )  # fmt: skip
    return {"schemaVersion": 1, "traceEvents": ev}


def _write(p: Path, obj: Any) -> Path:
    p.write_text(json.dumps(obj))
    return p


def _same(a: Profile, b: Profile) -> None:
    for name in schema.TABLES:
        assert a.table(name).equals(b.table(name)), name
    assert a.ops.equals(b.ops) and a.kernels.equals(b.kernels)


def test_hit_on_a_real_trace_equals_a_fresh_parse() -> None:
    p = shared_trace("gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz")
    fresh = load(p, cache=False)
    load(p)
    hit = load(p)
    assert hit.meta["from_cache"] is True
    assert isinstance(hit.__dict__["events"], TableFile)  # opened, not yet parsed
    # ops first (the pushed-down read of the unparsed table), then everything else
    assert hit.ops.equals(fresh.ops) and hit.ops.height > 1000
    _same(hit, fresh)
    added = ("from_cache", "cache_path", "cache_key")
    assert {k: v for k, v in hit.meta.items() if k not in added} == json.loads(
        json.dumps(dict(fresh.meta), default=str)
    )


def test_cut_short_table_is_rebuilt(tmp_path: Path) -> None:
    p = _write(tmp_path / "t.json", _trace("cut", 30))
    first = load(p)
    entry = Path(load(p).meta["cache_path"])
    f = entry / "events.parquet"
    f.write_bytes(f.read_bytes()[:-7])
    prof = load(p)
    assert not prof.meta.get("from_cache")
    _same(prof, first)
    again = load(p)
    assert again.meta.get("from_cache") is True  # the rebuilt entry is whole
    _same(again, first)


def test_entry_of_another_layout_is_rebuilt(tmp_path: Path) -> None:
    p = _write(tmp_path / "t.json", _trace("lay", 5))
    load(p)
    entry = Path(load(p).meta["cache_path"])
    meta_file = entry / "meta.json"
    meta = json.loads(meta_file.read_text())
    assert meta["cache_key"]["layout"] == cache_mod.LAYOUT
    # What an entry written before the layout was keyed looks like: no "layout", no sizes.
    del meta["cache_key"]["layout"], meta["table_bytes"]
    meta_file.write_text(json.dumps(meta))
    assert not load(p).meta.get("from_cache")
    rebuilt = json.loads(meta_file.read_text())
    assert rebuilt["cache_key"]["layout"] == cache_mod.LAYOUT
    assert rebuilt["table_bytes"]["events"] == (entry / "events.parquet").stat().st_size


def test_hit_outlives_its_entry_being_rebuilt(tmp_path: Path) -> None:
    p = _write(tmp_path / "t.json", _trace("old", 6))
    want = load(p, cache=False)
    load(p)
    hit = load(p)
    assert hit.meta["from_cache"] is True
    _write(p, _trace("new", 9))
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert load(p).events.height == 18  # rebuilt: the old entry's folder is gone
    _same(hit, want)


def test_hit_imports_no_reader(tmp_path: Path) -> None:
    p = _write(tmp_path / "t.json", _trace("imp", 5))
    load(p)
    code = (
        "import sys, opscope\n"
        "p = opscope.load(sys.argv[1])\n"
        "assert p.meta['from_cache'], 'miss'\n"
        "assert p.ops.height == 5\n"
        "heavy = ['opscope.ingest.kineto', 'opscope.ingest.jsonscan', 'msgspec', 'torch',\n"
        "         'opscope.analysis', 'opscope.report']\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(p)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")},
    )
    assert out.stdout.strip() == "[]"
