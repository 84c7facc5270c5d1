"""compare on real files: generated Kineto traces, the CLI and its CI gate, real CPU runs of a
model and its fixed twin, and the two GPU traces in ../shared/traces/compare."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import shared_trace
from opscope.analysis.compare import Comparison, compare
from opscope.cli.app import main


def _write_kineto(path: Path, x_us: float, *, steps: int = 5, seed: int = 0) -> dict[str, float]:
    """A CPU Kineto trace: per step aten::X (``x_us``), aten::Y (500) and aten::Z (300) µs, each
    ± 2 µs. Returns the planted total µs per operator."""
    r = random.Random(seed)
    events: list[dict[str, Any]] = []
    planted: dict[str, float] = {}
    t = 1_000_000.0
    ext = 1
    for s in range(steps):
        start = t
        ops = []
        for name, base in (("aten::X", x_us), ("aten::Y", 500.0), ("aten::Z", 300.0)):
            dur = round(base + r.uniform(-2, 2), 3)
            planted[name] = planted.get(name, 0.0) + dur
            ops.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": name,
                    "pid": 7,
                    "tid": 7,
                    "ts": round(t, 3),
                    "dur": dur,
                    "args": {"External id": ext, "Input Dims": [[4, 4]], "Input type": ["float"]},
                }
            )
            ext += 1
            t += dur + 1.0
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s}",
                "pid": 7,
                "tid": 7,
                "ts": round(start - 0.5, 3),
                "dur": round(t - start + 0.5, 3),
                "args": {"External id": ext},
            }
        )
        ext += 1
        events.extend(ops)
        t += 5.0
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return planted


@pytest.fixture()
def planted_pair(tmp_path: Path) -> tuple[Path, Path, dict[str, float], dict[str, float]]:
    a, b = tmp_path / "before.json", tmp_path / "after.json"
    pa = _write_kineto(a, 1000.0, seed=1)
    pb = _write_kineto(b, 250.0, seed=2)
    return a, b, pa, pb


def _row(c: Comparison, kind: str, key: str) -> dict[str, Any]:
    rows = c.rows.filter((pl.col("kind") == kind) & (pl.col("key") == key)).to_dicts()
    assert len(rows) == 1, (kind, key)
    return rows[0]


def test_planted_kineto_traces(planted_pair: tuple[Path, Path, Any, Any]) -> None:
    a, b, pa, pb = planted_pair
    c = compare(a, b)
    x = _row(c, "op", "aten::X")
    assert x["before_us"] == pytest.approx(pa["aten::X"], abs=0.01)
    assert x["after_us"] == pytest.approx(pb["aten::X"], abs=0.01)
    assert x["speedup"] == pytest.approx(4.0, rel=0.02)
    assert x["verdict"] == "gain"
    assert _row(c, "op", "aten::Y")["verdict"] == "noise"
    assert _row(c, "op", "aten::Z")["verdict"] == "noise"
    same = compare(a, a)
    assert set(same.rows.get_column("speedup")) == {1.0}
    assert not any(same.rows.get_column("significant"))


def test_cli_gate_fails_on_a_planted_regression(
    planted_pair: tuple[Path, Path, Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, _, _ = planted_pair
    # b is faster than a: reversed, it is a ~40 % slower step
    assert main(["compare", str(b), str(a), "--fail-if-slower", "10"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "regressed" in err and "more than 10%" in err and "noise" in err
    assert main(["compare", str(a), str(b), "--fail-if-slower", "10"]) == 0
    assert main(["compare", str(a), str(a), "--fail-if-slower", "0"]) == 0
    # a regression under the threshold passes
    assert main(["compare", str(b), str(a), "--fail-if-slower", "90"]) == 0


def test_cli_json_and_markdown(
    planted_pair: tuple[Path, Path, Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, pa, pb = planted_pair
    assert main(["compare", str(a), str(b), "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    x = next(r for r in j["rows"] if r["kind"] == "op" and r["key"] == "aten::X")
    assert x["speedup"] == pytest.approx(pa["aten::X"] / pb["aten::X"], rel=1e-4)
    assert x["significant"] is True
    assert j["step_time"]["speedup"] > 1.5
    assert main(["compare", str(a), str(b), "--md", "--top", "3"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("### opscope compare")
    assert "| aten::X (" not in md or "faster" in md
    assert "faster" in md
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "aten::X" in out and "step time" in out


def test_cli_bad_inputs_exit_2_with_one_line(
    tmp_path: Path, planted_pair: tuple[Path, Path, Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    a, _, _, _ = planted_pair
    garbage = tmp_path / "garbage.json"
    garbage.write_text("this is not a trace {")
    assert main(["compare", str(a), str(garbage)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "garbage.json" in err
    missing = tmp_path / "missing.json"
    assert main(["compare", str(missing), str(a)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing.json" in err
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "aten::Q",
                        "pid": 1,
                        "tid": 1,
                        "ts": 1.0,
                        "dur": 5.0,
                        "args": {},
                    }
                ]
            }
        )
    )
    assert main(["compare", str(a), str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no common operators between" in err


# Real CPU runs: a model and its fixed twin ----------------------------------------------------


def _record(tmp: Path, fixed: bool) -> tuple[Path, dict[str, tuple[float, int]]]:
    torch = pytest.importorskip("torch")
    from torch.nn import functional as F
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    x = torch.randn(32, 64)
    w = torch.randn(64, 64)
    bias = torch.randn(64)

    def slow() -> Any:
        y = torch.matmul(x, w.t())
        return y + bias

    def fast() -> Any:
        return F.linear(x, w, bias)

    fn = fast if fixed else slow
    path = tmp / ("fixed.json" if fixed else "slow.json")
    avg: dict[str, tuple[float, int]] = {}

    def ready(p: Any) -> None:
        p.export_chrome_trace(str(path))
        # the profiler clears its events after the cycle: take torch's own averages here
        for e in p.key_averages():
            if not e.key.startswith("ProfilerStep"):
                avg[e.key] = (e.cpu_time_total, e.count)

    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,  # the semantic GEMM row needs M, N, K
        schedule=schedule(wait=0, warmup=1, active=5),
        on_trace_ready=ready,
    ) as prof:
        for _ in range(6):
            for _ in range(4):
                fn()
            prof.step()
    return path, avg


@pytest.mark.slow
@pytest.mark.torch
def test_real_cpu_model_against_its_fixed_twin(tmp_path: Path) -> None:
    pytest.importorskip("torch").set_num_threads(1)
    slow_path, slow_avg = _record(tmp_path, fixed=False)
    fast_path, fast_avg = _record(tmp_path, fixed=True)
    c = compare(slow_path, fast_path)
    assert c.basis == "host"
    assert c.sides.get_column("steps").to_list() == [5, 5]
    common = set(slow_avg) & set(fast_avg)
    ops = {r["key"]: r for r in c.rows.filter(pl.col("kind") == "op").to_dicts()}
    assert common and common <= set(ops)
    for name in common:
        r = ops[name]
        # independent: torch's own key_averages of the same runs
        assert r["before_us"] == pytest.approx(slow_avg[name][0], rel=0.01, abs=0.5), name
        assert r["after_us"] == pytest.approx(fast_avg[name][0], rel=0.01, abs=0.5), name
        assert r["calls_before"] == slow_avg[name][1]
        assert r["calls_after"] == fast_avg[name][1]
        assert r["verdict"] in {"gain", "loss", "noise"}  # 5 steps each: always tested
    removed = set(c.removed.filter(pl.col("kind") == "op").get_column("key"))
    added = set(c.added.filter(pl.col("kind") == "op").get_column("key"))
    assert removed == set(slow_avg) - set(fast_avg)
    assert added == set(fast_avg) - set(slow_avg)
    assert {"aten::matmul", "aten::mm"} <= removed
    assert {"aten::linear", "aten::addmm"} <= added
    assert c.summary.row(0)[0].startswith("step time")
    # ...but the GEMM is one semantic row: matmul(x[32,64], w.t()[64,64]) and
    # linear(x[32,64], w[64,64], bias) are both M=32 N=64 K=64, timed by their outer op
    gemm = c.rows.filter(
        (pl.col("kind") == "semantic") & (pl.col("key") == "fwd · GEMM M=32 N=64 K=64 · fp32")
    ).to_dicts()
    assert len(gemm) == 1
    assert gemm[0]["before_us"] == pytest.approx(slow_avg["aten::matmul"][0], rel=0.01, abs=0.5)
    assert gemm[0]["after_us"] == pytest.approx(fast_avg["aten::linear"][0], rel=0.01, abs=0.5)
    assert (gemm[0]["calls_before"], gemm[0]["calls_after"]) == (20, 20)


# The two GPU traces of different jobs --------------------------------------------------------

_CONTROL = "compare/hta_trace_diff_control_a100_rank3of8.json.gz"
_TEST = "compare/hta_trace_diff_test_v100_rank1of2.json.gz"


def _raw(path: Path) -> dict[str, Any]:
    """Independent figures from the raw JSON (stdlib only): in-step kernel totals and op calls."""
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    steps = [
        (e["ts"], e["ts"] + e["dur"])
        for e in ev
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    ]

    def in_step(ts: float) -> bool:
        return any(s <= ts < e for s, e in steps)

    launch_ts = {
        e["args"]["correlation"]: e["ts"]
        for e in ev
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    kernels: dict[str, list[float]] = {}
    for e in ev:
        if e.get("cat") == "kernel":
            # the step of its launch; a kernel whose launch is not in the trace: its own start
            ts = launch_ts.get(e["args"].get("correlation"), e["ts"])
            if in_step(ts):
                kernels.setdefault(e["name"], []).append(e["dur"])
    op_calls: dict[str, int] = {}
    for e in ev:
        if e.get("cat") == "cpu_op" and in_step(e["ts"]):
            op_calls[e["name"]] = op_calls.get(e["name"], 0) + 1
    return {"steps": len(steps), "kernels": kernels, "op_calls": op_calls}


@pytest.mark.slow
def test_two_gpu_traces_of_different_jobs() -> None:
    a, b = shared_trace(_CONTROL), shared_trace(_TEST)
    c = compare(a, b)
    ra, rb = _raw(a), _raw(b)
    assert c.basis == "device"
    assert c.sides.get_column("steps").to_list() == [ra["steps"], rb["steps"]]
    # common operators are matched, with their calls
    ops = {r["key"]: r for r in c.rows.filter(pl.col("kind") == "op").to_dicts()}
    assert "aten::mm" in ops
    assert ops["aten::mm"]["calls_before"] == ra["op_calls"]["aten::mm"]
    assert ops["aten::mm"]["calls_after"] == rb["op_calls"]["aten::mm"]
    # one matched kernel's totals, from the raw JSON
    common = set(ra["kernels"]) & set(rb["kernels"])
    name = max(common, key=lambda k: sum(ra["kernels"][k]))
    k = _row(c, "kernel", name)
    assert k["before_us"] == pytest.approx(sum(ra["kernels"][name]), rel=1e-9)
    assert k["after_us"] == pytest.approx(sum(rb["kernels"][name]), rel=1e-9)
    assert k["calls_before"] == len(ra["kernels"][name])
    # added and removed rows are really one-sided
    removed_ops = set(c.removed.filter(pl.col("kind") == "op").get_column("key"))
    added_ops = set(c.added.filter(pl.col("kind") == "op").get_column("key"))
    assert removed_ops and added_ops
    assert not removed_ops & set(rb["op_calls"])
    assert not added_ops & set(ra["op_calls"])
    # kernels renamed between A100 and V100 (e.g. GEMMs) are matched through their host op
    assert c.rows.filter((pl.col("kind") == "kernel") & (pl.col("match") == "host op")).height > 0


@pytest.mark.slow
def test_cuda_trace_against_an_ascend_directory() -> None:
    cuda = shared_trace("gpu/kineto_resnet50_v100_train_2021.pt.trace.json.gz")
    npu = shared_trace("ascend/alexnet_ddp_910b/level1_rank0_ascend_pt")
    c = compare(cuda, npu)
    assert c.basis == "device"
    with gzip.open(cuda, "rt") as f:
        ev = json.load(f)["traceEvents"]
    steps = [
        (e["ts"], e["ts"] + e["dur"])
        for e in ev
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    convs = sum(
        1
        for e in ev
        if e.get("cat") in ("Operator", "cpu_op")
        and e.get("name") == "aten::conv2d"
        and any(s <= e["ts"] < t for s, t in steps)
    )
    r = _row(c, "op", "aten::conv2d")
    assert r["calls_before"] == convs
    assert r["calls_after"] > 0 and r["after_us"] > 0
    # one step on the Ascend side: per-step averages, changes untested
    assert "per-step" in c.normalisation
    assert r["verdict"] == "untested"
