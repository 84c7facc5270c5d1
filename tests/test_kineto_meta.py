"""Top-level trace metadata, devices, ranks and exact timestamps."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl

from conftest import shared_trace
from opscope.ingest.kineto import parse_kineto


def _write(p: Path, doc: object) -> Path:
    p.write_text(json.dumps(doc))
    return p


def test_secrets_are_redacted_and_rank_parsed(tmp_path: Path) -> None:
    doc = {
        "schemaVersion": 1,
        "distributedInfo": json.dumps({"backend": "nccl", "rank": 5, "world_size": 8}),
        "metadata": {
            "env": {"HF_TOKEN": "hf_abc", "MY_API_KEY": "k", "db_password": "p", "PATH": "/bin"},
            "aws_credentials": ["x"],
            "auth": "y",
        },
        "baseTimeNanoseconds": 1700000000000000000,
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0}
        ],
    }
    prof = parse_kineto(_write(tmp_path / "t.json", doc))
    assert prof.ranks == [5]
    assert prof.events.get_column("rank").to_list() == [5]
    tm = prof.meta["trace_meta"]["5"]
    env = tm["metadata"]["env"]
    assert env == {
        "HF_TOKEN": "<redacted>",
        "MY_API_KEY": "<redacted>",
        "db_password": "<redacted>",
        "PATH": "/bin",
    }
    assert tm["metadata"]["aws_credentials"] == "<redacted>"
    assert tm["metadata"]["auth"] == "<redacted>"
    assert prof.meta["base_time_ns"] == 1700000000000000000
    assert "hf_abc" not in json.dumps(prof.meta)


def test_devices_from_device_properties() -> None:
    path = shared_trace("gpu/tracelens_h100_bert_small.json.gz")
    ref = json.loads(gzip.decompress(path.read_bytes()))["deviceProperties"]
    dev = parse_kineto(path).devices.row(0, named=True)
    assert dev["name"] == ref[0]["name"]
    assert dev["compute_units"] == ref[0]["numSms"]
    assert dev["memory_bytes"] == ref[0]["totalGlobalMem"]
    assert dev["compute_capability"] == f"{ref[0]['computeMajor']}.{ref[0]['computeMinor']}"
    assert dev["vendor"] == "nvidia"
    amd = parse_kineto(shared_trace("gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz"))
    assert set(amd.devices.get_column("vendor")) == {"amd"}


def test_large_timestamps_keep_their_ns_digits(tmp_path: Path) -> None:
    path = shared_trace("gpu/tracelens_h100_bert_small.json.gz")
    prof = parse_kineto(path)
    step = prof.events.filter(pl.col("kind") == "step").row(0, named=True)
    assert step["ts_ns"] == 1419247332972313  # "ts": 1419247332972.313
    assert step["dur_ns"] == 4426114  # "dur": 4426.114
    # beyond float64's ns resolution: epoch-based µs with fractions take the exact path
    text = (
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, '
        '"ts": 1661203463029548.123, "dur": 0.001}, {"ph": "X", "cat": "cpu_op", "name": "b", '
        '"pid": 1, "tid": 1, "ts": 1661203463029549.999, "dur": 12.345}]}'
    )
    p = tmp_path / "epoch.json"
    p.write_text(text)
    ev = parse_kineto(p).events.sort("ts_ns")
    assert ev.get_column("ts_ns").to_list() == [1661203463029548123, 1661203463029549999]
    assert ev.get_column("dur_ns").to_list() == [1, 12345]


def test_threads_and_cpu_only(tmp_path: Path) -> None:
    doc = {
        "traceEvents": [
            {"ph": "M", "name": "thread_name", "pid": 7, "tid": 9, "args": {"name": "main"}},
            {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 7, "tid": 9, "ts": 1, "dur": 2},
            {"ph": "C", "name": "mem", "pid": 7, "ts": 2, "args": {"used": 10, "free": 5.5}},
        ]
    }
    prof = parse_kineto(_write(tmp_path / "t.json", doc))
    assert prof.threads.select("pid", "tid", "name", "is_device").rows() == [(7, 9, "main", False)]
    assert not prof.has_device and prof.steps.height == 0
    assert sorted(prof.counters.select("name", "ts_ns", "value").rows()) == [
        ("mem.free", 2000, 5.5),
        ("mem.used", 2000, 10.0),
    ]
