"""`opscope verify` measures conv-efficiency and elementwise-bandwidth findings from their
evidence (shape, dtype) with real torch on the CPU: the numbers it reports are the medians of
timed runs of the original and the fix, and the saving is reported both estimated and measured.
No assertion on speed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

import torch

import opscope
from helpers import planted
from opscope.advise import _bench as b
from opscope.advise import advise
from opscope.advise import verify as verify_mod
from opscope.advise.finding import Finding
from opscope.advise.verify import derived_bench, verify, verify_finding

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture
def timed(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, b.Timing]]:
    """Every result of the real ``time_variants`` (the runs verify measured)."""
    seen: list[dict[str, b.Timing]] = []
    real = b.time_variants

    def spy(fns: Any, device: str, budget_s: float) -> dict[str, b.Timing]:
        out = real(fns, device, budget_s)
        seen.append(out)
        return out

    monkeypatch.setattr(b, "time_variants", spy)
    return seen


def _f(rule: str, shapes: str, ops: list[str], *, per_step: float = 30.0) -> Finding:
    return Finding(
        id="0123456789ab",
        rule=rule,
        severity="medium",
        title="t",
        evidence={
            "operators": ops,
            "shapes": [shapes],
            "dtypes": ["fp32"],
            "calls": 6,
            "figures": {"time_us_per_step": per_step},
        },
        saving_us=12.5,
    )


def test_depthwise_conv_nchw_vs_channels_last(timed: list[dict[str, b.Timing]]) -> None:
    f = _f("conv-efficiency", "[[2,16,14,14],[16,1,3,3],[],[],[],[],[]]", ["aten::conv2d"])
    spec = derived_bench(f)
    assert spec == {
        "op": "conv",
        "x": [2, 16, 14, 14],
        "w": [16, 1, 3, 3],
        "dtype": "float32",
        "fix": "channels_last",
    }
    v = verify_finding(f, "cpu", budget_s=0.2)
    ver = v.verification or {}
    assert ver["status"] == "measured" and ver["device"] == "cpu"
    assert ver["input"] == [2, 16, 14, 14] and ver["weight"] == [16, 1, 3, 3]
    (t,) = timed
    assert ver["original_us"] == pytest.approx(t["original"].median_ns / 1e3)
    assert ver["fix_us"] == pytest.approx(t["fix"].median_ns / 1e3)
    assert ver["repeats"] == len(t["original"].samples_ns) >= b.MIN_REPEATS
    speedup = t["original"].median_ns / t["fix"].median_ns
    assert v.verified_speedup == pytest.approx(speedup)
    assert ver["estimated_saving_us"] == 12.5
    assert ver["measured_saving_us"] == pytest.approx(max(30.0 * (1 - 1 / speedup), 0.0))
    assert "saving estimated 12.5 µs/step, measured" in ver["summary"]


def test_conv_the_weight_cannot_split_into_groups_is_skipped() -> None:
    f = _f("conv-efficiency", "[[2,16,14,14],[16,5,3,3]]", ["aten::conv2d"])
    ver = verify_finding(f, "cpu", budget_s=0.1).verification or {}
    assert ver["status"] == "skipped" and "groups" in ver["summary"]


def test_elementwise_against_the_trace_on_the_same_kind_of_device(
    timed: list[dict[str, b.Timing]],
) -> None:
    """A CPU trace's mul verified on the CPU: the trace's per-call time (30 µs/step x 3 steps /
    6 calls = 15 µs) against the faster of eager and compiled here."""
    f = _f("elementwise-bandwidth", "[[64,128],[64,128]]", ["aten::mul"])
    v = verify_finding(f, "cpu", budget_s=0.2, trace={"kind": "cpu", "steps": 3})
    ver = v.verification or {}
    assert ver["status"] == "measured", ver
    (t,) = timed
    assert ver["baseline"] == "trace"
    assert ver["trace_us_per_call"] == pytest.approx(15.0)
    assert ver["original_us"] == pytest.approx(15.0)
    eager = t["original"].median_ns
    assert ver["eager_us"] == pytest.approx(eager / 1e3)
    best = eager
    if "compile_error" not in ver:
        best = min(eager, t["fix"].median_ns)
        assert ver["compiled_us"] == pytest.approx(t["fix"].median_ns / 1e3)
    assert ver["fix_us"] == pytest.approx(best / 1e3)
    # 64*128 fp32 read twice and written once
    assert ver["bytes_per_call"] == 3 * 64 * 128 * 4
    assert ver["eager_gbps"] == pytest.approx(ver["bytes_per_call"] / eager)
    assert v.verified_speedup == pytest.approx(15e3 / best)
    assert ver["measured_saving_us"] == pytest.approx(max(30.0 * (1 - best / 15e3), 0.0))


def test_elementwise_on_another_kind_of_device_is_eager_vs_compiled(
    timed: list[dict[str, b.Timing]],
) -> None:
    f = _f("elementwise-bandwidth", "[[64,128],[]]", ["aten::div"])
    v = verify_finding(f, "cpu", budget_s=0.2, trace={"kind": "nvidia", "steps": 3})
    ver = v.verification or {}
    if ver["status"] == "skipped":  # no C++ compiler for torch.compile here
        assert "torch.compile" in ver["summary"] and timed == []
        return
    (t,) = timed
    assert ver["baseline"] == "eager"
    assert ver["original_us"] == pytest.approx(t["original"].median_ns / 1e3)
    assert ver["fix_us"] == pytest.approx(t["fix"].median_ns / 1e3)


def test_unknown_elementwise_op_is_skipped_not_guessed() -> None:
    f = _f("elementwise-bandwidth", "[[64,128]]", ["aten::frobnicate"])
    ver = verify_finding(f, "cpu", budget_s=0.1).verification or {}
    assert ver["status"] == "skipped" and "aten::frobnicate" in ver["summary"]


def test_planted_elementwise_trace_verified_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, timed: list[dict[str, b.Timing]]
) -> None:
    """advise then verify on a planted (GPU) trace on the CPU: the mul is measured, eager vs
    compiled (the trace is not a CPU trace). The planted 8192² shape is too large for a CPU
    run, so the shape is shrunk through the CPU byte limit: it is then refused, and with a
    higher limit measured."""
    path, _ = planted.write("elementwise", tmp_path, clean_work=False)
    profile = opscope.load(path)
    found = advise(profile)
    (f,) = found.by_rule("elementwise-bandwidth")
    out = verify(profile, found, device="cpu", budget_s=0.2).by_rule("elementwise-bandwidth")
    ver = out[0].verification or {}
    assert ver["status"] == "skipped" and "too large for a CPU" in ver["summary"]
    assert timed == []
    spec = derived_bench(f)
    assert spec is not None and spec["shapes"] == [[8192, 8192], [8192, 8192]]
    monkeypatch.setattr(
        verify_mod, "derived_bench", lambda _f, _s=None: {**spec, "shapes": [[32, 32]] * 2}
    )
    out = verify(profile, found, device="cpu", budget_s=0.2).by_rule("elementwise-bandwidth")
    ver = out[0].verification or {}
    assert ver["status"] in ("measured", "skipped")
    if ver["status"] == "measured":
        assert ver["baseline"] == "eager" and len(timed) == 1
        assert ver["estimated_saving_us"] == f.saving_us
    json.dumps(out[0].to_json())  # JSON-ready


def _g(rule: str, title: str, ops: list[str], shapes: str, calls: int, **figs: Any) -> Finding:
    return Finding(
        id="fedcba987654", rule=rule, severity="medium", title=title,
        evidence={"operators": ops, "shapes": [shapes], "dtypes": ["fp32"], "calls": calls,
                  "figures": {"time_us_per_step": 40.0, **figs}},
        saving_us=10.0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("title", "q", "fix", "ratio"),
    [
        ("aten::scaled_dot_product_attention (L=16, d=40): head dim 40 runs the 64 kernel",
         [1, 2, 16, 40], "headdim:64", 64 / 40),
        ("aten::scaled_dot_product_attention (L=8, d=32): sequence 8: 3.0 µs per call, "
         "launch-bound", [1, 2, 8, 32], "batch:5", 5.0),
    ],
)  # fmt: skip
def test_attention_efficiency_compared_by_rate(
    title: str, q: list[int], fix: str, ratio: float, timed: list[dict[str, b.Timing]]
) -> None:
    """Head-dim padding: SDPA at the kernel's own step vs at the model's d; short calls: 5 per
    step (15 calls, 3 steps) packed into one. The fix does `ratio` times the work, so its time
    is taken per the original's work: speedup = ratio of rates from the timed runs."""
    f = _g("attention-efficiency", title, ["aten::scaled_dot_product_attention"],
           json.dumps([q, q, q]), 15)  # fmt: skip
    v = verify_finding(f, "cpu", budget_s=0.2, trace={"kind": "nvidia", "steps": 3})
    ver = v.verification or {}
    assert ver["status"] == "measured" and ver["fix"] == fix
    assert ver["work_ratio"] == pytest.approx(ratio)
    (t,) = timed
    assert ver["original_us"] == pytest.approx(t["original"].median_ns / 1e3)
    assert ver["fix_us"] == pytest.approx(t["fix"].median_ns / ratio / 1e3)
    assert v.verified_speedup == pytest.approx(t["original"].median_ns * ratio / t["fix"].median_ns)
    assert "(rate)" in ver["summary"]


def test_gemm_wave_compared_by_rate(timed: list[dict[str, b.Timing]]) -> None:
    """7 x 19 = 133 tiles of 128 on 132 SMs: one tile in the last wave; N less one tile (2304)
    makes one whole wave. The rate of each shape from the timed runs gives the speedup."""
    f = _g("gemm-tiles", "GEMM 896x2432x64: 1.01 waves", ["aten::mm"],
           "[[896,64],[64,2432]]", 3, tiles=133, sms=132, waves=1.008)  # fmt: skip
    assert derived_bench(f) == {
        "op": "matmul", "m": 896, "k": 64, "n": 2432, "dtype": "float32", "fix": "wave",
        "padded_shape": [896, 64, 2304], "compare": "rate",
    }  # fmt: skip
    ver = verify_finding(f, "cpu", budget_s=0.2).verification or {}
    assert ver["status"] == "measured" and ver["fix_shape"] == [896, 64, 2304]
    (t,) = timed
    ratio = 2304 / 2432
    assert ver["work_ratio"] == pytest.approx(ratio)
    assert ver["fix_us"] == pytest.approx(t["fix"].median_ns / ratio / 1e3)
    assert ver["original_us"] == pytest.approx(t["original"].median_ns / 1e3)


def test_gemm_few_tiles_keeps_its_split_k_bench_and_one_wave_gets_none() -> None:
    f = _g("gemm-tiles", "GEMM", ["aten::mm"], "[[128,64],[64,128]]", 3, tiles=1, sms=132)
    assert derived_bench(f) is None  # fewer tiles than SMs: no wave to fill
