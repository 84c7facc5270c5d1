"""The whole Profile built by the byte scanner equals the reference decoder's, table by table.

tests/test_fastscan.py compares the decoded columns; this file compares what a user sees: every
table of the linked Profile (events with their pid, tid, kind, ts, dur, args, links; threads,
flows, steps, ...) on both reading paths, over

- every shared real trace, read in small chunks so the scanner's two alternating chunk buffers
  are reused many times (a 75k-event trace is otherwise one or two chunks);
- generated traces in adversarial layouts (metadata events first, interleaved, last; string and
  int tracks, ``"pid": "Spans"``, negative tids, events without ``cat``), each value distinct
  from its neighbours' so a value landing on the wrong event shows;
- a hypothesis property over the layouts' parameters.

A value of one chunk written over another's (Polars sharing the chunk buffer's memory) gave 7 of
54 public traces wrong pids and tids before the fix in fastscan._add; these tests fail on it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from conftest import shared_trace
from helpers.layouts import PLACEMENTS, layout_bytes, layout_trace
from helpers.scanner import chunk_events
from helpers.shared_traces import kineto_shared_traces
from opscope.ingest import fastscan, kineto
from opscope.model import Profile, schema

pytestmark = pytest.mark.skipif(
    not fastscan.available(), reason="the compiled scanner is switched off (OPSCOPE_SCANNER)"
)


@contextlib.contextmanager
def _reference() -> Iterator[None]:
    import os

    old = os.environ.get("OPSCOPE_SCANNER")
    os.environ["OPSCOPE_SCANNER"] = "reference"
    try:
        yield
    finally:
        if old is None:
            del os.environ["OPSCOPE_SCANNER"]
        else:
            os.environ["OPSCOPE_SCANNER"] = old


def both_paths(path: Path, chunk: int) -> tuple[Profile, Profile]:
    """(scanner's Profile read in chunks of ``chunk`` events, reference decoder's Profile)."""
    with chunk_events(chunk):
        fast = kineto.parse_kineto(path)
    with _reference():
        assert not fastscan.available()
        ref = kineto.parse_kineto(path)
    return fast, ref


def assert_same_profile(fast: Profile, ref: Profile) -> None:
    for name in schema.TABLES:
        try:
            assert_frame_equal(fast.table(name), ref.table(name))
        except AssertionError as e:
            raise AssertionError(f"table {name!r} differs: {e}") from None
    assert dict(fast.meta) == dict(ref.meta)


@pytest.mark.parametrize("rel", kineto_shared_traces())
def test_shared_trace_profile_same_on_both_paths_in_small_chunks(rel: str) -> None:
    path = shared_trace(rel)
    fast, ref = both_paths(path, 4099)
    assert fast.events.height > 0
    assert_same_profile(fast, ref)


def test_third_chunk_does_not_overwrite_the_first(tmp_path: Path) -> None:
    """Three chunks with two buffers: chunk 3 reuses chunk 1's buffer. Every event has its own
    pid/tid/ts, so the first chunk's values must survive the third's."""
    evs = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 10 + i, "tid": 5000 - i}
        | {"ts": 100 + 3 * i, "dur": 1, "args": {"External id": 7 * i}}
        for i in range(30)
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    with chunk_events(8):
        fast = kineto.parse_kineto(p)
    got = fast.events.sort("ts_ns")
    assert got.get_column("external_id").to_list() == [7 * i for i in range(30)]
    assert got.get_column("ts_ns").to_list() == [(100 + 3 * i) * 1000 for i in range(30)]
    _, ref = both_paths(p, 8)
    assert_same_profile(fast, ref)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("string_tracks", [False, True])
@pytest.mark.parametrize("negative_tids", [False, True])
def test_layouts_same_on_both_paths(
    tmp_path: Path, placement: str, string_tracks: bool, negative_tids: bool
) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(
        layout_bytes(
            7,
            steps=4,
            placement=placement,
            string_tracks=string_tracks,
            negative_tids=negative_tids,
            drop_cat=0.2,
        )
    )
    fast, ref = both_paths(p, 5)
    assert fast.steps.height == 4
    assert_same_profile(fast, ref)


def test_layout_events_land_on_their_own_tracks(tmp_path: Path) -> None:
    """Against the generator's truth, not only the other path: each kernel's pid/tid is the
    GPU's and each op's the host's, whatever the metadata placement."""
    obj = layout_trace(3, steps=3, placement="interleaved", negative_tids=True)
    p = tmp_path / "t.json.gz"
    import gzip

    p.write_bytes(gzip.compress(json.dumps(obj).encode()))
    with chunk_events(6):
        prof = kineto.parse_kineto(p)
    truth = {
        (e["name"], round(e["ts"] * 1000)): (e["pid"], e["tid"])
        for e in obj["traceEvents"]
        if e["ph"] == "X"
    }
    ev = prof.events.select("name", "ts_ns", "pid", "tid")
    got = {(n, ts): (pid, tid) for n, ts, pid, tid in ev.iter_rows()}
    for key, (pid, tid) in truth.items():
        assert key in got, key
        assert got[key] == (pid, tid), key


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    placement=st.sampled_from(PLACEMENTS),
    string_tracks=st.booleans(),
    negative_tids=st.booleans(),
    drop_cat=st.sampled_from([0.0, 0.3, 1.0]),
    chunk=st.integers(1, 40),
    compact=st.booleans(),
)
def test_generated_layouts_never_differ(
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    placement: str,
    string_tracks: bool,
    negative_tids: bool,
    drop_cat: float,
    chunk: int,
    compact: bool,
) -> None:
    p = tmp_path_factory.mktemp("layout") / "t.json"
    p.write_bytes(
        layout_bytes(
            seed,
            steps=2,
            ops_per_step=4,
            placement=placement,
            string_tracks=string_tracks,
            negative_tids=negative_tids,
            drop_cat=drop_cat,
            compact=compact,
        )
    )
    fast, ref = both_paths(p, chunk)
    assert_same_profile(fast, ref)
