"""Roofline figures on synthetic profiles and on a real H100 trace."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from conftest import shared_trace
from opscope.analysis.registry import Options, run
from opscope.analysis.roofline import LATENCY_NS, roofline
from opscope.model import Profile
from opscope.report.sections_md import roofline_md

BF16 = '["c10::BFloat16","c10::BFloat16","c10::BFloat16","Scalar","Scalar"]'


def _profile(kernel_ns: list[int], device: str = "NVIDIA H100 80GB HBM3") -> Profile:
    # two calls of linear -> addmm (bf16, [4096,1024] x [1024,4096]); kernels under addmm
    rows = []
    kid = 100
    for call in range(2):
        base = call * 10
        rows.append(
            {
                "id": base,
                "kind": "cpu_op",
                "name": "aten::linear",
                "depth": 0,
                "ts_ns": call * 1_000_000,
                "dur_ns": 50_000,
                "input_dims": "[[4096,1024],[4096,1024],[4096]]",
                "input_types": '["c10::BFloat16","c10::BFloat16","c10::BFloat16"]',
            }
        )
        rows.append(
            {
                "id": base + 1,
                "kind": "cpu_op",
                "name": "aten::addmm",
                "depth": 1,
                "parent_id": base,
                "ts_ns": call * 1_000_000 + 10,
                "dur_ns": 40_000,
                "input_dims": "[[4096],[4096,1024],[1024,4096],[],[]]",
                "input_types": BF16,
                "flops": 2 * 4096 * 4096 * 1024,
            }
        )
        for j, d in enumerate(kernel_ns):
            rows.append(
                {
                    "id": kid,
                    "kind": "kernel",
                    "name": f"sm90_gemm_{j}",
                    "op_id": base + 1,
                    "ts_ns": call * 1_000_000 + 100 + j * 1000,
                    "dur_ns": d,
                    "stream": 7,
                }
            )
            kid += 1
    ev = pl.DataFrame(rows).with_columns(pl.col("id").alias("id"))
    devices = pl.DataFrame(
        {
            "rank": [0],
            "device": [0],
            "name": [device],
            "vendor": ["nvidia"],
            "compute_units": [132],
            "memory_bytes": [85018279936],
        }
    )
    return Profile.from_tables(events=ev, devices=devices)


def test_synthetic_linear_group() -> None:
    p = _profile([300_000, 100_000])
    res = roofline(p, Options())
    assert res.calls.height == 2  # the addmm inside each linear is not counted again
    g = res.groups.row(0, named=True)
    assert g["name"] == "aten::linear" and g["calls"] == 2
    flops = 2 * 2 * 4096 * 4096 * 1024
    secs = 2 * 400_000 / 1e9
    assert g["flops"] == flops
    assert g["torch_flops"] == flops
    assert g["achieved_tflops"] == pytest.approx(flops / secs / 1e12)
    nbytes = 2 * (4096 * 1024 * 2 + 4096 * 1024 * 2 + 4096 * 2 + 4096 * 4096 * 2)
    assert g["bytes"] == nbytes
    assert g["intensity"] == pytest.approx(flops / nbytes)
    # ridge of an H100 SXM in bf16: 989.5e12 / 3.35e12 = 295 FLOP/B; 680 FLOP/B is right of it
    assert flops / nbytes > 989.5e12 / 3.35e12
    assert g["pct_of_peak"] == pytest.approx(flops / secs / 989.5e12 * 100)
    assert g["bound"] == "latency"  # 8.7 % of the compute roof: below LATENCY_PCT
    fast = roofline(_profile([30_000, 10_000]), Options()).groups.row(0, named=True)
    assert fast["pct_of_peak"] == pytest.approx(10 * g["pct_of_peak"])
    assert fast["bound"] == "compute"
    assert res.to_json()[0]["input_shapes"] == [[4096, 1024], [4096, 1024], [4096]]
    assert "aten::linear" in roofline_md(res)


def test_short_calls_are_latency_bound_and_unknown_device_has_no_peak() -> None:
    p = _profile([LATENCY_NS // 4], device="Mystery Accelerator 9000")
    res = run("roofline", p)
    g = res.groups.row(0, named=True)  # type: ignore[attr-defined]
    assert g["pct_of_peak"] is None
    assert g["bound"] == "latency"
    assert "no peaks" in res.peaks_note  # type: ignore[attr-defined]


def test_h100_trace_matmul_group_against_raw_json() -> None:
    path = shared_trace("gpu/tracelens_h100_bert_small.json.gz")
    from opscope.ingest import kineto as ingest

    profile = ingest.read_kineto(path, cache=False)
    res = roofline(profile, Options())
    # independent: sum the kernels launched (correlation -> External id) under every
    # aten::linear call of each shape, from the raw JSON
    data = json.loads(gzip.decompress(path.read_bytes()))
    ev = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    linears = [e for e in ops if e["name"] == "aten::linear"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    # kernels are attributed to the innermost op by External id; map each op to its linear by
    # time containment on the same thread
    ext_to_linear: dict[int, int] = {}
    for o in ops:
        for i, lin in enumerate(linears):
            if (
                o["tid"] == lin["tid"]
                and lin["ts"] <= o["ts"]
                and o["ts"] + o["dur"] <= lin["ts"] + lin["dur"]
            ):
                ext_to_linear[o["args"]["External id"]] = i
    dur: dict[str, float] = defaultdict(float)
    for k in kernels:
        i = ext_to_linear.get(k["args"].get("External id"))
        if i is not None:
            dims = json.dumps(linears[i]["args"]["Input Dims"], separators=(",", ":"))
            dur[dims] += k["dur"]
    lin_groups = res.groups.filter(pl.col("name") == "aten::linear")
    assert lin_groups.height == len(dur)
    for r in lin_groups.iter_rows(named=True):
        dims = json.loads(r["input_dims"])
        x, w = dims[0], dims[1]
        m = 1
        for v in x[:-1]:
            m *= v
        ours = 2 * m * w[0] * w[1] * r["calls"]
        assert r["flops"] == ours
        assert r["achieved_tflops"] == pytest.approx(
            ours / (dur[r["input_dims"]] * 1e-6) / 1e12, rel=1e-3
        )


def test_ascend_matmul_kernels_against_kernel_details_csv() -> None:
    import csv

    root = shared_trace("ascend/alexnet_ddp_910b/level1_rank0_ascend_pt")
    from opscope.ingest import ascend

    profile = ascend.read_ascend(root, cache=False)
    res = roofline(profile, Options())
    # independent: every MatMulV2 row of kernel_details.csv, FLOPs from the output [M, N] and
    # the first input's other dim K; duration and cube utilisation straight from the CSV
    with (root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["Type"] == "MatMulV2"]
    assert rows
    want: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in rows:
        shapes = [[int(v) for v in s.split(",")] for s in r["Input Shapes"].strip('"').split(";")]
        m, n = (int(v) for v in r["Output Shapes"].strip('"').split(","))
        a = shapes[0]
        k = a[1] if a[0] == m else a[0]
        dims = json.dumps(shapes, separators=(",", ":"))
        dur = float(r["Duration(us)"])
        want[dims][0] += 2 * m * n * k
        want[dims][1] += dur
        want[dims][2] += float(r["cube_utilization(%)"]) * dur
    got = res.kernel_groups.filter(pl.col("name") == "MatMulV2")
    assert got.height == len(want)
    for g in got.iter_rows(named=True):
        flops, dur, cube = want[g["input_dims"]]
        assert g["flops"] == flops
        assert g["time_ns"] == pytest.approx(dur * 1000, abs=g["calls"])
        assert g["achieved_tflops"] == pytest.approx(flops / (dur * 1e-6) / 1e12, rel=1e-4)
        assert g["cube_utilization(%)"] == pytest.approx(cube / dur, rel=1e-6)


def test_training_step_backward_costs_from_the_ops_it_runs(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from opscope.ingest import kineto

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 8 * 8, 10),
    )
    x = torch.randn(2, 3, 8, 8)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        model(x).sum().backward()
    trace = tmp_path / "train.json"
    prof.export_chrome_trace(str(trace))
    res = roofline(kineto.read_kineto(trace, cache=False), Options())
    g = res.groups
    # the input needs no gradient: the conv's backward computes grad_weight only, one forward's
    # worth: 2 * N * C_out * H * W * C_in * kh * kw
    conv_bwd = g.filter(pl.col("name") == "aten::convolution_backward")
    assert conv_bwd.get_column("flops").to_list() == [2 * 2 * 4 * 8 * 8 * 3 * 3 * 3]
    # the linear's backward: grad_input [2,10] @ [10,256] and grad_weight [10,2] @ [2,256]
    mm = g.filter(pl.col("name") == "aten::mm")
    assert mm.get_column("flops").sum() == 2 * 2 * 256 * 10 + 2 * 10 * 256 * 2
    # the autograd nodes above them are not counted again
    names = g.get_column("name").to_list()
    assert not any("ConvolutionBackward0" in n or "AddmmBackward0" in n for n in names)


def test_ops_without_kernels_on_a_device_profile_have_no_rates() -> None:
    p = _profile([300_000])
    extra = pl.DataFrame(
        {"id": [500], "kind": ["cpu_op"], "name": ["aten::mul"], "depth": [0],
         "ts_ns": [5_000_000], "dur_ns": [2_000], "input_dims": ["[[8,8],[8,8]]"],
         "input_types": ['["float","float"]']}
    )  # fmt: skip
    p = p.with_tables(events=pl.concat([p.events, extra], how="diagonal_relaxed"))
    res = roofline(p, Options())
    mul = res.groups.filter(pl.col("name") == "aten::mul").row(0, named=True)
    assert mul["flops"] == 64 and mul["time_ns"] is None
    assert mul["achieved_tflops"] is None and mul["pct_of_peak"] is None
    assert res.calls.filter(pl.col("name") == "aten::mul").get_column("time_source")[0] == "none"


def test_device_name_option_overrides_the_profile() -> None:
    p = _profile([30_000, 10_000])
    h100 = roofline(p, Options()).groups.row(0, named=True)
    a100 = roofline(p, Options(device_name="NVIDIA A100-SXM4-80GB"))
    assert "A100 SXM4 80GB" in a100.peaks_note
    g = a100.groups.row(0, named=True)
    # same work and time, held against 312 instead of 989.5 bf16 TFLOP/s
    assert g["pct_of_peak"] == pytest.approx(h100["pct_of_peak"] * 989.5 / 312)


def test_peaks_are_the_device_tables_peaks(monkeypatch: pytest.MonkeyPatch) -> None:
    # the peaks looked up by each row's (dtype, roof) equal DeviceSpec.peak of the same pair on
    # every device of the table, for every dtype class, fallbacks (tf32, fp16/bf16 on vector
    # units), unknown and empty dtypes, nulls and roofs other than "matrix"; one query (the
    # dtypes' codes), none without a device
    from helpers.spies import count_queries
    from opscope.analysis.devices import DEVICES
    from opscope.analysis.roofline import _peaks
    from opscope.model.dtypes import DTYPES

    dtypes = sorted({d.peak for d in DTYPES.values()} | {"tf32", "fp16", "bf16", "x", ""})
    rows = [(d, r) for d in [*dtypes, None] for r in ("matrix", "vector", "memory", "x", None)]
    df = pl.DataFrame(rows, schema={"dtype": pl.String, "roof": pl.String}, orient="row")
    for spec in (*DEVICES, None):
        ran = count_queries(monkeypatch)
        peak, peak_ok, tf32, tf32_ok = _peaks(df, spec)
        assert len(ran) == (0 if spec is None else 1)
        monkeypatch.undo()
        want_peak = [spec.peak(d, r) if spec is not None and d else None for d, r in rows]
        want_tf32 = [
            spec.peak("tf32", r) if spec is not None and d == "fp32" and r == "matrix" else None
            for d, r in rows
        ]
        got_peak = [float(v) if ok else None for v, ok in zip(peak, peak_ok, strict=True)]
        got_tf32 = [float(v) if ok else None for v, ok in zip(tf32, tf32_ok, strict=True)]
        assert got_peak == want_peak, spec
        assert got_tf32 == want_tf32, spec


def test_starts_with_equals_polars_without_a_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """The derived-cost mask from two comparisons equals ``str.starts_with`` (nulls False) on
    the prefix itself, its neighbours in sort order, longer and non-ASCII strings and nulls,
    and runs no query (a spy on the engine)."""
    from helpers.spies import count_queries
    from opscope.analysis.roofline import _starts_with

    vals = [
        "backward: 2 x forward (mm: 2*M*N*K)", "backward:", "backward: ", "backward:!",
        "backward:  x", "backwards", "Backward: x", "", "unknown", "backward:\x7f",
        "backward: é", "backward:\u00a0x", "b", None,
    ]  # fmt: skip
    for series in (pl.Series(vals, dtype=pl.String), pl.Series(vals[:-1], dtype=pl.String)):
        want = series.str.starts_with("backward: ").fill_null(False).to_numpy()
        ran = count_queries(monkeypatch)
        got = _starts_with(series, "backward: ")
        assert got.tolist() == want.tolist()
        assert ran == ([1] if series.null_count() else [])  # a fill_null only with a null
        monkeypatch.undo()
