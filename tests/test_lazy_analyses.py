"""Lazy analyses (issue 24, phase 4): hotspots and breakdown of a file-backed profile read only
the columns they need and give exactly the in-memory figures.

Every shared input (Kineto traces, multi-rank folder, Ascend exports) is loaded in memory (the
reference), saved as a cache entry and reopened lazily with the size threshold at 0, so both
analyses take the projected path; every table of their results must equal the reference's
(values, dtypes, row order) and the events table file must never have been read whole.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from conftest import SHARED_TRACES, shared_trace
from helpers.shared_traces import kineto_shared_traces
from opscope.analysis import hotspots as hs
from opscope.analysis.breakdown import BREAKDOWN_COLUMNS, Breakdown, breakdown
from opscope.analysis.registry import Options
from opscope.model import Profile
from opscope.model.tablefile import TableFile

ASCEND = [
    "ascend/alexnet_ddp_910b/level0_rank0_ascend_pt",
    "ascend/alexnet_ddp_910b/level1_rank0_ascend_pt",
    "ascend/small_two_rank/test_rank_0",
]
MULTI = ["multi_rank/hta_sampled_128rank_job"]
INPUTS = [*kineto_shared_traces(), *(MULTI if SHARED_TRACES.is_dir() else []), *ASCEND]


def _load(rel: str) -> Profile:
    from opscope.ingest import load

    return load(shared_trace(rel), cache=False)


def _unparsed(p: Profile) -> bool:
    ev = p.__dict__["events"]
    return isinstance(ev, TableFile) and not ev.parsed


def _same(got: pl.DataFrame, want: pl.DataFrame, what: str) -> None:
    assert got.schema == want.schema, what
    assert got.equals(want), what  # values and row order (null == null)


def _tables(res: hs.Hotspots | Breakdown) -> dict[str, pl.DataFrame]:
    return res.tables()  # (hotspots' per_step too: a plan until read)


@pytest.mark.parametrize("rel", INPUTS)
def test_lazy_hotspots_and_breakdown_equal_in_memory(
    rel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _load(rel)
    want_h, want_b = hs.hotspots(p, Options()), breakdown(p, Options())
    entry = p.save(tmp_path / "entry")

    monkeypatch.setattr(hs, "LAZY_FILE_BYTES", 0)
    q = Profile.open(entry, lazy=True)
    assert hs.lazy_events(q)
    got_h, got_b = hs.hotspots(q, Options()), breakdown(q, Options())
    assert _unparsed(q), "the events table was read whole"
    for name, want in _tables(want_h).items():
        _same(_tables(got_h)[name], want, f"hotspots.{name}")
    for name, want in _tables(want_b).items():
        _same(_tables(got_b)[name], want, f"breakdown.{name}")
    assert (got_h.step_ns, got_h.span_ns) == (want_h.step_ns, want_h.span_ns)
    assert got_h.to_json() == want_h.to_json()
    assert got_b.to_json() == want_b.to_json()


def test_small_or_parsed_profiles_keep_the_in_memory_path(tmp_path: Path) -> None:
    events = pl.DataFrame(
        {"id": [0, 1], "rank": [0, 0], "kind": ["cpu_op", "kernel"], "name": ["a", "k"],
         "ts_ns": [0, 10], "dur_ns": [100, 20], "op_id": [None, 0]}
    )  # fmt: skip
    p = Profile.from_tables(meta={"ranks": [0]}, events=events)
    entry = p.save(tmp_path / "e")
    q = Profile.open(entry, lazy=True)
    assert not hs.lazy_events(p)  # in memory
    assert not hs.lazy_events(q)  # file-backed, but small
    assert hs.projected(q, BREAKDOWN_COLUMNS) is q
    assert hs.lazy_events(q.with_meta(out_of_core=True))  # the out-of-core load's mark
    _ = q.events
    assert not hs.lazy_events(q.with_meta(out_of_core=True))  # parsed: nothing to spare
    r = Profile.open(entry, lazy=True).with_meta(out_of_core=True)
    h = hs.hotspots(r, Options())
    assert _unparsed(r)
    # hand arithmetic: op a is 100 ns with no host child; its kernel k is 20 ns of device time
    assert h.ops.select("name", "calls", "total_ns", "self_ns", "device_ns").rows() == [
        ("a", 1, 100, 100, 20)
    ]
    assert h.kernels.select("name", "total_ns").rows() == [("k", 20)]
    assert (h.step_ns, h.span_ns) == (0, 100)


def test_projected_copy_holds_only_the_columns_asked(tmp_path: Path) -> None:
    events = pl.DataFrame({"id": range(5), "kind": ["cpu_op", "kernel"] * 2 + ["runtime"]})
    p = Profile.from_tables(events=events)
    q = Profile.open(p.save(tmp_path / "e"), lazy=True)
    cols = ("id", "kind", "dur_ns")
    r = q.projected(cols)
    assert _unparsed(q)
    assert r.events.columns == list(cols)
    assert r.events.equals(p.events.select(cols))
    assert r.ops.get_column("id").to_list() == [0, 2]
    assert r.kernels.get_column("id").to_list() == [1, 3]
    assert r.flows.equals(p.flows)


def _small_profile() -> Profile:
    n = 50
    events = pl.DataFrame(
        {
            "id": range(n),
            "kind": ["cpu_op", "kernel", "runtime", "python_function", "memcpy"] * (n // 5),
            "name": [f"op{i % 3}" for i in range(n)],
            "ts_ns": [i * 10 for i in range(n)],
            "dur_ns": [i % 7 for i in range(n)],
        }
    )
    return Profile.from_tables(meta={"ranks": [0]}, events=events)


@pytest.mark.parametrize("handles", [False, True])
def test_scan_reads_the_file_lazily(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handles: bool
) -> None:
    from opscope.model import tablefile

    if handles:  # the file held open (large tables), not its bytes
        monkeypatch.setattr(tablefile, "SMALL_BYTES", 0)
    p = _small_profile()
    entry = p.save(tmp_path / "e")
    q = Profile.open(entry, lazy=True)
    import shutil

    shutil.rmtree(entry)  # the scan reads the file as it was opened
    lf = q.scan("events", ["id", "dur_ns"])
    assert isinstance(lf, pl.LazyFrame)
    got = q.collect("events", lf.filter(pl.col("dur_ns") > 3))
    want = p.events.select("id", "dur_ns").filter(pl.col("dur_ns") > 3)
    assert got.equals(want) and got.height == sum(1 for i in range(50) if i % 7 > 3)
    assert _unparsed(q)
    assert q.file_bytes("events") is not None
    assert q.scan("steps").collect().equals(p.steps)
    # once parsed, the scan is the frame's
    _ = q.events
    assert q.file_bytes("events") is None
    assert q.scan("events").collect().equals(p.events)
    # an in-memory profile scans its frame
    assert p.scan("events", ["name"]).collect().equals(p.events.select("name"))
    with pytest.raises(KeyError):
        p.scan("nope")


def test_scan_of_a_damaged_file_is_an_input_error(tmp_path: Path) -> None:
    from opscope.errors import InputError

    entry = _small_profile().save(tmp_path / "e")
    f = entry / "events.parquet"
    data = bytearray(f.read_bytes())
    data[8 : len(data) // 2] = b"\xff" * (len(data) // 2 - 8)
    f.write_bytes(bytes(data))
    q = Profile.open(entry, lazy=True)
    with pytest.raises(InputError, match=r"events\.parquet: damaged table file"):
        q.collect("events", q.scan("events", ["id"]))


@pytest.mark.parametrize("rel", kineto_shared_traces())
def test_out_of_core_load_analyses_lazily_with_the_in_memory_figures(
    rel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The out-of-core load's own result (phase 3: the entry written segment by segment and
    opened lazily, ``meta["out_of_core"]``): hotspots, breakdown and the report's default
    sections run on it without reading its events whole, with the in-memory load's figures."""
    from opscope.ingest import fastscan, kineto, outofcore, window_link
    from opscope.report.build import build_report
    from opscope.report.lazy_sections import LAZY_SECTIONS

    if not fastscan.available():
        pytest.skip("numba scanner not available")
    path = shared_trace(rel)
    if not path.is_file():
        pytest.skip("a folder: the out-of-core load reads one trace file")
    monkeypatch.delenv(outofcore.ENV, raising=False)
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    # (each window costs ~45 ms of tables: 1 MiB on the 10+ MB texts, still 30+ windows)
    big = path.stat().st_size > 1_000_000
    monkeypatch.setattr(fastscan, "WINDOW_BYTES", 1 << 20 if big else 1 << 18)
    monkeypatch.setattr(window_link, "MIN_SEGMENT_ROWS", 1)
    ref = kineto.parse_kineto(path)
    got = kineto.parse_kineto(path, memory_budget=1)
    assert got.meta.get("out_of_core") and hs.lazy_events(got)
    for name, fn in (("hotspots", hs.hotspots), ("breakdown", breakdown)):
        want_r, got_r = fn(ref, Options()), fn(got, Options())
        for t, want in _tables(want_r).items():
            _same(_tables(got_r)[t], want, f"{name}.{t}")
    assert _unparsed(got)
    monkeypatch.setenv(outofcore.ENV, "1K")  # this run's budget: too small for a full report
    rep = build_report(got)
    assert tuple(rep.sections) == LAZY_SECTIONS
    assert rep.summary["events"] == ref.events.height
    assert _unparsed(got)
