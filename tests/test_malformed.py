"""The malformed-input corpus: every input gives a one-line InputError or a loaded profile with the
oddity counted, never a traceback or a hang.

The corpus is generated here, from real traces (tests skip when the shared folder is absent) and
synthetic ones: truncations at every 1/50th of a file and inside strings and numbers, random
bytes, wrong JSON types for every field of an event, huge strings, deep nesting, NaN/Infinity,
ints beyond 64 bits, duplicate ids, negative durations, shuffled events, gzip bombs, and Ascend
CSVs with missing/extra columns, BOMs and CRLF. Each loaded profile also goes through
``summary`` and ``diagnose`` (the first consumers of odd profiles).
"""

from __future__ import annotations

import copy
import gzip
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import shared_trace
from opscope.cli.app import main
from opscope.doctor import diagnose
from opscope.errors import CorruptArchiveError, InputError, TruncatedTraceError
from opscope.ingest import load
from opscope.ingest.summary import summary
from opscope.model import Profile

pytestmark = pytest.mark.timeout(60)


def outcome(path: Path, *, salvage: bool = False) -> Profile | InputError:
    """Load ``path``; return the Profile or the InputError, asserting the error's shape."""
    try:
        prof = load(path, salvage=salvage, cache=False)
    except InputError as e:
        msg = str(e)
        assert "\n" not in msg, msg
        assert path.name in msg or (e.path and Path(e.path).name in msg), msg
        assert len(msg) < 500, msg
        return e
    summary(prof)
    diagnose(prof)
    return prof


def odd_count(prof: Profile) -> int:
    return sum(int(v) for v in (prof.meta.get("oddities") or {}).values())


def _ev(i: int, **over: Any) -> dict[str, Any]:
    e: dict[str, Any] = {
        "ph": "X",
        "cat": "cpu_op",
        "name": f"aten::op{i}",
        "pid": 1,
        "tid": 1,
        "ts": 1000.0 + 10 * i,
        "dur": 5.0,
        "args": {"External id": i, "Input Dims": [[2, 3]]},
    }
    e.update(over)
    return e


def _trace(events: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schemaVersion": 1, "traceEvents": events}


def _write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


@pytest.fixture(scope="module")
def h100_bytes() -> bytes:
    return gzip.decompress(shared_trace("gpu/tracelens_h100_bert_small.json.gz").read_bytes())


@pytest.fixture(scope="module")
def mi250_bytes() -> bytes:
    return gzip.decompress(shared_trace("gpu/hta_amd_mi250_minitoy.json.gz").read_bytes())


# -- truncation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("parts", [10, pytest.param(50, marks=pytest.mark.slow)])
def test_truncated_every_fraction(tmp_path: Path, mi250_bytes: bytes, parts: int) -> None:
    """Cut a real trace at every 1/parts of its length (1/50th in the slow run)."""
    n = len(mi250_bytes)
    p = tmp_path / "cut.json"
    full_events = len(json.loads(mi250_bytes)["traceEvents"])
    kinds = {"error": 0, "salvaged": 0}
    for k in range(1, parts):
        _write(p, mi250_bytes[: n * k // parts])
        r = outcome(p)
        assert isinstance(r, TruncatedTraceError | InputError), k
        assert "salvage" in str(r) or not isinstance(r, TruncatedTraceError)
        s = outcome(p, salvage=True)
        if isinstance(s, Profile):
            kinds["salvaged"] += 1
            assert s.meta["salvaged"]["events"] <= full_events
            assert s.meta["salvaged"]["events"] > 0
        else:
            kinds["error"] += 1
    # all but cuts inside the header salvage something
    assert kinds["salvaged"] >= 0.8 * (parts - 1)


def test_truncated_inside_strings_and_numbers(tmp_path: Path) -> None:
    evs = [_ev(i) for i in range(30)]
    text = json.dumps(_trace(evs))
    ends = [text.index(json.dumps(e)) + len(json.dumps(e)) for e in evs]
    cuts = []
    i = text.index('"aten::op17"') + 5  # inside a string
    cuts.append(i)
    j = text.index("1170.0")  # inside a number (ts of event 17)
    cuts += [j + 1, j + 3, j + 5]
    k = text.index('"External id": 17') + 3  # inside a key
    cuts.append(k)
    cuts.append(text.index("\\") if "\\" in text else len(text) - 1)
    for c in cuts:
        p = _write(tmp_path / f"cut{c}.json", text[:c])
        assert isinstance(outcome(p), InputError)
        s = outcome(p, salvage=True)
        assert isinstance(s, Profile)
        ops = int((s.events.get_column("kind").cast(str) == "cpu_op").sum())
        assert ops == s.meta["salvaged"]["events"]
        assert ops == sum(1 for end in ends if end <= c)  # the events wholly before the cut


def test_truncated_gzip(tmp_path: Path) -> None:
    gz = gzip.compress(json.dumps(_trace([_ev(i) for i in range(2000)])).encode())
    for k in (1, 5, 10, 20, 30, 40, 49):
        p = _write(tmp_path / f"t{k}.json.gz", gz[: len(gz) * k // 50])
        r = outcome(p)
        assert isinstance(r, CorruptArchiveError | TruncatedTraceError), (k, r)


# -- random bytes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_random_bytes(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096)))
    prefix = [b"", b"\x1f\x8b", b'{"traceEvents": [', b"[", b"{"][seed % 5]
    p = _write(tmp_path / f"r{seed}.json", prefix + blob)
    r = outcome(p)
    assert isinstance(r, InputError | Profile)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\t",
        "null",
        "42",
        '"a string"',
        "[1, 2, 3]",
        "[[]]",
        '{"traceEvents": {}}',
        '{"traceEvents": null}',
        '{"traceEvents": [[1], "x", null, 3]}',
        "{}",
        '{"a": 1}',
        "[]",
        '{"traceEvents": []}',
    ],
)
def test_odd_documents(tmp_path: Path, text: str) -> None:
    r = outcome(_write(tmp_path / "doc.json", text))
    if isinstance(r, Profile):
        # Only documents that hold an (empty or partly valid) event array load.
        assert "traceEvents" in text or text.startswith("[")
        assert r.events.height == 0


# -- wrong JSON types, field by field -------------------------------------------------------------

BAD_VALUES: dict[str, list[Any]] = {
    "ts": ["12.5x", {"o": 1}, None, [1], True],
    "dur": [-5.0, "abc", {"o": 1}, None, [1]],
    "args": [[1, 2], "args", 7, None],
    "name": [12, {"o": 1}, None, [1]],
    "pid": [{"o": 1}, [1], None, 1.5],
    "tid": [{"o": 1}, [1], None, "stream x"],
    "ph": [1, None, {"o": 1}, "Q"],
    "cat": [1, None, {"o": 1}],
}


@pytest.mark.parametrize(
    ("field", "value"),
    [(f, v) for f, vs in BAD_VALUES.items() for v in vs],
    ids=lambda x: repr(x)[:20],
)
def test_wrong_type_per_field(tmp_path: Path, field: str, value: Any) -> None:
    events = [_ev(i) for i in range(20)]
    events[7] = _ev(7, **{field: value})
    p = _write(tmp_path / "wt.json", json.dumps(_trace(events)))
    r = outcome(p)
    if isinstance(r, InputError):
        return
    ops = r.events.filter(r.events.get_column("kind").cast(str) == "cpu_op")
    # The 19 good events always survive; the odd one is either dropped or kept, and counted.
    good = [f"aten::op{i}" for i in range(20) if i != 7]
    assert set(good) <= set(ops.get_column("name").to_list())
    # Tolerated without comment: a missing category or args (common in Chrome traces), a
    # string tid ("stream 7") or a float pid.
    kept_as_is = (field in ("args", "cat") and value is None) or (
        field in ("tid", "pid") and isinstance(value, str | float)
    )
    assert odd_count(r) > 0 or kept_as_is, (field, value, r.meta.get("oddities"))


def test_wrong_type_args_fields(tmp_path: Path) -> None:
    bad_args = [
        {"External id": "x"},
        {"External id": {"o": 1}},
        {"correlation": [1]},
        {"Input Dims": "not dims"},
        {"Input Dims": {"a": 1}},
        {"Sequence number": -1.5},
        {"Fwd thread id": "t"},
        {"Python id": None},
    ]
    events = [_ev(i, args=a) for i, a in enumerate(bad_args)]
    r = outcome(_write(tmp_path / "args.json", json.dumps(_trace(events))))
    assert isinstance(r, Profile | InputError)
    if isinstance(r, Profile):
        assert r.ops.height == len(bad_args)


# -- sizes and depths -----------------------------------------------------------------------------


def test_huge_string(tmp_path: Path) -> None:
    events = [_ev(i) for i in range(10)]
    events[3]["name"] = "x" * (10 * 1024 * 1024)
    r = outcome(_write(tmp_path / "huge.json", json.dumps(_trace(events))))
    assert isinstance(r, Profile | InputError)
    if isinstance(r, Profile):
        assert r.ops.height == 10


def test_deeply_nested_args(tmp_path: Path) -> None:
    deep = '{"a": ' * 10_000 + "1" + "}" * 10_000
    good = ", ".join(json.dumps(_ev(i)) for i in range(5))
    text = (
        '{"traceEvents": [' + good + ', {"ph": "X", "cat": "cpu_op", "name": "deep", "pid": 1,'
        ' "tid": 1, "ts": 5000, "dur": 1, "args": ' + deep + "}]}"
    )
    r = outcome(_write(tmp_path / "deep.json", text))
    if isinstance(r, Profile):
        assert r.ops.height >= 5
        assert odd_count(r) > 0 or r.ops.height == 6


def test_deeply_nested_metadata(tmp_path: Path) -> None:
    deep = "[" * 10_000 + "]" * 10_000
    text = '{"metadata": ' + deep + ', "traceEvents": [' + json.dumps(_ev(1)) + "]}"
    r = outcome(_write(tmp_path / "deepmeta.json", text))
    assert isinstance(r, Profile | InputError)


@pytest.mark.parametrize("lit", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("field", ["ts", "dur"])
def test_nan_infinity_literals(tmp_path: Path, lit: str, field: str) -> None:
    events = [json.dumps(_ev(i)) for i in range(6)]
    bad = _ev(3)
    bad[field] = "@@"
    events[3] = json.dumps(bad).replace('"@@"', lit)
    text = '{"traceEvents": [' + ", ".join(events) + "]}"
    r = outcome(_write(tmp_path / "nan.json", text))
    if isinstance(r, Profile):
        names = set(r.ops.get_column("name").to_list())
        assert {f"aten::op{i}" for i in range(6) if i != 3} <= names
        assert odd_count(r) > 0


@pytest.mark.parametrize("field", ["ts", "dur", "pid", "tid", "External id", "correlation"])
def test_ints_beyond_64_bits(tmp_path: Path, field: str) -> None:
    events = [_ev(i) for i in range(6)]
    big = 2**70 + 12345
    if field in ("External id", "correlation"):
        events[2]["args"][field] = big
    else:
        events[2][field] = big
    r = outcome(_write(tmp_path / "big.json", json.dumps(_trace(events))))
    if isinstance(r, Profile):
        names = set(r.ops.get_column("name").to_list())
        assert {f"aten::op{i}" for i in range(6) if i != 2} <= names
        # nothing wrapped around into a plausible small number
        for col in ("ts_ns", "dur_ns", "pid", "tid", "external_id", "correlation"):
            vals = r.ops.get_column(col).drop_nulls().to_list()
            assert all(v != big % 2**64 and v != (big % 2**64) - 2**64 for v in vals)


def test_duplicate_ids_and_negative_durations(tmp_path: Path) -> None:
    events = [_ev(i) for i in range(10)]
    for e in events:
        e["args"]["External id"] = 1  # every op claims the same id
    events[4]["dur"] = -3.0
    events += [
        {"ph": "s", "id": 9, "pid": 1, "tid": 1, "ts": 1001.0, "cat": "ac2g", "name": "f"},
        {"ph": "s", "id": 9, "pid": 1, "tid": 1, "ts": 1011.0, "cat": "ac2g", "name": "f"},
        {
            "ph": "f",
            "id": 9,
            "pid": 0,
            "tid": 7,
            "ts": 1050.0,
            "cat": "ac2g",
            "name": "f",
            "bp": "e",
        },
    ]
    r = outcome(_write(tmp_path / "dup.json", json.dumps(_trace(events))))
    assert isinstance(r, Profile)
    assert r.ops.height == 10
    assert r.meta["oddities"].get("negative duration (clamped to 0)") == 1
    assert int(r.ops.get_column("dur_ns").min()) >= 0  # type: ignore[arg-type]


def test_events_out_of_order(tmp_path: Path, h100_bytes: bytes) -> None:
    d = json.loads(h100_bytes)
    shuffled = copy.deepcopy(d)
    random.Random(7).shuffle(shuffled["traceEvents"])
    a = outcome(_write(tmp_path / "in_order.json", json.dumps(d)))
    b = outcome(_write(tmp_path / "shuffled.json", json.dumps(shuffled)))
    assert isinstance(a, Profile) and isinstance(b, Profile)
    n_x = sum(1 for e in d["traceEvents"] if e.get("ph") == "X")
    assert a.events.height == b.events.height <= n_x
    assert summary(a)["op_kernel_links"] == summary(b)["op_kernel_links"]
    assert summary(a)["steps"] == summary(b)["steps"]


# -- gzip bombs -----------------------------------------------------------------------------------


def test_gzip_bomb_over_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPSCOPE_MAX_DECOMPRESSED", str(4 * 1024 * 1024))
    payload = b'{"traceEvents": [' + b" " * (64 * 1024 * 1024) + b"]}"
    p = _write(tmp_path / "bomb.json.gz", gzip.compress(payload, compresslevel=9))
    assert p.stat().st_size < 1024 * 1024
    r = outcome(p)
    assert isinstance(r, CorruptArchiveError)


@pytest.mark.slow
def test_gzip_bomb_default_bound(tmp_path: Path) -> None:
    # ~300 KB expanding to 300 MB: over the default 256 MiB allowance for small files.
    zeros = b"0" * (1024 * 1024)
    buf = gzip.compress(b'{"traceEvents": [' + zeros * 300 + b"]}", compresslevel=6)
    p = _write(tmp_path / "bomb2.json.gz", buf)
    assert isinstance(outcome(p), CorruptArchiveError)


def test_gzip_concatenated_members_and_garbage_tail(tmp_path: Path) -> None:
    a = gzip.compress(b'{"traceEvents": [')
    b = gzip.compress(json.dumps(_ev(1)).encode() + b"]}")
    r = outcome(_write(tmp_path / "multi.json.gz", a + b))
    assert isinstance(r, Profile | InputError)
    r2 = outcome(_write(tmp_path / "tail.json.gz", a + b + b"\x00garbage"))
    assert isinstance(r2, Profile | InputError)


# -- Ascend CSVs ----------------------------------------------------------------------------------


@pytest.fixture()
def ascend_copy(tmp_path: Path) -> Path:
    src = shared_trace("ascend/alexnet_ddp_910b/level1_rank0_ascend_pt")
    dst = tmp_path / "rank0_ascend_pt"
    shutil.copytree(src, dst)
    return dst


def _csv(d: Path, name: str = "kernel_details.csv") -> Path:
    return d / "ASCEND_PROFILER_OUTPUT" / name


def _edit_csv(p: Path, fn: Any) -> None:
    text = p.read_text(encoding="utf-8")
    p.write_bytes(fn(text).encode("utf-8") if isinstance(fn(text), str) else fn(text))


def _drop_column(text: str, col: str) -> str:
    import csv
    import io

    rows = list(csv.reader(io.StringIO(text)))
    idx = rows[0].index(col)
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    for r in rows:
        w.writerow(r[:idx] + r[idx + 1 :])
    return out.getvalue()


def _kernel_rows(prof: Profile) -> int:
    return int((prof.events.get_column("kind").cast(str) == "kernel").sum())


def test_ascend_baseline(ascend_copy: Path) -> None:
    import csv

    r = outcome(ascend_copy)
    assert isinstance(r, Profile)
    with _csv(ascend_copy).open(encoding="utf-8") as f:
        n_rows = sum(1 for _ in csv.DictReader(f))
    assert r.meta["ascend"]["kernels_matched_to_trace"] == n_rows


@pytest.mark.parametrize(
    "mutation",
    [
        "missing_duration",
        "missing_name",
        "missing_start",
        "extra_column",
        "bom",
        "crlf",
        "bom_crlf",
        "header_only",
        "empty",
        "garbage_rows",
        "short_rows",
        "binary",
    ],
)
def test_ascend_kernel_csv(ascend_copy: Path, mutation: str) -> None:
    import csv

    p = _csv(ascend_copy)
    text = p.read_text(encoding="utf-8")
    header = next(csv.reader([text.splitlines()[0]]))
    baseline = outcome(ascend_copy)
    assert isinstance(baseline, Profile)
    if mutation.startswith("missing_"):
        want = {
            "missing_duration": "Duration(us)",
            "missing_name": "Name",
            "missing_start": "Start Time(us)",
        }[mutation]
        col = next(c for c in header if c.strip() == want)
        new: str | bytes = _drop_column(text, col)
    elif mutation == "extra_column":
        lines = text.splitlines()
        new = "\n".join([lines[0] + ",Extra Col"] + [ln + ",zzz" for ln in lines[1:]]) + "\n"
    elif mutation == "bom":
        new = "\ufeff" + text
    elif mutation == "crlf":
        new = text.replace("\n", "\r\n")
    elif mutation == "bom_crlf":
        new = "\ufeff" + text.replace("\n", "\r\n")
    elif mutation == "header_only":
        new = text.splitlines()[0] + "\n"
    elif mutation == "empty":
        new = ""
    elif mutation == "garbage_rows":
        lines = text.splitlines()
        new = "\n".join([*lines[:5], '"unterminated,quote', "a,b", "\x00\x01", *lines[5:]]) + "\n"
    elif mutation == "short_rows":
        lines = text.splitlines()
        new = "\n".join([lines[0]] + [ln.split(",")[0] for ln in lines[1:6]] + lines[6:]) + "\n"
    else:
        new = bytes(range(256)) * 4
    p.write_bytes(new.encode("utf-8") if isinstance(new, str) else new)
    r = outcome(ascend_copy)
    if mutation.startswith("missing_"):  # a required column: named in the error
        assert isinstance(r, InputError)
        assert "lacks column" in str(r) and want in str(r)
        return
    if isinstance(r, InputError):
        return
    if mutation in ("bom", "crlf", "bom_crlf", "extra_column"):
        # Harmless encodings and extra columns: every kernel row still read.
        assert _kernel_rows(r) == _kernel_rows(baseline), mutation
        assert r.meta["ascend"]["kernels_matched_to_trace"] == len(text.splitlines()) - 1
    elif mutation in ("garbage_rows", "short_rows"):
        assert odd_count(r) > 0, r.meta.get("oddities")


@pytest.mark.parametrize(
    "name", ["step_trace_time.csv", "operator_memory.csv", "memory_record.csv"]
)
@pytest.mark.parametrize("mutation", ["bom_crlf", "drop_first_column", "empty", "garbage"])
def test_ascend_other_csvs(ascend_copy: Path, name: str, mutation: str) -> None:
    p = _csv(ascend_copy, name)
    if not p.is_file():
        pytest.skip(f"{name} not in this run")
    text = p.read_text(encoding="utf-8")
    if mutation == "bom_crlf":
        new = "\ufeff" + text.replace("\n", "\r\n")
    elif mutation == "drop_first_column":
        new = "\n".join(",".join(ln.split(",")[1:]) for ln in text.splitlines()) + "\n"
    elif mutation == "empty":
        new = ""
    else:
        new = '\x00garbage,,,\n"x\n' * 3
    p.write_text(new, encoding="utf-8")
    r = outcome(ascend_copy)
    if isinstance(r, Profile) and mutation == "bom_crlf" and name == "step_trace_time.csv":
        assert r.steps.height >= 1


@pytest.mark.parametrize("mutation", ["truncated", "garbage", "object", "string_ts"])
def test_ascend_trace_view(ascend_copy: Path, mutation: str) -> None:
    p = _csv(ascend_copy, "trace_view.json")
    data = p.read_bytes()
    if mutation == "truncated":
        new = data[: len(data) // 2]
    elif mutation == "garbage":
        new = b"\x00\x01not json"
    elif mutation == "object":
        new = b'{"not": "an array"}'
    else:
        new = json.dumps(
            [{"ph": "X", "name": "x", "ts": {"o": 1}, "dur": "1", "pid": 1, "tid": 1}]
        ).encode()
    p.write_bytes(new)
    r = outcome(ascend_copy)
    assert isinstance(r, Profile | InputError)
    if mutation == "truncated":
        assert isinstance(r, InputError)
        assert isinstance(outcome(ascend_copy, salvage=True), Profile)


# -- through the CLI (in-process): exit 2, one line, no traceback ---------------------------------


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00garbage",
        b'{"traceEvents": [{"ph": "X", "ts": 1',
        b"\x1f\x8b\x08\x00junk",
        b'{"traceEvents": {}}',
        b"[1, 2",
        b'{"traceEvents": [' + b'{"a": ' * 5000,
    ],
    ids=["empty", "garbage", "truncated", "badgz", "te-object", "array-cut", "deep-cut"],
)
@pytest.mark.parametrize("command", ["load", "doctor"])
def test_cli_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, command: str
) -> None:
    p = _write(tmp_path / "bad.json", content)
    rc = main([command, str(p), "--json"] + (["--no-cache"] if command == "load" else []))
    out = capsys.readouterr()
    if command == "doctor" and rc == 0:
        # doctor salvages: a truncated trace is diagnosed, not refused
        checks = {c["id"]: c for c in json.loads(out.out)["checks"]}
        assert checks["incomplete.truncated"]["status"] == "error"
        return
    assert rc == 2, (out.out, out.err)
    assert "Traceback" not in out.err
    lines = [x for x in out.err.splitlines() if x.strip()]
    assert len(lines) == 1, out.err
    assert "bad.json" in lines[0]


# -- run directories and rank folders -------------------------------------------------------------

RUN_JSONS = [
    "[1, 2]",
    "null",
    '{"profiler": [1], "steps": "x", "world_size": "two", "device_processes": [1],'
    ' "disk_free_bytes": "lots"}',
    '{"profiler": {"active": "three", "repeat": null}, "steps": {"profiled": 5},'
    ' "device_processes": {"processes": "none"}, "versions": {"torch": 2}}',
]


@pytest.mark.parametrize("run_json", RUN_JSONS)
def test_run_dir_odd_run_json_and_torn_metrics(tmp_path: Path, run_json: str) -> None:
    run = tmp_path / "run"
    (run / "rank0").mkdir(parents=True)
    _write(run / "rank0" / "t.json", json.dumps(_trace([_ev(i) for i in range(4)])))
    _write(run / "run.json", run_json)
    _write(
        run / "metrics.jsonl",
        '{"step": 1, "wall_ns": 100, "profiled": true}\n'
        '{"step": 2, "wall_ns": "x", "profiled": 1}\n{"step": 3, "wall',
    )
    r = outcome(run)
    assert isinstance(r, Profile | InputError)
    if isinstance(r, Profile):
        assert r.ops.height == 4
        assert odd_count(r) > 0  # the torn metrics line at least


def test_run_dir_garbage_run_json(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "run.json", b"\x00{not json")
    r = outcome(run)
    assert isinstance(r, InputError)
    assert "run.json" in str(r)


def test_rank_folder_with_one_bad_rank(tmp_path: Path) -> None:
    d = tmp_path / "job"
    d.mkdir()
    _write(d / "rank-0.json", json.dumps(_trace([_ev(i) for i in range(3)])))
    _write(d / "rank-1.json", b'{"traceEvents": [{"ph": "X", "ts": ')
    r = outcome(d)
    assert isinstance(r, InputError)
    assert "rank-1.json" in str(r)


@pytest.mark.parametrize(
    "di",
    [
        {"rank": 2**40, "world_size": 2},
        {"rank": -5, "world_size": 2},
        {"rank": 1, "world_size": 10**11},
        {"rank": "7", "world_size": "x"},
        {"rank": [1], "world_size": None},
        "not json",
    ],
    ids=repr,
)
def test_garbage_distributed_info(tmp_path: Path, di: Any) -> None:
    doc = {"distributedInfo": di, "traceEvents": [_ev(i) for i in range(3)]}
    r = outcome(_write(tmp_path / "di.json", json.dumps(doc)))  # also runs diagnose: no hang
    assert isinstance(r, Profile)
    assert all(0 <= x < 2**31 for x in r.ranks)
    checks = {c.id: c for c in diagnose(r).checks}
    if "incomplete.ranks" in checks:
        assert checks["incomplete.ranks"].evidence["ranks_missing"] <= 1 << 20
