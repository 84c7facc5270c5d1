"""opscope doctor: each check against an independent reading of the input.

Real traces are decoded here with the stdlib (json/gzip) and counted by hand; synthetic traces and
run directories are built so that the expected finding follows from how they were built.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from helpers.synth import profiler_step
from opscope.cli.app import main
from opscope.doctor import Check, Diagnosis, diagnose, doctor_warnings
from opscope.doctor.checks import (
    FREQ_DROP_RATIO,
    WARMUP_RATIO,
    known_issues,
)
from opscope.ingest import load
from opscope.model import Profile
from opscope.report.sections_md import diagnosis_md

pytestmark = pytest.mark.timeout(120)


def _raw(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    out: dict[str, Any] = json.loads(data)
    return out


def _by_id(d: Diagnosis) -> dict[str, Check]:
    return {c.id: c for c in d.checks}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in-process (saves an interpreter start per call); same exit codes."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return subprocess.CompletedProcess(list(args), rc, out.getvalue(), err.getvalue())


# -- synthetic traces -----------------------------------------------------------------------------


def _trace(
    step_us: list[float],
    *,
    kernels_per_step: list[int] | None = None,
    flags: dict[str, int] | None = None,
    stacks: bool = False,
) -> dict[str, Any]:
    """ProfilerStep#1.. with one aten op each; kernels_per_step launches (runtime + kernel)."""
    ev: list[dict[str, Any]] = []
    t = 1000.0
    corr = 1
    for i, dur in enumerate(step_us):
        s = i + 1
        ev.append(profiler_step(s, t, dur))
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": t + 1,
                "dur": dur - 2,
                "args": {"External id": s},
            }
        )
        if stacks:
            ev.append(
                {
                    "ph": "X",
                    "cat": "python_function",
                    "name": "train.py(3): step",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 0.5,
                    "dur": dur - 1,
                }
            )
        n_k = kernels_per_step[i] if kernels_per_step else 0
        for k in range(n_k):
            lt = t + 2 + k * 0.01
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": lt,
                    "dur": 0.005,
                    "args": {"correlation": corr},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "gemm",
                    "pid": 0,
                    "tid": 7,
                    "ts": lt + 1,
                    "dur": 0.5,
                    "args": {"correlation": corr, "device": 0, "stream": 7},
                }
            )
            corr += 1
        t += dur
    out: dict[str, Any] = {"schemaVersion": 1, "traceEvents": ev}
    out.update(flags or {})
    return out


def _write(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj))
    return path


# -- real traces ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_resnet_2021_step_spread_matches_stdlib() -> None:
    p = shared_trace("gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz")
    raw = _raw(p)
    steps = sorted(
        (int(e["name"].split("#")[1]), float(e["dur"]))
        for e in raw["traceEvents"]
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    )
    durs = [d for _, d in steps]
    assert durs[0] <= WARMUP_RATIO * statistics.median(durs[1:])  # no warm-up in this trace
    cv = statistics.stdev(durs) / statistics.mean(durs)
    c = _by_id(diagnose(p))
    ev = c["unstable.steps"].evidence["per_rank"]["0"]
    assert ev["steps"] == len(durs)
    assert ev["cv"] == pytest.approx(cv, abs=1e-4)
    assert c["unstable.steps"].status == ("warning" if cv > 0.10 else "ok")
    assert c["unstable.warmup"].status == "ok"


def test_h100_launches_without_device_activity() -> None:
    p = shared_trace("gpu/tracelens_h100_bert_small.json.gz")
    evs = [e for e in _raw(p)["traceEvents"] if e.get("ph") == "X"]
    device_corr = {
        e["args"]["correlation"]
        for e in evs
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        and "correlation" in e.get("args", {})
    }
    launches = [
        e
        for e in evs
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and re.search(r"(?i)launch|memcpy|memset", e["name"])
    ]
    missing = [e for e in launches if e.get("args", {}).get("correlation") not in device_corr]
    chk = _by_id(diagnose(p))["incomplete.kernels"]
    assert chk.evidence["launches"] == len(launches)
    assert chk.evidence["launches_without_device_activity"] == len(missing)
    names: dict[str, int] = {}
    for e in missing:
        names[e["name"]] = names.get(e["name"], 0) + 1
    assert chk.evidence["unlinked_by_name"] == names
    assert chk.status == ("warning" if len(missing) / len(launches) > 0.05 else "ok")
    assert len(missing) > 0  # this real trace does lose its memset activity


def test_h100_options_on_and_data_present() -> None:
    p = shared_trace("gpu/tracelens_h100_bert_small.json.gz")
    raw = _raw(p)
    c = _by_id(diagnose(p))
    for cid, opt in (
        ("missing.stacks", "with_stack"),
        ("missing.shapes", "record_shapes"),
        ("missing.memory", "profile_memory"),
    ):
        assert raw[opt] == 1
        assert c[cid].status == "ok"
        assert c[cid].evidence["recorded_flag"]["0"] is True
    n_shapes = sum(
        1
        for e in raw["traceEvents"]
        if e.get("cat") == "cpu_op" and e.get("args", {}).get("Input Dims") not in (None, [])
    )
    assert c["missing.shapes"].evidence["rows"] == n_shapes


def test_multirank_missing_ranks_and_options() -> None:
    d = shared_trace("multi_rank/hta_sampled_128rank_job")
    worlds, ranks, flags = set(), set(), []
    for f in sorted(d.glob("*.json.gz")):
        raw = _raw(f)
        worlds.add(raw["distributedInfo"]["world_size"])
        ranks.add(raw["distributedInfo"]["rank"])
        flags.append({k: raw.get(k) for k in ("with_stack", "record_shapes", "profile_memory")})
        has_py = any(e.get("cat") == "python_function" for e in raw["traceEvents"])
        assert not has_py
    (world,) = worlds
    c = _by_id(diagnose(d))
    r = c["incomplete.ranks"]
    assert r.status == "error"
    assert r.evidence["world_size"] == world
    assert r.evidence["ranks_missing"] == world - len(ranks)
    assert r.evidence["ranks_present"] == sorted(ranks)
    assert all(f["with_stack"] is None for f in flags)
    assert c["missing.stacks"].status == "warning"
    assert "with_stack=True" in c["missing.stacks"].action
    assert c["missing.shapes"].status == "ok"  # record_shapes was on in these traces


def test_ascend_clock_counter_matches_trace_view() -> None:
    d = shared_trace("ascend/alexnet_ddp_910b/level1_rank0_ascend_pt")
    tv = json.loads((d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    vals = [
        float(next(iter(e["args"].values())))
        for e in tv
        if e.get("ph") == "C" and e.get("name") == "AI Core Freq"
    ]
    assert vals
    chk = _by_id(diagnose(d))["unstable.clock"]
    ev = chk.evidence["counters"]["0/AI Core Freq"]
    assert (ev["min"], ev["max"], ev["samples"]) == (min(vals), max(vals), len(vals))
    assert chk.status == ("warning" if min(vals) < FREQ_DROP_RATIO * max(vals) else "ok")


# -- synthetic ------------------------------------------------------------------------------------


def test_clock_drop_warns() -> None:
    counters = pl.DataFrame(
        {
            "rank": [0, 0, 0],
            "name": ["AI Core Freq"] * 3,
            "ts_ns": [0, 10, 20],
            "value": [1800.0, 1200.0, 1800.0],
        }
    )
    prof = Profile.from_tables(counters=counters)
    chk = _by_id(diagnose(prof))["unstable.clock"]
    assert chk.status == "warning"
    assert chk.evidence["counters"]["0/AI Core Freq"]["min"] == 1200.0


def test_warmup_and_spread(tmp_path: Path) -> None:
    durs = [900.0, 300.0, 310.0, 290.0, 305.0]
    c = _by_id(diagnose(_write(tmp_path / "w.json", _trace(durs))))
    w = c["unstable.warmup"]
    assert w.status == "warning"
    assert w.evidence["ranks"]["0"]["step"] == 1
    assert w.evidence["ranks"]["0"]["ratio"] == pytest.approx(
        900.0 / statistics.median(durs[1:]), abs=1e-3
    )
    s = c["unstable.steps"]  # warm-up excluded from the spread
    assert s.evidence["per_rank"]["0"]["cv"] == pytest.approx(
        statistics.stdev(durs[1:]) / statistics.mean(durs[1:]), abs=1e-4
    )
    assert s.status == "ok"
    noisy = [300.0, 500.0, 250.0, 450.0, 200.0]
    s2 = _by_id(diagnose(_write(tmp_path / "n.json", _trace(noisy))))["unstable.steps"]
    assert s2.status == "warning"
    assert s2.evidence["per_rank"]["0"]["cv"] == pytest.approx(
        statistics.stdev(noisy) / statistics.mean(noisy), abs=1e-4
    )


def test_options_off_name_the_option(tmp_path: Path) -> None:
    c = _by_id(diagnose(_write(tmp_path / "off.json", _trace([100.0] * 3))))
    for cid, opt in (
        ("missing.stacks", "with_stack"),
        ("missing.shapes", "record_shapes"),
        ("missing.memory", "profile_memory"),
    ):
        assert c[cid].status == "warning"
        assert f"{opt}=True" in c[cid].action
    on = _trace([100.0] * 3, flags={"with_stack": 1}, stacks=True)
    c2 = _by_id(diagnose(_write(tmp_path / "on.json", on)))
    assert c2["missing.stacks"].status == "ok"
    assert c2["missing.stacks"].evidence["rows"] >= 3
    flag_no_data = _trace([100.0] * 3, flags={"profile_memory": 1})
    c3 = _by_id(diagnose(_write(tmp_path / "nodata.json", flag_no_data)))
    assert c3["missing.memory"].status == "warning"
    assert "although profile_memory was on" in c3["missing.memory"].title


def test_last_step_cut_off(tmp_path: Path) -> None:
    good = _trace([100.0] * 4, kernels_per_step=[3, 3, 3, 3])
    c = _by_id(diagnose(_write(tmp_path / "g.json", good)))
    assert c["incomplete.last_step"].status == "ok"
    assert c["incomplete.kernels"].status == "ok"
    cut = _trace([100.0] * 4, kernels_per_step=[3, 3, 3, 3])
    # Drop the last step's kernels (the trace ended before their activity was flushed).
    last_corr = {10, 11, 12}
    cut["traceEvents"] = [
        e
        for e in cut["traceEvents"]
        if not (e.get("cat") == "kernel" and e["args"]["correlation"] in last_corr)
    ]
    c2 = _by_id(diagnose(_write(tmp_path / "c.json", cut)))
    ls = c2["incomplete.last_step"]
    assert ls.status == "warning"
    assert ls.evidence["ranks"]["0"] == {
        "last_step": 4,
        "device_ops_in_last_step": 0,
        "median_device_ops_in_earlier_steps": 3.0,
    }
    k = c2["incomplete.kernels"]
    assert k.evidence["launches_without_device_activity"] == 3
    assert k.evidence["launches"] == 12
    assert k.status == "warning"


def test_truncated_trace_is_diagnosed(tmp_path: Path) -> None:
    data = json.dumps(_trace([100.0] * 6), indent=1).encode()
    p = tmp_path / "t.json"
    p.write_bytes(data[: int(len(data) * 0.6)])
    chk = _by_id(diagnose(p))["incomplete.truncated"]
    assert chk.status == "error"
    assert chk.evidence["events"] > 0


def _run_dir(
    tmp_path: Path,
    *,
    steps_traced: int,
    free: int,
    procs: list[Any],
    metrics: list[tuple[int, int, bool]],
) -> Path:
    run = tmp_path / "run"
    (run / "rank0").mkdir(parents=True)
    _write(run / "rank0" / "trace.json", _trace([100.0] * steps_traced))
    info = {
        "format": "opscope-run",
        "format_version": 1,
        "world_size": 1,
        "profiler": {
            "wait": 1,
            "warmup": 1,
            "active": 3,
            "repeat": 1,
            "skip_first": 0,
            "record_shapes": True,
            "profile_memory": True,
            "with_stack": True,
            "every": None,
            "every_epochs": None,
        },
        "device_processes": {"processes": procs, "reason": None},
        "disk_free_bytes": free,
        "status": "failed",
        "steps": {"total": 4, "profiled": [2, 3], "traces": ["rank0/trace.json"]},
        "versions": {"torch": "2.1.0+cu118"},
    }
    _write(run / "run.json", info)
    lines = [
        json.dumps({"step": s, "wall_ns": w, "profiled": pr, "rank": 0}) for s, w, pr in metrics
    ]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_run_dir_checks(tmp_path: Path) -> None:
    metrics = [
        (0, 9_000_000, False),
        (1, 1_000_000, False),
        (2, 1_400_000, True),
        (3, 1_300_000, True),
        (4, 1_100_000, False),
    ]
    procs = [{"pid": 4242, "name": "python", "memory_mib": 900}]
    run = _run_dir(tmp_path, steps_traced=2, free=512 * 2**20, procs=procs, metrics=metrics)
    c = _by_id(diagnose(run))
    st = c["incomplete.steps"]
    assert st.status == "warning"
    assert st.evidence["requested_active_steps"] == 3
    assert st.evidence["steps_in_trace_per_rank"] == {"0": 2}
    assert c["incomplete.disk"].status == "warning"
    assert c["incomplete.disk"].evidence["disk_free_bytes"] == 512 * 2**20
    assert c["unstable.processes"].status == "warning"
    assert c["unstable.processes"].evidence["processes"] == procs
    o = c["unstable.overhead"]
    prof = statistics.median([1_400_000, 1_300_000])
    plain = statistics.median([1_000_000, 1_100_000])  # step 0 is warm-up, left out
    assert o.evidence["overhead"] == pytest.approx(prof / plain - 1, abs=1e-4)
    assert o.status == "warning"
    # stacks were on (run.json) and the trace has none: the known torch 2.0-2.2 issue is named
    s = c["missing.stacks"]
    assert s.evidence["recorded_flag"]["run.json"] is True
    assert "pytorch/pytorch#100253" in s.evidence["known_version_issues"][0]["source"]


def test_known_issue_table_bounds() -> None:
    assert known_issues({"torch": "2.2.1"}, "stacks")
    assert not known_issues({"torch": "2.3.0"}, "stacks")
    assert not known_issues({"torch": "1.13.1"}, "stacks")
    assert not known_issues({"torch": "2.1.0"}, "shapes")
    assert not known_issues({"torch": "garbage"}, "stacks")


def test_json_markdown_and_warnings(tmp_path: Path) -> None:
    d = diagnose(_write(tmp_path / "w.json", _trace([900.0, 300.0, 300.0, 300.0])))
    js = json.loads(json.dumps(d.to_json()))
    assert js["status"] == d.status == "warning"
    assert [c["id"] for c in js["checks"]] == [c.id for c in d.checks]
    md = diagnosis_md(d)
    assert "| warning | `unstable.warmup` |" in md
    assert "**What to do:**" in md
    w = doctor_warnings(load(tmp_path / "w.json"))
    assert w == [f"{c.status}: {c.title} [{c.id}]" for c in d.problems]
    assert any("unstable.warmup" in line for line in w)


def test_cli_exit_codes(tmp_path: Path) -> None:
    p = _write(tmp_path / "w.json", _trace([900.0, 300.0, 300.0, 300.0]))
    r = _cli("doctor", str(p), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "warning"
    r = _cli("doctor", str(p))
    assert r.returncode == 0 and "unstable.warmup" in r.stdout
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\x00\x01 not json")
    r = _cli("doctor", str(bad))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert len([x for x in r.stderr.splitlines() if x.strip()]) == 1
    assert "bad.json" in r.stderr


def test_cli_subprocess_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00 not really gzip")
    r = subprocess.run(
        [sys.executable, "-m", "opscope", "doctor", str(bad)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "bad.json.gz" in r.stderr


def test_trace_meta_is_one_header_per_rank(tmp_path: Path) -> None:
    """``meta["trace_meta"]`` maps each rank to that trace's header (not nested again)."""
    d = shared_trace("multi_rank/hta_sampled_128rank_job")
    prof = load(d)
    for f in sorted(d.glob("*.json.gz")):
        raw = _raw(f)
        rank = str(raw["distributedInfo"]["rank"])
        assert prof.meta["trace_meta"][rank]["distributedInfo"] == raw["distributedInfo"]
    run = tmp_path / "run"
    (run / "rank0").mkdir(parents=True)
    _write(run / "rank0" / "t.json", _trace([100.0] * 3, flags={"with_stack": 1}))
    _write(run / "run.json", {"format": "opscope-run"})
    assert load(run).meta["trace_meta"]["0"]["with_stack"] == 1


def test_kernels_without_launch(tmp_path: Path) -> None:
    t = _trace([100.0] * 3, kernels_per_step=[2, 2, 2])
    ok = _by_id(diagnose(_write(tmp_path / "ok.json", t)))["incomplete.flows"]
    assert ok.status == "ok"
    assert ok.evidence["kernels"] == 6
    # Strip the correlation from half the kernels: they can no longer be traced to a launch.
    n = 0
    for e in t["traceEvents"]:
        if e.get("cat") == "kernel" and e["args"]["correlation"] % 2:
            del e["args"]["correlation"]
            n += 1
    c = _by_id(diagnose(_write(tmp_path / "cut.json", t)))["incomplete.flows"]
    assert c.status == "warning"
    assert c.evidence["kernels_without_launch"] == n == 3


def test_mi300x_kernels_without_launch_match_raw() -> None:
    p = shared_trace("gpu/tracelens_mi300x_resnet_actckpt_rank0of8.json.gz")
    evs = [e for e in _raw(p)["traceEvents"] if e.get("ph") == "X"]
    launch_corr = {
        e["args"].get("correlation")
        for e in evs
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e
    }
    dev = [e for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    orphans = [e for e in dev if e.get("args", {}).get("correlation") not in launch_corr]
    # the warm-up step's work still running when profiling began: no launch, before every
    # linked kernel (the device runs ~30 ms behind the host here)
    first = min(e["ts"] for e in dev if e.get("args", {}).get("correlation") in launch_corr)
    queued = [e for e in orphans if e["ts"] < first]
    assert len(queued) == 968
    chk = _by_id(diagnose(p))["incomplete.flows"]
    assert chk.evidence["kernels"] == len(dev)
    assert chk.evidence["queued_before_profiling"] == len(queued)
    assert chk.evidence["kernels_without_launch"] == len(orphans) - len(queued)
    rest = (len(orphans) - len(queued)) / len(dev)
    assert chk.status == ("warning" if rest > 0.05 else "ok")


def test_mi250_last_step_without_device_work() -> None:
    p = shared_trace("gpu/hta_amd_mi250_minitoy.json.gz")
    evs = [e for e in _raw(p)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted(
        (int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"])
        for e in evs
        if e["name"].startswith("ProfilerStep#")
    )
    last, t0, t1 = steps[-1]
    dev = [e for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    # Device work is charged to the step of its launch; none is launched inside the last step.
    launches = [
        e
        for e in evs
        if e.get("cat") == "cuda_runtime"
        and t0 <= e["ts"] < t1
        and re.search(r"(?i)launch|memcpy|memset", e["name"])
    ]
    assert dev and not launches
    chk = _by_id(diagnose(p))["incomplete.last_step"]
    assert chk.status == "warning"
    assert chk.evidence["ranks"]["0"]["last_step"] == last
    assert chk.evidence["ranks"]["0"]["device_ops_in_last_step"] == 0
