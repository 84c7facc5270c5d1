"""Aggregates stored by the out-of-core load (issue 24): hotspots and breakdown of a cached
out-of-core entry from its per-segment partial tables, never reading the events, with exactly
the in-memory figures.

Every shared Kineto trace and a planted trace of many segments (nested ops, several streams,
backward ops paired by sequence number, user frames renumbered at the end, work queued before
profiling, data loading, a trace without steps) is loaded out of core with every cut a segment
and compared with the in-memory load, table by table and scalar by scalar; one table is checked
against plain Python over the raw JSON, and the fallbacks (no aggregates, a damaged one) are
checked to give the same figures through the usual path.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import SHARED_KINETO_FILES, shared_trace
from opscope.analysis import breakdown as bd
from opscope.analysis import hotspots as hs
from opscope.analysis import stored_aggregates as sa
from opscope.analysis.registry import Options
from opscope.ingest import fastscan, kineto, outofcore, segment_aggregates, window_link
from opscope.model import Profile, schema
from opscope.model.tablefile import TableFile

pytestmark = pytest.mark.skipif(not fastscan.available(), reason="numba scanner not available")


@pytest.fixture(autouse=True)
def _small(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(outofcore.ENV, raising=False)
    monkeypatch.delenv(segment_aggregates.ENV, raising=False)
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(fastscan, "WINDOW_BYTES", 1 << 20)  # (windows: not what is tested)
    monkeypatch.setattr(window_link, "MIN_SEGMENT_ROWS", 1)  # every cut a segment


def _no_recompute(monkeypatch: pytest.MonkeyPatch, *, breakdown: bool = True) -> None:
    """The analyses' usual path of a file-backed profile fails (the in-memory reference's
    still runs): only the stored aggregates can answer (hotspots; breakdown too unless
    ``breakdown`` is False)."""
    orig = hs.projected

    analyses = (hs.HOTSPOT_READ, hs.ATTRIBUTION_COLUMNS, bd.BREAKDOWN_READ)

    def guarded(profile: Profile, columns: Any) -> Profile:
        if any(columns is c for c in analyses):  # (a report's loader counts read theirs)
            assert not hs.lazy_events(profile), "recomputed from the events"
        return orig(profile, columns)

    monkeypatch.setattr(hs, "projected", guarded)
    if breakdown:
        monkeypatch.setattr(bd, "projected", guarded)


def _ooc(path: Path) -> Profile:
    got = kineto.read_kineto(path, memory_budget=1)
    assert got.meta["out_of_core"]["entry"], "written as the cache entry"
    return got


def _unparsed(p: Profile) -> bool:
    ev = p.__dict__["events"]
    return isinstance(ev, TableFile) and not ev.parsed


def assert_same_results(got: Profile, ref: Profile) -> None:
    """hotspots and breakdown of both equal: every table (schema, values, row order) and every
    other field."""
    for fn in (hs.hotspots, bd.breakdown):
        g, w = fn(got, Options()), fn(ref, Options())
        # (the results' tables and scalars: hotspots' per_step is a plan until read)
        have = {**g.tables(), **g.scalars()}
        for k, v in {**w.tables(), **w.scalars()}.items():
            gv = have[k]
            if isinstance(v, pl.DataFrame):
                assert gv.schema == v.schema, (fn.__name__, k)
                assert gv.equals(v), (fn.__name__, k)
            else:
                assert gv == v, (fn.__name__, k)
        assert g.to_json() == w.to_json()


@pytest.mark.parametrize("rel", SHARED_KINETO_FILES)
def test_stored_aggregates_equal_in_memory_on_shared_traces(
    rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = shared_trace(rel)
    ref = kineto.parse_kineto(path)
    got = _ooc(path)
    info = got.meta["out_of_core"]["aggregates"]
    assert info["attribution"] and info["segments"] == got.meta["out_of_core"]["segments"]
    assert info["breakdown"] == (ref.steps.height > 0)
    # (no steps: one window per rank spans every segment; breakdown recomputes)
    _no_recompute(monkeypatch, breakdown=info["breakdown"])
    assert sa.stored(got) is not None
    assert_same_results(got, ref)
    assert _unparsed(got), "the events file was never read whole"


# A planted trace ------------------------------------------------------------------------------

US = 1000


def _x(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    pid = 0 if cat in ("kernel", "gpu_memcpy") else 1
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    return ev | ({"args": args} if args else {})


def _planted(steps: bool = True) -> list[dict[str, Any]]:
    """Steps of 100 us every 200 us: a user frame holding a linear op (its mm child launching
    a kernel on stream 7), every third step a memcpy on stream 9 (a stream idle in the other
    segments), an op whose backward runs on thread 2 paired by sequence number, a DataLoader
    op every other step; a kernel queued before profiling (no launch) in step 1."""
    evs: list[dict[str, Any]] = []
    corr = 0
    for n in range(1, 9):
        b = 200.0 * (n - 1)
        if steps:
            evs.append(_x("user_annotation", f"ProfilerStep#{n}", b, 100))
        if n % 2:
            evs.append(_x("cpu_op", "enumerate(DataLoader)#_next", b + 1, 3))
        evs.append(_x("python_function", f"model.py({n % 3 + 10}): forward", b + 5, 60))
        evs.append(_x("cpu_op", "aten::linear", b + 10, 30 + n, **{"Sequence number": n}))
        evs.append(_x("cpu_op", "aten::mm", b + 12, 20, **{"Input Dims": [[n, 4], [4, 4]]}))
        bname = "autograd::engine::evaluate_function: LinearBackward0"
        evs.append(_x("cpu_op", bname, b + 50, 12, 2))
        evs.append(_x("cpu_op", "LinearBackward0", b + 51, 10, 2, **{"Sequence number": n}))
        for t0, tk, name, cat, stream in (
            (b + 14, b + 45, f"gemm{n % 2}", "kernel", 7),
            (b + 52, b + 70, "memcpyDtoD", "gpu_memcpy", 9),
        ):
            if cat == "gpu_memcpy" and n % 3:
                continue
            corr += 1
            evs.append(_x("cuda_runtime", "cudaLaunchKernel", t0, 2, correlation=corr))
            args = {"correlation": corr, "stream": stream, "device": 0}
            evs.append(_x(cat, name, tk, 5 + n, stream, **args))
    if steps:
        evs.append(_x("kernel", "warmup", 3, 4, 7, stream=7, device=0))  # no launch
    return evs


def _write(tmp_path: Path, evs: list[dict[str, Any]], name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": evs}))
    return path


def test_planted_trace_of_many_segments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, _planted())
    ref = kineto.parse_kineto(path)
    got = _ooc(path)
    ooc = got.meta["out_of_core"]
    assert ooc["segments"] == 8 and ooc["fix_pass"]  # (stack ids and the queued kernel)
    assert ooc["aggregates"]["attribution"] and ooc["aggregates"]["breakdown"]
    warm = ref.events.filter(pl.col("name") == "warmup").row(0, named=True)
    assert warm["step"] is None  # queued before profiling: the end's fix applies
    assert ref.stacks.height and ref.events.get_column("fwd_id").drop_nulls().len() == 8
    _no_recompute(monkeypatch)
    assert_same_results(got, ref)
    assert _unparsed(got)
    h = hs.hotspots(got, Options())
    # by hand: aten::linear lasts 30 + n us in step n; its child aten::mm 20 us
    lin = h.ops.filter(pl.col("name") == "aten::linear").row(0, named=True)
    assert lin["calls"] == 8
    assert lin["total_ns"] == sum(30 + n for n in range(1, 9)) * US
    assert lin["self_ns"] == sum(10 + n for n in range(1, 9)) * US
    assert (lin["min_ns"], lin["max_ns"]) == (31 * US, 38 * US)
    assert lin["mean_ns"] == sum(30 + n for n in range(1, 9)) * US / 8
    # the mm's gemm kernels, 5 + n us each, are the linear op's device time
    assert lin["device_ns"] == sum(5 + n for n in range(1, 9)) * US
    assert lin["device_self_ns"] == 0
    # the queued kernel's per-step row is the null step's, not step 1's
    ps = h.per_step.filter((pl.col("what") == "kernel") & (pl.col("name") == "warmup"))
    assert ps.select("step", "calls", "total_ns").rows() == [(None, 1, 4 * US)]
    b = bd.breakdown(got, Options())
    # stream 9 works in steps 3 and 6 only, yet has a row in every step
    s9 = b.streams.filter(pl.col("stream") == 9)
    assert s9.height == 8
    assert s9.get_column("busy_ns").to_list() == [
        (5 + n) * US if n % 3 == 0 else 0 for n in range(1, 9)
    ]


def test_no_steps_hotspots_stored_breakdown_recomputed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, _planted(steps=False))
    ref = kineto.parse_kineto(path)
    got = _ooc(path)
    info = got.meta["out_of_core"]["aggregates"]
    assert got.meta["out_of_core"]["segments"] > 1
    assert info["attribution"] and not info["breakdown"]
    _no_recompute(monkeypatch, breakdown=False)
    assert_same_results(got, ref)


def test_without_aggregates_the_usual_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, _planted())
    ref = kineto.parse_kineto(path)
    monkeypatch.setenv(segment_aggregates.ENV, "0")
    got = _ooc(path)
    assert "aggregates" not in got.meta["out_of_core"] and sa.stored(got) is None
    assert_same_results(got, ref)


def test_damaged_or_missing_aggregates_fall_back(tmp_path: Path) -> None:
    path = _write(tmp_path, _planted())
    ref = kineto.parse_kineto(path)
    got = _ooc(path)
    folder = Path(got.meta["out_of_core"]["entry"]) / segment_aggregates.FOLDER
    (folder / "ops.parquet").write_bytes(b"not the file written")  # another size
    again = Profile.open(got.meta["out_of_core"]["entry"], lazy=True)
    assert sa.stored(again) is None
    assert_same_results(again, ref)
    # a copy saved elsewhere keeps the meta but not the folder
    copy = Profile.open(ref.save(tmp_path / "copy"), lazy=True)
    copy = copy.with_meta(out_of_core=got.meta["out_of_core"])
    assert sa.stored(copy) is None
    assert_same_results(copy, ref)


# Plain Python over the raw JSON ---------------------------------------------------------------


def _ns(us: Any) -> int:
    return int((Decimal(str(us)) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def test_kernels_table_by_hand_on_a_shared_trace() -> None:
    """The kernels table of a real trace's stored aggregates (calls, total, min, max, mean per
    name) against the raw JSON's device events summed in plain Python."""
    path = shared_trace("gpu/hta_nccl_a100_rank0of2.json.gz")
    got = _ooc(path)
    assert got.meta["out_of_core"]["segments"] > 1
    raw = json.loads(gzip.decompress(path.read_bytes()))
    durs: dict[str, list[int]] = defaultdict(list)
    for e in raw["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            durs[e["name"]].append(_ns(e["dur"]))
    k = hs.hotspots(got, Options()).kernels
    assert sa.stored(got) is not None and _unparsed(got)
    assert k.height == len(durs)
    for row in k.iter_rows(named=True):
        d = durs[row["name"]]
        assert (row["calls"], row["total_ns"]) == (len(d), sum(d)), row["name"]
        assert (row["min_ns"], row["max_ns"]) == (min(d), max(d)), row["name"]
        assert row["mean_ns"] == sum(d) / len(d)


def test_a_forward_op_outside_the_segment_stores_no_charges() -> None:
    """A segment holding a backward op whose forward op is elsewhere (which the cut rule
    prevents): the charges would not be exact, so none are stored (attribution recomputes);
    the same segment with its own forward op stores them. No steps: no breakdown tables."""
    ev = schema.conform(
        "events",
        pl.DataFrame(
            {
                "id": [10, 11], "kind": ["cpu_op", "cpu_op"], "name": ["f", "b"],
                "ts_ns": [0, 5], "dur_ns": [10, 2], "rank": [0, 0], "fwd_id": [None, 3],
            }
        ),
    )  # fmt: skip
    elsewhere = segment_aggregates.Collector()
    elsewhere.add(ev, schema.empty("steps"), 10)  # ids 10..11: fwd_id 3 is not its own
    assert not elsewhere.attribution_exact and "charges" not in elsewhere.parts
    assert not elsewhere.breakdown and "bd_queue" not in elsewhere.parts
    own = segment_aggregates.Collector()
    own.add(ev.with_columns(pl.col("fwd_id").replace(3, 10)), schema.empty("steps"), 10)
    assert own.attribution_exact and "charges" in own.parts


@pytest.mark.parametrize("where", ["segment", "end"])
def test_a_failure_of_the_aggregates_does_not_fail_the_load(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The aggregates only spare a recomputation: if taking them fails (per segment or at the
    end), the load still succeeds, the entry says why none are stored, and the analyses take
    their usual path with the same figures."""
    path = _write(tmp_path, _planted())
    ref = kineto.parse_kineto(path)

    def boom(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("planted")

    with monkeypatch.context() as m:
        if where == "segment":
            m.setattr(hs, "op_times", boom)
        else:
            m.setattr(segment_aggregates, "_merged", boom)
        got = _ooc(path)
    info = got.meta["out_of_core"]["aggregates"]
    assert info == {"error": "RuntimeError: planted", "segments": 8}
    entry = Path(got.meta["out_of_core"]["entry"])
    assert not (entry / segment_aggregates.FOLDER).exists()
    assert sa.stored(got) is None
    assert_same_results(got, ref)


def test_report_of_an_out_of_core_entry_reads_the_stored_aggregates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report of an out-of-core profile over this run's budget (its lazy sections only)
    takes hotspots and breakdown from the stored aggregates, with the in-memory figures."""
    from opscope.report.build import build_report
    from opscope.report.lazy_sections import LAZY_SECTIONS

    path = _write(tmp_path, _planted())
    ref = kineto.parse_kineto(path)
    got = _ooc(path)
    monkeypatch.setenv(outofcore.ENV, "1")  # no full report fits
    _no_recompute(monkeypatch)
    rep = build_report(got)
    assert tuple(rep.sections) == LAZY_SECTIONS
    assert _unparsed(got)
    for name, fn in (("hotspots", hs.hotspots), ("breakdown", bd.breakdown)):
        assert rep.sections[name].to_json() == fn(ref, Options()).to_json(), name


@pytest.mark.parametrize("threads", ["0", "1"])
def test_aggregates_taken_on_a_worker_thread_or_inline_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: str
) -> None:
    """The segments' partial tables are taken on a worker thread while the next segment is
    linked (``$OPSCOPE_OOC_THREADS`` unset or 1), or in the caller (0): the stored tables are
    byte for byte the same, and each segment's are taken in order and once."""
    path = _write(tmp_path, _planted())
    monkeypatch.setenv(window_link.THREADS_ENV, "0")
    inline = _ooc(path)
    inline_dir = sa.stored(inline)
    assert inline_dir is not None
    want = {f.name: f.read_bytes() for f in sorted(inline_dir.folder.glob("*.parquet"))}
    seen: list[tuple[int, str]] = []
    orig = segment_aggregates.Collector.add

    def spy(self: segment_aggregates.Collector, ev: pl.DataFrame, steps: Any, offset: int) -> None:
        import threading

        seen.append((offset, threading.current_thread().name))
        orig(self, ev, steps, offset)

    monkeypatch.setattr(segment_aggregates.Collector, "add", spy)
    linking: set[str] = set()  # the thread(s) the segments are linked on
    orig_link = window_link._link_segment

    def link_spy(*args: Any) -> Any:
        import threading

        linking.add(threading.current_thread().name)
        return orig_link(*args)

    monkeypatch.setattr(window_link, "_link_segment", link_spy)
    monkeypatch.setenv(window_link.THREADS_ENV, threads)
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(tmp_path / "cache2"))
    got = _ooc(path)
    stored = sa.stored(got)
    assert stored is not None
    assert {f.name: f.read_bytes() for f in sorted(stored.folder.glob("*.parquet"))} == want
    offsets = [o for o, _ in seen]
    assert offsets == sorted(set(offsets)) and len(offsets) == got.meta["out_of_core"]["segments"]
    # (the sink pulls the linked segments on the engine's own threads: "Dummy-N" here)
    pool = {name.startswith("ThreadPoolExecutor") for _, name in seen}
    assert pool == ({False} if threads == "0" else {True})
    if threads == "0":
        assert {name for _, name in seen} <= linking
    assert_same_results(got, kineto.parse_kineto(path))
