"""gz.ReadAhead: the inflated text read ahead on a worker thread (the out-of-core scan's input).

The reader must give the source's bytes in order whatever the piece and request sizes, raise
the source's error at the read that reaches it (after every byte before it), stop its thread on
close even mid-text, and be what the out-of-core load reads a ``.json.gz`` through (threads
on), with the same tables as without it.
"""

from __future__ import annotations

import gzip
import json
import random
import threading
from pathlib import Path

import pytest

from opscope.errors import CorruptArchiveError
from opscope.ingest import gz, kineto, spill, window_link


class _Source:
    """``read(n)`` over ``data`` returning short, random-sized pieces; raises ``error`` once
    ``fail_at`` bytes were given."""

    def __init__(self, data: bytes, seed: int, fail_at: int | None = None) -> None:
        self.data, self.pos, self.fail_at = data, 0, fail_at
        self.rng = random.Random(seed)
        self.threads: set[str] = set()

    def read(self, n: int) -> bytes:
        self.threads.add(threading.current_thread().name)
        if self.fail_at is not None and self.pos >= self.fail_at:
            raise CorruptArchiveError("corrupt gzip data (planted)", Path("t.json.gz"))
        k = min(n, self.rng.randint(1, 50))
        if self.fail_at is not None:
            k = min(k, self.fail_at - self.pos) or 1
        out = self.data[self.pos : self.pos + k]
        self.pos += len(out)
        return out


def _drain(read: object, rng: random.Random) -> bytes:
    got = bytearray()
    while True:
        piece = read(rng.randint(1, 70))  # type: ignore[operator]
        if not piece:
            return bytes(got)
        got += piece


@pytest.mark.parametrize("seed", range(20))
def test_same_bytes_in_order_whatever_the_sizes(seed: int) -> None:
    rng = random.Random(seed)
    data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 5000)))
    src = _Source(data, seed)
    with gz.ReadAhead(src.read, piece=rng.randint(1, 64), depth=rng.randint(1, 4)) as ahead:
        assert _drain(ahead.read, rng) == data
        assert ahead.read(10) == b""  # and stays at the end
    assert src.threads == {"opscope-read-ahead"}


def test_the_error_comes_after_every_byte_before_it() -> None:
    data = bytes(range(256)) * 8
    src = _Source(data, 1, fail_at=1000)
    got = bytearray()
    with (
        gz.ReadAhead(src.read, piece=33, depth=2) as ahead,
        pytest.raises(CorruptArchiveError, match="planted"),
    ):
        while True:
            piece = ahead.read(17)
            assert piece, "the error, not an end"
            got += piece
    assert bytes(got) == data[:1000]


def test_close_mid_text_stops_the_thread() -> None:
    data = b"x" * 100_000
    src = _Source(data, 2)
    ahead = gz.ReadAhead(src.read, piece=10, depth=2)
    first = ahead.read(5)
    assert first and first == b"x" * len(first) and len(first) <= 5
    ahead.close()
    assert not ahead._thread.is_alive()
    assert src.pos < len(data)  # it did not read on to the end


def test_the_out_of_core_load_reads_a_gzip_ahead_with_the_same_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    evs = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 5}", "pid": 1, "tid": 1}
        | {"ts": 100 * i, "dur": 40, "args": {"External id": i}}
        for i in range(2000)
    ]
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": evs}).encode()))
    monkeypatch.setenv("OPSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    made: list[gz.ReadAhead] = []
    orig = gz.ReadAhead.__init__

    def spy(self: gz.ReadAhead, *a: object, **k: object) -> None:
        made.append(self)
        orig(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(gz.ReadAhead, "__init__", spy)
    got = kineto.parse_kineto(path, memory_budget=1)
    assert len(made) == 1 and not made[0]._thread.is_alive()
    monkeypatch.setattr(spill, "READ_AHEAD", False)
    plain = kineto.parse_kineto(path, memory_budget=1)
    assert len(made) == 1
    monkeypatch.setenv(window_link.THREADS_ENV, "0")
    monkeypatch.setattr(spill, "READ_AHEAD", True)
    kineto.parse_kineto(path, memory_budget=1)
    assert len(made) == 1  # (threads off: none)
    for name in ("events", "flows", "stacks", "threads"):
        assert getattr(got, name).equals(getattr(plain, name)), name
    assert got.events.height == 2000
