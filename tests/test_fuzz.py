"""Property-based fuzzing of the readers: any input either loads (and survives ``summary`` and
``diagnose``) or raises an :class:`~opscope.errors.InputError`; nothing else escapes.

Runs briefly in CI (few examples each). ``benchmarks/fuzz_readers.py`` runs the same targets with
many more examples (and atheris when it is installed).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opscope.doctor import diagnose
from opscope.errors import InputError
from opscope.ingest import gz, load
from opscope.ingest.summary import summary
from opscope.model import Profile

pytestmark = pytest.mark.timeout(120)

#: Examples per property in CI; the benchmark raises it with OPSCOPE_FUZZ_EXAMPLES.
EXAMPLES = int(os.environ.get("OPSCOPE_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
    print_blob=True,  # a failure prints @reproduce_failure(...) to replay it exactly
)

_WORK = Path(tempfile.mkdtemp(prefix="opscope-fuzz-"))

# -- strategies -----------------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=12,
)
PHASES = ["X", "i", "I", "s", "f", "t", "M", "C", "B", "E", "Q", ""]
CATS = [
    "cpu_op",
    "kernel",
    "cuda_runtime",
    "python_function",
    "user_annotation",
    "ac2g",
    "fwdbwd",
    "gpu_memcpy",
    "gpu_memset",
    "Trace",
    "Operator",
    None,
]
NAMES = [
    "aten::mm",
    "ProfilerStep#1",
    "ProfilerStep#2",
    "cudaLaunchKernel",
    "gemm",
    "[memory]",
    "process_name",
    "thread_name",
    "AI Core Freq",
]
ARG_KEYS = [
    "External id",
    "correlation",
    "Input Dims",
    "Input type",
    "Sequence number",
    "Fwd thread id",
    "Python id",
    "Python parent id",
    "device",
    "stream",
    "grid",
    "block",
    "Bytes",
    "Total Allocated",
    "Addr",
    "name",
    "labels",
    "sort_index",
]

good_ish_event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(PHASES),
        "cat": st.sampled_from(CATS),
        "name": st.sampled_from(NAMES) | json_scalars,
        "pid": st.integers(-2, 3) | json_scalars,
        "tid": st.integers(-2, 9) | st.sampled_from(["stream 7", "7"]) | json_scalars,
        "ts": st.floats(0, 1e7) | json_scalars,
        "dur": st.floats(-10, 1e4) | json_scalars,
    },
    optional={
        "args": st.dictionaries(st.sampled_from(ARG_KEYS), json_values, max_size=5) | json_values,
        "id": st.integers(0, 5) | json_scalars,
        "bp": st.sampled_from(["e", "s", None]),
        "s": st.sampled_from(["t", "p", "g"]),
    },
)
distributed_info = st.fixed_dictionaries(
    {},
    optional={
        "rank": json_scalars | st.integers(-3, 9),
        "world_size": json_scalars | st.integers(-3, 9),
        "backend": json_scalars,
    },
)
documents = st.one_of(
    st.builds(
        lambda evs, extra, di: {**extra, "traceEvents": evs, **di},
        st.lists(good_ish_event, max_size=30),
        st.dictionaries(
            st.sampled_from(
                [
                    "schemaVersion",
                    "with_stack",
                    "record_shapes",
                    "distributedInfo",
                    "deviceProperties",
                    "metadata",
                ]
            ),
            json_values,
            max_size=3,
        ),
        st.one_of(st.just({}), st.builds(lambda d: {"distributedInfo": d}, distributed_info)),
    ),
    st.lists(good_ish_event, max_size=30),
)


def _dump(doc: Any) -> bytes:
    # allow_nan writes NaN / Infinity literals, which real writers sometimes emit.
    return json.dumps(doc, allow_nan=True).encode()


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A generated trace, then maybe truncated, byte-flipped or spliced."""
    data = _dump(draw(documents))
    how = draw(st.sampled_from(["none", "truncate", "flip", "splice", "insert"]))
    if how == "truncate" and data:
        data = data[: draw(st.integers(0, len(data)))]
    elif how == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1 :]
    elif how == "splice" and data:
        i = draw(st.integers(0, len(data)))
        data = data[:i] + draw(st.binary(max_size=16)) + data[i:]
    elif how == "insert" and data:
        i = draw(st.integers(0, len(data)))
        data = data[:i] + draw(
            st.sampled_from(
                [
                    b"NaN",
                    b"-Infinity",
                    b"1e999",
                    b'"',
                    b"{",
                    b"]",
                    b",",
                    b"\\u0000",
                    b"99999999999999999999999",
                ]
            )
        )
    return data


# -- targets (shared with benchmarks/fuzz_readers.py) -----------------------------------------


def check_profile(prof: Profile) -> None:
    """What every loaded profile must satisfy."""
    assert isinstance(prof, Profile)
    summary(prof)
    diagnose(prof)
    ev = prof.events
    if ev.height:
        dur = ev.get_column("dur_ns").drop_nulls()
        assert dur.len() == 0 or int(dur.min()) >= 0  # type: ignore[arg-type]
        assert ev.get_column("id").n_unique() == ev.height
    odd = prof.meta.get("oddities") or {}
    assert all(isinstance(v, int) and v >= 0 for v in odd.values())


def load_bytes(data: bytes, *, name: str = "fuzz.json", salvage: bool = False) -> None:
    """Write ``data`` as a trace file and load it; only InputError may escape."""
    p = _WORK / name
    p.write_bytes(data)
    try:
        prof = load(p, salvage=salvage, cache=False)
    except InputError as e:
        assert "\n" not in str(e)
        return
    check_profile(prof)


def load_ascend_csv(text: str) -> None:
    """An Ascend folder holding only ``kernel_details.csv`` with ``text``."""
    d = _WORK / "fuzz_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel_details.csv").write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        prof = load(d.parent, cache=False)
    except InputError as e:
        assert "\n" not in str(e)
        return
    check_profile(prof)


def gunzip(data: bytes) -> None:
    """gz.gunzip_bytes on anything: bytes within the bound, or an InputError."""
    try:
        out = gz.gunzip_bytes(data, max_bytes=1 << 20)
    except InputError:
        return
    assert len(out) <= 1 << 20


KERNEL_HEADER = (
    "Step Id,Model ID,Task ID,Stream ID,Name,Type,Accelerator Core,Start Time(us),Duration(us),"
    "Wait Time(us),Block Dim,Input Shapes,Input Data Types,Input Formats,Output Shapes"
)
csv_cell = st.one_of(
    st.sampled_from(
        [
            "",
            "1",
            "-1",
            "0.5",
            "1e309",
            "nan",
            "MatMulV2",
            "AI_CORE",
            "\t",
            '"1,2;3"',
            "1736408883686740.710\t",
            "N/A",
        ]
    ),
    st.text(max_size=12),
)
csv_text = st.builds(
    lambda header, rows, eol, bom: (
        ("\ufeff" if bom else "") + eol.join([header, *[",".join(r) for r in rows]]) + eol
    ),
    st.sampled_from([KERNEL_HEADER, KERNEL_HEADER + ",Extra", "Name,Duration(us)", "", "a,b,c"]),
    st.lists(st.lists(csv_cell, min_size=0, max_size=17), max_size=12),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
)

# -- properties -----------------------------------------------------------------------------------


@FUZZ
@given(mutated())
def test_fuzz_kineto_json(data: bytes) -> None:
    load_bytes(data)


@FUZZ
@given(mutated())
def test_fuzz_kineto_salvage(data: bytes) -> None:
    load_bytes(data, salvage=True)


def test_duration_beyond_int64_ns_is_a_missing_duration() -> None:
    """Found by the salvage fuzz: a 9.2e15 µs ``dur`` in a trace whose 13-digit fractional
    duration sends it down the exact decimal path overflowed the Int64 ns column instead of
    reading as no duration."""
    data = (
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1,'
        b' "ts": 4439974.5, "dur": 9223372036854776.0},'
        b' {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1,'
        b' "ts": 4439975.5, "dur": 1000000000000.5}]}'
    )
    p = _WORK / "huge_dur.json"
    p.write_bytes(data)
    prof = load(p, salvage=True, cache=False)
    check_profile(prof)
    got = dict(prof.events.select("name", "dur_ns").iter_rows())
    assert got["b"] == 1_000_000_000_000_500 and got["a"] in (0, None)


@FUZZ
@given(mutated(), st.integers(0, 9))
def test_fuzz_kineto_gzip(data: bytes, level: int) -> None:
    blob = gzip.compress(data, compresslevel=level)
    load_bytes(blob, name="fuzz.json.gz")
    load_bytes(blob[: len(blob) // 2], name="fuzz_cut.json.gz")


@FUZZ
@given(st.binary(max_size=2048))
def test_fuzz_random_bytes(data: bytes) -> None:
    load_bytes(data)
    gunzip(b"\x1f\x8b" + data)


@FUZZ
@given(csv_text)
def test_fuzz_ascend_kernel_csv(text: str) -> None:
    load_ascend_csv(text)


def test_strategies_produce_loadable_traces() -> None:
    """The generator is not all garbage: a plain well-formed draw loads with its slices."""
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": 1.5,
                "dur": 2.0,
            }
        ]
    }
    p = _WORK / "ok.json"
    p.write_bytes(_dump(doc))
    prof = load(p, cache=False)
    check_profile(prof)
    assert prof.ops.height == 1
    assert int(prof.ops.get_column("dur_ns")[0]) == math.floor(2.0 * 1000)
