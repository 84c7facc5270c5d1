"""The out-of-core cut plan's facts taken while the spill holds each window
(opscope.ingest.window_link.KeySpans, WindowFacts): each key's first and last time, and each
window's rows before a cut candidate, are checked against a Polars group-by and
``np.searchsorted`` on the window's rows; both ways of keeping the spans (a slot per key value,
or per-window partial tables when the values are sparse) are run on the planted traces of the
cut rules, equal to the in-memory load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

import test_outofcore_window_link as rules
from opscope.ingest import window_link
from opscope.model import schema
from test_outofcore_window_link import _small  # noqa: F401 (that module's autouse fixture)


def _sparse(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key's values too sparse for a slot each: the partial tables' way."""
    monkeypatch.setattr(window_link, "DENSE_SLACK", 0)
    monkeypatch.setattr(window_link, "DENSE_MIN", 0)


def _windows(mode: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Windows of (keys, ts): counters that run on from window to window, some keys met again
    in later windows (earlier and later in time), negative keys; ``far``: one key far from
    the rest in the last window."""
    rng = np.random.default_rng(11)
    out = []
    for w in range(6):
        keys = np.repeat(np.arange(100 * w - 30, 100 * w + 100), rng.integers(1, 4, size=130))
        keys = np.concatenate([keys, rng.integers(-40, 600, size=50)])  # met again anywhere
        ts = rng.integers(0, 10**9, size=keys.size)
        out.append((keys.astype(np.int64), ts.astype(np.int64)))
    if mode == "far":
        keys = np.array([5, 10**12, 10**12, 7], dtype=np.int64)
        out.append((keys, np.array([3, 9, 1, 10**10], dtype=np.int64)))
    return out


def _reference(windows: list[tuple[np.ndarray, np.ndarray]]) -> pl.DataFrame:
    df = pl.DataFrame(
        {
            "key": np.concatenate([k for k, _ in windows]),
            "ts": np.concatenate([t for _, t in windows]),
        }
    )
    return df.group_by("key").agg(pl.min("ts").alias("lo"), pl.max("ts").alias("hi"))


@pytest.mark.parametrize("mode", ["dense", "sparse", "far"])
def test_key_spans_equal_a_group_by(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if mode == "sparse":
        _sparse(monkeypatch)
    windows = _windows(mode)
    spans = window_link.KeySpans()
    for w, (keys, ts) in enumerate(windows):
        spans.add(keys, ts)
        # spy: slots while the values are counters; partial tables from the first sparse window
        assert (spans.parts is None) == (mode == "dense" or (mode == "far" and w < 6))
    ref = _reference(windows).sort("lo", "hi")
    lo, hi = spans.spans()
    got = pl.DataFrame({"lo": lo, "hi": hi}).sort("lo", "hi")
    assert got.equals(ref.select("lo", "hi"))
    a, b = spans.blocks()
    ra, rb = window_link._blocks(
        ref.get_column("lo").to_numpy(), ref.get_column("hi").to_numpy() + 1
    )
    assert a.tolist() == ra.tolist() and b.tolist() == rb.tolist()


def test_no_keys() -> None:
    spans = window_link.KeySpans()
    spans.add(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    lo, hi = spans.spans()
    assert lo.size == hi.size == 0
    assert [x.size for x in spans.blocks()] == [0, 0]


def _events(ts: np.ndarray, dur: np.ndarray, kind: list[str]) -> pl.DataFrame:
    n = ts.size
    nulls = pl.Series([None] * n, dtype=pl.Int64)
    return pl.DataFrame(
        {
            "kind": pl.Series(kind, dtype=schema.EventKind),
            "name": ["x"] * n,
            "ts_ns": ts,
            "dur_ns": dur,
            "device": pl.Series([None] * n, dtype=pl.Int32),
            "correlation": np.arange(n, dtype=np.int64),
            "external_id": nulls,
            "seq": nulls,
        }
    )


def test_rows_before_each_candidate_as_searchsorted() -> None:
    """Windows of random intervals (many zero-length, many touching, ties): at every cut
    candidate of their blocks, the rows before it and whether a zero-length event starts
    there are what a search on each window's own rows gives."""
    rng = np.random.default_rng(5)
    facts = window_link.WindowFacts()
    rows = []
    for _ in range(5):
        n = int(rng.integers(0, 400))
        ts = np.sort(rng.integers(0, 3000, size=n)).astype(np.int64)
        dur = rng.choice([0, 0, 1, 2, 5, 40], size=n).astype(np.int64)
        facts.add(_events(ts, dur, rng.choice(["cpu_op", "kernel", "runtime"], size=n).tolist()))
        rows.append((ts, dur))
    cands, touch = window_link._candidates(
        np.concatenate([a for a, _ in facts.blocks]), np.concatenate([b for _, b in facts.blocks])
    )
    assert cands.size > 20 and touch.sum() > 5  # (the draw has both kinds of candidate)
    got = facts.rows_before(cands)
    for (ts, _), pos in zip(rows, got, strict=True):
        assert pos.tolist() == np.searchsorted(ts, cands, side="left").tolist()
    zero = np.zeros(cands.size, dtype=bool)
    for ts, dur in rows:
        zero |= np.isin(cands, ts[dur == 0])
    assert facts.zero_length_at(cands).tolist() == zero.tolist()
    assert zero.any()


@pytest.mark.parametrize(
    "rule",
    [
        rules.test_no_cut_across_a_launch_or_a_backward_root,
        rules.test_no_cut_between_a_forward_op_and_its_backward_by_sequence_number,
    ],
)
def test_cut_rules_with_sparse_keys(
    rule: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planted traces of the key rules, every key kept as partial tables: the same cuts,
    the same tables as the in-memory load."""
    _sparse(monkeypatch)
    rule(tmp_path)  # type: ignore[operator]


@pytest.mark.parametrize("by", ["flow", "correlation"])
def test_each_launch_rule_with_sparse_keys(
    by: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _sparse(monkeypatch)
    rules.test_each_launch_rule_alone_forbids_the_cut(by, tmp_path)
